//go:build cgo && ort

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	goruntime "runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ortserve/ortserve/models"
	"github.com/ortserve/ortserve/runtime"
	"github.com/ortserve/ortserve/server"
	"github.com/ortserve/ortserve/tokenize"
	"github.com/ortserve/ortserve/tokenize/hf"
	"github.com/ortserve/ortserve/tracing"
)

// nopBackend is the real HF tokenizer and the real batcher over sessions that answer at once
// (nopHidden): a server on it costs everything but inference.
type nopBackend struct {
	batch   runtime.BatchConfig
	observe func(model, version string) runtime.Observer // nil: none
}

func (nopBackend) Device() string { return "cpu" }

func (nopBackend) Tokenizer(path string, maxLen int) (tokenize.Tokenizer, error) {
	return hf.Load(path, maxLen)
}

func (b nopBackend) Executor(spec models.ExecSpec) (models.Executor, error) {
	pool := runtime.NewPool([]runtime.Session{nopHidden{}, nopHidden{}}) // as on 2 cores
	var obs runtime.Observer
	if b.observe != nil {
		obs = b.observe(spec.Model, spec.Version)
	}
	return nopExecutor{runtime.NewBatcher(b.batch, pool, obs), pool}, nil
}

type nopExecutor struct {
	*runtime.Batcher
	pool *runtime.Pool
}

func (e nopExecutor) Close() error {
	e.Batcher.Close()
	return e.pool.Close()
}

// nopHidden answers a batch with MiniLM's output shape, [rows, cols, 384], at once. The
// values are a fixed pattern rather than zeros, so that the pooled, normalized vectors
// cost what real ones do to write as JSON (zeros print as "0"). Copying the pattern in is
// what the ORT binding's copy-out costs too.
type nopHidden struct{}

const nopDim = 384

var nopPattern = func() []float32 {
	p := make([]float32, 256*nopDim)
	for i := range p {
		p[i] = float32(i%997)/997 - 0.5
	}
	return p
}()

func (nopHidden) Run(_ context.Context, b tokenize.Batch) (runtime.Tensor, error) {
	n := b.Rows * b.Cols * nopDim
	data := make([]float32, n)
	for i := 0; i < n; i += len(nopPattern) {
		copy(data[i:], nopPattern)
	}
	return runtime.Tensor{Shape: []int64{int64(b.Rows), int64(b.Cols), nopDim}, Data: data}, nil
}

func (nopHidden) Close() error { return nil }

// BenchmarkServeOverhead is what the server costs a request besides inference: HTTP, JSON
// in and out, HF tokenization, batching, pooling and normalization, on MiniLM's real
// tokenizer with sessions that answer at once. One sentence of everyday length per request to
// /embed (the 16 benchSentences in turn).
//
//   - loopback/clients=1: one client after another over a real 127.0.0.1 connection, batching
//     window 0 (a lone request would otherwise wait out the 5 ms window, which is policy, not
//     cost). p50-µs is the per-request latency: the overhead. ns/op and allocs include the Go
//     client's share.
//   - handler/clients=1: the same, straight into the server's http.Handler (no connection, no
//     client): the server's own time and allocations.
//   - handler/clients=1/traced: the same, traced with every request sampled, exporting over
//     OTLP gRPC to an in-process receiver: what tracing costs a request.
//   - loopback/clients=64: 64 concurrent clients on the default config (5 ms window, batches
//     of up to 32): ns/op is wall time per request on all cores, i.e. the most requests per
//     second the serving path could carry with free inference.
func BenchmarkServeOverhead(b *testing.B) {
	repoDir := minilmOnly(b)
	bodies := make([][]byte, len(benchSentences))
	for i, s := range benchSentences {
		bodies[i], _ = json.Marshal(map[string]any{"inputs": s})
	}
	for _, tc := range []struct {
		name    string
		clients int
		window  time.Duration
		handler bool
		traced  bool
	}{
		{"loopback/clients=1", 1, 0, false, false},
		{"handler/clients=1", 1, 0, true, false},
		{"handler/clients=1/traced", 1, 0, true, true},
		{"loopback/clients=64", 64, runtime.DefaultBatchConfig().MaxQueueDelay, false, false},
	} {
		// One server per case for all of b.Run's calls (it ramps b.N on the same server).
		cfg := runtime.DefaultBatchConfig()
		cfg.MaxQueueDelay = tc.window
		log := slog.New(slog.DiscardHandler)
		backend, scfg := nopBackend{batch: cfg}, server.DefaultConfig()
		stopTracing := func() {}
		if tc.traced {
			_, endpoint := startReceiver(b)
			tr, err := tracing.New(b.Context(), tracing.Config{Endpoint: endpoint}, "bench", func(string) string { return "" })
			if err != nil {
				b.Fatal(err)
			}
			stopTracing = func() { tr.Shutdown(context.Background()) }
			backend.observe = func(m, v string) runtime.Observer { return tracing.Observer(runtime.NopObserver{}, m, v) }
			scfg.Tracing = &server.Tracing{Tracer: tr.Tracer(), Propagator: tr.Propagator()}
		}
		repo, err := models.OpenRepository(repoDir, backend, log)
		if err != nil {
			b.Fatal(err)
		}
		srv := server.New(scfg, server.FromModels(repo), log, nil)
		srv.SetReady(true)
		h := srv.Handler()
		ts := httptest.NewServer(h)
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: tc.clients}}
		b.Run(tc.name, func(b *testing.B) {
			post := func(body []byte) error {
				if tc.handler {
					req := httptest.NewRequest(http.MethodPost, "/embed", bytes.NewReader(body))
					req.Header.Set("Content-Type", "application/json")
					w := httptest.NewRecorder()
					h.ServeHTTP(w, req)
					if w.Code != http.StatusOK {
						return fmt.Errorf("status %d: %s", w.Code, w.Body)
					}
					return nil
				}
				resp, err := client.Post(ts.URL+"/embed", "application/json", bytes.NewReader(body))
				if err != nil {
					return err
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					return fmt.Errorf("status %d", resp.StatusCode)
				}
				return nil
			}
			// Latencies go into per-client slices allocated up front, so that recording
			// them allocates nothing in the timed loop (until 1<<16 per client).
			// RunParallel runs parallelism × GOMAXPROCS goroutines: 64 on 2 cores.
			par := (tc.clients + goruntime.GOMAXPROCS(0) - 1) / goruntime.GOMAXPROCS(0)
			lat := make([][]time.Duration, max(1, par*goruntime.GOMAXPROCS(0)))
			for c := range lat {
				lat[c] = make([]time.Duration, 0, 1<<16)
			}
			b.ReportAllocs()
			b.ResetTimer()
			if tc.clients == 1 {
				i := 0
				for b.Loop() {
					start := time.Now()
					if err := post(bodies[i%len(bodies)]); err != nil {
						b.Fatal(err)
					}
					lat[0] = append(lat[0], time.Since(start))
					i++
				}
			} else {
				var mu sync.Mutex
				next := 0
				b.SetParallelism(par)
				b.RunParallel(func(pb *testing.PB) {
					mu.Lock()
					c := next
					next++
					mu.Unlock()
					for i := c; pb.Next(); i++ {
						start := time.Now()
						if err := post(bodies[i%len(bodies)]); err != nil {
							b.Error(err)
							return
						}
						lat[c] = append(lat[c], time.Since(start))
					}
				})
			}
			b.StopTimer()
			all := slices.Sorted(slices.Values(slices.Concat(lat...)))
			if len(all) > 0 {
				b.ReportMetric(float64(all[len(all)/2])/1e3, "p50-µs")
				b.ReportMetric(float64(all[len(all)*99/100])/1e3, "p99-µs")
			}
		})
		client.CloseIdleConnections()
		ts.Close()
		repo.Close()
		stopTracing()
	}
}
