package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ortserve/ortserve/bench"
	"github.com/ortserve/ortserve/bench/offline"
	"github.com/ortserve/ortserve/cmd/server/internal/config"
	"github.com/ortserve/ortserve/runtime/ort"
	"github.com/ortserve/ortserve/server"
)

// benchServer is one server measured, with the label that tells it from the others.
type benchServer struct{ Label, URL string }

// benchConfig is everything `server bench` takes.
type benchConfig struct {
	URL         string
	servers     []benchServer // from URL, or the --self server
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
	JSON        string
	Markdown    string
	HTML        string
	Quiet       bool
	PlanHelm    bool // print Helm values sized from the report (writePlanHelm)
	Opts        bench.Options

	// OfflineBatches are the batch sizes --offline measures, as given; batches holds them
	// parsed, nil for serve's default (powers of two up to the largest batch).
	OfflineBatches string
	batches        []int
	urlSet         bool   // --url was given
	offlineSetup   string // the sessions and threads --offline measured, for the report
}

func benchFlags(c *benchConfig) *flag.FlagSet {
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

`)
		fs.PrintDefaults()
	}
	return fs
}

func runBench(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) > 0 && args[0] == "compare" {
		return runCompare(args[1:], stdout)
	}
	if len(args) > 0 && args[0] == "report" {
		return runReport(args[1:], stdout)
	}
	c := benchConfig{Opts: bench.DefaultOptions()}
	c.Opts.PrecisePacing = true
	fs := benchFlags(&c)
	fs.SetOutput(os.Stderr)
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %v: server bench takes flags; compare is `server bench compare A.json B.json` (%w)", fs.Args(), errUsage)
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
		return fmt.Errorf("%w (%w)", err, errUsage)
	}
	w, err := c.workload()
	if err != nil {
		return fmt.Errorf("%w (%w)", err, errUsage)
	}

	// With --self, or --offline, this process opens ONNX Runtime.
	var env *ort.Env
	sc := config.Default()
	if c.Self || c.Offline {
		if sc, err = config.Load(configArgs(c.Config), os.Getenv, os.Stderr); err != nil {
			return err
		}
		if c.offlineOnly() {
			if err := c.offlineTargets(sc.Sources()); err != nil {
				return fmt.Errorf("%w (%w)", err, errUsage)
			}
		}
		if env, err = ort.Open(sc.ORTLib); err != nil {
			return err
		}
		defer env.Close()
	}
	if c.offlineOnly() {
		return c.runOffline(ctx, env, sc, w, stdout)
	}
	target := ""
	if c.Self {
		sctx, stop := context.WithCancel(ctx)
		addr, done, err := serveSelf(sctx, sc, env)
		if err != nil {
			stop()
			return err
		}
		defer func() { stop(); <-done }()
		c.servers = []benchServer{{URL: "http://" + addr}}
		target = "ortserve --self"
		if c.Config != "" {
			target = "ortserve --self (" + c.Config + ")"
		}
	} else {
		target = c.URL
	}

	client := &http.Client{Transport: &http.Transport{
		MaxIdleConns: 0, MaxIdleConnsPerHost: max(64, c.Opts.MaxInFlight), IdleConnTimeout: 30 * time.Second,
		DisableCompression: true,
	}}
	defer client.CloseIdleConnections()
	if err := c.targets(ctx, client); err != nil {
		return err
	}

	if c.Offline {
		if err := c.offline(ctx, env, sc, w); err != nil {
			return err
		}
	}
	if c.Opts.Search.Start == 0 {
		c.Opts.Search.Start = 16
		if raw := offline.Slowest(c.Opts.Offline); raw > 0 {
			c.Opts.Search.Start = math.Max(1, math.Round(raw/4/float64(c.Opts.Inputs)))
		}
	}
	bar := newProgress(os.Stderr, c.Quiet)
	c.Opts.Progress = bar.update
	r, err := bench.Measure(ctx, client, w, c.Opts)
	bar.done()
	if r == nil {
		return err
	}
	r.Tool = "ortserve " + version
	r.Target = target
	if c.Self {
		r.Notes = append(r.Notes, fmt.Sprintf("--self: the load generator and the server shared this machine's %d CPUs; the generator's own CPU time competes with inference", r.Host.CPUs))
	}
	if err != nil {
		r.Notes = append(r.Notes, "interrupted: the report holds the steps measured before "+err.Error())
	}
	if werr := c.write(r, stdout); werr != nil {
		return werr
	}
	return err
}

// configArgs are the serve arguments --self starts with.
func configArgs(config string) []string {
	if config == "" {
		return nil
	}
	return []string{"--config", config}
}

// parse checks the flags and fills the options; errors are one line each.
func (c *benchConfig) parse() error {
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
		for _, f := range splitList(c.OfflineBatches) {
			n, err := strconv.Atoi(f)
			if err != nil || n < 1 {
				return fmt.Errorf("--offline-batches: batch size %q: write sizes of at least 1 as 1,2,4", f)
			}
			c.batches = append(c.batches, n)
		}
		if len(c.batches) == 0 {
			return errors.New("--offline-batches is empty: write batch sizes as 1,2,4")
		}
	}
	if c.offlineOnly() {
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
func (c *benchConfig) parseURLs() error {
	entries := splitList(c.URL)
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
		c.servers = append(c.servers, benchServer{Label: label, URL: raw})
	}
	if len(c.servers) > 1 && c.Offline {
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

func (c *benchConfig) workload() (*bench.Workload, error) {
	if c.Data == "" {
		return bench.BuiltIn(), nil
	}
	return bench.LoadWorkload(c.Data, c.Column)
}

// targets fills the versions to compare and the route from each server's /info, when it
// has one; a server without it (a peer) is measured as it is, with the flags given. Several
// servers must all serve the model and versions asked for.
func (c *benchConfig) targets(ctx context.Context, client *http.Client) error {
	for _, srv := range c.servers {
		if err := c.serverTargets(ctx, client, srv); err != nil {
			return err
		}
	}
	return nil
}

func (c *benchConfig) serverTargets(ctx context.Context, client *http.Client, srv benchServer) error {
	info, err := fetchInfo(ctx, client, srv.URL)
	var m *server.ModelInfo
	if err == nil {
		for i := range info.Models {
			if c.Model == "" || info.Models[i].Name == c.Model {
				m = &info.Models[i]
				break
			}
		}
		if m == nil && c.Model != "" {
			var names []string
			for _, mi := range info.Models {
				names = append(names, mi.Name)
			}
			return fmt.Errorf("--model %q: %s serves %v (%w)", c.Model, srv.URL, names, errUsage)
		}
	} else if errors.Is(err, context.Canceled) {
		return err
	} else if errors.Is(err, errUnreachable) {
		return fmt.Errorf("--url %s: %w: is the server running? (or use --self)", srv.URL, err)
	}
	versions := splitList(c.Versions)
	if m != nil {
		c.Model = m.Name
		if len(versions) == 0 {
			versions = m.Versions
		}
		for _, v := range versions {
			if !slices.Contains(m.Versions, v) {
				return fmt.Errorf("--versions: %s has no version %q: it has %v (%w)", m.Name, v, m.Versions, errUsage)
			}
		}
		if c.Route == "" {
			c.Route = "/embed"
			if m.Task == "classify" {
				c.Route = "/predict"
			}
		}
	}
	if c.Route == "" {
		c.Route = "/embed"
	}
	if len(versions) == 0 {
		versions = []string{""}
	}
	for _, v := range versions {
		c.Opts.Targets = append(c.Opts.Targets, bench.Target{URL: srv.URL, Route: c.Route, Model: c.Model, Version: v, Label: srv.Label})
	}
	if c.Offline && (m == nil || c.Model == "") {
		return fmt.Errorf("--offline needs a model the server lists in /info, with its files in the model repository (%w)", errUsage)
	}
	return nil
}

// errUnreachable is a server that did not answer at all, as opposed to one without /info.
var errUnreachable = errors.New("cannot reach the server")

// fetchInfo reads a server's /info; a peer without one answers with an error status.
func fetchInfo(ctx context.Context, client *http.Client, base string) (*server.Info, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(base, "/")+"/info", nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %w", errUnreachable, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/info: %s", resp.Status)
	}
	var info server.Info
	if err := json.NewDecoder(resp.Body).Decode(&info); err != nil {
		return nil, fmt.Errorf("/info: %w", err)
	}
	return &info, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// serveSelf starts serve on a free loopback port and returns its address once it listens;
// done closes when it has shut down after ctx ends.
func serveSelf(ctx context.Context, c config.Serve, env *ort.Env) (string, <-chan struct{}, error) {
	c.Addr = "127.0.0.1:0"
	c.Reload = 0
	addrc := make(chan string, 1)
	ready := func(addr string) { addrc <- addr }
	done := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		defer close(done)
		log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		errc <- serve(ctx, c, env, log, io.Discard, ready)
	}()
	select {
	case addr := <-addrc:
		return addr, done, nil
	case err := <-errc:
		if err != nil {
			return "", nil, fmt.Errorf("--self: %w", err)
		}
		return "", nil, errors.New("--self: the server stopped before it listened")
	}
}

// write prints the report and writes the files asked for.
func (c *benchConfig) write(r *bench.Report, stdout io.Writer) error {
	if err := bench.WriteText(stdout, r); err != nil {
		return err
	}
	if err := c.writeFiles(r, stdout); err != nil {
		return err
	}
	if c.PlanHelm {
		return writePlanHelm(stdout, r)
	}
	return nil
}

// writeFiles writes the report files asked for, saying so on stdout.
func (c *benchConfig) writeFiles(r *bench.Report, stdout io.Writer) error {
	for _, f := range []struct {
		path  string
		write func(io.Writer, *bench.Report) error
	}{{c.JSON, bench.WriteJSON}, {c.Markdown, bench.WriteMarkdown}, {c.HTML, bench.WriteHTML}} {
		if f.path == "" {
			continue
		}
		out, err := os.Create(f.path)
		if err != nil {
			return err
		}
		if err := f.write(out, r); err != nil {
			out.Close()
			return err
		}
		if err := out.Close(); err != nil {
			return err
		}
		fmt.Fprintln(stdout, "wrote", f.path)
	}
	return nil
}

func runCompare(args []string, stdout io.Writer) error {
	if len(args) != 2 {
		return fmt.Errorf("usage: server bench compare BEFORE.json AFTER.json (%w)", errUsage)
	}
	a, err := bench.ReadReport(args[0])
	if err != nil {
		return fmt.Errorf("%w (%w)", err, errUsage)
	}
	b, err := bench.ReadReport(args[1])
	if err != nil {
		return fmt.Errorf("%w (%w)", err, errUsage)
	}
	return bench.Compare(stdout, a, b)
}

// runReport prints a saved report and writes its other views: the JSON is the data, and
// every view can be made again from it.
func runReport(args []string, stdout io.Writer) error {
	var c benchConfig
	fs := flag.NewFlagSet("bench report", flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	fs.StringVar(&c.Markdown, "md", "", "write the report as Markdown")
	fs.StringVar(&c.HTML, "html", "", "write the report as one HTML file with SVG plots")
	fs.BoolVar(&c.PlanHelm, "plan-helm", false, "after the report, print Helm values for deploy/ sized for the SLO's rps")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("usage: server bench report [--md FILE] [--html FILE] [--plan-helm] REPORT.json (%w)", errUsage)
	}
	r, err := bench.ReadReport(fs.Arg(0))
	if err != nil {
		return fmt.Errorf("%w (%w)", err, errUsage)
	}
	return c.write(r, stdout)
}
