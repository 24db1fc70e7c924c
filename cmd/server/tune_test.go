//go:build cgo && ort

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ortserve/ortserve/bench"
	"github.com/ortserve/ortserve/bench/tune"
	"github.com/ortserve/ortserve/cmd/server/internal/config"
	"github.com/ortserve/ortserve/models"
)

// The tune tests run `server tune` on the real sentiment model with a tiny budget and tiny
// steps: they check the wiring and the artifacts, not what the tuning finds (docs/tune.md
// has a full run's numbers).

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

// TestTune runs the whole command in a child process, which opens its own ONNX Runtime
// environment: offline batch cost, baseline twice, trials until the budget, and the outputs.
// tuned.yaml must load as serve's config and serve.
func TestTune(t *testing.T) {
	// Not parallel: beside the other tests, the first baseline's lowest rate once missed
	// even this SLO (the baseline met it at no rate), and experiments' servers start slower.
	out := filepath.Join(t.TempDir(), "tune-out")
	// Three experiments (both baselines and one trial) end the run, about 8 s here; the
	// budget is only the bound on a slow machine. A 15 s budget alone once fitted one
	// baseline in CI, so the count of experiments, not the clock, decides what is checked.
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

// tuneServes starts serve with c in this process and checks that the model's default version
// is want (or, if want2 is not empty, either).
func tuneServes(t *testing.T, c config.Serve, want, want2 string) {
	t.Helper()
	ctx, stop := context.WithCancel(t.Context())
	addr, done, err := serveSelf(ctx, c, testEnv)
	if err != nil {
		stop()
		t.Fatal(err)
	}
	defer func() { stop(); <-done }()
	body := strings.NewReader(`{"inputs":"a fine film"}`)
	resp, err := http.Post("http://"+addr+"/predict", "application/json", body)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got := strings.TrimPrefix(resp.Header.Get("x-model-version"), "sentiment/")
	if resp.StatusCode != http.StatusOK || (got != want && got != want2) {
		b, _ := io.ReadAll(resp.Body)
		t.Errorf("POST /predict: %s, version %q: %s; want 200 from %s", resp.Status, got, b, want)
	}
}

// A kept version or cache goes into a repository of links beside tuned.yaml; the config
// still loads unchanged, and serves the tuned version by default.
func TestTuneConfigWithVersion(t *testing.T) {
	t.Parallel()
	out := t.TempDir()
	sc := config.Default()
	sc.Models = sentimentOnly(t)
	sc.ORTLib = os.Getenv("ORTSERVE_ORT_LIB")
	base := tune.Config{MaxQueueDelay: sc.Batch.MaxQueueDelay, MaxBatch: 32, MaxBatchTokens: 16384, Sessions: 2, Threads: 1, Version: "fp32"}
	best := base
	best.Version, best.MaxBatch, best.CacheBytes = "int8", 4, 1<<20
	o := &tune.Outcome{Model: "sentiment", Baseline: base, Best: best, BaselineRate: 100, BestRate: 150, Entries: []tune.Entry{
		{N: 3, Kind: "trial", Lever: tune.LeverMaxBatch, From: "32", Value: "4", Decision: tune.Kept},
		{N: 6, Kind: "trial", Lever: tune.LeverVersion, From: "fp32", Value: "int8", Decision: tune.Kept},
	}}
	j := &config.Tune{Flags: config.TuneFlags{Out: out, Model: "sentiment"}, Dir: filepath.Join(sc.Models, "sentiment"), SLO: &bench.SLO{P95: 100 * time.Millisecond}}
	for range 2 { // the second time replaces the first's repository
		if err := writeTuneConfig(j, o, sc, base); err != nil {
			t.Fatal(err)
		}
	}
	data, _ := os.ReadFile(filepath.Join(out, "tuned.yaml"))
	c, err := config.Load([]string{"--config", filepath.Join(out, "tuned.yaml")}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	if c.Batch.MaxBatchSize != 4 || c.Sessions != 0 || c.Models != filepath.Join(out, "models") {
		t.Errorf("max batch %d, sessions %d, models %s; want 4, 0 (untouched: one per core), %s\n%s", c.Batch.MaxBatchSize, c.Sessions, c.Models, filepath.Join(out, "models"), data)
	}
	if !strings.Contains(string(data), "Kept #6: version fp32 -> int8.") {
		t.Errorf("tuned.yaml does not say what was kept:\n%s", data)
	}
	cfg, err := models.ReadConfig(filepath.Join(c.Models, "sentiment"))
	if err != nil || cfg.DefaultVersion != "int8" || cfg.Cache.MaxBytes != 1<<20 || len(cfg.Versions) < 2 {
		t.Errorf("the tuned repository's sentiment: %+v, %v; want int8 by default, a 1 MiB cache, every version", cfg, err)
	}
	tuneServes(t, c, "int8", "")

	// A folder named models that tune did not write is not replaced.
	other := t.TempDir()
	os.MkdirAll(filepath.Join(other, "models"), 0o755)
	j.Flags.Out = other
	if err := writeTuneConfig(j, o, sc, base); err == nil || !strings.Contains(err.Error(), "was not written by tune") {
		t.Errorf("err %v; want a refusal to replace a folder tune did not write", err)
	}
}

func TestTuneUsage(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bench.json")
	os.WriteFile(bad, []byte(`{"schema":"ortserve.bench/v1"}`), 0o644)
	tests := []struct {
		args []string
		want string
	}{
		{nil, "no --model"},
		{[]string{"--model", "sentiment"}, "no --slo"},
		{[]string{"--model", "sentiment", "--slo", "p95"}, "--slo"},
		{[]string{"--model", "nope", "--slo", "p95=100ms"}, "--model nope"},
		{[]string{"--model", "sentiment", "--slo", "p95=100ms", "--budget", "1s"}, "--budget 1s"},
		{[]string{"--model", "sentiment", "--slo", "p95=100ms", "--repeats", "1"}, "at least twice"},
		{[]string{"--model", "sentiment", "--slo", "p95=100ms", "--gate", bad}, "not a gate report"},
		{[]string{"--model", "sentiment", "--slo", "p95=100ms", "extra"}, "unexpected arguments"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(append([]string{"tune"}, tt.args...), &out, &errb)
			if code != 2 || !strings.Contains(oneLine(t, errb.String()), tt.want) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", code, errb.String(), tt.want)
			}
		})
	}
	if _, err := config.ParseTune([]string{"--model", "sentiment", "--slo", "p95=100ms"}, os.Getenv, io.Discard); err != nil {
		t.Errorf("a good command line: %v", err)
	}
}
