package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ortserve/ortserve/runtime"
	"github.com/ortserve/ortserve/tokenize"
)

// fakeSession takes delay per run (or cost(rows, cols), when set) and returns row i filled
// with the row's first token id.
type fakeSession struct {
	delay  time.Duration
	cost   func(rows, cols int) time.Duration
	mu     sync.Mutex
	runs   int
	shapes [][2]int // rows, cols of each run
	closed bool
}

func (f *fakeSession) Run(ctx context.Context, b tokenize.Batch) (runtime.Tensor, error) {
	f.mu.Lock()
	f.runs++
	f.shapes = append(f.shapes, [2]int{b.Rows, b.Cols})
	closed := f.closed
	f.mu.Unlock()
	if closed {
		return runtime.Tensor{}, errors.New("run on a closed session")
	}
	d := f.delay
	if f.cost != nil {
		d = f.cost(b.Rows, b.Cols)
	}
	select {
	case <-time.After(d):
	case <-ctx.Done():
		return runtime.Tensor{}, ctx.Err()
	}
	out := runtime.Tensor{Shape: []int64{int64(b.Rows), 2}, Data: make([]float32, 2*b.Rows)}
	for i := range b.Rows {
		out.Data[2*i] = float32(b.InputIDs[i*b.Cols])
		out.Data[2*i+1] = float32(b.Cols)
	}
	return out, nil
}

func (f *fakeSession) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	return nil
}

func TestPoolRunsOneBatchPerSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := &fakeSession{delay: 10 * time.Millisecond}, &fakeSession{delay: 10 * time.Millisecond}
		p := runtime.NewPool([]runtime.Session{a, b})
		batch := tokenize.Pad([]tokenize.Encoding{{IDs: []int64{7}}})
		start := time.Now()
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				if _, err := p.Run(t.Context(), batch); err != nil {
					t.Error(err)
				}
			})
		}
		synctest.Wait()
		if p.InUse() != 2 {
			t.Errorf("in use: %d, want 2", p.InUse())
		}
		wg.Wait()
		// Four 10 ms runs on two sessions take two rounds.
		if d := time.Since(start); d != 20*time.Millisecond {
			t.Errorf("took %v, want 20ms", d)
		}
		if a.runs != 2 || b.runs != 2 {
			t.Errorf("runs %d and %d, want 2 each", a.runs, b.runs)
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Run(t.Context(), batch); !errors.Is(err, runtime.ErrClosed) {
			t.Errorf("run after close: %v", err)
		}
	})
}

// Before the pool serves, Calibrate runs every batch twice, on the first session only: the
// one whose warm-up serve leaves to it.
func TestCalibrateRunsOnTheFirstSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		first, second := &fakeSession{delay: time.Millisecond}, &fakeSession{delay: time.Millisecond}
		p := runtime.NewPool([]runtime.Session{first, second})
		batches := []tokenize.Batch{
			tokenize.Pad([]tokenize.Encoding{{IDs: []int64{1, 2}}}),
			tokenize.Pad([]tokenize.Encoding{{IDs: []int64{1, 2}}, {IDs: []int64{3, 4}}}),
		}
		if err := p.Calibrate(t.Context(), batches, time.Hour); err != nil {
			t.Fatal(err)
		}
		if want := [][2]int{{1, 2}, {1, 2}, {2, 2}, {2, 2}}; !slices.Equal(first.shapes, want) || second.runs != 0 {
			t.Errorf("first session ran %v, second %d runs; want %v and none", first.shapes, second.runs, want)
		}
	})
}

func TestPoolCancelWhileWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := runtime.NewPool([]runtime.Session{&fakeSession{delay: time.Second}})
		batch := tokenize.Pad([]tokenize.Encoding{{IDs: []int64{1}}})
		go p.Run(t.Context(), batch) // holds the only session for a second
		synctest.Wait()
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		start := time.Now()
		if _, err := p.Run(ctx, batch); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("got %v, want deadline exceeded", err)
		}
		if d := time.Since(start); d != 50*time.Millisecond {
			t.Errorf("gave up after %v, want 50ms", d)
		}
	})
}

func TestPoolCloseWaitsForRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &fakeSession{delay: 100 * time.Millisecond}
		p := runtime.NewPool([]runtime.Session{s})
		batch := tokenize.Pad([]tokenize.Encoding{{IDs: []int64{1}}})
		done := make(chan error, 1)
		go func() { _, err := p.Run(t.Context(), batch); done <- err }()
		synctest.Wait()
		p.Close()
		if err := <-done; err != nil {
			t.Errorf("a run in flight at Close failed: %v", err)
		}
		if !s.closed {
			t.Error("session not closed")
		}
	})
}

func TestTensorRows(t *testing.T) {
	tt := runtime.Tensor{Shape: []int64{2, 2, 3}, Data: []float32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}}
	rows := tt.Rows()
	if len(rows) != 2 || rows[1].Data[0] != 6 || len(rows[1].Data) != 6 || rows[1].Shape[0] != 2 {
		t.Fatalf("%+v", rows)
	}
	if (runtime.Tensor{Shape: []int64{0, 3}}).Rows() != nil {
		t.Error("empty tensor has rows")
	}
}

func TestTensorSegments(t *testing.T) {
	// [1, 4 tokens, 2]: texts of 1, 0 and 3 tokens end to end.
	tt := runtime.Tensor{Shape: []int64{1, 4, 2}, Data: []float32{0, 1, 2, 3, 4, 5, 6, 7}}
	segs := tt.Segments([]int{0, 1, 1}, []int{1, 0, 3})
	want := []runtime.Tensor{
		{Shape: []int64{1, 2}, Data: []float32{0, 1}},
		{Shape: []int64{0, 2}, Data: []float32{}},
		{Shape: []int64{3, 2}, Data: []float32{2, 3, 4, 5, 6, 7}},
	}
	if len(segs) != len(want) {
		t.Fatalf("%d segments", len(segs))
	}
	for i, s := range segs {
		if !slices.Equal(s.Shape, want[i].Shape) || !slices.Equal(s.Data, want[i].Data) || cap(s.Data) != len(s.Data) {
			t.Errorf("segment %d: %+v, want %+v", i, s, want[i])
		}
	}
	// [2 rows, 3 tokens, 1]: row 0 holds text 1 (2 tokens) and a padding token, row 1 text 0.
	tt = runtime.Tensor{Shape: []int64{2, 3, 1}, Data: []float32{0, 1, 2, 3, 4, 5}}
	segs = tt.Segments([]int{3, 0}, []int{3, 2})
	if len(segs) != 2 || !slices.Equal(segs[0].Data, []float32{3, 4, 5}) || !slices.Equal(segs[1].Data, []float32{0, 1}) ||
		!slices.Equal(segs[0].Shape, []int64{3, 1}) || !slices.Equal(segs[1].Shape, []int64{2, 1}) {
		t.Errorf("segments of two rows: %+v", segs)
	}
}

// recorder is a packingSession that keeps every batch it runs.
type recorder struct {
	packingSession
	batches []tokenize.Batch
}

func (r *recorder) Run(ctx context.Context, b tokenize.Batch) (runtime.Tensor, error) {
	r.mu.Lock()
	r.batches = append(r.batches, b)
	r.mu.Unlock()
	return r.packingSession.Run(ctx, b)
}

// RunFixed runs its texts as one batch, whatever the bounds a batcher would split them by, laid
// out by the texts alone (packed: one row, where the batcher's cost model takes several), and
// answers each text with its own outputs, as the batcher does.
func TestPoolRunFixed(t *testing.T) {
	// A fixed cost worth sharing, and attention's: the batcher takes every text into one
	// batch, packed in several rows.
	cost := attentionCost(50*time.Millisecond, time.Microsecond, time.Microsecond)
	encs := []tokenize.Encoding{enc(1, 40), enc(2, 8), enc(3, 36), enc(4, 12), enc(5, 30)}
	for _, packed := range []bool{false, true} {
		t.Run(fmt.Sprintf("packed %v", packed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rec := &recorder{packingSession: packingSession{fakeSession{cost: cost}}}
				pool := runtime.NewPool([]runtime.Session{rec})
				if err := pool.Calibrate(t.Context(), runtime.CalibrationBatches(8, packed), time.Hour); err != nil {
					t.Fatal(err)
				}
				c := runtime.DefaultBatchConfig()
				c.Packing = packed
				b := runtime.NewBatcher(c, pool, nil)
				defer b.Close()
				rec.batches = nil
				viaBatcher, _, err := b.Execute(t.Context(), encs)
				if err != nil {
					t.Fatal(err)
				}
				direct, err := pool.RunFixed(t.Context(), encs, packed)
				if err != nil {
					t.Fatal(err)
				}
				if len(rec.batches) != 2 {
					t.Fatalf("%d batches, want one from the batcher and one from RunFixed", len(rec.batches))
				}
				served, fixed := rec.batches[0], rec.batches[1]
				wantRows, wantCols := len(encs), 40 // padded: one text a row
				if packed {
					wantRows, wantCols = 1, 40+8+36+12+30
					if served.Rows < 2 {
						t.Errorf("the batcher packed one row: attention should make several rows cheaper, and the test show RunFixed's layout apart")
					}
				}
				if fixed.Rows != wantRows || fixed.Cols != wantCols || fixed.Packed != packed {
					t.Errorf("RunFixed ran a %d×%d batch (packed %v), want %d×%d", fixed.Rows, fixed.Cols, fixed.Packed, wantRows, wantCols)
				}
				// The fake answers each token with its text's id, then its place in its row's mask:
				// the ids must match; the places differ where the rows do.
				for i, o := range direct {
					if o.Data[0] != float32(i+1) || !slices.Equal(o.Shape, viaBatcher[i].Shape) || (!packed && !slices.Equal(o.Data, viaBatcher[i].Data)) {
						t.Errorf("text %d: %v directly, %v through the batcher", i, o, viaBatcher[i])
					}
				}
			})
		})
	}
	t.Run("packed on sessions that do not pack", func(t *testing.T) {
		pool := runtime.NewPool([]runtime.Session{&fakeSession{}})
		if _, err := pool.RunFixed(t.Context(), encs, true); err == nil {
			t.Error("no error")
		}
		if out, err := pool.RunFixed(t.Context(), nil, false); out != nil || err != nil {
			t.Errorf("no texts: %v, %v", out, err)
		}
	})
}

// CalibrateServing measures while the pool serves: it hands the session back between shapes,
// so requests are answered before it ends, one row a batch while it runs; once it ends the
// batcher forms batches again, and every shape was measured twice, the second run recorded.
func TestCalibrateServing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeSession{delay: 10 * time.Millisecond}
		p := runtime.NewPool([]runtime.Session{f})
		batches := runtime.CalibrationBatches(8, false) // 8 shapes of 16 and 48 columns
		done := p.CalibrateServing(t.Context(), nil, batches, time.Hour)
		if !p.Calibrating() {
			t.Fatal("not Calibrating once CalibrateServing has returned")
		}
		obs := &countingObserver{}
		c := runtime.DefaultBatchConfig()
		c.MaxBatchSize, c.Packing = 8, false
		b := runtime.NewBatcher(c, p, obs)
		defer b.Close()
		execute := func(n int) {
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					if _, _, err := b.Execute(t.Context(), []tokenize.Encoding{enc(int64(i), 5)}); err != nil {
						t.Error(err)
					}
				})
			}
			wg.Wait()
		}
		execute(4)
		select {
		case err := <-done:
			t.Fatalf("calibration ended (%v) before 4 requests that came while it ran were answered", err)
		default:
		}
		if got := fmt.Sprint(obs.batches); got != "[1 1 1 1]" {
			t.Errorf("batches while calibrating %s; want one row each", got)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if p.Calibrating() {
			t.Error("still Calibrating after the calibration ended")
		}
		measured := 0
		for _, sh := range f.shapes {
			if sh[1] != 5 {
				measured++
			}
		}
		if want := 2 * len(batches); measured != want || len(p.Calibration()) != len(batches) {
			t.Errorf("%d calibration runs, %d recorded; want %d and %d", measured, len(p.Calibration()), want, len(batches))
		}
		obs.batches = nil
		execute(8)
		if len(obs.batches) == 8 {
			t.Errorf("batches after calibrating %v; want some of several rows", obs.batches)
		}
	})
}

// Ending CalibrateServing's context stops it with the context's error.
func TestCalibrateServingStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := runtime.NewPool([]runtime.Session{&fakeSession{delay: 10 * time.Millisecond}})
		ctx, cancel := context.WithCancel(t.Context())
		done := p.CalibrateServing(ctx, nil, runtime.CalibrationBatches(8, false), time.Hour)
		time.Sleep(25 * time.Millisecond) // within the second shape, on the fake clock
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) || p.Calibrating() {
			t.Errorf("after cancel: %v, calibrating %v; want context.Canceled, not calibrating", err, p.Calibrating())
		}

		// Held back by after, it runs nothing until after is closed; a cancel while held
		// stops it too.
		f := &fakeSession{delay: 10 * time.Millisecond}
		p = runtime.NewPool([]runtime.Session{f})
		after := make(chan struct{})
		done = p.CalibrateServing(t.Context(), after, runtime.CalibrationBatches(2, false), time.Hour)
		time.Sleep(time.Second)
		if f.runs != 0 || !p.Calibrating() {
			t.Errorf("held: %d runs, calibrating %v; want none, and calibrating", f.runs, p.Calibrating())
		}
		close(after)
		if err := <-done; err != nil || f.runs == 0 {
			t.Errorf("released: %v, %d runs", err, f.runs)
		}
		ctx, cancel = context.WithCancel(t.Context())
		done = runtime.NewPool([]runtime.Session{f}).CalibrateServing(ctx, make(chan struct{}), nil, time.Hour)
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled while held: %v", err)
		}
	})
}
