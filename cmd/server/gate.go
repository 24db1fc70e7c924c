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
	"slices"
	"strings"

	"github.com/ortserve/ortserve/bench/gate"
	"github.com/ortserve/ortserve/cmd/server/internal/config"
	"github.com/ortserve/ortserve/models"
	"github.com/ortserve/ortserve/runtime/ort"
)

func runGate(ctx context.Context, args []string, stdout io.Writer) error {
	j, err := config.ParseGate(args, os.Getenv, os.Stderr)
	if err != nil {
		return err
	}
	env, err := ort.Open(j.Serve.ORTLib)
	if err != nil {
		return err
	}
	defer env.Close()
	return runGateJob(ctx, j, env, stdout, os.Stderr)
}

// runGateJob loads the model on env and gates every candidate against the baseline. It writes
// the text report of each to stdout and returns an error (exit 1) if any fails.
func runGateJob(ctx context.Context, j *config.Gate, env *ort.Env, stdout, stderr io.Writer) error {
	logLevel := slog.LevelWarn
	if j.Quiet {
		logLevel = slog.LevelError
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: logLevel}))
	b, err := newEngine(env, engineConfig(j.Serve), log, "gating")
	if err != nil {
		return err
	}
	candidates, err := runnable(j, b.Device(), stderr)
	if err != nil {
		return err
	}
	m, err := models.OpenConfig(j.Dir, j.Model, b, log)
	if err != nil {
		return err
	}
	defer m.Close()

	bar := &progress{} // off unless stderr is a terminal
	if f, ok := stderr.(*os.File); ok {
		bar = newProgress(f, j.Quiet)
	}
	job := gate.Job{
		Model: m, Baseline: j.Baseline, Candidates: candidates, Data: j.Data, Budget: j.Budget, Options: j.Options,
		// A chunk is at most one batch, so that it runs as one.
		Chunk:     min(gateChunk, cmp.Or(j.Model.Batching.MaxBatchSize, j.Serve.Batch.MaxBatchSize)),
		Served:    servedConcurrency(j, stderr),
		Invariant: j.Invariant,
		Progress:  bar,
	}
	if !j.Quiet {
		job.Notes = stderr
	}
	reports, err := gate.Run(ctx, job)
	var de *gate.DataError
	if errors.As(err, &de) {
		return usagef("%w", err)
	}
	if err != nil {
		return err
	}
	var failed []string
	for i, rep := range reports {
		v := rep.Candidate.Version
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		if err := gate.WriteText(stdout, rep); err != nil {
			return err
		}
		if err := writeGateFile(j.JSON, v, len(reports), rep, gate.WriteJSON); err != nil {
			return err
		}
		if err := writeGateFile(j.Markdown, v, len(reports), rep, gate.WriteMarkdown); err != nil {
			return err
		}
		if !rep.Pass() {
			failed = append(failed, v)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("gate: %s: %s failed against %s", j.Model.Name, strings.Join(failed, ", "), j.Baseline)
	}
	return nil
}

// runnable are the candidates to gate on device: the baseline and explicit candidates must
// run there; the others are skipped with a note (an fp16 that is CUDA-only, on a CPU).
func runnable(j *config.Gate, device string, stderr io.Writer) ([]string, error) {
	runsHere := func(v string) bool { return j.Model.Versions[v].RunsOn(device) }
	if !runsHere(j.Baseline) {
		return nil, usagef("baseline %s/%s runs on %v, not %s: pick another with --baseline", j.Model.Name, j.Baseline, j.Model.Versions[j.Baseline].Devices, device)
	}
	var candidates []string
	if len(j.Candidates) == 0 {
		for _, v := range slices.Sorted(maps.Keys(j.Model.Versions)) {
			if v != j.Baseline && runsHere(v) {
				candidates = append(candidates, v)
			}
		}
	}
	for _, v := range j.Candidates {
		switch {
		case runsHere(v):
			candidates = append(candidates, v)
		case j.Explicit:
			return nil, usagef("--candidate %s/%s runs on %v, not %s", j.Model.Name, v, j.Model.Versions[v].Devices, device)
		case !j.Quiet:
			fmt.Fprintf(stderr, "gate: %s/%s skipped: it runs on %v, not %s\n", j.Model.Name, v, j.Model.Versions[v].Devices, device)
		}
	}
	if len(candidates) == 0 {
		return nil, usagef("%s has no version to gate against %s on %s: add one, or name one with --candidate", j.Model.Name, j.Baseline, device)
	}
	return candidates, nil
}

// servedConcurrency is the served pass's requests in flight: --served-concurrency, but no
// more than a version may queue, which would fail with 429s rather than measure anything.
func servedConcurrency(j *config.Gate, stderr io.Writer) int {
	limit := j.Model.Batching.Apply(j.Serve.Batch).MaxQueueRequests
	if j.Served > limit && !j.Quiet {
		fmt.Fprintf(stderr, "gate: --served-concurrency %d is over %s's max_queue_requests: %d in flight\n", j.Served, j.Model.Name, limit)
	}
	return min(j.Served, limit)
}

// writeGateFile writes a report to path; with several candidates, path gets -VERSION before
// its extension, so that each has its own file. "" writes nothing.
func writeGateFile(path, version string, candidates int, r *gate.Report, write func(io.Writer, *gate.Report) error) error {
	if path == "" {
		return nil
	}
	if candidates > 1 {
		ext := filepath.Ext(path)
		path = strings.TrimSuffix(path, ext) + "-" + version + ext
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// gateChunk is how many texts go to the pipeline in one call: a full batch at the default
// max batch size.
const gateChunk = 32
