//go:build cgo && ort

package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
)

// TestDeployMetricsServed checks that every metric the deployment reads — the Grafana
// dashboard, the alerting rules, prometheus-adapter's rules for the HPA and the chart's KEDA
// queries, listed in deploy/metrics.txt (which deploy's own tests keep equal to what those
// files use) — is a series a real server exposes on /metrics.
//
// Some series exist only once something happened: the SLO gauges with an SLO, the latency
// histograms after a request, the refusal counter after a refusal. So the server runs with
// --slo, answers a request, and is made to refuse some: one session, a queue bound of one
// request, and bursts of concurrent requests until one is refused with 429.
func TestDeployMetricsServed(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../../deploy/metrics.txt")
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Fields(string(data))
	if len(want) < 10 {
		t.Fatalf("deploy/metrics.txt has %d names", len(want))
	}

	// One model version, so that the server starts in a second: minilm's fp32.
	url := startServer(t, "--models", versionRepo(t, "minilm", "fp32"), "--slo", "p95=10s", "--sessions", "1", "--max-queue-requests", "1", "--reload-interval", "0s")

	if resp := postJSON(t, url+"/embed", map[string]any{"inputs": "hello world"}, nil); resp.StatusCode != 200 {
		t.Fatalf("/embed: %d", resp.StatusCode)
	}
	texts := make([]string, 32)
	for i := range texts {
		texts[i] = fmt.Sprintf("sentence %d of a burst that keeps the one session busy while the others arrive", i)
	}
	body, _ := json.Marshal(map[string]any{"inputs": texts})
	refused := false
	for round := 0; round < 10 && !refused; round++ {
		var wg sync.WaitGroup
		codes := make(chan int, 8)
		for range 8 {
			wg.Go(func() {
				resp, err := http.Post(url+"/embed", "application/json", bytes.NewReader(body))
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				codes <- resp.StatusCode
			})
		}
		wg.Wait()
		close(codes)
		for c := range codes {
			refused = refused || c == http.StatusTooManyRequests
		}
	}
	if !refused {
		t.Fatal("10 bursts of 8 concurrent requests against a queue bound of 1 were never refused")
	}

	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	served := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		if name, _, ok := strings.Cut(line, "{"); ok {
			served[name] = true
		} else if name, _, ok := strings.Cut(line, " "); ok {
			served[name] = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for _, name := range want {
		if !served[name] {
			t.Errorf("%s is in deploy/metrics.txt (the dashboard, alerts or autoscaler read it) but not in the server's /metrics", name)
		}
	}
}
