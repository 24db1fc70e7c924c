package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/ortserve/ortserve/bench"
	"github.com/ortserve/ortserve/cmd/server/internal/config"
	"github.com/ortserve/ortserve/models"
	"github.com/ortserve/ortserve/runtime"
	"github.com/ortserve/ortserve/runtime/ort"
	"github.com/ortserve/ortserve/tokenize"
)

// offlineLimit measures the physical limit of one model version: raw ONNX Runtime session
// throughput at each batch size, with the sessions and threads `serve` would give the version
// on backend b, the texts tokenized beforehand, no HTTP and no batcher. dir is the model
// folder; version "" is the config's default version. Each batch size runs for per.
//
// If ctx ends, offlineLimit stops early and returns the points measured so far with ctx.Err().
func offlineLimit(ctx context.Context, b *backend, dir, version string, texts []string, batches []int, per time.Duration) ([]bench.OfflinePoint, error) {
	// Bad batch sizes fail before the sessions load, not after the first ones are measured.
	for _, n := range batches {
		if n < 1 {
			return nil, fmt.Errorf("offline: batch size %d: want at least 1", n)
		}
	}
	r, err := openOffline(ctx, b, dir, version, texts)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	points := make([]bench.OfflinePoint, 0, len(batches))
	for _, n := range batches {
		p, err := r.measure(ctx, n, per)
		if err != nil {
			return points, err
		}
		points = append(points, p)
	}
	return points, nil
}

// offlineBatches are the batch sizes offlineLimit is asked for by default: powers of two up
// to most, and most itself.
func offlineBatches(most int) []int {
	var out []int
	for n := 1; n < most; n *= 2 {
		out = append(out, n)
	}
	if most >= 1 {
		out = append(out, most)
	}
	return out
}

// offlineRig is one model version's sessions, warmed up, and a workload's encodings: what
// offlineLimit measures, once per batch size.
type offlineRig struct {
	sessions []runtime.Session
	encs     []tokenize.Encoding
}

// openOffline reads the config of dir (model.yaml, or inferred as serve infers it), tokenizes texts (cut at the config's max length) and
// opens and warms up the sessions serve would run version on, as Backend.Executor does.
func openOffline(ctx context.Context, b *backend, dir, version string, texts []string) (*offlineRig, error) {
	if len(texts) == 0 {
		return nil, errors.New("offline: no texts to run")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cfg, err := models.LoadConfig(dir, slog.New(slog.DiscardHandler))
	if err != nil {
		return nil, err
	}
	version = cmp.Or(version, cfg.DefaultVersion)
	vc, ok := cfg.Versions[version]
	if !ok {
		return nil, &models.UnknownError{Kind: models.ErrUnknownVersion, Name: cfg.Name + "/" + version, Known: slices.Sorted(maps.Keys(cfg.Versions))}
	}
	if !vc.RunsOn(b.Device()) {
		return nil, fmt.Errorf("offline: %s/%s runs on %v, not %s", cfg.Name, version, vc.Devices, b.Device())
	}

	tok, err := b.Tokenizer(filepath.Join(dir, cfg.Tokenizer), cfg.MaxLength)
	if err != nil {
		return nil, fmt.Errorf("offline: %s: tokenizer: %w", cfg.Name, err)
	}
	encs, err := tok.Encode(texts, tokenize.Options{Truncate: true})
	tok.Close()
	if err != nil {
		return nil, fmt.Errorf("offline: %s: %w", cfg.Name, err)
	}

	sessions, err := b.openSessions(ctx, filepath.Join(dir, vc.File), cfg.Output, cmp.Or(cfg.Instances, b.sessions))
	if err != nil {
		return nil, fmt.Errorf("offline: %s/%s: %w", cfg.Name, version, err)
	}
	r := &offlineRig{encs: encs, sessions: sessions}
	return r, nil
}

// measure runs every session concurrently, each in its own goroutine, on padded batches of
// batch consecutive encodings (wrapping round the workload) until per has passed, after one
// un-timed run each of the same shape. Items/s is what all sessions completed over the time
// until the last run ended; P50 is the median of single runs.
func (r *offlineRig) measure(ctx context.Context, batch int, per time.Duration) (bench.OfflinePoint, error) {
	if batch < 1 {
		return bench.OfflinePoint{}, fmt.Errorf("offline: batch size %d: want at least 1", batch)
	}
	// Padded once, outside the timing: enough batches to cover the workload once.
	padded := make([]tokenize.Batch, (len(r.encs)+batch-1)/batch)
	for k := range padded {
		rows := make([]tokenize.Encoding, batch)
		for j := range rows {
			rows[j] = r.encs[(k*batch+j)%len(r.encs)]
		}
		padded[k] = tokenize.Pad(rows)
	}

	warm := func(ctx context.Context, i int, s runtime.Session) error {
		_, err := s.Run(ctx, padded[i%len(padded)])
		return err
	}
	if err := r.each(ctx, warm); err != nil {
		return bench.OfflinePoint{}, err
	}

	var next atomic.Int64
	times := make([][]time.Duration, len(r.sessions)) // per session, merged after
	items := make([]int, len(r.sessions))
	start := time.Now()
	err := r.each(ctx, func(ctx context.Context, i int, s runtime.Session) error {
		for {
			b := padded[int(next.Add(1)-1)%len(padded)]
			t := time.Now()
			if _, err := s.Run(ctx, b); err != nil {
				return err
			}
			times[i] = append(times[i], time.Since(t))
			items[i] += b.Rows
			if time.Since(start) >= per {
				return nil
			}
		}
	})
	elapsed := time.Since(start)
	if err != nil {
		return bench.OfflinePoint{}, err
	}
	all := slices.Sorted(slices.Values(slices.Concat(times...)))
	total := 0
	for _, n := range items {
		total += n
	}
	return bench.OfflinePoint{
		Batch:     batch,
		ItemsPerS: float64(total) / elapsed.Seconds(),
		P50:       float64(all[len(all)/2]) / float64(time.Millisecond),
	}, nil
}

// each runs f on every session at once, each in its own goroutine, and returns the first
// error, which stops the others; if ctx ends, it returns ctx.Err().
func (r *offlineRig) each(ctx context.Context, f func(ctx context.Context, i int, s runtime.Session) error) error {
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	for i, s := range r.sessions {
		wg.Go(func() {
			if err := f(rctx, i, s); err != nil {
				cancel(err)
			}
		})
	}
	wg.Wait()
	// A run cut short by ctx fails with a wrapped ctx.Err(); say plainly that ctx ended.
	if err := ctx.Err(); err != nil {
		return err
	}
	return context.Cause(rctx)
}

// Close closes the sessions. No measure may be running.
func (r *offlineRig) Close() error {
	var errs []error
	for _, s := range r.sessions {
		errs = append(errs, s.Close())
	}
	r.sessions = nil
	return errors.Join(errs...)
}

// offlineOnly reports whether this bench measures only the raw ONNX Runtime limit: --offline
// with no load and no --self, so no server is started or contacted.
func (c *benchConfig) offlineOnly() bool {
	o := c.Opts
	return c.Offline && !c.Self && len(o.Rates) == 0 && len(o.Concurrency) == 0 && o.SLO == nil
}

// offlineTargets are the versions an offline-only bench measures: --versions, or every
// version of the model's config, the default first. They are read from the model's folder,
// found as serve finds it (models.Find), since there is no server to ask.
func (c *benchConfig) offlineTargets(src models.Sources) error {
	_, cfg, err := models.Find(src, c.Model)
	if err != nil {
		return fmt.Errorf("--model %q: %w", c.Model, err)
	}
	versions := splitList(c.Versions)
	known := slices.Sorted(maps.Keys(cfg.Versions))
	if len(versions) == 0 {
		versions = append([]string{cfg.DefaultVersion}, slices.DeleteFunc(slices.Clone(known), func(v string) bool { return v == cfg.DefaultVersion })...)
	}
	for _, v := range versions {
		if _, ok := cfg.Versions[v]; !ok {
			return fmt.Errorf("--versions: %s has no version %q: it has %v", c.Model, v, known)
		}
		c.Opts.Targets = append(c.Opts.Targets, bench.Target{Model: c.Model, Version: v})
	}
	return nil
}

// runOffline measures the raw limit of each target version and reports it: a table on
// stdout, and the report files asked for, whose versions carry offline points and no steps.
func (c *benchConfig) runOffline(ctx context.Context, env *ort.Env, sc config.Serve, w *bench.Workload, stdout io.Writer) error {
	start := time.Now()
	if err := c.offline(ctx, env, sc, w); err != nil {
		return err
	}
	r := &bench.Report{
		Schema: bench.Schema, Tool: "ortserve " + version, Started: start.UTC(),
		Host:     bench.Host{CPUs: goruntime.NumCPU(), OS: goruntime.GOOS, Arch: goruntime.GOARCH},
		Target:   "ONNX Runtime offline, in this process (no server)",
		Workload: w.Summary(),
		Notes:    []string{fmt.Sprintf("offline only: raw session throughput with %s, the texts tokenized beforehand, no HTTP and no batcher; no load was applied", c.offlineSetup)},
	}
	var vs []bench.VersionResult
	for _, t := range c.Opts.Targets {
		pts := c.Opts.Offline[t.Name()]
		vs = append(vs, bench.VersionResult{Name: t.Name(), Model: t.Model, Version: t.Version, Offline: pts})
		var each []string
		for _, p := range pts {
			each = append(each, fmt.Sprintf("batch %d: %.1f texts/s, p50 %.2f ms", p.Batch, p.ItemsPerS, p.P50))
		}
		r.Notes = append(r.Notes, t.Name()+": "+strings.Join(each, "; "))
	}
	r.Runs = []bench.Run{{Versions: vs}}

	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "Raw ONNX Runtime limit (offline: no server, no HTTP, no batcher)\n\n")
	fmt.Fprintf(tw, "CPUs\t%d (this process's)\n", r.Host.CPUs)
	fmt.Fprintf(tw, "Sessions\t%s\n", c.offlineSetup)
	fmt.Fprintf(tw, "Workload\t%s: %d texts\n", r.Workload.Source, r.Workload.Texts)
	fmt.Fprintf(tw, "\n  version\tbatch\ttexts/s\tp50 ms (one batch)\n")
	for _, v := range vs {
		for _, p := range v.Offline {
			fmt.Fprintf(tw, "  %s\t%d\t%.1f\t%.2f\n", v.Name, p.Batch, p.ItemsPerS, p.P50)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return c.writeFiles(r, stdout)
}

// offline measures each target version's raw session throughput, before any load, with
// the sessions and threads serve gives it.
func (c *benchConfig) offline(ctx context.Context, env *ort.Env, sc config.Serve, w *bench.Workload) error {
	provider, _, err := resolveDevice(env, sc, nil, "")
	if err != nil {
		return err
	}
	b := newBackend(env, sc, provider, nil)
	c.offlineSetup = fmt.Sprintf("%d session(s) per version × %d intra-op thread(s) on %s, as serve gives them", b.sessions, b.threads, b.Device())
	c.Opts.Offline = map[string][]bench.OfflinePoint{}
	texts := w.Texts // offline counts texts, so inputs per request do not matter there
	batches := c.batches
	if batches == nil {
		batches = offlineBatches(sc.Batch.MaxBatchSize)
	}
	for _, t := range c.Opts.Targets {
		if !c.Quiet {
			fmt.Fprintf(os.Stderr, "offline: %s, batch sizes %v, %v each\n", t.Name(), batches, c.OfflinePer)
		}
		dir, _, err := models.Find(sc.Sources(), t.Model)
		if err != nil {
			return fmt.Errorf("--offline %s: %w", t.Name(), err)
		}
		pts, err := offlineLimit(ctx, b, dir, t.Version, texts, batches, c.OfflinePer)
		if err != nil {
			return fmt.Errorf("--offline %s: %w", t.Name(), err)
		}
		c.Opts.Offline[t.Name()] = pts
	}
	return nil
}

func minOffline(m map[string][]bench.OfflinePoint) float64 {
	var lo float64
	for _, pts := range m {
		var best float64
		for _, p := range pts {
			best = max(best, p.ItemsPerS)
		}
		if best > 0 && (lo == 0 || best < lo) {
			lo = best
		}
	}
	return lo
}
