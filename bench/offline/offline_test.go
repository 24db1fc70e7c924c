package offline_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ortserve/ortserve/bench"
	"github.com/ortserve/ortserve/bench/offline"
	"github.com/ortserve/ortserve/runtime"
	"github.com/ortserve/ortserve/tokenize"
)

var errBoom = errors.New("fake: boom")

// fakeSession takes took per run on the fake clock, and fails its failAt-th run (1-based)
// with errBoom. It records the first token of each row of every batch it ran.
type fakeSession struct {
	took     time.Duration
	failAt   int
	closeErr error

	mu     sync.Mutex
	runs   int
	rows   [][]int64
	closed bool
}

func (s *fakeSession) Run(ctx context.Context, b tokenize.Batch) (runtime.Tensor, error) {
	s.mu.Lock()
	s.runs++
	n := s.runs
	var firsts []int64
	for r := range b.Rows {
		firsts = append(firsts, b.InputIDs[r*b.Cols])
	}
	s.rows = append(s.rows, firsts)
	s.mu.Unlock()
	if n == s.failAt {
		return runtime.Tensor{}, errBoom
	}
	select {
	case <-time.After(s.took):
		return runtime.Tensor{Shape: []int64{int64(b.Rows), 1}, Data: make([]float32, b.Rows)}, nil
	case <-ctx.Done():
		return runtime.Tensor{}, fmt.Errorf("fake: run cut short: %w", ctx.Err())
	}
}

func (s *fakeSession) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return s.closeErr
}

// encodings are n encodings whose first tokens are 1..n and whose lengths vary.
func encodings(n int) []tokenize.Encoding {
	encs := make([]tokenize.Encoding, n)
	for i := range encs {
		ids := make([]int64, 1+i%3)
		ids[0] = int64(i + 1)
		encs[i] = tokenize.Encoding{IDs: ids, TypeIDs: make([]int64, len(ids))}
	}
	return encs
}

func rig(sessions ...*fakeSession) *offline.Rig {
	r := &offline.Rig{Encodings: encodings(5)}
	for _, s := range sessions {
		r.Sessions = append(r.Sessions, s)
	}
	return r
}

func TestMeasure(t *testing.T) {
	tests := []struct {
		name  string
		took  []time.Duration // per session
		batch int
		want  bench.OfflinePoint
	}{
		// Two sessions of 10 ms runs for 100 ms: 10 runs each of 4 texts, 80 texts in 0.1 s.
		{"even", []time.Duration{10 * time.Millisecond, 10 * time.Millisecond}, 4, bench.OfflinePoint{Batch: 4, ItemsPerS: 800, P50: 10}},
		// The slow session's last run ends at 120 ms: 10 + 4 runs of 2 texts in 0.12 s; the
		// median of the 14 runs is a fast one.
		{"uneven", []time.Duration{10 * time.Millisecond, 30 * time.Millisecond}, 2, bench.OfflinePoint{Batch: 2, ItemsPerS: 28 / 0.12, P50: 10}},
		{"one session", []time.Duration{25 * time.Millisecond}, 1, bench.OfflinePoint{Batch: 1, ItemsPerS: 4 / 0.1, P50: 25}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var sessions []*fakeSession
				for _, d := range tt.took {
					sessions = append(sessions, &fakeSession{took: d})
				}
				r := rig(sessions...)
				start := time.Now()
				got, err := r.Measure(t.Context(), tt.batch, 100*time.Millisecond)
				if err != nil {
					t.Fatal(err)
				}
				if got.Batch != tt.want.Batch || fmt.Sprintf("%.6f %.6f", got.ItemsPerS, got.P50) != fmt.Sprintf("%.6f %.6f", tt.want.ItemsPerS, tt.want.P50) {
					t.Errorf("got %+v; want %+v", got, tt.want)
				}
				// One un-timed run first, then the measured window.
				if d, want := time.Since(start), slices.Max(tt.took)+(100*time.Millisecond+slices.Max(tt.took)-1)/slices.Max(tt.took)*slices.Max(tt.took); d != want {
					t.Errorf("took %v; want %v", d, want)
				}
			})
		})
	}
}

// The batches are batch consecutive encodings, wrapping round the workload, padded once:
// with 5 texts and batch 2, [1 2] [3 4] [5 1], again and again.
func TestMeasureBatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &fakeSession{took: 10 * time.Millisecond}
		if _, err := rig(s).Measure(t.Context(), 2, 50*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		want := [][]int64{{1, 2}, {1, 2}, {3, 4}, {5, 1}, {1, 2}, {3, 4}} // the warm-up run, then 5 timed
		if fmt.Sprint(s.rows) != fmt.Sprint(want) {
			t.Errorf("rows %v; want %v", s.rows, want)
		}
	})
}

func TestMeasureErrors(t *testing.T) {
	tests := []struct {
		name  string
		r     *offline.Rig
		batch int
		is    error
		want  string
	}{
		{"batch 0", rig(&fakeSession{}), 0, nil, "offline: batch size 0: want at least 1"},
		{"batch -1", rig(&fakeSession{}), -1, nil, "offline: batch size -1: want at least 1"},
		{"no texts", &offline.Rig{Sessions: []runtime.Session{&fakeSession{}}}, 1, offline.ErrNoTexts, "offline: no texts to run"},
		{"no sessions", &offline.Rig{Encodings: encodings(1)}, 1, nil, "offline: no sessions to run"},
		{"a warm-up run fails", rig(&fakeSession{took: time.Millisecond}, &fakeSession{took: time.Millisecond, failAt: 1}), 1, errBoom, "fake: boom"},
		{"a timed run fails", rig(&fakeSession{took: time.Millisecond}, &fakeSession{took: time.Millisecond, failAt: 3}), 1, errBoom, "fake: boom"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				_, err := tt.r.Measure(t.Context(), tt.batch, time.Hour)
				if err == nil || err.Error() != tt.want || (tt.is != nil && !errors.Is(err, tt.is)) {
					t.Errorf("error %v; want %q", err, tt.want)
				}
			})
		})
	}
}

// A context that ends stops every session, and Measure says plainly that it ended, not the
// sessions' wrapped errors.
func TestMeasureContext(t *testing.T) {
	for _, tt := range []struct {
		name string
		ctx  func(context.Context) (context.Context, context.CancelFunc)
		want error
	}{
		{"cancelled", func(ctx context.Context) (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(ctx)
			time.AfterFunc(55*time.Millisecond, cancel)
			return ctx, cancel
		}, context.Canceled},
		{"deadline", func(ctx context.Context) (context.Context, context.CancelFunc) {
			return context.WithTimeout(ctx, 55*time.Millisecond)
		}, context.DeadlineExceeded},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := tt.ctx(t.Context())
				defer cancel()
				start := time.Now()
				_, err := rig(&fakeSession{took: 10 * time.Millisecond}, &fakeSession{took: 10 * time.Millisecond}).Measure(ctx, 4, time.Hour)
				if err != tt.want { //nolint:errorlint // the error itself, not one wrapping it
					t.Errorf("error %v; want %v itself", err, tt.want)
				}
				if d := time.Since(start); d != 55*time.Millisecond {
					t.Errorf("returned after %v; want at once when ctx ended, 55ms", d)
				}
			})
		})
	}
}

func TestLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sessions := []*fakeSession{{took: 10 * time.Millisecond}, {took: 10 * time.Millisecond}}
		opened := 0
		open := func(context.Context) (*offline.Rig, error) {
			opened++
			return rig(sessions...), nil
		}
		points, err := offline.Limit(t.Context(), open, []int{1, 4}, 100*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		want := []bench.OfflinePoint{{Batch: 1, ItemsPerS: 200, P50: 10}, {Batch: 4, ItemsPerS: 800, P50: 10}}
		if !slices.Equal(points, want) || opened != 1 {
			t.Errorf("points %+v, opened %d times; want %+v, once", points, opened, want)
		}
		for i, s := range sessions {
			if !s.closed {
				t.Errorf("session %d not closed", i)
			}
		}
	})
}

func TestLimitErrors(t *testing.T) {
	errOpen := errors.New("offline: minilm/fp64: no such version")
	tests := []struct {
		name    string
		batches []int
		openErr error
		opens   int // times open is called
		is      error
		want    string
	}{
		{"batch 0", []int{1, 0}, nil, 0, nil, "offline: batch size 0: want at least 1"},
		{"batch -2", []int{-2}, nil, 0, nil, "offline: batch size -2: want at least 1"},
		{"open fails", []int{1}, errOpen, 1, errOpen, errOpen.Error()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opens := 0
			open := func(context.Context) (*offline.Rig, error) {
				opens++
				if tt.openErr != nil {
					return nil, tt.openErr
				}
				return rig(&fakeSession{}), nil
			}
			points, err := offline.Limit(t.Context(), open, tt.batches, time.Millisecond)
			if points != nil || err == nil || err.Error() != tt.want || (tt.is != nil && !errors.Is(err, tt.is)) || opens != tt.opens {
				t.Errorf("points %v, error %v, %d opens; want none, %q, %d opens", points, err, opens, tt.want, tt.opens)
			}
		})
	}
}

// When ctx ends, Limit returns the batch sizes measured so far, with ctx.Err(), and closes
// the sessions.
func TestLimitDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Batch 1 takes 10 ms of warm-up and 100 ms; batch 2 is cut short at 150 ms.
		ctx, cancel := context.WithTimeout(t.Context(), 150*time.Millisecond)
		defer cancel()
		s := &fakeSession{took: 10 * time.Millisecond}
		open := func(context.Context) (*offline.Rig, error) { return rig(s), nil }
		points, err := offline.Limit(ctx, open, []int{1, 2, 4}, 100*time.Millisecond)
		if !errors.Is(err, context.DeadlineExceeded) || len(points) != 1 || points[0].Batch != 1 || !s.closed {
			t.Errorf("points %+v, error %v, closed %v; want batch 1 only, the deadline, closed", points, err, s.closed)
		}
	})
}

func TestClose(t *testing.T) {
	errA, errB := errors.New("a"), errors.New("b")
	a, b, c := &fakeSession{closeErr: errA}, &fakeSession{}, &fakeSession{closeErr: errB}
	r := rig(a, b, c)
	err := r.Close()
	if !errors.Is(err, errA) || !errors.Is(err, errB) || !a.closed || !b.closed || !c.closed || r.Sessions != nil {
		t.Errorf("error %v, closed %v %v %v, sessions %v; want a and b joined, all closed, none left", err, a.closed, b.closed, c.closed, r.Sessions)
	}
	if err := r.Close(); err != nil {
		t.Errorf("second close: %v", err)
	}
}

func TestBatches(t *testing.T) {
	tests := []struct {
		most int
		want []int
	}{
		{0, nil},
		{-3, nil},
		{1, []int{1}},
		{2, []int{1, 2}},
		{5, []int{1, 2, 4, 5}},
		{8, []int{1, 2, 4, 8}},
		{48, []int{1, 2, 4, 8, 16, 32, 48}},
	}
	for _, tt := range tests {
		if got := offline.Batches(tt.most); !slices.Equal(got, tt.want) {
			t.Errorf("Batches(%d) = %v; want %v", tt.most, got, tt.want)
		}
	}
}

func TestSlowest(t *testing.T) {
	pts := func(items ...float64) (out []bench.OfflinePoint) {
		for i, v := range items {
			out = append(out, bench.OfflinePoint{Batch: i + 1, ItemsPerS: v})
		}
		return out
	}
	tests := []struct {
		name string
		m    map[string][]bench.OfflinePoint
		want float64
	}{
		{"none", nil, 0},
		{"one version", map[string][]bench.OfflinePoint{"m/fp32": pts(100, 180, 150)}, 180},
		{"the slowest version's best", map[string][]bench.OfflinePoint{"m/fp32": pts(100, 180), "m/int8": pts(400, 600)}, 180},
		{"a version with nothing measured is left out", map[string][]bench.OfflinePoint{"m/fp32": nil, "m/int8": pts(0), "m/fp16": pts(90, 50)}, 90},
	}
	for _, tt := range tests {
		if got := offline.Slowest(tt.m); got != tt.want {
			t.Errorf("%s: %v; want %v", tt.name, got, tt.want)
		}
	}
}

func TestResult(t *testing.T) {
	res := offline.Result{
		Started:  time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("CET", 3600)),
		Setup:    "2 session(s) per version × 1 intra-op thread(s) on cpu, as serve gives them",
		Workload: bench.WorkloadSummary{Source: "built-in", Texts: 201},
		Targets:  []bench.Target{{Model: "minilm", Version: "fp32"}, {Model: "minilm", Version: "int8"}},
		Points: map[string][]bench.OfflinePoint{
			"minilm/fp32": {{Batch: 1, ItemsPerS: 176.51, P50: 9.372}, {Batch: 2, ItemsPerS: 165.07, P50: 19.549}},
			"minilm/int8": {{Batch: 1, ItemsPerS: 828.94, P50: 1.874}},
		},
	}
	r := res.Report("ortserve dev")
	if r.Schema != bench.Schema || r.Tool != "ortserve dev" || !r.Started.Equal(res.Started) || r.Started.Location() != time.UTC ||
		r.Target != "ONNX Runtime offline, in this process (no server)" || r.Host.CPUs < 1 || r.Workload.Texts != 201 ||
		r.Load != (bench.LoadSpec{}) || r.SLO != nil || len(r.Runs) != 1 || len(r.Runs[0].Versions) != 2 {
		t.Fatalf("report %+v", r)
	}
	for i, v := range r.Runs[0].Versions {
		tg := res.Targets[i]
		if v.Name != tg.Name() || v.Model != tg.Model || v.Version != tg.Version || !slices.Equal(v.Offline, res.Points[tg.Name()]) || v.Steps != nil {
			t.Errorf("version %d: %+v; want %s with its offline points and no steps", i, v, tg.Name())
		}
	}
	wantNotes := []string{
		"offline only: raw session throughput with " + res.Setup + ", the texts tokenized beforehand, no HTTP and no batcher; no load was applied",
		"minilm/fp32: batch 1: 176.5 texts/s, p50 9.37 ms; batch 2: 165.1 texts/s, p50 19.55 ms",
		"minilm/int8: batch 1: 828.9 texts/s, p50 1.87 ms",
	}
	if !slices.Equal(r.Notes, wantNotes) {
		t.Errorf("notes\n%s\nwant\n%s", strings.Join(r.Notes, "\n"), strings.Join(wantNotes, "\n"))
	}

	var text strings.Builder
	if err := res.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`Raw ONNX Runtime limit (offline: no server, no HTTP, no batcher)

CPUs      %d (this process's)
Sessions  2 session(s) per version × 1 intra-op thread(s) on cpu, as serve gives them
Workload  built-in: 201 texts

  version      batch  texts/s  p50 ms (one batch)
  minilm/fp32  1      176.5    9.37
  minilm/fp32  2      165.1    19.55
  minilm/int8  1      828.9    1.87
`, r.Host.CPUs)
	if text.String() != want {
		t.Errorf("text\n%s\nwant\n%s", text.String(), want)
	}
}
