package models_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	goruntime "runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ortserve/ortserve/models"
	"github.com/ortserve/ortserve/runtime"
)

// lazyYAML is embedYAML with every version loaded on its first request, and an int8 version
// that loads with its model.
var lazyYAML = strings.Replace(embedYAML, "  fp32: {file: fp32.onnx}\n", "  fp32: {file: fp32.onnx}\n  int8: {file: int8.onnx, load: eager}\n", 1) + "load: lazy\n"

// slowBackend is a fakeBackend whose loads take a second, and of which the first fails ones
// fail.
type slowBackend struct {
	fakeBackend
	loads atomic.Int32
	fails int32
}

func (b *slowBackend) Executor(spec models.ExecSpec) (models.Executor, error) {
	n := b.loads.Add(1)
	time.Sleep(time.Second)
	if n <= b.fails {
		return nil, errors.New("out of memory")
	}
	exec, err := b.fakeBackend.Executor(spec)
	return describedExec{exec}, err
}

// describedExec is an executor that says what it holds (models.Describer).
type describedExec struct{ models.Executor }

var held = models.ExecInfo{Sessions: 1, Streams: 2, SharedWeights: true, Calibration: "cached"}

func (describedExec) ExecInfo() models.ExecInfo { return held }

func TestParseLoad(t *testing.T) {
	for _, tc := range []struct{ name, yaml, err string }{
		{"lazy model, eager version", lazyYAML, ""},
		{"eager", embedYAML + "load: eager\n", ""},
		{"unknown mode", embedYAML + "load: later\n", `load "later": use eager or lazy`},
		{"unknown version mode", strings.Replace(lazyYAML, "load: eager", "load: never", 1), `version int8: load "never"`},
	} {
		c, err := models.ParseConfig([]byte(tc.yaml))
		if tc.err == "" && err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
		if tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: error %v; want %q", tc.name, err, tc.err)
		}
		if tc.name == "lazy model, eager version" && (!c.LoadsLazily("fp32") || c.LoadsLazily("int8")) {
			t.Errorf("%s: fp32 lazy %v, int8 lazy %v; want true and false", tc.name, c.LoadsLazily("fp32"), c.LoadsLazily("int8"))
		}
	}
}

// A lazy version loads on its first request, once, however many requests come while it loads;
// /info says where it stands throughout.
func TestLazyLoadsOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &slowBackend{fakeBackend: fakeBackend{device: "cpu"}}
		root := t.TempDir()
		writeModel(t, root, "emb", lazyYAML)
		r := openRepo(t, root, b)
		if n := b.loads.Load(); n != 1 {
			t.Fatalf("%d loads at start-up; want the eager int8's only", n)
		}
		state := func() models.VersionState {
			st, err := r.StatusOf("emb")
			if err != nil {
				t.Fatal(err)
			}
			if int8 := st.VersionStates["int8"]; int8.Load != models.LoadEager || int8.State != models.StateReady {
				t.Errorf("int8: %+v; want eager and ready", int8)
			}
			return st.VersionStates["fp32"]
		}
		if st := state(); st.Load != models.LoadLazy || st.State != models.StateUnloaded || st.ExecInfo != nil {
			t.Errorf("before any request: %+v; want lazy and unloaded, holding nothing", st)
		}
		if data, _ := json.Marshal(state()); string(data) != `{"load":"lazy","state":"unloaded"}` {
			t.Errorf("before any request, in JSON: %s", data)
		}

		start := time.Now()
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() {
				vec, st, err := request(t.Context(), r, "emb", "fp32")
				if err != nil || len(vec) != 2 || st.Queue != time.Second {
					t.Errorf("request: %v, %v, queued %v; want an answer after the second the load takes", vec, err, st.Queue)
				}
			})
		}
		synctest.Wait()
		if st := state(); st.State != models.StateLoading {
			t.Errorf("while loading: %+v", st)
		}
		// A request that gives up waiting leaves the load going for the others.
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		if _, _, err := request(ctx, r, "emb", "fp32"); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("request that gave up: %v", err)
		}
		wg.Wait()
		if d := time.Since(start); d != time.Second {
			t.Errorf("first requests answered after %v; want the one load's second", d)
		}
		if n := b.loads.Load(); n != 2 {
			t.Errorf("%d loads in all; want 2: int8 at start-up, fp32 once", n)
		}
		if st := state(); st.State != models.StateReady || st.ExecInfo == nil || *st.ExecInfo != held {
			t.Errorf("after the load: %+v; want ready, holding %+v", st, held)
		}
		if _, _, err := request(t.Context(), r, "emb", "fp32"); err != nil || b.loads.Load() != 2 {
			t.Errorf("a later request: %v, %d loads; want no new load", err, b.loads.Load())
		}
	})
}

// A load that fails fails the requests that waited for it with a *models.LoadError and is
// not remembered: the next request loads again.
func TestLazyRetriesAfterFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &slowBackend{fakeBackend: fakeBackend{device: "cpu"}, fails: 1}
		root := t.TempDir()
		writeModel(t, root, "emb", strings.Replace(lazyYAML, "load: eager", "load: lazy", 1))
		r := openRepo(t, root, b)
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() {
				_, _, err := request(t.Context(), r, "emb", "fp32")
				var le *models.LoadError
				if !errors.As(err, &le) || le.Model != "emb" || le.Version != "fp32" || !strings.Contains(err.Error(), "out of memory") {
					t.Errorf("waiting for a failed load: %v; want a LoadError that says why", err)
				}
			})
		}
		wg.Wait()
		st, _ := r.StatusOf("emb")
		if fp32 := st.VersionStates["fp32"]; fp32.State != models.StateFailed || !strings.Contains(fp32.Error, "out of memory") {
			t.Errorf("after the failure: %+v", fp32)
		}
		if _, _, err := request(t.Context(), r, "emb", "fp32"); err != nil {
			t.Errorf("the next request: %v; want it to load anew and answer", err)
		}
		if n := b.loads.Load(); n != 2 {
			t.Errorf("%d loads; want 2", n)
		}
		st, _ = r.StatusOf("emb")
		if fp32 := st.VersionStates["fp32"]; fp32.State != models.StateReady || fp32.Error != "" {
			t.Errorf("after the retry: %+v", fp32)
		}
		if st.Dimension != 2 {
			t.Errorf("dimension %d; want 2, learned from the lazy version's check", st.Dimension)
		}
	})
}

// A lazy version is checked when it loads, as an eager one is at start-up: an output of the
// wrong shape fails its first request, and the executor loaded is closed.
func TestLazyCheckedAtLoad(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &slowBackend{fakeBackend: fakeBackend{device: "cpu", classify: true}}
		yaml := strings.Replace(classifyYAML, "labels: [negative, positive]", "labels: [a, b, c]", 1) + "load: lazy\n"
		root := t.TempDir()
		writeModel(t, root, "cls", yaml)
		r := openRepo(t, root, b)
		m, release, err := r.Acquire("cls")
		if err != nil {
			t.Fatal(err)
		}
		defer release()
		_, _, err = m.Classify(t.Context(), "", []string{"a"}, models.ClassifyOptions{})
		var le *models.LoadError
		if !errors.As(err, &le) || !strings.Contains(err.Error(), "one logit per label") {
			t.Errorf("got %v; want a LoadError for the output's shape", err)
		}
		if n := b.closed.Load(); n != 1 {
			t.Errorf("%d executors closed; want the one that failed its check", n)
		}
	})
}

// Abort fails the requests waiting for a lazy load with runtime.ErrClosed, and Close waits for
// the load and closes what it loaded.
func TestLazyAbortAndClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &slowBackend{fakeBackend: fakeBackend{device: "cpu"}}
		root := t.TempDir()
		writeModel(t, root, "emb", strings.Replace(lazyYAML, "load: eager", "load: lazy", 1))
		r := openRepo(t, root, b)
		done := make(chan error)
		go func() {
			_, _, err := request(t.Context(), r, "emb", "fp32")
			done <- err
		}()
		synctest.Wait()
		if err := r.Abort(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := <-done; !errors.Is(err, runtime.ErrClosed) {
			t.Errorf("request waiting for the load: %v; want runtime.ErrClosed", err)
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		if b.loads.Load() != 1 || b.closed.Load() != 1 {
			t.Errorf("%d loads, %d closed; want the load finished and its executor closed", b.loads.Load(), b.closed.Load())
		}
	})
}

// A model's eager versions load side by side, as many at once as GOMAXPROCS: three loads of a
// second each, two at a time, take two seconds.
func TestVersionsLoadSideBySide(t *testing.T) {
	defer goruntime.GOMAXPROCS(goruntime.GOMAXPROCS(2))
	synctest.Test(t, func(t *testing.T) {
		b := &slowBackend{fakeBackend: fakeBackend{device: "cpu"}}
		yaml := strings.Replace(embedYAML, "  fp16: {file: fp16.onnx, devices: [cuda]}\n", "  int8: {file: int8.onnx}\n  int4: {file: int4.onnx}\n", 1)
		root := t.TempDir()
		writeModel(t, root, "emb", yaml)
		start := time.Now()
		openRepo(t, root, b)
		if d, n := time.Since(start), b.loads.Load(); d != 2*time.Second || n != 3 {
			t.Errorf("%d loads took %v; want 3 in 2s", n, d)
		}
	})
}

// A version that fails to load fails its model, whose other versions, loaded beside it, are
// closed.
func TestVersionLoadFailureClosesTheOthers(t *testing.T) {
	b := &fakeBackend{device: "cpu", fail: "int8.onnx"}
	yaml := strings.Replace(embedYAML, "  fp16: {file: fp16.onnx, devices: [cuda]}\n", "  int8: {file: int8.onnx}\n  int4: {file: int4.onnx}\n", 1)
	_, err := models.OpenConfig(t.TempDir(), mustParse(t, yaml), b, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "emb/int8: corrupt file") {
		t.Errorf("error %v; want the failing version's", err)
	}
	if n := b.closed.Load(); n != 2 {
		t.Errorf("%d executors closed; want the two that loaded", n)
	}
}

func mustParse(t *testing.T, yaml string) models.Config {
	t.Helper()
	c, err := models.ParseConfig([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return c
}
