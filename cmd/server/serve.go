package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ortserve/ortserve/cmd/server/internal/config"
	"github.com/ortserve/ortserve/models"
	"github.com/ortserve/ortserve/runtime"
	"github.com/ortserve/ortserve/runtime/engine"
	"github.com/ortserve/ortserve/runtime/ort"
	"github.com/ortserve/ortserve/server"
	"github.com/ortserve/ortserve/tracing"
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
	reg := prometheus.NewRegistry()
	// The Go runtime's and the process's own metrics (go_goroutines, process_resident_memory_bytes...):
	// what a soak watches for leaks (soak_test.go).
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := server.NewMetrics(reg)
	tr, err := tracing.New(ctx, c.Tracing, version, os.Getenv)
	if err != nil {
		return err
	}
	observe := metrics.Observer
	if tr != nil {
		// Flushed last, after the models have answered what they admitted.
		defer func() {
			if err := tr.Shutdown(context.WithoutCancel(ctx)); err != nil {
				log.Warn("tracing: spans lost at shutdown", "err", err)
			}
		}()
		log = slog.New(tracing.LogHandler(log.Handler()))
		c.HTTP.Tracing = &server.Tracing{Tracer: tr.Tracer(), Propagator: tr.Propagator()}
		observe = func(model, ver string) runtime.Observer {
			return tracing.Observer(metrics.Observer(model, ver), model, ver)
		}
		log.Info("tracing", "otlp_endpoint", c.Tracing.Endpoint, "otlp_protocol", c.Tracing.Protocol)
	}
	ec := engineConfig(c)
	ec.Observe, ec.Log, ec.Background = observe, log, true
	b, err := newEngine(env, ec, log, "serving")
	if err != nil {
		return err
	}
	provider := b.Provider()
	log.Info("execution provider", "requested", c.Device, "provider", provider, "sessions", b.Sessions(), "threads", b.Threads(), "ort", env.Version())
	log.Info("batching", "max_batch", c.Batch.MaxBatchSize, "max_batch_tokens", c.Batch.MaxBatchTokens, "packing", c.Packing, "max_queue_delay", c.Batch.MaxQueueDelay, "max_queue_requests", c.Batch.MaxQueueRequests, "slo", runtime.FormatSLO(c.Batch.SLO))

	// Versions measuring their calibration while they serve start measuring once the port
	// is open, not while the other versions still load.
	release := b.HoldCalibrations()
	defer release()
	repo, err := models.OpenSources(c.Sources(), b, log)
	if err != nil {
		return err
	}
	defer repo.Close()
	if err := checkDefaultPrompt(repo.Status(), c.HTTP.DefaultPromptName); err != nil {
		return err
	}
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

	c.HTTP.Info = server.Info{Version: version, ORTVersion: env.Version(), Device: c.Device, Provider: string(provider), FallbackReason: b.FallbackReason()}
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
	front := server.NewFront(ln, srv.Handler(), c.Conn, log)
	defer front.Close() // a no-op after Shutdown; on an early return, it stops serving
	gs, grpcStopped, err := serveGRPC(c.GRPCAddr, srv, log)
	if err != nil {
		return err
	}
	release()
	srv.SetReady(true)
	log.Info("serving", "addr", ln.Addr().String(), "models", c.Models, "model", c.Model)
	fmt.Fprintf(stdout, "ortserve %s listening on http://%s\n", version, ln.Addr())
	if ready != nil {
		ready(ln.Addr().String())
	}

	select {
	case err := <-front.Stopped():
		return fmt.Errorf("http server: %w", err)
	case err := <-grpcStopped:
		return fmt.Errorf("grpc server: %w", err)
	case <-ctx.Done():
	}
	// Shutdown order: not ready, drain, stop accepting and answer the requests in flight,
	// the queue's rest 503 when the grace runs out (server.Front.Shutdown), then the deferred
	// closes of the models (nothing waits on them by then) and of the environment.
	return front.Shutdown(server.ShutdownPlan{Grace: c.Grace, DrainDelay: c.DrainDelay, SetReady: srv.SetReady, Abort: repo.Abort, GRPC: gs})
}

// serveGRPC serves srv's gRPC face on addr, when set: the server, and what receives Serve's
// error should it stop by itself. Without an address, both are nil (a nil channel never
// receives).
func serveGRPC(addr string, srv *server.Server, log *slog.Logger) (*server.GRPCServer, <-chan error, error) {
	if addr == "" {
		return nil, nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("listening on %s: %w: pick another --grpc-addr", addr, err)
	}
	gs := srv.GRPC()
	stopped := make(chan error, 1)
	go func() { stopped <- gs.Serve(ln) }()
	log.Info("serving gRPC", "addr", ln.Addr().String())
	return gs, stopped, nil
}

// engineConfig is serve's settings for the engine its versions load on.
func engineConfig(c config.Serve) engine.Config {
	ec := engine.Config{
		Device: c.Device, DeviceID: c.DeviceID, Sessions: c.Sessions, Threads: c.Threads, Strict: c.Strict,
		Packing: c.Packing, Batch: c.Batch, Calibration: c.Calibration,
	}
	if c.CalibrationCache != config.Off {
		ec.CalibrationCache = c.CalibrationCache
	}
	return ec
}

// newEngine builds the engine a command loads versions on. Where auto found no working CUDA,
// it says so on log ("CUDA unavailable, serving on CPU", doing naming the command's work).
func newEngine(env *ort.Env, c engine.Config, log *slog.Logger, doing string) (*engine.Engine, error) {
	e, err := engine.New(env, c)
	if err != nil {
		return nil, err
	}
	if why := e.FallbackReason(); why != "" && log != nil {
		log.Warn("CUDA unavailable, "+doing+" on CPU", "reason", why)
	}
	return e, nil
}

// checkDefaultPrompt refuses a --default-prompt-name that no served embed model has: a typo
// there would otherwise put no prompt before any text, silently.
func checkDefaultPrompt(served []models.Status, name string) error {
	if name == "" {
		return nil
	}
	var have []string
	for _, st := range served {
		if _, ok := st.Config.Prompts[name]; ok {
			return nil
		}
		for p := range st.Config.Prompts {
			have = append(have, st.Config.Name+":"+p)
		}
	}
	slices.Sort(have)
	if len(have) == 0 {
		return fmt.Errorf("--default-prompt-name %q: no served model has prompts (model.yaml prompts, or config_sentence_transformers.json): leave it out", name)
	}
	return fmt.Errorf("--default-prompt-name %q: no served model has a prompt of that name; they have %s", name, strings.Join(have, ", "))
}
