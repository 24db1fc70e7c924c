package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	goruntime "runtime"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ortserve/ortserve/cmd/server/internal/config"
	"github.com/ortserve/ortserve/models"
	"github.com/ortserve/ortserve/runtime"
	"github.com/ortserve/ortserve/runtime/ort"
	"github.com/ortserve/ortserve/server"
	"github.com/ortserve/ortserve/tokenize"
	"github.com/ortserve/ortserve/tokenize/hf"
)

func runServe(ctx context.Context, args []string, stdout io.Writer) error {
	c, err := config.Parse(args, os.Stderr)
	if err != nil {
		return err
	}
	env, err := ort.Open(c.ORTLib)
	if err != nil {
		return err
	}
	defer env.Close()
	return serve(ctx, c, env, slog.New(slog.NewTextHandler(os.Stderr, nil)), stdout, nil)
}

// serve serves until ctx ends, on an ONNX Runtime environment the caller owns (one per
// process). It prints the listening address to stdout once ready, and tells ready, when not
// nil: how bench --self and the tests learn a server's port, rather than from the line
// printed.
func serve(ctx context.Context, c config.Serve, env *ort.Env, log *slog.Logger, stdout io.Writer, ready func(addr string)) error {
	provider, why, err := resolveDevice(env, c, log, "serving")
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	// The Go runtime's and the process's own metrics (go_goroutines, process_resident_memory_bytes...):
	// what a soak watches for leaks (soak_test.go).
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := server.NewMetrics(reg)
	b := newBackend(env, c, provider, metrics.Observer)
	b.log = log // placement per version at load (inspect.go)
	log.Info("execution provider", "requested", c.Device, "provider", provider, "sessions", b.sessions, "threads", b.threads, "ort", env.Version())
	log.Info("batching", "max_batch", c.Batch.MaxBatchSize, "max_batch_tokens", c.Batch.MaxBatchTokens, "packing", c.Packing, "max_queue_delay", c.Batch.MaxQueueDelay, "max_queue_requests", c.Batch.MaxQueueRequests, "slo", runtime.FormatSLO(c.Batch.SLO))

	repo, err := models.OpenSources(c.Sources(), b, log)
	if err != nil {
		return err
	}
	defer repo.Close()
	if c.Reload > 0 {
		wctx, stopWatch := context.WithCancel(ctx)
		watched := make(chan struct{})
		go func() {
			defer close(watched)
			repo.Watch(wctx, c.Reload, func() { metrics.SetProviders(string(provider), server.FromModels(repo).Describe()) })
		}()
		// Deferred after repo.Close, so it runs first: no reload races the final close.
		defer func() { stopWatch(); <-watched }()
	}

	c.HTTP.Info = server.Info{Version: version, ORTVersion: env.Version(), Device: c.Device, Provider: string(provider), FallbackReason: why}
	c.HTTP.Metrics = promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
	srv := server.New(c.HTTP, server.FromModels(repo), log, metrics)
	metrics.SetProviders(string(provider), server.FromModels(repo).Describe())

	ln, err := net.Listen("tcp", c.Addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w: pick another --addr", c.Addr, err)
	}
	if ip := ln.Addr().(*net.TCPAddr).IP; len(c.HTTP.APIKeys) == 0 && !ip.IsLoopback() {
		log.Warn("no API key, and the address is not loopback: anyone who can reach it can use the models; set --api-key or --api-key-file, or listen on 127.0.0.1 behind a proxy (docs/security.md)", "addr", ln.Addr().String())
	}
	front := newFrontEnd(ln, srv.Handler(), c.Conn, log)
	srv.SetReady(true)
	log.Info("serving", "addr", ln.Addr().String(), "models", c.Models, "model", c.Model)
	fmt.Fprintf(stdout, "ortserve %s listening on http://%s\n", version, ln.Addr())
	if ready != nil {
		ready(ln.Addr().String())
	}

	select {
	case err := <-front.served:
		return fmt.Errorf("http server: %w", err)
	case <-ctx.Done():
	}
	// Shutdown order: not ready, drain, stop accepting and answer the requests in flight,
	// the queue's rest 503 when the grace runs out (frontEnd.shutdown), then the deferred
	// closes of the models (nothing waits on them by then) and of the environment.
	return front.shutdown(shutdownPlan{Grace: c.Grace, DrainDelay: c.DrainDelay, SetReady: srv.SetReady, Abort: repo.Abort})
}

// backend loads tokenizers and ONNX Runtime sessions for the model repository.
type backend struct {
	env      *ort.Env
	opts     ort.Options
	sessions int
	threads  int
	batch    runtime.BatchConfig
	// calibration is how long Executor lets each version's pool measure its cost curve.
	calibration time.Duration
	observe     func(model, version string) runtime.Observer
	log         *slog.Logger // nil: no placement log line per version
}

// resolveDevice is the one place a command turns serve's --device into the execution
// provider its sessions get. For auto without a working CUDA it is CPU, and why is logged
// ("CUDA unavailable, serving on CPU", doing naming the command's work) and returned.
func resolveDevice(env *ort.Env, c config.Serve, log *slog.Logger, doing string) (p ort.Provider, why string, err error) {
	device, err := ort.ParseDevice(c.Device)
	if err != nil {
		return "", "", err
	}
	p, why, err = env.Resolve(device, c.DeviceID)
	if err != nil {
		return "", "", fmt.Errorf("--device %s: %w: run with --device auto or cpu, or check the GPU and CUDA 13 / cuDNN 9 libraries", c.Device, err)
	}
	if why != "" && log != nil {
		log.Warn("CUDA unavailable, "+doing+" on CPU", "reason", why)
	}
	return p, why, nil
}

// newBackend is the one way a command builds the backend its versions load on: serve's
// sessions, threads and batching on provider p. observe gives each version's batcher its
// observer (the server's metrics); nil observes nothing.
func newBackend(env *ort.Env, c config.Serve, p ort.Provider, observe func(model, version string) runtime.Observer) *backend {
	if observe == nil {
		observe = func(string, string) runtime.Observer { return runtime.NopObserver{} }
	}
	b := &backend{env: env, sessions: c.Sessions, threads: c.Threads, batch: c.Batch, calibration: c.Calibration, observe: observe}
	if p == ort.ProviderCPU {
		// Measured on a 2-core machine: several single-thread sessions beat one session with
		// many threads, and a multi-thread session shared by goroutines oversubscribes.
		if b.threads == 0 {
			b.threads = 1
		}
		if b.sessions == 0 {
			b.sessions = max(1, goruntime.NumCPU()/b.threads)
		}
	} else if b.sessions == 0 {
		b.sessions = 1
	}
	b.opts = ort.Options{Provider: p, DeviceID: c.DeviceID, IntraOpThreads: b.threads, InterOpThreads: 1, Strict: c.Strict}
	b.batch.Packing = packingOn(c.Packing, p)
	return b
}

// packingOn resolves --packing for provider p. auto packs on the CPU only: there a run's
// fixed cost, which packing shares, is a large part of a short text's (docs/batching.md), and
// a packed row's bound of runtime.MaxPackTokens costs nothing; on CUDA padded batches may grow
// far larger, and packing there has not been measured.
func packingOn(mode string, p ort.Provider) bool {
	switch mode {
	case "on":
		return true
	case "off":
		return false
	}
	return p == ort.ProviderCPU
}

func (b *backend) Device() string {
	if b.opts.Provider == ort.ProviderCUDA {
		return "cuda"
	}
	return "cpu"
}

func (b *backend) Tokenizer(path string, maxLen int) (tokenize.Tokenizer, error) {
	return hf.Load(path, maxLen)
}

func (b *backend) Executor(spec models.ExecSpec) (models.Executor, error) {
	// Loading runs under a context of its own, as models' start-up check does.
	// The pool calibrates on its first session below: that warms it up.
	sessions, err := b.openSessions(context.Background(), spec.Path, spec.Output, cmp.Or(spec.Instances, b.sessions), false)
	if err != nil {
		return nil, err
	}
	if b.log != nil {
		b.logPlacement(spec)
	}
	pool := runtime.NewPool(sessions)
	cfg := spec.Batching.Apply(b.batch)
	if spec.SLO > 0 {
		cfg.SLO = spec.SLO
	}
	if err := cfg.Validate(); err != nil {
		pool.Close()
		return nil, err
	}
	if err := pool.Calibrate(context.Background(), runtime.CalibrationBatches(cfg.MaxBatchSize, cfg.Packing && pool.Packs()), b.calibration); err != nil {
		pool.Close()
		return nil, err
	}
	obs := b.observe(spec.Model, spec.Version)
	if b.log != nil {
		obs = &logControl{Observer: obs, log: b.log.With("model", spec.Model, "version", spec.Version)}
	}
	bt := runtime.NewBatcher(cfg, pool, obs)
	if b.log != nil {
		logCost(b.log, spec, bt.State())
	}
	return batchExecutor{bt, pool}, nil
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
// typical short text: enough to see at start-up whether batching pays on this device.
func logCost(log *slog.Logger, spec models.ExecSpec, st runtime.SchedulerState) {
	var args []any
	for _, p := range st.Cost.Curve {
		if p.Tokens == 16 && (p.Rows == 1 || p.Rows == st.MaxBatch) {
			args = append(args, fmt.Sprintf("batch_%d_ms", p.Rows), p.Ms, fmt.Sprintf("batch_%d_per_text_vs_1", p.Rows), p.PerTextVs1)
		}
	}
	log.Info("cost model calibrated", append([]any{"model", spec.Model, "version", spec.Version, "runs", st.Cost.Observations}, args...)...)
}

// openSessions opens n sessions of the ONNX file at path reading output, and warms them up
// under ctx, the first one only if warmFirst: a pool's calibration runs every shape it
// measures twice on one session, the first run warming it up, so a version that calibrates
// need not warm that session twice (with one session a version, as the tests, CUDA's default
// and one-core hosts run, warm-up had cost the tests as much CPU as calibration). On any failure it closes the ones it
// opened. The sessions are opened and warmed up side by side, each a graph to load and
// optimize mostly on one thread. Measured on the 2-core VM, minilm fp32 alone, serve's start
// to its "listening" line, 4 runs each: 0.98-1.40 s with one session, 1.09-1.29 s with two.
func (b *backend) openSessions(ctx context.Context, path, output string, n int, warmFirst bool) ([]runtime.Session, error) {
	o := b.opts
	o.Output = output
	sessions := make([]runtime.Session, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			s, err := b.env.NewSession(path, o)
			if err != nil {
				errs[i] = err
				return
			}
			sessions[i] = s
			if i == 0 && !warmFirst {
				return
			}
			if err := warmUp(ctx, s); err != nil {
				errs[i] = fmt.Errorf("warm-up: %w", err)
			}
		})
	}
	wg.Wait()
	if err := firstErr(errs); err != nil {
		for _, s := range sessions {
			if s != nil {
				s.Close()
			}
		}
		return nil, err
	}
	return sessions, nil
}

// firstErr is the first error of errs that is not nil: the sessions of one file fail alike,
// and one line says why.
func firstErr(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// warmUpShapes are the batch × sequence shapes every session runs once before its version
// serves: the first runs of a shape allocate memory (and on CUDA pick kernels).
var warmUpShapes = [][2]int{{1, 16}, {4, 16}, {1, 64}, {4, 64}}

// warmUp runs a session on warmUpShapes.
func warmUp(ctx context.Context, s runtime.Session) error {
	for _, sh := range warmUpShapes {
		if _, err := s.Run(ctx, runtime.SyntheticBatch(sh[0], sh[1])); err != nil {
			return err
		}
	}
	return nil
}

// batchExecutor is a version's dynamic batcher over its session pool. Its Abort is the
// batcher's: it returns once every session is back in the pool, so that Close after it does
// not wait.
type batchExecutor struct {
	*runtime.Batcher
	pool *runtime.Pool
}

// Close serves what was admitted, then releases the sessions.
func (e batchExecutor) Close() error {
	e.Batcher.Close()
	return e.pool.Close()
}
