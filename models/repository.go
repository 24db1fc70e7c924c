package models

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ortserve/ortserve/runtime"
)

// Repository is every model under one root folder, and every model folder named on its own,
// loaded, and kept in step with the folders by Reload: a changed model is loaded anew beside
// the old one, warmed up and swapped in; the old one then drains and closes on its own
// goroutine. A reload that fails leaves the old model serving and says why (Status).
//
// A request holds one generation of a model for its whole life (Acquire), so that all it
// does sees one config, one dimension and one set of versions, whatever reload happens
// meanwhile.
type Repository struct {
	Root string // "": none, only Models
	// Models are the model folders served on their own (serve --model).
	Models []ModelDir
	b      Backend
	log    *slog.Logger

	// reloadMu lets one Reload, or Close, change the slots at a time. It is never held while
	// a generation drains: that runs on a goroutine of its own (retire).
	reloadMu sync.Mutex
	mu       sync.RWMutex
	slots    map[string]*slot // by model name
	changes  int              // models added, reloaded or removed: Watch's change marker
	closed   bool             // by Close: no more acquires or reloads
	// retiring are the generations swapped out (by a reload, a removal or Close) that are
	// draining or closing; aborted is the context of Abort, once called. Each reaches the
	// other, whichever comes first.
	retiring map[*generation]bool
	aborted  context.Context
	// retirements are the goroutines that drain and close retiring generations; Close
	// waits for them. Each is started under reloadMu, and none after Close, so that every
	// one is counted before Close waits.
	retirements sync.WaitGroup
	// refused are the folders, not serving, whose load failed (or, for Root's folders
	// without model.yaml, whose config could not be inferred), with the fingerprint of the
	// files refused: not tried again until those change.
	refused map[string]string
}

// slot is one model folder and the generation of the model serving from it.
type slot struct {
	md ModelDir

	mu          sync.RWMutex
	cur         *generation // never nil while the slot is in Repository.slots
	fingerprint string      // of the files the last load attempt saw
	failed      string      // why the last reload failed; "" once one succeeds
	reloads     int
}

// OpenRepository loads every model folder under root: those with a model.yaml, and Hugging
// Face model folders (IsHFDir) with their config inferred.
func OpenRepository(root string, b Backend, log *slog.Logger) (*Repository, error) {
	return OpenSources(Sources{Root: root}, b, log)
}

// OpenSources loads the model folders under src.Root and those of src.Models. A folder of
// src.Models that is not a model folder is an error; under Root, it is skipped.
func OpenSources(src Sources, b Backend, log *slog.Logger) (*Repository, error) {
	r := &Repository{Root: src.Root, Models: src.Models, b: b, log: log, slots: map[string]*slot{}, retiring: map[*generation]bool{}, refused: map[string]string{}}
	mds, err := r.modelDirs(true)
	if err != nil {
		return nil, err
	}
	var skipped []string
	for _, md := range mds {
		fp := fingerprint(md.Dir)
		m, err := openDir(md, b, log)
		if r.skip(md, fp, err) {
			skipped = append(skipped, err.Error())
			continue
		}
		if err != nil {
			r.Close()
			return nil, err
		}
		if _, dup := r.slots[m.Name()]; dup {
			m.Close()
			r.Close()
			return nil, fmt.Errorf("models: two models named %q (the second in %s): rename one (serve --model NAME=DIR names a folder's model)", m.Name(), md.Dir)
		}
		r.slots[m.Name()] = &slot{md: md, cur: newGeneration(m), fingerprint: fp}
		log.Info("model loaded", "model", m.Name(), "task", m.Config.Task, "versions", m.VersionNames(), "default", m.Config.DefaultVersion)
	}
	if len(r.slots) == 0 {
		why := ""
		if len(skipped) > 0 {
			why = fmt.Sprintf("; skipped %d: %s", len(skipped), strings.Join(skipped, "; "))
		}
		if src.Root != "" && IsModelDir(src.Root) {
			why += fmt.Sprintf("; %s is itself a model folder: serve it with --model %s", src.Root, src.Root)
		}
		return nil, fmt.Errorf("models: no models in %s (folders with %s, or Hugging Face model folders: config.json and an .onnx file): run `make models` or point --models at a model repository, or --model at a model folder%s", src.Root, ConfigFile, why)
	}
	return r, nil
}

// Names lists the models, sorted.
func (r *Repository) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Sorted(maps.Keys(r.slots))
}

// errClosed is what a closed repository answers: runtime.ErrClosed, which the server
// reports as shutting down.
var errClosed = fmt.Errorf("models: repository closed: %w", runtime.ErrClosed)

// Acquire returns the model serving under name, held for the caller until it calls release:
// a reload meanwhile swaps a new generation in for later requests, and closes this one only
// after its last holder has released it. Everything one request does (its checks, the
// version the traffic split picks, the inference) should go to the one model it acquired.
// release must be called once the model is no longer used; calls after the first do
// nothing. An unknown name is an *UnknownError; after Close, runtime.ErrClosed.
func (r *Repository) Acquire(name string) (m *Model, release func(), err error) {
	_, g, err := r.acquire(name)
	if err != nil {
		return nil, nil, err
	}
	h := &hold{g: g}
	return g.m, h.release, nil
}

// AcquireFirst is Acquire of the first model, by name, that does task; without one, an
// *UnknownError.
func (r *Repository) AcquireFirst(task Task) (m *Model, release func(), err error) {
	for _, name := range r.Names() {
		m, release, err := r.Acquire(name)
		if errors.Is(err, runtime.ErrClosed) {
			return nil, nil, err
		}
		if err != nil {
			continue // removed meanwhile
		}
		if m.Config.Task == task {
			return m, release, nil
		}
		release()
	}
	return nil, nil, &UnknownError{Kind: ErrUnknownModel, Name: "(any " + string(task) + " model)", Known: r.Names()}
}

// acquire holds the generation serving under name, and returns its slot too. r.mu is held
// throughout, so that a slot removed (or closed) is never acquired once it is gone from
// r.slots; s.mu, so that a generation swapped out is never acquired once it is.
func (r *Repository) acquire(name string) (*slot, *generation, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.closed {
		return nil, nil, errClosed
	}
	s, ok := r.slots[name]
	if !ok {
		return nil, nil, &UnknownError{Kind: ErrUnknownModel, Name: name, Known: slices.Sorted(maps.Keys(r.slots))}
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	s.cur.acquire()
	return s, s.cur, nil
}

// Status is how one model stands: what serves, and what the last reload said.
type Status struct {
	Config      Config
	Versions    []string
	Dimension   int
	Reloads     int    // successful reloads since start
	ReloadError string // why the last reload failed, "" if it did not
	// Scheduling is, per version loaded, what its batcher has learned (the cost curve) and
	// decided (the SLO controller), when its executor reports it.
	Scheduling map[string]runtime.SchedulerState
	// VersionStates is, per version, when it loads, whether it has, and what it holds.
	VersionStates map[string]VersionState
}

// Status describes every model, sorted by name, with its scheduling state.
func (r *Repository) Status() []Status {
	var out []Status
	for _, name := range r.Names() {
		if st, err := r.status(name, true); err == nil { // else removed meanwhile
			out = append(out, st)
		}
	}
	return out
}

// StatusOf describes one model, without its scheduling state; an unknown name is an
// *UnknownError.
func (r *Repository) StatusOf(name string) (Status, error) { return r.status(name, false) }

func (r *Repository) status(name string, scheduling bool) (Status, error) {
	s, g, err := r.acquire(name)
	if err != nil {
		return Status{}, err
	}
	defer g.release()
	m := g.m
	s.mu.RLock()
	st := Status{Reloads: s.reloads, ReloadError: s.failed}
	s.mu.RUnlock()
	st.Config, st.Versions, st.Dimension = m.Config, m.VersionNames(), m.Dimension()
	st.VersionStates = m.VersionStates()
	if scheduling {
		st.Scheduling = m.Scheduling()
	}
	return st, nil
}

// Reload loads anew every model whose folder changed since it was loaded (or since a
// failed attempt), and swaps each in once it is loaded and warm. It returns the errors of
// the models that failed, which keep serving their previous generation. A model whose
// folder (or its model.yaml) is gone is removed: its requests in flight finish, later ones
// get an unknown-model error, as Triton's polling mode does. Reload does not wait for the
// generations it replaces or removes: each drains and closes on its own goroutine. After
// Close, it does nothing and says so.
func (r *Repository) Reload() error {
	r.reloadMu.Lock()
	defer r.reloadMu.Unlock()
	r.mu.RLock()
	if r.closed {
		r.mu.RUnlock()
		return errClosed
	}
	byDir := map[string]*slot{}
	for _, s := range r.slots {
		byDir[s.md.Dir] = s
	}
	r.mu.RUnlock()
	mds, err := r.modelDirs(false)
	if err != nil {
		return err
	}
	for dir, s := range byDir {
		if !slices.ContainsFunc(mds, func(md ModelDir) bool { return md.Dir == dir }) {
			r.remove(s)
		}
	}
	var errs []error
	for _, md := range mds {
		dir := md.Dir
		s := byDir[dir]
		fp := fingerprint(dir)
		if s != nil && s.fingerprint == fp {
			continue
		}
		if s == nil && r.refused[dir] == fp {
			continue // refused before, and unchanged
		}
		m, err := openDir(md, r.b, r.log)
		if s == nil && r.skip(md, fp, err) {
			continue
		}
		delete(r.refused, dir)
		if err == nil && s != nil && m.Name() != s.cur.m.Name() {
			m.Close()
			err = fmt.Errorf("models: %s: a reload may not rename model %q to %q: restart to rename", dir, s.cur.m.Name(), m.Name())
		}
		if err != nil {
			if s != nil {
				s.mu.Lock()
				s.fingerprint, s.failed = fp, err.Error()
				s.mu.Unlock()
				r.log.Error("reload failed, previous generation keeps serving", "dir", dir, "err", err)
			} else {
				r.refused[dir] = fp
				r.log.Error("new model folder failed to load", "dir", dir, "err", err)
			}
			errs = append(errs, err)
			continue
		}
		if s == nil {
			r.mu.Lock()
			_, dup := r.slots[m.Name()]
			if !dup {
				r.slots[m.Name()] = &slot{md: md, cur: newGeneration(m), fingerprint: fp}
				r.changes++
			}
			r.mu.Unlock()
			if dup {
				m.Close()
				errs = append(errs, fmt.Errorf("models: %s: another folder already serves model %q", dir, m.Name()))
				continue
			}
			r.log.Info("model added", "model", m.Name(), "versions", m.VersionNames())
			continue
		}
		s.mu.Lock()
		old := s.cur
		s.cur = newGeneration(m)
		s.fingerprint, s.failed = fp, ""
		s.reloads++
		s.mu.Unlock()
		r.mu.Lock()
		r.changes++
		r.mu.Unlock()
		r.retire(old)
		r.log.Info("model reloaded", "model", m.Name(), "versions", m.VersionNames())
	}
	return errors.Join(errs...)
}

// remove stops serving a slot's model, whose folder is gone; it closes once its requests in
// flight are done.
func (r *Repository) remove(s *slot) {
	name := s.cur.m.Name()
	r.mu.Lock()
	delete(r.slots, name)
	r.changes++
	r.mu.Unlock()
	r.retire(s.cur)
	r.log.Warn("model removed: its folder, or its model.yaml or model files, is gone", "model", name, "dir", s.md.Dir)
}

// retire drains a generation that its caller has swapped out (so that nobody acquires it
// any more), and closes it, on a goroutine of its own: a slow drain holds up nothing else.
// Abort reaches it meanwhile, with Abort's own context: no caller's context has a say in
// how long a shutdown's abort may take. Its caller holds reloadMu (see retirements).
//
//nolint:contextcheck // Abort's context, by design, as said above
func (r *Repository) retire(g *generation) {
	r.mu.Lock()
	r.retiring[g] = true
	aborted := r.aborted
	r.mu.Unlock()
	g.retire()
	r.retirements.Go(func() {
		if aborted != nil { // the shutdown's Abort came first: the requests here fail too
			_ = g.m.Abort(aborted) // it only says batches were cancelled, which their requests are told
		}
		<-g.drained
		if g.err = g.m.Close(); g.err != nil {
			r.log.Error("closing a retired model", "model", g.m.Name(), "err", g.err)
		}
		r.mu.Lock()
		delete(r.retiring, g)
		r.mu.Unlock()
	})
}

// Watch calls Reload every interval until ctx ends, and then, if given, changed after each
// Reload that loaded something.
func (r *Repository) Watch(ctx context.Context, interval time.Duration, changed func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			before := r.loads()
			_ = r.Reload() // a model that fails is logged and kept in Status; an unreadable root is tried again next tick
			if changed != nil && r.loads() != before {
				changed()
			}
		}
	}
}

// loads counts the models added, reloaded or removed so far, as a change marker.
func (r *Repository) loads() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.changes
}

// Abort is for a shutdown whose grace is over: it aborts every model serving, and every one
// retiring, at once within ctx (Executor.Abort). Requests still waiting fail with
// runtime.ErrClosed, so that nothing holds a model for long after it: Close may follow at
// once. Unlike Close, it does not wait for the requests using a model; it fails them.
func (r *Repository) Abort(ctx context.Context) error {
	r.mu.Lock()
	r.aborted = ctx
	var gens []*generation
	for _, s := range r.slots {
		s.mu.RLock()
		gens = append(gens, s.cur)
		s.mu.RUnlock()
	}
	for g := range r.retiring {
		gens = append(gens, g)
	}
	r.mu.Unlock()
	errs := make([]error, len(gens))
	var wg sync.WaitGroup
	for i, g := range gens {
		wg.Go(func() { errs[i] = g.m.Abort(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Close stops serving every model (Acquire then fails with runtime.ErrClosed) and releases
// them all: it waits until the requests holding them have released them (Abort first to
// bound that wait), and until every generation a reload retired is closed too.
func (r *Repository) Close() error {
	r.reloadMu.Lock()
	r.mu.Lock()
	r.closed = true
	var gens []*generation
	for _, s := range r.slots {
		gens = append(gens, s.cur)
	}
	clear(r.slots)
	r.mu.Unlock()
	for _, g := range gens {
		r.retire(g)
	}
	r.reloadMu.Unlock()
	r.retirements.Wait()
	errs := make([]error, len(gens))
	for i, g := range gens {
		errs[i] = g.err
	}
	return errors.Join(errs...)
}
