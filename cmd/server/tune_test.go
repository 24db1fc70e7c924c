//go:build cgo && ort

package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
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
