//go:build cgo && ort

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"
)

// The soak: a constant rate of good requests on every inference route, on
// loopback, against the real server in a child process (so that its memory and goroutines are
// its own), for ORTSERVE_SOAK (default 10 s: `make test`; `make soak` runs 10 minutes). It
// checks what a long life would show first: no request fails, the resident memory after the
// warm-up drifts by at most soakRSSDrift, and the goroutines come back to their number before
// the load once its connections close.
const (
	soakDefault  = 10 * time.Second
	soakRate     = 40       // requests per second, across the routes; ORTSERVE_SOAK_RATE overrides
	soakRSSDrift = 48 << 20 // bytes of resident memory the load may add after the warm-up
	// soakGoroutines is how many goroutines more than before the load the server may have
	// after it: the HTTP server's per-connection goroutines end with their connections, and
	// nothing else the load starts may outlive it.
	soakGoroutines = 5
	// soakOutstanding bounds the requests the generator has out at once: reaching it means
	// the server has fallen behind the rate, which fails the soak.
	soakOutstanding = 256
)

// soakRequest is one good request of the mix the soak cycles through.
type soakRequest struct {
	path string
	body []byte
}

func soakMix() []soakRequest {
	var mix []soakRequest
	add := func(path string, body any) {
		data, _ := json.Marshal(body)
		mix = append(mix, soakRequest{path, data})
	}
	for i, s := range benchSentences {
		pair := []string{s, benchSentences[(i+1)%len(benchSentences)]}
		add("/embed", map[string]any{"inputs": s})
		add("/embed", map[string]any{"inputs": pair, "model": "minilm", "normalize": false})
		add("/predict", map[string]any{"inputs": s})
		add("/predict", map[string]any{"inputs": [][]string{{pair[0]}, {pair[1]}}, "raw_scores": true})
		add("/tokenize", map[string]any{"inputs": s})
		add("/v1/embeddings", map[string]any{"model": "minilm", "input": pair, "encoding_format": []string{"float", "base64"}[i%2]})
		tensor := []map[string]any{{"name": "text", "shape": []int{2}, "datatype": "BYTES", "data": pair}}
		add("/v2/models/minilm/infer", map[string]any{"inputs": tensor})
		add("/v2/models/sentiment/versions/int8/infer", map[string]any{"inputs": tensor})
	}
	return mix
}

func TestSoak(t *testing.T) {
	t.Parallel()
	d, rate := soakDefault, float64(soakRate)
	if s := os.Getenv("ORTSERVE_SOAK"); s != "" {
		var err error
		if d, err = time.ParseDuration(s); err != nil || d < 2*time.Second {
			t.Fatalf("ORTSERVE_SOAK=%q: give a duration of at least 2s, as 10m", s)
		}
	}
	if s := os.Getenv("ORTSERVE_SOAK_RATE"); s != "" {
		var err error
		if rate, err = strconv.ParseFloat(s, 64); err != nil || rate <= 0 {
			t.Fatalf("ORTSERVE_SOAK_RATE=%q: give requests per second", s)
		}
	}
	if deadline, ok := t.Deadline(); ok && time.Until(deadline) < d+2*time.Minute {
		t.Fatalf("ORTSERVE_SOAK=%v does not fit in go test's -timeout: raise -timeout", d)
	}
	warm := min(d/5, time.Minute)

	srv := startChild(t, "--models", batteryRepo(t), "--device", "cpu")
	tr := &http.Transport{MaxIdleConnsPerHost: soakOutstanding}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	mix := soakMix()

	// Before the load: every request once, its connection closed, then the baseline.
	for _, r := range mix {
		if code, raw, err := soakSend(t.Context(), client, srv.url, r); err != nil || code != 200 {
			t.Fatalf("POST %s %s: %d %s %v", r.path, r.body, code, raw, err)
		}
	}
	tr.CloseIdleConnections()
	scrape := newScraper(srv.url)
	base, err := scrape.sample(t.Context())
	if err != nil {
		t.Fatal(err)
	}

	// The load: open loop, request i due at start + i/rate whatever the answers before it.
	var (
		mu       sync.Mutex
		codes    = map[int]int{}
		firstBad string
		sent     int
		behind   int // requests not sent: soakOutstanding were out
		samples  []soakSample
		wg       sync.WaitGroup
	)
	ctx, cancel := context.WithTimeout(t.Context(), d+time.Minute)
	defer cancel()
	sampled := make(chan struct{})
	start := time.Now()
	go func() { // a sample a second (or 60 over the run), from the end of the warm-up
		defer close(sampled)
		every := max(time.Second, (d-warm)/60)
		for at := start.Add(warm); at.Before(start.Add(d)); at = at.Add(every) {
			select {
			case <-time.After(time.Until(at)):
			case <-ctx.Done():
				return
			}
			if s, err := scrape.sample(ctx); err == nil {
				mu.Lock()
				samples = append(samples, s)
				mu.Unlock()
			}
		}
	}()
	sem := make(chan struct{}, soakOutstanding)
	for i := 0; ; i++ {
		at := start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
		if at.Sub(start) >= d {
			break
		}
		time.Sleep(time.Until(at)) // the arrival schedule, not a wait for anything
		select {
		case sem <- struct{}{}:
		default:
			behind++
			continue
		}
		sent++
		wg.Go(func() {
			defer func() { <-sem }()
			r := mix[i%len(mix)]
			code, raw, err := soakSend(ctx, client, srv.url, r)
			mu.Lock()
			defer mu.Unlock()
			codes[code]++ // 0: no answer
			if (err != nil || code != 200) && firstBad == "" {
				firstBad = fmt.Sprintf("POST %s: %d %s %v", r.path, code, raw, err)
			}
		})
	}
	wg.Wait()
	<-sampled
	elapsed := time.Since(start)

	// After the load: its connections closed, the goroutines come back.
	tr.CloseIdleConnections()
	var after soakSample
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if after, err = scrape.sample(t.Context()); err != nil {
			t.Fatal(err)
		}
		if after.goroutines <= base.goroutines+soakGoroutines || time.Now().After(deadline) {
			break
		}
	}

	t.Logf("%d requests in %v (%.1f/s, %d not sent: generator behind), answers %v", sent, elapsed.Round(time.Millisecond), float64(sent)/elapsed.Seconds(), behind, codes)
	if codes[200] != sent || behind > 0 {
		t.Errorf("%d of %d requests answered 200, %d not sent; first failure: %s", codes[200], sent, behind, firstBad)
	}
	if len(samples) < 2 {
		t.Fatalf("%d samples of /metrics during the load", len(samples))
	}
	first, last, peak := samples[0], samples[len(samples)-1], samples[0]
	for _, s := range samples {
		peak.rss = max(peak.rss, s.rss)
		peak.goroutines = max(peak.goroutines, s.goroutines)
	}
	t.Logf("resident memory: %d MiB before the load, %d MiB after the %v warm-up, %d MiB at the end (peak %d MiB; slope %+.2f MiB/min over %d samples)",
		base.rss>>20, first.rss>>20, warm, last.rss>>20, peak.rss>>20, rssSlope(samples)*60/(1<<20), len(samples))
	t.Logf("goroutines: %v before the load, peak %v during it, %v after it", base.goroutines, peak.goroutines, after.goroutines)
	if drift := last.rss - first.rss; drift > soakRSSDrift {
		t.Errorf("resident memory grew by %d MiB after the warm-up (from %d MiB to %d MiB), over the bound of %d MiB",
			drift>>20, first.rss>>20, last.rss>>20, soakRSSDrift>>20)
	}
	if after.goroutines > base.goroutines+soakGoroutines {
		t.Errorf("%v goroutines 10 s after the load, %v before it: more than %d left over", after.goroutines, base.goroutines, soakGoroutines)
	}
	srv.stop(t)
}

// soakSend posts one request and reads its answer to the end.
func soakSend(ctx context.Context, client *http.Client, base string, r soakRequest) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+r.path, bytes.NewReader(r.body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if resp.StatusCode == 200 {
		raw = nil
	}
	return resp.StatusCode, raw, err
}

// soakSample is what the server's /metrics says of its process at one time.
type soakSample struct {
	at         time.Time
	rss        int64   // process_resident_memory_bytes
	goroutines float64 // go_goroutines
}

// scraper reads /metrics on a connection of its own each time, so that it holds none of the
// server's goroutines between samples.
type scraper struct {
	url    string
	client *http.Client
}

func newScraper(base string) *scraper {
	return &scraper{url: base + "/metrics", client: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}}
}

var (
	rssLine       = regexp.MustCompile(`(?m)^process_resident_memory_bytes (\S+)$`)
	goroutineLine = regexp.MustCompile(`(?m)^go_goroutines (\S+)$`)
)

func (s *scraper) sample(ctx context.Context) (soakSample, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	resp, err := s.client.Do(req)
	if err != nil {
		return soakSample{}, err
	}
	defer resp.Body.Close()
	text, err := io.ReadAll(resp.Body)
	if err != nil {
		return soakSample{}, err
	}
	rss, g := rssLine.FindSubmatch(text), goroutineLine.FindSubmatch(text)
	if rss == nil || g == nil {
		return soakSample{}, fmt.Errorf("/metrics lacks process_resident_memory_bytes or go_goroutines: are the Go and process collectors registered (serve.go)?")
	}
	out := soakSample{at: time.Now()}
	v, _ := strconv.ParseFloat(string(rss[1]), 64)
	out.rss = int64(v)
	out.goroutines, _ = strconv.ParseFloat(string(g[1]), 64)
	return out, nil
}

// rssSlope is the least-squares slope of resident memory over time, in bytes per second.
func rssSlope(samples []soakSample) float64 {
	var n, sx, sy, sxx, sxy float64
	for _, s := range samples {
		x, y := s.at.Sub(samples[0].at).Seconds(), float64(s.rss)
		n++
		sx += x
		sy += y
		sxx += x * x
		sxy += x * y
	}
	if den := n*sxx - sx*sx; den != 0 {
		return (n*sxy - sx*sy) / den
	}
	return 0
}
