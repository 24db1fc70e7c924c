package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ortserve/ortserve/runtime"
	"github.com/ortserve/ortserve/tokenize"
)

// enc is an encoding of n tokens whose first id is id.
func enc(id int64, n int) tokenize.Encoding {
	ids := make([]int64, n)
	ids[0] = id
	return tokenize.Encoding{IDs: ids, TypeIDs: make([]int64, n)}
}

type countingObserver struct {
	runtime.NopObserver
	mu      sync.Mutex
	batches []int
	refused map[string]int
	expired atomic.Int32
}

func (o *countingObserver) Batch(rows, padded, real int) {
	o.mu.Lock()
	o.batches = append(o.batches, rows)
	o.mu.Unlock()
}
func (o *countingObserver) Expired() { o.expired.Add(1) }
func (o *countingObserver) Refused(reason string) {
	o.mu.Lock()
	if o.refused == nil {
		o.refused = map[string]int{}
	}
	o.refused[reason]++
	o.mu.Unlock()
}

func newBatcher(cfg runtime.BatchConfig, delay time.Duration, sessions int) (*runtime.Batcher, []*fakeSession, *countingObserver) {
	var ss []runtime.Session
	var fs []*fakeSession
	for range sessions {
		f := &fakeSession{delay: delay}
		fs = append(fs, f)
		ss = append(ss, f)
	}
	obs := &countingObserver{}
	return runtime.NewBatcher(cfg, runtime.NewPool(ss), obs), fs, obs
}

func cfg(maxBatch int, wait time.Duration) runtime.BatchConfig {
	c := runtime.DefaultBatchConfig()
	c.MaxBatchSize, c.MaxQueueDelay = maxBatch, wait
	return c
}

// A lone request waits MaxQueueDelay for company, then runs alone.
func TestBatcherWaitsMaxQueueDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _, obs := newBatcher(cfg(8, 5*time.Millisecond), 2*time.Millisecond, 1)
		defer b.Close()
		start := time.Now()
		out, st, err := b.Execute(t.Context(), []tokenize.Encoding{enc(7, 3)})
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != 7*time.Millisecond || st.Queue != 5*time.Millisecond || st.Inference != 2*time.Millisecond {
			t.Errorf("took %v (queue %v, inference %v), want 5 ms waiting + 2 ms running", d, st.Queue, st.Inference)
		}
		if out[0].Data[0] != 7 || len(obs.batches) != 1 {
			t.Errorf("out %v batches %v", out, obs.batches)
		}
	})
}

// Concurrent requests share batches of at most MaxBatchSize; a full batch does not wait.
func TestBatcherFormsBatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, fs, obs := newBatcher(cfg(4, time.Second), 10*time.Millisecond, 1)
		defer b.Close()
		var wg sync.WaitGroup
		start := time.Now()
		for i := range 8 {
			wg.Go(func() {
				out, _, err := b.Execute(t.Context(), []tokenize.Encoding{enc(int64(100+i), 4)})
				if err != nil || out[0].Data[0] != float32(100+i) {
					t.Errorf("request %d: %v %v", i, out, err)
				}
			})
		}
		wg.Wait()
		// Two full batches back to back, never waiting the 1 s window.
		if d := time.Since(start); d != 20*time.Millisecond {
			t.Errorf("took %v, want 20ms", d)
		}
		if fmt.Sprint(obs.batches) != "[4 4]" || fs[0].runs != 2 {
			t.Errorf("batches %v, runs %d", obs.batches, fs[0].runs)
		}
	})
}

// A request with more inputs than a batch holds is split and reassembled in order.
func TestBatcherSplitsAndReassembles(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _, obs := newBatcher(cfg(4, time.Millisecond), time.Millisecond, 2)
		defer b.Close()
		var encs []tokenize.Encoding
		for i := range 10 {
			encs = append(encs, enc(int64(i), 1+i%3))
		}
		out, st, err := b.Execute(t.Context(), encs)
		if err != nil {
			t.Fatal(err)
		}
		for i, o := range out {
			if o.Data[0] != float32(i) {
				t.Errorf("row %d has %v", i, o.Data)
			}
		}
		if st.Batches != 3 || fmt.Sprint(obs.batches) != "[4 4 2]" {
			t.Errorf("batches %d %v", st.Batches, obs.batches)
		}
	})
}

// Rows of similar length go together, and the padded-token budget caps a batch.
func TestBatcherLengthAwareAndTokenBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := cfg(4, time.Millisecond)
		c.MaxBatchTokens = 40
		b, fs, _ := newBatcher(c, time.Millisecond, 1)
		defer b.Close()
		// Lengths alternate 2 and 20: grouped, short rows pad to 2, long ones are capped at
		// 2 per batch by the budget (3 × 20 > 40).
		var encs []tokenize.Encoding
		for i := range 8 {
			encs = append(encs, enc(int64(i), []int{2, 20}[i%2]))
		}
		if _, _, err := b.Execute(t.Context(), encs); err != nil {
			t.Fatal(err)
		}
		want := "[[4 2] [2 20] [2 20]]"
		if got := fmt.Sprint(fs[0].shapes); got != want {
			t.Errorf("batch shapes %s, want %s", got, want)
		}
	})
}

// Past the queue bound, requests fail at once with ErrQueueFull.
func TestBatcherQueueFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := cfg(1, 0)
		c.MaxQueueRequests = 2
		b, _, _ := newBatcher(c, 100*time.Millisecond, 1)
		defer b.Close()
		var wg sync.WaitGroup
		for range 3 { // one running, two queued
			wg.Go(func() { b.Execute(t.Context(), []tokenize.Encoding{enc(1, 2)}) })
			synctest.Wait()
		}
		start := time.Now()
		if _, _, err := b.Execute(t.Context(), []tokenize.Encoding{enc(1, 2)}); !errors.Is(err, runtime.ErrQueueFull) || time.Since(start) != 0 {
			t.Errorf("got %v after %v, want ErrQueueFull at once", err, time.Since(start))
		}
		wg.Wait()
		// The queue drained: requests are admitted again.
		if _, _, err := b.Execute(t.Context(), []tokenize.Encoding{enc(1, 2)}); err != nil {
			t.Errorf("after draining: %v", err)
		}
	})
}

// A request whose deadline passes in the queue is dropped before dispatch.
func TestBatcherDropsExpired(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, fs, obs := newBatcher(cfg(1, 0), 100*time.Millisecond, 1)
		defer b.Close()
		go b.Execute(t.Context(), []tokenize.Encoding{enc(1, 2)}) // occupies the session
		synctest.Wait()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
		defer cancel()
		if _, _, err := b.Execute(ctx, []tokenize.Encoding{enc(2, 2)}); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("got %v", err)
		}
		time.Sleep(200 * time.Millisecond)
		if fs[0].runs != 1 || obs.expired.Load() != 1 {
			t.Errorf("runs %d (the expired request must not run), expired %d", fs[0].runs, obs.expired.Load())
		}
	})
}

// A request whose context has ended before the batcher takes it in never runs.
func TestBatcherDropsWhatArrivesExpired(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, fs, obs := newBatcher(cfg(1, 0), time.Millisecond, 1)
		defer b.Close()
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if _, _, err := b.Execute(ctx, []tokenize.Encoding{enc(1, 2)}); !errors.Is(err, context.Canceled) {
			t.Errorf("got %v", err)
		}
		synctest.Wait()
		if fs[0].runs != 0 || obs.expired.Load() != 1 {
			t.Errorf("runs %d, expired %d; want it dropped unrun", fs[0].runs, obs.expired.Load())
		}
	})
}

// failingSession fails every run.
type failingSession struct{ fakeSession }

func (f *failingSession) Run(ctx context.Context, b tokenize.Batch) (runtime.Tensor, error) {
	f.fakeSession.Run(ctx, b)
	return runtime.Tensor{}, errors.New("the device fell over")
}

// A request split over batches fails with its first failed batch, and its rows still queued
// do not run for nobody: they leave the queue, and its bound, at once.
func TestBatcherDropsTheRestOfAFailedRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &failingSession{fakeSession{delay: 10 * time.Millisecond}}
		c := cfg(2, 0)
		c.MaxQueueRequests = 1
		obs := &countingObserver{}
		b := runtime.NewBatcher(c, runtime.NewPool([]runtime.Session{f}), obs)
		defer b.Close()
		_, st, err := b.Execute(t.Context(), []tokenize.Encoding{enc(1, 2), enc(2, 2), enc(3, 2), enc(4, 2)})
		if err == nil || errors.Is(err, runtime.ErrQueueFull) || st.Batches != 1 {
			t.Errorf("got %v after %d batches, want the device's error after one", err, st.Batches)
		}
		synctest.Wait()
		if f.runs != 1 || obs.expired.Load() != 0 {
			t.Errorf("%d runs, %d expired; want the first batch alone, and nothing expired", f.runs, obs.expired.Load())
		}
		if _, _, err := b.Execute(t.Context(), []tokenize.Encoding{enc(5, 2)}); errors.Is(err, runtime.ErrQueueFull) {
			t.Errorf("the failed request still holds the queue: %v", err)
		}
	})
}

// Close serves everything admitted before it returns.
func TestBatcherCloseDrains(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _, _ := newBatcher(cfg(2, time.Second), 10*time.Millisecond, 1)
		var wg sync.WaitGroup
		var served atomic.Int32
		for i := range 5 {
			wg.Go(func() {
				if _, _, err := b.Execute(t.Context(), []tokenize.Encoding{enc(int64(i), 2)}); err == nil {
					served.Add(1)
				}
			})
		}
		synctest.Wait()
		b.Close()
		wg.Wait()
		if served.Load() != 5 {
			t.Errorf("served %d of 5 admitted requests", served.Load())
		}
		if _, _, err := b.Execute(t.Context(), []tokenize.Encoding{enc(1, 2)}); !errors.Is(err, runtime.ErrClosed) {
			t.Errorf("after close: %v", err)
		}
	})
}

// Several sessions run batches at once.
func TestBatcherUsesEverySession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, fs, _ := newBatcher(cfg(1, 0), 10*time.Millisecond, 3)
		defer b.Close()
		var wg sync.WaitGroup
		start := time.Now()
		for range 6 {
			wg.Go(func() { b.Execute(t.Context(), []tokenize.Encoding{enc(1, 2)}) })
		}
		wg.Wait()
		if d := time.Since(start); d != 20*time.Millisecond {
			t.Errorf("6 batches on 3 sessions took %v, want 20ms", d)
		}
		for i, f := range fs {
			if f.runs != 2 {
				t.Errorf("session %d ran %d batches", i, f.runs)
			}
		}
	})
}
