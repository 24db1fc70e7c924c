package runtime_test

import (
	"context"
	"fmt"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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

// queueWatch signals when the batcher reports n requests queued.
type queueWatch struct {
	runtime.NopObserver
	n       int
	reached chan struct{}
	once    sync.Once
}

func (o *queueWatch) Queue(requests, _ int) {
	if requests >= o.n {
		o.once.Do(func() { close(o.reached) })
	}
}

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

// gateSession answers at once until closed is set to a channel, then waits for it.
type gateSession struct{ hold atomic.Pointer[chan struct{}] }

func (g *gateSession) Run(ctx context.Context, b tokenize.Batch) (runtime.Tensor, error) {
	if h := g.hold.Load(); h != nil {
		<-*h
	}
	time.Sleep(time.Microsecond) // a cost for calibration to see
	return nopSession{}.Run(ctx, b)
}

func (g *gateSession) Close() error { return nil }

// BenchmarkAdmitDeepQueue is the admission check of one request behind a deep queue: the
// session is held, `queued` one-text requests wait, and each measured request, whose
// deadline the queue would pass, is refused at admission. What it costs is the prediction
// of the wait ahead.
func BenchmarkAdmitDeepQueue(b *testing.B) {
	for _, queued := range []int{16, 1024} {
		b.Run(fmt.Sprintf("queued=%d", queued), func(b *testing.B) {
			g := &gateSession{}
			pool := runtime.NewPool([]runtime.Session{g})
			if err := pool.Calibrate(b.Context(), []tokenize.Batch{tokenize.Pad([]tokenize.Encoding{enc(1, 12)}), tokenize.Pad([]tokenize.Encoding{enc(1, 12), enc(1, 12)})}, time.Second); err != nil {
				b.Fatal(err)
			}
			c := runtime.DefaultBatchConfig()
			c.MaxQueueRequests = 2 * queued
			watch := &queueWatch{n: queued, reached: make(chan struct{})}
			bt := runtime.NewBatcher(c, pool, watch)
			hold := make(chan struct{})
			g.hold.Store(&hold)
			var wg sync.WaitGroup
			for range queued + 1 { // one runs (held), the rest wait
				wg.Go(func() { bt.Execute(context.Background(), []tokenize.Encoding{enc(7, 12)}) })
			}
			<-watch.reached // one runs, held, and the rest are queued
			encs := []tokenize.Encoding{enc(7, 12)}
			b.ResetTimer()
			for b.Loop() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Microsecond)
				if _, _, err := bt.Execute(ctx, encs); err == nil {
					b.Fatal("admitted behind a held queue")
				}
				cancel()
			}
			b.StopTimer()
			close(hold)
			wg.Wait()
			bt.Close()
		})
	}
}
