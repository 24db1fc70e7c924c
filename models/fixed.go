package models

import (
	"context"
	"fmt"
	"time"

	"github.com/ortserve/ortserve/runtime"
	"github.com/ortserve/ortserve/tokenize"
)

// FixedRunner is an Executor that can also run encodings as fixed batches of their own,
// bypassing its dynamic batcher (runtime/engine's Version): consecutive encodings, in order,
// up to the version's batch bounds, whatever else is queued.
type FixedRunner interface {
	RunFixed(ctx context.Context, encs []tokenize.Encoding) ([]runtime.Tensor, error)
}

// Fixed is a view of m whose versions run each call's encodings as fixed batches of their
// own (FixedRunner) and answer nothing from a response cache: every call computes, and the
// same texts in the same order always make the same batches, so that a version whose answers
// depend on its batch-mates (dynamic int8) gives the same answers on every run, as an
// accuracy gate needs. The view shares m's tokenizer and sessions: close m, not the view.
// It fails if a version's executor cannot run fixed batches.
func (m *Model) Fixed() (*Model, error) {
	versions := make(map[string]*Version, len(m.versions))
	for name, v := range m.versions {
		fr, ok := v.exec.(FixedRunner)
		if !ok {
			return nil, fmt.Errorf("models: %s/%s: its executor cannot run fixed batches", m.Config.Name, name)
		}
		versions[name] = &Version{Name: v.Name, File: v.File, exec: fixedExec{Executor: v.exec, run: fr}}
	}
	f := &Model{Config: m.Config, Dir: m.Dir, tok: m.tok, versions: versions}
	f.dim.Store(m.dim.Load())
	return f, nil
}

// fixedExec executes through a FixedRunner.
type fixedExec struct {
	Executor
	run FixedRunner
}

func (f fixedExec) Execute(ctx context.Context, encs []tokenize.Encoding) ([]runtime.Tensor, runtime.ExecStats, error) {
	start := time.Now()
	out, err := f.run.RunFixed(ctx, encs)
	return out, runtime.ExecStats{Inference: time.Since(start)}, err
}
