package models_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/ortserve/ortserve/models"
	"github.com/ortserve/ortserve/runtime"
	"github.com/ortserve/ortserve/tokenize"
)

func openRepo(t *testing.T, root string, b models.Backend) *models.Repository {
	t.Helper()
	r, err := models.OpenRepository(root, b, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// request embeds "ab" with model name as a server's request does: it acquires the model,
// runs, and releases it. It reports failures as errors, so that a goroutine may call it.
func request(ctx context.Context, r *models.Repository, name, version string) ([]float32, models.Stats, error) {
	m, release, err := r.Acquire(name)
	if err != nil {
		return nil, models.Stats{}, err
	}
	defer release()
	vecs, st, err := m.Embed(ctx, version, []string{"ab"}, models.EmbedOptions{Truncate: true})
	if err != nil {
		return nil, st, err
	}
	return vecs[0], st, nil
}

func embed(t *testing.T, r *models.Repository, version string) (models.Stats, error) {
	t.Helper()
	_, st, err := request(t.Context(), r, "emb", version)
	return st, err
}

// change rewrites a model folder's model.yaml with one edit, so that the next Reload loads
// it anew.
func change(t *testing.T, dir, yaml, old, new string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, models.ConfigFile), []byte(strings.Replace(yaml, old, new, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestReload runs in a bubble, so that synctest.Wait lets the retired generations' drains
// finish before their closing is counted.
func TestReload(t *testing.T) { synctest.Test(t, testReload) }

func testReload(t *testing.T) {
	root := t.TempDir()
	dir := writeModel(t, root, "emb", embedYAML)
	b := &fakeBackend{device: "cpu"}
	r := openRepo(t, root, b)

	// Nothing changed: nothing is reloaded.
	if err := r.Reload(); err != nil || r.Status()[0].Reloads != 0 {
		t.Fatalf("unchanged: %v %+v", err, r.Status())
	}

	// A version pointed at a corrupt file: the reload fails, says why, and the previous
	// generation keeps serving.
	b.fail = "broken.onnx"
	change(t, dir, embedYAML, "fp32: {file: fp32.onnx}", "fp32: {file: broken.onnx}")
	if err := r.Reload(); err == nil || !strings.Contains(err.Error(), "corrupt file") {
		t.Fatalf("corrupt reload: %v", err)
	}
	if st := r.Status()[0]; !strings.Contains(st.ReloadError, "corrupt file") || st.Reloads != 0 {
		t.Errorf("status after a failed reload: %+v", st)
	}
	if _, err := embed(t, r, ""); err != nil {
		t.Errorf("old generation stopped serving: %v", err)
	}
	// The same failing files are not retried on every poll.
	if err := r.Reload(); err != nil {
		t.Errorf("retried unchanged failing files: %v", err)
	}

	// A good change: the new generation serves, the old one is closed.
	closedBefore := b.closed.Load()
	change(t, dir, embedYAML, "pooling: mean", "pooling: cls")
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	synctest.Wait()
	st := r.Status()[0]
	if st.Reloads != 1 || st.ReloadError != "" || st.Config.Pooling != models.PoolingCLS {
		t.Errorf("after a good reload: %+v", st)
	}
	if n := b.closed.Load(); n != closedBefore+1 {
		t.Errorf("old generation not closed: %d → %d", closedBefore, n)
	}

	// A new folder is picked up.
	writeModel(t, root, "cls", classifyYAML)
	b.classify = true
	if err := r.Reload(); err != nil || len(r.Names()) != 2 {
		t.Errorf("new model: %v %v", err, r.Names())
	}

	// A folder that is gone: its model stops serving (unknown model) and is closed, and
	// the others serve on.
	closedBefore = b.closed.Load()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	synctest.Wait()
	if names, n := r.Names(), b.closed.Load(); len(names) != 1 || names[0] != "cls" || n != closedBefore+1 {
		t.Errorf("after its folder went: models %v, %d closed", names, n-closedBefore)
	}
	if _, _, err := r.Acquire("emb"); !errors.Is(err, models.ErrUnknownModel) {
		t.Errorf("acquiring a removed model: %v", err)
	}
	if _, err := r.StatusOf("emb"); err == nil {
		t.Error("a removed model still has a status")
	}
}

// heldExec holds the test's requests ("ab", 4 tokens) in Execute: each says it has entered,
// then waits until gate is closed (and runs), until the executor is aborted (and fails with
// runtime.ErrClosed, as a batcher fails what is still queued), or until its ctx ends. The
// start-up check's longer text passes.
type heldExec struct {
	models.Executor
	entered chan<- struct{}
	gate    <-chan struct{}
	aborted chan struct{}
}

func (h heldExec) Execute(ctx context.Context, encs []tokenize.Encoding) ([]runtime.Tensor, runtime.ExecStats, error) {
	if encs[0].Len() == 4 {
		h.entered <- struct{}{}
		select {
		case <-h.gate:
		case <-h.aborted:
			return nil, runtime.ExecStats{}, runtime.ErrClosed
		case <-ctx.Done():
			return nil, runtime.ExecStats{}, ctx.Err()
		}
	}
	return h.Executor.Execute(ctx, encs)
}

func (h heldExec) Abort(context.Context) error {
	select {
	case <-h.aborted:
	default:
		close(h.aborted)
	}
	return nil
}

// heldBackend makes heldExecs around a fakeBackend's executors.
type heldBackend struct {
	*fakeBackend
	entered chan struct{}
	gate    chan struct{}
}

func newHeldBackend() heldBackend {
	return heldBackend{&fakeBackend{device: "cpu"}, make(chan struct{}), make(chan struct{})}
}

func (b heldBackend) Executor(spec models.ExecSpec) (models.Executor, error) {
	e, err := b.fakeBackend.Executor(spec)
	return heldExec{Executor: e, entered: b.entered, gate: b.gate, aborted: make(chan struct{})}, err
}

// holdRequest starts a request on model name, which b holds in Execute, and returns once it
// is held; its result comes on the channel.
func holdRequest(ctx context.Context, r *models.Repository, b heldBackend, name string) <-chan error {
	res := make(chan error, 1)
	go func() {
		_, _, err := request(ctx, r, name, "")
		res <- err
	}()
	<-b.entered
	return res
}

// closeAll closes r and checks that want executors are closed in all: every generation's,
// once.
func closeAll(t *testing.T, r *models.Repository, b *fakeBackend, want int32) {
	t.Helper()
	if err := r.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if n := b.closed.Load(); n != want {
		t.Errorf("%d executors closed after Close, want %d: every generation's, once", n, want)
	}
}

// A request that acquired a generation keeps it, whatever reload swaps another in: its
// checks and its inference see one model, here one dimension.
func TestRequestKeepsItsGeneration(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		root := t.TempDir()
		dir := writeModel(t, root, "emb", embedYAML)
		b := &fakeBackend{device: "cpu"}
		r := openRepo(t, root, b)
		m1, release1, err := r.Acquire("emb")
		if err != nil {
			t.Fatal(err)
		}
		b.hidden = 3
		change(t, dir, embedYAML, "pooling: mean", "pooling: cls")
		if err := r.Reload(); err != nil {
			t.Fatal(err)
		}
		m2, release2, err := r.Acquire("emb")
		if err != nil {
			t.Fatal(err)
		}
		defer release2()
		for _, tt := range []struct {
			name string
			m    *models.Model
			dim  int
		}{{"generation 1, acquired before the reload", m1, 2}, {"generation 2", m2, 3}} {
			vecs, _, err := tt.m.Embed(t.Context(), "", []string{"ab"}, models.EmbedOptions{})
			if err != nil || tt.m.Dimension() != tt.dim || len(vecs[0]) != tt.dim {
				t.Errorf("%s: dimension %d, a vector of %d (%v), want %d", tt.name, tt.m.Dimension(), len(vecs[0]), err, tt.dim)
			}
		}
		if st, _ := r.StatusOf("emb"); st.Dimension != 3 {
			t.Errorf("status after the reload: dimension %d, want 3", st.Dimension)
		}
		synctest.Wait()
		if n := b.closed.Load(); n != 0 {
			t.Errorf("%d executors closed while generation 1 was held", n)
		}
		release1()
		synctest.Wait()
		if n := b.closed.Load(); n != 1 {
			t.Errorf("%d executors closed once generation 1 was released, want 1", n)
		}
	})
}

// A generation a reload replaced is closed once, and only once its last holder has released
// it; a holder releasing twice counts once.
func TestRetiredGenerationClosesAfterLastRelease(t *testing.T) {
	for _, tt := range []struct {
		name         string
		holders      int
		releaseTwice bool
	}{
		{"not held", 0, false},
		{"one holder", 1, false},
		{"three holders", 3, false},
		{"three holders, the first releasing twice", 3, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				root := t.TempDir()
				dir := writeModel(t, root, "emb", embedYAML)
				b := &fakeBackend{device: "cpu"}
				r, err := models.OpenRepository(root, b, slog.New(slog.DiscardHandler))
				if err != nil {
					t.Fatal(err)
				}
				var releases []func()
				for range tt.holders {
					_, release, err := r.Acquire("emb")
					if err != nil {
						t.Fatal(err)
					}
					releases = append(releases, release)
				}
				change(t, dir, embedYAML, "pooling: mean", "pooling: cls")
				if err := r.Reload(); err != nil {
					t.Fatal(err)
				}
				for i, release := range releases {
					synctest.Wait()
					if n := b.closed.Load(); n != 0 {
						t.Fatalf("closed with %d of %d holders left", tt.holders-i, tt.holders)
					}
					release()
					if tt.releaseTwice && i == 0 {
						release()
					}
				}
				synctest.Wait()
				if n := b.closed.Load(); n != 1 {
					t.Errorf("%d executors closed once the last holder released, want 1", n)
				}
				closeAll(t, r, b, 2)
			})
		})
	}
}

// A generation draining holds up nothing: while a request holds model b's first
// generation, a reload of model a completes, and so do two reloads of b. Close waits for
// the drain, refuses new requests meanwhile, and once the request is done returns with
// every generation closed.
func TestSlowDrainBlocksNoReload(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		root := t.TempDir()
		dirA := writeModel(t, root, "a", strings.Replace(embedYAML, "name: emb", "name: a", 1))
		dirB := writeModel(t, root, "b", strings.Replace(embedYAML, "name: emb", "name: b", 1))
		hb := newHeldBackend()
		r := openRepo(t, root, hb)
		held := holdRequest(t.Context(), r, hb, "b")

		reloads := []struct {
			dir, name, old, new string
		}{
			{dirB, "b", "pooling: mean", "pooling: cls"},
			{dirA, "a", "pooling: mean", "pooling: cls"},
			{dirB, "b", "pooling: cls", "pooling: max"},
		}
		yaml := map[string]string{"a": strings.Replace(embedYAML, "name: emb", "name: a", 1), "b": strings.Replace(embedYAML, "name: emb", "name: b", 1)}
		for _, rl := range reloads {
			change(t, rl.dir, yaml[rl.name], rl.old, rl.new)
			yaml[rl.name] = strings.Replace(yaml[rl.name], rl.old, rl.new, 1)
			if err := r.Reload(); err != nil { // a drain that blocked it would deadlock the bubble
				t.Fatal(err)
			}
		}
		for name, want := range map[string]int{"a": 1, "b": 2} {
			if st, _ := r.StatusOf(name); st.Reloads != want {
				t.Errorf("model %s: %d reloads, want %d", name, st.Reloads, want)
			}
		}
		synctest.Wait()
		if n := hb.closed.Load(); n != 2 {
			t.Errorf("%d executors closed during b's drain, want 2 (a's first generation, b's second)", n)
		}

		closed := make(chan error, 1)
		go func() { closed <- r.Close() }()
		synctest.Wait()
		select {
		case err := <-closed:
			t.Fatalf("Close returned (%v) while a request held a generation", err)
		default:
		}
		if _, _, err := r.Acquire("a"); !errors.Is(err, runtime.ErrClosed) {
			t.Errorf("acquiring during Close: %v, want runtime.ErrClosed", err)
		}
		if err := r.Reload(); !errors.Is(err, runtime.ErrClosed) {
			t.Errorf("reloading during Close: %v, want runtime.ErrClosed", err)
		}
		close(hb.gate)
		if err := <-held; err != nil {
			t.Errorf("the held request: %v", err)
		}
		if err := <-closed; err != nil {
			t.Errorf("Close: %v", err)
		}
		closeAll(t, r, hb.fakeBackend, 5) // a second Close: nothing more to close
	})
}

func TestTrafficSplit(t *testing.T) {
	root := t.TempDir()
	writeModel(t, root, "emb", embedYAML+"traffic: {fp32: 75, fp16: 25}\n")
	r := openRepo(t, root, &fakeBackend{device: "cuda"})
	counts := map[string]int{}
	for range 4000 {
		st, err := embed(t, r, "")
		if err != nil {
			t.Fatal(err)
		}
		counts[st.Version]++
	}
	if f := float64(counts["fp16"]) / 4000; f < 0.22 || f > 0.28 {
		t.Errorf("fp16 got %.3f of the traffic, want 0.25: %v", f, counts)
	}
	// A request that names a version gets it, whatever the split.
	if st, _ := embed(t, r, "fp16"); st.Version != "fp16" {
		t.Errorf("named version: %s", st.Version)
	}
}

func TestTrafficValidation(t *testing.T) {
	for _, tt := range []struct{ traffic, want string }{
		{"traffic: {int4: 10}", `traffic names version "int4"`},
		{"traffic: {fp32: 0}", "add up to 0"},
		{"traffic: {fp32: -1, fp16: 5}", "negative"},
	} {
		if _, err := models.ParseConfig([]byte(embedYAML + tt.traffic + "\n")); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v", tt.traffic, err)
		}
	}
}
