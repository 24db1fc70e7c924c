//go:build cgo && ort

package engine_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"regexp"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ortserve/ortserve/bench/offline"
	"github.com/ortserve/ortserve/models"
	"github.com/ortserve/ortserve/runtime"
	"github.com/ortserve/ortserve/runtime/engine"
	"github.com/ortserve/ortserve/runtime/ort"
	"github.com/ortserve/ortserve/runtime/ort/orttest"
	"github.com/ortserve/ortserve/tokenize"
)

var env *ort.Env

func TestMain(m *testing.M) { orttest.Main(m, "runtime/engine", &env) }

// texts are short sentences of several lengths.
var texts = []string{
	"The quick brown fox jumps over the lazy dog.",
	"How do I reset my password on the mobile app?",
	"Shipping was fast and the package arrived in perfect condition.",
	"What is the capital of Australia and why was it chosen?",
	"This blender is loud, but it crushes ice like a champ.",
	"Inference servers trade throughput for tail latency when they batch.",
	"Quantized models are faster, but you should measure their accuracy.",
	"Please send the signed contract back by the end of the week.",
}

func modelDir(name string) string { return filepath.Join(os.Getenv("ORTSERVE_MODELS"), name) }

// cpuEngine is the engine serve builds on the CPU with its default batching.
func cpuEngine(t testing.TB, c engine.Config) *engine.Engine {
	t.Helper()
	c.Device = "cpu"
	if c.Batch.MaxBatchSize == 0 {
		c.Batch = runtime.DefaultBatchConfig()
	}
	c.Packing = cmpOr(c.Packing, "auto")
	e, err := engine.New(env, c)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func cmpOr(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// load loads a version of one of the built models on e, and tokenizes texts with its
// tokenizer; the version closes with the test.
func load(t *testing.T, e *engine.Engine, model, version, output string) (*engine.Version, []tokenize.Encoding) {
	t.Helper()
	v, err := e.Load(t.Context(), models.ExecSpec{Model: model, Version: version, Path: filepath.Join(modelDir(model), version+".onnx"), Output: output})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	tok, err := e.Tokenizer(filepath.Join(modelDir(model), "tokenizer.json"), 256)
	if err != nil {
		t.Fatal(err)
	}
	defer tok.Close()
	encs, err := tok.Encode(texts, tokenize.Options{Truncate: true})
	if err != nil {
		t.Fatal(err)
	}
	return v, encs
}

// A version's sessions follow GOMAXPROCS, which follows the CPU limit of a container, not the
// host's cores: a pod limited to 2 CPUs on a 64-core node opens 2 sessions per version.
func TestSessionsFollowGOMAXPROCS(t *testing.T) {
	defer goruntime.GOMAXPROCS(goruntime.GOMAXPROCS(0))
	for _, procs := range []int{1, 3} {
		goruntime.GOMAXPROCS(procs)
		e := cpuEngine(t, engine.Config{})
		if e.Sessions() != procs || e.Threads() != 1 {
			t.Errorf("GOMAXPROCS %d (host: %d cores): %d sessions of %d threads; want %d of 1", procs, goruntime.NumCPU(), e.Sessions(), e.Threads(), procs)
		}
	}
}

// A loaded version serves through its batcher, and runs fixed batches straight on its pool:
// the same answers, for fp32, as each text alone, and the same answers on every run.
func TestVersion(t *testing.T) {
	e := cpuEngine(t, engine.Config{Sessions: 1, Calibration: 50 * time.Millisecond})
	for _, version := range []string{"fp32", "int8"} {
		t.Run(version, func(t *testing.T) {
			v, encs := load(t, e, "minilm", version, "last_hidden_state")
			fixed, err := v.RunFixed(t.Context(), encs)
			if err != nil {
				t.Fatal(err)
			}
			again, err := v.RunFixed(t.Context(), encs)
			if err != nil {
				t.Fatal(err)
			}
			if len(fixed) != len(encs) || len(again) != len(encs) {
				t.Fatalf("%d and %d tensors for %d texts", len(fixed), len(again), len(encs))
			}
			for i := range encs {
				if !slices.Equal(fixed[i].Data, again[i].Data) {
					t.Errorf("text %d: fixed batches answered differently on a second run", i)
				}
				if got, want := fixed[i].Shape[0], int64(encs[i].Len()); got != want {
					t.Errorf("text %d: %d tokens out, %d in", i, got, want)
				}
			}
			served, _, err := v.Execute(t.Context(), encs[:1])
			if err != nil {
				t.Fatal(err)
			}
			// One text alone is the same batch either way.
			alone, err := v.RunFixed(t.Context(), encs[:1])
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(served[0].Data, alone[0].Data) {
				t.Error("one text through the batcher and as a fixed batch answered differently")
			}
			if st := v.State(); st.Sessions != 1 || st.Cost.Observations == 0 {
				t.Errorf("state: %d sessions, %d cost observations; want 1 and some (calibration)", st.Sessions, st.Cost.Observations)
			}
		})
	}
}

// RunFixed splits a long request at the version's max batch size, in order.
func TestRunFixedSplits(t *testing.T) {
	c := engine.Config{Sessions: 1, Calibration: time.Millisecond, Packing: "off"}
	c.Batch = runtime.DefaultBatchConfig()
	c.Batch.MaxBatchSize = 3
	e := cpuEngine(t, c)
	v, encs := load(t, e, "sentiment", "fp32", "logits")
	out, err := v.RunFixed(t.Context(), encs)
	if err != nil {
		t.Fatal(err)
	}
	for i := range encs {
		alone, err := v.RunFixed(t.Context(), encs[i:i+1])
		if err != nil {
			t.Fatal(err)
		}
		for j := range alone[0].Data {
			if d := alone[0].Data[j] - out[i].Data[j]; d > 1e-4 || d < -1e-4 {
				t.Errorf("text %d: logit %d is %g in its batch of 3, %g alone", i, j, out[i].Data[j], alone[0].Data[j])
			}
		}
	}
}

// serve logs a version's placement at load; on CPU from the file alone.
func TestLogPlacement(t *testing.T) {
	var logs bytes.Buffer
	e := cpuEngine(t, engine.Config{Sessions: 1, Calibration: time.Millisecond, Log: slog.New(slog.NewTextHandler(&logs, nil))})
	load(t, e, "minilm", "int8", "last_hidden_state")
	line := regexp.MustCompile(`level=INFO msg=placement model=minilm version=int8 provider=CPUExecutionProvider nodes=\d+ quantized=[1-9]\d* placed=all:CPUExecutionProvider took=`)
	if !line.MatchString(logs.String()) || strings.Contains(logs.String(), "WARN") || !strings.Contains(logs.String(), `msg="cost model calibrated" model=minilm version=int8`) {
		t.Errorf("log:\n%s", logs.String())
	}
}

func TestOfflineLimit(t *testing.T) {
	e := cpuEngine(t, engine.Config{})
	for _, tt := range []struct{ model, version string }{
		{"minilm", "fp32"},
		{"sentiment", "int8"},
	} {
		t.Run(tt.model+"/"+tt.version, func(t *testing.T) {
			points, err := offline.LimitOf(t.Context(), e, modelDir(tt.model), tt.version, texts, []int{1, 4}, 300*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			if len(points) != 2 || points[0].Batch != 1 || points[1].Batch != 4 {
				t.Fatalf("points %+v; want batches 1 and 4", points)
			}
			for _, p := range points {
				if p.ItemsPerS <= 0 || p.P50 <= 0 {
					t.Errorf("point %+v; want items/s and p50 > 0", p)
				}
			}
		})
	}
}

func TestOfflineLimitErrors(t *testing.T) {
	e := cpuEngine(t, engine.Config{})
	minilm := modelDir("minilm")
	tests := []struct {
		name    string
		dir     string
		version string
		texts   []string
		batches []int
		is      error
		want    []string
	}{
		{"unknown version", minilm, "fp64", texts, []int{1}, models.ErrUnknownVersion, []string{`"minilm/fp64"`, "fp16", "fp32", "int8"}},
		{"no model folder", t.TempDir(), "fp32", texts, []int{1}, nil, []string{"no model.yaml and no config.json"}},
		{"no texts", minilm, "fp32", nil, []int{1}, nil, []string{"no texts"}},
		{"batch 0", minilm, "int8", texts, []int{0}, nil, []string{"batch size 0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := offline.LimitOf(t.Context(), e, tt.dir, tt.version, tt.texts, tt.batches, time.Millisecond)
			if err == nil {
				t.Fatal("no error")
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error %v; want one that is %v", err, tt.is)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q; want it to name %s", err, w)
				}
			}
		})
	}
}

func TestOfflineLimitCancel(t *testing.T) {
	e := cpuEngine(t, engine.Config{})
	dir := modelDir("minilm")

	t.Run("before", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if _, err := offline.LimitOf(ctx, e, dir, "int8", texts, []int{1}, time.Hour); !errors.Is(err, context.Canceled) {
			t.Errorf("error %v; want context.Canceled", err)
		}
	})

	t.Run("while measuring", func(t *testing.T) {
		r, err := offline.Open(t.Context(), e, dir, "int8", texts)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		ctx, cancel := context.WithCancel(t.Context())
		// A timer, not a sleep: measure runs for an hour unless the cancel stops it.
		stop := time.AfterFunc(100*time.Millisecond, cancel)
		defer stop.Stop()
		_, err = r.Measure(ctx, 4, time.Hour)
		if err != context.Canceled { //nolint:errorlint // the error itself, not one wrapping it
			t.Errorf("error %v; want context.Canceled itself", err)
		}
	})
}

// On the CPU a version's streams share one session, and so its weights: its pool has a slot a
// stream, and runs at once answer as runs one by one do.
func TestSharedWeights(t *testing.T) {
	e := cpuEngine(t, engine.Config{Sessions: 2, Calibration: time.Millisecond})
	v, encs := load(t, e, "minilm", "int8", "last_hidden_state")
	if got, want := v.ExecInfo(), (models.ExecInfo{Sessions: 1, Streams: 2, SharedWeights: true, Calibration: "measured"}); got != want {
		t.Errorf("exec info %+v; want %+v", got, want)
	}
	if st := v.State(); st.Sessions != 2 {
		t.Errorf("scheduler sees %d slots; want a slot a stream, 2", st.Sessions)
	}
	alone := make([][]float32, len(encs))
	for i := range encs {
		out, err := v.RunFixed(t.Context(), encs[i:i+1])
		if err != nil {
			t.Fatal(err)
		}
		alone[i] = out[0].Data
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for i := range encs {
				out, err := v.RunFixed(t.Context(), encs[i:i+1])
				if err != nil {
					t.Error(err)
					return
				}
				if !slices.Equal(out[0].Data, alone[i]) {
					t.Errorf("text %d: run beside another on the shared session answered differently", i)
				}
			}
		})
	}
	wg.Wait()
}

// A second load of a version with a calibration cache seeds its cost model from the file the
// first wrote, measuring nothing; a file that is not one is ignored with a warning, and the
// version measures anew.
func TestCalibrationCache(t *testing.T) {
	var logs syncBuffer
	dir := t.TempDir()
	// The first calibration may be measured while the rest of the suite loads the host, and
	// the check run on a quiet one: the check is left out (StaleCache +Inf) but for the stale
	// file below, which an engine of the default loads.
	noCheck := engine.Config{Sessions: 1, Calibration: 200 * time.Millisecond, CalibrationCache: dir, StaleCache: math.Inf(1), Log: slog.New(slog.NewTextHandler(&logs, nil))}
	e := cpuEngine(t, noCheck)
	spec := models.ExecSpec{Model: "minilm", Version: "fp32", Path: filepath.Join(modelDir("minilm"), "fp32.onnx"), Output: "last_hidden_state"}
	loadTimed := func() (*engine.Version, time.Duration) {
		t.Helper()
		start := time.Now()
		v, err := e.Load(t.Context(), spec)
		if err != nil {
			t.Fatal(err)
		}
		return v, time.Since(start)
	}
	first, measuring := loadTimed()
	firstCost := first.State().Cost
	first.Close()
	second, cached := loadTimed()
	defer second.Close()
	t.Logf("load measuring its calibration %v, from the cache %v", measuring, cached)
	if a, b := first.ExecInfo().Calibration, second.ExecInfo().Calibration; a != "measured" || b != "cached" {
		t.Errorf("calibration %s, then %s; want measured, then cached", a, b)
	}
	if got := second.State().Cost; got.Observations != firstCost.Observations || got.Coefficients != firstCost.Coefficients {
		t.Errorf("cached cost model %d runs %v; want the measured one's %d runs %v", got.Observations, got.Coefficients, firstCost.Observations, firstCost.Coefficients)
	}

	files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	if len(files) != 1 {
		t.Fatalf("cache files %v; want one", files)
	}
	if err := os.WriteFile(files[0], []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	third, _ := loadTimed()
	defer third.Close()
	if third.ExecInfo().Calibration != "measured" || !strings.Contains(logs.String(), `level=WARN msg="calibration cache: file ignored, calibrating anew" model=minilm version=fp32 err="calibcache: `) {
		t.Errorf("after corrupting the file: calibration %s; log:\n%s", third.ExecInfo().Calibration, logs.String())
	}

	// A file that says every run took 100 times what this host takes (a calibration measured
	// while the host was busy) fails the check at load: measured anew, and overwritten.
	var entry map[string]any
	data, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &entry); err != nil {
		t.Fatal(err)
	}
	for _, o := range entry["observations"].([]any) {
		o.(map[string]any)["ns"] = o.(map[string]any)["ns"].(float64) * 100
	}
	if data, err = json.Marshal(entry); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(files[0], data, 0o644); err != nil {
		t.Fatal(err)
	}
	withCheck := noCheck
	withCheck.StaleCache = 0
	e = cpuEngine(t, withCheck)
	fourth, _ := loadTimed()
	defer fourth.Close()
	if fourth.ExecInfo().Calibration != "measured" || !strings.Contains(logs.String(), `level=WARN msg="calibration cache: the cached cost is far above what this host takes now`) {
		t.Errorf("a cache 100 times too slow: calibration %s; log:\n%s", fourth.ExecInfo().Calibration, logs.String())
	}
	e = cpuEngine(t, noCheck)
	fifth, _ := loadTimed()
	defer fifth.Close()
	if fifth.ExecInfo().Calibration != "cached" {
		t.Errorf("after measuring over a stale file: calibration %s, want cached", fifth.ExecInfo().Calibration)
	}
}

// With Background, a version whose calibration is not cached serves as soon as its sessions
// are warm, measuring its calibration beside what it serves; once measured, it is cached,
// and the next load seeds from it. Closing a version that is still measuring stops it.
func TestBackgroundCalibration(t *testing.T) {
	dir := t.TempDir()
	e := cpuEngine(t, engine.Config{Sessions: 2, Calibration: 300 * time.Millisecond, CalibrationCache: dir, StaleCache: math.Inf(1), Background: true})
	spec := models.ExecSpec{Model: "minilm", Version: "fp32", Path: filepath.Join(modelDir("minilm"), "fp32.onnx"), Output: "last_hidden_state"}
	tok, err := e.Tokenizer(filepath.Join(modelDir("minilm"), "tokenizer.json"), 128)
	if err != nil {
		t.Fatal(err)
	}
	defer tok.Close()
	encs, err := tok.Encode(texts[:1], tokenize.Options{Truncate: true})
	if err != nil {
		t.Fatal(err)
	}
	v, err := e.Load(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	// The calibration's runs take at least its 300 ms budget: it cannot have ended yet.
	if got := v.ExecInfo().Calibration; got != "measuring" {
		t.Errorf("calibration %q right after Load; want measuring", got)
	}
	if out, _, err := v.Execute(t.Context(), encs); err != nil || len(out) != 1 {
		t.Fatalf("a request while measuring: %v, %d tensors", err, len(out))
	}
	select {
	case <-v.Calibrated():
	case <-t.Context().Done():
		t.Fatal("the calibration never ended")
	}
	if got, obs := v.ExecInfo().Calibration, v.State().Cost.Observations; got != "measured" || obs < 2 {
		t.Errorf("once calibrated: %q, %d cost observations; want measured and the calibration's", got, obs)
	}
	v.Close()

	again, err := e.Load(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if got := again.ExecInfo().Calibration; got != "cached" {
		t.Errorf("second load: calibration %q; want cached", got)
	}
	again.Close()

	// Held back, as serve holds them while it loads: the version serves, and measures once
	// released.
	release := e.HoldCalibrations()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	held, err := e.Load(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if out, _, err := held.Execute(t.Context(), encs); err != nil || len(out) != 1 || held.ExecInfo().Calibration != "measuring" {
		t.Fatalf("a request while held: %v, %d tensors, calibration %q", err, len(out), held.ExecInfo().Calibration)
	}
	release()
	select {
	case <-held.Calibrated():
	case <-t.Context().Done():
		t.Fatal("the held calibration never ended once released")
	}
	if got := held.ExecInfo().Calibration; got != "measured" {
		t.Errorf("held, then released: calibration %q; want measured", got)
	}
	held.Close()

	// A calibration far longer than the test, stopped by Close.
	slow := cpuEngine(t, engine.Config{Sessions: 1, Calibration: time.Hour, Background: true})
	v, err = slow.Load(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	v.Close()
	if got := v.ExecInfo().Calibration; got != "failed" {
		t.Errorf("closed while measuring: calibration %q; want failed (stopped)", got)
	}
}

// syncBuffer is a bytes.Buffer that goroutines may write at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
