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
	p.calibrating.Store(true)
	defer p.calibrating.Store(false)
	s, err := p.acquire(ctx)
	if err != nil {
		return err
	}
	defer func() { p.free <- s }()
	start := time.Now()
	for _, b := range batches {
		if err := p.measure(ctx, s, b); err != nil {
			return err
		}
		if time.Since(start) > budget {
			break
		}
	}
	return nil
}

// CalibrateServing measures what Calibrate does while the pool serves, and returns at once:
// the runs go on in a goroutine of their own, once after is closed (nil: at once), which
// sends their outcome on the channel returned and closes it. For each batch it takes a free session and gives it back after the
// batch's two runs, so a served batch waits for at most one shape's runs. Until it ends the
// pool is Calibrating, and a batcher on it runs one row a batch: what batch 1 costs is
// measured first, and no batch is formed on a curve still being drawn. ctx's end stops it.
// Warm the sessions up before: a shape's first run is not recorded, but a session's first run
// of all is slower than that.
func (p *Pool) CalibrateServing(ctx context.Context, after <-chan struct{}, batches []tokenize.Batch, budget time.Duration) <-chan error {
	p.calibrating.Store(true)
	done := make(chan error, 1)
	go func() {
		defer close(done)
		defer p.calibrating.Store(false)
		if after != nil {
			select {
			case <-after:
			case <-ctx.Done():
				done <- ctx.Err()
				return
			}
		}
		var spent time.Duration // its own runs' time: waiting for a session does not count
		for _, b := range batches {
			s, err := p.acquire(ctx)
			if err != nil {
				done <- err
				return
			}
			start := time.Now()
			err = p.measure(ctx, s, b)
			spent += time.Since(start)
			p.free <- s
			if err != nil {
				done <- err
				return
			}
			if spent > budget {
				break
			}
		}
		done <- nil
	}()
	return done
}

// Calibrating says whether Calibrate or CalibrateServing is measuring.
func (p *Pool) Calibrating() bool { return p.calibrating.Load() }

// measure runs b twice on s and records the second run's time as a calibration point.
func (p *Pool) measure(ctx context.Context, s Session, b tokenize.Batch) error {
	for i := range 2 {
		t := time.Now()
		if _, err := s.Run(ctx, b); err != nil {
			return fmt.Errorf("runtime: calibrating %d×%d: %w", b.Rows, b.Cols, err)
		}
		if i == 1 {
			p.record(Observation{Rows: b.Rows, Cols: b.Cols, Duration: time.Since(t)})
		}
	}
	return nil
}

// record adds o to the cost model as a calibration point, and to Calibration.
func (p *Pool) record(o Observation) {
	p.cost.Observe(o.Rows, o.Cols, o.Duration, true)
	p.calibMu.Lock()
	p.calibration = append(p.calibration, o)
	p.calibMu.Unlock()
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

// Calibration are the runs that seeded the cost model, in order: those Calibrate or
// CalibrateServing measured, or those Seed gave. A store of calibrations keeps them, once
// measured, so that the next start of the same version on the same device may Seed them.
func (p *Pool) Calibration() []Observation {
	p.calibMu.Lock()
	defer p.calibMu.Unlock()
	return slices.Clone(p.calibration)
}

// Seed seeds the cost model with runs measured before, in place of Calibrate: the
// Calibration of a pool of the same graph on the same device, sessions and batching. It runs
// nothing, so the sessions stay as cold as they were: warm them up before they serve.
// Observations that could not be a run (no rows, no time) are left out.
func (p *Pool) Seed(obs []Observation) {
	for _, o := range obs {
		if o.Rows >= 1 && o.Cols >= 1 && o.Duration > 0 {
			p.record(o)
		}
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
