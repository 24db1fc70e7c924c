package runtime_test

import (
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ortserve/ortserve/runtime"
	"github.com/ortserve/ortserve/tokenize"
)

// calibrated is a batcher over one fake session with the given cost, its cost model seeded
// as serve seeds it for a max batch of 16 (runtime.CalibrationBatches).
func calibrated(t *testing.T, c runtime.BatchConfig, cost func(rows, cols int) time.Duration) (*runtime.Batcher, *fakeSession, *countingObserver) {
	t.Helper()
	f := &fakeSession{cost: cost}
	pool := runtime.NewPool([]runtime.Session{f})
	if err := pool.Calibrate(t.Context(), runtime.CalibrationBatches(16, false), time.Hour); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.runs, f.shapes = 0, nil
	f.mu.Unlock()
	obs := &countingObserver{}
	return runtime.NewBatcher(c, pool, obs), f, obs
}

// A lone request is dispatched at once: no window by default, so its latency is its run.
func TestBatcherIsWorkConserving(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _, _ := calibrated(t, runtime.DefaultBatchConfig(), linearCost)
		defer b.Close()
		start := time.Now()
		_, st, err := b.Execute(t.Context(), []tokenize.Encoding{enc(1, 16)})
		if err != nil {
			t.Fatal(err)
		}
		if d, run := time.Since(start), linearCost(1, 16); d != run || st.Queue != 0 {
			t.Errorf("took %v (queue %v), want the run alone: %v", d, st.Queue, run)
		}
	})
}

// What queues while the session is busy is batched as the device's cost curve says: on a
// CPU where batching costs more per text, one row at a time; where a run's fixed cost
// amortizes over rows of one length, a few rows; on a GPU, everything at once. Mixed lengths
// on a linear CPU are grouped by length, never padded short to long.
func TestBatcherFollowsTheCostCurve(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cost    func(rows, cols int) time.Duration
		lengths []int
		want    string // batches formed from the 16 queued rows, in rows
	}{
		{"cpu: batching does not pay", cpuCost, repeat(16, 16), "[1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1]"},
		{"gpu: batching pays", gpuCost, repeat(16, 16), "[16]"},
		// 2 ms fixed + 0.8 ms a row of 16: 12 rows (1.03 texts/ms) are the fewest within 5%
		// of 16 rows' 1.08 texts/ms.
		{"linear cpu, one length", linearCost, repeat(16, 16), "[12 4]"},
		// The 8 short rows go together (padding them to 64 would cost 5× more); of the long
		// ones, 5 rows are within 5% of 8 rows' texts/ms.
		{"linear cpu, two lengths", linearCost, append(repeat(8, 8), repeat(8, 64)...), "[8 5 3]"},
		// A long row first: the 7 short rows, served first, go together (4.8 ms) and the long
		// one alone after them (5.2 ms). Padding them to it (27.6 ms) would give more texts
		// per ms but cost more than the two runs.
		{"linear cpu, a long row first", linearCost, append([]int{64}, repeat(7, 8)...), "[7 1]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b, f, obs := calibrated(t, runtime.DefaultBatchConfig(), tc.cost)
				defer b.Close()
				got := queueBehindBusy(t, b, obs, tc.lengths, func(i, _ int, out []runtime.Tensor) error {
					if out[0].Data[0] != float32(i+1) {
						return fmt.Errorf("got %v", out)
					}
					return nil
				})
				if got != tc.want {
					t.Errorf("batches %s, want %s (shapes %v)", got, tc.want, f.shapes[1:])
				}
				for _, sh := range f.shapes[1:] {
					if len(tc.lengths) > 0 && sh[1] != 8 && sh[1] != 16 && sh[1] != 64 {
						t.Errorf("a batch padded to %d tokens", sh[1])
					}
				}
			})
		})
	}
}

// queueBehindBusy keeps b's one session busy with a long row, then queues one request a
// length, each one row whose first id is its number (1, 2, …), and checks each answer with
// check. It returns the batches formed after the busy one, in rows.
func queueBehindBusy(t *testing.T, b *runtime.Batcher, obs *countingObserver, lengths []int, check func(i, n int, out []runtime.Tensor) error) string {
	t.Helper()
	var wg sync.WaitGroup
	wg.Go(func() { b.Execute(t.Context(), []tokenize.Encoding{enc(0, 128)}) }) // busy
	synctest.Wait()
	for i, n := range lengths {
		wg.Go(func() {
			out, _, err := b.Execute(t.Context(), []tokenize.Encoding{enc(int64(i+1), n)})
			if err == nil {
				err = check(i, n, out)
			}
			if err != nil {
				t.Errorf("request %d: %v", i, err)
			}
		})
		synctest.Wait()
	}
	wg.Wait()
	obs.mu.Lock()
	defer obs.mu.Unlock()
	return fmt.Sprint(obs.batches[1:])
}

func repeat(n, v int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// Queued rows are served shortest first, unless a row has waited 8 times its own run: then
// it goes first. With OrderArrival, first come, first served. On cpuCost batching does not
// pay, so each row runs alone and the order of the runs is the order of service.
func TestBatcherServesShortestFirst(t *testing.T) {
	for _, tc := range []struct {
		name  string
		order runtime.Order
		// busy is how long the one session is kept busy (in tokens of one row) before the
		// queue is served; late are rows queued 100 ms after the first ones.
		busy        int
		early, late []int
		want        string // the tokens of each run after the busy one
	}{
		{"shortest first", runtime.OrderShortest, 128, []int{64, 8, 32, 16}, nil, "[8 16 32 64]"},
		{"arrival order", runtime.OrderArrival, 128, []int{64, 8, 32, 16}, nil, "[64 8 32 16]"},
		// The 64-token row (6.6 ms alone) has waited over 8 × that when the session frees,
		// at 103 ms: it is due, and goes before the shorter rows queued at 100 ms.
		{"a row due goes first", runtime.OrderShortest, 1024, []int{64}, []int{16, 8}, "[64 8 16]"},
		// Due rows go oldest first (the 32-token row is due after 27 ms), then the others
		// shortest first.
		{"due rows oldest first", runtime.OrderShortest, 1024, []int{64, 32}, []int{16, 8}, "[64 32 8 16]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := runtime.DefaultBatchConfig()
				c.Order = tc.order
				b, f, _ := calibrated(t, c, cpuCost)
				defer b.Close()
				var wg sync.WaitGroup
				wg.Go(func() { b.Execute(t.Context(), []tokenize.Encoding{enc(0, tc.busy)}) })
				synctest.Wait()
				queue := func(lengths []int) {
					for _, n := range lengths {
						wg.Go(func() {
							if _, _, err := b.Execute(t.Context(), []tokenize.Encoding{enc(1, n)}); err != nil {
								t.Error(err)
							}
						})
						synctest.Wait()
					}
				}
				queue(tc.early)
				if tc.late != nil {
					time.Sleep(100 * time.Millisecond)
					queue(tc.late)
				}
				wg.Wait()
				f.mu.Lock()
				defer f.mu.Unlock()
				var got []int
				for _, sh := range f.shapes[1:] {
					if sh[0] != 1 {
						t.Errorf("a batch of %d rows, want one at a time", sh[0])
					}
					got = append(got, sh[1])
				}
				if fmt.Sprint(got) != tc.want {
					t.Errorf("runs of %v tokens, want %s", got, tc.want)
				}
			})
		})
	}
}

// Several free sessions share the queue instead of one taking it all.
func TestBatcherSpreadsOverFreeSessions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ss []runtime.Session
		var fs []*fakeSession
		for range 4 {
			f := &fakeSession{cost: gpuCost}
			fs = append(fs, f)
			ss = append(ss, f)
		}
		c := runtime.DefaultBatchConfig()
		c.MaxQueueDelay = time.Millisecond // let 16 rows gather while all four sessions are free
		b := runtime.NewBatcher(c, runtime.NewPool(ss), nil)
		defer b.Close()
		var wg sync.WaitGroup
		for i := range 16 {
			wg.Go(func() { b.Execute(t.Context(), []tokenize.Encoding{enc(int64(i), 16)}) })
		}
		wg.Wait()
		for i, f := range fs {
			if f.runs != 1 || f.shapes[0][0] != 4 {
				t.Errorf("session %d ran %v, want one batch of 4", i, f.shapes)
			}
		}
	})
}
