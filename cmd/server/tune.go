package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	goruntime "runtime"
	"sync"
	"time"

	"github.com/ortserve/ortserve/bench"
	"github.com/ortserve/ortserve/bench/offline"
	"github.com/ortserve/ortserve/bench/tune"
	"github.com/ortserve/ortserve/cmd/server/internal/config"
	"github.com/ortserve/ortserve/models"
	"github.com/ortserve/ortserve/runtime/engine"
	"github.com/ortserve/ortserve/runtime/ort"
)

func runTune(ctx context.Context, args []string, stdout io.Writer) error {
	start := time.Now() // the budget counts from here
	j, err := config.ParseTune(args, os.Getenv, os.Stderr)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(j.Flags.Out, 0o755); err != nil {
		return err
	}
	// An earlier run's experiment reports and config would read as this run's.
	stale, _ := filepath.Glob(filepath.Join(j.Flags.Out, "exp-[0-9][0-9]*.json"))
	for _, p := range append(stale, filepath.Join(j.Flags.Out, tuneConfigFile)) {
		os.Remove(p)
	}
	env, err := ort.Open(j.Serve.ORTLib)
	if err != nil {
		return err
	}
	defer env.Close()
	return runTuneJob(ctx, j, env, start, stdout, os.Stderr)
}

// tuneReserve is the part of the budget kept for what follows the last experiment: the plot,
// the config and its check.
const tuneReserve = 3 * time.Second

// runTuneJob tunes on env and writes the outputs.
func runTuneJob(ctx context.Context, j *config.Tune, env *ort.Env, start time.Time, stdout, stderr io.Writer) error {
	f, sc := &j.Flags, j.Serve
	b, err := engine.New(env, engineConfig(sc))
	if err != nil {
		return err
	}
	provider := b.Provider()
	base := tune.Config{
		MaxQueueDelay: sc.Batch.MaxQueueDelay, MaxBatch: sc.Batch.MaxBatchSize, MaxBatchTokens: sc.Batch.MaxBatchTokens,
		Sessions: cmp.Or(j.Model.Instances, b.Sessions()), Threads: b.Threads(), Version: j.Model.DefaultVersion, CacheBytes: j.Model.Cache.MaxBytes,
	}
	var versions []string
	for name, v := range j.Model.Versions {
		if v.RunsOn(b.Device()) {
			versions = append(versions, name)
		}
	}
	outFloats := len(j.Model.Labels)
	if j.Model.Task == models.TaskEmbed {
		outFloats = 1024 // the dimension is known only once loaded; this errs on the large side
	}
	route := "/embed"
	if j.Model.Task == models.TaskClassify {
		route = "/predict"
	}

	work, err := os.MkdirTemp("", "ortserve-tune-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	// The offline batch cost, as bench --offline measures it: it orders the values tried.
	var batch *tune.BatchModel
	if f.OfflineStep > 0 {
		// At most a fifth of the budget: the model only orders values, the budget is for
		// measurements.
		octx, cancel := context.WithDeadline(ctx, start.Add(f.Budget/5))
		pts, err := offline.LimitOf(octx, b, j.Dir, "", j.Workload.Texts, offline.Batches(sc.Batch.MaxBatchSize), f.OfflineStep)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if m, ok := tune.FitBatchModel(pts); ok {
			batch = &m // from the batch sizes measured, should the deadline have cut it short
		}
		if err != nil && !f.Quiet {
			fmt.Fprintf(stderr, "tune: offline batch cost: %d batch sizes measured: %v\n", len(pts), err)
		}
	}

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, IdleConnTimeout: 30 * time.Second, DisableCompression: true}}
	defer client.CloseIdleConnections()
	opts := bench.DefaultOptions()
	opts.PrecisePacing = true
	opts.SLO, opts.Price, opts.Seed, opts.Inputs = j.SLO, f.Price, f.Seed, f.Inputs
	opts.Warmup, opts.Step, opts.Poisson = f.Warmup, f.Step, f.Arrival == "poisson"
	// A request 10× over the latency target has failed the step anyway; not waiting longer
	// for it keeps an overloaded step's drain, and so each experiment's length, bounded.
	opts.Timeout = min(10*time.Second, max(time.Second, 10*j.SLO.P95))
	wideStart := 16.0
	if batch != nil {
		wideStart = math.Max(1, math.Round(batch.BestItems/4/float64(f.Inputs)))
	}
	// Experiments serve on the provider resolved once, not probing CUDA at every start.
	exp := sc
	exp.Device = "cpu"
	if provider == ort.ProviderCUDA {
		exp.Device = "cuda"
	}
	var mu sync.Mutex
	repos := map[tune.Config]string{} // per version and cache: a repository of links
	m := &tune.BenchMeasurer{
		Client: client, Workload: j.Workload, Model: j.Model.Name, Route: route, Options: opts,
		WideStart: wideStart, WideSteps: f.WideSteps, NarrowSteps: f.SearchSteps, Resolution: f.Resolution,
		Serve: func(ctx context.Context, c tune.Config) (string, func(), error) {
			mu.Lock()
			key := tune.Config{Version: c.Version, CacheBytes: c.CacheBytes}
			repo, ok := repos[key]
			if !ok {
				repo = filepath.Join(work, fmt.Sprintf("repo-%d", len(repos)+1))
				if err := tune.Overlay(sc.Models, repo, filepath.Base(j.Dir), tune.ModelEdit{Version: c.Version, CacheBytes: c.CacheBytes, Only: true}, false); err != nil {
					mu.Unlock()
					return "", nil, err
				}
				repos[key] = repo
			}
			mu.Unlock()
			s := tuneServeConfig(exp, c)
			s.Models = repo
			sctx, stop := context.WithCancel(ctx)
			addr, done, err := serveSelf(sctx, s, env)
			if err != nil {
				stop()
				return "", nil, err
			}
			// The client's idle connections close first: one it dialed but never sent on
			// is new to the server, whose Shutdown waits 5 s for such a connection before
			// it closes it (net/http), and the run would wait with it.
			return "http://" + addr, func() { client.CloseIdleConnections(); stop(); <-done }, nil
		},
	}

	out := &tune.Output{Dir: f.Out}
	progress := tune.PrintProgress(stderr, f.Quiet)
	s := tune.Settings{
		Model: j.Model.Name, Base: base, SLO: *j.SLO, Price: f.Price,
		Budget: f.Budget, Start: start, Reserve: tuneReserve, Repeats: f.Repeats, MinGain: f.MinGain,
		MaxExperiments: f.MaxExp,
		Cores:          goruntime.GOMAXPROCS(0), GPU: provider == ort.ProviderCUDA,
		Versions: tune.VersionChoices(j.Model.Name, j.Model.DefaultVersion, versions, j.Gates),
		Workload: tune.DescribeWorkload(j.Workload, outFloats), Batch: batch, Pinned: tune.Pinned(j.Model),
		Load: fmt.Sprintf("%s arrivals (seed %d), %d text(s) per request; steps of %v after %v of warm-up; the first baseline searches from %.0f rps in ≤ %d steps, every other experiment from 0.7 × the current best in ≤ %d steps, to within %.0f%%; request timeout %v",
			f.Arrival, f.Seed, f.Inputs, f.Step, f.Warmup, wideStart, f.WideSteps, f.SearchSteps, 100*f.Resolution, opts.Timeout),
		Record: func(o *tune.Outcome, r *tune.Result) {
			out.Record(o, r)
			progress(o)
		},
	}
	o, runErr := tune.Run(ctx, m, s)
	out.Plot(o)
	if out.Err != nil {
		return fmt.Errorf("tune: writing %s: %w", f.Out, out.Err)
	}
	wrote := []string{tune.DiaryJSONL, tune.DiaryMD, tune.PlotFile}
	if o.BaselineRate > 0 {
		if err := writeTuneConfig(j, o, sc, base); err != nil {
			return err
		}
		wrote = append(wrote, tuneConfigFile)
	}
	_ = tune.WriteSummary(stdout, o) // as the lines below: the files are written whether stdout takes it or not
	for _, name := range wrote {
		fmt.Fprintln(stdout, "wrote", filepath.Join(f.Out, name))
	}
	return runErr
}

// tuneConfigFile is the winning serve config, in the output folder.
const tuneConfigFile = "tuned.yaml"

// tuneServeConfig is sc with c's serve-level levers.
func tuneServeConfig(sc config.Serve, c tune.Config) config.Serve {
	sc.Batch.MaxQueueDelay, sc.Batch.MaxBatchSize, sc.Batch.MaxBatchTokens = c.MaxQueueDelay, c.MaxBatch, c.MaxBatchTokens
	sc.Sessions, sc.Threads = c.Sessions, c.Threads
	return sc
}

// writeConfig writes tuned.yaml: the serve config tune started from, every setting spelled
// out, with the kept levers changed. A kept version or cache lives in model.yaml, so then the
// config points at a repository of links next to it (models/) whose copy of the model's
// model.yaml says so. The file is read back as `server serve --config` reads it.
func writeTuneConfig(j *config.Tune, o *tune.Outcome, sc config.Serve, base tune.Config) error {
	settings, err := serveSettings(sc)
	if err != nil {
		return err
	}
	settings = tune.ServeSettings(settings, base, o.Best)
	if o.Best.Version != base.Version || o.Best.CacheBytes != base.CacheBytes {
		repo, err := filepath.Abs(filepath.Join(j.Flags.Out, "models"))
		if err != nil {
			return err
		}
		marker := filepath.Join(repo, ".ortserve-tune")
		if _, err := os.Stat(repo); err == nil {
			if _, err := os.Stat(marker); err != nil {
				return fmt.Errorf("tune: %s exists and was not written by tune: move it, or give another --out", repo)
			}
			if err := os.RemoveAll(repo); err != nil {
				return err
			}
		}
		if err := tune.Overlay(sc.Models, repo, filepath.Base(j.Dir), tune.ModelEdit{Version: o.Best.Version, CacheBytes: o.Best.CacheBytes}, true); err != nil {
			return err
		}
		if err := os.WriteFile(marker, []byte("a model repository of links written by server tune\n"), 0o644); err != nil {
			return err
		}
		for i := range settings {
			if settings[i].Key == tune.KeyModels {
				settings[i].Value = repo
			}
		}
	}
	comment := []string{
		fmt.Sprintf("Written by server tune (ortserve %s) on %s for model %s against p95 ≤ %v.", version, time.Now().UTC().Format("2006-01-02 15:04 UTC"), j.Flags.Model, j.SLO.P95),
		fmt.Sprintf("Best rate at the SLO: %.1f rps (mean of %d runs); the starting config: %.1f rps (%d runs).", o.BestRate, o.BestRuns, o.BaselineRate, o.BaselineRuns),
	}
	for _, e := range o.Kept() {
		comment = append(comment, fmt.Sprintf("Kept #%d: %s %s -> %s.", e.N, e.Lever, e.From, e.Value))
	}
	if len(o.Kept()) == 0 {
		comment = append(comment, "No change beat the noise: this is the starting config.")
	}
	comment = append(comment, "Serve it with: server serve --config "+tuneConfigFile+" (diary.md says how each lever fared).")
	path := filepath.Join(j.Flags.Out, tuneConfigFile)
	file, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := tune.WriteServeYAML(file, comment, settings); err != nil {
		file.Close()
		return err
	}
	if err := file.Close(); err != nil {
		return err
	}
	if _, err := config.Load([]string{"--config", path}, func(string) string { return "" }, io.Discard); err != nil {
		return fmt.Errorf("tune: the config written, %s, does not load: %w", path, err)
	}
	// The environment overrides a config file: say so where it would undo what was kept.
	for _, k := range config.FileKeys {
		name := config.EnvName(k.Flag)
		if v := os.Getenv(name); v != "" && tune.Changed(base, o.Best, k.Key) {
			fmt.Fprintf(os.Stderr, "tune: %s=%s is set and overrides %s's %s: unset it when serving the tuned config\n", name, v, tuneConfigFile, k.Key)
		}
	}
	return nil
}

// serveSettings spells out every setting of sc as a config file key and value, paths made
// absolute so that the file can live anywhere (config.Serve.Settings).
func serveSettings(sc config.Serve) ([]tune.Setting, error) {
	settings, err := sc.Settings()
	if err != nil {
		return nil, err
	}
	out := make([]tune.Setting, len(settings))
	for i, s := range settings {
		out[i] = tune.Setting(s)
	}
	return out, nil
}
