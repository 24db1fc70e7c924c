package engine

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ortserve/ortserve/models"
	"github.com/ortserve/ortserve/runtime"
	"github.com/ortserve/ortserve/runtime/calibcache"
	"github.com/ortserve/ortserve/tokenize"
)

// Version is one loaded model version: its session pool, which learns what a batch costs,
// and the batcher that serves requests from it. It is a models.Executor.
type Version struct {
	*runtime.Batcher
	pool   *runtime.Pool
	cfg    runtime.BatchConfig
	packed bool
	info   models.ExecInfo // but Calibration, which calibration holds

	calibration atomic.Pointer[string] // where the cost model's calibration came from
	calibrated  chan struct{}          // closed when it is there
	stop        context.CancelFunc     // ends a calibration measured while serving
}

// Executor loads the version spec names: it opens spec.Instances streams (0: the engine's
// Sessions), on one session that they share on the CPU, on as many sessions on CUDA
// (sharesWeights), and warms them up; seeds the pool's cost model from the engine's
// calibration cache where it holds the version's, or else measures it (in the background, if
// the engine's Config says so); and starts the version's batcher with the engine's batching,
// overridden by the model's. Loading runs under a context of its own, as models' start-up
// check does: no request waits on it.
func (e *Engine) Executor(spec models.ExecSpec) (models.Executor, error) {
	return e.Load(context.Background(), spec)
}

// Load is Executor under ctx, returning the Version itself.
func (e *Engine) Load(ctx context.Context, spec models.ExecSpec) (*Version, error) {
	cfg := spec.Batching.Apply(e.batch)
	if spec.SLO > 0 {
		cfg.SLO = spec.SLO
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// The file's hash, which keys its cached calibration, is read (or computed, the first
	// time) while the sessions load.
	var (
		sum     string
		sumErr  error
		hashing sync.WaitGroup
	)
	if e.cache != nil {
		hashing.Go(func() { sum, sumErr = e.cache.FileHash(spec.Path) })
	}
	// The first session is warmed up by what calibrate does with it (openSessions).
	o, err := e.openSessions(ctx, spec.Path, spec.Output, cmp.Or(spec.Instances, e.sessions), false)
	hashing.Wait()
	if err != nil {
		return nil, err
	}
	if e.log != nil {
		e.logPlacement(spec)
	}
	pool := runtime.NewPool(o.streams)
	packed := cfg.Packing && pool.Packs()
	info := models.ExecInfo{Sessions: len(o.sessions), Streams: len(o.streams), SharedWeights: len(o.sessions) < len(o.streams)}
	key := e.cacheKey(sum, info, cfg.MaxBatchSize, packed)
	if sumErr != nil {
		e.warn("calibration cache: the model file could not be hashed; calibrating", spec, sumErr)
		key = nil
	}
	v := &Version{pool: pool, cfg: cfg, packed: packed, info: info, calibrated: make(chan struct{}), stop: func() {}}
	if err := e.calibrate(ctx, spec, v, o.sessions[0], key, runtime.CalibrationBatches(cfg.MaxBatchSize, packed)); err != nil {
		pool.Close()
		return nil, err
	}
	obs := e.observe(spec.Model, spec.Version)
	if e.log != nil {
		obs = &logControl{Observer: obs, log: e.log.With("model", spec.Model, "version", spec.Version)}
	}
	v.Batcher = runtime.NewBatcher(cfg, pool, obs)
	return v, nil
}

// calibrate seeds v's cost model from the cache where it holds key's calibration (key nil:
// no cache), or else measures it on batches: before it returns or, with the engine's
// Background, beside the batches the version serves; what it measured goes to the cache.
// Either way it first warms first (the session under the pool's first stream, cold) up on one
// shape, which the cache's check times: the version serves at once, its first request not
// cold. Measuring runs every shape once before it times it, which warms the rest up.
func (e *Engine) calibrate(ctx context.Context, spec models.ExecSpec, v *Version, first runtime.Session, key *calibcache.Key, batches []tokenize.Batch) error {
	if err := warmUp(ctx, first, warmUpShapes[:1]); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	cached, err := e.seedFromCache(ctx, spec, v.pool, first, key)
	switch {
	case err != nil:
		return err
	case cached:
		e.calibrationEnded(spec, v, models.CalibrationCached)
		return nil
	case !e.background:
		source, err := e.measure(ctx, spec, v.pool, key, batches)
		if err != nil {
			return err
		}
		e.calibrationEnded(spec, v, source)
		return nil
	}
	v.calibration.Store(ptr(models.CalibrationMeasuring))
	// The calibration outlives Load: the version's Close, not ctx, ends it.
	bg, stop := context.WithCancel(context.WithoutCancel(ctx))
	v.stop = stop
	var after <-chan struct{}
	if h := e.held.Load(); h != nil {
		after = *h
	}
	done := v.pool.CalibrateServing(bg, after, batches, e.calibration)
	go func() {
		source := models.CalibrationMeasured
		if err := <-done; err != nil {
			source = models.CalibrationFailed
			if bg.Err() == nil {
				e.warn("calibration failed; the cost model learns from the batches served", spec, err)
			}
		} else {
			e.save(spec, v.pool, key)
		}
		e.calibrationEnded(spec, v, source)
	}()
	return nil
}

// calibrationEnded records where v's calibration came from, and logs its cost.
func (e *Engine) calibrationEnded(spec models.ExecSpec, v *Version, source string) {
	v.calibration.Store(&source)
	close(v.calibrated)
	if e.log != nil {
		logCost(e.log, spec, v.pool, v.cfg.MaxBatchSize, v.packed, source)
	}
}

// ExecInfo is what the version holds: its sessions and streams, whether they share weights,
// and where its cost model's calibration came from (models.Describer).
func (v *Version) ExecInfo() models.ExecInfo {
	info := v.info
	if c := v.calibration.Load(); c != nil {
		info.Calibration = *c
	}
	return info
}

// Calibrated is closed once the version's cost model holds its calibration: at once unless
// the engine measures it while serving.
func (v *Version) Calibrated() <-chan struct{} { return v.calibrated }

// RunFixed runs encs in order as batches of their own, straight on the pool, bypassing the
// batcher: consecutive encodings up to the version's max batch size and token budget go
// together, each batch laid out by its encodings alone (runtime.Pool.RunFixed). Whatever
// else is queued, and whatever the pool has learned, the same encodings always make the same
// batches, so a graph whose answers depend on its batch-mates (dynamic int8) answers the same
// on every run: what `server gate` needs of its fixed chunks. It returns one tensor per
// encoding.
func (v *Version) RunFixed(ctx context.Context, encs []tokenize.Encoding) ([]runtime.Tensor, error) {
	out := make([]runtime.Tensor, 0, len(encs))
	for len(encs) > 0 {
		n := v.fits(encs)
		res, err := v.pool.RunFixed(ctx, encs[:n], v.packed)
		if err != nil {
			return nil, err
		}
		out = append(out, res...)
		encs = encs[n:]
	}
	return out, nil
}

// fits is how many of encs, from the first, one batch takes: at least one, at most
// MaxBatchSize rows within MaxBatchTokens padded tokens (packed: within PackLimit texts'
// tokens end to end), as the batcher bounds a batch.
func (v *Version) fits(encs []tokenize.Encoding) int {
	longest, tokens := 0, 0
	for i, e := range encs {
		if i == v.cfg.MaxBatchSize {
			return i
		}
		l, t := max(longest, e.Len()), tokens+e.Len()
		if i > 0 && v.packed && t > v.cfg.PackLimit() {
			return i
		}
		if i > 0 && !v.packed && v.cfg.MaxBatchTokens > 0 && (i+1)*l > v.cfg.MaxBatchTokens {
			return i
		}
		longest, tokens = l, t
	}
	return len(encs)
}

// Close ends a calibration still measuring, serves what was admitted, then releases the
// sessions.
func (v *Version) Close() error {
	v.stop()
	<-v.calibrated
	v.Batcher.Close()
	return v.pool.Close()
}

// logControl logs the SLO controller's decisions that change a budget, at most one line a
// second: under a load that swings, the controller may decide four times a second.
type logControl struct {
	runtime.Observer
	log *slog.Logger

	mu      sync.Mutex
	last    time.Time
	skipped int // changes not logged since the last line
}

func (l *logControl) Control(s runtime.SchedulerState, changed bool) {
	l.Observer.Control(s, changed)
	if !changed || s.SLO == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if now.Sub(l.last) < time.Second {
		l.skipped++
		return
	}
	l.last = now
	c := s.SLO
	l.log.Info("slo controller", "decision", c.Decision, "observed_p95_ms", c.ObservedP95Ms, "target_p95_ms", c.TargetP95Ms,
		"admission_budget_ms", c.BudgetMs, "batch_budget_ms", c.BatchBudgetMs, "samples", c.Samples,
		"admitted", c.Admitted, "refused", c.Refused, "changes_not_logged", l.skipped)
	l.skipped = 0
}

// logCost logs a version's calibrated cost at batch 1 and at its largest batch, for the
// typical short text: enough to see at start-up whether batching pays on this device; and
// whether the calibration was measured or read from the cache.
func logCost(log *slog.Logger, spec models.ExecSpec, pool *runtime.Pool, maxBatch int, packed bool, source string) {
	cost := pool.Cost()
	args := []any{"model", spec.Model, "version", spec.Version, "runs", cost.Observations()}
	for _, p := range cost.Curve([]int{1, maxBatch}, []int{16}, packed) {
		args = append(args, fmt.Sprintf("batch_%d_ms", p.Rows), p.Ms, fmt.Sprintf("batch_%d_per_text_vs_1", p.Rows), p.PerTextVs1)
	}
	log.Info("cost model calibrated", append(args, "calibration", source)...)
}

func ptr[T any](v T) *T { return &v }
