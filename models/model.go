package models

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ortserve/ortserve/runtime"
	"github.com/ortserve/ortserve/tokenize"
)

// Sentinel errors; the typed errors below wrap them.
var (
	ErrUnknownModel   = errors.New("models: unknown model")
	ErrUnknownVersion = errors.New("models: unknown version")
	ErrWrongTask      = errors.New("models: model does not do this task")
)

// UnknownError names what was asked for and what exists.
type UnknownError struct {
	Kind  error // ErrUnknownModel or ErrUnknownVersion
	Name  string
	Known []string
}

func (e *UnknownError) Error() string {
	return fmt.Sprintf("%v %q (have %v)", e.Kind, e.Name, e.Known)
}

func (e *UnknownError) Unwrap() error { return e.Kind }

// WrongTaskError says a model was asked for a task it does not do.
type WrongTaskError struct {
	Model string
	Task  Task // what the model does
	Asked Task // what it was asked to do
}

func (e *WrongTaskError) Error() string {
	return fmt.Sprintf("models: model %q is a %s model", e.Model, e.Task)
}

func (e *WrongTaskError) Unwrap() error { return ErrWrongTask }

// Executor runs a request's encodings on one model version and returns one tensor per
// encoding, in order. Whether it batches them with other requests is its own business:
// this is the seam where a dynamic batcher drops in.
type Executor interface {
	Execute(ctx context.Context, encs []tokenize.Encoding) ([]runtime.Tensor, runtime.ExecStats, error)
	// Abort is for a shutdown whose grace is over: Execute calls still waiting fail at once
	// with runtime.ErrClosed, work already running may finish until ctx ends and is
	// cancelled past it (runtime.Batcher.Abort). It returns once nothing runs; Close still
	// releases the resources.
	Abort(ctx context.Context) error
	Close() error
}

// Backend creates what the pipelines run on. The ONNX Runtime and HF tokenizer bindings
// satisfy it in main; tests use fakes.
type Backend interface {
	// Device is where versions run: "cpu" or "cuda".
	Device() string
	// Tokenizer loads a tokenizer.json for inputs of at most maxLen tokens.
	Tokenizer(path string, maxLen int) (tokenize.Tokenizer, error)
	// Executor loads one version's file as spec says.
	Executor(spec ExecSpec) (Executor, error)
}

// ExecSpec is what a Backend needs to load one version.
type ExecSpec struct {
	Model, Version string
	Path           string // the ONNX file
	Output         string // the graph output to read
	Instances      int    // sessions; 0: the backend's default
	Batching       Batching
	SLO            time.Duration // the model's own p95 target; 0: the backend's
}

// Version is one variant of a model, loaded or, if lazy, loaded on its first request.
type Version struct {
	Name  string
	File  string
	exec  Executor // a *lazy for a lazy version
	cache *cache   // nil: no response cache; a reloaded version gets a fresh one
}

// loaded is the version's executor, or nil while a lazy version is not loaded.
func (v *Version) loaded() Executor {
	if l, ok := v.exec.(*lazy); ok {
		return l.loaded()
	}
	return v.exec
}

// state is how the version stands (VersionState).
func (v *Version) state() VersionState {
	st := VersionState{Load: LoadEager, State: StateReady}
	if l, ok := v.exec.(*lazy); ok {
		st.Load = LoadLazy
		st.State, st.Error = l.state()
	}
	if d, ok := v.loaded().(Describer); ok {
		info := d.ExecInfo()
		st.ExecInfo = &info
	}
	return st
}

// Model is a loaded model: its config, tokenizer and versions.
type Model struct {
	Config   Config
	Dir      string
	tok      tokenize.Tokenizer
	versions map[string]*Version
	dense    []*denseLayer // Config.Dense, applied after pooling
	dim      atomic.Int64  // see Dimension; set by the check of each version loaded
}

// Name is the model's name.
func (m *Model) Name() string { return m.Config.Name }

// VersionNames lists the loaded versions, sorted.
func (m *Model) VersionNames() []string { return slices.Sorted(maps.Keys(m.versions)) }

// Version returns a loaded version; "" means the default.
func (m *Model) Version(name string) (*Version, error) {
	if name == "" {
		name = m.Config.DefaultVersion
	}
	v, ok := m.versions[name]
	if !ok {
		return nil, &UnknownError{Kind: ErrUnknownVersion, Name: m.Config.Name + "/" + name, Known: m.VersionNames()}
	}
	return v, nil
}

// route resolves the version a request names: "" is the traffic split (Config.Traffic),
// drawn by weight, or without one the default version.
func (m *Model) route(version string) string {
	if version != "" || len(m.Config.Traffic) == 0 {
		return version
	}
	total := 0
	for _, w := range m.Config.Traffic {
		total += w
	}
	n := rand.IntN(total)
	for _, v := range slices.Sorted(maps.Keys(m.Config.Traffic)) {
		if n -= m.Config.Traffic[v]; n < 0 {
			return v
		}
	}
	return m.Config.DefaultVersion
}

// scheduler is an Executor that reports how it schedules (runtime.Batcher does).
type scheduler interface {
	State() runtime.SchedulerState
}

// Scheduling is, per version loaded whose executor reports it, its scheduler's state.
func (m *Model) Scheduling() map[string]runtime.SchedulerState {
	out := map[string]runtime.SchedulerState{}
	for name, v := range m.versions {
		if s, ok := v.loaded().(scheduler); ok {
			out[name] = s.State()
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// VersionStates is how each version stands: when it loads, whether it has, and what it holds.
func (m *Model) VersionStates() map[string]VersionState {
	out := make(map[string]VersionState, len(m.versions))
	for name, v := range m.versions {
		out[name] = v.state()
	}
	return out
}

// Tokenizer is the model's tokenizer.
func (m *Model) Tokenizer() tokenize.Tokenizer { return m.tok }

// Abort aborts every version's executor at once, within ctx (Executor.Abort).
func (m *Model) Abort(ctx context.Context) error {
	errs := make([]error, 0, len(m.versions))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, v := range m.versions {
		wg.Go(func() {
			err := v.exec.Abort(ctx)
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Close releases every version and the tokenizer.
func (m *Model) Close() error {
	var errs []error
	for _, v := range m.versions {
		errs = append(errs, v.exec.Close())
	}
	if m.tok != nil {
		errs = append(errs, m.tok.Close())
	}
	return errors.Join(errs...)
}

// Stats describe how one request was served.
type Stats struct {
	Version   string
	Tokens    int // real tokens computed, special tokens included (cache hits compute none)
	Truncated int // inputs cut to the maximum length
	Tokenize  time.Duration
	Queue     time.Duration // waiting to be batched and for a free session
	Inference time.Duration
	Batches   int           // inference batches the request's inputs went into
	Finish    time.Duration // pooling, normalization, softmax
	// CacheHits and CacheMisses count the inputs answered from the version's response
	// cache and those computed; both stay 0 when the version has no cache.
	CacheHits, CacheMisses int
	// Labels, for Classify, name the scores' columns: the labels of the model that
	// computed them, which a reload cannot change under the caller.
	Labels []string
}

// finisher turns one text's output tensor and encoding into its answer, a new slice.
type finisher func(t runtime.Tensor, e tokenize.Encoding) []float32

// Input is one input of a model: a text, or a pair of texts that the model reads as one
// (a cross-encoder's query and passage, an NLI classifier's premise and hypothesis), joined
// by the tokenizer's pair template.
type Input struct {
	Text string
	// Second is the pair's second text when Pair is set; an empty Second with Pair set is a
	// pair whose second text is empty.
	Second string
	Pair   bool
}

// singles are texts as Inputs.
func singles(texts []string) []Input {
	in := make([]Input, len(texts))
	for i, t := range texts {
		in[i].Text = t
	}
	return in
}

// encode tokenizes inputs, single texts and pairs alike, in their order, cut as opts says; a
// *TooLongError names the input by its index in inputs.
func (m *Model) encode(inputs []Input, opts tokenize.Options) ([]tokenize.Encoding, error) {
	texts := make([]string, 0, len(inputs))
	var pairs []tokenize.Pair
	for _, in := range inputs {
		if in.Pair {
			pairs = append(pairs, tokenize.Pair{A: in.Text, B: in.Second})
		} else {
			texts = append(texts, in.Text)
		}
	}
	// at maps an index among the singles or among the pairs back to one in inputs.
	at := func(pair bool, k int) int {
		for i, in := range inputs {
			if in.Pair == pair {
				if k == 0 {
					return i
				}
				k--
			}
		}
		return -1
	}
	renumber := func(err error, pair bool) error {
		if err == nil {
			return nil
		}
		var tooLong *tokenize.TooLongError
		if errors.As(err, &tooLong) {
			tooLong.Index = at(pair, tooLong.Index)
		}
		return err
	}
	if pairs == nil {
		return m.tok.Encode(texts, opts)
	}
	pe, perr := m.tok.EncodePairs(pairs, opts)
	if len(texts) == 0 {
		return pe, renumber(perr, true)
	}
	se, serr := m.tok.Encode(texts, opts)
	if perr != nil || serr != nil {
		// Name the first input that failed, whichever kind it is.
		perr, serr = renumber(perr, true), renumber(serr, false)
		var p, s *tokenize.TooLongError
		if serr == nil || (errors.As(perr, &p) && errors.As(serr, &s) && p.Index < s.Index) {
			return nil, perr
		}
		return nil, serr
	}
	out := make([]tokenize.Encoding, len(inputs))
	for i, in := range inputs {
		if in.Pair {
			out[i], pe = pe[0], pe[1:]
		} else {
			out[i], se = se[0], se[1:]
		}
	}
	return out, nil
}

// answer is what changes a pipeline's answer to an input besides the input itself, and so
// makes its response cache key: how the input is cut, and the pipeline's own option (embed's
// normalize, classify's and rerank's raw). uncached answers skip the cache: a text's
// per-token vectors (EmbedAll) are as large as a few hundred pooled ones, which they would
// evict.
type answer struct {
	cut      tokenize.Options
	variant  bool
	uncached bool
}

// run answers inputs on a version ("": the traffic split, or the default): from its
// response cache where it can, and by tokenizing and executing the rest, whose answers
// finish makes. It is the part every pipeline shares. The answers are in inputs' order and
// the caller's to keep and modify.
func (m *Model) run(ctx context.Context, version string, task Task, inputs []Input, a answer, finish finisher) ([][]float32, Stats, error) {
	var st Stats
	if m.Config.Task != task {
		return nil, st, &WrongTaskError{Model: m.Config.Name, Task: m.Config.Task, Asked: task}
	}
	v, err := m.Version(m.route(version))
	if err != nil {
		return nil, st, err
	}
	st.Version = v.Name
	out := make([][]float32, len(inputs))
	// Without a cache every input is a miss; with one, misses lists the inputs to compute
	// and keys[i] is inputs[i]'s key.
	var keys []string
	misses, todo := []int(nil), inputs
	if v.cache != nil && !a.uncached {
		keys = make([]string, len(inputs))
		todo = make([]Input, 0, len(inputs))
		for i, in := range inputs {
			keys[i] = cacheKey(in, a)
			if e, ok := v.cache.get(keys[i]); ok {
				out[i] = e.vec
				st.CacheHits++
				if e.truncated {
					st.Truncated++
				}
				continue
			}
			misses = append(misses, i)
			todo = append(todo, in)
		}
		st.CacheMisses = len(todo)
		if len(todo) == 0 {
			return out, st, nil
		}
	}
	tr := tracer(ctx)
	start := time.Now()
	encs, err := m.encode(todo, a.cut)
	if err != nil {
		traceTokenize(ctx, tr, start, len(todo), st, err)
		// The tokenizer saw only the misses: name the input by its place in the request.
		var tooLong *tokenize.TooLongError
		if misses != nil && errors.As(err, &tooLong) && tooLong.Index >= 0 && tooLong.Index < len(misses) {
			tooLong.Index = misses[tooLong.Index]
		}
		return nil, st, err
	}
	for _, e := range encs {
		st.Tokens += e.Len()
		if e.Truncated {
			st.Truncated++
		}
	}
	st.Tokenize = time.Since(start)
	traceTokenize(ctx, tr, start, len(todo), st, nil)
	var sent time.Time
	if tr != nil {
		sent = time.Now()
	}
	tensors, es, err := v.exec.Execute(ctx, encs)
	traceExecute(ctx, tr, sent, es, err)
	st.Queue, st.Inference, st.Batches = es.Queue, es.Inference, es.Batches
	if err != nil {
		return nil, st, err
	}
	start = time.Now()
	for j, t := range tensors {
		i := j
		if misses != nil {
			i = misses[j]
		}
		out[i] = finish(t, encs[j])
	}
	st.Finish = time.Since(start)
	for j, i := range misses {
		// add copies: the answer stays the caller's.
		v.cache.add(keys[i], cached{vec: out[i], truncated: encs[j].Truncated})
	}
	return out, st, nil
}

// EmbedOptions control Embed.
type EmbedOptions struct {
	Truncate bool
	// Left cuts a text over the maximum on the left, keeping its end (TEI's
	// truncation_direction "left").
	Left      bool
	Normalize bool
	// Prompt names the prompt (Config.Prompts) put before each text, as sentence-transformers
	// and TEI put it: the text tokenized, truncated and cached is the prompt and the text
	// joined. "" is the model's DefaultPrompt; else FallbackPrompt (the server's default)
	// when the model has a prompt of that name; else none.
	Prompt, FallbackPrompt string
	// Dimensions, when over 0, cuts each vector to its first Dimensions values, normalized
	// again when Normalize (a Matryoshka model's shorter embedding).
	Dimensions int
}

// Embed returns one vector per text, computed by version; "" is the traffic split
// (Config.Traffic) when the model has one, else the default version. The vectors are the
// caller's, even those served from the response cache. A prompt or dimensions the model
// cannot serve is an *OptionError.
func (m *Model) Embed(ctx context.Context, version string, texts []string, o EmbedOptions) ([][]float32, Stats, error) {
	texts, err := m.WithPrompt(texts, o)
	if err != nil {
		return nil, Stats{}, err
	}
	if m.Config.Task == TaskEmbed && o.Dimensions > 0 { // else run says the task is wrong
		if err := m.checkDimensions(o.Dimensions, m.Dimension()); err != nil {
			return nil, Stats{}, err
		}
	}
	a := answer{cut: tokenize.Options{Truncate: o.Truncate, Left: o.Left}, variant: o.Normalize}
	vecs, st, err := m.run(ctx, version, TaskEmbed, singles(texts), a, func(t runtime.Tensor, e tokenize.Encoding) []float32 {
		vec := Pool(m.Config.Pooling, t, e.Len())
		for _, d := range m.dense {
			vec = d.apply(vec)
		}
		if o.Normalize {
			Normalize(vec)
		}
		return vec
	})
	if err != nil || o.Dimensions <= 0 || len(vecs) == 0 {
		return vecs, st, err
	}
	// The width is known once a version has run: check again against the vectors' own.
	if err := m.checkDimensions(o.Dimensions, len(vecs[0])); err != nil {
		return nil, st, err
	}
	shorten(vecs, o.Dimensions, o.Normalize)
	return vecs, st, nil
}

// WithPrompt returns texts with o's prompt (Prompt, FallbackPrompt) before each, or texts as
// they are when there is none; an embed or sparse model only (on another, run says the task
// is wrong). A prompt the model does not have is an *OptionError.
func (m *Model) WithPrompt(texts []string, o EmbedOptions) ([]string, error) {
	if m.Config.Task != TaskEmbed && m.Config.Task != TaskSparse {
		return texts, nil
	}
	prompt, err := m.prompt(o.Prompt, o.FallbackPrompt)
	if err != nil || prompt == "" {
		return texts, err
	}
	prompted := make([]string, len(texts))
	for i, t := range texts {
		prompted[i] = prompt + t
	}
	return prompted, nil
}

// EmbedSparse returns, per text, the non-zero entries of its SPLADE embedding by ascending
// vocabulary index, computed by version as Embed's. The model's task must be TaskSparse.
// The response cache keeps the pooled vectors; the lists are the caller's.
func (m *Model) EmbedSparse(ctx context.Context, version string, texts []string, o EmbedOptions) ([][]SparseValue, Stats, error) {
	texts, err := m.WithPrompt(texts, o)
	if err != nil {
		return nil, Stats{}, err
	}
	a := answer{cut: tokenize.Options{Truncate: o.Truncate, Left: o.Left}}
	vecs, st, err := m.run(ctx, version, TaskSparse, singles(texts), a, func(t runtime.Tensor, e tokenize.Encoding) []float32 {
		return PoolSplade(t, e.Len())
	})
	if err != nil {
		return nil, st, err
	}
	out := make([][]SparseValue, len(vecs))
	for i, v := range vecs {
		out[i] = Sparse(v)
	}
	return out, st, nil
}

// ClassifyOptions control Classify.
type ClassifyOptions struct {
	Truncate bool
	Left     bool // cut on the left, as EmbedOptions.Left; a pair keeps each text's end
	Raw      bool // return logits instead of probabilities
}

// Classify returns, per text, one score per label in Config.Labels order: probabilities
// that sum to 1, or raw logits. version is as Embed's. The scores are the caller's, even those served from the
// response cache.
func (m *Model) Classify(ctx context.Context, version string, texts []string, o ClassifyOptions) ([][]float32, Stats, error) {
	return m.ClassifyPairs(ctx, version, singles(texts), o)
}

// ClassifyPairs is Classify for inputs of which any may be a pair of texts (an NLI model's
// premise and hypothesis), as TEI's /predict takes them. A tokenizer that cannot join pairs
// fails with tokenize.ErrNoPairs.
func (m *Model) ClassifyPairs(ctx context.Context, version string, inputs []Input, o ClassifyOptions) ([][]float32, Stats, error) {
	a := answer{cut: tokenize.Options{Truncate: o.Truncate, Left: o.Left}, variant: o.Raw}
	scores, st, err := m.run(ctx, version, TaskClassify, inputs, a, func(t runtime.Tensor, _ tokenize.Encoding) []float32 {
		scores := slices.Clone(t.Data)
		if !o.Raw {
			Softmax(scores)
		}
		return scores
	})
	st.Labels = m.Labels()
	return scores, st, err
}

// Labels are the classify model's labels in score order.
func (m *Model) Labels() []string { return m.Config.Labels }
