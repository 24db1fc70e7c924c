package models_test

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ortserve/ortserve/models"
	"github.com/ortserve/ortserve/runtime"
	"github.com/ortserve/ortserve/tokenize"
)

const embedYAML = `
name: emb
task: embed
tokenizer: tokenizer.json
max_length: 8
output: last_hidden_state
pooling: mean
normalize: true
default_version: fp32
versions:
  fp32: {file: fp32.onnx}
  fp16: {file: fp16.onnx, devices: [cuda]}
`

const classifyYAML = `
name: cls
task: classify
tokenizer: tokenizer.json
max_length: 8
output: logits
labels: [negative, positive]
default_version: fp32
versions:
  fp32: {file: fp32.onnx}
`

// classifyGateYAML is classifyYAML with an int8 version and a gate section using every key.
var classifyGateYAML = strings.Replace(classifyYAML, "  fp32: {file: fp32.onnx}\n", "  fp32: {file: fp32.onnx}\n  int8: {file: int8.onnx}\n", 1) + `
gate:
  baseline: fp32
  candidates: [int8]
  data: gate.csv
  text_column: sentence
  label_column: polarity
  label_map: {0: negative, 1: positive}
  max_drop: 1
  min_agreement: 0.95
`

const embedGateYAML = embedYAML + `
gate:
  data: /data/gate.csv
  min_cosine_mean: 0.98
  min_cosine_p1: 0.95
  max_drop: 2
`

func TestParseConfig(t *testing.T) {
	tests := []struct {
		name, yaml, err string
	}{
		{"embed", embedYAML, ""},
		{"classify", classifyYAML, ""},
		{"typo in key", strings.Replace(embedYAML, "pooling:", "poolling:", 1), "field poolling not found"},
		{"bad task", strings.Replace(embedYAML, "task: embed", "task: generate", 1), `task "generate": use embed, sparse, classify or rerank`},
		{"bad pooling", strings.Replace(embedYAML, "pooling: mean", "pooling: sum", 1), `pooling "sum"`},
		{"max pooling", strings.Replace(embedYAML, "pooling: mean", "pooling: max", 1), ""},
		{"no default", strings.Replace(embedYAML, "default_version: fp32", "default_version: int8", 1), `default_version "int8"`},
		{"bad device", strings.Replace(embedYAML, "[cuda]", "[tpu]", 1), `device "tpu"`},
		{"one label", strings.Replace(classifyYAML, "[negative, positive]", "[only]", 1), "at least two labels"},
		{"labels on embed", embedYAML + "labels: [a, b]\n", "labels are for classify"},
		{"no versions", "name: x\ntask: embed\ntokenizer: t\nmax_length: 8\noutput: o\npooling: cls\ndefault_version: a\n", "no versions"},
		{"classify gate", classifyGateYAML, ""},
		{"embed gate", embedGateYAML, ""},
		{"embed gate, defaults", embedYAML + "gate: {min_cosine_p1: 0.9}\n", ""},
		{"gate typo", strings.Replace(classifyGateYAML, "max_drop:", "max_dorp:", 1), "field max_dorp not found"},
		{"gate unknown baseline", strings.Replace(classifyGateYAML, "baseline: fp32", "baseline: fp64", 1), `gate: baseline "fp64" is not one of the versions`},
		{"gate unknown candidate", strings.Replace(classifyGateYAML, "candidates: [int8]", "candidates: [int4]", 1), `gate: candidate "int4" is not one of the versions`},
		{"gate candidate is baseline", strings.Replace(classifyGateYAML, "candidates: [int8]", "candidates: [int8, fp32]", 1), `candidate "fp32" is the baseline`},
		{"gate negative budget", strings.Replace(classifyGateYAML, "min_agreement: 0.95", "min_agreement: -0.1", 1), "min_agreement -0.1"},
		{"gate cosine over 1", strings.Replace(embedGateYAML, "min_cosine_mean: 0.98", "min_cosine_mean: 98", 1), "min_cosine_mean 98: want 0 to 1"},
		{"gate NaN budget", strings.Replace(classifyGateYAML, "max_drop: 1", "max_drop: .nan", 1), "max_drop NaN"},
		{"classify gate without max_drop", strings.Replace(classifyGateYAML, "max_drop: 1", "max_drop: 0", 1), "needs max_drop > 0"},
		{"cosine on classify", strings.Replace(classifyGateYAML, "max_drop: 1", "max_drop: 1\n  min_cosine_mean: 0.9", 1), "min_cosine_mean and min_cosine_p1 are for embed"},
		{"embed gate without budget", embedYAML + "gate: {data: d.csv}\n", "needs a budget"},
		{"agreement on embed", strings.Replace(embedGateYAML, "max_drop: 2", "max_drop: 2\n  min_agreement: 0.9", 1), "min_agreement is for classify"},
		{"gate label_map to unknown label", strings.Replace(classifyGateYAML, "1: positive", "1: pos", 1), `maps "1" to "pos", which is not one of the labels`},
		{"gate label_map as a string", strings.Replace(classifyGateYAML, `{0: negative, 1: positive}`, `"0=negative,1=positive"`, 1), "cannot unmarshal"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := models.ParseConfig([]byte(tt.yaml))
			if tt.err == "" && err != nil {
				t.Fatal(err)
			}
			if tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
				t.Fatalf("got %v, want %q", err, tt.err)
			}
		})
	}
}

func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(embedYAML))
	f.Add([]byte(classifyYAML))
	f.Add([]byte(classifyGateYAML))
	f.Add([]byte(embedGateYAML))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := models.ParseConfig(data)
		if err != nil {
			return
		}
		if _, ok := c.Versions[c.DefaultVersion]; !ok {
			t.Fatal("valid config without its default version")
		}
		if g := c.Gate; g != nil {
			if _, ok := c.Versions[g.Baseline]; g.Baseline != "" && !ok {
				t.Fatalf("valid config with gate baseline %q not a version", g.Baseline)
			}
			for _, v := range g.Candidates {
				if _, ok := c.Versions[v]; !ok {
					t.Fatalf("valid config with gate candidate %q not a version", v)
				}
			}
			if c.Task == models.TaskClassify && !(g.MaxDrop > 0) {
				t.Fatalf("valid classify config whose gate has max_drop %v", g.MaxDrop)
			}
		}
	})
}

// fakeTokenizer gives one token per byte between [CLS]=1 and [SEP]=2, cut to its maximum
// from the right or the left.
type fakeTokenizer struct{ max int }

func (f fakeTokenizer) Encode(texts []string, o tokenize.Options) ([]tokenize.Encoding, error) {
	out := make([]tokenize.Encoding, len(texts))
	for i, s := range texts {
		ids := []int64{1}
		for _, c := range []byte(s) {
			ids = append(ids, int64(c))
		}
		ids = append(ids, 2)
		if len(ids) > f.max {
			if !o.Truncate {
				return nil, &tokenize.TooLongError{Index: i, Tokens: len(ids), Max: f.max}
			}
			if o.Left {
				ids = append([]int64{1}, ids[len(ids)-f.max+1:]...)
			} else {
				ids = append(ids[:f.max-1], 2)
			}
			out[i].Truncated = true
		}
		out[i].IDs, out[i].TypeIDs = ids, make([]int64, len(ids))
	}
	return out, nil
}

// Tokens gives the same ids as Encode, one token per byte.
func (f fakeTokenizer) Tokens(text string, addSpecial bool) ([]tokenize.Token, error) {
	encs, err := f.Encode([]string{text}, tokenize.Options{Truncate: true})
	if err != nil {
		return nil, err
	}
	var out []tokenize.Token
	for j, id := range encs[0].IDs {
		special := j == 0 || j == len(encs[0].IDs)-1
		if special && !addSpecial {
			continue
		}
		tok := tokenize.Token{ID: id, Special: special}
		if !special {
			tok.Text, tok.Start, tok.Stop = text[j-1:j], j-1, j
		}
		out = append(out, tok)
	}
	return out, nil
}

// Decode is Encode's inverse: a byte per id, the special tokens [CLS]=1 and [SEP]=2 kept
// as "[CLS]" and "[SEP]" unless skipSpecial.
func (f fakeTokenizer) Decode(ids []int64, skipSpecial bool) (string, error) {
	var b strings.Builder
	for _, id := range ids {
		switch {
		case id < 0 || id > 255:
			return "", &tokenize.UnknownIDError{ID: id, Vocab: 256}
		case id == 1 || id == 2:
			if !skipSpecial {
				b.WriteString([]string{"", "[CLS]", "[SEP]"}[id])
			}
		default:
			b.WriteByte(byte(id))
		}
	}
	return b.String(), nil
}

func (f fakeTokenizer) MaxLength() int { return f.max }
func (f fakeTokenizer) Close() error   { return nil }

// fakeExec returns, per encoding, hidden states [len, hidden] (hidden 2 unless set) where
// token j is (id, j, 0...), or for classify the logits (sum of ids, 0).
type fakeExec struct {
	classify bool
	hidden   int
	closed   *atomic.Int32
}

func (f fakeExec) Execute(_ context.Context, encs []tokenize.Encoding) ([]runtime.Tensor, runtime.ExecStats, error) {
	out := make([]runtime.Tensor, len(encs))
	for i, e := range encs {
		if f.classify {
			var sum float32
			for _, id := range e.IDs {
				sum += float32(id)
			}
			out[i] = runtime.Tensor{Shape: []int64{2}, Data: []float32{sum / 100, 0}}
			continue
		}
		hidden := f.hidden
		if hidden == 0 {
			hidden = 2
		}
		cols := e.Len() + 3 // padding that pooling must ignore
		t := runtime.Tensor{Shape: []int64{int64(cols), int64(hidden)}, Data: make([]float32, hidden*cols)}
		for j := range cols {
			t.Data[hidden*j] = 1000 // padding rows
			if j < e.Len() {
				t.Data[hidden*j], t.Data[hidden*j+1] = float32(e.IDs[j]), float32(j)
			}
		}
		out[i] = t
	}
	return out, runtime.ExecStats{Batches: 1}, nil
}
func (f fakeExec) Close() error                { f.closed.Add(1); return nil }
func (f fakeExec) Abort(context.Context) error { return nil }

// fakeBackend makes fakeExecs. closed counts the executors closed, which a retiring
// generation does on a goroutine of its own.
type fakeBackend struct {
	device   string
	classify bool
	hidden   int // embed's hidden size; 0: 2
	closed   atomic.Int32
	fail     string // file name whose loading fails
}

func (b *fakeBackend) Device() string { return b.device }
func (b *fakeBackend) Tokenizer(path string, maxLen int) (tokenize.Tokenizer, error) {
	return fakeTokenizer{maxLen}, nil
}
func (b *fakeBackend) Executor(spec models.ExecSpec) (models.Executor, error) {
	if filepath.Base(spec.Path) == b.fail {
		return nil, errors.New("corrupt file")
	}
	return fakeExec{classify: b.classify, hidden: b.hidden, closed: &b.closed}, nil
}

func writeModel(t *testing.T, root, name, yaml string) string {
	t.Helper()
	dir := filepath.Join(root, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, models.ConfigFile), []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestEmbedPipeline(t *testing.T) {
	dir := writeModel(t, t.TempDir(), "emb", embedYAML)
	b := &fakeBackend{device: "cpu"}
	m, err := models.Open(dir, b, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if got := m.VersionNames(); len(got) != 1 || got[0] != "fp32" {
		t.Errorf("versions on cpu: %v (fp16 is cuda-only)", got)
	}
	vecs, st, err := m.Embed(t.Context(), "", []string{"ab"}, models.EmbedOptions{Truncate: true})
	if err != nil {
		t.Fatal(err)
	}
	// tokens 1, 'a'=97, 'b'=98, 2 at positions 0..3: mean (49.5, 1.5), padding ignored.
	if vecs[0][0] != 49.5 || vecs[0][1] != 1.5 || st.Version != "fp32" || st.Tokens != 4 {
		t.Errorf("got %v %+v", vecs, st)
	}
	vecs, _, _ = m.Embed(t.Context(), "fp32", []string{"ab"}, models.EmbedOptions{Normalize: true})
	if n := math.Hypot(float64(vecs[0][0]), float64(vecs[0][1])); math.Abs(n-1) > 1e-6 {
		t.Errorf("norm %v", n)
	}
	_, st, err = m.Embed(t.Context(), "", []string{"far too long text"}, models.EmbedOptions{Truncate: true})
	if err != nil || st.Truncated != 1 || st.Tokens != 8 {
		t.Errorf("truncate: %v %+v", err, st)
	}
	_, _, err = m.Embed(t.Context(), "", []string{"ok", "far too long text"}, models.EmbedOptions{})
	var tl *tokenize.TooLongError
	if !errors.As(err, &tl) || tl.Index != 1 {
		t.Errorf("no truncate: %v", err)
	}
	if _, _, err := m.Embed(t.Context(), "fp16", []string{"a"}, models.EmbedOptions{}); !errors.Is(err, models.ErrUnknownVersion) {
		t.Errorf("fp16 on cpu: %v", err)
	}
	if _, _, err := m.Classify(t.Context(), "", []string{"a"}, models.ClassifyOptions{}); !errors.Is(err, models.ErrWrongTask) {
		t.Errorf("classify on embedder: %v", err)
	}
	m.Close()
	if n := b.closed.Load(); n != 1 {
		t.Errorf("closed %d executors", n)
	}
}

func TestClassifyPipeline(t *testing.T) {
	dir := writeModel(t, t.TempDir(), "cls", classifyYAML)
	m, err := models.Open(dir, &fakeBackend{device: "cpu", classify: true}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	probs, _, err := m.Classify(t.Context(), "", []string{"a", ""}, models.ClassifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range probs {
		if math.Abs(float64(p[0]+p[1])-1) > 1e-6 || p[0] <= p[1] {
			t.Errorf("probabilities %v", p)
		}
	}
	raw, _, _ := m.Classify(t.Context(), "", []string{""}, models.ClassifyOptions{Raw: true})
	if raw[0][0] != 0.03 || raw[0][1] != 0 {
		t.Errorf("raw logits %v", raw[0])
	}
}

func TestOpenFailures(t *testing.T) {
	root := t.TempDir()
	if _, err := models.OpenRepository(root, &fakeBackend{device: "cpu"}, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "make models") {
		t.Errorf("empty repository: %v", err)
	}
	if _, err := models.OpenRepository(filepath.Join(root, "missing"), &fakeBackend{device: "cpu"}, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("missing repository: %v", err)
	}
	writeModel(t, root, "emb", embedYAML)
	b := &fakeBackend{device: "cpu", fail: "fp32.onnx"}
	if _, err := models.OpenRepository(root, b, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "emb/fp32: corrupt file") {
		t.Errorf("corrupt version: %v", err)
	}
	// The classify output has one logit per label; an embed-shaped output is refused at start.
	writeModel(t, root, "cls", strings.Replace(classifyYAML, "labels: [negative, positive]", "labels: [a, b, c]", 1))
	if _, err := models.OpenRepository(root, &fakeBackend{device: "cpu"}, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "one logit per label") {
		t.Errorf("wrong output shape: %v", err)
	}
}

func TestRepository(t *testing.T) {
	root := t.TempDir()
	writeModel(t, root, "emb", embedYAML)
	os.WriteFile(filepath.Join(root, "README"), []byte("not a model"), 0o644)
	r, err := models.OpenRepository(root, &fakeBackend{device: "cuda"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	st := r.Status()
	if len(st) != 1 || st[0].Config.Name != "emb" || len(st[0].Versions) != 2 {
		t.Fatalf("%+v", st)
	}
	if m, release, err := r.AcquireFirst(models.TaskEmbed); err != nil || m.Name() != "emb" {
		t.Errorf("AcquireFirst(embed): %v", err)
	} else {
		release()
	}
	if _, _, err := r.AcquireFirst(models.TaskClassify); !errors.Is(err, models.ErrUnknownModel) || !strings.Contains(err.Error(), "(any classify model)") {
		t.Errorf("AcquireFirst(classify) of a repository of one embedder: %v", err)
	}
	if _, _, err := r.Acquire("nope"); !errors.Is(err, models.ErrUnknownModel) {
		t.Errorf("%v", err)
	}
}

func TestSoftmaxNormalize(t *testing.T) {
	v := []float32{1000, 1000}
	models.Softmax(v)
	if v[0] != 0.5 || v[1] != 0.5 {
		t.Errorf("softmax of large logits: %v", v)
	}
	z := []float32{0, 0}
	models.Normalize(z)
	if z[0] != 0 || z[1] != 0 {
		t.Errorf("zero vector: %v", z)
	}
	cls := models.Pool(models.PoolingCLS, runtime.Tensor{Shape: []int64{2, 2}, Data: []float32{1, 2, 3, 4}}, 2)
	if cls[0] != 1 || cls[1] != 2 {
		t.Errorf("cls pooling %v", cls)
	}
}

func TestTokenizeAndDimension(t *testing.T) {
	dir := writeModel(t, t.TempDir(), "emb", embedYAML)
	m, err := models.Open(dir, &fakeBackend{device: "cpu"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Dimension() != 2 {
		t.Errorf("dimension %d, want the hidden size 2", m.Dimension())
	}
	toks, err := m.Tokenize([]string{"ab", "far too long"}, true)
	if err != nil {
		t.Fatal(err)
	}
	want := []tokenize.Token{{ID: 1, Special: true}, {ID: 'a', Text: "a", Stop: 1}, {ID: 'b', Text: "b", Start: 1, Stop: 2}, {ID: 2, Special: true}}
	if !slices.Equal(toks[0], want) || len(toks[1]) != 8 {
		t.Errorf("got %+v, want %+v and 8 tokens for the long text", toks, want)
	}
	toks, _ = m.Tokenize([]string{"ab"}, false)
	if !slices.Equal(toks[0], want[1:3]) {
		t.Errorf("without special tokens: %+v", toks[0])
	}
}

// TestEmbedAll checks the per-token vectors: one per token, special tokens included, padding
// left out, cut on either side; and the refusals, of a pooled output and of another task.
func TestEmbedAll(t *testing.T) {
	emb := openModel(t, withCache(embedYAML, 1<<20), "cpu", false)
	// fakeExec's token j of id x is (x, j): [CLS]=1, 'a', 'b', [SEP]=2.
	got, st, err := emb.EmbedAll(t.Context(), "", []string{"ab", ""}, models.EmbedOptions{Truncate: true})
	want := [][][]float32{{{1, 0}, {'a', 1}, {'b', 2}, {2, 3}}, {{1, 0}, {2, 1}}}
	if err != nil || !slices.EqualFunc(got, want, func(a, b [][]float32) bool { return slices.EqualFunc(a, b, slices.Equal) }) {
		t.Fatalf("got %v, %v; want %v", got, err, want)
	}
	if st.Tokens != 6 || st.CacheHits+st.CacheMisses != 0 {
		t.Errorf("stats %+v: want 6 tokens and no cache use", st)
	}
	for _, tt := range []struct {
		left  bool
		first float32 // the id of the first text token kept
	}{{false, 'a'}, {true, 'c'}} {
		got, st, err := emb.EmbedAll(t.Context(), "", []string{"abcdefgh"}, models.EmbedOptions{Truncate: true, Left: tt.left})
		if err != nil || len(got[0]) != 8 || got[0][1][0] != tt.first || st.Truncated != 1 {
			t.Errorf("left %v: got %v, %v, truncated %d; want 8 tokens from %q", tt.left, got, err, st.Truncated, rune(tt.first))
		}
	}
	// Lazy, so that its version, whose output fakeExec cannot give pooled, is never checked.
	pooled := openModel(t, strings.Replace(embedYAML, "pooling: mean", "pooling: none\nload: lazy", 1), "cpu", false)
	var pooledOnly *models.PooledOnlyError
	if _, _, err := pooled.EmbedAll(t.Context(), "", []string{"a"}, models.EmbedOptions{}); !errors.As(err, &pooledOnly) || pooledOnly.Model != "emb" {
		t.Errorf("pooled model: %v, want a PooledOnlyError", err)
	}
	cls := openModel(t, classifyYAML, "cpu", true)
	var wrong *models.WrongTaskError
	if _, _, err := cls.EmbedAll(t.Context(), "", []string{"a"}, models.EmbedOptions{}); !errors.As(err, &wrong) {
		t.Errorf("classify model: %v, want a WrongTaskError", err)
	}
}

func TestDecode(t *testing.T) {
	m := openModel(t, embedYAML, "cpu", false)
	got, err := m.Decode([][]int64{{1, 'h', 'i', 2}, {}}, true)
	if err != nil || !slices.Equal(got, []string{"hi", ""}) {
		t.Errorf("got %q, %v", got, err)
	}
	got, _ = m.Decode([][]int64{{1, 'h', 'i', 2}}, false)
	if !slices.Equal(got, []string{"[CLS]hi[SEP]"}) {
		t.Errorf("with special tokens: %q", got)
	}
	var unknown *tokenize.UnknownIDError
	if _, err := m.Decode([][]int64{{'a'}, {'b', 999}}, true); !errors.As(err, &unknown) || unknown.ID != 999 || !strings.Contains(err.Error(), "ids 1") {
		t.Errorf("an unknown id: %v", err)
	}
}
