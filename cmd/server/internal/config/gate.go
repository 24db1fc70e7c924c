package config

import (
	"cmp"
	"flag"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ortserve/ortserve/bench/gate"
	"github.com/ortserve/ortserve/models"
)

// GateFlags is what `server gate` takes on its command line. The gate settings override the
// model's `gate:` section field by field (only the flags given do).
type GateFlags struct {
	Model      string
	Baseline   string
	Candidates string
	Data       string
	TextCol    string
	LabelCol   string
	LabelMap   string
	Budget     gate.Budget
	Opts       gate.Options
	Served     int
	Invariant  bool
	JSON       string
	Markdown   string
	Quiet      bool
	Models     string
	Device     string
	Config     string
}

func gateFlagSet(f *GateFlags) *flag.FlagSet {
	fs := flag.NewFlagSet("gate", flag.ContinueOnError)
	fs.StringVar(&f.Model, "model", "", "model to gate (its name in the model repository); required")
	fs.StringVar(&f.Baseline, "baseline", "", "reference version; default: the model's gate.baseline, or its default_version")
	fs.StringVar(&f.Candidates, "candidate", "", "version(s) to gate, comma-separated; default: gate.candidates, or every other version that runs on the device")
	fs.StringVar(&f.Data, "data", "", "labeled dataset `FILE`: .csv/.tsv with a header, or .jsonl; default: gate.data (relative to the model folder)")
	fs.StringVar(&f.TextCol, "text-column", "", "column (field) of the texts; default: gate.text_column, or text")
	fs.StringVar(&f.LabelCol, "label-column", "", "column (field) of the labels; default: gate.label_column, or label")
	fs.StringVar(&f.LabelMap, "label-map", "", "rename the data's labels to the model's, as `0=negative,1=positive`; default: gate.label_map")
	fs.Float64Var(&f.Budget.MaxDrop, "max-drop", 0, "most accuracy a candidate may lose, in `points`, held against the upper end of the drop's confidence interval (classify: required; embed: nearest-centroid accuracy, 0: not checked)")
	fs.Float64Var(&f.Budget.MinAgreement, "min-agreement", 0, "classify: least fraction of texts on which a candidate predicts the baseline's label; 0: not checked")
	fs.Float64Var(&f.Budget.MinCosineMean, "min-cosine-mean", 0, "embed: least mean cosine between a candidate's and the baseline's embeddings; 0: not checked")
	fs.BoolVar(&f.Budget.Strict, "strict", false, "fail a drop the data cannot show to be within --max-drop (its interval reaches past it), not only one whose estimate is over it")
	fs.Float64Var(&f.Budget.MinCosineP1, "min-cosine-p1", 0, "embed: least 1st percentile of that cosine; 0: not checked")
	fs.IntVar(&f.Opts.Resamples, "resamples", gate.DefaultResamples, "bootstrap resamples of the accuracy drop's confidence interval (at least 100)")
	fs.Uint64Var(&f.Opts.Seed, "seed", gate.DefaultSeed, "seed of the bootstrap, so that a report can be reproduced")
	fs.Float64Var(&f.Opts.Confidence, "confidence", gate.DefaultConfidence, "coverage of the confidence interval")
	fs.IntVar(&f.Served, "served-concurrency", gate.DefaultServedConcurrency, "after the fixed chunks, send every version the same texts again through the batcher, one text per request with `N` in flight, and report how far each version's answers move (served-path variability); 0: skip that pass")
	fs.BoolVar(&f.Invariant, "require-batch-invariance", false, "fail a candidate whose served answers differ from its fixed-chunk answers: embed min cosine < 0.9999, classify a flipped label or |Δp| ≥ 1e-4 (without it the served pass is informational)")
	fs.StringVar(&f.JSON, "json", "", "write the report as JSON to `FILE` (with several candidates, one file each: FILE with -VERSION before its extension)")
	fs.StringVar(&f.Markdown, "md", "", "write the report as Markdown to `FILE` (several candidates: as --json)")
	fs.BoolVar(&f.Quiet, "quiet", false, "no progress bar and no notes on stderr")
	fs.StringVar(&f.Models, "models", "", "model repository `DIR`; default: serve's (--config, ORTSERVE_MODELS, the cache)")
	fs.StringVar(&f.Device, "device", "", "auto, cuda or cpu; default: serve's")
	fs.StringVar(&f.Config, "config", "", "serve's config file (docs/config.md) for the model repository, library, device and sessions")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: server gate --model M [flags]

Accuracy gate for quantized versions: runs the baseline and each candidate version of a model
on a labeled dataset, in this process, and checks each candidate against a budget. A
classifier's accuracy drop must stay within --max-drop points at the upper end of a paired
bootstrap confidence interval; an embedder is judged on the cosine to the baseline's
embeddings and on nearest-centroid accuracy. The flags override the model's gate: section in
model.yaml (docs/quantization.md), so a model with one needs no flags.
Every version runs the same fixed, length-sorted chunks one at a time, so that the numbers can
be reproduced. Then the same texts go through the batcher as a server sends them (one per
request, --served-concurrency in flight): the report says per version how far the served
answers moved from its fixed-chunk ones, and whether it is batch-invariant. That pass is
informational unless --require-batch-invariance.
Exit status: 0 every candidate passes, 1 one fails, 2 a usage or data error.
Examples:
  server gate --model sentiment
  server gate --model sentiment --candidate int8 --data test.csv --max-drop 1 --md gate.md
  server gate --model minilm --candidate int8 --data test.csv --min-cosine-mean 0.98

`)
		fs.PrintDefaults()
	}
	return fs
}

// Gate is one `server gate` invocation, resolved: settings merged, model folder found,
// dataset loaded. Nothing native is opened yet.
type Gate struct {
	Serve      Serve
	Dir        string // the model folder
	Model      models.Config
	Baseline   string
	Candidates []string
	Explicit   bool // candidates came from --candidate: one that cannot run here is an error
	Data       *gate.Dataset
	Budget     gate.Budget
	Options    gate.Options
	Served     int  // requests in flight in the served pass; 0: no served pass
	Invariant  bool // the candidates must be batch-invariant
	JSON       string
	Markdown   string
	Quiet      bool
}

// ParseGate reads `server gate`'s flags, serve's settings for the repository and device, the
// model's config, and the dataset. Every error is a usage error.
func ParseGate(args []string, getenv func(string) string, stderr io.Writer) (*Gate, error) {
	var f GateFlags
	fs := gateFlagSet(&f)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUsage, err)
	}
	if fs.NArg() > 0 {
		return nil, usagef("unexpected arguments %v: server gate takes flags", fs.Args())
	}
	if f.Model == "" {
		return nil, usagef("no --model: name the model to gate")
	}
	// Checked here as well as by the gate, so that they fail before the models load.
	if f.Opts.Resamples < 100 {
		return nil, usagef("--resamples %d: use at least 100", f.Opts.Resamples)
	}
	if !(f.Opts.Confidence > 0 && f.Opts.Confidence < 1) {
		return nil, usagef("--confidence %g: give a fraction between 0 and 1, e.g. 0.95", f.Opts.Confidence)
	}
	if f.Served < 0 {
		return nil, usagef("--served-concurrency %d: give the requests in flight, or 0 to skip the served pass", f.Served)
	}
	if f.Invariant && f.Served == 0 {
		return nil, usagef("--require-batch-invariance needs the served pass: drop --served-concurrency 0")
	}
	given := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })

	// Serve's settings say where the repository and the library are and which device and
	// how many sessions to use; --models and --device are serve's flags passed through.
	sargs := Args(f.Config)
	if given["models"] {
		sargs = append(sargs, "--models", f.Models)
	}
	if given["device"] {
		sargs = append(sargs, "--device", f.Device)
	}
	sc, err := Load(sargs, getenv, stderr)
	if err != nil {
		return nil, err
	}
	dir, cfg, err := models.Find(sc.Sources(), f.Model)
	if err != nil {
		return nil, usagef("%w", err)
	}

	// The model's gate section, then the flags given over it.
	g := models.GateConfig{}
	if cfg.Gate != nil {
		g = *cfg.Gate
		g.LabelMap = maps.Clone(g.LabelMap)
		if g.Data != "" && !filepath.IsAbs(g.Data) {
			g.Data = filepath.Join(dir, g.Data)
		}
	}
	if given["baseline"] {
		g.Baseline = f.Baseline
		if !given["candidate"] {
			// The section's candidates were chosen against its baseline: drop the new one.
			g.Candidates = slices.DeleteFunc(slices.Clone(g.Candidates), func(v string) bool { return v == f.Baseline })
		}
	}
	j := &Gate{Serve: sc, Dir: dir, Model: cfg, Options: f.Opts, JSON: f.JSON, Markdown: f.Markdown, Quiet: f.Quiet, Served: f.Served, Invariant: f.Invariant}
	if cfg.Cache.MaxBytes > 0 && f.Invariant {
		return nil, usagef("--require-batch-invariance: %s has a response cache (cache.max_bytes in %s), which would answer the served pass from the fixed chunks' answers: gate a copy without it",
			cfg.Name, filepath.Join(dir, models.ConfigFile))
	}
	if given["candidate"] {
		g.Candidates = nil
		for v := range strings.SplitSeq(f.Candidates, ",") {
			if v = strings.TrimSpace(v); v != "" {
				g.Candidates = append(g.Candidates, v)
			}
		}
		if len(g.Candidates) == 0 {
			return nil, usagef("--candidate %q names no version", f.Candidates)
		}
		j.Explicit = true
	}
	if given["data"] {
		g.Data = f.Data
	}
	g.TextColumn = override(given["text-column"], f.TextCol, g.TextColumn)
	g.LabelColumn = override(given["label-column"], f.LabelCol, g.LabelColumn)
	if given["label-map"] {
		if g.LabelMap, err = gate.ParseLabelMap(f.LabelMap); err != nil {
			return nil, usagef("--label-map: %w", err)
		}
	}
	g.MaxDrop = override(given["max-drop"], f.Budget.MaxDrop, g.MaxDrop)
	g.MinAgreement = override(given["min-agreement"], f.Budget.MinAgreement, g.MinAgreement)
	g.MinCosineMean = override(given["min-cosine-mean"], f.Budget.MinCosineMean, g.MinCosineMean)
	g.MinCosineP1 = override(given["min-cosine-p1"], f.Budget.MinCosineP1, g.MinCosineP1)
	if given["strict"] {
		g.Strict = f.Budget.Strict
	}

	// The merged settings are checked by the same rules as a gate section.
	merged := cfg
	merged.Gate = &g
	if err := merged.Validate(); err != nil {
		// The model's own section was valid (ReadConfig): the flags, or a setting neither
		// gives, are at fault, so the message speaks of flags.
		where := "a gate: section in " + filepath.Join(dir, models.ConfigFile) + " can set it too (docs/quantization.md)"
		if cfg.Gate != nil {
			where = "flags override the gate: section of " + filepath.Join(dir, models.ConfigFile)
		}
		return nil, usagef("%s: %s; %s", cfg.Name, gateKeysAsFlags.Replace(err.Error()), where)
	}
	j.Baseline = cmp.Or(g.Baseline, cfg.DefaultVersion)
	j.Candidates = g.Candidates
	j.Budget = gate.Budget{MaxDrop: g.MaxDrop, Strict: g.Strict, MinAgreement: g.MinAgreement, MinCosineMean: g.MinCosineMean, MinCosineP1: g.MinCosineP1}

	if g.Data == "" {
		return nil, usagef("no dataset: give --data FILE, or data in the gate: section of %s", filepath.Join(dir, models.ConfigFile))
	}
	o := gate.DatasetOptions{TextColumn: g.TextColumn, LabelColumn: g.LabelColumn, LabelMap: g.LabelMap}
	// Cosine budgets alone compare the versions with each other: no labels needed.
	o.LabelsOptional = cfg.Task == models.TaskEmbed && g.MaxDrop == 0
	if j.Data, err = gate.LoadDataset(g.Data, o); err != nil {
		return nil, usagef("--data: %w", err)
	}
	if cfg.Task == models.TaskClassify {
		for _, l := range j.Data.Labels {
			if !slices.Contains(cfg.Labels, l) {
				hint := "rename the data's labels with --label-map RAW=LABEL,... (e.g. 0=negative,1=positive) or label_map in the gate section"
				if g.LabelMap != nil {
					hint = "the label map gives it: map to the model's labels"
				}
				return nil, usagef("%s: label %q is not one of %s's labels %v: %s", g.Data, l, cfg.Name, cfg.Labels, hint)
			}
		}
	}
	return j, nil
}

// gateKeysAsFlags words the gate section's validation errors in flags.
var gateKeysAsFlags = strings.NewReplacer("gate: ", "", "\n", "; ",
	"max_drop", "--max-drop", "min_agreement", "--min-agreement", "min_cosine_mean", "--min-cosine-mean",
	"min_cosine_p1", "--min-cosine-p1", "label_map", "--label-map")

// override is flag when given, else the file's value.
func override[T any](given bool, flag, file T) T {
	if given {
		return flag
	}
	return file
}
