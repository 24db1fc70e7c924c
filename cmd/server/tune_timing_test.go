//go:build cgo && ort && !race

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ortserve/ortserve/bench"
	"github.com/ortserve/ortserve/bench/tune"
	"github.com/ortserve/ortserve/cmd/server/internal/config"
)

// tuneGateReport writes a gate report as `server gate --json` does, with only the fields tune
// reads.
func tuneGateReport(t *testing.T, candidate string, pass bool) string {
	t.Helper()
	doc := map[string]any{"schema": tune.GateSchema, "model": "sentiment", "task": "classify",
		"baseline": map[string]any{"version": "fp32"}, "candidate": map[string]any{"version": candidate},
		"verdict": map[string]any{"pass": pass, "checks": []any{}}}
	data, _ := json.Marshal(doc)
	path := filepath.Join(t.TempDir(), "gate-"+candidate+".json")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestTimingTune runs the whole command in a child process, which opens its own ONNX Runtime
// environment: offline batch cost, baseline twice, trials until the budget, and the outputs.
// tuned.yaml must load as serve's config and serve. It is a timing test: each baseline must
// find a rate that meets the SLO on real cores, which a busy machine can deny it, and its
// budget bounds its time.
func TestTimingTune(t *testing.T) {
	out := filepath.Join(t.TempDir(), "tune-out")
	// Three experiments (both baselines and one trial) end the run; the budget is only the
	// bound on a slow machine, where a short one could cut the run to one baseline: the count
	// of experiments, not the clock, decides what is checked.
	const budget, experiments = 45 * time.Second, 3
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "tune", "--model", "sentiment", "--slo", "p95=300ms", "--price-per-hour", "0.1",
		"--budget", budget.String(), "--max-experiments", fmt.Sprint(experiments),
		"--step", "250ms", "--warmup", "100ms", "--search-steps", "3", "--baseline-steps", "5",
		"--offline-step", "100ms", "--out", out, "--gate", tuneGateReport(t, "int8", true), "--quiet")
	cmd.Env = append(os.Environ(), "ORTSERVE_TEST_EXEC=1", "ORTSERVE_MODELS="+sentimentOnly(t), "ORTSERVE_MAX_BATCH=8")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	began := time.Now()
	err := cmd.Run()
	took := time.Since(began)
	if err != nil {
		t.Fatalf("%v after %v\nstdout:\n%s\nstderr:\n%s", err, took, stdout.String(), stderr.String())
	}
	// The budget counts from the command's start; the process's own start-up comes on top.
	if took > budget+5*time.Second {
		t.Errorf("took %v with --budget %v", took, budget)
	}
	for _, want := range []string{"baseline", "tuned", fmt.Sprintf("experiments: %d run", experiments),
		"wrote " + filepath.Join(out, "tuned.yaml"), "wrote " + filepath.Join(out, "plot.svg")} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout.String())
		}
	}

	f, err := os.Open(filepath.Join(out, tune.DiaryJSONL))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var entries []tune.Entry
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var e tune.Entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("diary.jsonl: %v: %s", err, sc.Text())
		}
		entries = append(entries, e)
	}
	baselines, measured := 0, 0
	for _, e := range entries {
		if e.N > 0 {
			measured++
		}
		if e.Kind == "baseline" {
			baselines++
			if e.Best <= 0 || e.P95 <= 0 || e.P95 > 300 || e.Report == "" || e.CostPerMillion <= 0 || e.Dominant == "" {
				t.Errorf("baseline #%d: %+v; want a rate meeting the SLO, its p95, cost and dominant phase, and its report", e.N, e)
			}
			r, err := bench.ReadReport(filepath.Join(out, e.Report))
			if err != nil || len(r.Runs) != 1 || r.Runs[0].Versions[0].Name != "sentiment/fp32" {
				t.Errorf("%s: %v; want a bench report of sentiment/fp32", e.Report, err)
			}
		}
		if strings.Contains(e.Why, "fp16 not tried: no passing gate report") {
			baselines += 100 // seen: fp16 has no report
		}
	}
	if baselines != 102 || measured != experiments {
		t.Errorf("diary: %d measurements, %d of them baselines, fp16 noted: %v; want %d, 2 baselines, and fp16 not tried for want of a gate report",
			measured, baselines%100, baselines >= 100, experiments)
	}
	md, _ := os.ReadFile(filepath.Join(out, tune.DiaryMD))
	svg, _ := os.ReadFile(filepath.Join(out, tune.PlotFile))
	if !bytes.Contains(md, []byte("| # | kind | lever | value |")) || !bytes.Contains(svg, []byte("SLO p95 300 ms")) || !bytes.Contains(svg, []byte("chosen")) {
		t.Errorf("diary.md has no table or plot.svg no SLO line or chosen point:\n%s", md)
	}

	// tuned.yaml is a serve config, read unchanged, and it serves.
	tuned := filepath.Join(out, "tuned.yaml")
	c, err := config.Load([]string{"--config", tuned}, func(string) string { return "" }, io.Discard)
	if err != nil {
		data, _ := os.ReadFile(tuned)
		t.Fatalf("%v\n%s", err, data)
	}
	tuneServes(t, c, "fp32", "int8")
}
