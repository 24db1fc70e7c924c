package models

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ortserve/ortserve/runtime"
	"github.com/ortserve/ortserve/tokenize"
)

// LoadError is a lazy version's load that failed. The requests that waited for that load
// fail with it; the next request tries again.
type LoadError struct {
	Model, Version string
	Err            error
}

func (e *LoadError) Error() string {
	return fmt.Sprintf("models: %s/%s could not be loaded: %v", e.Model, e.Version, e.Err)
}

func (e *LoadError) Unwrap() error { return e.Err }

// ExecInfo is what an executor holds, as it says itself (Describer), for /info.
type ExecInfo struct {
	// Sessions are the graphs loaded, each holding its own copy of the weights.
	Sessions int `json:"sessions"`
	// Streams are the batches it runs at once.
	Streams int `json:"streams"`
	// SharedWeights is true when streams share a session, and so its weights.
	SharedWeights bool `json:"shared_weights"`
	// Calibration is where its cost model's first curve came from (Calibration*).
	Calibration string `json:"calibration,omitempty"`
}

// Where a version's calibration came from, as ExecInfo.Calibration says it.
const (
	// CalibrationMeasuring: being measured while the version serves, one row a batch.
	CalibrationMeasuring = "measuring"
	// CalibrationMeasured: measured at load.
	CalibrationMeasured = "measured"
	// CalibrationCached: read from an earlier load of the same version on the same machine.
	CalibrationCached = "cached"
	// CalibrationFailed: a calibration run failed; the batches served teach the cost model.
	CalibrationFailed = "failed"
)

// Describer is an Executor that says what it holds (runtime/engine's Version does).
type Describer interface {
	ExecInfo() ExecInfo
}

// Version states, as VersionState.State says them.
const (
	StateReady    = "ready"
	StateUnloaded = "unloaded" // lazy, and not asked for yet
	StateLoading  = "loading"
	StateFailed   = "failed" // lazy, and its last load failed: the next request tries again
)

// VersionState is how a version stands, for /info: when it loads, whether it has, and what it
// holds once it has.
type VersionState struct {
	Load  LoadMode `json:"load"`
	State string   `json:"state"`
	// Error is why the last load failed, while State is failed.
	Error string `json:"error,omitempty"`
	// ExecInfo is what the version holds, once loaded, if its executor says (Describer); its
	// fields are the state's own in JSON.
	*ExecInfo
}

// lazy is the executor of a version loaded on its first request (LoadLazy). Requests that
// come while it loads wait for that one load, each until its own context ends; the load runs
// on a goroutine of its own, so that a request that gives up leaves it going for the next. A
// load that fails fails the requests that waited for it, and the next request starts another:
// a failure is not remembered beyond the requests that saw it.
type lazy struct {
	model, version string
	load           func() (Executor, error)
	log            *slog.Logger

	mu      sync.Mutex
	cur     *attempt // the last load started; nil before the first request
	closed  bool     // by Close: no more loads
	aborted chan struct{}
	abort   sync.Once
	loads   sync.WaitGroup // load goroutines, which Close waits for
}

// attempt is one load: done closes when it ends, with exec or err set.
type attempt struct {
	done chan struct{}
	exec Executor
	err  error
}

// failed says whether the attempt has ended in failure.
func (a *attempt) failed() bool {
	select {
	case <-a.done:
		return a.err != nil
	default:
		return false
	}
}

func newLazy(model, version string, load func() (Executor, error), log *slog.Logger) *lazy {
	return &lazy{model: model, version: version, load: load, log: log, aborted: make(chan struct{})}
}

// get returns the loaded executor, starting the load if none has started or the last one
// failed, and waiting for it until ctx ends. After Abort or Close it is runtime.ErrClosed.
func (l *lazy) get(ctx context.Context) (Executor, error) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, runtime.ErrClosed
	}
	select {
	case <-l.aborted:
		l.mu.Unlock()
		return nil, runtime.ErrClosed
	default:
	}
	a := l.cur
	if a == nil || a.failed() {
		a = &attempt{done: make(chan struct{})}
		l.cur = a
		l.loads.Go(func() { l.run(a) })
	}
	l.mu.Unlock()
	select {
	case <-a.done:
		return a.exec, a.err
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-l.aborted:
		return nil, runtime.ErrClosed
	}
}

// run loads the version for attempt a.
func (l *lazy) run(a *attempt) {
	start := time.Now()
	exec, err := l.load()
	if err != nil {
		a.err = &LoadError{Model: l.model, Version: l.version, Err: err}
		l.log.Error("lazy version failed to load; the next request tries again", "model", l.model, "version", l.version, "err", err)
	} else {
		a.exec = exec
		l.log.Info("lazy version loaded", "model", l.model, "version", l.version, "took", time.Since(start).Round(time.Millisecond))
	}
	close(a.done)
}

// loaded is the executor once loaded; nil before.
func (l *lazy) loaded() Executor {
	l.mu.Lock()
	a := l.cur
	l.mu.Unlock()
	if a == nil {
		return nil
	}
	select {
	case <-a.done:
		return a.exec
	default:
		return nil
	}
}

// state is how the version stands: unloaded, loading, failed (with why) or ready.
func (l *lazy) state() (string, string) {
	l.mu.Lock()
	a := l.cur
	l.mu.Unlock()
	if a == nil {
		return StateUnloaded, ""
	}
	select {
	case <-a.done:
		if a.err != nil {
			return StateFailed, a.err.Error()
		}
		return StateReady, ""
	default:
		return StateLoading, ""
	}
}

// Execute loads the version if it is not yet, then executes on it. The wait for the load
// counts as queueing.
func (l *lazy) Execute(ctx context.Context, encs []tokenize.Encoding) ([]runtime.Tensor, runtime.ExecStats, error) {
	start := time.Now()
	exec, err := l.get(ctx)
	waited := time.Since(start)
	if err != nil {
		return nil, runtime.ExecStats{Queue: waited}, err
	}
	out, st, err := exec.Execute(ctx, encs)
	st.Queue += waited
	return out, st, err
}

// RunFixed loads the version if it is not yet, then runs encs as fixed batches on it
// (FixedRunner).
func (l *lazy) RunFixed(ctx context.Context, encs []tokenize.Encoding) ([]runtime.Tensor, error) {
	exec, err := l.get(ctx)
	if err != nil {
		return nil, err
	}
	fr, ok := exec.(FixedRunner)
	if !ok {
		return nil, fmt.Errorf("models: %s/%s: its executor cannot run fixed batches", l.model, l.version)
	}
	return fr.RunFixed(ctx, encs)
}

// Abort fails the requests waiting for a load, and later ones, with runtime.ErrClosed, and
// aborts the executor if it is loaded (Executor.Abort). A load under way goes on: Close
// closes what it loads.
func (l *lazy) Abort(ctx context.Context) error {
	l.abort.Do(func() { close(l.aborted) })
	if exec := l.loaded(); exec != nil {
		return exec.Abort(ctx)
	}
	return nil
}

// Close waits for a load under way, and closes what has been loaded.
func (l *lazy) Close() error {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.loads.Wait()
	if exec := l.loaded(); exec != nil {
		return exec.Close()
	}
	return nil
}
