package offline

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/ortserve/ortserve/runtime"
	"github.com/ortserve/ortserve/tokenize"
)

// The cost curve against the device: `server bench --offline --curve` calibrates a version's
// cost model as it calibrates at load, then runs a grid of batch layouts and sets what the
// model predicts of each beside what the runs took, so that anyone can see how well the fit
// holds on their own host.

// Layout is one batch of a curve: Rows texts of Tokens tokens each, padded (one text a row)
// or packed (end to end, in the rows the batcher would lay them out in).
type Layout struct {
	Rows, Tokens int
	Packed       bool
}

// Kind is "padded" or "packed".
func (l Layout) Kind() string {
	if l.Packed {
		return "packed"
	}
	return "padded"
}

// String is the layout as the curve's table names it: "8×64 padded".
func (l Layout) String() string { return fmt.Sprintf("%d×%d %s", l.Rows, l.Tokens, l.Kind()) }

// CurveRows and CurveTokens are the grid Grid lays out: texts per batch, and tokens per text.
var (
	CurveRows   = []int{1, 2, 4, 8, 16}
	CurveTokens = []int{16, 32, 64, 128, 256}
)

// Grid is the layouts a curve measures for a version that batches as cfg says and takes
// texts of at most maxLen tokens: every padded layout of CurveRows × CurveTokens within the
// version's largest batch and maxLen, then, if packed, every packed one whose texts fit one
// packed batch (cfg.PackLimit), as the batcher forms no larger.
func Grid(cfg runtime.BatchConfig, maxLen int, packed bool) []Layout {
	var out []Layout
	for _, p := range []bool{false, true} {
		if p && !packed {
			break
		}
		for _, t := range CurveTokens {
			for _, r := range CurveRows {
				if r > cfg.MaxBatchSize || t > maxLen || (p && r*t > cfg.PackLimit()) {
					continue
				}
				out = append(out, Layout{Rows: r, Tokens: t, Packed: p})
			}
		}
	}
	return out
}

// CurvePoint is one layout of a curve: the batch it was laid out as, the time the cost model
// predicts of it and the median of the runs measured.
type CurvePoint struct {
	Layout
	// BatchRows × BatchCols is the tensor the layout ran as: Rows × Tokens padded; packed,
	// fewer, longer rows.
	BatchRows, BatchCols int
	PredictedMs          float64
	MeasuredMs           float64 // the median of Runs runs
	Runs                 int
	// PredictedVs1 and MeasuredVs1 are the time per text against the layout of one text of
	// the same tokens, packed or padded alike: under 1, batching pays. 0 where the grid has
	// no such layout.
	PredictedVs1, MeasuredVs1 float64
	// Calibrated is true when calibration ran the batch's shape: there the model was fitted,
	// elsewhere it interpolates or extrapolates.
	Calibrated bool
}

// ErrorPct is how far the prediction is from the measurement, in percent of the
// measurement: above 0 the model thinks the batch dearer than it is. It is 0 when nothing
// was measured.
func (p CurvePoint) ErrorPct() float64 {
	if p.MeasuredMs <= 0 {
		return 0
	}
	return (p.PredictedMs - p.MeasuredMs) / p.MeasuredMs * 100
}

// perTextVs1 fills each point's PredictedVs1 and MeasuredVs1 from the point of one text of
// the same tokens and kind in points.
func perTextVs1(points []CurvePoint) {
	one := map[Layout]CurvePoint{}
	for _, p := range points {
		if p.Rows == 1 {
			one[p.Layout] = p
		}
	}
	for i, p := range points {
		o, ok := one[Layout{Rows: 1, Tokens: p.Tokens, Packed: p.Packed}]
		if !ok {
			continue
		}
		if o.PredictedMs > 0 {
			points[i].PredictedVs1 = p.PredictedMs / float64(p.Rows) / o.PredictedMs
		}
		if o.MeasuredMs > 0 {
			points[i].MeasuredVs1 = p.MeasuredMs / float64(p.Rows) / o.MeasuredMs
		}
	}
}

// MeasureCurve lays out each layout of grid on what pool's cost model has learned
// (runtime.SyntheticLayout) and predicts its time, all before anything runs, since every run
// the pool makes also teaches the model; then runs each on the pool, one at a time, once to
// warm its shape up and runs times measured. The pool's sessions should be idle: a run
// measured beside others is slower than calibration saw.
func MeasureCurve(ctx context.Context, pool *runtime.Pool, grid []Layout, runs int) ([]CurvePoint, error) {
	if runs < 1 {
		return nil, fmt.Errorf("offline: %d runs a layout: want at least 1", runs)
	}
	cost := pool.Cost()
	points := make([]CurvePoint, len(grid))
	batches := make([]tokenize.Batch, len(grid))
	for i, l := range grid {
		b := runtime.SyntheticLayout(l.Rows, l.Tokens, l.Packed, cost)
		batches[i] = b
		points[i] = CurvePoint{Layout: l, BatchRows: b.Rows, BatchCols: b.Cols, PredictedMs: ms(cost.Predict(b.Rows, b.Cols)), Runs: runs}
	}
	for i, b := range batches {
		times := make([]float64, 0, runs)
		for k := range runs + 1 {
			start := time.Now()
			if _, err := pool.Run(ctx, b); err != nil {
				return points[:i], fmt.Errorf("offline: running %s: %w", grid[i], err)
			}
			if k > 0 {
				times = append(times, ms(time.Since(start)))
			}
		}
		slices.Sort(times)
		points[i].MeasuredMs = median(times)
	}
	perTextVs1(points)
	return points, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// median of sorted xs, which is not empty.
func median(xs []float64) float64 {
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// Curve is one version's measured curve: what its cost model learned at calibration and
// the grid's points.
type Curve struct {
	Name         string     // "minilm/fp32"
	Setup        string     // the session measured, in words
	Observations int        // the calibration runs the model learned from
	Coefficients [4]float64 // k0…k3 in ms (runtime.CostModel.Coefficients)
	Points       []CurvePoint
}

// WriteText writes the curve as a table: a row per layout with the batch it ran as, the
// predicted and measured milliseconds, the error, and the time per text against one text,
// predicted and measured; then the median and the worst error.
func (c Curve) WriteText(w io.Writer) error {
	k := c.Coefficients
	fmt.Fprintf(w, "%s: the cost model after calibration (%d runs) against measured runs; %s\n", c.Name, c.Observations, c.Setup)
	fmt.Fprintf(w, "  cost(r, c) = %.3g + %.3g·r + %.3g·r·c + %.3g·r·c² ms, c in units of 64 tokens\n\n", k[0], k[1], k[2], k[3])
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "layout\trows\ttokens\tran as\tcalibrated\tpredicted ms\tmeasured ms\terror\tper text vs 1, predicted\tmeasured\t")
	var errs []float64
	worst := CurvePoint{}
	for _, p := range c.Points {
		cal := ""
		if p.Calibrated {
			cal = "yes"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d×%d\t%s\t%.2f\t%.2f\t%s\t%s\t%s\t\n", p.Kind(), p.Rows, p.Tokens, p.BatchRows, p.BatchCols,
			cal, p.PredictedMs, p.MeasuredMs, percent(p.ErrorPct()), ratio(p.PredictedVs1), ratio(p.MeasuredVs1))
		errs = append(errs, math.Abs(p.ErrorPct()))
		if math.Abs(p.ErrorPct()) > math.Abs(worst.ErrorPct()) {
			worst = p
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(errs) > 0 {
		slices.Sort(errs)
		fmt.Fprintf(w, "\n  |error|: median %.0f%%, worst %s (%s), over %d layouts, median of %d runs each\n",
			median(errs), percent(worst.ErrorPct()), worst.Layout, len(errs), c.Points[0].Runs)
	}
	_, err := fmt.Fprintln(w)
	return err
}

// percent is a signed whole percentage, "0%" for one that rounds to nothing (not "-0%").
func percent(x float64) string {
	if math.Round(x) == 0 {
		return "0%"
	}
	return fmt.Sprintf("%+.0f%%", x)
}

func ratio(x float64) string {
	if x == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", x)
}

// CurveLoader is a Loader that also says how versions batch: runtime/engine's Engine, whose
// Batch has packing resolved for its device.
type CurveLoader interface {
	Loader
	Batch() runtime.BatchConfig
}

// CurveRig is one session of a version in a pool whose cost model is calibrated: what
// MeasureCurve runs. Close closes the pool.
type CurveRig struct {
	Pool   *runtime.Pool
	Batch  runtime.BatchConfig // the version's batching
	Packed bool                // whether its batches run packed
	MaxLen int                 // its longest input, in tokens
}

// Grid is the rig's layouts (Grid).
func (r *CurveRig) Grid() []Layout { return Grid(r.Batch, r.MaxLen, r.Packed) }

// Close closes the pool and its session.
func (r *CurveRig) Close() error { return r.Pool.Close() }

// Measure runs the rig's grid runs times a layout (MeasureCurve) and returns the curve with
// what the cost model had learned before: the calibration's runs and coefficients. The
// caller names it and says what ran it.
func (r *CurveRig) Measure(ctx context.Context, runs int) (Curve, error) {
	cost := r.Pool.Cost()
	c := Curve{Observations: cost.Observations(), Coefficients: cost.Coefficients()}
	var err error
	c.Points, err = MeasureCurve(ctx, r.Pool, r.Grid(), runs)
	// Calibration ran its batches in order until its budget had passed, one observation each.
	cal := runtime.CalibrationBatches(r.Batch.MaxBatchSize, r.Packed)
	for _, b := range cal[:min(c.Observations, len(cal))] {
		for i, p := range c.Points {
			c.Points[i].Calibrated = p.Calibrated || (p.BatchRows == b.Rows && p.BatchCols == b.Cols)
		}
	}
	return c, err
}

// OpenCurve opens one session of version of the model in dir ("": the config's default) on
// l and calibrates a pool of it as a version calibrates at load (runtime.Pool.Calibrate on
// runtime.CalibrationBatches, for budget), with the engine's batching overridden by the
// model's.
func OpenCurve(ctx context.Context, l CurveLoader, dir, version string, budget time.Duration) (*CurveRig, error) {
	mc, vc, err := versionOf(l, dir, version)
	if err != nil {
		return nil, err
	}
	r := &CurveRig{Batch: mc.Batching.Apply(l.Batch()), MaxLen: mc.MaxLength}
	sessions, err := l.OpenSessions(ctx, filepath.Join(dir, vc.File), mc.Output, 1)
	if err != nil {
		return nil, fmt.Errorf("offline: %s/%s: %w", mc.Name, cmp.Or(version, mc.DefaultVersion), err)
	}
	r.Pool = runtime.NewPool(sessions)
	r.Packed = r.Batch.Packing && r.Pool.Packs()
	if err := r.Pool.Calibrate(ctx, runtime.CalibrationBatches(r.Batch.MaxBatchSize, r.Packed), budget); err != nil {
		return nil, errors.Join(err, r.Pool.Close())
	}
	return r, nil
}
