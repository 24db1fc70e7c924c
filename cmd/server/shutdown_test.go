//go:build cgo && ort

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// SIGTERM while requests are in flight: every request the server admitted gets its full
// answer, and the process exits 0.
func TestSIGTERMFinishesRequestsInFlight(t *testing.T) {
	t.Parallel() // it measures no time: what was admitted is answered, however long it takes
	const clients = 8
	c := startChild(t, "--device", "cpu", "--grace", "60s", "--models", versionRepo(t, "minilm", "fp32"), "--sessions", "1", "--reload-interval", "0s")

	// Each client one request of 8 long texts: together a few seconds of CPU work.
	body := `{"inputs": [` + strings.TrimSuffix(strings.Repeat(`"`+strings.Repeat("the server keeps working while it drains ", 12)+`",`, 8), ",") + `]}`
	var wg sync.WaitGroup
	var answered atomic.Int32
	codes := make(chan int, clients)
	for range clients {
		wg.Go(func() {
			defer answered.Add(1)
			resp, err := oneShot().Post(c.url+"/embed", "application/json", strings.NewReader(body))
			if err != nil {
				t.Errorf("an admitted request failed: %v", err)
				return
			}
			defer resp.Body.Close()
			var buf bytes.Buffer
			buf.ReadFrom(resp.Body)
			if resp.StatusCode == 200 && !bytes.HasSuffix(bytes.TrimSpace(buf.Bytes()), []byte("]]")) {
				t.Errorf("truncated answer: %d bytes", buf.Len())
			}
			codes <- resp.StatusCode
		})
	}
	// Every request admitted before the signal (the server counts one in flight once its
	// body is read), and some still in flight.
	v := waitMetrics(t, c, []string{"ortserve_requests_in_flight"}, func(v []float64) bool {
		return int(v[0])+int(answered.Load()) == clients && v[0] > 0
	})
	c.cmd.Process.Signal(syscall.SIGTERM)
	wg.Wait()
	close(codes)
	ok := 0
	for code := range codes {
		if code != 200 {
			t.Errorf("an admitted request got %d", code)
			continue
		}
		ok++
	}
	exit := <-c.done
	c.done <- exit // for the cleanup
	if exit != nil {
		t.Errorf("exit: %v\n%s", exit, c.stderr)
	}
	t.Logf("%v requests in flight at SIGTERM, %d of %d answered 200", v[0], ok, clients)
}

// waitMetrics polls c's /metrics until the values of series satisfy cond, and returns them;
// it fails the test if that takes over 30 s. The condition is the signal: the poll only
// spaces out the reads.
func waitMetrics(t *testing.T, c *child, series []string, cond func([]float64) bool) []float64 {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		v := metricValues(t, c.url, series...)
		if cond(v) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v = %v after 30 s: the load never reached the state the test needs\n%s", series, v, c.stderr)
		}
	}
}

// oneShot is a client whose every request opens its own connection: an error is about that
// request alone, never about a kept-alive connection that the server closed meanwhile.
func oneShot() *http.Client {
	return &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: time.Minute}
}

// SIGTERM with a queue far longer than --grace can serve: the process exits 0 within the
// grace (+1 s), and every request admitted gets an answer, 200 (served) or 503 (still
// queued when the grace ran out), never a reset or EOF.
func TestSIGTERMAnswersTheQueueWithinGrace(t *testing.T) {
	const (
		clients = 150
		grace   = 2 * time.Second
	)
	// One session of one thread, one text per batch: each request is a batch of its own,
	// tens of milliseconds of CPU, so that 150 of them queue for seconds.
	c := startChild(t, "--models", versionRepo(t, "minilm", "fp32"), "--device", "cpu", "--sessions", "1", "--threads", "1", "--max-batch", "1",
		"--grace", grace.String(), "--reload-interval", "0s")
	body := `{"inputs": ["` + strings.Repeat("a long text keeps the only session busy for a while ", 20) + `"]}`

	type result struct {
		code int
		body string
		err  error
	}
	results := make(chan result, clients)
	var answered atomic.Int32
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			defer answered.Add(1)
			resp, err := oneShot().Post(c.url+"/embed", "application/json", strings.NewReader(body))
			if err != nil {
				results <- result{err: err}
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			results <- result{code: resp.StatusCode, body: string(b), err: err}
		})
	}
	// Every request admitted (in flight, or answered already), and 100 or more in the
	// queue, before the signal: a client refused at connect would prove nothing, and counts
	// as a failure below.
	v := waitMetrics(t, c, []string{`ortserve_queue_requests{model="minilm",version="fp32"}`, "ortserve_requests_in_flight"}, func(v []float64) bool {
		return int(v[1])+int(answered.Load()) == clients && v[0] >= 100
	})
	queued, inFlight := v[0], v[1]
	start := time.Now()
	c.cmd.Process.Signal(syscall.SIGTERM)
	exit := <-c.done
	c.done <- exit // for the cleanup
	took := time.Since(start)
	wg.Wait()
	close(results)

	counts := map[int]int{}
	for r := range results {
		switch {
		case r.err != nil:
			t.Errorf("an admitted request failed: %v", r.err)
		case r.code == 503 && !strings.Contains(r.body, "shutting down"):
			t.Errorf("503 without saying why: %s", r.body)
		case r.code != 200 && r.code != 503:
			t.Errorf("an admitted request got %d: %s", r.code, r.body)
		}
		counts[r.code]++
	}
	if exit != nil {
		t.Errorf("exit: %v\n%s", exit, c.stderr)
	}
	if took > grace+time.Second {
		t.Errorf("exited %v after SIGTERM, past the grace of %v + 1 s", took, grace)
	}
	if counts[503] == 0 {
		t.Error("no request was answered 503: the queue did not outlast the grace, and the test proves nothing")
	}
	t.Logf("SIGTERM with %v queued (%v in flight): exit 0 after %v; %d answered 200, %d answered 503", queued, inFlight, took.Round(time.Millisecond), counts[200], counts[503])
}

// During --drain-delay, readiness says 503 while inference is still served (with
// Connection: close), and new connections are still accepted; the process exits once the
// delay is over, within the grace. The delay is long enough for a handful of requests on a
// busy machine, beside the other parallel tests.
func TestDrainDelayKeepsServing(t *testing.T) {
	t.Parallel()
	const drain, grace = 3 * time.Second, 6 * time.Second
	c := startChild(t, "--models", versionRepo(t, "minilm", "fp32"), "--device", "cpu", "--drain-delay", drain.String(), "--grace", grace.String(), "--reload-interval", "0s")
	get := func(path string) (int, error) {
		resp, err := oneShot().Get(c.url + path)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	if code, err := get("/health"); code != 200 {
		t.Fatalf("/health before SIGTERM: %d %v", code, err)
	}
	start := time.Now()
	c.cmd.Process.Signal(syscall.SIGTERM)
	for code, err := get("/health"); code != 503; code, err = get("/health") {
		if err != nil || time.Since(start) > drain/2 {
			t.Fatalf("/health after SIGTERM: %d %v, want 503 at once", code, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if code, err := get("/v2/health/ready"); code != 503 {
		t.Errorf("/v2/health/ready during the drain delay: %d %v, want 503", code, err)
	}
	if code, err := get("/v2/health/live"); code != 200 {
		t.Errorf("/v2/health/live during the drain delay: %d %v, want 200: the process is alive", code, err)
	}
	for i := range 3 {
		resp, err := oneShot().Post(c.url+"/embed", "application/json", strings.NewReader(`{"inputs": "still served"}`))
		if err != nil {
			t.Fatalf("/embed %d during the drain delay: %v", i, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || !resp.Close {
			t.Errorf("/embed %d during the drain delay: %d (Connection: close %v), want 200 with Connection: close", i, resp.StatusCode, resp.Close)
		}
	}
	if since := time.Since(start); since >= drain {
		t.Errorf("the checks took %v, past the drain delay: they prove nothing", since)
	}
	exit := <-c.done
	c.done <- exit // for the cleanup
	took := time.Since(start)
	if exit != nil {
		t.Errorf("exit: %v\n%s", exit, c.stderr)
	}
	if took < drain || took > grace+time.Second {
		t.Errorf("exited %v after SIGTERM, want after the drain delay (%v) and within the grace (%v) + 1 s", took, drain, grace)
	}
	if _, err := get("/health"); err == nil {
		t.Error("still accepting connections after exit")
	} else if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Logf("after exit: %v", err)
	}
	t.Logf("drain delay %v, grace %v: exit 0 after %v", drain, grace, took.Round(time.Millisecond))
}

// SIGTERM while keep-alive clients send at 0.7× capacity, the signal sent the moment a burst
// of requests has been written on connections that were idle: no request written before the
// signal gets a transport error. http.Server.Shutdown alone closes such a connection under
// its unread request, so serve reads on for server.MinDrain first. It checks no time: the
// rate only shapes the load, whatever the machine.
func TestSIGTERMKeepAliveClients(t *testing.T) {
	t.Parallel()
	c := startChild(t, "--models", versionRepo(t, "minilm", "int8"), "--device", "cpu", "--grace", "30s", "--reload-interval", "0s")
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: time.Minute}
	bodies := make([][]byte, len(benchSentences))
	for i, s := range benchSentences {
		bodies[i], _ = json.Marshal(map[string]any{"inputs": s})
	}

	// Capacity: what 8 closed-loop senders get through in a second.
	var done atomic.Int64
	var wg sync.WaitGroup
	end := time.Now().Add(time.Second)
	for s := range 8 {
		wg.Go(func() {
			for i := s; time.Now().Before(end); i++ {
				if code, _, err := postEmbed(client, c.url, bodies[i%len(bodies)]); err != nil || code != 200 {
					t.Errorf("calibration: %d %v", code, err)
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	rate := 0.7 * float64(done.Load())

	// Open-loop arrivals at rate for 2 s. After the first second, a burst of as many requests
	// as there are connections left idle by the calibration, and SIGTERM the moment the last
	// of them has been written: some are then still unread in the server's socket buffers.
	type result struct {
		wrote, answered time.Time
		code            int
		close           bool
		err             error
	}
	const burst = 8
	var (
		mu         sync.Mutex
		results    []result
		sigOnce    sync.Once
		sigAt      time.Time
		burstWrote atomic.Int32
	)
	signal := func() {
		sigOnce.Do(func() {
			mu.Lock()
			sigAt = time.Now()
			mu.Unlock()
			c.cmd.Process.Signal(syscall.SIGTERM)
		})
	}
	send := func(body []byte, wrote func()) {
		var r result
		var first atomic.Int64 // the hook runs on the transport's goroutine
		trace := &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) {
			if first.CompareAndSwap(0, time.Now().UnixNano()) { // the first write: the transport may retry
				wrote()
			}
		}}
		req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(t.Context(), trace), "POST", c.url+"/embed", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			r.code, r.close = resp.StatusCode, resp.Close
		}
		r.answered, r.err = time.Now(), err
		if ns := first.Load(); ns != 0 {
			r.wrote = time.Unix(0, ns)
		}
		mu.Lock()
		results = append(results, r)
		mu.Unlock()
	}
	start := time.Now()
	burstAt := start.Add(time.Second)
	for i := 0; ; i++ {
		at := start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
		if at.Sub(start) > 2*time.Second {
			break
		}
		if at.After(burstAt) && burstAt.After(start) {
			burstAt = start // once
			for k := range burst {
				wg.Go(func() {
					send(bodies[k], func() {
						if burstWrote.Add(1) == burst {
							signal()
						}
					})
				})
			}
		}
		time.Sleep(time.Until(at)) // the arrival schedule, not a wait for anything
		wg.Go(func() { send(bodies[i%len(bodies)], func() {}) })
	}
	wg.Wait()
	signal() // if the burst never was all written: the child stops, and the test fails below
	mu.Lock()
	defer mu.Unlock()
	exit := <-c.done
	c.done <- exit // for the cleanup
	if n := burstWrote.Load(); n != burst {
		t.Fatalf("%d of the %d requests of the burst were written", n, burst)
	}
	if exit != nil {
		t.Errorf("exit: %v\n%s", exit, c.stderr)
	}
	var before, inFlight, after, afterFailed, closes int
	for _, r := range results {
		if r.wrote.IsZero() || !r.wrote.Before(sigAt) {
			after++
			afterFailed += b2i(r.err != nil)
			closes += b2i(r.close)
			continue
		}
		before++
		inFlight += b2i(r.answered.After(sigAt))
		closes += b2i(r.close)
		switch {
		case r.err != nil:
			t.Errorf("a request written %v before SIGTERM failed: %v", sigAt.Sub(r.wrote), r.err)
		case r.code != 200 && r.code != 429:
			t.Errorf("a request written %v before SIGTERM got %d", sigAt.Sub(r.wrote), r.code)
		}
	}
	t.Logf("%.0f requests/s: %d written before SIGTERM (%d answered after it), %d after (%d failed: refused or closed after the drain); %d answers said Connection: close",
		rate, before, inFlight, after, afterFailed, closes)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
