package config

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ortserve/ortserve/bench"
	"github.com/ortserve/ortserve/bench/tune"
	"github.com/ortserve/ortserve/models"
)

// TuneFlags is everything `server tune` takes on its command line.
type TuneFlags struct {
	Config      string
	Model       string
	SLO         string
	Price       float64
	Data        string
	Column      string
	Budget      time.Duration
	Out         string
	Gates       list
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

// list is a repeatable string flag.
type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

func tuneFlagSet(f *TuneFlags) *flag.FlagSet {
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

// Tune is a `server tune` invocation, checked: nothing native is open yet.
type Tune struct {
	Flags TuneFlags
	Serve Serve
	Dir   string // the model's folder in the repository, named as it may be (models.Find)
	Model models.Config
	SLO   *bench.SLO
	Gates []tune.GateReport
	// Workload is what every experiment sends.
	Workload *bench.Workload
}

// ParseTune reads `server tune`'s flags, serve's settings (the repository, the device) from
// --config and the environment, the model's config, the gate reports and the workload. Every
// error is a usage error.
func ParseTune(args []string, getenv func(string) string, stderr io.Writer) (*Tune, error) {
	j := &Tune{}
	fs := tuneFlagSet(&j.Flags)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUsage, err)
	}
	f := &j.Flags
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
	if j.SLO, err = bench.ParseSLO(f.SLO); err != nil {
		return nil, usagef("%v", err)
	}
	if j.Serve, err = Load(Args(f.Config), getenv, stderr); err != nil {
		return nil, err
	}
	if j.Dir, j.Model, err = models.Find(j.Serve.Sources(), f.Model); err != nil {
		return nil, usagef("--model %s: %w", f.Model, err)
	}
	// Tune tries each setting on a copy of the repository made of links, with the model's
	// model.yaml rewritten (tune.Overlay): the model must be a folder of it, with one.
	if filepath.Dir(j.Dir) != filepath.Clean(j.Serve.Models) {
		return nil, usagef("--model %s: %s is served on its own (--model), not from the model repository %s: tune tries its settings on a copy of the repository: move the folder into it to tune it", f.Model, j.Dir, j.Serve.Models)
	}
	if _, err := os.Stat(filepath.Join(j.Dir, models.ConfigFile)); err != nil {
		return nil, usagef("--model %s: %s has no %s (its config is inferred), and tune sets the model's default version in it: save the output of `server models init %s` as %s to tune it", f.Model, j.Dir, models.ConfigFile, j.Dir, filepath.Join(j.Dir, models.ConfigFile))
	}
	for _, g := range f.Gates {
		r, err := tune.ReadGateReport(g)
		if err != nil {
			return nil, usagef("--gate: %v", err)
		}
		j.Gates = append(j.Gates, r)
	}
	if f.Data == "" {
		j.Workload = bench.BuiltIn()
	} else if j.Workload, err = bench.LoadWorkload(f.Data, f.Column); err != nil {
		return nil, usagef("%v", err)
	}
	return j, nil
}
