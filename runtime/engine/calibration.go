package engine

import (
	"context"
	"fmt"

	"github.com/ortserve/ortserve/models"
	"github.com/ortserve/ortserve/runtime"
	"github.com/ortserve/ortserve/runtime/calibcache"
	"github.com/ortserve/ortserve/tokenize"
)

// Where a version's calibration came from, as models.ExecInfo says it.
const (
	calibrationMeasured = "measured"
	calibrationCached   = "cached"
)

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

// calibrate seeds pool's cost model. Where the cache holds key's calibration it seeds the
// model from it and warms first (the session under the pool's first stream) up on one shape,
// which measuring would have warmed: the version serves at once, its first request not cold.
// Otherwise it measures batches on the pool (Pool.Calibrate) and stores what it measured
// under key, if not nil. A cache file that cannot be read or written is logged, never fatal.
// It returns where the calibration came from.
func (e *Engine) calibrate(ctx context.Context, spec models.ExecSpec, pool *runtime.Pool, first runtime.Session, key *calibcache.Key, batches []tokenize.Batch) (string, error) {
	if key != nil {
		obs, found, err := e.cache.Load(*key)
		if err != nil {
			e.warn("calibration cache: file ignored, calibrating anew", spec, err)
		}
		if found {
			pool.Seed(obs)
			if err := warmUp(ctx, first, warmUpShapes[:1]); err != nil {
				return "", fmt.Errorf("warm-up: %w", err)
			}
			return calibrationCached, nil
		}
	}
	if err := pool.Calibrate(ctx, batches, e.calibration); err != nil {
		return "", err
	}
	if key != nil {
		if err := e.cache.Save(*key, pool.Calibration()); err != nil {
			e.warn("calibration cache: not saved, the next start calibrates again", spec, err)
		}
	}
	return calibrationMeasured, nil
}

// warn logs a problem that loading works around.
func (e *Engine) warn(msg string, spec models.ExecSpec, err error) {
	if e.log != nil {
		e.log.Warn(msg, "model", spec.Model, "version", spec.Version, "err", err)
	}
}
