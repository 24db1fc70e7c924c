package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"sync"
	"time"

	"github.com/ortserve/ortserve/bench"
	"github.com/ortserve/ortserve/bench/offline"
	"github.com/ortserve/ortserve/bench/tune"
	"github.com/ortserve/ortserve/cmd/server/internal/config"
	"github.com/ortserve/ortserve/models"
	"github.com/ortserve/ortserve/runtime/ort"
)

// tuneFlags is everything `server tune` takes on its command line.
type tuneFlags struct {
	Config      string
	Model       string
	SLO         string
	Price       float64
	Data        string
	Column      string
	Budget      time.Duration
	Out         string
	Gates       tuneList
	Step        time.Duration
	Warmup      time.Duration
	SearchSteps int
	WideSteps   int
	Resolution  float64
	Repeats     int
	MaxExp      int
	MinGain     float64
	Seed        uint64
	Arrival     string
	Inputs      int
	OfflineStep time.Duration
	Quiet       bool
}

// tuneList is a repeatable string flag.
type tuneList []string

func (l *tuneList) String() string     { return strings.Join(*l, ",") }
func (l *tuneList) Set(v string) error { *l = append(*l, v); return nil }

// tuneReserve is the part of the budget kept for what follows the last experiment: the plot,
// the config and its check.
const tuneReserve = 3 * time.Second

func tuneFlagSet(f *tuneFlags) *flag.FlagSet {
	fs := flag.NewFlagSet("tune", flag.ContinueOnError)
	fs.StringVar(&f.Config, "config", "", "the serve config to start from (docs/config.md); ORTSERVE_* variables apply too")
	fs.StringVar(&f.Model, "model", "", "model to tune (its folder in the model repository); required")
	fs.StringVar(&f.SLO, "slo", "", "service level, as p95=100ms,rps=300 (rps optional); required")
	fs.Float64Var(&f.Price, "price-per-hour", 0, "price of one server per hour, for the cost of a million requests")
	fs.StringVar(&f.Data, "data", "", "workload: .txt (a line each), .csv/.tsv or .jsonl with --column; default: bench's built-in texts")
	fs.StringVar(&f.Column, "column", "text", "CSV/TSV column or JSONL field of the texts")
	fs.DurationVar(&f.Budget, "budget", 10*time.Minute, "the whole run's time, start-up and outputs included; no experiment starts that would not end within it")
	fs.StringVar(&f.Out, "out", "tune-out", "folder for the diary, the plot, the tuned config and each experiment's bench report")
	fs.Var(&f.Gates, "gate", "a `server gate --json` report (repeatable): a version other than the default is tried only with a passing one")
	fs.DurationVar(&f.Step, "step", 3*time.Second, "measured window of each load step")
	fs.DurationVar(&f.Warmup, "warmup", time.Second, "load applied before each step's window")
	fs.IntVar(&f.SearchSteps, "search-steps", 6, "most steps of one experiment's search around the current best")
	fs.IntVar(&f.WideSteps, "baseline-steps", 8, "most steps of the first baseline's search, which starts from scratch")
	fs.Float64Var(&f.Resolution, "resolution", 0.05, "a search stops when its bracket is within this fraction")
	fs.IntVar(&f.Repeats, "repeats", 2, "measurements of the baseline, for the run-to-run noise (at least 2)")
	fs.IntVar(&f.MaxExp, "max-experiments", 0, "most measurements in the whole run, baselines included, whichever of it and --budget comes first; 0: no cap")
	fs.Float64Var(&f.MinGain, "min-gain", 0.05, "the least gain a change is kept for, however small the noise")
	fs.Uint64Var(&f.Seed, "seed", 1, "seed of the arrivals and the workload's starting point: the same for every experiment")
	fs.StringVar(&f.Arrival, "arrival", "poisson", "open-loop arrivals: poisson or constant")
	fs.IntVar(&f.Inputs, "inputs", 1, "texts per request")
	fs.DurationVar(&f.OfflineStep, "offline-step", 300*time.Millisecond, "time per batch size of the offline batch-cost measurement that orders max_batch values; 0: none")
	fs.BoolVar(&f.Quiet, "quiet", false, "no line per experiment on stderr")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: server tune --model M --slo p95=100ms[,rps=N] [flags]

The tuning loop as a command: measure the serve config's baseline (twice, for the noise),
name the dominant cost, then change one lever at a time around the current best (batch
window, max batch size, token budget, sessions, threads, a gated version, the response
cache), each change measured by bench against the same load and SLO, kept only when it beats
the noise, until a pass keeps nothing or the budget ends. Writes diary.jsonl, diary.md,
plot.svg, tuned.yaml (for server serve --config) and each experiment's bench JSON to --out.
docs/tune.md describes the rules.
Examples:
  server tune --model sentiment --slo p95=100ms --budget 10m
  server tune --model sentiment --slo p95=100ms,rps=300 --gate gate-int8.json --price-per-hour 0.10

`)
		fs.PrintDefaults()
	}
	return fs
}

// tuneJob is a `server tune` invocation, checked: nothing native is open yet.
type tuneJob struct {
	f     tuneFlags
	serve config.Serve
	dir   string // the model's folder in the repository, named as it may be (models.Find)
	cfg   models.Config
	slo   *bench.SLO
	gates []tune.GateReport
	w     *bench.Workload
}

func parseTune(args []string, getenv func(string) string, stderr io.Writer) (*tuneJob, error) {
	j := &tuneJob{}
	fs := tuneFlagSet(&j.f)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return nil, fmt.Errorf("%w: %w", errUsage, err)
	}
	f := &j.f
	switch {
	case fs.NArg() > 0:
		return nil, usagef("unexpected arguments %v: server tune takes flags", fs.Args())
	case f.Model == "":
		return nil, usagef("no --model: name the model to tune")
	case f.SLO == "":
		return nil, usagef("no --slo: tune needs a latency target, as --slo p95=100ms")
	case f.Budget < 10*time.Second:
		return nil, usagef("--budget %v: give at least 10s", f.Budget)
	case f.Repeats < 2:
		return nil, usagef("--repeats %d: the baseline is measured at least twice, for the noise", f.Repeats)
	case f.MaxExp != 0 && f.MaxExp < f.Repeats:
		return nil, usagef("--max-experiments %d: give 0 (no cap) or at least --repeats (%d), the baseline's runs", f.MaxExp, f.Repeats)
	case f.Step <= 0 || f.Warmup < 0 || f.OfflineStep < 0:
		return nil, usagef("--step must be positive, --warmup and --offline-step at least 0")
	case f.SearchSteps < 2 || f.WideSteps < 2:
		return nil, usagef("--search-steps and --baseline-steps: at least 2")
	case !(f.Resolution > 0 && f.Resolution < 1) || f.MinGain < 0 || f.Inputs < 1 || f.Price < 0:
		return nil, usagef("--resolution between 0 and 1, --min-gain and --price-per-hour at least 0, --inputs at least 1")
	case f.Arrival != "poisson" && f.Arrival != "constant":
		return nil, usagef("--arrival %q: use poisson or constant", f.Arrival)
	}
	var err error
	if j.slo, err = bench.ParseSLO(f.SLO); err != nil {
		return nil, usagef("%v", err)
	}
	if j.serve, err = config.Load(configArgs(f.Config), getenv, stderr); err != nil {
		return nil, err
	}
	if j.dir, j.cfg, err = models.Find(j.serve.Sources(), f.Model); err != nil {
		return nil, usagef("--model %s: %w", f.Model, err)
	}
	// Tune tries each setting on a copy of the repository made of links, with the model's
	// model.yaml rewritten (tune.Overlay): the model must be a folder of it, with one.
	if filepath.Dir(j.dir) != filepath.Clean(j.serve.Models) {
		return nil, usagef("--model %s: %s is served on its own (--model), not from the model repository %s: tune tries its settings on a copy of the repository: move the folder into it to tune it", f.Model, j.dir, j.serve.Models)
	}
	if _, err := os.Stat(filepath.Join(j.dir, models.ConfigFile)); err != nil {
		return nil, usagef("--model %s: %s has no %s (its config is inferred), and tune sets the model's default version in it: save the output of `server models init %s` as %s to tune it", f.Model, j.dir, models.ConfigFile, j.dir, filepath.Join(j.dir, models.ConfigFile))
	}
	for _, g := range f.Gates {
		r, err := tune.ReadGateReport(g)
		if err != nil {
			return nil, usagef("--gate: %v", err)
		}
		j.gates = append(j.gates, r)
	}
	if f.Data == "" {
		j.w = bench.BuiltIn()
	} else if j.w, err = bench.LoadWorkload(f.Data, f.Column); err != nil {
		return nil, usagef("%v", err)
	}
	return j, nil
}

func runTune(ctx context.Context, args []string, stdout io.Writer) error {
	start := time.Now() // the budget counts from here
	j, err := parseTune(args, os.Getenv, os.Stderr)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(j.f.Out, 0o755); err != nil {
		return err
	}
	// An earlier run's experiment reports and config would read as this run's.
	stale, _ := filepath.Glob(filepath.Join(j.f.Out, "exp-[0-9][0-9]*.json"))
	for _, p := range append(stale, filepath.Join(j.f.Out, tuneConfigFile)) {
		os.Remove(p)
	}
	env, err := ort.Open(j.serve.ORTLib)
	if err != nil {
		return err
	}
	defer env.Close()
	return j.run(ctx, env, start, stdout, os.Stderr)
}

// run tunes on env and writes the outputs.
func (j *tuneJob) run(ctx context.Context, env *ort.Env, start time.Time, stdout, stderr io.Writer) error {
	f, sc := &j.f, j.serve
	provider, _, err := resolveDevice(env, sc, nil, "")
	if err != nil {
		return err
	}
	b := newBackend(env, sc, provider, nil)
	base := tune.Config{
		MaxQueueDelay: sc.Batch.MaxQueueDelay, MaxBatch: sc.Batch.MaxBatchSize, MaxBatchTokens: sc.Batch.MaxBatchTokens,
		Sessions: cmp.Or(j.cfg.Instances, b.sessions), Threads: b.threads, Version: j.cfg.DefaultVersion, CacheBytes: j.cfg.Cache.MaxBytes,
	}
	var versions []string
	for name, v := range j.cfg.Versions {
		if v.RunsOn(b.Device()) {
			versions = append(versions, name)
		}
	}
	outFloats := len(j.cfg.Labels)
	if j.cfg.Task == models.TaskEmbed {
		outFloats = 1024 // the dimension is known only once loaded; this errs on the large side
	}
	route := "/embed"
	if j.cfg.Task == models.TaskClassify {
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
		pts, err := offlineLimit(octx, b, j.dir, "", j.w.Texts, offline.Batches(sc.Batch.MaxBatchSize), f.OfflineStep)
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
	opts.SLO, opts.Price, opts.Seed, opts.Inputs = j.slo, f.Price, f.Seed, f.Inputs
	opts.Warmup, opts.Step, opts.Poisson = f.Warmup, f.Step, f.Arrival == "poisson"
	// A request 10× over the latency target has failed the step anyway; not waiting longer
	// for it keeps an overloaded step's drain, and so each experiment's length, bounded.
	opts.Timeout = min(10*time.Second, max(time.Second, 10*j.slo.P95))
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
		Client: client, Workload: j.w, Model: j.cfg.Name, Route: route, Options: opts,
		WideStart: wideStart, WideSteps: f.WideSteps, NarrowSteps: f.SearchSteps, Resolution: f.Resolution,
		Serve: func(ctx context.Context, c tune.Config) (string, func(), error) {
			mu.Lock()
			key := tune.Config{Version: c.Version, CacheBytes: c.CacheBytes}
			repo, ok := repos[key]
			if !ok {
				repo = filepath.Join(work, fmt.Sprintf("repo-%d", len(repos)+1))
				if err := tune.Overlay(sc.Models, repo, filepath.Base(j.dir), tune.ModelEdit{Version: c.Version, CacheBytes: c.CacheBytes, Only: true}, false); err != nil {
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
	progress := tuneProgress(stderr, f.Quiet)
	s := tune.Settings{
		Model: j.cfg.Name, Base: base, SLO: *j.slo, Price: f.Price,
		Budget: f.Budget, Start: start, Reserve: tuneReserve, Repeats: f.Repeats, MinGain: f.MinGain,
		MaxExperiments: f.MaxExp,
		Cores:          goruntime.NumCPU(), GPU: provider == ort.ProviderCUDA,
		Versions: tune.VersionChoices(j.cfg.Name, j.cfg.DefaultVersion, versions, j.gates),
		Workload: tune.DescribeWorkload(j.w, outFloats), Batch: batch, Pinned: tune.Pinned(j.cfg),
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
		if err := j.writeConfig(o, sc, base); err != nil {
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
func (j *tuneJob) writeConfig(o *tune.Outcome, sc config.Serve, base tune.Config) error {
	settings, err := serveSettings(sc)
	if err != nil {
		return err
	}
	settings = tune.ServeSettings(settings, base, o.Best)
	if o.Best.Version != base.Version || o.Best.CacheBytes != base.CacheBytes {
		repo, err := filepath.Abs(filepath.Join(j.f.Out, "models"))
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
		if err := tune.Overlay(sc.Models, repo, filepath.Base(j.dir), tune.ModelEdit{Version: o.Best.Version, CacheBytes: o.Best.CacheBytes}, true); err != nil {
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
		fmt.Sprintf("Written by server tune (ortserve %s) on %s for model %s against p95 ≤ %v.", version, time.Now().UTC().Format("2006-01-02 15:04 UTC"), j.f.Model, j.slo.P95),
		fmt.Sprintf("Best rate at the SLO: %.1f rps (mean of %d runs); the starting config: %.1f rps (%d runs).", o.BestRate, o.BestRuns, o.BaselineRate, o.BaselineRuns),
	}
	for _, e := range o.Kept() {
		comment = append(comment, fmt.Sprintf("Kept #%d: %s %s -> %s.", e.N, e.Lever, e.From, e.Value))
	}
	if len(o.Kept()) == 0 {
		comment = append(comment, "No change beat the noise: this is the starting config.")
	}
	comment = append(comment, "Serve it with: server serve --config "+tuneConfigFile+" (diary.md says how each lever fared).")
	path := filepath.Join(j.f.Out, tuneConfigFile)
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
		if v := os.Getenv(name); v != "" && tuneChanged(base, o.Best, k.Key) {
			fmt.Fprintf(os.Stderr, "tune: %s=%s is set and overrides %s's %s: unset it when serving the tuned config\n", name, v, tuneConfigFile, k.Key)
		}
	}
	return nil
}

// tuneChanged says whether the tuned config's file key differs from the starting config's.
func tuneChanged(from, to tune.Config, key string) bool {
	switch key {
	case tune.KeyQueueDelay:
		return from.MaxQueueDelay != to.MaxQueueDelay
	case tune.KeyMaxBatch:
		return from.MaxBatch != to.MaxBatch
	case tune.KeyBatchTokens:
		return from.MaxBatchTokens != to.MaxBatchTokens
	case tune.KeySessions, tune.KeyThreads:
		return from.Sessions != to.Sessions || from.Threads != to.Threads
	case tune.KeyModels:
		return from.Version != to.Version || from.CacheBytes != to.CacheBytes
	}
	return false
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

// tuneProgress prints each experiment's decision as it is made, and the notes, to w.
func tuneProgress(w io.Writer, quiet bool) func(*tune.Outcome) {
	if quiet {
		return func(*tune.Outcome) {}
	}
	said := map[string]bool{}
	return func(o *tune.Outcome) {
		for _, e := range o.Entries {
			if e.N > 0 && (e.Decision == "" || e.Decision == "confirming") {
				continue // not decided yet
			}
			key := fmt.Sprintf("%d/%s/%s", e.N, e.Decision, e.Why)
			if said[key] {
				continue
			}
			said[key] = true
			if e.N == 0 {
				fmt.Fprintf(w, "tune: %s\n", e.Why)
				continue
			}
			what := e.Kind
			if e.Lever != "" {
				what += fmt.Sprintf(" %s %s", e.Lever, e.Value)
			}
			fmt.Fprintf(w, "tune: #%d %-40s %6.1f rps  p95 %6.1f ms  %-8s %s\n", e.N, what, e.Best, e.P95, e.Decision, e.Why)
		}
	}
}
