package models_test

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/ortserve/ortserve/models"
	"github.com/ortserve/ortserve/runtime"
	"github.com/ortserve/ortserve/tokenize"
)

const rerankYAML = `
name: rr
task: rerank
tokenizer: tokenizer.json
max_length: 8
output: logits
default_version: fp32
versions:
  fp32: {file: fp32.onnx}
`

// fakePairs is fakeTokenizer's pair template: [CLS]=1 a [SEP]=2 b [SEP]=2, b's type id 1.
var fakePairs = tokenize.BertTemplate("[CLS]", "[SEP]", 1, 2)

// EncodePairs encodes each text one token per byte and joins them with fakePairs.
func (f fakeTokenizer) EncodePairs(pairs []tokenize.Pair, o tokenize.Options) ([]tokenize.Encoding, error) {
	out := make([]tokenize.Encoding, len(pairs))
	bytes := func(s string) []int64 {
		ids := make([]int64, len(s))
		for i := range len(s) {
			ids[i] = int64(s[i])
		}
		return ids
	}
	for i, p := range pairs {
		e, full := fakePairs.EncodePair(bytes(p.A), bytes(p.B), f.max)
		if e.Truncated && !o.Truncate {
			return nil, &tokenize.TooLongError{Index: i, Tokens: full, Max: f.max}
		}
		out[i] = e
	}
	return out, nil
}

// singleTokenizer is fakeTokenizer without a pair template.
type singleTokenizer struct{ fakeTokenizer }

func (singleTokenizer) EncodePairs([]tokenize.Pair, tokenize.Options) ([]tokenize.Encoding, error) {
	return nil, tokenize.ErrNoPairs
}

// pairExec scores an encoding by the bytes of its type-1 part (the passage) that occur in
// its type-0 part (the query), minus one: a logit that puts passages sharing the query's
// letters first. With shape it answers that per-row shape instead. It records what it ran.
type pairExec struct {
	shape []int64
	mu    sync.Mutex
	seen  []tokenize.Encoding
}

func (x *pairExec) Execute(_ context.Context, encs []tokenize.Encoding) ([]runtime.Tensor, runtime.ExecStats, error) {
	x.mu.Lock()
	x.seen = append(x.seen, encs...)
	x.mu.Unlock()
	out := make([]runtime.Tensor, len(encs))
	for i, e := range encs {
		if x.shape != nil {
			out[i] = runtime.Tensor{Shape: x.shape, Data: make([]float32, x.shape[0])}
			continue
		}
		query := map[int64]bool{}
		var logit float32 = -1
		for j, id := range e.IDs {
			switch {
			case id <= 2: // special tokens
			case e.TypeIDs[j] == 0:
				query[id] = true
			case query[id]:
				logit++
			}
		}
		out[i] = runtime.Tensor{Shape: []int64{1}, Data: []float32{logit}}
	}
	return out, runtime.ExecStats{Batches: 1}, nil
}
func (x *pairExec) Close() error                { return nil }
func (x *pairExec) Abort(context.Context) error { return nil }

type pairBackend struct {
	exec   *pairExec
	noPair bool
}

func (b *pairBackend) Device() string { return "cpu" }
func (b *pairBackend) Tokenizer(_ string, maxLen int) (tokenize.Tokenizer, error) {
	if b.noPair {
		return singleTokenizer{fakeTokenizer{maxLen}}, nil
	}
	return fakeTokenizer{maxLen}, nil
}
func (b *pairBackend) Executor(models.ExecSpec) (models.Executor, error) { return b.exec, nil }

func openRerank(t *testing.T, yaml string, b *pairBackend) (*models.Model, error) {
	t.Helper()
	dir := writeModel(t, t.TempDir(), "rr", yaml)
	m, err := models.Open(dir, b, slog.New(slog.DiscardHandler))
	if err == nil {
		t.Cleanup(func() { m.Close() })
	}
	return m, err
}

func TestParseRerankConfig(t *testing.T) {
	tests := []struct{ name, yaml, err string }{
		{"rerank", rerankYAML, ""},
		{"labels", rerankYAML + "labels: [a, b]\n", "labels are for classify models"},
		{"pooling", rerankYAML + "pooling: mean\n", "pooling and normalize are for embed"},
		{"normalize", rerankYAML + "normalize: true\n", "pooling and normalize are for embed"},
		{"gate", rerankYAML + "gate: {max_drop: 1}\n", "rerank models have no accuracy gate"},
		{"unknown task", strings.Replace(rerankYAML, "task: rerank", "task: rank", 1), `task "rank": use embed, sparse, classify or rerank`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := models.ParseConfig([]byte(tt.yaml))
			switch {
			case tt.err == "" && (err != nil || c.Task != models.TaskRerank):
				t.Fatalf("%v %+v", err, c)
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
				t.Fatalf("got %v, want %q", err, tt.err)
			}
		})
	}
}

func TestRerankPipeline(t *testing.T) {
	exec := &pairExec{}
	m, err := openRerank(t, rerankYAML, &pairBackend{exec: exec})
	if err != nil {
		t.Fatal(err)
	}
	// The start-up check ran a pair: [CLS] query [SEP] passage [SEP], the passage type 1.
	if first := exec.seen[0]; !slices.Contains(first.TypeIDs, 1) || first.IDs[0] != 1 {
		t.Errorf("start-up check ran %+v, not a pair", first)
	}
	if m.Dimension() != 1 {
		t.Errorf("dimension %d, want 1", m.Dimension())
	}
	exec.seen = nil
	scores, st, err := m.Rerank(t.Context(), "", "ab", []string{"x", "ab", "b"}, models.RerankOptions{Truncate: true})
	if err != nil {
		t.Fatal(err)
	}
	// Logits -1, 1, 0: sigmoid of each, in the texts' order.
	want := []float32{models.Sigmoid(-1), models.Sigmoid(1), 0.5}
	if !slices.Equal(scores, want) || st.Version != "fp32" || st.Tokens != 6+7+6 || st.Truncated != 0 {
		t.Errorf("got %v %+v, want %v and 19 tokens", scores, st, want)
	}
	if got := exec.seen[1]; !slices.Equal(got.IDs, []int64{1, 'a', 'b', 2, 'a', 'b', 2}) || !slices.Equal(got.TypeIDs, []int64{0, 0, 0, 0, 1, 1, 1}) {
		t.Errorf("pair 1 ran as %+v", got)
	}
	raw, _, _ := m.Rerank(t.Context(), "fp32", "ab", []string{"x", "ab"}, models.RerankOptions{Raw: true})
	if !slices.Equal(raw, []float32{-1, 1}) {
		t.Errorf("raw logits %v", raw)
	}
	// Over the maximum of 8: cut, the longer text first, or refused naming the pair.
	_, st, err = m.Rerank(t.Context(), "", "ab", []string{"a", "abcdefgh"}, models.RerankOptions{Truncate: true})
	if err != nil || st.Truncated != 1 || st.Tokens != 6+8 {
		t.Errorf("truncate: %v %+v", err, st)
	}
	_, _, err = m.Rerank(t.Context(), "", "ab", []string{"a", "abcdefgh"}, models.RerankOptions{})
	var tl *tokenize.TooLongError
	if !errors.As(err, &tl) || tl.Index != 1 || tl.Tokens != 13 || tl.Max != 8 {
		t.Errorf("no truncate: %v", err)
	}
	if _, _, err := m.Rerank(t.Context(), "int8", "q", []string{"a"}, models.RerankOptions{}); !errors.Is(err, models.ErrUnknownVersion) {
		t.Errorf("unknown version: %v", err)
	}
	var wrong *models.WrongTaskError
	if _, _, err := m.Embed(t.Context(), "", []string{"a"}, models.EmbedOptions{}); !errors.As(err, &wrong) || wrong.Task != models.TaskRerank {
		t.Errorf("embed on a reranker: %v", err)
	}
	emb := openModel(t, embedYAML, "cpu", false)
	if _, _, err := emb.Rerank(t.Context(), "", "q", []string{"a"}, models.RerankOptions{}); !errors.As(err, &wrong) || wrong.Task != models.TaskEmbed {
		t.Errorf("rerank on an embedder: %v", err)
	}
}

func TestRerankStartupCheck(t *testing.T) {
	if _, err := openRerank(t, rerankYAML, &pairBackend{exec: &pairExec{shape: []int64{2}}}); err == nil || !strings.Contains(err.Error(), "one logit per pair") {
		t.Errorf("two logits per pair: %v", err)
	}
	if _, err := openRerank(t, rerankYAML, &pairBackend{exec: &pairExec{}, noPair: true}); !errors.Is(err, tokenize.ErrNoPairs) {
		t.Errorf("a tokenizer without pairs: %v", err)
	}
}

func TestClassifyPairs(t *testing.T) {
	m := openModel(t, classifyYAML, "cpu", true)
	in := []models.Input{{Text: "a"}, {Text: "a", Second: "b", Pair: true}, {Text: "", Second: "", Pair: true}}
	raw, st, err := m.ClassifyPairs(t.Context(), "", in, models.ClassifyOptions{Raw: true})
	if err != nil {
		t.Fatal(err)
	}
	// fakeExec's logit is the sum of ids / 100: [CLS] a [SEP] = 100; [CLS] a [SEP] b [SEP]
	// = 200; [CLS] [SEP] [SEP] = 5.
	if raw[0][0] != 1 || raw[1][0] != 2 || raw[2][0] != 0.05 || st.Tokens != 3+5+3 || !slices.Equal(st.Labels, []string{"negative", "positive"}) {
		t.Errorf("got %v %+v", raw, st)
	}
	probs, _, _ := m.ClassifyPairs(t.Context(), "", in[1:2], models.ClassifyOptions{})
	if math.Abs(float64(probs[0][0]+probs[0][1])-1) > 1e-6 {
		t.Errorf("probabilities %v", probs)
	}
	// Over the maximum of 8 without truncation: the first input that is too long is named,
	// single or pair.
	long := []models.Input{{Text: "ok"}, {Text: "abc", Second: "def", Pair: true}, {Text: "far too long"}}
	_, _, err = m.ClassifyPairs(t.Context(), "", long, models.ClassifyOptions{})
	var tl *tokenize.TooLongError
	if !errors.As(err, &tl) || tl.Index != 1 {
		t.Errorf("pair 1 too long: %v", err)
	}
	long[1].Second = "d"
	_, _, err = m.ClassifyPairs(t.Context(), "", long, models.ClassifyOptions{})
	if !errors.As(err, &tl) || tl.Index != 2 {
		t.Errorf("single 2 too long: %v", err)
	}
	_, st, err = m.ClassifyPairs(t.Context(), "", long, models.ClassifyOptions{Truncate: true})
	if err != nil || st.Truncated != 1 {
		t.Errorf("truncate: %v %+v", err, st)
	}
}

// Pairs are cached under both texts: a pair is not another pair with the same bytes, nor
// the single text of its concatenation; raw is in the key.
func TestRerankCache(t *testing.T) {
	exec := &pairExec{}
	m, err := openRerank(t, withCache(rerankYAML, 1<<20), &pairBackend{exec: exec})
	if err != nil {
		t.Fatal(err)
	}
	ref, err := openRerank(t, rerankYAML, &pairBackend{exec: &pairExec{}})
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		query        string
		texts        []string
		raw          bool
		hits, misses int
	}{
		{"ab", []string{"a", "b"}, false, 0, 2},
		{"ab", []string{"b", "a", "c"}, false, 2, 1},
		{"a", []string{"ba"}, false, 0, 1}, // the same bytes as ("ab", "a"), split elsewhere
		{"ab", []string{"a"}, true, 0, 1},
		{"ab", []string{"a"}, true, 1, 0},
	}
	for i, s := range steps {
		got, st, err := m.Rerank(t.Context(), "", s.query, s.texts, models.RerankOptions{Truncate: true, Raw: s.raw})
		want, _, _ := ref.Rerank(t.Context(), "", s.query, s.texts, models.RerankOptions{Truncate: true, Raw: s.raw})
		if err != nil || st.CacheHits != s.hits || st.CacheMisses != s.misses || !slices.Equal(got, want) {
			t.Errorf("step %d: %v hits %d misses %d scores %v; want %d, %d, %v", i, err, st.CacheHits, st.CacheMisses, got, s.hits, s.misses, want)
		}
	}
}
