//go:build cgo && ort

package main

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
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
	cmd := exec.CommandContext(t.Context(), os.Args[0], "serve", "--addr", "127.0.0.1:0", "--device", "cpu", "--grace", "60s",
		"--models", versionRepo(t, "minilm", "fp32"), "--sessions", "1")
	cmd.Env = append(os.Environ(), "ORTSERVE_TEST_EXEC=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("server did not start: %v\n%s", err, stderr.String())
	}
	url := strings.TrimSpace(line[strings.Index(line, "http://"):])

	// 8 clients, each one request of 8 long texts: together a few seconds of CPU work.
	body := `{"inputs": [` + strings.TrimSuffix(strings.Repeat(`"`+strings.Repeat("the server keeps working while it drains ", 12)+`",`, 8), ",") + `]}`
	var wg sync.WaitGroup
	codes := make(chan int, 8)
	for range 8 {
		wg.Go(func() {
			resp, err := http.Post(url+"/embed", "application/json", strings.NewReader(body))
			if err != nil {
				codes <- -1 // refused: never admitted
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
	time.Sleep(300 * time.Millisecond) // let the requests be admitted
	cmd.Process.Signal(syscall.SIGTERM)
	wg.Wait()
	close(codes)
	ok := 0
	for c := range codes {
		switch c {
		case 200:
			ok++
		case -1:
		default:
			t.Errorf("an admitted request got %d", c)
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("exit: %v\n%s", err, stderr.String())
	}
	if ok == 0 {
		t.Error("no request was in flight at SIGTERM: the test proves nothing")
	}
	t.Logf("%d requests in flight at SIGTERM all answered", ok)
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
	var queued, inFlight float64
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		v := metricValues(t, c.url, `ortserve_queue_requests{model="minilm",version="fp32"}`, "ortserve_requests_in_flight")
		queued, inFlight = v[0], v[1]
		if int(inFlight)+int(answered.Load()) == clients && queued >= 100 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the queue never formed: %v queued, %v in flight of %d\n%s", queued, inFlight, clients, c.stderr)
		}
	}
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
// delay is over, within the grace.
func TestDrainDelayKeepsServing(t *testing.T) {
	const drain, grace = 1500 * time.Millisecond, 3 * time.Second
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
