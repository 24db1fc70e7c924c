//go:build cgo && ort

package hf_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/ortserve/ortserve/tokenize"
	"github.com/ortserve/ortserve/tokenize/hf"
)

// TestEncodePairs checks pairs against HF tokenizers 0.22.0 (the version daulet/tokenizers
// v1.24.0 builds) on the minilm tokenizer.json: Tokenizer.from_file(...),
// enable_truncation(max), encode(a, b); ids and type ids copied from its output.
func TestEncodePairs(t *testing.T) {
	tests := []struct {
		name       string
		a, b       string
		max        int
		ids, types []int64
		truncated  bool
	}{
		{"fits", "hello", "world", 16, []int64{101, 7592, 102, 2088, 102}, []int64{0, 0, 0, 1, 1}, false},
		{"longer first cut", "one two three four five six", "alpha beta", 8,
			[]int64{101, 2028, 2048, 2093, 102, 6541, 8247, 102}, []int64{0, 0, 0, 0, 0, 1, 1, 1}, true},
		{"longer second cut", "a b", "one two three four five six seven", 9,
			[]int64{101, 1037, 1038, 102, 2028, 2048, 2093, 2176, 102}, []int64{0, 0, 0, 0, 1, 1, 1, 1, 1}, true},
		{"both cut", "one two three four", "five six seven eight", 9,
			[]int64{101, 2028, 2048, 2093, 102, 2274, 2416, 2698, 102}, []int64{0, 0, 0, 0, 0, 1, 1, 1, 1}, true},
		{"both cut, odd token to the second", "one two three four", "five six seven eight", 10,
			[]int64{101, 2028, 2048, 2093, 102, 2274, 2416, 2698, 2809, 102}, []int64{0, 0, 0, 0, 0, 1, 1, 1, 1, 1}, true},
		{"empty texts", "", "", 8, []int64{101, 102, 102}, []int64{0, 0, 1}, false},
		{"accents", "Héllo\u00e9 naïve café", "x", 32,
			[]int64{101, 7592, 2063, 15743, 7668, 102, 1060, 102}, []int64{0, 0, 0, 0, 0, 0, 1, 1}, false},
		{"NUL bytes dropped", "hel\x00lo", "wor\x00ld", 16, []int64{101, 7592, 102, 2088, 102}, []int64{0, 0, 0, 1, 1}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok, err := hf.Load(tokenizerPath(t), tt.max)
			if err != nil {
				t.Fatal(err)
			}
			defer tok.Close()
			encs, err := tok.EncodePairs([]tokenize.Pair{{A: tt.a, B: tt.b}}, tokenize.Options{Truncate: true})
			if err != nil {
				t.Fatal(err)
			}
			e := encs[0]
			if !slices.Equal(e.IDs, tt.ids) || !slices.Equal(e.TypeIDs, tt.types) || e.Truncated != tt.truncated {
				t.Errorf("got %v %v truncated=%v\nwant %v %v truncated=%v", e.IDs, e.TypeIDs, e.Truncated, tt.ids, tt.types, tt.truncated)
			}
		})
	}
}

func TestEncodePairsTooLong(t *testing.T) {
	tok, err := hf.Load(tokenizerPath(t), 9)
	if err != nil {
		t.Fatal(err)
	}
	defer tok.Close()
	// 2 + 2 and 3 + 3 tokens with [CLS] [SEP] [SEP]: 7 and 9, at the maximum, not over it.
	pairs := []tokenize.Pair{{A: "one two", B: "three four"}, {A: "one two three", B: "four five six"}}
	encs, err := tok.EncodePairs(pairs, tokenize.Options{})
	if err != nil || encs[1].Len() != 9 || encs[1].Truncated {
		t.Fatalf("a pair of exactly the maximum: %v %+v", err, encs)
	}
	var tl *tokenize.TooLongError
	pairs[1] = tokenize.Pair{A: "one two three", B: "four five six seven"}
	_, err = tok.EncodePairs(pairs, tokenize.Options{})
	if !errors.As(err, &tl) || tl.Index != 1 || tl.Tokens != 10 || tl.Max != 9 {
		t.Errorf("want input 1 with 10 tokens over 9, got %v", err)
	}
}

func TestPairTokens(t *testing.T) {
	tok, err := hf.Load(tokenizerPath(t), 32)
	if err != nil {
		t.Fatal(err)
	}
	defer tok.Close()
	p := tokenize.Pair{A: "Héllo naïve", B: "café"}
	toks, types, err := tok.PairTokens(p)
	if err != nil {
		t.Fatal(err)
	}
	type tk = tokenize.Token
	want := []tk{
		{ID: 101, Text: "[CLS]", Special: true},
		{ID: 7592, Text: "hello", Start: 0, Stop: 6}, // bytes: é is two
		{ID: 15743, Text: "naive", Start: 7, Stop: 13},
		{ID: 102, Text: "[SEP]", Special: true},
		{ID: 7668, Text: "cafe", Start: 0, Stop: 5, Second: true},
		{ID: 102, Text: "[SEP]", Special: true},
	}
	if !slices.Equal(toks, want) || !slices.Equal(types, []int64{0, 0, 0, 0, 1, 1}) {
		t.Errorf("got %+v %v\nwant %+v", toks, types, want)
	}
	encs, _ := tok.EncodePairs([]tokenize.Pair{p}, tokenize.Options{Truncate: true})
	for i, id := range encs[0].IDs {
		if toks[i].ID != id {
			t.Errorf("token %d: PairTokens has id %d, EncodePairs %d", i, toks[i].ID, id)
		}
	}
}

// A request's pairs, sharing a query or not, encode as each pair alone does.
func TestEncodePairsBatch(t *testing.T) {
	tok, err := hf.Load(tokenizerPath(t), 12)
	if err != nil {
		t.Fatal(err)
	}
	defer tok.Close()
	pairs := []tokenize.Pair{
		{A: "what is the capital of france", B: "paris is the capital of france"},
		{A: "what is the capital of france", B: "berlin"},
		{A: "capital", B: "paris"},
		{A: "what is the capital of france", B: ""},
	}
	encs, err := tok.EncodePairs(pairs, tokenize.Options{Truncate: true})
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range pairs {
		one, _ := tok.EncodePairs([]tokenize.Pair{p}, tokenize.Options{Truncate: true})
		if !slices.Equal(encs[i].IDs, one[0].IDs) || !slices.Equal(encs[i].TypeIDs, one[0].TypeIDs) || encs[i].Truncated != one[0].Truncated {
			t.Errorf("pair %d: %+v in the batch, %+v alone", i, encs[i], one[0])
		}
	}
	if !encs[0].Truncated || encs[0].Len() != 12 {
		t.Errorf("pair 0: %+v, want cut to 12", encs[0])
	}
}

// TestPairsMatchPythonReference checks pairs against the golden tokenizations of the
// reranker's tokenizer.json by transformers' tokenizer([query], [passage], truncation=True,
// max_length=...), the call sentence-transformers' CrossEncoder makes
// (scripts/models/reference.py): empty texts, texts over the maximum on either side and on
// both, special-token strings and non-ASCII text among them.
func TestPairsMatchPythonReference(t *testing.T) {
	var golden struct {
		Items []struct {
			Query         string  `json:"query"`
			Passage       string  `json:"passage"`
			MaxLength     int     `json:"max_length"`
			IDs           []int64 `json:"ids"`
			TypeIDs       []int64 `json:"type_ids"`
			AttentionMask []int64 `json:"attention_mask"`
			Truncated     bool    `json:"truncated"`
		} `json:"items"`
	}
	readJSON(t, filepath.Join(goldenDir, "pair_tokens.json"), &golden)
	path := filepath.Join(os.Getenv("ORTSERVE_MODELS"), "reranker", "tokenizer.json")
	if len(golden.Items) == 0 {
		t.Fatal("no golden pairs")
	}
	truncated := 0
	for i, g := range golden.Items {
		tok, err := hf.Load(path, g.MaxLength)
		if err != nil {
			t.Fatalf("%v: the reranker's tokenizer is built by `make models`", err)
		}
		encs, err := tok.EncodePairs([]tokenize.Pair{{A: g.Query, B: g.Passage}}, tokenize.Options{Truncate: true})
		tok.Close()
		if err != nil {
			t.Fatal(err)
		}
		e := encs[0]
		if !slices.Equal(e.IDs, g.IDs) || !slices.Equal(e.TypeIDs, g.TypeIDs) || e.Truncated != g.Truncated || len(g.AttentionMask) != e.Len() {
			t.Errorf("pair %d (%.30q, %.30q) at %d:\n got  %v %v truncated=%v\n want %v %v truncated=%v", i, g.Query, g.Passage, g.MaxLength, e.IDs, e.TypeIDs, e.Truncated, g.IDs, g.TypeIDs, g.Truncated)
		}
		if g.Truncated {
			truncated++
		}
	}
	if truncated == 0 {
		t.Error("the golden pairs include none over the maximum length")
	}
}
