package models_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

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

func embed(t *testing.T, r *models.Repository, version string) (models.Stats, error) {
	t.Helper()
	h, err := r.Handle("emb")
	if err != nil {
		t.Fatal(err)
	}
	_, st, err := h.Embed(t.Context(), version, []string{"ab"}, models.EmbedOptions{Truncate: true})
	return st, err
}

func TestReload(t *testing.T) {
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
	os.WriteFile(filepath.Join(dir, models.ConfigFile), []byte(strings.Replace(embedYAML, "fp32: {file: fp32.onnx}", "fp32: {file: broken.onnx}", 1)), 0o644)
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
	closedBefore := b.closed
	os.WriteFile(filepath.Join(dir, models.ConfigFile), []byte(strings.Replace(embedYAML, "pooling: mean", "pooling: cls", 1)), 0o644)
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	st := r.Status()[0]
	if st.Reloads != 1 || st.ReloadError != "" || st.Config.Pooling != models.PoolingCLS {
		t.Errorf("after a good reload: %+v", st)
	}
	if b.closed != closedBefore+1 {
		t.Errorf("old generation not closed: %d → %d", closedBefore, b.closed)
	}

	// A new folder is picked up.
	writeModel(t, root, "cls", classifyYAML)
	b.classify = true
	if err := r.Reload(); err != nil || len(r.Names()) != 2 {
		t.Errorf("new model: %v %v", err, r.Names())
	}

	// A folder that is gone: its model stops serving (unknown model) and is closed, and
	// the others serve on.
	closedBefore = b.closed
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if names := r.Names(); len(names) != 1 || names[0] != "cls" || b.closed != closedBefore+1 {
		t.Errorf("after its folder went: models %v, %d closed", names, b.closed-closedBefore)
	}
	if _, err := r.Handle("emb"); err == nil {
		t.Error("a removed model still has a handle")
	}
	if _, err := r.StatusOf("emb"); err == nil {
		t.Error("a removed model still has a status")
	}
}

// gatedExec blocks Execute of the test's request ("ab", 4 tokens) until gate is closed;
// the start-up check's longer text passes.
type gatedExec struct {
	models.Executor
	gate chan struct{}
}

func (g gatedExec) Execute(ctx context.Context, encs []tokenize.Encoding) ([]runtime.Tensor, runtime.ExecStats, error) {
	if encs[0].Len() == 4 {
		<-g.gate
	}
	return g.Executor.Execute(ctx, encs)
}

type gatedBackend struct {
	*fakeBackend
	gate chan struct{}
}

func (g gatedBackend) Executor(spec models.ExecSpec) (models.Executor, error) {
	e, err := g.fakeBackend.Executor(spec)
	return gatedExec{e, g.gate}, err
}

// A reload swaps the new generation in at once, but closes the old one only after the
// requests using it have their answers.
func TestReloadDrainsOldGeneration(t *testing.T) {
	root := t.TempDir()
	dir := writeModel(t, root, "emb", embedYAML)
	gate := make(chan struct{})
	r := openRepo(t, root, gatedBackend{&fakeBackend{device: "cpu"}, gate})
	var wg sync.WaitGroup
	var slowErr error
	wg.Go(func() { _, slowErr = embed(t, r, "") })
	time.Sleep(20 * time.Millisecond) // the request is in flight, held at the gate

	os.WriteFile(filepath.Join(dir, models.ConfigFile), []byte(strings.Replace(embedYAML, "pooling: mean", "pooling: cls", 1)), 0o644)
	reloaded := make(chan error, 1)
	go func() { reloaded <- r.Reload() }()
	select {
	case <-reloaded:
		t.Fatal("reload closed the old generation while a request was using it")
	case <-time.After(50 * time.Millisecond):
	}
	// Meanwhile the new generation already serves new requests (its start-up check passed).
	if st := r.Status()[0]; st.Config.Pooling != models.PoolingCLS {
		t.Errorf("new generation not serving during the drain: %+v", st.Config.Pooling)
	}
	close(gate)
	wg.Wait()
	if err := <-reloaded; err != nil || slowErr != nil {
		t.Errorf("reload %v, in-flight request %v", err, slowErr)
	}
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
