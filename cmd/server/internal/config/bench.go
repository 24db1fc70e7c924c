package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/ortserve/ortserve/bench"
)

// BenchServer is one server measured, with the label that tells it from the others.
type BenchServer struct{ Label, URL string }

// Bench is everything `server bench` takes.
type Bench struct {
	URL         string
	Servers     []BenchServer // from URL, or the --self server
	Self        bool
	Config      string // serve config for --self
	AllowRemote bool
	Model       string
	Versions    string
	Route       string
	Data        string
	Column      string
	Rate        string
	Concurrency string
	Arrival     string
	SLO         string
	Offline     bool
	OfflinePer  time.Duration
	Curve       bool // --offline --curve: the cost model against measured runs, instead of the limit
	CurveRuns   int
	JSON        string
	Markdown    string
	HTML        string
	Quiet       bool
	PlanHelm    bool // print Helm values sized from the report (writePlanHelm)
	Opts        bench.Options

	// OfflineBatches are the batch sizes --offline measures, as given; Batches holds them
	// parsed, nil for serve's default (powers of two up to the largest batch).
	OfflineBatches string
	Batches        []int
	urlSet         bool // --url was given
}

func benchFlags(c *Bench) *flag.FlagSet {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	o := &c.Opts
	fs.StringVar(&c.URL, "url", "http://127.0.0.1:8080", "server to measure (loopback unless --allow-remote); several compared side by side as label=URL,label=URL (two configs, say)")
	fs.BoolVar(&c.Self, "self", false, "start `server serve` in this process (on 127.0.0.1, a free port) and measure it")
	fs.StringVar(&c.Config, "config", "", "with --self: the serve config file (docs/config.md); ORTSERVE_* variables apply too")
	fs.BoolVar(&c.AllowRemote, "allow-remote", false, "allow a --url that is not loopback")
	fs.StringVar(&c.Model, "model", "", "model to measure; default: the server's first model (from /info)")
	fs.StringVar(&c.Versions, "versions", "", "comma-separated versions compared side by side, the first the baseline; default: all the model's versions")
	fs.StringVar(&c.Route, "route", "", "/embed, /predict or /v1/embeddings; default: by the model's task")
	fs.StringVar(&c.Data, "data", "", "texts to send: .txt (a line each), .csv/.tsv or .jsonl with --column; default: the built-in set")
	fs.StringVar(&c.Column, "column", "text", "CSV/TSV column or JSONL field of the texts")
	fs.IntVar(&o.Inputs, "inputs", o.Inputs, "texts per request")
	fs.StringVar(&c.Rate, "rate", "", "open-loop rates in requests/s: 100, 50,100,200 or 50:1000:50; default with --slo: search for the highest rate meeting it")
	fs.StringVar(&c.Concurrency, "concurrency", "", "closed-loop clients instead of rates: 1,4,16 or 1:64:8 (latency from the actual send)")
	fs.StringVar(&c.Arrival, "arrival", "poisson", "open-loop arrivals: poisson or constant")
	fs.StringVar(&c.SLO, "slo", "", "service level, as p95=150ms,rps=600 (rps optional)")
	fs.Float64Var(&o.Search.Start, "search-start", 0, "rate the SLO search starts at; 0: a quarter of the offline limit, or 16")
	fs.IntVar(&o.Search.MaxSteps, "search-steps", o.Search.MaxSteps, "most steps the SLO search spends on a version")
	fs.IntVar(&o.Search.Confirm, "search-confirm", 0, "measure a step that fails the SLO (but is not saturated) again up to this many times before its rate counts as failed; retries are extra to --search-steps")
	fs.Float64Var(&o.Search.Resolution, "search-resolution", o.Search.Resolution, "the SLO search stops bisecting when its bracket is within this fraction of the rate")
	fs.DurationVar(&o.Warmup, "warmup", o.Warmup, "load applied before each step's measured window")
	fs.DurationVar(&o.Step, "step", o.Step, "measured window of each step")
	fs.IntVar(&o.MinRequests, "min-requests", 0, "lengthen an open-loop step past --step until it spans this many requests at its rate, for a steadier p95; 0: off")
	fs.DurationVar(&o.Timeout, "timeout", o.Timeout, "per request; a request with no answer by then counts as a timeout")
	fs.IntVar(&o.MaxInFlight, "max-in-flight", o.MaxInFlight, "the generator's cap on requests outstanding; 0: none")
	fs.Uint64Var(&o.Seed, "seed", o.Seed, "seed of Poisson arrivals and the workload's starting point")
	fs.BoolVar(&o.KeepGoing, "keep-going", false, "sweep every --rate even past a version's saturation")
	fs.IntVar(&o.Repeat, "repeat", o.Repeat, "runs of the whole bench, to see run-to-run variance")
	fs.Float64Var(&o.Price, "price-per-hour", 0, "price of one server per hour, for cost per million requests")
	fs.BoolVar(&c.Offline, "offline", false, "also measure raw ONNX Runtime throughput of each version (no HTTP) and report serving efficiency; on by default with --self")
	fs.DurationVar(&c.OfflinePer, "offline-step", time.Second, "time per batch size of the --offline measurement")
	fs.BoolVar(&c.Curve, "curve", false, "with --offline alone: calibrate each version's cost model as serve does at load, then run a grid of batch layouts (rows 1-16 × 16-256 tokens, padded and, where the version packs, packed) and print predicted against measured ms")
	fs.IntVar(&c.CurveRuns, "curve-runs", 5, "with --curve: measured runs of each layout, after one to warm it up; the table shows their median")
	fs.StringVar(&c.OfflineBatches, "offline-batches", "", "batch sizes of the --offline measurement, as 1,2,4; default: powers of two up to serve's largest batch")
	fs.StringVar(&c.JSON, "json", "", "write the report as JSON (the data; `server bench compare` reads it)")
	fs.StringVar(&c.Markdown, "md", "", "write the report as Markdown")
	fs.StringVar(&c.HTML, "html", "", "write the report as one HTML file with SVG plots")
	fs.BoolVar(&c.Quiet, "quiet", false, "no progress bar")
	fs.BoolVar(&c.PlanHelm, "plan-helm", false, "after the report, print Helm values for deploy/ sized for the SLO's rps (server plan simulates them)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: server bench [flags]            measure a server (or --self)
       server bench compare A.json B.json  before/after deltas of two reports
       server bench report [--md F] [--html F] [--plan-helm] A.json   the views of a saved report

Finds the latency/throughput operating point: open-loop load (latency from the intended send
time), model versions compared side by side with their steps interleaved, against an SLO.
Examples:
  server bench --self --model sentiment --versions fp32,int8 --slo p95=100ms
  server bench --url http://127.0.0.1:8080 --model minilm --rate 50:400:50 --html bench.html
  server bench --offline --model minilm --versions fp32,int8 --offline-batches 1   (no server: the raw limit only)
  server bench --offline --curve --model minilm   (no server: the learned cost curve against measured runs)

`)
		fs.PrintDefaults()
	}
	return fs
}

// ParseBench reads `server bench`'s flags and its workload (--data, or the built-in texts).
// Every error is a usage error. --self turns --offline on unless it is given.
func ParseBench(args []string, stderr io.Writer) (*Bench, *bench.Workload, error) {
	c := &Bench{Opts: bench.DefaultOptions()}
	c.Opts.PrecisePacing = true
	fs := benchFlags(c)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrUsage, err)
	}
	if fs.NArg() > 0 {
		return nil, nil, fmt.Errorf("unexpected arguments %v: server bench takes flags; compare is `server bench compare A.json B.json` (%w)", fs.Args(), ErrUsage)
	}
	offlineSet := false
	fs.Visit(func(f *flag.Flag) {
		offlineSet = offlineSet || f.Name == "offline"
		c.urlSet = c.urlSet || f.Name == "url"
	})
	if c.Self && !offlineSet {
		c.Offline = true
	}
	if err := c.parse(); err != nil {
		return nil, nil, fmt.Errorf("%w (%w)", err, ErrUsage)
	}
	w, err := c.workload()
	if err != nil {
		return nil, nil, fmt.Errorf("%w (%w)", err, ErrUsage)
	}
	return c, w, nil

}

// parse checks the flags and fills the options; errors are one line each.
func (c *Bench) parse() error {
	o := &c.Opts
	var err error
	if c.Rate != "" {
		if o.Rates, err = bench.ParseRates(c.Rate); err != nil {
			return fmt.Errorf("--rate %w", err)
		}
	}
	if c.Rate != "" && c.Concurrency != "" {
		return errors.New("--rate and --concurrency exclude each other: open loop or closed loop, not both")
	}
	if c.Concurrency != "" {
		if o.Concurrency, err = bench.ParseConcurrency(c.Concurrency); err != nil {
			return err
		}
	}
	if c.SLO != "" {
		if o.SLO, err = bench.ParseSLO(c.SLO); err != nil {
			return err
		}
	}
	if c.PlanHelm && (o.SLO == nil || o.SLO.RPS <= 0) {
		return errors.New("--plan-helm sizes replicas for the SLO's throughput target: give it as --slo p95=100ms,rps=300")
	}
	switch c.Arrival {
	case "poisson":
		o.Poisson = true
	case "constant":
		o.Poisson = false
	default:
		return fmt.Errorf("--arrival %q: use poisson or constant", c.Arrival)
	}
	if c.Route != "" {
		if err := bench.CheckRoute(c.Route); err != nil {
			return err
		}
	}
	if c.OfflineBatches != "" {
		if !c.Offline {
			return errors.New("--offline-batches sizes the --offline measurement: add --offline (it is on with --self)")
		}
		for _, f := range SplitList(c.OfflineBatches) {
			n, err := strconv.Atoi(f)
			if err != nil || n < 1 {
				return fmt.Errorf("--offline-batches: batch size %q: write sizes of at least 1 as 1,2,4", f)
			}
			c.Batches = append(c.Batches, n)
		}
		if len(c.Batches) == 0 {
			return errors.New("--offline-batches is empty: write batch sizes as 1,2,4")
		}
	}
	if c.Curve {
		switch {
		case !c.OfflineOnly():
			return errors.New("--curve measures this process's sessions, no server: give it with --offline alone, without --self, --slo, --rate or --concurrency")
		case c.CurveRuns < 1:
			return fmt.Errorf("--curve-runs %d: want at least 1 run a layout", c.CurveRuns)
		case c.OfflineBatches != "":
			return errors.New("--curve runs its own grid of batches: leave out --offline-batches")
		case c.JSON != "" || c.Markdown != "" || c.HTML != "":
			return errors.New("--curve prints its tables only: leave out --json, --md and --html")
		}
	}
	if c.OfflineOnly() {
		// The raw limit alone: no server is contacted, so nothing names the model but --model.
		switch {
		case c.urlSet:
			return errors.New("--offline with no load measures this process only, no server: leave out --url, or give --slo, --rate or --concurrency to measure the server too")
		case c.Model == "":
			return errors.New("--offline with no load measures a model of the model repository (ORTSERVE_MODELS): name it with --model")
		}
		return nil
	}
	if !c.Self {
		if err := c.parseURLs(); err != nil {
			return err
		}
	}
	if len(o.Rates) == 0 && len(o.Concurrency) == 0 && o.SLO == nil {
		return errors.New("no load given: pass --slo p95=100ms to search for the highest rate that meets it, or --rate / --concurrency to sweep (or --offline alone for the raw ONNX Runtime limit)")
	}
	return nil
}

// parseURLs reads --url: one URL, or label=URL entries separated by commas.
func (c *Bench) parseURLs() error {
	entries := SplitList(c.URL)
	if len(entries) == 0 {
		return errors.New("--url is empty: write it as http://127.0.0.1:8080")
	}
	seen := map[string]bool{}
	for _, e := range entries {
		label, raw, ok := strings.Cut(e, "=")
		if !ok || strings.Contains(label, "/") {
			label, raw = "", e
		}
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("--url %q is not an http(s) URL: write it as http://127.0.0.1:8080", raw)
		}
		if !c.AllowRemote && !loopback(u.Hostname()) {
			return fmt.Errorf("--url %q is not loopback: load tests stay on this machine unless you pass --allow-remote", raw)
		}
		if len(entries) > 1 && label == "" {
			label = u.Host
		}
		if seen[label] {
			return fmt.Errorf("--url: the label %q is used twice: give each server its own, as a=URL,b=URL", label)
		}
		seen[label] = true
		c.Servers = append(c.Servers, BenchServer{Label: label, URL: raw})
	}
	if len(c.Servers) > 1 && c.Offline {
		return errors.New("--offline measures this machine's sessions for one server config: leave it out when comparing several --url")
	}
	return nil
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (c *Bench) workload() (*bench.Workload, error) {
	if c.Data == "" {
		return bench.BuiltIn(), nil
	}
	return bench.LoadWorkload(c.Data, c.Column)
}

// OfflineOnly reports whether this bench measures only the raw ONNX Runtime limit: --offline
// with no load and no --self, so no server is started or contacted.
func (c *Bench) OfflineOnly() bool {
	o := c.Opts
	return c.Offline && !c.Self && len(o.Rates) == 0 && len(o.Concurrency) == 0 && o.SLO == nil
}

// SplitList is a comma-separated list's entries, trimmed, empty ones left out.
func SplitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
