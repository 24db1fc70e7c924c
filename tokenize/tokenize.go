// Package tokenize turns texts into token ids and pads groups of them into the int64 tensors
// that transformer encoders take. The HF tokenizer binding lives in tokenize/hf; this package
// has no cgo, so everything above it tests without native libraries.
package tokenize

import (
	"errors"
	"fmt"
)

// ErrTooLong is returned by a Tokenizer when a text has more tokens than the model's maximum
// and the caller asked for no truncation.
var ErrTooLong = errors.New("tokenize: input longer than the model's maximum")

// ErrNoPairs is returned by EncodePairs when the tokenizer has no pair template this package
// can read (ParseTemplate's error says why).
var ErrNoPairs = errors.New("tokenize: the tokenizer cannot join pairs of texts")

// TooLongError says which input was too long and by how much. It wraps ErrTooLong.
type TooLongError struct {
	Index  int // position of the input in the request
	Tokens int // tokens the input has, special tokens included
	Max    int // the model's maximum
}

func (e *TooLongError) Error() string {
	return fmt.Sprintf("tokenize: input %d has %d tokens, more than the model's maximum of %d",
		e.Index, e.Tokens, e.Max)
}

// Unwrap lets errors.Is match ErrTooLong.
func (e *TooLongError) Unwrap() error { return ErrTooLong }

// Encoding is one text's token ids, special tokens included. The slices belong to the
// Encoding: callers may keep them, and must not modify them.
type Encoding struct {
	IDs     []int64
	TypeIDs []int64 // same length as IDs; zeros when the tokenizer produces none
	// Truncated is true when the text had more tokens than the maximum and was cut.
	Truncated bool
}

// Len is the number of tokens.
func (e Encoding) Len() int { return len(e.IDs) }

// Options control one Encode call.
type Options struct {
	// Truncate cuts texts to the maximum length; when false a longer text is an error
	// (*TooLongError).
	Truncate bool
}

// Token is one token of a text as a person reads it: what /tokenize shows.
type Token struct {
	ID int64
	// Text is the vocabulary's token, e.g. "[CLS]", "hello" or "##ing" (normalized: a
	// lower-casing tokenizer gives "hello" for "Hello").
	Text string
	// Special is true for tokens the tokenizer added around the text, such as [CLS] and [SEP].
	Special bool
	// Start and Stop are byte offsets into the text: text[Start:Stop] is where the token came
	// from. Both are 0 for special tokens.
	Start, Stop int
	// Second is true, in a pair of texts, for the tokens of the second text, into which
	// their offsets point.
	Second bool
}

// Tokenizer encodes texts. Implementations must be safe for concurrent use.
type Tokenizer interface {
	// Encode encodes each text with the model's special tokens.
	Encode(texts []string, opts Options) ([]Encoding, error)
	// EncodePairs encodes each pair of texts as one input, as HF tokenizers encodes
	// tokenizer(a, b): the texts cut together to the maximum length by "longest_first", joined
	// by the tokenizer's pair template (Template.EncodePair), type ids from it. An error names
	// the pair by its index (*TooLongError) or says the tokenizer cannot join pairs.
	EncodePairs(pairs []Pair, opts Options) ([]Encoding, error)
	// Tokens encodes one text for display, with or without the special tokens, cut at the
	// maximum length as Encode with Truncate does. The slice belongs to the caller.
	Tokens(text string, addSpecial bool) ([]Token, error)
	// MaxLength is the most tokens one encoding may have.
	MaxLength() int
	// Close releases native resources; no Encode may be running or start after it.
	Close() error
}

// Batch is a group of encodings in row-major order, what a runtime.Runner consumes: either
// padded (Pad), Rows × Cols padded with zeros to the longest row, or packed (Pack), one row
// of every encoding's tokens end to end.
type Batch struct {
	Rows, Cols    int
	InputIDs      []int64
	AttentionMask []int64
	TypeIDs       []int64
	// Lengths are the unpadded lengths of each row or, packed, of each encoding in the row.
	Lengths []int
	// Packed is true for Pack's batches: the attention mask numbers the encodings 1, 2, …
	// instead of marking tokens with 1 and padding with 0.
	Packed bool
}

// Tokens is the number of real (unpadded) tokens in the batch.
func (b *Batch) Tokens() int {
	n := 0
	for _, l := range b.Lengths {
		n += l
	}
	return n
}

// Pad packs encodings into one Batch padded to the longest. Encodings with zero tokens
// get one padding column so that every row has a valid shape; their mask is all zeros.
func Pad(encs []Encoding) Batch {
	cols := 1
	for _, e := range encs {
		cols = max(cols, e.Len())
	}
	n := len(encs) * cols
	buf := make([]int64, 3*n) // one allocation for the three tensors
	b := Batch{
		Rows:          len(encs),
		Cols:          cols,
		InputIDs:      buf[:n:n],
		AttentionMask: buf[n : 2*n : 2*n],
		TypeIDs:       buf[2*n:],
		Lengths:       make([]int, len(encs)),
	}
	for i, e := range encs {
		row := i * cols
		copy(b.InputIDs[row:], e.IDs)
		copy(b.TypeIDs[row:], e.TypeIDs)
		for j := range e.IDs {
			b.AttentionMask[row+j] = 1
		}
		b.Lengths[i] = e.Len()
	}
	return b
}

// Pack puts encodings end to end into one row with no padding: Rows 1, Cols the sum of their
// lengths (at least 1, a padding column when every encoding is empty). The attention mask
// numbers the encodings, 1 for the first one's tokens, 2 for the second's, and so on: a graph
// built for it (see runtime/ort's packing metadata) lets each token attend to its own
// encoding's tokens only and restarts positions at each encoding, so every encoding's outputs
// are what it gets alone, for one run's fixed cost and no padding.
func Pack(encs []Encoding) Batch {
	cols := 0
	for _, e := range encs {
		cols += e.Len()
	}
	cols = max(cols, 1)
	buf := make([]int64, 3*cols)
	b := Batch{
		Rows:          1,
		Cols:          cols,
		InputIDs:      buf[:cols:cols],
		AttentionMask: buf[cols : 2*cols : 2*cols],
		TypeIDs:       buf[2*cols:],
		Lengths:       make([]int, len(encs)),
		Packed:        true,
	}
	at := 0
	for i, e := range encs {
		copy(b.InputIDs[at:], e.IDs)
		copy(b.TypeIDs[at:], e.TypeIDs)
		for j := range e.IDs {
			b.AttentionMask[at+j] = int64(i + 1)
		}
		at += e.Len()
		b.Lengths[i] = e.Len()
	}
	return b
}
