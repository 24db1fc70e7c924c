package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"time"

	"github.com/ortserve/ortserve/bench"
	"github.com/ortserve/ortserve/bench/offline"
	"github.com/ortserve/ortserve/cmd/server/internal/config"
	"github.com/ortserve/ortserve/models"
	"github.com/ortserve/ortserve/runtime/engine"
	"github.com/ortserve/ortserve/runtime/ort"
)

// offlineTargets are the versions an offline-only bench measures: --versions, or every
// version of the model's config, the default first. They are read from the model's folder,
// found as serve finds it (models.Find), since there is no server to ask.
func offlineTargets(c *config.Bench, src models.Sources) error {
	_, cfg, err := models.Find(src, c.Model)
	if err != nil {
		return fmt.Errorf("--model %q: %w", c.Model, err)
	}
	versions := config.SplitList(c.Versions)
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
func runOffline(ctx context.Context, c *config.Bench, env *ort.Env, sc config.Serve, w *bench.Workload, stdout io.Writer) error {
	if c.Curve {
		return runCurve(ctx, c, env, sc, stdout)
	}
	start := time.Now()
	setup, err := measureOffline(ctx, c, env, sc, w)
	if err != nil {
		return err
	}
	res := offline.Result{Started: start, Setup: setup, Workload: w.Summary(), Targets: c.Opts.Targets, Points: c.Opts.Offline}
	if err := res.WriteText(stdout); err != nil {
		return err
	}
	return writeBenchFiles(c, res.Report("ortserve "+version), stdout)
}

// measureOffline measures each target version's raw session throughput, before any load,
// with the sessions and threads serve gives it, and says what those were.
func measureOffline(ctx context.Context, c *config.Bench, env *ort.Env, sc config.Serve, w *bench.Workload) (string, error) {
	b, err := engine.New(env, engineConfig(sc))
	if err != nil {
		return "", err
	}
	setup := fmt.Sprintf("%d session(s) per version × %d intra-op thread(s) on %s, as serve gives them", b.Sessions(), b.Threads(), b.Device())
	c.Opts.Offline = map[string][]bench.OfflinePoint{}
	texts := w.Texts // offline counts texts, so inputs per request do not matter there
	batches := c.Batches
	if batches == nil {
		batches = offline.Batches(sc.Batch.MaxBatchSize)
	}
	for _, t := range c.Opts.Targets {
		if !c.Quiet {
			fmt.Fprintf(os.Stderr, "offline: %s, batch sizes %v, %v each\n", t.Name(), batches, c.OfflinePer)
		}
		dir, _, err := models.Find(sc.Sources(), t.Model)
		if err != nil {
			return "", fmt.Errorf("--offline %s: %w", t.Name(), err)
		}
		pts, err := offline.LimitOf(ctx, b, dir, t.Version, texts, batches, c.OfflinePer)
		if err != nil {
			return "", fmt.Errorf("--offline %s: %w", t.Name(), err)
		}
		c.Opts.Offline[t.Name()] = pts
	}
	return setup, nil
}

// runCurve calibrates each target version's cost model on one session as serve calibrates
// it at load, runs a grid of batch layouts on it, and prints what the model predicted of
// each against what the runs took (offline.Curve).
func runCurve(ctx context.Context, c *config.Bench, env *ort.Env, sc config.Serve, stdout io.Writer) error {
	b, err := engine.New(env, engineConfig(sc))
	if err != nil {
		return err
	}
	setup := fmt.Sprintf("one session × %d intra-op thread(s) on %s, alone, calibrated for %v as at load", b.Threads(), b.Device(), sc.Calibration)
	for _, t := range c.Opts.Targets {
		dir, _, err := models.Find(sc.Sources(), t.Model)
		if err != nil {
			return fmt.Errorf("--curve %s: %w", t.Name(), err)
		}
		r, err := offline.OpenCurve(ctx, b, dir, t.Version, sc.Calibration)
		if err != nil {
			return fmt.Errorf("--curve %s: %w", t.Name(), err)
		}
		if !c.Quiet {
			fmt.Fprintf(os.Stderr, "curve: %s, %d layouts, %d runs each\n", t.Name(), len(r.Grid()), c.CurveRuns)
		}
		cur, err := r.Measure(ctx, c.CurveRuns)
		if cerr := r.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("--curve %s: %w", t.Name(), err)
		}
		cur.Name, cur.Setup = t.Name(), setup
		if err := cur.WriteText(stdout); err != nil {
			return err
		}
	}
	return nil
}
