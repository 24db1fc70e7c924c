package tune_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ortserve/ortserve/bench"
	"github.com/ortserve/ortserve/bench/tune"
	"github.com/ortserve/ortserve/models"
)

// fake is a Measurer with known capacities: rate says what a config sustains, noise
// perturbs each measurement by a fixed pattern (deterministic, so the tests are), and every
// measurement takes took of the (synctest) clock.
type fake struct {
	mu    sync.Mutex
	rate  func(c tune.Config, call int) float64
	noise float64
	took  func(call int) time.Duration
	fail  func(c tune.Config) error
	calls []tune.Config
}

var pattern = []float64{+1, -1, +0.5, -0.5, 0}

func (f *fake) Measure(ctx context.Context, c tune.Config, hint float64) (tune.Result, error) {
	f.mu.Lock()
	call := len(f.calls)
	f.calls = append(f.calls, c)
	f.mu.Unlock()
	took := 30 * time.Second
	if f.took != nil {
		took = f.took(call)
	}
	select {
	case <-time.After(took):
	case <-ctx.Done():
		return tune.Result{}, ctx.Err()
	}
	if f.fail != nil {
		if err := f.fail(c); err != nil {
			return tune.Result{}, err
		}
	}
	best := f.rate(c, call) * (1 + f.noise*pattern[call%len(pattern)])
	at := tune.Point{Offered: best, Achieved: 0.99 * best, P50: 20, P95: 80, P99: 120, Pass: true}
	over := tune.Point{Offered: 1.2 * best, Achieved: 1.05 * best, P50: 90, P95: 400, P99: 800}
	return tune.Result{Best: best, At: at, Steps: []tune.Point{at, over}, Dominant: "inference",
		Phases: bench.Phases{Inference: 12, Queue: 4}, Requests: int(20 * best), TokensMax: 64}, nil
}

var base = tune.Config{MaxQueueDelay: 5 * time.Millisecond, MaxBatch: 32, MaxBatchTokens: 16384, Sessions: 2, Threads: 1, Version: "fp32"}

func settings(budget time.Duration) tune.Settings {
	return tune.Settings{
		Model: "sentiment", Base: base, SLO: bench.SLO{P95: 100 * time.Millisecond}, Price: 0.1,
		Budget: budget, Reserve: 5 * time.Second, Repeats: 2, Cores: 2,
		Workload: tune.WorkloadInfo{Source: "built-in", Texts: 201, Distinct: 201, FitBytes: 1 << 20},
		Versions: []tune.VersionChoice{{Version: "int8", Why: "int8 not tried: no passing gate report"}},
	}
}

// trials walks the diary as the loop did, and checks that every trial and repeat changed
// at most one lever from the best config at the time.
func checkOneLever(t *testing.T, o *tune.Outcome) {
	t.Helper()
	cur := o.Baseline
	for _, e := range o.Entries {
		if e.N == 0 || e.Cfg == nil {
			continue
		}
		var diff []string
		for _, l := range tune.Levers {
			if l.Value(cur) != l.Value(*e.Cfg) && !(l == tune.LeverSessions && cur.Threads != e.Cfg.Threads) {
				diff = append(diff, string(l))
			}
		}
		switch {
		case len(diff) > 1:
			t.Errorf("#%d changed %v at once from %+v", e.N, diff, cur)
		case len(diff) == 1 && diff[0] != string(e.Lever):
			t.Errorf("#%d is a %s trial but changed %s", e.N, e.Lever, diff[0])
		}
		if e.Decision == tune.Kept {
			cur = *e.Cfg
		}
	}
	if cur != o.Best {
		t.Errorf("walking the diary ends at %+v, the outcome says %+v", cur, o.Best)
	}
}

func TestRealGainKept(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fake{noise: 0.02, rate: func(c tune.Config, _ int) float64 {
			if c.MaxBatch <= 16 {
				return 140
			}
			return 100
		}}
		start := time.Now()
		o, err := tune.Run(t.Context(), f, settings(30*time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		checkOneLever(t, o)
		if o.Best.MaxBatch != 16 || o.BestRate < 130 {
			t.Errorf("best %+v at %.0f rps; want max_batch 16 at ~140 (8 is no better)", o.Best, o.BestRate)
		}
		kept := o.Kept()
		if len(kept) == 0 || kept[0].Lever != tune.LeverMaxBatch || !strings.Contains(kept[0].Why, "beats the threshold") {
			t.Errorf("kept %+v; want a max_batch_size change that beats the threshold", kept)
		}
		if !strings.Contains(o.Stopped, "kept no change") {
			t.Errorf("stopped %q; want a pass that kept nothing", o.Stopped)
		}
		if time.Since(start) > 30*time.Minute {
			t.Errorf("ran %v", time.Since(start))
		}
		// A kept change was confirmed: the current best and the change measured again.
		var repeats int
		for _, e := range o.Entries {
			if e.Kind == "repeat" {
				repeats++
			}
		}
		if repeats < 2 {
			t.Errorf("%d repeats; a kept change needs the current best and itself measured again", repeats)
		}
	})
}

func TestWithinNoiseReverted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fake{noise: 0.03, rate: func(c tune.Config, _ int) float64 {
			if c.Sessions == 1 {
				return 103 // a 3% "gain": within the noise
			}
			return 100
		}}
		o, err := tune.Run(t.Context(), f, settings(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		checkOneLever(t, o)
		if len(o.Kept()) != 0 || o.Best != base {
			t.Errorf("kept %+v; nothing beats the noise", o.Kept())
		}
		found := false
		for _, e := range o.Entries {
			if e.Lever == tune.LeverSessions && e.Value == "1" && e.Kind == "trial" {
				found = true
				if e.Decision != tune.Reverted || !strings.Contains(e.Why, "within the noise") || !strings.Contains(e.Why, "threshold") {
					t.Errorf("sessions 1: %s, %q; want reverted within the noise, naming the threshold", e.Decision, e.Why)
				}
			}
		}
		if !found {
			t.Error("sessions 1 was never tried")
		}
		if o.Threshold < 0.05 || o.SD == 0 {
			t.Errorf("SD %.3f threshold %.3f; want a measured SD and a threshold of at least 5%%", o.SD, o.Threshold)
		}
		if o.BestRuns != 3 {
			t.Errorf("the chosen config was measured %d times; want 3, time allowing", o.BestRuns)
		}
	})
}

// A trial that looks like a win once but not on repeat is reverted.
func TestLuckyTrialNotConfirmed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var lucky sync.Once
		f := &fake{rate: func(c tune.Config, _ int) float64 {
			r := 100.0
			if c.MaxBatch == 2 {
				lucky.Do(func() { r = 130 })
			}
			return r
		}}
		s := settings(time.Hour)
		s.Batch = &tune.BatchModel{BestBatch: 2, BestItems: 200, Points: []bench.OfflinePoint{{Batch: 1, ItemsPerS: 150}, {Batch: 2, ItemsPerS: 200}}}
		o, err := tune.Run(t.Context(), f, s)
		if err != nil {
			t.Fatal(err)
		}
		var e *tune.Entry
		for i := range o.Entries {
			if o.Entries[i].Kind == "trial" && o.Entries[i].Lever == tune.LeverMaxBatch && o.Entries[i].Value == "2" {
				e = &o.Entries[i]
			}
		}
		if e == nil {
			t.Fatal("the batch model's best batch size, 2, was not tried")
		}
		if e.Decision != tune.Reverted || !strings.Contains(e.Why, "did not hold on repeat") {
			t.Errorf("max_batch 2: %s %q; want reverted, not holding on repeat", e.Decision, e.Why)
		}
	})
}

func TestBudget(t *testing.T) {
	for _, tt := range []struct {
		name string
		took func(int) time.Duration
	}{
		{"steady", func(int) time.Duration { return 45 * time.Second }},
		// Experiments that get slower than the estimate: the deadline cuts the last one.
		{"slowing", func(call int) time.Duration { return time.Duration(20+call*call*8) * time.Second }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := &fake{noise: 0.02, took: tt.took, rate: func(c tune.Config, _ int) float64 { return 100 + float64(c.Sessions) }}
				start := time.Now()
				s := settings(5 * time.Minute)
				s.Start = start
				o, err := tune.Run(t.Context(), f, s)
				if err != nil {
					t.Fatal(err)
				}
				if d := time.Since(start); d > 5*time.Minute-s.Reserve {
					t.Errorf("ran %v of a 5m budget with %v reserved", d, s.Reserve)
				}
				if !strings.Contains(o.Stopped, "budget") {
					t.Errorf("stopped %q; want the budget", o.Stopped)
				}
				for _, e := range o.Entries {
					if e.AtS > (5 * time.Minute).Seconds() {
						t.Errorf("#%d written at %.0f s", e.N, e.AtS)
					}
				}
			})
		})
	}
}

func TestMaxExperiments(t *testing.T) {
	for _, n := range []int{2, 3, 5} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := &fake{noise: 0.02, took: func(int) time.Duration { return 45 * time.Second },
					rate: func(c tune.Config, _ int) float64 { return 100 + float64(c.Sessions) }}
				s := settings(time.Hour)
				s.MaxExperiments = n
				o, err := tune.Run(t.Context(), f, s)
				if err != nil {
					t.Fatal(err)
				}
				measured, baselines := 0, 0
				for _, e := range o.Entries {
					if e.N > 0 {
						measured++
					}
					if e.Kind == "baseline" {
						baselines++
					}
				}
				if measured != n || baselines != 2 || len(f.calls) != n {
					t.Errorf("%d entries measured (%d baselines), %d calls; want %d, 2 of them baselines", measured, baselines, len(f.calls), n)
				}
				if want := fmt.Sprintf("experiments: %d run", n); !strings.Contains(o.Stopped, want) {
					t.Errorf("stopped %q; want %q", o.Stopped, want)
				}
			})
		})
	}
}

func TestVersionsOnlyWithPassingGate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fake{noise: 0.01, rate: func(c tune.Config, _ int) float64 {
			switch c.Version {
			case "fp16":
				return 150
			case "int8":
				return 200 // faster still, but no gate report allows it
			}
			return 100
		}}
		s := settings(time.Hour)
		s.Versions = tune.VersionChoices("sentiment", "fp32", []string{"fp32", "int8", "fp16"}, []tune.GateReport{
			{File: "gate-fp16.json", Model: "sentiment", Baseline: "fp32", Candidate: "fp16", Pass: true},
			{File: "gate-int8.json", Model: "sentiment", Baseline: "fp32", Candidate: "int8", Pass: false, Reasons: []string{"accuracy drop up to 3 points exceeds the 1-point budget"}},
		})
		o, err := tune.Run(t.Context(), f, s)
		if err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(f.calls, func(c tune.Config) bool { return c.Version == "int8" }) {
			t.Error("int8 was served without a passing gate report")
		}
		if o.Best.Version != "fp16" {
			t.Errorf("best version %q; want fp16, gated and faster", o.Best.Version)
		}
		if !slices.ContainsFunc(o.Entries, func(e tune.Entry) bool {
			return e.Decision == tune.Skipped && strings.Contains(e.Why, "int8 not tried") && strings.Contains(e.Why, "failed")
		}) {
			t.Error("the diary does not say why int8 was not tried")
		}
	})
}

func TestCacheJudgedByRepeatRatio(t *testing.T) {
	cached := func(c tune.Config, _ int) float64 {
		if c.CacheBytes > 0 {
			return 300
		}
		return 100
	}
	t.Run("distinct texts: not tried", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := &fake{rate: cached}
			o, err := tune.Run(t.Context(), f, settings(time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			if slices.ContainsFunc(f.calls, func(c tune.Config) bool { return c.CacheBytes > 0 }) {
				t.Error("the cache was measured on a workload without repeats")
			}
			if !slices.ContainsFunc(o.Entries, func(e tune.Entry) bool { return strings.HasPrefix(e.Why, "cache not tried") }) {
				t.Error("the diary does not say why the cache was not tried")
			}
		})
	})
	t.Run("replay repeats more than the workload: reverted", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := &fake{rate: cached}
			s := settings(time.Hour)
			s.Workload = tune.WorkloadInfo{Source: "log.txt", Texts: 201, Distinct: 150, Repeat: 1 - 150.0/201, FitBytes: 1 << 20}
			o, err := tune.Run(t.Context(), f, s)
			if err != nil {
				t.Fatal(err)
			}
			i := slices.IndexFunc(o.Entries, func(e tune.Entry) bool { return e.Lever == tune.LeverCache && e.Kind == "trial" })
			if i < 0 {
				t.Fatal("the cache was not tried")
			}
			if e := o.Entries[i]; e.Decision != tune.Reverted || !strings.Contains(e.Why, "replay") || e.ReplayRepeat == nil {
				t.Errorf("cache: %s %q; want reverted with the replay's repeat ratio recorded", e.Decision, e.Why)
			}
		})
	})
}

// A config the server cannot start with is reverted, and the loop goes on.
func TestFailedTrial(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fake{rate: func(tune.Config, int) float64 { return 100 },
			fail: func(c tune.Config) error {
				if c.Sessions == 3 {
					return errors.New("ort: out of memory")
				}
				return nil
			}}
		o, err := tune.Run(t.Context(), f, settings(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(o.Entries, func(e tune.Entry) bool { return e.Lever == tune.LeverSessions && e.Value == "3" })
		if i < 0 || o.Entries[i].Decision != tune.Reverted || !strings.Contains(o.Entries[i].Why, "out of memory") {
			t.Errorf("sessions 3: %+v; want reverted with the error", o.Entries[max(i, 0)])
		}
		if !slices.ContainsFunc(o.Entries[i+1:], func(e tune.Entry) bool { return e.Kind == "trial" }) {
			t.Error("no trial after the failed one")
		}
	})
}

func TestNoBaseline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fake{rate: func(tune.Config, int) float64 { return 0 }}
		o, err := tune.Run(t.Context(), f, settings(time.Hour))
		if !errors.Is(err, tune.ErrNoBaseline) || o == nil || len(f.calls) != 1 {
			t.Errorf("err %v after %d calls; want ErrNoBaseline after one", err, len(f.calls))
		}
	})
}

func TestInterrupted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		f := &fake{rate: func(tune.Config, int) float64 { return 100 }}
		time.AfterFunc(100*time.Second, cancel)
		o, err := tune.Run(ctx, f, settings(time.Hour))
		if !errors.Is(err, context.Canceled) || o.Stopped != "interrupted" {
			t.Errorf("err %v, stopped %q; want canceled, interrupted", err, o.Stopped)
		}
	})
}

func TestServeYAML(t *testing.T) {
	baseSettings := []tune.Setting{{"listen", "127.0.0.1:8080"}, {"models", "/var/lib/ortserve/models"}, {"sessions", "0"}, {"threads", "0"},
		{tune.KeyMaxBatch, "32"}, {tune.KeyQueueDelay, "5ms"}, {"limits.max_inputs", "32"}, {"ort_lib", ""}}
	to := base
	to.MaxBatch, to.MaxQueueDelay = 4, 2*time.Millisecond
	var b bytes.Buffer
	if err := tune.WriteServeYAML(&b, []string{"tuned by server tune"}, tune.ServeSettings(baseSettings, base, to)); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	batching, _ := doc["batching"].(map[string]any)
	if batching["max_batch_size"] != 4 || batching["max_queue_delay"] != "2ms" || doc["sessions"] != 0 || doc["models"] != "/var/lib/ortserve/models" {
		t.Errorf("wrote:\n%s", b.String())
	}
	if _, ok := doc["ort_lib"]; ok || !strings.HasPrefix(b.String(), "# tuned by server tune\n") {
		t.Errorf("an empty setting was written, or the comment is missing:\n%s", b.String())
	}
	// Sessions and threads move together.
	to = base
	to.Threads, to.Sessions = 2, 1
	got := tune.ServeSettings(baseSettings, base, to)
	if !slices.Contains(got, tune.Setting{"sessions", "1"}) || !slices.Contains(got, tune.Setting{"threads", "2"}) {
		t.Errorf("threads lever wrote %v", got)
	}
}

func TestOverlay(t *testing.T) {
	src := t.TempDir()
	for _, m := range []string{"sentiment", "minilm"} {
		os.MkdirAll(filepath.Join(src, m), 0o755)
		os.WriteFile(filepath.Join(src, m, "fp32.onnx"), []byte("weights"), 0o644)
		os.WriteFile(filepath.Join(src, m, "int8.onnx"), []byte("weights"), 0o644)
		os.WriteFile(filepath.Join(src, m, "tokenizer.json"), []byte("{}"), 0o644)
	}
	os.WriteFile(filepath.Join(src, "sentiment", "model.yaml"), []byte(`name: sentiment
task: classify
tokenizer: tokenizer.json
max_length: 256
labels: [negative, positive]
output: logits
default_version: fp32  # the reference
versions:
  fp32: {file: fp32.onnx}
  int8: {file: int8.onnx}
traffic: {fp32: 90, int8: 10}
`), 0o644)
	os.WriteFile(filepath.Join(src, "minilm", "model.yaml"), []byte("name: minilm\n"), 0o644)
	os.MkdirAll(filepath.Join(src, "not-a-model"), 0o755)

	for _, tt := range []struct {
		name   string
		edit   tune.ModelEdit
		others bool
	}{
		{"experiment", tune.ModelEdit{Version: "int8", CacheBytes: 1 << 20, Only: true}, false},
		{"artifact", tune.ModelEdit{Version: "fp32"}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dst := filepath.Join(t.TempDir(), "models")
			if err := tune.Overlay(src, dst, "sentiment", tt.edit, tt.others); err != nil {
				t.Fatal(err)
			}
			cfg, err := models.ReadConfig(filepath.Join(dst, "sentiment"))
			if err != nil {
				t.Fatal(err)
			}
			if cfg.DefaultVersion != tt.edit.Version || cfg.Cache.MaxBytes != tt.edit.CacheBytes {
				t.Errorf("default %q cache %d; want %q %d", cfg.DefaultVersion, cfg.Cache.MaxBytes, tt.edit.Version, cfg.Cache.MaxBytes)
			}
			if tt.edit.Only && (len(cfg.Versions) != 1 || cfg.Traffic != nil) {
				t.Errorf("versions %v traffic %v; want only %s", cfg.Versions, cfg.Traffic, tt.edit.Version)
			}
			if !tt.edit.Only && len(cfg.Versions) != 2 {
				t.Errorf("versions %v; want both kept", cfg.Versions)
			}
			if data, err := os.ReadFile(filepath.Join(dst, "sentiment", "int8.onnx")); err != nil || string(data) != "weights" {
				t.Errorf("int8.onnx through the overlay: %q, %v", data, err)
			}
			_, err = os.Stat(filepath.Join(dst, "minilm", "model.yaml"))
			if (err == nil) != tt.others {
				t.Errorf("minilm linked: %v; want %v", err == nil, tt.others)
			}
			if _, err := os.Stat(filepath.Join(dst, "not-a-model")); err == nil {
				t.Error("a folder without model.yaml was linked")
			}
			orig, _ := os.ReadFile(filepath.Join(src, "sentiment", "model.yaml"))
			if !strings.Contains(string(orig), "traffic") {
				t.Error("the original model.yaml changed")
			}
		})
	}
	if err := tune.Overlay(src, t.TempDir(), "sentiment", tune.ModelEdit{Version: "fp64"}, false); err == nil {
		t.Error("an overlay with an unknown default version was made")
	}
}

func TestGateReports(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(body), 0o644)
		return p
	}
	tests := []struct {
		name, body string
		want       string // the error, or the candidate read
	}{
		{"pass", `{"schema":"ortserve.gate/v1","model":"sentiment","baseline":{"version":"fp32"},"candidate":{"version":"int8"},"verdict":{"pass":true,"checks":[]}}`, "int8"},
		{"bench report", `{"schema":"ortserve.bench/v1"}`, "is not a gate report"},
		{"no verdict", `{"schema":"ortserve.gate/v1","baseline":{"version":"fp32"},"candidate":{"version":"int8"}}`, "no baseline, candidate or verdict"},
		{"not json", `schema: x`, "invalid character"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := tune.ReadGateReport(write(tt.name+".json", tt.body))
			got := r.Candidate
			if err != nil {
				got = err.Error()
			}
			if !strings.Contains(got, tt.want) {
				t.Errorf("got %q; want %q", got, tt.want)
			}
		})
	}
	choices := tune.VersionChoices("sentiment", "fp32", []string{"fp32", "int8", "fp16", "int4"}, []tune.GateReport{
		{File: "a", Model: "sentiment", Baseline: "fp32", Candidate: "int8", Pass: true},
		{File: "b", Model: "sentiment", Baseline: "int8", Candidate: "fp16", Pass: true},
		{File: "c", Model: "minilm", Baseline: "fp32", Candidate: "int4", Pass: true},
	})
	want := map[string]string{"int8": "may be tried", "fp16": "holds it against int8", "int4": "no passing gate report"}
	for _, c := range choices {
		if !strings.Contains(c.Why, want[c.Version]) || c.Allowed != (c.Version == "int8") {
			t.Errorf("%s: allowed %v, %q; want %q", c.Version, c.Allowed, c.Why, want[c.Version])
		}
	}
	if len(choices) != 3 {
		t.Errorf("%d choices; the baseline is not one", len(choices))
	}
}

func TestOutputs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		out := &tune.Output{Dir: dir}
		f := &fake{noise: 0.02, rate: func(c tune.Config, _ int) float64 {
			if c.MaxBatch <= 16 {
				return 130
			}
			return 100
		}}
		s := settings(time.Hour)
		s.Record = out.Record
		o, err := tune.Run(t.Context(), f, s)
		if err != nil {
			t.Fatal(err)
		}
		out.Plot(o)
		if out.Err != nil {
			t.Fatal(out.Err)
		}
		md, _ := os.ReadFile(filepath.Join(dir, tune.DiaryMD))
		for _, want := range []string{"| # | kind | lever |", "reverted", "kept", "int8 not tried", "$/1M req", "profile at the baseline"} {
			if !strings.Contains(string(md), want) {
				t.Errorf("diary.md lacks %q", want)
			}
		}
		lines, _ := os.ReadFile(filepath.Join(dir, tune.DiaryJSONL))
		if n := strings.Count(string(lines), "\n"); n != len(o.Entries) {
			t.Errorf("diary.jsonl has %d lines for %d entries", n, len(o.Entries))
		}
		svg, _ := os.ReadFile(filepath.Join(dir, tune.PlotFile))
		for _, want := range []string{"<svg", "SLO p95 100 ms", "chosen config", "</svg>"} {
			if !strings.Contains(string(svg), want) {
				t.Errorf("plot.svg lacks %q", want)
			}
		}
		var sum bytes.Buffer
		tune.WriteSummary(&sum, o)
		if !strings.Contains(sum.String(), "kept      max_batch_size 32 → 16") {
			t.Errorf("summary:\n%s", sum.String())
		}
	})
}

func TestFromReport(t *testing.T) {
	pass, fail := true, false
	rep := &bench.Report{Load: bench.LoadSpec{WarmupS: 1}, Workload: bench.WorkloadSummary{Tokens: &bench.Distribution{Max: 81}},
		Runs: []bench.Run{{Versions: []bench.VersionResult{{Best: 100, Steps: []bench.Step{
			{Offered: 70, Sent: 280, Achieved: 70, Latency: bench.Latency{P95: 40}, Pass: &pass, Dominant: "queue"},
			{Offered: 100, Sent: 400, Achieved: 99, Latency: bench.Latency{P50: 30, P95: 80, P99: 95}, Pass: &pass, Dominant: "inference"},
			{Offered: 140, Sent: 560, Achieved: 110, Latency: bench.Latency{P95: 900}, Pass: &fail},
		}}}}}}
	r := tune.FromReport(rep)
	if r.Best != 100 || r.At.P95 != 80 || r.Dominant != "inference" || len(r.Steps) != 3 || r.TokensMax != 81 || r.Requests != 280+400+560+310 {
		t.Errorf("%+v", r)
	}
}

func TestBatchModel(t *testing.T) {
	m, ok := tune.FitBatchModel([]bench.OfflinePoint{{Batch: 1, P50: 5, ItemsPerS: 400}, {Batch: 2, P50: 7, ItemsPerS: 570}, {Batch: 4, P50: 11, ItemsPerS: 720}})
	if !ok || m.BestBatch != 4 || m.BaseMs < 2.9 || m.BaseMs > 3.1 || m.PerItemMs < 1.9 || m.PerItemMs > 2.1 {
		t.Errorf("%+v, %v; want 3 ms + 2 ms × batch, best at 4", m, ok)
	}
	if _, ok := tune.FitBatchModel([]bench.OfflinePoint{{Batch: 1, P50: 5}}); ok {
		t.Error("a line through one point")
	}
}

func TestDescribeWorkload(t *testing.T) {
	w := tune.DescribeWorkload(&bench.Workload{Source: "x", Texts: []string{"a", "b", "a", "c"}}, 2)
	if w.Distinct != 3 || w.Repeat != 0.25 || w.FitBytes != 1<<20 {
		t.Errorf("%+v", w)
	}
}
