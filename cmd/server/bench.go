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
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/ortserve/ortserve/bench"
	"github.com/ortserve/ortserve/bench/offline"
	"github.com/ortserve/ortserve/cmd/server/internal/config"
	"github.com/ortserve/ortserve/models"
	"github.com/ortserve/ortserve/runtime/ort"
	"github.com/ortserve/ortserve/server"
)

func runBench(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) > 0 && args[0] == "compare" {
		return runCompare(args[1:], stdout)
	}
	if len(args) > 0 && args[0] == "report" {
		return runReport(args[1:], stdout)
	}
	c, w, err := config.ParseBench(args, os.Stderr)
	if err != nil {
		return err
	}

	// With --self, or --offline, this process opens ONNX Runtime.
	var env *ort.Env
	sc := config.Default()
	if c.Self || c.Offline {
		if sc, err = config.Load(config.Args(c.Config), os.Getenv, os.Stderr); err != nil {
			return err
		}
		if c.OfflineOnly() {
			if err := offlineTargets(c, sc.Sources()); err != nil {
				return fmt.Errorf("%w (%w)", err, errUsage)
			}
		}
		if env, err = ort.Open(sc.ORTLib); err != nil {
			return err
		}
		defer env.Close()
	}
	if c.OfflineOnly() {
		return runOffline(ctx, c, env, sc, w, stdout)
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
		c.Servers = []config.BenchServer{{URL: "http://" + addr}}
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
	if err := benchTargets(ctx, c, client); err != nil {
		return err
	}

	if c.Offline {
		if _, err := measureOffline(ctx, c, env, sc, w); err != nil {
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
	bar.Done()
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
	if werr := writeBench(c, r, stdout); werr != nil {
		return werr
	}
	return err
}

// targets fills the versions to compare and the route from each server's /info, when it
// has one; a server without it (a peer) is measured as it is, with the flags given. Several
// servers must all serve the model and versions asked for.
func benchTargets(ctx context.Context, c *config.Bench, client *http.Client) error {
	for _, srv := range c.Servers {
		if err := serverTargets(ctx, c, client, srv); err != nil {
			return err
		}
	}
	return nil
}

func serverTargets(ctx context.Context, c *config.Bench, client *http.Client, srv config.BenchServer) error {
	info, err := fetchInfo(ctx, client, srv.URL)
	if err == nil {
		info, err = awaitCalibration(ctx, client, srv.URL, info)
	}
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
	versions := config.SplitList(c.Versions)
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

// awaitCalibration waits, reading /info again every calibrationPoll, until no version of the
// server at base is measuring its calibration (a first start measures it while serving, one
// row a batch): a measurement starting before would measure that. It returns the last /info.
func awaitCalibration(ctx context.Context, client *http.Client, base string, info *server.Info) (*server.Info, error) {
	for {
		measuring := calibrating(info)
		if measuring == "" {
			return info, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for %s's calibration: %w", measuring, ctx.Err())
		case <-time.After(calibrationPoll):
		}
		var err error
		if info, err = fetchInfo(ctx, client, base); err != nil {
			return nil, err
		}
	}
}

const calibrationPoll = 100 * time.Millisecond

// calibrating names a version of info still measuring its calibration, "" if none.
func calibrating(info *server.Info) string {
	for _, m := range info.Models {
		for v, st := range m.VersionStates {
			if st.ExecInfo != nil && st.Calibration == models.CalibrationMeasuring {
				return m.Name + "/" + v
			}
		}
	}
	return ""
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
func writeBench(c *config.Bench, r *bench.Report, stdout io.Writer) error {
	if err := bench.WriteText(stdout, r); err != nil {
		return err
	}
	if err := writeBenchFiles(c, r, stdout); err != nil {
		return err
	}
	if c.PlanHelm {
		return writePlanHelm(stdout, r)
	}
	return nil
}

// writeFiles writes the report files asked for, saying so on stdout.
func writeBenchFiles(c *config.Bench, r *bench.Report, stdout io.Writer) error {
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
	var c config.Bench
	fs := reportFlags(&c)
	fs.SetOutput(os.Stderr)
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
	return writeBench(&c, r, stdout)
}

// reportFlags is `server bench report`'s flag set, bound to c's views.
func reportFlags(c *config.Bench) *flag.FlagSet {
	fs := flag.NewFlagSet("bench report", flag.ContinueOnError)
	fs.StringVar(&c.Markdown, "md", "", "write the report as Markdown")
	fs.StringVar(&c.HTML, "html", "", "write the report as one HTML file with SVG plots")
	fs.BoolVar(&c.PlanHelm, "plan-helm", false, "after the report, print Helm values for deploy/ sized for the SLO's rps")
	return fs
}
