package models_test

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ortserve/ortserve/models"
	"github.com/ortserve/ortserve/runtime"
	"github.com/ortserve/ortserve/tokenize"
)

// fixedExec is a fakeExec that also runs fixed batches, and counts which way it ran.
type fixedExec struct {
	fakeExec
	executed, fixed *atomic.Int32
}

func (f fixedExec) Execute(ctx context.Context, encs []tokenize.Encoding) ([]runtime.Tensor, runtime.ExecStats, error) {
	f.executed.Add(1)
	return f.fakeExec.Execute(ctx, encs)
}

func (f fixedExec) RunFixed(ctx context.Context, encs []tokenize.Encoding) ([]runtime.Tensor, error) {
	f.fixed.Add(1)
	out, _, err := f.fakeExec.Execute(ctx, encs)
	return out, err
}

type fixedBackend struct {
	fakeBackend
	executed, fixed atomic.Int32
}

func (b *fixedBackend) Executor(spec models.ExecSpec) (models.Executor, error) {
	e, _ := b.fakeBackend.Executor(spec)
	return fixedExec{fakeExec: e.(fakeExec), executed: &b.executed, fixed: &b.fixed}, nil
}

// Model.Fixed's view runs every call through its versions' fixed batches, computing each time
// (no response cache), with the answers the model gives; a model whose executors cannot run
// fixed batches has no such view.
func TestFixed(t *testing.T) {
	dir := writeModel(t, t.TempDir(), "emb", embedYAML+"cache: {max_bytes: 65536}\n")
	b := &fixedBackend{fakeBackend: fakeBackend{device: "cpu"}}
	m, err := models.Open(dir, b, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	texts := []string{"a b", "c"}
	served, _, err := m.Embed(t.Context(), "fp32", texts, models.EmbedOptions{Normalize: true})
	if err != nil {
		t.Fatal(err)
	}
	b.executed.Store(0)
	fixed, err := m.Fixed()
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second would be all cache hits on m
		got, st, err := fixed.Embed(t.Context(), "fp32", texts, models.EmbedOptions{Normalize: true})
		if err != nil {
			t.Fatal(err)
		}
		if st.CacheHits != 0 || len(got) != len(served) || !slices.Equal(got[0], served[0]) || !slices.Equal(got[1], served[1]) {
			t.Errorf("fixed: %v (%d cache hits); want %v from no cache", got, st.CacheHits, served)
		}
	}
	if b.fixed.Load() != 2 || b.executed.Load() != 0 {
		t.Errorf("%d fixed runs, %d through the executor; want 2 and 0", b.fixed.Load(), b.executed.Load())
	}

	plain, err := models.Open(dir, &fakeBackend{device: "cpu"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := plain.Fixed(); err == nil || !strings.Contains(err.Error(), "cannot run fixed batches") {
		t.Errorf("error %v; want one saying the executor cannot run fixed batches", err)
	}
}
