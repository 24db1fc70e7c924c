//go:build cgo && ort

// Package hf is the HuggingFace tokenizer binding: a tokenizer.json read through
// github.com/daulet/tokenizers (Rust, via cgo). It is one of the two places with cgo.
package hf

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/daulet/tokenizers"

	"github.com/ortserve/ortserve/tokenize"
)

// Tokenizer encodes with a tokenizer.json. It is safe for concurrent use.
type Tokenizer struct {
	maxLen int
	// trunc cuts at maxLen; full does not, and is asked only when trunc's result is exactly
	// maxLen long, to learn whether the text was cut and how long it really is.
	trunc, full *tokenizers.Tokenizer
	// pair joins pairs of texts (EncodePairs); nil when the post_processor is not one this
	// package can read, and pairErr says why: an embedder needs no pairs, so Load still works.
	// It also places the special tokens around a text cut on the left (Options.Left).
	pair    *tokenize.Template
	pairErr error
	vocab   int // ids run from 0 to vocab-1, added tokens included
}

var _ tokenize.Tokenizer = (*Tokenizer)(nil)

// Load reads a tokenizer.json and prepares it for inputs of at most maxLen tokens.
// The file's own padding and truncation settings are replaced: padding happens per batch
// (tokenize.Pad), truncation at maxLen, from the right as sentence-transformers does (or from
// the left when a request asks: Options.Left).
func Load(path string, maxLen int) (*Tokenizer, error) {
	if maxLen < 2 {
		return nil, fmt.Errorf("hf: max length %d is too small", maxLen)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("hf: %w", err)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("hf: %s is not a tokenizer.json: %w", path, err)
	}
	if _, ok := doc["model"]; !ok {
		return nil, fmt.Errorf("hf: %s is not a tokenizer.json: no \"model\" section", path)
	}
	doc["padding"] = json.RawMessage("null")
	doc["truncation"] = json.RawMessage("null")
	edited := appendDoc(make([]byte, 0, len(data)+64), doc)
	full, err := tokenizers.FromBytes(edited)
	if err != nil {
		return nil, fmt.Errorf("hf: %s: %w", path, err)
	}
	// The truncation sentence-transformers does: LongestFirst, stride 0, the library's defaults.
	trunc, err := tokenizers.FromBytesWithTruncation(edited, uint32(maxLen), tokenizers.TruncationDirectionRight)
	if err != nil {
		full.Close()
		return nil, fmt.Errorf("hf: %s: %w", path, err)
	}
	pair, pairErr := tokenize.ParsePostProcessor(doc["post_processor"])
	return &Tokenizer{maxLen: maxLen, trunc: trunc, full: full, pair: pair, pairErr: pairErr, vocab: int(full.VocabSize())}, nil
}

// appendDoc appends doc as one JSON object, its keys sorted. Its values are as Unmarshal
// read them, already valid: json.Marshal would check and compact each again, which cost as
// much as reading the file (and several times that under the race detector).
func appendDoc(b []byte, doc map[string]json.RawMessage) []byte {
	b = append(b, '{')
	for i, k := range slices.Sorted(maps.Keys(doc)) {
		if i > 0 {
			b = append(b, ',')
		}
		key, _ := json.Marshal(k) // a string always marshals
		b = append(append(b, key...), ':')
		b = append(b, doc[k]...)
	}
	return append(b, '}')
}

// MaxLength is the most tokens one encoding has.
func (t *Tokenizer) MaxLength() int { return t.maxLen }

// Encode encodes each text with special tokens, cutting or refusing texts over the maximum.
// A text cut on the left (opts.Left) is encoded without special tokens by the non-truncating
// tokenizer, then cut and given them in Go (tokenize.Template.Join), as pairs are.
func (t *Tokenizer) Encode(texts []string, opts tokenize.Options) ([]tokenize.Encoding, error) {
	if opts.Left && t.pair == nil {
		return nil, fmt.Errorf("hf: %w: %w", tokenize.ErrNoLeft, t.pairErr)
	}
	out := make([]tokenize.Encoding, len(texts))
	for i, text := range texts {
		text = dropNUL(text)
		if opts.Left {
			e, full := t.pair.Join([][]int64{t.bare(text)}, t.maxLen, true)
			if e.Truncated && !opts.Truncate {
				return nil, &tokenize.TooLongError{Index: i, Tokens: full, Max: t.maxLen}
			}
			out[i] = e
			continue
		}
		e := encode(t.trunc, text)
		if len(e.IDs) >= t.maxLen {
			if ids, _ := t.full.Encode(text, true); len(ids) > t.maxLen {
				n := len(ids)
				if !opts.Truncate {
					return nil, &tokenize.TooLongError{Index: i, Tokens: n, Max: t.maxLen}
				}
				e.Truncated = true
			}
		}
		out[i] = e
	}
	return out, nil
}

// Decode turns ids back into text with the tokenizer's decoder, as HF's tokenizer.decode.
func (t *Tokenizer) Decode(ids []int64, skipSpecial bool) (string, error) {
	u := make([]uint32, len(ids))
	for i, id := range ids {
		if id < 0 || id >= int64(t.vocab) {
			return "", &tokenize.UnknownIDError{ID: id, Vocab: t.vocab}
		}
		u[i] = uint32(id)
	}
	return t.full.Decode(u, skipSpecial), nil
}

// dropNUL removes NUL bytes. The Rust side takes C strings: a NUL would silently end the text
// there. BERT-style normalizers drop control characters anyway, so dropping NUL changes
// nothing else.
func dropNUL(text string) string {
	if strings.IndexByte(text, 0) >= 0 {
		return strings.ReplaceAll(text, "\x00", "")
	}
	return text
}

// EncodePairs encodes each pair as HF tokenizers encodes tokenizer(a, b, truncation=True,
// max_length=MaxLength()): each text without special tokens by the non-truncating
// tokenizer, then cut (from the side opts says) and joined in Go (tokenize.Template.Join).
func (t *Tokenizer) EncodePairs(pairs []tokenize.Pair, opts tokenize.Options) ([]tokenize.Encoding, error) {
	if t.pair == nil {
		return nil, fmt.Errorf("hf: %w: %w", tokenize.ErrNoPairs, t.pairErr)
	}
	out := make([]tokenize.Encoding, len(pairs))
	// A rerank request pairs one query with every text: its ids are computed once.
	// (EncodePair copies, so the ids may be shared.)
	var lastA string
	var aIDs []int64
	for i, p := range pairs {
		if aIDs == nil || p.A != lastA {
			lastA, aIDs = p.A, t.bare(p.A)
		}
		e, full := t.pair.Join([][]int64{aIDs, t.bare(p.B)}, t.maxLen, opts.Left)
		if e.Truncated && !opts.Truncate {
			return nil, &tokenize.TooLongError{Index: i, Tokens: full, Max: t.maxLen}
		}
		out[i] = e
	}
	return out, nil
}

// bare is text's ids without special tokens, uncut; never nil.
func (t *Tokenizer) bare(text string) []int64 {
	enc := t.full.EncodeWithOptions(dropNUL(text), false)
	ids := make([]int64, len(enc.IDs))
	for j, id := range enc.IDs {
		ids[j] = int64(id)
	}
	return ids
}

func encode(tk *tokenizers.Tokenizer, text string) tokenize.Encoding {
	enc := tk.EncodeWithOptions(text, true, tokenizers.WithReturnTypeIDs())
	ids := make([]int64, 2*len(enc.IDs)) // one allocation for both
	e := tokenize.Encoding{IDs: ids[:len(enc.IDs):len(enc.IDs)], TypeIDs: ids[len(enc.IDs):]}
	for j, id := range enc.IDs {
		e.IDs[j] = int64(id)
	}
	for j, id := range enc.TypeIDs {
		e.TypeIDs[j] = int64(id)
	}
	return e
}

// Tokens encodes one text for display with the truncating tokenizer. The Rust side reports
// offsets in bytes of the UTF-8 text, which is what Token wants; NUL bytes, dropped before
// encoding as in Encode, are counted back in so that offsets index text itself.
func (t *Tokenizer) Tokens(text string, addSpecial bool) ([]tokenize.Token, error) {
	return tokens(t.trunc, text, addSpecial)
}

// PairTokens encodes a pair for display as EncodePairs encodes it, cut to the maximum
// length: the tokens of b are marked Second, and their offsets index b. The type ids are
// beside the tokens.
func (t *Tokenizer) PairTokens(p tokenize.Pair) ([]tokenize.Token, []int64, error) {
	if t.pair == nil {
		return nil, nil, fmt.Errorf("hf: %w: %w", tokenize.ErrNoPairs, t.pairErr)
	}
	a, err := tokens(t.full, p.A, false)
	if err != nil {
		return nil, nil, err
	}
	b, err := tokens(t.full, p.B, false)
	if err != nil {
		return nil, nil, err
	}
	toks, types := t.pair.PairTokens(a, b, t.maxLen)
	return toks, types, nil
}

func tokens(tk *tokenizers.Tokenizer, text string, addSpecial bool) ([]tokenize.Token, error) {
	clean, pos := text, []int(nil)
	if strings.IndexByte(text, 0) >= 0 {
		clean = dropNUL(text)
		pos = make([]int, 0, len(clean)) // pos[i] is where clean[i] is in text
		for i := range len(text) {
			if text[i] != 0 {
				pos = append(pos, i)
			}
		}
	}
	enc := tk.EncodeWithOptions(clean, addSpecial,
		tokenizers.WithReturnTokens(), tokenizers.WithReturnOffsets(), tokenizers.WithReturnSpecialTokensMask())
	if len(enc.Tokens) != len(enc.IDs) || len(enc.Offsets) != len(enc.IDs) || len(enc.SpecialTokensMask) != len(enc.IDs) {
		return nil, fmt.Errorf("hf: the tokenizer returned %d ids but %d tokens, %d offsets and %d special flags",
			len(enc.IDs), len(enc.Tokens), len(enc.Offsets), len(enc.SpecialTokensMask))
	}
	out := make([]tokenize.Token, len(enc.IDs))
	for i, id := range enc.IDs {
		tok := tokenize.Token{ID: int64(id), Text: enc.Tokens[i], Special: enc.SpecialTokensMask[i] == 1}
		if !tok.Special {
			start, stop := int(enc.Offsets[i][0]), int(enc.Offsets[i][1])
			if start > stop || stop > len(clean) {
				return nil, fmt.Errorf("hf: token %d %q has offsets [%d, %d) outside a text of %d bytes", i, tok.Text, start, stop, len(clean))
			}
			if pos != nil && stop > start {
				start, stop = pos[start], pos[stop-1]+1
			}
			tok.Start, tok.Stop = start, stop
		}
		out[i] = tok
	}
	return out, nil
}

// Close frees the native tokenizers. No Encode may run during or after Close.
func (t *Tokenizer) Close() error {
	t.trunc.Close()
	t.full.Close()
	return nil
}
