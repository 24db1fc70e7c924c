package tokenize_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/ortserve/ortserve/tokenize"
)

// TestCutPair holds CutPair to HF tokenizers' truncate_encodings (longest_first) at
// max_length 7, on texts of 0, 2, 4 and 8 tokens: the table of tokenizers' own unit test.
func TestCutPair(t *testing.T) {
	tests := []struct{ la, lb, wa, wb int }{
		{0, 0, 0, 0}, {0, 2, 0, 2}, {0, 4, 0, 4}, {0, 8, 0, 7},
		{2, 0, 2, 0}, {2, 2, 2, 2}, {2, 4, 2, 4}, {2, 8, 2, 5},
		{4, 0, 4, 0}, {4, 2, 4, 2}, {4, 4, 3, 4}, {4, 8, 3, 4},
		{8, 0, 7, 0}, {8, 2, 5, 2}, {8, 4, 4, 3}, {8, 8, 3, 4},
	}
	for _, tt := range tests {
		if a, b := tokenize.CutPair(tt.la, tt.lb, 7); a != tt.wa || b != tt.wb {
			t.Errorf("CutPair(%d, %d, 7) = %d, %d; want %d, %d", tt.la, tt.lb, a, b, tt.wa, tt.wb)
		}
	}
	// A maximum of 0 or less (the special tokens alone fill it) cuts both texts away.
	for _, max := range []int{0, -2} {
		if a, b := tokenize.CutPair(4, 8, max); a != 0 || b != 0 {
			t.Errorf("CutPair(4, 8, %d) = %d, %d", max, a, b)
		}
	}
}

// FuzzCutPair checks CutPair's invariants: the cut fits, cuts nothing that fits, never
// lengthens a text, and leaves the shorter text no longer than the longer.
func FuzzCutPair(f *testing.F) {
	f.Add(4, 8, 7)
	f.Add(300, 2, 253)
	f.Fuzz(func(t *testing.T, la, lb, max int) {
		if la < 0 || lb < 0 || la > 1<<20 || lb > 1<<20 || max > 1<<20 {
			return
		}
		a, b := tokenize.CutPair(la, lb, max)
		switch {
		case a < 0 || b < 0 || a > la || b > lb:
			t.Fatalf("CutPair(%d, %d, %d) = %d, %d: out of range", la, lb, max, a, b)
		case max > 0 && la+lb <= max && (a != la || b != lb):
			t.Fatalf("CutPair(%d, %d, %d) = %d, %d: cut a pair that fits", la, lb, max, a, b)
		case a+b > max && a+b > 0:
			t.Fatalf("CutPair(%d, %d, %d) = %d, %d: longer than the maximum", la, lb, max, a, b)
		case la > lb && a < b && a < la, lb > la && b < a && b < lb:
			t.Fatalf("CutPair(%d, %d, %d) = %d, %d: cut the shorter below the longer", la, lb, max, a, b)
		}
	})
}

// The minilm tokenizer.json's post_processor, as sentence-transformers exports it.
const bertTemplateJSON = `{"post_processor": {"type": "TemplateProcessing",
 "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
 "pair": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "[SEP]", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}, {"SpecialToken": {"id": "[SEP]", "type_id": 1}}],
 "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [101], "tokens": ["[CLS]"]}, "[SEP]": {"id": "[SEP]", "ids": [102], "tokens": ["[SEP]"]}}}}`

// TestEncodePair checks joined pairs against what HF tokenizers 0.22.0 gives for
// tokenizer.encode(a, b) with the minilm tokenizer.json at each maximum length (the texts'
// bare ids are its encodings without special tokens).
func TestEncodePair(t *testing.T) {
	tmpl, err := tokenize.ParseTemplate([]byte(bertTemplateJSON))
	if err != nil {
		t.Fatal(err)
	}
	var (
		one2six   = []int64{2028, 2048, 2093, 2176, 2274, 2416} // "one two three four five six"
		alphaBeta = []int64{6541, 8247}                         // "alpha beta"
		one2four  = one2six[:4]
		five2ate  = []int64{2274, 2416, 2698, 2809} // "five six seven eight"
	)
	tests := []struct {
		name       string
		a, b       []int64
		max        int
		ids, types []int64
		full       int
	}{
		{"fits", []int64{7592}, []int64{2088}, 16, []int64{101, 7592, 102, 2088, 102}, []int64{0, 0, 0, 1, 1}, 5},
		{"longer first is cut", one2six, alphaBeta, 8,
			[]int64{101, 2028, 2048, 2093, 102, 6541, 8247, 102}, []int64{0, 0, 0, 0, 0, 1, 1, 1}, 11},
		{"longer second is cut", []int64{1037, 1038}, append(one2six, 2698), 9,
			[]int64{101, 1037, 1038, 102, 2028, 2048, 2093, 2176, 102}, []int64{0, 0, 0, 0, 1, 1, 1, 1, 1}, 12},
		{"both cut, even", one2four, five2ate, 9,
			[]int64{101, 2028, 2048, 2093, 102, 2274, 2416, 2698, 102}, []int64{0, 0, 0, 0, 0, 1, 1, 1, 1}, 11},
		{"both cut, the odd token to the second", one2four, five2ate, 10,
			[]int64{101, 2028, 2048, 2093, 102, 2274, 2416, 2698, 2809, 102}, []int64{0, 0, 0, 0, 0, 1, 1, 1, 1, 1}, 11},
		{"exactly the maximum", one2four, five2ate, 11,
			[]int64{101, 2028, 2048, 2093, 2176, 102, 2274, 2416, 2698, 2809, 102}, []int64{0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1}, 11},
		{"empty texts", nil, nil, 8, []int64{101, 102, 102}, []int64{0, 0, 1}, 3},
		{"only special tokens fit", one2four, five2ate, 3, []int64{101, 102, 102}, []int64{0, 0, 1}, 11},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := slices.Clone(tt.a), slices.Clone(tt.b)
			e, full := tmpl.EncodePair(a, b, tt.max)
			if !slices.Equal(e.IDs, tt.ids) || !slices.Equal(e.TypeIDs, tt.types) || full != tt.full || e.Truncated != (tt.full > tt.max) {
				t.Errorf("got %v %v full=%d truncated=%v\nwant %v %v full=%d", e.IDs, e.TypeIDs, full, e.Truncated, tt.ids, tt.types, tt.full)
			}
			if !slices.Equal(a, tt.a) || !slices.Equal(b, tt.b) {
				t.Error("EncodePair modified its inputs")
			}
		})
	}
}

func TestPairTokens(t *testing.T) {
	tmpl, err := tokenize.ParseTemplate([]byte(bertTemplateJSON))
	if err != nil {
		t.Fatal(err)
	}
	a := []tokenize.Token{{ID: 2028, Text: "one", Stop: 3}, {ID: 2048, Text: "two", Start: 4, Stop: 7}}
	b := []tokenize.Token{{ID: 2274, Text: "five", Stop: 4}, {ID: 2416, Text: "six", Start: 5, Stop: 8}}
	toks, types := tmpl.PairTokens(a, b, 6)
	want := []tokenize.Token{
		{ID: 101, Text: "[CLS]", Special: true}, a[0], {ID: 102, Text: "[SEP]", Special: true},
		{ID: 2274, Text: "five", Stop: 4, Second: true}, {ID: 2416, Text: "six", Start: 5, Stop: 8, Second: true},
		{ID: 102, Text: "[SEP]", Special: true},
	}
	if !slices.Equal(toks, want) || !slices.Equal(types, []int64{0, 0, 0, 1, 1, 1}) {
		t.Errorf("got %+v %v\nwant %+v", toks, types, want)
	}
}

func TestParseTemplate(t *testing.T) {
	tests := []struct {
		name, json   string
		single, pair int     // special tokens added
		ids, types   []int64 // EncodePair of [7] and [8] at max 16
		err          string
	}{
		{"template", bertTemplateJSON, 2, 3, []int64{101, 7, 102, 8, 102}, []int64{0, 0, 0, 1, 1}, ""},
		{"bert", `{"post_processor": {"type": "BertProcessing", "sep": ["[SEP]", 102], "cls": ["[CLS]", 101]}}`, 2, 3,
			[]int64{101, 7, 102, 8, 102}, []int64{0, 0, 0, 1, 1}, ""},
		{"roberta", `{"post_processor": {"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 0], "trim_offsets": true, "add_prefix_space": true}}`, 2, 4,
			[]int64{0, 7, 2, 2, 8, 2}, []int64{0, 0, 0, 0, 0, 0}, ""},
		{"sequence of byte level and template", `{"post_processor": {"type": "Sequence", "processors": [{"type": "ByteLevel", "trim_offsets": false}, ` +
			strings.TrimSuffix(strings.TrimPrefix(bertTemplateJSON, `{"post_processor": `), "}") + `]}}`, 2, 3,
			[]int64{101, 7, 102, 8, 102}, []int64{0, 0, 0, 1, 1}, ""},
		{"no post-processor", `{"post_processor": null}`, 0, 0, []int64{7, 8}, []int64{0, 1}, ""},
		{"byte level alone", `{"post_processor": {"type": "ByteLevel"}}`, 0, 0, []int64{7, 8}, []int64{0, 1}, ""},
		{"multi-id special token", `{"post_processor": {"type": "TemplateProcessing", "single": [{"Sequence": {"id": "A", "type_id": 0}}],
			"pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "sep", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 2}}],
			"special_tokens": {"sep": {"id": "sep", "ids": [5, 6], "tokens": ["<", ">"]}}}}`, 0, 2, []int64{7, 5, 6, 8}, []int64{0, 0, 0, 2}, ""},
		{"unknown processor", `{"post_processor": {"type": "Magic"}}`, 0, 0, nil, nil, `post_processor "Magic" is not supported`},
		{"missing special token", strings.Replace(bertTemplateJSON, `"[CLS]": {"id": "[CLS]", "ids": [101], "tokens": ["[CLS]"]}, `, "", 1), 0, 0, nil, nil,
			`special token "[CLS]" is not in special_tokens`},
		{"pair without B", strings.Replace(bertTemplateJSON, `{"Sequence": {"id": "B", "type_id": 1}}, `, "", 1), 0, 0, nil, nil, "must use both sequences"},
		{"sequence C", strings.Replace(bertTemplateJSON, `"id": "B"`, `"id": "C"`, 1), 0, 0, nil, nil, `sequence "C"`},
		{"bad bert", `{"post_processor": {"type": "BertProcessing", "sep": ["[SEP]"], "cls": ["[CLS]", 101]}}`, 0, 0, nil, nil, "cls and sep must be"},
		{"not JSON", `{"post_processor": `, 0, 0, nil, nil, "not a tokenizer.json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tmpl, err := tokenize.ParseTemplate([]byte(tt.json))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("got %v, want an error containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tmpl.Added(false) != tt.single || tmpl.Added(true) != tt.pair {
				t.Errorf("added %d single, %d pair; want %d, %d", tmpl.Added(false), tmpl.Added(true), tt.single, tt.pair)
			}
			e, _ := tmpl.EncodePair([]int64{7}, []int64{8}, 16)
			if !slices.Equal(e.IDs, tt.ids) || !slices.Equal(e.TypeIDs, tt.types) {
				t.Errorf("pair %v %v, want %v %v", e.IDs, e.TypeIDs, tt.ids, tt.types)
			}
		})
	}
}

// TestJoinLeft checks texts cut on the left, as HF tokenizers' TruncationDirection::Left cuts
// them: each text keeps its last tokens (a pair's lengths are CutPair's either way), and the
// special tokens go around what is kept.
func TestJoinLeft(t *testing.T) {
	tmpl, err := tokenize.ParseTemplate([]byte(bertTemplateJSON))
	if err != nil {
		t.Fatal(err)
	}
	one2six := []int64{2028, 2048, 2093, 2176, 2274, 2416}
	tests := []struct {
		name       string
		texts      [][]int64
		max        int
		left       bool
		ids, types []int64
		full       int
	}{
		{"single fits", [][]int64{{7592}}, 8, true, []int64{101, 7592, 102}, []int64{0, 0, 0}, 3},
		{"single cut on the left", [][]int64{one2six}, 5, true, []int64{101, 2176, 2274, 2416, 102}, []int64{0, 0, 0, 0, 0}, 8},
		{"single cut on the right", [][]int64{one2six}, 5, false, []int64{101, 2028, 2048, 2093, 102}, []int64{0, 0, 0, 0, 0}, 8},
		{"single, only special tokens fit", [][]int64{one2six}, 2, true, []int64{101, 102}, []int64{0, 0}, 8},
		{"pair cut on the left", [][]int64{one2six, {6541, 8247}}, 8, true,
			[]int64{101, 2176, 2274, 2416, 102, 6541, 8247, 102}, []int64{0, 0, 0, 0, 0, 1, 1, 1}, 11},
		{"pair, both cut on the left", [][]int64{one2six[:4], one2six[2:]}, 9, true,
			[]int64{101, 2048, 2093, 2176, 102, 2176, 2274, 2416, 102}, []int64{0, 0, 0, 0, 0, 1, 1, 1, 1}, 11},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, full := tmpl.Join(tt.texts, tt.max, tt.left)
			if !slices.Equal(e.IDs, tt.ids) || !slices.Equal(e.TypeIDs, tt.types) || full != tt.full || e.Truncated != (tt.full > tt.max) {
				t.Errorf("got %v %v full=%d truncated=%v\nwant %v %v full=%d", e.IDs, e.TypeIDs, full, e.Truncated, tt.ids, tt.types, tt.full)
			}
		})
	}
}

func FuzzParseTemplate(f *testing.F) {
	f.Add([]byte(bertTemplateJSON))
	f.Add([]byte(`{"post_processor": {"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 0]}}`))
	f.Add([]byte(`{"post_processor": {"type": "Sequence", "processors": [{"type": "ByteLevel"}]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tmpl, err := tokenize.ParseTemplate(data)
		if err != nil {
			return
		}
		for _, max := range []int{0, 3, 8} {
			e, full := tmpl.EncodePair([]int64{1, 2, 3}, []int64{4, 5}, max)
			if len(e.IDs) != len(e.TypeIDs) || full != 5+tmpl.Added(true) {
				t.Fatalf("max %d: %d ids, %d type ids, full %d", max, len(e.IDs), len(e.TypeIDs), full)
			}
			if e.Truncated != (full > max) || (full > max && len(e.IDs) > max && len(e.IDs) > tmpl.Added(true)) {
				t.Fatalf("max %d: %d ids, truncated %v", max, len(e.IDs), e.Truncated)
			}
		}
	})
}
