//go:build cgo && ort

package hf_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/daulet/tokenizers"

	"github.com/ortserve/ortserve/tokenize"
	"github.com/ortserve/ortserve/tokenize/hf"
)

// The golden files come from the Python reference stack (tokenizers==0.22.0, the version
// daulet/tokenizers v1.24.0 builds) on the same tokenizer.json: scripts/models/reference.py.
const goldenDir = "../../testdata/golden"

type goldenTokens struct {
	Truncation struct {
		MaxLength int `json:"max_length"`
	} `json:"truncation"`
	Items []struct {
		Index     int     `json:"index"`
		IDs       []int64 `json:"ids"`
		TypeIDs   []int64 `json:"type_ids"`
		Truncated bool    `json:"truncated"`
	} `json:"items"`
}

func readJSON(t testing.TB, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func tokenizerPath(t testing.TB) string {
	t.Helper()
	models := os.Getenv("ORTSERVE_MODELS")
	if models == "" {
		t.Fatal("ORTSERVE_MODELS is not set: run these tests with `make test`")
	}
	return filepath.Join(models, "minilm", "tokenizer.json")
}

func TestMatchesPythonReference(t *testing.T) {
	var texts []string
	var golden goldenTokens
	readJSON(t, filepath.Join(goldenDir, "texts.json"), &texts)
	readJSON(t, filepath.Join(goldenDir, "tokens.json"), &golden)
	tok, err := hf.Load(tokenizerPath(t), golden.Truncation.MaxLength)
	if err != nil {
		t.Fatal(err)
	}
	defer tok.Close()
	encs, err := tok.Encode(texts, tokenize.Options{Truncate: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(golden.Items) != len(texts) {
		t.Fatalf("%d golden items for %d texts", len(golden.Items), len(texts))
	}
	truncated := 0
	for _, g := range golden.Items {
		e := encs[g.Index]
		if !slices.Equal(e.IDs, g.IDs) || !slices.Equal(e.TypeIDs, g.TypeIDs) || e.Truncated != g.Truncated {
			t.Errorf("text %d %q:\n got  %v %v truncated=%v\n want %v %v truncated=%v", g.Index, short(texts[g.Index]), e.IDs, e.TypeIDs, e.Truncated, g.IDs, g.TypeIDs, g.Truncated)
		}
		if g.Truncated {
			truncated++
		}
	}
	if truncated == 0 {
		t.Error("the golden texts include no text over the maximum length")
	}
}

func short(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

func TestTooLong(t *testing.T) {
	tok, err := hf.Load(tokenizerPath(t), 8)
	if err != nil {
		t.Fatal(err)
	}
	defer tok.Close()
	texts := []string{"one two three", "one two three four five six", "one two three four five six seven"}
	encs, err := tok.Encode(texts, tokenize.Options{Truncate: true})
	if err != nil {
		t.Fatal(err)
	}
	// Exactly at the maximum (6 words + [CLS] + [SEP]) is not truncated; one more is.
	if encs[1].Len() != 8 || encs[1].Truncated || encs[2].Len() != 8 || !encs[2].Truncated || encs[2].IDs[7] != 102 {
		t.Errorf("truncation: %+v / %+v", encs[1], encs[2])
	}
	_, err = tok.Encode(texts, tokenize.Options{})
	var tl *tokenize.TooLongError
	if !errors.As(err, &tl) || tl.Index != 2 || tl.Tokens != 9 || tl.Max != 8 {
		t.Errorf("no truncation: %v", err)
	}
}

func TestNULBytesAreDropped(t *testing.T) {
	tok, err := hf.Load(tokenizerPath(t), 32)
	if err != nil {
		t.Fatal(err)
	}
	defer tok.Close()
	encs, _ := tok.Encode([]string{"hello\x00 world", "hello world"}, tokenize.Options{Truncate: true})
	if !slices.Equal(encs[0].IDs, encs[1].IDs) {
		t.Errorf("NUL changed the ids: %v vs %v", encs[0].IDs, encs[1].IDs)
	}
}

func TestConcurrentEncode(t *testing.T) {
	tok, err := hf.Load(tokenizerPath(t), 256)
	if err != nil {
		t.Fatal(err)
	}
	defer tok.Close()
	text := strings.Repeat("concurrency is not parallelism ", 10)
	want, _ := tok.Encode([]string{text}, tokenize.Options{Truncate: true})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				got, err := tok.Encode([]string{text}, tokenize.Options{Truncate: true})
				if err != nil || !slices.Equal(got[0].IDs, want[0].IDs) {
					t.Error("concurrent encode differs")
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	notJSON := filepath.Join(dir, "bad.json")
	os.WriteFile(notJSON, []byte("{not json"), 0o644)
	noModel := filepath.Join(dir, "nomodel.json")
	os.WriteFile(noModel, []byte(`{"version":"1.0"}`), 0o644)
	for _, tt := range []struct{ path, want string }{
		{filepath.Join(dir, "missing.json"), "no such file"},
		{notJSON, "is not a tokenizer.json"},
		{noModel, `no "model" section`},
	} {
		if _, err := hf.Load(tt.path, 16); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: got %v, want %q", tt.path, err, tt.want)
		}
	}
	if _, err := hf.Load(tokenizerPath(t), 1); err == nil {
		t.Error("max length 1 accepted")
	}
}

// benchTexts are everyday sentences of 8–20 tokens, as a request to /embed carries them.
var benchTexts = []string{
	"The quick brown fox jumps over the lazy dog.",
	"How do I reset my password on the mobile app?",
	"Shipping was fast and the package arrived in perfect condition.",
	"This blender is loud, but it crushes ice like a champ.",
	"Inference servers trade throughput for tail latency when they batch.",
	"My flight was delayed by four hours and nobody told us why.",
	"I would not recommend this hotel to anyone traveling with kids.",
	"Quantized models are faster, but you should measure their accuracy.",
}

// BenchmarkEncode is one Encode call: one repeated phrase of 8 or 48 words, and requests of 1
// and 32 everyday sentences (texts=32 is ns per request, not per text).
func BenchmarkEncode(b *testing.B) {
	tok, err := hf.Load(tokenizerPath(b), 256)
	if err != nil {
		b.Fatal(err)
	}
	defer tok.Close()
	for _, words := range []int{8, 48} {
		text := strings.Repeat("serving models behind an slo ", words/6)
		b.Run(fmt.Sprintf("words=%d", words), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				tok.Encode([]string{text}, tokenize.Options{Truncate: true})
			}
		})
	}
	for _, n := range []int{1, 32} {
		texts := make([]string, n)
		for i := range texts {
			texts[i] = benchTexts[i%len(benchTexts)]
		}
		b.Run(fmt.Sprintf("texts=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := tok.Encode(texts, tokenize.Options{Truncate: true}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func TestTokens(t *testing.T) {
	tok, err := hf.Load(tokenizerPath(t), 16)
	if err != nil {
		t.Fatal(err)
	}
	defer tok.Close()
	type tk = tokenize.Token
	tests := []struct {
		name, text string
		special    bool
		want       []tk
	}{
		{"hello world", "hello world", true, []tk{
			{ID: 101, Text: "[CLS]", Special: true},
			{ID: 7592, Text: "hello", Start: 0, Stop: 5},
			{ID: 2088, Text: "world", Start: 6, Stop: 11},
			{ID: 102, Text: "[SEP]", Special: true},
		}},
		{"no special tokens", "hello world", false, []tk{
			{ID: 7592, Text: "hello", Start: 0, Stop: 5},
			{ID: 2088, Text: "world", Start: 6, Stop: 11},
		}},
		{"offsets are into the original, not the lower-cased text", "Hello", false, []tk{
			{ID: 7592, Text: "hello", Start: 0, Stop: 5},
		}},
		{"NUL bytes are counted back in", "a\x00b c", false, []tk{
			{ID: 11113, Text: "ab", Start: 0, Stop: 3},
			{ID: 1039, Text: "c", Start: 4, Stop: 5},
		}},
		{"empty", "", false, []tk{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tok.Tokens(tt.text, tt.special)
			if err != nil || !slices.Equal(got, tt.want) {
				t.Errorf("got %+v, %v\nwant %+v", got, err, tt.want)
			}
		})
	}

	// Accents and emoji: offsets are bytes, inside the text, increasing, and each slice of the
	// text is where its token came from.
	text := "Crème brûlée 🍮 à la carte, naïve café, déjà vu"
	got, err := tok.Tokens(text, true)
	if err != nil {
		t.Fatal(err)
	}
	if !got[0].Special || !got[len(got)-1].Special || len(got) != 16 {
		t.Errorf("want [CLS] … [SEP] and 16 tokens (cut at the maximum), got %+v", got)
	}
	prev := 0
	for _, g := range got[1 : len(got)-1] {
		if g.Special || g.Start < prev || g.Stop <= g.Start || g.Stop > len(text) {
			t.Fatalf("token %+v: offsets out of order or outside %d bytes", g, len(text))
		}
		prev = g.Stop
		src := text[g.Start:g.Stop]
		if !utf8.ValidString(src) {
			t.Errorf("token %+v: %q is not whole characters", g, src)
		}
		if g.Text == "[UNK]" {
			if src != "🍮" {
				t.Errorf("unknown token from %q, want the emoji", src)
			}
			continue
		}
		// BERT's normalizer lower-cases and strips accents: compare the token with the
		// source stripped the same way.
		if plain := strings.TrimPrefix(g.Text, "##"); plain != stripAccents(strings.ToLower(src)) {
			t.Errorf("token %q from %q", g.Text, src)
		}
	}
}

func stripAccents(s string) string {
	return strings.NewReplacer("è", "e", "û", "u", "é", "e", "à", "a", "ï", "i").Replace(s)
}

// BenchmarkLoad is one Load of MiniLM's tokenizer.json (about 700 KB), as every version of a
// model does when a server starts or reloads it.
func BenchmarkLoad(b *testing.B) {
	path := tokenizerPath(b)
	b.ReportAllocs()
	for b.Loop() {
		tok, err := hf.Load(path, 256)
		if err != nil {
			b.Fatal(err)
		}
		tok.Close()
	}
}

// TestEncodeLeft holds texts cut on the left, which Encode cuts and joins in Go, to what the
// Rust library gives when it cuts them itself with TruncationDirection::Left.
func TestEncodeLeft(t *testing.T) {
	var texts []string
	readJSON(t, filepath.Join(goldenDir, "texts.json"), &texts)
	data, err := os.ReadFile(tokenizerPath(t))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	doc["padding"] = json.RawMessage("null")
	edited, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	for _, maxLen := range []int{5, 16, 128} {
		ref, err := tokenizers.FromBytesWithTruncation(edited, uint32(maxLen), tokenizers.TruncationDirectionLeft)
		if err != nil {
			t.Fatal(err)
		}
		defer ref.Close()
		tok, err := hf.Load(tokenizerPath(t), maxLen)
		if err != nil {
			t.Fatal(err)
		}
		defer tok.Close()
		encs, err := tok.Encode(texts, tokenize.Options{Truncate: true, Left: true})
		if err != nil {
			t.Fatal(err)
		}
		cut := 0
		for i, text := range texts {
			want := ref.EncodeWithOptions(text, true, tokenizers.WithReturnTypeIDs())
			if !slices.Equal(encs[i].IDs, toInt64(want.IDs)) || !slices.Equal(encs[i].TypeIDs, toInt64(want.TypeIDs)) {
				t.Errorf("max %d, text %d: got %v %v, want %v %v", maxLen, i, encs[i].IDs, encs[i].TypeIDs, want.IDs, want.TypeIDs)
			}
			if encs[i].Truncated {
				cut++
			}
		}
		if maxLen == 5 && cut == 0 {
			t.Errorf("max %d: no text was cut, so the test checks no cut", maxLen)
		}
		if _, err := tok.Encode(texts, tokenize.Options{Left: true}); maxLen == 5 && !errors.Is(err, tokenize.ErrTooLong) {
			t.Errorf("max %d without truncate: %v, want a TooLongError", maxLen, err)
		}
	}
}

func toInt64(ids []uint32) []int64 {
	out := make([]int64, len(ids))
	for i, id := range ids {
		out[i] = int64(id)
	}
	return out
}

// TestDecode checks Decode against the texts Encode came from (minilm lower-cases them), with
// and without the special tokens, and refuses ids outside the vocabulary.
func TestDecode(t *testing.T) {
	tok, err := hf.Load(tokenizerPath(t), 128)
	if err != nil {
		t.Fatal(err)
	}
	defer tok.Close()
	encs, err := tok.Encode([]string{"Hello, World!"}, tokenize.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		skip bool
		want string
	}{{true, "hello, world!"}, {false, "[CLS] hello, world! [SEP]"}} {
		if got, err := tok.Decode(encs[0].IDs, tt.skip); got != tt.want || err != nil {
			t.Errorf("Decode(skip %v) = %q, %v; want %q", tt.skip, got, err, tt.want)
		}
	}
	if got, err := tok.Decode(nil, true); got != "" || err != nil {
		t.Errorf("Decode(nil) = %q, %v", got, err)
	}
	var unknown *tokenize.UnknownIDError
	for _, id := range []int64{-1, 30522, 1 << 40} {
		if _, err := tok.Decode([]int64{101, id}, true); !errors.As(err, &unknown) || unknown.ID != id {
			t.Errorf("Decode of id %d: %v, want an UnknownIDError", id, err)
		}
	}
}
