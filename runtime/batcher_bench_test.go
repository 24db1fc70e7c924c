package runtime_test

import (
	"context"
	"fmt"
	goruntime "runtime"
	"sync/atomic"
	"testing"

	"github.com/ortserve/ortserve/runtime"
	"github.com/ortserve/ortserve/tokenize"
)

// nopSession answers every batch at once with a [rows, 1] tensor: what is left to measure is
// the batcher's own cost.
type nopSession struct{}

func (nopSession) Run(_ context.Context, b tokenize.Batch) (runtime.Tensor, error) {
	return runtime.Tensor{Shape: []int64{int64(b.Rows), 1}, Data: make([]float32, b.Rows)}, nil
}

func (nopSession) Close() error { return nil }

// batchCounter counts batches and rows, cheaply.
type batchCounter struct {
	runtime.NopObserver
	batches, rows atomic.Int64
}

func (o *batchCounter) Batch(rows, _, _ int) { o.batches.Add(1); o.rows.Add(int64(rows)) }

// BenchmarkBatcher is the cost of one Execute of a one-text request (12 tokens) through the
// batcher and a pool of two no-op sessions, from 1 and from 64 concurrent callers. The
// batching window is 0: a lone caller would otherwise wait it out (5 ms by default) on every
// request, and that wait is policy, not cost. With 64 callers batches form anyway, because
// requests arrive while both sessions are busy.
func BenchmarkBatcher(b *testing.B) {
	encs := []tokenize.Encoding{enc(7, 12)}
	for _, callers := range []int{1, 64} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			c := runtime.DefaultBatchConfig()
			c.MaxQueueDelay = 0
			obs := &batchCounter{}
			bt := runtime.NewBatcher(c, runtime.NewPool([]runtime.Session{nopSession{}, nopSession{}}), obs)
			defer bt.Close()
			ctx := context.Background()
			b.ReportAllocs()
			if callers == 1 {
				for b.Loop() {
					if _, _, err := bt.Execute(ctx, encs); err != nil {
						b.Fatal(err)
					}
				}
			} else {
				b.SetParallelism((callers + goruntime.GOMAXPROCS(0) - 1) / goruntime.GOMAXPROCS(0))
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if _, _, err := bt.Execute(ctx, encs); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			b.StopTimer()
			if n := obs.batches.Load(); n > 0 {
				b.ReportMetric(float64(obs.rows.Load())/float64(n), "rows/batch")
			}
		})
	}
}
