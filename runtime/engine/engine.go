// Package engine builds model versions on ONNX Runtime. For each version it opens the
// sessions (runtime/ort) and warms them up, gives them to a pool that learns what a batch
// costs (runtime.Pool, calibrated at load), and starts the batcher that serves requests from
// that pool (runtime.Batcher). serve, gate, bench --self and --offline, and tune all load
// versions through it, so a version runs the same way whichever command runs it.
//
// An Engine is what package models calls a Backend: models reads the model folders and
// configs and asks the engine for each version's executor.
package engine

import (
	"cmp"
	"fmt"
	"log/slog"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ortserve/ortserve/runtime"
	"github.com/ortserve/ortserve/runtime/calibcache"
	"github.com/ortserve/ortserve/runtime/ort"
	"github.com/ortserve/ortserve/tokenize"
	"github.com/ortserve/ortserve/tokenize/hf"
)

// Config is how an Engine builds versions: the device, and the sessions and batching each
// version gets unless its model's config says otherwise.
type Config struct {
	// Device is auto, cuda or cpu (ort.ParseDevice); auto is CUDA where it works, else CPU.
	Device   string
	DeviceID int
	// Sessions per version; 0: on CPU as many as the process may run threads at once
	// (GOMAXPROCS, which follows a container's CPU limit) over Threads, on CUDA one.
	Sessions int
	// Threads are each session's intra-op threads; 0: 1 on CPU, ONNX Runtime's default on
	// CUDA.
	Threads int
	// Strict fails a CUDA version whose nodes would fall back to CPU.
	Strict bool
	// Packing is auto, on or off (PackingOn).
	Packing string
	// Batch is every version's batching, which a model's config may override.
	Batch runtime.BatchConfig
	// Calibration is how long each version measures its cost curve at load, from its
	// smallest batch up (runtime.CalibrationBatches).
	Calibration time.Duration
	// CalibrationCache is the folder where versions' calibrations are kept (calibcache), so
	// that the next load of the same version on the same machine seeds its cost model from
	// there instead of measuring it; "": none, every load measures.
	CalibrationCache string
	// StaleCache is how many times slower than this host runs it now a cached calibration
	// may say a batch of 1 × 16 tokens takes before it is measured anew (a calibration
	// measured while the host was busy); 0: DefaultStaleCache; +Inf: never.
	StaleCache float64
	// Background measures a version's calibration, where the cache does not hold it, while
	// the version serves (runtime.Pool.CalibrateServing): Load returns once the sessions are
	// open and warm, and the version serves one row a batch until its cost curve is
	// measured. Otherwise Load returns once it is. serve sets it, so that a first start
	// answers as soon as a restart does; the commands that measure a version do not.
	Background bool
	// Observe gives each version's batcher its observer (the server's metrics); nil
	// observes nothing.
	Observe func(model, version string) runtime.Observer
	// Log, when not nil, gets each version's placement and calibrated cost at load and its
	// SLO controller's decisions.
	Log *slog.Logger
}

// Engine builds versions on one ONNX Runtime environment and device. It is safe for
// concurrent use: a reload may load versions while others serve.
type Engine struct {
	env         *ort.Env
	opts        ort.Options
	sessions    int
	batch       runtime.BatchConfig
	calibration time.Duration
	background  bool
	cache       *calibcache.Store             // nil: none
	staleCache  float64                       // Config.StaleCache, resolved
	machine     string                        // calibcache.Machine, once
	held        atomic.Pointer[chan struct{}] // HoldCalibrations' channel while it holds
	observe     func(model, version string) runtime.Observer
	log         *slog.Logger
	why         string
}

// New resolves c's device on env (the one environment of the process, which the caller
// keeps open for as long as the engine's versions) and returns an engine that builds
// versions there. A device that cannot be used is an error that says what to do; auto
// without a working CUDA is the CPU, and FallbackReason says why.
func New(env *ort.Env, c Config) (*Engine, error) {
	device, err := ort.ParseDevice(c.Device)
	if err != nil {
		return nil, err
	}
	p, why, err := env.Resolve(device, c.DeviceID)
	if err != nil {
		return nil, fmt.Errorf("--device %s: %w: run with --device auto or cpu, or check the GPU and CUDA 13 / cuDNN 9 libraries", c.Device, err)
	}
	threads, sessions := size(p, c.Threads, c.Sessions, goruntime.GOMAXPROCS(0))
	e := &Engine{
		env: env, sessions: sessions, batch: c.Batch, calibration: c.Calibration, background: c.Background,
		staleCache: cmp.Or(c.StaleCache, DefaultStaleCache),
		observe:    c.Observe, log: c.Log, why: why,
		opts: ort.Options{Provider: p, DeviceID: c.DeviceID, IntraOpThreads: threads, InterOpThreads: 1, Strict: c.Strict},
	}
	if e.observe == nil {
		e.observe = func(string, string) runtime.Observer { return runtime.NopObserver{} }
	}
	e.batch.Packing = PackingOn(c.Packing, p)
	if c.CalibrationCache != "" {
		e.cache, e.machine = calibcache.Open(c.CalibrationCache), calibcache.Machine()
	}
	return e, nil
}

// size is a version's intra-op threads per session and sessions on provider p, from the
// ones asked for (0: the default) and procs, the threads the process may run at once. On CPU
// several single-thread sessions beat one session with many threads, and a multi-thread
// session shared by goroutines oversubscribes the cores: one thread a session, as many
// sessions as procs allows. On CUDA a session is a stream, and one keeps the device busy.
func size(p ort.Provider, threads, sessions, procs int) (int, int) {
	if p != ort.ProviderCPU {
		return threads, cmp.Or(sessions, 1)
	}
	threads = cmp.Or(threads, 1)
	return threads, cmp.Or(sessions, max(1, procs/threads))
}

// PackingOn resolves a packing mode for provider p: on, off, or auto. auto packs on the CPU
// only: there a run's fixed cost, which packing shares, is a large part of a short text's
// (docs/batching.md), and a packed row's bound of runtime.MaxPackTokens costs nothing; on
// CUDA padded batches may grow far larger, and packing there has not been measured.
func PackingOn(mode string, p ort.Provider) bool {
	switch mode {
	case "on":
		return true
	case "off":
		return false
	}
	return p == ort.ProviderCPU
}

// HoldCalibrations holds back the calibrations that versions loaded from now on measure while
// serving (Config.Background) until release is called: serve loads its versions with them
// held, so that start-up's CPU goes to loading the versions, and releases them once it
// listens. Versions loaded after release (a reload, a lazy version) measure at once.
func (e *Engine) HoldCalibrations() (release func()) {
	ch := make(chan struct{})
	e.held.Store(&ch)
	return sync.OnceFunc(func() {
		e.held.CompareAndSwap(&ch, nil)
		close(ch)
	})
}

// Provider is the execution provider the versions run on.
func (e *Engine) Provider() ort.Provider { return e.opts.Provider }

// FallbackReason is why CUDA could not be used when the device was auto; "" when it was not
// asked for, or worked.
func (e *Engine) FallbackReason() string { return e.why }

// Device is where versions run, as model configs name devices: "cpu" or "cuda".
func (e *Engine) Device() string {
	if e.opts.Provider == ort.ProviderCUDA {
		return "cuda"
	}
	return "cpu"
}

// Sessions is how many sessions a version gets unless its config says otherwise.
func (e *Engine) Sessions() int { return e.sessions }

// Threads is each session's intra-op threads (0: ONNX Runtime's default).
func (e *Engine) Threads() int { return e.opts.IntraOpThreads }

// Batch is the batching every version starts from, packing resolved for the device.
func (e *Engine) Batch() runtime.BatchConfig { return e.batch }

// Tokenizer loads a Hugging Face tokenizer.json for inputs of at most maxLen tokens.
func (e *Engine) Tokenizer(path string, maxLen int) (tokenize.Tokenizer, error) {
	return hf.Load(path, maxLen)
}
