package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/ortserve/ortserve/bench"
	"github.com/ortserve/ortserve/bench/offline"
	"github.com/ortserve/ortserve/cmd/server/internal/config"
	"github.com/ortserve/ortserve/models"
	"github.com/ortserve/ortserve/runtime/ort"
	"github.com/ortserve/ortserve/tokenize"
)

// offlineLimit measures the physical limit of one model version (offline.Limit) with the
// sessions and threads `serve` would give the version on backend b. dir is the model folder;
// version "" is the config's default version. Each batch size runs for per.
//
// If ctx ends, offlineLimit stops early and returns the points measured so far with ctx.Err().
func offlineLimit(ctx context.Context, b *backend, dir, version string, texts []string, batches []int, per time.Duration) ([]bench.OfflinePoint, error) {
	open := func(ctx context.Context) (*offline.Rig, error) { return openOffline(ctx, b, dir, version, texts) }
	return offline.Limit(ctx, open, batches, per)
}

// openOffline reads the config of dir (model.yaml, or inferred as serve infers it), tokenizes
// texts (cut at the config's max length) and opens and warms up the sessions serve would run
// version on, as Backend.Executor does.
func openOffline(ctx context.Context, b *backend, dir, version string, texts []string) (*offline.Rig, error) {
	if len(texts) == 0 {
		return nil, offline.ErrNoTexts
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

	sessions, err := b.openSessions(ctx, filepath.Join(dir, vc.File), cfg.Output, cmp.Or(cfg.Instances, b.sessions), true)
	if err != nil {
		return nil, fmt.Errorf("offline: %s/%s: %w", cfg.Name, version, err)
	}
	return &offline.Rig{Sessions: sessions, Encodings: encs}, nil
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
	res := offline.Result{Started: start, Setup: c.offlineSetup, Workload: w.Summary(), Targets: c.Opts.Targets, Points: c.Opts.Offline}
	if err := res.WriteText(stdout); err != nil {
		return err
	}
	return c.writeFiles(res.Report("ortserve "+version), stdout)
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
		batches = offline.Batches(sc.Batch.MaxBatchSize)
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
