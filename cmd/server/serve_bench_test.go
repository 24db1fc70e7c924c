//go:build cgo && ort

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ortserve/ortserve/bench/offline"
)

// benchSentences are single sentences of everyday length (8–20 tokens), as a search or
// classification client sends them.
var benchSentences = []string{
	"The quick brown fox jumps over the lazy dog.",
	"How do I reset my password on the mobile app?",
	"Shipping was fast and the package arrived in perfect condition.",
	"What is the capital of Australia and why was it chosen?",
	"The meeting has been moved to Thursday afternoon at three.",
	"This blender is loud, but it crushes ice like a champ.",
	"Inference servers trade throughput for tail latency when they batch.",
	"Can you recommend a good book about the history of mathematics?",
	"My flight was delayed by four hours and nobody told us why.",
	"Add two cups of flour and stir until the batter is smooth.",
	"The new policy takes effect at the start of next quarter.",
	"I would not recommend this hotel to anyone traveling with kids.",
	"Quantized models are faster, but you should measure their accuracy.",
	"Where can I find the nearest charging station for my car?",
	"The orchestra played beautifully and the audience loved it.",
	"Please send the signed contract back by the end of the week.",
}

// BenchmarkServeConcurrent is the HTTP path under 64 concurrent single-sentence clients on
// MiniLM fp32, with the default config and with batching off (max_batch_size=1), same
// sessions and threads. Compare texts/s with BenchmarkRawSession's best batch size.
func BenchmarkServeConcurrent(b *testing.B) {
	for _, cfg := range []struct {
		name string
		args []string
	}{
		{"default", nil},
		{"max_batch=1", []string{"--max-batch", "1"}},
	} {
		// One server per config for all of b.Run's calls (it ramps b.N on the same server).
		url := startServer(b, cfg.args...)
		b.Run(cfg.name, func(b *testing.B) {
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
			bodies := make([][]byte, len(benchSentences))
			for i, s := range benchSentences {
				bodies[i], _ = json.Marshal(map[string]any{"inputs": s, "model": "minilm", "version": "fp32"})
			}
			var next atomic.Int64
			var wg sync.WaitGroup
			lat := make([][]time.Duration, 64) // per client, merged after
			b.ResetTimer()
			for c := range 64 {
				wg.Go(func() {
					for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
						start := time.Now()
						resp, err := client.Post(url+"/embed", "application/json", bytes.NewReader(bodies[(int(i)+c)%len(bodies)]))
						if err != nil {
							b.Error(err)
							return
						}
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						if resp.StatusCode != 200 {
							b.Errorf("status %d", resp.StatusCode)
							return
						}
						lat[c] = append(lat[c], time.Since(start))
					}
				})
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "texts/s")
			b.StopTimer()
			all := slices.Sorted(slices.Values(slices.Concat(lat...)))
			if len(all) > 0 {
				b.ReportMetric(all[len(all)/2].Seconds()*1e3, "p50-ms")
				b.ReportMetric(all[len(all)*95/100].Seconds()*1e3, "p95-ms")
			}
			b.ReportMetric(meanBatch(b, url), "rows/batch")
		})
	}
}

// meanBatch reads the mean batch size of minilm/fp32 from /metrics.
func meanBatch(b *testing.B, url string) float64 {
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	text, _ := io.ReadAll(resp.Body)
	num := func(name string) float64 {
		m := regexp.MustCompile(name + `\{model="minilm",version="fp32"\} (\S+)`).FindSubmatch(text)
		if m == nil {
			b.Fatalf("no %s in /metrics", name)
		}
		v, _ := strconv.ParseFloat(string(m[1]), 64)
		return v
	}
	for _, m := range regexp.MustCompile(`ortserve_batch_size_bucket\{model="minilm",version="fp32",le="([^"]+)"\} (\S+)`).FindAllSubmatch(text, -1) {
		b.Logf("batch size ≤ %s: %s batches (cumulative)", m[1], m[2])
	}
	return num("ortserve_batch_size_sum") / num("ortserve_batch_size_count")
}

// BenchmarkRawSession is the physical limit the server is judged against: MiniLM fp32 on the
// server's default sessions × threads (one single-thread session per core), fed pre-tokenized
// batches of the same sentences from one goroutine per session, no HTTP. It is what
// `server bench --offline` reports (offline.LimitOf); each iteration measures for a second.
func BenchmarkRawSession(b *testing.B) {
	be := offlineEngine(b)
	r, err := offline.Open(b.Context(), be, filepath.Join(os.Getenv("ORTSERVE_MODELS"), "minilm"), "fp32", benchSentences)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	for _, size := range []int{1, 4, 16, 32, 64} {
		b.Run(fmt.Sprintf("sessions=%d/threads=%d/batch=%d", len(r.Sessions), be.Threads(), size), func(b *testing.B) {
			var items, p50 float64
			for b.Loop() {
				p, err := r.Measure(b.Context(), size, time.Second)
				if err != nil {
					b.Fatal(err)
				}
				items += p.ItemsPerS
				p50 += p.P50
			}
			b.ReportMetric(items/float64(b.N), "texts/s")
			b.ReportMetric(p50/float64(b.N), "p50-ms")
		})
	}
}
