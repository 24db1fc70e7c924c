package models_test

import (
	"context"
	"errors"
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

// stuckExec holds the test's requests ("ab", 4 tokens) until it is aborted, and then fails
// them with runtime.ErrClosed, as a batcher fails what is still queued; the start-up check's
// longer text passes.
type stuckExec struct {
	models.Executor
	entered chan<- struct{} // a request is waiting
	once    sync.Once
	aborted chan struct{}
}

func (s *stuckExec) Execute(ctx context.Context, encs []tokenize.Encoding) ([]runtime.Tensor, runtime.ExecStats, error) {
	if encs[0].Len() != 4 {
		return s.Executor.Execute(ctx, encs)
	}
	s.entered <- struct{}{}
	select {
	case <-s.aborted:
		return nil, runtime.ExecStats{}, runtime.ErrClosed
	case <-ctx.Done():
		return nil, runtime.ExecStats{}, ctx.Err()
	}
}

func (s *stuckExec) Abort(context.Context) error {
	s.once.Do(func() { close(s.aborted) })
	return nil
}

type stuckBackend struct {
	*fakeBackend
	entered chan struct{}
}

func (b stuckBackend) Executor(spec models.ExecSpec) (models.Executor, error) {
	e, err := b.fakeBackend.Executor(spec)
	return &stuckExec{Executor: e, entered: b.entered, aborted: make(chan struct{})}, err
}

// Abort reaches the requests waiting on the model serving and on the generation a reload is
// draining: each fails with runtime.ErrClosed, the reload completes, and Close does not wait.
func TestRepositoryAbort(t *testing.T) {
	root := t.TempDir()
	dir := writeModel(t, root, "emb", embedYAML)
	entered := make(chan struct{})
	r := openRepo(t, root, stuckBackend{&fakeBackend{device: "cpu"}, entered})
	results := make(chan error, 2)
	request := func() {
		_, err := embed(t, r, "")
		results <- err
	}

	// A request waits on the first generation; a reload replaces it and waits to close it.
	go request()
	<-entered
	os.WriteFile(filepath.Join(dir, models.ConfigFile), []byte(strings.Replace(embedYAML, "pooling: mean", "pooling: cls", 1)), 0o644)
	reloaded := make(chan error, 1)
	go func() { reloaded <- r.Reload() }()
	// Once the second generation is swapped in, a request waits on it. (Whether the reload
	// has begun to drain the first when Abort comes does not matter: whichever comes second
	// reaches the other.)
	for deadline := time.Now().Add(5 * time.Second); r.Status()[0].Reloads != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the reload did not swap the new generation in")
		}
	}
	go request()
	<-entered

	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	if err := r.Abort(ctx); err != nil {
		t.Errorf("Abort: %v", err)
	}
	for range 2 {
		if err := <-results; !errors.Is(err, runtime.ErrClosed) {
			t.Errorf("a waiting request got %v, want runtime.ErrClosed", err)
		}
	}
	if err := <-reloaded; err != nil {
		t.Errorf("the reload draining the old generation: %v", err)
	}
	if err := r.Close(); err != nil {
		t.Errorf("Close after Abort: %v", err)
	}
}
