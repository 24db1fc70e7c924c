package runtime

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/ortserve/ortserve/tokenize"
)

// Calibration: the runs that seed a pool's cost model before it serves.

// Calibrate seeds the cost model: it runs each batch twice on one session, the first run
// warming the shape up (on CUDA it picks kernels), and records the second. It stops early,
// without error, once budget has passed, so a slow device measures fewer shapes; give the
// batches cheapest first. It is meant for start-up, before the pool serves: then it runs on
// the first of the sessions NewPool was given, which it warms up (serve does not warm that
// one again).
func (p *Pool) Calibrate(ctx context.Context, batches []tokenize.Batch, budget time.Duration) error {
	s, err := p.acquire(ctx)
	if err != nil {
		return err
	}
	defer func() { p.free <- s }()
	start := time.Now()
	for _, b := range batches {
		if _, err := s.Run(ctx, b); err != nil {
			return fmt.Errorf("runtime: calibrating %d×%d: %w", b.Rows, b.Cols, err)
		}
		t := time.Now()
		if _, err := s.Run(ctx, b); err != nil {
			return fmt.Errorf("runtime: calibrating %d×%d: %w", b.Rows, b.Cols, err)
		}
		d := time.Since(t)
		p.cost.Observe(b.Rows, b.Cols, d, true)
		p.calibration = append(p.calibration, Observation{Rows: b.Rows, Cols: b.Cols, Duration: d})
		if time.Since(start) > budget {
			break
		}
	}
	return nil
}

// CalibrationFormat is the version of what a calibration measures and records
// (CalibrationBatches, Observation). A store of calibrations keys on it, so that one made
// before either changed is measured anew: bump it when they do.
const CalibrationFormat = 1

// Observation is one calibration run: a batch of Rows × Cols padded tokens took Duration.
type Observation struct {
	Rows     int           `json:"rows"`
	Cols     int           `json:"cols"`
	Duration time.Duration `json:"ns"`
}

// Calibration are the runs that seeded the cost model, in order: those Calibrate measured, or
// those Seed gave. It is meant for start-up, as Calibrate is: a store of calibrations keeps
// them so that the next start of the same version on the same device may Seed them.
func (p *Pool) Calibration() []Observation { return slices.Clone(p.calibration) }

// Seed seeds the cost model with runs measured before, in place of Calibrate: the
// Calibration of a pool of the same graph on the same device, sessions and batching. It runs
// nothing, so the sessions stay as cold as they were: warm them up before they serve.
// Observations that could not be a run (no rows, no time) are left out.
func (p *Pool) Seed(obs []Observation) {
	for _, o := range obs {
		if o.Rows < 1 || o.Cols < 1 || o.Duration <= 0 {
			continue
		}
		p.cost.Observe(o.Rows, o.Cols, o.Duration, true)
		p.calibration = append(p.calibration, o)
	}
}

// CalibrationBatches are the shapes a version's cost model is seeded with, cheapest first:
// batches of 1, 2, 4, … up to maxBatch rows, at two lengths, so that the fit sees both what
// rows and what padding cost; packed, one row of 16, 32, … up to MaxPackTokens tokens, and 2,
// 4 and 8 rows (at most maxBatch) of 32 and 64, so that the fit tells a row's attention, the
// square of its length, from the cost of another row (packed batches may run as several
// rows). The mask's values do not change what a shape costs, so the batches are padded ones.
// Pool.Calibrate stops at its budget, so a slow device measures the small shapes and learns
// the large ones from the batches it serves.
func CalibrationBatches(maxBatch int, packed bool) []tokenize.Batch {
	type shape struct{ rows, cols int }
	var shapes []shape
	switch {
	case packed:
		for cols := 16; cols <= MaxPackTokens; cols *= 2 {
			shapes = append(shapes, shape{1, cols})
		}
		for _, cols := range []int{32, 64} {
			for rows := 2; rows <= min(8, maxBatch); rows *= 2 {
				shapes = append(shapes, shape{rows, cols})
			}
		}
	default:
		for _, cols := range []int{16, 48} {
			for rows := 1; ; rows *= 2 {
				shapes = append(shapes, shape{min(rows, maxBatch), cols})
				if rows >= maxBatch {
					break
				}
			}
		}
	}
	slices.SortStableFunc(shapes, func(a, b shape) int { return a.rows*a.cols - b.rows*b.cols })
	out := make([]tokenize.Batch, len(shapes))
	for i, s := range shapes {
		out[i] = SyntheticBatch(s.rows, s.cols)
	}
	return out
}

// SyntheticBatch is rows texts of cols [CLS]-like ids, padded: the shape that warm-up and
// calibration run, whose cost does not depend on which tokens fill it.
func SyntheticBatch(rows, cols int) tokenize.Batch {
	return tokenize.Pad(syntheticTexts(rows, cols))
}

// SyntheticLayout is rows of SyntheticBatch's texts of cols ids, laid out as the batcher lays
// out a batch of them on what cost has learned: packed, end to end in the rows packRows
// chooses (the layout Curve predicts), or padded, one text a row. Predicting its Rows × Cols
// is then what the planner predicts of that batch; `server bench --offline --curve` runs it to
// see how far the learned curve is from the device.
func SyntheticLayout(rows, cols int, packed bool, cost *CostModel) tokenize.Batch {
	return layOut(syntheticTexts(rows, cols), layout(slices.Repeat([]int{cols}, rows), packed, cost.Predict))
}

func syntheticTexts(rows, cols int) []tokenize.Encoding {
	encs := make([]tokenize.Encoding, rows)
	for i := range encs {
		ids := make([]int64, cols)
		for j := range ids {
			ids[j] = 1000 + int64(j)
		}
		ids[0], ids[len(ids)-1] = 101, 102
		encs[i] = tokenize.Encoding{IDs: ids, TypeIDs: make([]int64, cols)}
	}
	return encs
}
