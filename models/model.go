package models

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"path/filepath"
	"slices"
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
}

// Version is one loaded variant of a model.
type Version struct {
	Name string
	File string
	exec Executor
}

// Model is a loaded model: its config, tokenizer and versions.
type Model struct {
	Config   Config
	Dir      string
	tok      tokenize.Tokenizer
	versions map[string]*Version
	dim      int // see Dimension
}

// Open loads the model in dir: its config, its tokenizer and every version that may run on
// the backend's device. Versions that may not (fp16 on CPU, say) are skipped with a log line.
func Open(dir string, b Backend, log *slog.Logger) (*Model, error) {
	cfg, err := ReadConfig(dir)
	if err != nil {
		return nil, err
	}
	tok, err := b.Tokenizer(filepath.Join(dir, cfg.Tokenizer), cfg.MaxLength)
	if err != nil {
		return nil, fmt.Errorf("models: %s: tokenizer: %w", cfg.Name, err)
	}
	m := &Model{Config: cfg, Dir: dir, tok: tok, versions: map[string]*Version{}}
	for _, name := range slices.Sorted(maps.Keys(cfg.Versions)) {
		vc := cfg.Versions[name]
		if !vc.RunsOn(b.Device()) {
			log.Info("version skipped: not for this device", "model", cfg.Name, "version", name, "device", b.Device(), "devices", vc.Devices)
			continue
		}
		path := filepath.Join(dir, vc.File)
		exec, err := b.Executor(ExecSpec{Model: cfg.Name, Version: name, Path: path, Output: cfg.Output, Instances: cfg.Instances, Batching: cfg.Batching})
		if err != nil {
			m.Close()
			return nil, fmt.Errorf("models: %s/%s: %w", cfg.Name, name, err)
		}
		m.versions[name] = &Version{Name: name, File: path, exec: exec}
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

// check runs one text through every version, so that a tokenizer whose ids the graph does
// not accept, or an output of the wrong size, stops start-up instead of the first request.
func (m *Model) check() error {
	encs, err := m.tok.Encode([]string{"ortserve start-up check"}, tokenize.Options{Truncate: true})
	if err != nil {
		return fmt.Errorf("models: %s: tokenizer: %w", m.Config.Name, err)
	}
	for _, name := range m.VersionNames() {
		out, _, err := m.versions[name].exec.Execute(context.Background(), encs)
		if err != nil {
			return fmt.Errorf("models: %s/%s: a test run failed (does the tokenizer match the model?): %w", m.Config.Name, name, err)
		}
		if err := m.checkShape(out[0]); err != nil {
			return fmt.Errorf("models: %s/%s: %w", m.Config.Name, name, err)
		}
		m.dim = int(out[0].Shape[len(out[0].Shape)-1])
	}
	return nil
}

func (m *Model) checkShape(t runtime.Tensor) error {
	switch m.Config.Task {
	case TaskEmbed:
		if len(t.Shape) != 2 {
			return fmt.Errorf("output %q has per-text shape %v: an embed model needs [sequence, hidden]", m.Config.Output, t.Shape)
		}
	case TaskClassify:
		if len(t.Shape) != 1 || int(t.Shape[0]) != len(m.Config.Labels) {
			return fmt.Errorf("output %q has per-text shape %v: want [%d], one logit per label", m.Config.Output, t.Shape, len(m.Config.Labels))
		}
	}
	return nil
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

// Tokenizer is the model's tokenizer.
func (m *Model) Tokenizer() tokenize.Tokenizer { return m.tok }

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
	Tokens    int // real tokens, special tokens included
	Truncated int // inputs cut to the maximum length
	Tokenize  time.Duration
	Queue     time.Duration // waiting to be batched and for a free session
	Inference time.Duration
	Batches   int           // inference batches the request's inputs went into
	Finish    time.Duration // pooling, normalization, softmax
}

// run tokenizes texts and executes them on a version; it is the part both pipelines share.
func (m *Model) run(ctx context.Context, version string, task Task, texts []string, truncate bool) ([]runtime.Tensor, []tokenize.Encoding, Stats, error) {
	var st Stats
	if m.Config.Task != task {
		return nil, nil, st, &WrongTaskError{Model: m.Config.Name, Task: m.Config.Task}
	}
	v, err := m.Version(version)
	if err != nil {
		return nil, nil, st, err
	}
	st.Version = v.Name
	start := time.Now()
	encs, err := m.tok.Encode(texts, tokenize.Options{Truncate: truncate})
	if err != nil {
		return nil, nil, st, err
	}
	for _, e := range encs {
		st.Tokens += e.Len()
		if e.Truncated {
			st.Truncated++
		}
	}
	st.Tokenize = time.Since(start)
	out, es, err := v.exec.Execute(ctx, encs)
	st.Queue, st.Inference, st.Batches = es.Queue, es.Inference, es.Batches
	if err != nil {
		return nil, nil, st, err
	}
	return out, encs, st, nil
}

// EmbedOptions control Embed.
type EmbedOptions struct {
	Truncate  bool
	Normalize bool
}

// Embed returns one vector per text.
func (m *Model) Embed(ctx context.Context, version string, texts []string, o EmbedOptions) ([][]float32, Stats, error) {
	out, encs, st, err := m.run(ctx, version, TaskEmbed, texts, o.Truncate)
	if err != nil {
		return nil, st, err
	}
	start := time.Now()
	vecs := make([][]float32, len(out))
	for i, t := range out {
		vecs[i] = Pool(m.Config.Pooling, t, encs[i].Len())
		if o.Normalize {
			Normalize(vecs[i])
		}
	}
	st.Finish = time.Since(start)
	return vecs, st, nil
}

// ClassifyOptions control Classify.
type ClassifyOptions struct {
	Truncate bool
	Raw      bool // return logits instead of probabilities
}

// Classify returns, per text, one score per label in Config.Labels order: probabilities
// that sum to 1, or raw logits.
func (m *Model) Classify(ctx context.Context, version string, texts []string, o ClassifyOptions) ([][]float32, Stats, error) {
	out, _, st, err := m.run(ctx, version, TaskClassify, texts, o.Truncate)
	if err != nil {
		return nil, st, err
	}
	start := time.Now()
	scores := make([][]float32, len(out))
	for i, t := range out {
		scores[i] = slices.Clone(t.Data)
		if !o.Raw {
			Softmax(scores[i])
		}
	}
	st.Finish = time.Since(start)
	return scores, st, nil
}

// Pool reduces hidden states t ([seq, hidden], of which the first n rows are real tokens)
// to one vector.
func Pool(p Pooling, t runtime.Tensor, n int) []float32 {
	hidden := int(t.Shape[len(t.Shape)-1])
	out := make([]float32, hidden)
	if p == PoolingCLS || n <= 0 {
		if n > 0 {
			copy(out, t.Data[:hidden])
		}
		return out
	}
	// Accumulate in float64: sums over hundreds of tokens lose bits in float32.
	acc := make([]float64, hidden)
	for tok := range n {
		row := t.Data[tok*hidden : (tok+1)*hidden]
		for j, x := range row {
			acc[j] += float64(x)
		}
	}
	for j := range out {
		out[j] = float32(acc[j] / float64(n))
	}
	return out
}

// Normalize scales v to unit L2 norm in place (a zero vector stays zero).
func Normalize(v []float32) {
	var ss float64
	for _, x := range v {
		ss += float64(x) * float64(x)
	}
	norm := max(math.Sqrt(ss), 1e-12)
	for i := range v {
		v[i] = float32(float64(v[i]) / norm)
	}
}

// Softmax turns logits into probabilities in place.
func Softmax(v []float32) {
	if len(v) == 0 {
		return
	}
	m := slices.Max(v)
	var sum float64
	for i, x := range v {
		e := math.Exp(float64(x - m))
		v[i] = float32(e)
		sum += e
	}
	for i := range v {
		v[i] = float32(float64(v[i]) / sum)
	}
}

// Labels are the classify model's labels in score order.
func (m *Model) Labels() []string { return m.Config.Labels }
