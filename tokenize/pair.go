package tokenize

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// Pairs of texts are encoded as the HF tokenizers library encodes them (tokenizer(a, b) in
// transformers, EncodingInput::Dual in TEI): each text on its own without special tokens,
// then the pair cut to the maximum length by the "longest_first" strategy, then joined by the
// tokenizer.json's post-processor, whose pair template places the special tokens and gives
// each piece its token type id. A tokenizer binding only has to encode single texts without
// special tokens; the rest is here, in Go, where it tests without native libraries.

// Pair is two texts read as one input: a cross-encoder's query and passage, an NLI model's
// premise and hypothesis.
type Pair struct {
	A, B string
}

// Template is a tokenizer.json post-processor's templates: where special tokens go around a
// single text and around a pair, and which token type id each piece gets. It is read from
// TemplateProcessing, BertProcessing or RobertaProcessing (alone or inside a Sequence, whose
// ByteLevel steps change only offsets), or from no post-processor at all. A Template is
// immutable and safe for concurrent use.
type Template struct {
	single, pair []piece
}

// piece is one element of a template: a text (seq 0 or 1) or a special token's ids (seq -1),
// with the token type id its tokens get.
type piece struct {
	seq    int
	ids    []int64
	tokens []string
	typeID int64
}

// BertTemplate is BertProcessing's: [CLS] A [SEP] for one text, [CLS] A [SEP] B [SEP] for a
// pair, with type id 1 for B and its [SEP].
func BertTemplate(cls, sep string, clsID, sepID int64) *Template {
	c := piece{seq: -1, ids: []int64{clsID}, tokens: []string{cls}}
	s := piece{seq: -1, ids: []int64{sepID}, tokens: []string{sep}}
	s1 := s
	s1.typeID = 1
	return &Template{
		single: []piece{c, {seq: 0}, s},
		pair:   []piece{c, {seq: 0}, s, {seq: 1, typeID: 1}, s1},
	}
}

// RobertaTemplate is RobertaProcessing's: <s> A </s> for one text, <s> A </s> </s> B </s> for
// a pair, every type id 0.
func RobertaTemplate(cls, sep string, clsID, sepID int64) *Template {
	c := piece{seq: -1, ids: []int64{clsID}, tokens: []string{cls}}
	s := piece{seq: -1, ids: []int64{sepID}, tokens: []string{sep}}
	return &Template{
		single: []piece{c, {seq: 0}, s},
		pair:   []piece{c, {seq: 0}, s, s, {seq: 1}, s},
	}
}

// plainTemplate is what HF does without a post-processor: the texts as they are, the second
// with type id 1 (the type id it was encoded with).
func plainTemplate() *Template {
	return &Template{single: []piece{{seq: 0}}, pair: []piece{{seq: 0}, {seq: 1, typeID: 1}}}
}

// ParseTemplate reads the templates of a tokenizer.json document's post_processor.
func ParseTemplate(tokenizerJSON []byte) (*Template, error) {
	var doc struct {
		PostProcessor json.RawMessage `json:"post_processor"`
	}
	if err := json.Unmarshal(tokenizerJSON, &doc); err != nil {
		return nil, fmt.Errorf("tokenize: not a tokenizer.json: %w", err)
	}
	return ParsePostProcessor(doc.PostProcessor)
}

// ParsePostProcessor is ParseTemplate for a tokenizer.json's post_processor section alone
// (empty or null: no special tokens), for a caller that has read the file already.
func ParsePostProcessor(raw json.RawMessage) (*Template, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return plainTemplate(), nil
	}
	var p struct {
		Type string `json:"type"`
		// TemplateProcessing
		Single, Pair  []templatePiece
		SpecialTokens map[string]templateTokens `json:"special_tokens"`
		// BertProcessing, RobertaProcessing: ["[SEP]", 102]
		Sep, Cls []json.RawMessage
		// Sequence
		Processors []json.RawMessage
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, fmt.Errorf("tokenize: post_processor: %w", err)
	}
	switch p.Type {
	case "TemplateProcessing":
		return templateProcessing(p.Single, p.Pair, p.SpecialTokens)
	case "BertProcessing", "RobertaProcessing":
		cls, clsID, err1 := namedID(p.Cls)
		sep, sepID, err2 := namedID(p.Sep)
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("tokenize: %s: %w", p.Type, err)
		}
		if p.Type == "BertProcessing" {
			return BertTemplate(cls, sep, clsID, sepID), nil
		}
		return RobertaTemplate(cls, sep, clsID, sepID), nil
	case "ByteLevel":
		// Trims offsets; adds no tokens.
		return plainTemplate(), nil
	case "Sequence":
		// The one step that adds tokens decides; ByteLevel steps only trim offsets, which the
		// encodings of the single texts already have.
		found := plainTemplate()
		steps := 0
		for _, step := range p.Processors {
			t, err := ParsePostProcessor(step)
			if err != nil {
				return nil, err
			}
			if t.Added(false) > 0 || t.Added(true) > 0 {
				found = t
				steps++
			}
		}
		if steps > 1 {
			return nil, errors.New("tokenize: a post_processor Sequence with more than one step that adds tokens is not supported")
		}
		return found, nil
	}
	return nil, fmt.Errorf("tokenize: post_processor %q is not supported for pairs of texts (TemplateProcessing, BertProcessing and RobertaProcessing are)", p.Type)
}

// templatePiece is one element of TemplateProcessing's single or pair list:
// {"SpecialToken": {"id": "[CLS]", "type_id": 0}} or {"Sequence": {"id": "A", "type_id": 0}}.
type templatePiece struct {
	SpecialToken *struct {
		ID     string `json:"id"`
		TypeID int64  `json:"type_id"`
	} `json:"SpecialToken"`
	Sequence *struct {
		ID     string `json:"id"`
		TypeID int64  `json:"type_id"`
	} `json:"Sequence"`
}

// templateTokens is one entry of TemplateProcessing's special_tokens: a name for one or more
// ids.
type templateTokens struct {
	IDs    []int64  `json:"ids"`
	Tokens []string `json:"tokens"`
}

func templateProcessing(single, pair []templatePiece, special map[string]templateTokens) (*Template, error) {
	conv := func(list []templatePiece, what string) ([]piece, error) {
		out := make([]piece, 0, len(list))
		for i, p := range list {
			switch {
			case p.Sequence != nil:
				seq := 0
				switch p.Sequence.ID {
				case "A":
				case "B":
					seq = 1
				default:
					return nil, fmt.Errorf("tokenize: TemplateProcessing %s[%d]: sequence %q: want A or B", what, i, p.Sequence.ID)
				}
				out = append(out, piece{seq: seq, typeID: p.Sequence.TypeID})
			case p.SpecialToken != nil:
				st, ok := special[p.SpecialToken.ID]
				if !ok {
					return nil, fmt.Errorf("tokenize: TemplateProcessing %s[%d]: special token %q is not in special_tokens", what, i, p.SpecialToken.ID)
				}
				if len(st.Tokens) != len(st.IDs) {
					return nil, fmt.Errorf("tokenize: TemplateProcessing: special token %q has %d ids and %d tokens", p.SpecialToken.ID, len(st.IDs), len(st.Tokens))
				}
				out = append(out, piece{seq: -1, ids: st.IDs, tokens: st.Tokens, typeID: p.SpecialToken.TypeID})
			default:
				return nil, fmt.Errorf("tokenize: TemplateProcessing %s[%d]: neither a Sequence nor a SpecialToken", what, i)
			}
		}
		return out, nil
	}
	s, err := conv(single, "single")
	if err != nil {
		return nil, err
	}
	p, err := conv(pair, "pair")
	if err != nil {
		return nil, err
	}
	var hasA, hasB bool
	for _, pc := range p {
		hasA = hasA || pc.seq == 0
		hasB = hasB || pc.seq == 1
	}
	if !hasA || !hasB {
		return nil, errors.New("tokenize: TemplateProcessing: the pair template must use both sequences, $A and $B")
	}
	return &Template{single: s, pair: p}, nil
}

// namedID reads BertProcessing's ["[SEP]", 102].
func namedID(v []json.RawMessage) (string, int64, error) {
	var name string
	var id int64
	if len(v) != 2 || json.Unmarshal(v[0], &name) != nil || json.Unmarshal(v[1], &id) != nil {
		return "", 0, errors.New(`cls and sep must be ["token", id]`)
	}
	return name, id, nil
}

// Added is the number of special tokens the template adds to one text (pair false) or to a
// pair: what HF subtracts from the maximum length before cutting the texts.
func (t *Template) Added(pair bool) int {
	pieces := t.single
	if pair {
		pieces = t.pair
	}
	n := 0
	for _, p := range pieces {
		n += len(p.ids)
	}
	return n
}

// CutPair is how long two texts of la and lb tokens stay when cut to maxLen tokens together
// by HF tokenizers' "longest_first" strategy: nothing is cut when they fit; else the longer
// is cut down first, to no shorter than the other; if both are still too long, each gets
// half of maxLen, the longer text (the second on a tie) the odd token. It is the closed form of
// removing one token at a time from the longer text, as tokenizers' truncate_encodings
// computes it.
func CutPair(la, lb, maxLen int) (int, int) {
	if maxLen <= 0 {
		return 0, 0
	}
	if la+lb <= maxLen {
		return la, lb
	}
	// n1 is the shorter text; n2, the longer, is cut down to no shorter than it.
	swap := la > lb
	n1 := min(la, lb)
	var n2 int
	if n1 > maxLen {
		n2 = n1
	} else {
		n2 = max(n1, maxLen-n1)
	}
	if n1+n2 > maxLen {
		n1 = maxLen / 2
		n2 = n1 + maxLen%2
	}
	if swap {
		n1, n2 = n2, n1
	}
	return min(la, n1), min(lb, n2)
}

// EncodePair joins a and b, the ids of two texts encoded without special tokens, into one
// encoding of at most maxLen tokens: cut as CutPair says (from the right) to leave room for
// the template's special tokens, then joined by the pair template. full is the length the
// pair has uncut; the encoding is Truncated when full > maxLen. The encoding does not share
// memory with a or b.
func (t *Template) EncodePair(a, b []int64, maxLen int) (e Encoding, full int) {
	return t.Join([][]int64{a, b}, maxLen, false)
}

// Join is EncodePair for one text or two (texts holds their ids, encoded without special
// tokens), cut from either end: left keeps each text's last tokens rather than its first, as
// HF tokenizers' TruncationDirection::Left does. A single text is cut to what the single
// template leaves of maxLen, a pair as CutPair says; the single or pair template then places
// the special tokens. full is the length uncut. The encoding does not share memory with texts.
func (t *Template) Join(texts [][]int64, maxLen int, left bool) (e Encoding, full int) {
	pair := len(texts) == 2
	pieces := t.single
	if pair {
		pieces = t.pair
	}
	a, b := texts[0], []int64(nil)
	if pair {
		b = texts[1]
	}
	added := t.Added(pair)
	full = len(a) + len(b) + added
	if full > maxLen {
		na, nb := max(0, maxLen-added), 0
		if pair {
			na, nb = CutPair(len(a), len(b), maxLen-added)
		}
		a, b = keep(a, na, left), keep(b, nb, left)
		e.Truncated = true
	}
	n := len(a) + len(b) + added
	buf := make([]int64, 2*n) // one allocation for both
	e.IDs, e.TypeIDs = buf[:0:n], buf[n:n]
	for _, p := range pieces {
		ids := p.ids
		switch p.seq {
		case 0:
			ids = a
		case 1:
			ids = b
		}
		e.IDs = append(e.IDs, ids...)
		for range ids {
			e.TypeIDs = append(e.TypeIDs, p.typeID)
		}
	}
	return e, full
}

// keep is ids cut to its first n, or with left its last n.
func keep(ids []int64, n int, left bool) []int64 {
	n = min(n, len(ids))
	if left {
		return ids[len(ids)-n:]
	}
	return ids[:n]
}

// PairTokens is EncodePair for display: a and b are the two texts' tokens without special
// tokens, with offsets into their own text; the result is the pair's tokens, special ones
// marked, each text's tokens flagged Second for b, and its type ids beside it. The slices
// are new; the tokens are copied.
func (t *Template) PairTokens(a, b []Token, maxLen int) ([]Token, []int64) {
	added := t.Added(true)
	if len(a)+len(b)+added > maxLen {
		na, nb := CutPair(len(a), len(b), maxLen-added)
		a, b = a[:na], b[:nb]
	}
	n := len(a) + len(b) + added
	toks, types := make([]Token, 0, n), make([]int64, 0, n)
	for _, p := range t.pair {
		switch p.seq {
		case 0, 1:
			src := a
			if p.seq == 1 {
				src = b
			}
			for _, tok := range src {
				tok.Special, tok.Second = false, p.seq == 1
				toks = append(toks, tok)
				types = append(types, p.typeID)
			}
		default:
			for i, id := range p.ids {
				toks = append(toks, Token{ID: id, Text: p.tokens[i], Special: true})
				types = append(types, p.typeID)
			}
		}
	}
	return toks, types
}
