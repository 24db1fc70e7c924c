package models

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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

// ModelDir is one model folder: one with a model.yaml, or a Hugging Face model folder
// (IsHFDir) whose config is inferred. Name, when not "", is the name it is served under,
// whatever its config says.
type ModelDir struct {
	Name string
	Dir  string
}

// Sources are where a Repository finds its models.
type Sources struct {
	// Root is a folder of model folders; its other folders are skipped. "": none.
	Root string
	// Models are model folders served on their own, beside Root's.
	Models []ModelDir
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

// generation is one loaded Model and the requests holding it. A request acquires the
// generation serving when it starts and releases it when it is done; once a reload (or a
// removal, or Close) has swapped it out, nobody acquires it again, and drained closes when
// its last holder releases it: then, and only then, may it be closed.
type generation struct {
	m *Model

	mu      sync.Mutex
	holders int
	retired bool
	drained chan struct{}
	err     error // Model.Close's, once the retirement is done
}

func newGeneration(m *Model) *generation {
	return &generation{m: m, drained: make(chan struct{})}
}

// acquire adds a holder. The caller holds the lock under which the generation is swapped
// out, so that a generation is never acquired after retire.
func (g *generation) acquire() {
	g.mu.Lock()
	g.holders++
	g.mu.Unlock()
}

func (g *generation) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.holders--
	if g.holders == 0 && g.retired {
		close(g.drained)
	}
}

// retire marks a generation swapped out: drained closes now if nobody holds it, else at the
// last release.
func (g *generation) retire() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.retired = true
	if g.holders == 0 {
		close(g.drained)
	}
}

// hold is one acquirer's claim on a generation. Its release is the func Acquire returns,
// of which only the first call counts, so that a second call cannot release someone
// else's claim.
type hold struct {
	g    *generation
	done atomic.Bool
}

func (h *hold) release() {
	if h.done.CompareAndSwap(false, true) {
		h.g.release()
	}
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

// Find resolves the model that OpenSources would serve under name, without loading it: its
// folder and its config (Name set to the name it is served under). It lists the folders as
// OpenSources does, and reads first those named name (a folder of Root, or NAME of a
// ModelDir), so that finding a model usually reads no other config. A folder whose config
// cannot be read or inferred is known by its folder's name (or its ModelDir's Name): asking
// for it returns why. An unknown name is an *UnknownError with the names found. Two folders
// serving one name are OpenSources' error to report; Find returns the first it reads.
func Find(src Sources, name string) (dir string, cfg Config, err error) {
	r := &Repository{Root: src.Root, Models: src.Models}
	mds, err := r.modelDirs(true)
	if err != nil {
		return "", Config{}, err
	}
	type found struct {
		name string
		cfg  Config
		err  error
	}
	quiet := slog.New(slog.DiscardHandler)
	hint := func(md ModelDir) string { return cmp.Or(md.Name, filepath.Base(md.Dir)) }
	read := make([]*found, len(mds))
	for _, named := range []bool{true, false} {
		for i, md := range mds {
			if (hint(md) == name) != named {
				continue
			}
			f := &found{name: hint(md)}
			if f.cfg, f.err = LoadConfig(md.Dir, quiet); f.err == nil {
				f.cfg.Name = cmp.Or(md.Name, f.cfg.Name)
				f.name = f.cfg.Name
			}
			read[i] = f
			if f.name == name {
				return md.Dir, f.cfg, f.err
			}
		}
	}
	var known []string
	for _, f := range read {
		known = append(known, f.name)
	}
	slices.Sort(known)
	return "", Config{}, &UnknownError{Kind: ErrUnknownModel, Name: name, Known: slices.Compact(known)}
}

// skip reports whether a folder's failed load is a folder of Root without model.yaml whose
// config could not be inferred: such a folder is skipped with a log line, not an error, and
// not tried again until its files change.
func (r *Repository) skip(md ModelDir, fp string, err error) bool {
	var ie *InferError
	if !errors.As(err, &ie) || slices.Contains(r.Models, md) {
		return false
	}
	if r.refused[md.Dir] != fp {
		r.log.Warn("folder skipped: no model.yaml, and its config cannot be inferred for sure", "dir", md.Dir, "why", ie.Reason)
	}
	r.refused[md.Dir] = fp
	return true
}

// openDir loads the model in one folder, under md.Name if given.
func openDir(md ModelDir, b Backend, log *slog.Logger) (*Model, error) {
	cfg, err := LoadConfig(md.Dir, log)
	if err != nil {
		return nil, err
	}
	if md.Name != "" {
		cfg.Name = md.Name
	}
	return OpenConfig(md.Dir, cfg, b, log)
}

// modelDirs lists the model folders: Root's, then Models. strict makes a folder of Models
// that is missing or not a model folder an error (at start); otherwise it is left out, and
// Reload removes its model.
func (r *Repository) modelDirs(strict bool) ([]ModelDir, error) {
	var mds []ModelDir
	if r.Root != "" {
		entries, err := os.ReadDir(r.Root)
		if err != nil {
			return nil, fmt.Errorf("models: model repository %s: %w: run `make models` or point --models at one", r.Root, errors.Unwrap(err))
		}
		for _, e := range entries {
			dir := filepath.Join(r.Root, e.Name())
			if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
				continue
			}
			if IsModelDir(dir) {
				mds = append(mds, ModelDir{Dir: dir})
			}
		}
	}
	seen := map[string]string{}
	for _, md := range mds {
		seen[absPath(md.Dir)] = md.Dir
	}
	for _, md := range r.Models {
		if prev, dup := seen[absPath(md.Dir)]; dup && strict {
			return nil, fmt.Errorf("models: %s is given twice (as %s too): serve each model folder once", md.Dir, prev)
		} else if dup {
			continue
		}
		seen[absPath(md.Dir)] = md.Dir
		if IsModelDir(md.Dir) {
			mds = append(mds, md)
			continue
		}
		if !strict {
			continue
		}
		if fi, err := os.Stat(md.Dir); err != nil {
			return nil, fmt.Errorf("models: model folder %s: %w", md.Dir, errors.Unwrap(err))
		} else if !fi.IsDir() {
			return nil, fmt.Errorf("models: %s is not a folder: name a model folder", md.Dir)
		}
		if _, _, err := HubSnapshot(md.Dir); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("models: %s has no %s and is not a Hugging Face model folder (config.json and an .onnx file at its root or in onnx/): write a %s (docs/models.md)", md.Dir, ConfigFile, ConfigFile)
	}
	return mds, nil
}

func absPath(dir string) string {
	if abs, err := filepath.Abs(dir); err == nil {
		return abs
	}
	return filepath.Clean(dir)
}

// fingerprintFiles bounds the files fingerprint looks at, and fingerprintDepth the folders
// it goes into: a model folder is small, but may be a hub cache folder or hold data.
const (
	fingerprintFiles = 4096
	fingerprintDepth = 4
)

// fingerprint summarizes the files of a model folder and its subfolders (name, size,
// modification time, following links), so that Reload notices a change without reading the
// weights: a hub cache folder's refs/main and snapshots, an onnx/ or 1_Pooling/ folder.
// Hidden folders and a hub cache's blobs/ (which its snapshots link to) are left out.
func fingerprint(dir string) string {
	h := sha256.New()
	files := 0
	var walk func(rel string, depth int)
	walk = func(rel string, depth int) {
		entries, _ := os.ReadDir(filepath.Join(dir, rel))
		for _, e := range entries {
			if files >= fingerprintFiles {
				return
			}
			p := filepath.Join(rel, e.Name())
			fi, err := os.Stat(filepath.Join(dir, p))
			if err != nil {
				continue
			}
			if fi.IsDir() {
				if depth < fingerprintDepth && e.Name() != "blobs" && !strings.HasPrefix(e.Name(), ".") {
					walk(p, depth+1)
				}
				continue
			}
			files++
			fmt.Fprintf(h, "%s\x00%d\x00%d\n", p, fi.Size(), fi.ModTime().UnixNano())
		}
	}
	walk("", 0)
	return hex.EncodeToString(h.Sum(nil))
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
	// Scheduling is, per version, what its batcher has learned (the cost curve) and
	// decided (the SLO controller), when its executor reports it.
	Scheduling map[string]runtime.SchedulerState
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
