//go:build cgo && ort

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ortserve/ortserve/runtime"
)

// Overload bounds (acceptance 2 of the serving-core issue): small on purpose, so that a few
// seconds of load from 256 senders is far above what they admit.
const (
	overloadQueue    = 16 // --max-queue-requests
	overloadInFlight = 64 // --max-in-flight
	overloadBatch    = 32 // --max-batch (the default)
	overloadDelay    = 5 * time.Millisecond
	overloadSenders  = 256
	overloadBurst    = 3 * time.Second
)

// Offered load far above capacity: the excess gets 429 + Retry-After, no 5xx, admitted
// requests keep a bounded p99, memory stays flat, and the queue gauge returns to 0 after.
//
// The server runs in a child process so that its memory is its own (VmRSS), on MiniLM int8
// (the fastest version: more batches in the time). 256 closed-loop senders, each sending one
// sentence per request and the next as soon as an answer comes, 429s included, offer two
// bursts of 3 s.
func TestOverload(t *testing.T) {
	// Not parallel. Its bound is in the server's own batch time and 429 round trip, as
	// measured, but beside the parallel tests those moved within the run: twice in a warm
	// make test on 2026-12-03 the admitted p99 came out over it (2.65 s against 2.39 s, with
	// the tests' calibration then at 50ms; 1.35 s against 1.13 s, batch p99 383 ms in the
	// first burst and 237 ms in the second).
	srv := startChild(t, "--models", versionRepo(t, "minilm", "int8"), "--device", "cpu",
		"--max-queue-requests", strconv.Itoa(overloadQueue), "--max-in-flight", strconv.Itoa(overloadInFlight),
		"--max-batch", strconv.Itoa(overloadBatch), "--max-queue-delay", overloadDelay.String())
	idle := srv.rss(t)
	first := offerLoad(t, srv.url, overloadSenders, overloadBurst)
	rss1 := srv.rss(t)
	second := offerLoad(t, srv.url, overloadSenders, overloadBurst)
	rss2 := srv.rss(t)

	for i, r := range []burst{first, second} {
		t.Logf("burst %d: %s", i+1, r)
		if r.codes[http.StatusOK] == 0 || r.codes[http.StatusTooManyRequests] == 0 {
			t.Errorf("burst %d: %v: want both 200s and 429s (is the load above capacity?)", i+1, r.codes)
		}
		for code, n := range r.codes {
			if code != http.StatusOK && code != http.StatusTooManyRequests {
				t.Errorf("burst %d: %d answers with status %d; want only 200 and 429", i+1, n, code)
			}
		}
		if r.noRetryAfter > 0 {
			t.Errorf("burst %d: %d 429s without Retry-After", i+1, r.noRetryAfter)
		}
		if r.errs > 0 {
			t.Errorf("burst %d: %d requests failed without an answer, first: %v", i+1, r.errs, r.firstErr)
		}
		// An admitted request waits behind at most the queue's requests (one text each:
		// ⌈queue/max batch⌉ batches) and one running batch for a free session, runs in its
		// own batch, and may wait the batching window first. Batch time is the server's own
		// under this load (x-inference-time, p99); the rest of a request (HTTP and JSON on two
		// cores shared with 256 senders, under the race detector) is bounded by the p99 round
		// trip of a 429, which is all of it but the queue and the batch. An unbounded queue
		// would instead grow the latency with the length of the burst.
		batches := time.Duration(math.Ceil(float64(overloadQueue)/float64(overloadBatch))) + 2
		bound := batches*r.batchP99 + overloadDelay + r.rejectP99
		if p99 := r.p99(); p99 > bound {
			t.Errorf("burst %d: admitted p99 %v over the bound %v = %d batches × p99 batch time %v + %v window + p99 429 round trip %v",
				i+1, p99, bound, batches, r.batchP99, overloadDelay, r.rejectP99)
		}
	}
	t.Logf("VmRSS: idle %d MiB, after burst 1 %d MiB, after burst 2 %d MiB", idle>>20, rss1>>20, rss2>>20)
	// Flat: the second burst, as large as the first, leaves no more than a little more
	// resident (the allocator keeps what it has; it must not keep what the excess offered).
	if limit := rss1 + rss1/4; rss2 > limit {
		t.Errorf("VmRSS grew from %d MiB after the first burst to %d MiB after the second (limit %d MiB)", rss1>>20, rss2>>20, limit>>20)
	}
	// The gauges return to 0 once the answers are out (the in-flight gauge drops just after
	// the response is written, so poll briefly).
	gauges := []string{
		`ortserve_queue_requests{model="minilm",version="int8"}`,
		`ortserve_requests_in_flight`,
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		vals := metricValues(t, srv.url, gauges...)
		if vals[0] == 0 && vals[1] == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("after the load: %s = %v, %s = %v; want 0", gauges[0], vals[0], gauges[1], vals[1])
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	srv.stop(t)
}

// burst is what one offerLoad saw.
type burst struct {
	codes        map[int]int
	noRetryAfter int             // 429s without Retry-After
	admitted     []time.Duration // latency of each 200, client side
	batchP99     time.Duration   // p99 of the 200s' x-inference-time
	rejectP99    time.Duration   // p99 latency of the 429s, client side
	errs         int
	firstErr     error
}

func (b burst) p99() time.Duration { return quantile(b.admitted, 0.99) }

func (b burst) String() string {
	sent := 0
	for _, n := range b.codes {
		sent += n
	}
	return fmt.Sprintf("%d requests (%.0f/s): %v; admitted p50 %v, p99 %v, max %v; batch p99 %v; 429 p99 %v",
		sent+b.errs, float64(sent+b.errs)/overloadBurst.Seconds(), b.codes,
		quantile(b.admitted, 0.5).Round(time.Millisecond), b.p99().Round(time.Millisecond),
		quantile(b.admitted, 1).Round(time.Millisecond), b.batchP99.Round(time.Millisecond), b.rejectP99.Round(time.Millisecond))
}

// quantile is the q-quantile of ds (nearest rank); 0 for none.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(ds))
	return s[min(len(s)-1, max(0, int(math.Ceil(q*float64(len(s))))-1))]
}

// offerLoad runs senders closed-loop clients against url's /embed (minilm int8, one sentence
// per request) for d, and then waits for the answers still due.
func offerLoad(t *testing.T, url string, senders int, d time.Duration) burst {
	t.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: senders}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: time.Minute}
	bodies := make([][]byte, len(benchSentences))
	for i, s := range benchSentences {
		bodies[i], _ = json.Marshal(map[string]any{"inputs": s, "version": "int8"})
	}
	var (
		mu  sync.Mutex
		res = burst{codes: map[int]int{}}
		inf []time.Duration
		rej []time.Duration
		wg  sync.WaitGroup
	)
	end := time.Now().Add(d)
	for c := range senders {
		wg.Go(func() {
			for i := c; time.Now().Before(end); i++ {
				start := time.Now()
				code, h, err := postEmbed(client, url, bodies[i%len(bodies)])
				if err != nil {
					mu.Lock()
					if res.errs++; res.firstErr == nil {
						res.firstErr = err
					}
					mu.Unlock()
					continue
				}
				lat := time.Since(start)
				mu.Lock()
				res.codes[code]++
				switch code {
				case http.StatusOK:
					res.admitted = append(res.admitted, lat)
					inf = append(inf, headerMs(h, "x-inference-time"))
				case http.StatusTooManyRequests:
					rej = append(rej, lat)
					if h.Get("Retry-After") == "" {
						res.noRetryAfter++
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	res.batchP99, res.rejectP99 = quantile(inf, 0.99), quantile(rej, 0.99)
	return res
}

// postEmbed posts body to url's /embed and reads the answer to its end: its status and
// headers.
func postEmbed(client *http.Client, url string, body []byte) (int, http.Header, error) {
	resp, err := client.Post(url+"/embed", "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header, nil
}

// headerMs is a timing header's milliseconds as a duration; 0 when absent.
func headerMs(h http.Header, name string) time.Duration {
	ms, _ := strconv.ParseFloat(h.Get(name), 64)
	return time.Duration(ms * float64(time.Millisecond))
}

// child is a `server serve` running in a child process.
type child struct {
	cmd    *exec.Cmd
	url    string
	stderr *bytes.Buffer
	done   chan error
}

// startChild runs `server serve --addr 127.0.0.1:0 args...` in a child process (the test
// binary itself: one ONNX Runtime environment per process) and waits until it listens. It is
// killed when the test ends unless stop ran.
func startChild(t *testing.T, args ...string) *child {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	cmd := exec.CommandContext(ctx, os.Args[0], append([]string{"serve", "--addr", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(os.Environ(), "ORTSERVE_TEST_EXEC=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, stderr: &bytes.Buffer{}, done: make(chan error, 1)}
	cmd.Stderr = c.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.done <- cmd.Wait() }()
	t.Cleanup(func() {
		cancel() // kills the child if stop did not run
		<-c.done
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.Contains(line, "http://") {
		cancel()
		<-c.done
		t.Fatalf("server did not start: %v\n%s", err, c.stderr.String())
	}
	go io.Copy(io.Discard, stdout)
	c.url = strings.TrimSpace(line[strings.Index(line, "http://"):])
	return c
}

// rss is the child's resident memory (VmRSS) in bytes.
func (c *child) rss(t *testing.T) int64 {
	t.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", c.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^VmRSS:\s+(\d+) kB$`).FindSubmatch(status)
	if m == nil {
		t.Fatalf("no VmRSS in /proc/%d/status", c.cmd.Process.Pid)
	}
	kb, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return kb << 10
}

// stop sends SIGTERM and expects a clean exit.
func (c *child) stop(t *testing.T) {
	t.Helper()
	c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-c.done:
		if err != nil {
			t.Errorf("server exit: %v\n%s", err, c.stderr.String())
		}
		c.done <- err // for the cleanup
	case <-time.After(time.Minute):
		t.Errorf("server did not stop within a minute of SIGTERM")
	}
}

// metricValues reads the values of the named series (name and labels as /metrics writes
// them) from url's /metrics; a missing series fails the test.
func metricValues(t *testing.T, url string, series ...string) []float64 {
	t.Helper()
	text := get(t, url+"/metrics")
	vals := make([]float64, len(series))
	for i, s := range series {
		m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(s) + ` (\S+)$`).FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("no %s in /metrics", s)
		}
		vals[i], _ = strconv.ParseFloat(m[1], 64)
	}
	return vals
}

// Overload under an SLO (issue 11's time-bounded admission): open-loop arrivals at 3× the
// capacity the server's own cost model gives, on MiniLM fp32 with `--slo p95=100ms` and
// otherwise default settings. The excess gets 429 with a Retry-After computed from the
// prediction, nothing gets a 5xx, and the admitted requests' p99, as the server times them
// (x-total-time: from the handler's start to the result) after a second of warm-up, stays
// within twice the SLO.
// Client-side latency is logged, not asserted: here the load generator, under the race
// detector, shares the two cores with the server, so what it adds is its own.
func TestOverloadSLO(t *testing.T) {
	const slo = 100 * time.Millisecond
	srv := startChild(t, "--models", versionRepo(t, "minilm", "fp32"), "--device", "cpu", "--slo", "p95="+slo.String())
	var info struct {
		Models []struct {
			Scheduling map[string]runtime.SchedulerState `json:"scheduling"`
		} `json:"models"`
	}
	if err := json.Unmarshal([]byte(get(t, srv.url+"/info")), &info); err != nil || len(info.Models) != 1 {
		t.Fatalf("/info: %v", err)
	}
	st := info.Models[0].Scheduling["fp32"]
	if st.SLO == nil || st.SLO.TargetP95Ms != 100 || len(st.Cost.Curve) == 0 {
		t.Fatalf("/info shows no SLO controller or cost curve for fp32: %+v", st)
	}
	capacity := float64(st.Sessions) * 1e3 / st.Cost.Curve[0].Ms // batch of 1, 16 tokens
	rate := 3 * capacity
	bodies := make([][]byte, len(benchSentences))
	for i, s := range benchSentences {
		bodies[i], _ = json.Marshal(map[string]any{"inputs": s, "version": "fp32"})
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 512}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: time.Minute}
	var (
		mu                        sync.Mutex
		codes                     = map[int]int{}
		server, clientLat         []time.Duration
		noRetryAfter, errs, extra int
		wg                        sync.WaitGroup
	)
	sem := make(chan struct{}, 1024) // the generator's own bound on requests outstanding
	start := time.Now()
	for i := 0; ; i++ {
		at := start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
		if at.Sub(start) > overloadBurst {
			break
		}
		time.Sleep(time.Until(at))
		select {
		case sem <- struct{}{}:
		default:
			extra++ // the generator is behind: count it, don't pile up
			continue
		}
		wg.Go(func() {
			defer func() { <-sem }()
			code, h, err := postEmbed(client, srv.url, bodies[i%len(bodies)])
			lat := time.Since(at)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs++
				return
			}
			codes[code]++
			switch code {
			case http.StatusOK:
				// As bench does, the first second is warm-up: the controller's first
				// window, while its budget finds the load.
				if at.Sub(start) >= time.Second {
					server = append(server, headerMs(h, "x-total-time"))
					clientLat = append(clientLat, lat)
				}
			case http.StatusTooManyRequests:
				if h.Get("Retry-After") == "" || h.Get("Retry-After-Ms") == "" {
					noRetryAfter++
				}
			}
		})
	}
	wg.Wait()
	t.Logf("offered %.0f/s (3 × %.0f) for %v: %v, %d not sent (generator behind); admitted p50/p99 server %v/%v, client %v/%v",
		rate, capacity, overloadBurst, codes, extra, quantile(server, 0.5).Round(time.Millisecond), quantile(server, 0.99).Round(time.Millisecond),
		quantile(clientLat, 0.5).Round(time.Millisecond), quantile(clientLat, 0.99).Round(time.Millisecond))
	for code, n := range codes {
		if code != http.StatusOK && code != http.StatusTooManyRequests {
			t.Errorf("%d answers with status %d; want only 200 and 429", n, code)
		}
	}
	if codes[http.StatusOK] == 0 || codes[http.StatusTooManyRequests] == 0 || errs > 0 || noRetryAfter > 0 {
		t.Errorf("codes %v, %d transport errors, %d 429s without Retry-After and Retry-After-Ms", codes, errs, noRetryAfter)
	}
	if p99 := quantile(server, 0.99); p99 > 2*slo {
		t.Errorf("admitted p99 %v (server side), over twice the SLO %v", p99, slo)
	}
	if v := metricValues(t, srv.url, `ortserve_admission_refused_total{model="minilm",reason="slo",version="fp32"}`); v[0] == 0 {
		t.Errorf("no refusal counted for the SLO")
	}
	// Closed first: a connection dialed and never sent on would hold the server's
	// shutdown for 5 s (net/http waits that long for a new connection's first request).
	tr.CloseIdleConnections()
	srv.stop(t)
}
