package offline_test

import (
	"bytes"
	"context"
	"math"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ortserve/ortserve/bench/offline"
	"github.com/ortserve/ortserve/runtime"
	"github.com/ortserve/ortserve/tokenize"
)

func TestCurvePointErrorPct(t *testing.T) {
	for _, tc := range []struct {
		name                string
		predicted, measured float64
		want                float64
	}{
		{"dearer than measured", 10, 8, 25},
		{"cheaper than measured", 6, 8, -25},
		{"exact", 3.5, 3.5, 0},
		{"predicted nothing", 0, 4, -100},
		{"nothing measured", 5, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := offline.CurvePoint{PredictedMs: tc.predicted, MeasuredMs: tc.measured}
			if got := p.ErrorPct(); math.Abs(got-tc.want) > 1e-9 {
				t.Errorf("ErrorPct() = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestGrid(t *testing.T) {
	def := runtime.DefaultBatchConfig()
	small := def
	small.MaxBatchSize = 4
	tight := def
	tight.MaxBatchTokens = 128 // packed batches of at most 128 tokens
	for _, tc := range []struct {
		name           string
		cfg            runtime.BatchConfig
		maxLen         int
		packed         bool
		padded         int
		longestPadded  int
		largestPackedN int // most tokens of a packed layout
	}{
		{"default, packed", def, 256, true, 25, 256, 512},
		{"default, padded only", def, 256, false, 25, 256, 0},
		{"max batch 4, max length 64", small, 64, false, 9, 64, 0},
		{"pack limit 128", tight, 512, true, 25, 256, 128},
		{"max batch 1", runtime.BatchConfig{MaxBatchSize: 1}, 128, true, 4, 128, 128},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var padded, packs, longest, most int
			for _, l := range offline.Grid(tc.cfg, tc.maxLen, tc.packed) {
				if l.Rows > tc.cfg.MaxBatchSize || l.Tokens > tc.maxLen {
					t.Errorf("%v: past max batch %d or max length %d", l, tc.cfg.MaxBatchSize, tc.maxLen)
				}
				if l.Packed {
					packs++
					most = max(most, l.Rows*l.Tokens)
				} else {
					padded++
					longest = max(longest, l.Tokens)
				}
			}
			if padded != tc.padded || longest != tc.longestPadded || most != tc.largestPackedN {
				t.Errorf("padded %d (longest %d), packed up to %d tokens; want %d (longest %d), up to %d",
					padded, longest, most, tc.padded, tc.longestPadded, tc.largestPackedN)
			}
			if !tc.packed && packs > 0 {
				t.Errorf("%d packed layouts for a version that does not pack", packs)
			}
		})
	}
}

// linearSession takes linearCost of each batch on the fake clock: a cost the model's terms
// hold exactly, so that a calibrated model predicts every layout.
type linearSession struct {
	packs  bool
	failAt int // the run (1-based) that fails; 0: none
	runs   int
}

func linearCost(rows, cols int) time.Duration {
	r, c := float64(rows), float64(cols)/64
	return time.Duration((2 + 0.5*r + r*c) * float64(time.Millisecond))
}

func (s *linearSession) Run(_ context.Context, b tokenize.Batch) (runtime.Tensor, error) {
	s.runs++
	if s.runs == s.failAt {
		return runtime.Tensor{}, errBoom
	}
	time.Sleep(linearCost(b.Rows, b.Cols))
	return runtime.Tensor{Shape: []int64{int64(b.Rows), 1}, Data: make([]float32, b.Rows)}, nil
}

func (s *linearSession) Close() error { return nil }
func (s *linearSession) Packs() bool  { return s.packs }

// calibrated is a pool of s whose cost model has run every calibration batch.
func calibrated(t *testing.T, s *linearSession) *runtime.Pool {
	t.Helper()
	p := runtime.NewPool([]runtime.Session{s})
	if err := p.Calibrate(t.Context(), runtime.CalibrationBatches(16, s.packs), time.Hour); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func TestMeasureCurve(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pool := calibrated(t, &linearSession{packs: true})
		grid := offline.Grid(runtime.DefaultBatchConfig(), 256, true)
		pts, err := offline.MeasureCurve(t.Context(), pool, grid, 3)
		if err != nil {
			t.Fatal(err)
		}
		if len(pts) != len(grid) {
			t.Fatalf("%d points for %d layouts", len(pts), len(grid))
		}
		for _, p := range pts {
			want := float64(linearCost(p.BatchRows, p.BatchCols)) / float64(time.Millisecond)
			if p.MeasuredMs != want || p.Runs != 3 {
				t.Errorf("%v: measured %.3f ms over %d runs, want %.3f over 3", p.Layout, p.MeasuredMs, p.Runs, want)
			}
			if math.Abs(p.ErrorPct()) > 1 {
				t.Errorf("%v: predicted %.3f ms, measured %.3f: error %.2f%% on a cost the model holds exactly", p.Layout, p.PredictedMs, p.MeasuredMs, p.ErrorPct())
			}
			// A padded layout runs as it is; a packed one, with a cost per row, as one row.
			wantRows, wantCols := p.Rows, p.Tokens
			if p.Packed {
				wantRows, wantCols = 1, p.Rows*p.Tokens
			}
			if p.BatchRows != wantRows || p.BatchCols != wantCols {
				t.Errorf("%v ran as %d×%d, want %d×%d", p.Layout, p.BatchRows, p.BatchCols, wantRows, wantCols)
			}
			one := float64(linearCost(1, p.Tokens)) / float64(time.Millisecond)
			if vs1 := want / float64(p.Rows) / one; math.Abs(p.MeasuredVs1-vs1) > 1e-9 || math.Abs(p.PredictedVs1-vs1) > 0.01 {
				t.Errorf("%v: per text vs 1 measured %.4f, predicted %.4f; want %.4f", p.Layout, p.MeasuredVs1, p.PredictedVs1, vs1)
			}
		}
	})
}

func TestMeasureCurveFails(t *testing.T) {
	grid := []offline.Layout{{Rows: 1, Tokens: 16}, {Rows: 2, Tokens: 16}, {Rows: 4, Tokens: 16}}
	for _, tc := range []struct {
		name     string
		runs     int
		failAt   int // counted from the first run after calibration
		measured int
		wantErr  string
	}{
		{"no runs", 0, 0, 0, "want at least 1"},
		// Each layout runs once to warm up, then twice: the 4th run is the second layout's warm-up.
		{"a run fails", 2, 4, 1, "running 2×16 padded: fake: boom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := &linearSession{}
				pool := calibrated(t, s)
				if tc.failAt > 0 {
					s.failAt = s.runs + tc.failAt
				}
				pts, err := offline.MeasureCurve(t.Context(), pool, grid, tc.runs)
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one saying %q", err, tc.wantErr)
				}
				if len(pts) != tc.measured {
					t.Errorf("%d points, want the %d measured before the failure", len(pts), tc.measured)
				}
			})
		})
	}
}

func TestCurveWriteText(t *testing.T) {
	c := offline.Curve{
		Name: "minilm/int8", Setup: "one session", Observations: 8, Coefficients: [4]float64{0.5, 1, 7.5, 5},
		Points: []offline.CurvePoint{
			{Layout: offline.Layout{Rows: 1, Tokens: 16}, BatchRows: 1, BatchCols: 16, PredictedMs: 3.5, MeasuredMs: 4, Runs: 5, PredictedVs1: 1, MeasuredVs1: 1, Calibrated: true},
			{Layout: offline.Layout{Rows: 4, Tokens: 16, Packed: true}, BatchRows: 1, BatchCols: 64, PredictedMs: 12, MeasuredMs: 8, Runs: 5, PredictedVs1: 0.857, MeasuredVs1: 0.5},
			{Layout: offline.Layout{Rows: 2, Tokens: 256}, BatchRows: 2, BatchCols: 256, PredictedMs: 220, MeasuredMs: 200, Runs: 5},
			{Layout: offline.Layout{Rows: 1, Tokens: 64}, BatchRows: 1, BatchCols: 64, PredictedMs: 9.99, MeasuredMs: 10, Runs: 5, PredictedVs1: 1, MeasuredVs1: 1},
		},
	}
	var buf bytes.Buffer
	if err := c.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, tc := range []struct {
		name string
		want []string // the fields of one line
	}{
		{"fit", strings.Fields("cost(r, c) = 0.5 + 1·r + 7.5·r·c + 5·r·c² ms, c in units of 64 tokens")},
		{"calibrated padded", []string{"padded", "1", "16", "1×16", "yes", "3.50", "4.00", "-12%", "1.00", "1.00"}},
		{"packed into one row", []string{"packed", "4", "16", "1×64", "12.00", "8.00", "+50%", "0.86", "0.50"}},
		{"no layout of one text", []string{"padded", "2", "256", "2×256", "220.00", "200.00", "+10%", "–", "–"}},
		{"error under half a percent", []string{"padded", "1", "64", "1×64", "9.99", "10.00", "0%", "1.00", "1.00"}},
		{"summary", strings.Fields("|error|: median 11%, worst +50% (4×16 packed), over 4 layouts, median of 5 runs each")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, line := range strings.Split(out, "\n") {
				if slices.Equal(strings.Fields(line), tc.want) {
					return
				}
			}
			t.Errorf("no line with fields %q in\n%s", tc.want, out)
		})
	}
}

func TestCurveRigMeasure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := runtime.DefaultBatchConfig()
		cfg.MaxBatchSize = 16
		r := &offline.CurveRig{Pool: calibrated(t, &linearSession{packs: true}), Batch: cfg, Packed: true, MaxLen: 256}
		calibration := len(runtime.CalibrationBatches(16, true))
		c, err := r.Measure(t.Context(), 1)
		if err != nil {
			t.Fatal(err)
		}
		// What the model knew before the grid ran, not after: the grid's runs teach it too.
		if c.Observations != calibration {
			t.Errorf("curve of a model after %d observations, want the %d of calibration", c.Observations, calibration)
		}
		if got := r.Pool.Cost().Observations(); got != calibration+2*len(c.Points) {
			t.Errorf("the pool learned from %d runs, want %d: calibration and each layout twice", got, calibration+2*len(c.Points))
		}
		// A packed pool calibrates one row of 16 to 512 tokens, and 2, 4 and 8 rows of 32 and 64.
		want := map[offline.Layout]bool{
			{Rows: 1, Tokens: 16}:                true,
			{Rows: 2, Tokens: 16, Packed: true}:  true, // ran as one row of 32
			{Rows: 2, Tokens: 256, Packed: true}: true, // ran as one row of 512
			{Rows: 4, Tokens: 64}:                true,
			{Rows: 16, Tokens: 16}:               false,
			{Rows: 8, Tokens: 128}:               false,
		}
		for _, p := range c.Points {
			if w, ok := want[p.Layout]; ok && p.Calibrated != w {
				t.Errorf("%v (ran as %d×%d): calibrated %v, want %v", p.Layout, p.BatchRows, p.BatchCols, p.Calibrated, w)
			}
		}
	})
}
