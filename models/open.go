package models

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"sync"

	"github.com/ortserve/ortserve/runtime"
	"github.com/ortserve/ortserve/tokenize"
)

// Opening a model: its config, tokenizer and versions, each checked by a run before it serves.

// Open loads the model in dir: its config, its tokenizer and every version that may run on
// the backend's device, but for lazy ones (LoadLazy), which load on their first request.
// Versions that may not run on the device (fp16 on CPU, say) are skipped with a log line.
func Open(dir string, b Backend, log *slog.Logger) (*Model, error) {
	cfg, err := LoadConfig(dir, log)
	if err != nil {
		return nil, err
	}
	return OpenConfig(dir, cfg, b, log)
}

// OpenConfig is Open with the config given: cfg's paths are relative to dir.
func OpenConfig(dir string, cfg Config, b Backend, log *slog.Logger) (*Model, error) {
	tok, err := b.Tokenizer(filepath.Join(dir, cfg.Tokenizer), cfg.MaxLength)
	if err != nil {
		return nil, fmt.Errorf("models: %s: tokenizer: %w", cfg.Name, err)
	}
	m := &Model{Config: cfg, Dir: dir, tok: tok, versions: map[string]*Version{}}
	if m.dense, err = loadDenseModules(dir, cfg); err != nil {
		return nil, errors.Join(err, tok.Close())
	}
	specs := map[string]ExecSpec{} // of the versions to load now
	for _, name := range slices.Sorted(maps.Keys(cfg.Versions)) {
		vc := cfg.Versions[name]
		if !vc.RunsOn(b.Device()) {
			log.Info("version skipped: not for this device", "model", cfg.Name, "version", name, "device", b.Device(), "devices", vc.Devices)
			continue
		}
		path := filepath.Join(dir, vc.File)
		spec := ExecSpec{Model: cfg.Name, Version: name, Path: path, Output: cfg.Output, Instances: cfg.Instances, Batching: cfg.Batching, SLO: cfg.SLOTarget()}
		v := &Version{Name: name, File: path, cache: newCache(cfg.Cache.MaxBytes)}
		m.versions[name] = v
		if cfg.LoadsLazily(name) {
			v.exec = newLazy(cfg.Name, name, func() (Executor, error) { return m.loadChecked(b, spec) }, log)
		} else {
			specs[name] = spec
		}
	}
	if err := m.loadAll(b, specs); err != nil {
		return nil, err
	}
	if _, ok := m.versions[cfg.DefaultVersion]; !ok {
		m.Close()
		return nil, fmt.Errorf("models: %s: default version %q cannot run on %s: change default_version or the device", cfg.Name, cfg.DefaultVersion, b.Device())
	}
	if err := m.check(); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

// loadAll loads the versions specs name side by side, as many at once as the process may run
// threads (GOMAXPROCS): loading a session, its graph optimized, runs mostly on one thread, and
// a version on the CPU has one session (its streams share it), so one at a time would leave
// the other cores idle at start-up. If any fails it closes the model and returns the error of
// the first, by name.
func (m *Model) loadAll(b Backend, specs map[string]ExecSpec) error {
	names := slices.Sorted(maps.Keys(specs))
	errs := make([]error, len(names))
	slots := make(chan struct{}, max(1, goruntime.GOMAXPROCS(0)))
	var wg sync.WaitGroup
	for i, name := range names {
		v := m.versions[name]
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			exec, err := b.Executor(specs[name])
			if err != nil {
				errs[i] = err
				return
			}
			v.exec = exec
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err == nil {
			continue
		}
		for _, name := range names {
			if m.versions[name].exec == nil {
				delete(m.versions, name)
			}
		}
		m.Close()
		return fmt.Errorf("models: %s/%s: %w", m.Config.Name, names[i], err)
	}
	return nil
}

// check runs one text through every version loaded (checkVersion), so that a tokenizer
// whose ids the graph does not accept, or an output of the wrong size, stops start-up instead
// of the first request. A lazy version is checked when it loads.
func (m *Model) check() error {
	for _, name := range m.VersionNames() {
		if exec := m.versions[name].loaded(); exec != nil {
			if err := m.checkVersion(name, exec); err != nil {
				return err
			}
		}
	}
	return nil
}

// loadChecked loads a lazy version and checks it (checkVersion), closing it if the check
// fails.
func (m *Model) loadChecked(b Backend, spec ExecSpec) (Executor, error) {
	exec, err := b.Executor(spec)
	if err != nil {
		return nil, err
	}
	if err := m.checkVersion(spec.Version, exec); err != nil {
		return nil, errors.Join(err, exec.Close())
	}
	return exec, nil
}

// checkVersion runs one text through a version's executor and checks the output's shape,
// which gives the model's dimension. It is part of loading (at start-up, on a reload, or a
// lazy version's first request) and runs under a context of its own: one short run, which no
// request's context should cut short.
//
//nolint:contextcheck // a fresh context by design, as said above
func (m *Model) checkVersion(name string, exec Executor) error {
	in := []Input{{Text: "ortserve start-up check"}}
	if m.Config.Task == TaskRerank {
		// A pair, so that a tokenizer that cannot join pairs, or a graph that takes no
		// token type 1, fails here.
		in[0].Second, in[0].Pair = "a passage to score", true
	}
	encs, err := m.encode(in, tokenize.Options{Truncate: true})
	if err != nil {
		return fmt.Errorf("models: %s: tokenizer: %w", m.Config.Name, err)
	}
	out, _, err := exec.Execute(context.Background(), encs)
	if err != nil {
		return fmt.Errorf("models: %s/%s: a test run failed (does the tokenizer match the model?): %w", m.Config.Name, name, err)
	}
	if err := m.checkShape(out[0]); err != nil {
		return fmt.Errorf("models: %s/%s: %w", m.Config.Name, name, err)
	}
	dim := out[0].Shape[len(out[0].Shape)-1]
	if n := len(m.dense); n > 0 {
		if int(dim) != m.dense[0].in {
			return fmt.Errorf("models: %s/%s: output %q has %d features and the first dense module (%s) takes %d: is dense: for this model?", m.Config.Name, name, m.Config.Output, dim, m.Config.Dense[0], m.dense[0].in)
		}
		dim = int64(m.dense[n-1].out)
	}
	if len(m.Config.Dimensions) > 0 && int64(slices.Max(m.Config.Dimensions)) > dim {
		return fmt.Errorf("models: %s/%s: dimensions %v: the vectors have %d values: list none over %d", m.Config.Name, name, m.Config.Dimensions, dim, dim)
	}
	m.dim.Store(dim)
	return nil
}

func (m *Model) checkShape(t runtime.Tensor) error {
	switch m.Config.Task {
	case TaskEmbed:
		if m.Config.Pooling == PoolingNone && len(t.Shape) != 1 {
			return fmt.Errorf("output %q has per-text shape %v: pooling none needs an output already pooled, [hidden]", m.Config.Output, t.Shape)
		}
		if m.Config.Pooling != PoolingNone && len(t.Shape) != 2 {
			return fmt.Errorf("output %q has per-text shape %v: an embed model needs [sequence, hidden] (or pooling: none for [hidden])", m.Config.Output, t.Shape)
		}
	case TaskSparse:
		if len(t.Shape) != 2 {
			return fmt.Errorf("output %q has per-text shape %v: a sparse model needs logits [sequence, vocabulary]", m.Config.Output, t.Shape)
		}
	case TaskClassify:
		if len(t.Shape) != 1 || int(t.Shape[0]) != len(m.Config.Labels) {
			return fmt.Errorf("output %q has per-text shape %v: want [%d], one logit per label", m.Config.Output, t.Shape, len(m.Config.Labels))
		}
	case TaskRerank:
		if len(t.Shape) != 1 || t.Shape[0] != 1 {
			return fmt.Errorf("output %q has per-pair shape %v: a rerank model needs [1], one logit per pair (a sequence classifier with one label)", m.Config.Output, t.Shape)
		}
	}
	return nil
}
