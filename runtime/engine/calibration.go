package engine

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/ortserve/ortserve/models"
	"github.com/ortserve/ortserve/runtime"
	"github.com/ortserve/ortserve/runtime/calibcache"
	"github.com/ortserve/ortserve/tokenize"
)

// DefaultStaleCache is Config.StaleCache's default: a cached calibration that says the
// check's shape takes over 3 times what it takes now was measured while the host was busy.
// The other way round (the cache faster than now) is the host busy now, which the batches
// served teach the cost model, as they would have taught one measured now.
const DefaultStaleCache = 3

// checkRuns is how many times the check times its shape on a warm session; it takes the
// fastest, the run least disturbed by what else the host runs. A start with the cache pays
// for them: a slow version's batch of one (fp16 on a CPU) takes tens of milliseconds.
const checkRuns = 2

// cacheKey is the key of a version's calibration in the engine's cache: the file's hash sum,
// the device, machine and ONNX Runtime, the version's sessions and streams (info), and what
// decides the shapes measured. nil without a cache.
func (e *Engine) cacheKey(sum string, info models.ExecInfo, maxBatch int, packed bool) *calibcache.Key {
	if e.cache == nil {
		return nil
	}
	return &calibcache.Key{
		Model: sum, Provider: string(e.opts.Provider), DeviceID: e.opts.DeviceID, Machine: e.machine, ORT: e.env.Version(),
		Sessions: info.Sessions, Streams: info.Streams, Threads: e.opts.IntraOpThreads,
		MaxBatch: maxBatch, Packed: packed, Budget: e.calibration,
	}
}

// seedFromCache seeds pool's cost model from the cache's calibration under key, if it holds
// one that this host's run of one shape bears out (checkCached), and says whether it did.
// first is the session under the pool's first stream, warm on warmUpShapes[0]. A file that
// cannot be read is logged, never fatal.
func (e *Engine) seedFromCache(ctx context.Context, spec models.ExecSpec, pool *runtime.Pool, first runtime.Session, key *calibcache.Key) (bool, error) {
	if key == nil {
		return false, nil
	}
	obs, found, err := e.cache.Load(*key)
	if err != nil {
		e.warn("calibration cache: file ignored, calibrating anew", spec, err)
	}
	if !found {
		return false, nil
	}
	ratio, err := checkCached(ctx, first, obs)
	if err != nil {
		return false, err
	}
	if ratio > e.staleCache {
		if e.log != nil {
			e.log.Warn("calibration cache: the cached cost is far above what this host takes now (measured while it was busy); calibrating anew",
				"model", spec.Model, "version", spec.Version, "cached_vs_now", round2(ratio))
		}
		return false, nil
	}
	pool.Seed(obs)
	return true, nil
}

// checkCached times warmUpShapes[0] on s, warm on it, checkRuns times, and returns the
// time the calibration obs predicts for it over the fastest run.
func checkCached(ctx context.Context, s runtime.Session, obs []runtime.Observation) (float64, error) {
	sh := warmUpShapes[0]
	m := runtime.NewCostModel()
	for _, o := range obs {
		m.Observe(o.Rows, o.Cols, o.Duration, true)
	}
	b := runtime.SyntheticBatch(sh[0], sh[1])
	runs := make([]time.Duration, checkRuns)
	for i := range runs {
		start := time.Now()
		if _, err := s.Run(ctx, b); err != nil {
			return 0, fmt.Errorf("checking the cached calibration: %w", err)
		}
		runs[i] = time.Since(start)
	}
	return float64(m.Predict(sh[0], sh[1])) / float64(slices.Min(runs)), nil
}

// measure measures pool's calibration on batches, stores it under key (if not nil) and
// returns where the calibration came from: measured, or failed, with the error that failed
// it. A cache file that cannot be written is logged, never fatal.
func (e *Engine) measure(ctx context.Context, spec models.ExecSpec, pool *runtime.Pool, key *calibcache.Key, batches []tokenize.Batch) (string, error) {
	if err := pool.Calibrate(ctx, batches, e.calibration); err != nil {
		return models.CalibrationFailed, err
	}
	e.save(spec, pool, key)
	return models.CalibrationMeasured, nil
}

// save stores pool's calibration under key, if not nil.
func (e *Engine) save(spec models.ExecSpec, pool *runtime.Pool, key *calibcache.Key) {
	if key == nil {
		return
	}
	if err := e.cache.Save(*key, pool.Calibration()); err != nil {
		e.warn("calibration cache: not saved, the next start calibrates again", spec, err)
	}
}

// warn logs a problem that loading works around.
func (e *Engine) warn(msg string, spec models.ExecSpec, err error) {
	if e.log != nil {
		e.log.Warn(msg, "model", spec.Model, "version", spec.Version, "err", err)
	}
}

func round2(x float64) float64 { return float64(int(x*100+0.5)) / 100 }
