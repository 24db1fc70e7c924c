package engine

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ortserve/ortserve/models"
	"github.com/ortserve/ortserve/runtime"
	"github.com/ortserve/ortserve/tokenize"
)

// Version is one loaded model version: its session pool, which has learned what a batch
// costs, and the batcher that serves requests from it. It is a models.Executor.
type Version struct {
	*runtime.Batcher
	pool   *runtime.Pool
	cfg    runtime.BatchConfig
	packed bool
	info   models.ExecInfo
}

// Executor loads the version spec names: it opens spec.Instances streams (0: the engine's
// Sessions), on one session that they share on the CPU, on as many sessions on CUDA
// (sharesWeights); seeds the pool's cost model from the engine's calibration cache, or else
// calibrates it on the first session (which warms it up); warms up the other sessions; and
// starts the version's batcher with the engine's batching, overridden by the model's. Loading
// runs under a context of its own, as models' start-up check does: no request waits on it.
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
	info.Calibration, err = e.calibrate(ctx, spec, pool, o.sessions[0], key, runtime.CalibrationBatches(cfg.MaxBatchSize, packed))
	if err != nil {
		pool.Close()
		return nil, err
	}
	obs := e.observe(spec.Model, spec.Version)
	if e.log != nil {
		obs = &logControl{Observer: obs, log: e.log.With("model", spec.Model, "version", spec.Version)}
	}
	v := &Version{Batcher: runtime.NewBatcher(cfg, pool, obs), pool: pool, cfg: cfg, packed: packed, info: info}
	if e.log != nil {
		logCost(e.log, spec, v.State(), info.Calibration)
	}
	return v, nil
}

// ExecInfo is what the version holds: its sessions and streams, whether they share weights,
// and where its cost model's calibration came from (models.Describer).
func (v *Version) ExecInfo() models.ExecInfo { return v.info }

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

// Close serves what was admitted, then releases the sessions.
func (v *Version) Close() error {
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
func logCost(log *slog.Logger, spec models.ExecSpec, st runtime.SchedulerState, source string) {
	var args []any
	for _, p := range st.Cost.Curve {
		if p.Tokens == 16 && (p.Rows == 1 || p.Rows == st.MaxBatch) {
			args = append(args, fmt.Sprintf("batch_%d_ms", p.Rows), p.Ms, fmt.Sprintf("batch_%d_per_text_vs_1", p.Rows), p.PerTextVs1)
		}
	}
	log.Info("cost model calibrated", append([]any{"model", spec.Model, "version", spec.Version, "runs", st.Cost.Observations}, append(args, "calibration", source)...)...)
}
