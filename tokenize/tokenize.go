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

// ErrNoLeft is returned by Encode when asked to cut a text on the left and the tokenizer has
// no template this package can read (ParseTemplate's error says why): its special tokens
// cannot be placed around a text cut here.
var ErrNoLeft = errors.New("tokenize: the tokenizer cannot cut texts on the left")

// UnknownIDError says a token id given to Decode is not in the vocabulary.
type UnknownIDError struct {
	ID    int64
	Vocab int // the ids run from 0 to Vocab-1
}

func (e *UnknownIDError) Error() string {
	return fmt.Sprintf("tokenize: token id %d is not in the vocabulary (ids 0 to %d)", e.ID, e.Vocab-1)
}

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
	// Left cuts a text's first tokens rather than its last, keeping its end (TEI's
	// truncation_direction "left"); a pair keeps the end of each of its texts.
	Left bool
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
	// Decode turns token ids back into text, without the special tokens when skipSpecial. An
	// id outside the vocabulary is an *UnknownIDError.
	Decode(ids []int64, skipSpecial bool) (string, error)
	// MaxLength is the most tokens one encoding may have.
	MaxLength() int
	// Close releases native resources; no Encode may be running or start after it.
	Close() error
}

// Batch is a group of encodings in row-major order, what a runtime.Runner consumes: either
// padded (Pad), Rows × Cols padded with zeros to the longest row, or packed (Pack, PackRows),
// rows of several encodings' tokens end to end, padded with zeros to the fullest row.
type Batch struct {
	Rows, Cols    int
	InputIDs      []int64
	AttentionMask []int64
	TypeIDs       []int64
	// Lengths are the unpadded lengths of each row or, packed, of each encoding.
	Lengths []int
	// Packed is true for Pack's and PackRows' batches: in each row the attention mask numbers
	// the encodings 1, 2, … instead of marking tokens with 1, and padding with 0 either way.
	Packed bool
	// Starts are, packed, where each encoding's first token is in the batch's Rows × Cols
	// tokens, row-major; Lengths[i] tokens from Starts[i] are encoding i's.
	Starts []int
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
	row := make([]int, len(encs))
	for i := range row {
		row[i] = i
	}
	return PackRows(encs, [][]int{row})
}

// PackRows packs encodings into several rows, as Pack packs them into one: rows[r] lists the
// indices of the encodings that go end to end in row r, and every index appears once. Cols is
// the fullest row's length (at least 1); shorter rows are padded with zeros. The mask numbers
// each row's encodings from 1, so that a row's attention, which costs the square of its
// length, spans its own encodings only. Lengths and Starts stay in the order of encs.
func PackRows(encs []Encoding, rows [][]int) Batch {
	cols := 1
	for _, r := range rows {
		n := 0
		for _, i := range r {
			n += encs[i].Len()
		}
		cols = max(cols, n)
	}
	n := len(rows) * cols
	buf := make([]int64, 3*n)
	b := Batch{
		Rows:          len(rows),
		Cols:          cols,
		InputIDs:      buf[:n:n],
		AttentionMask: buf[n : 2*n : 2*n],
		TypeIDs:       buf[2*n:],
		Lengths:       make([]int, len(encs)),
		Packed:        true,
		Starts:        make([]int, len(encs)),
	}
	for r, row := range rows {
		at := r * cols
		for k, i := range row {
			e := encs[i]
			copy(b.InputIDs[at:], e.IDs)
			copy(b.TypeIDs[at:], e.TypeIDs)
			for j := range e.IDs {
				b.AttentionMask[at+j] = int64(k + 1)
			}
			b.Starts[i], b.Lengths[i] = at, e.Len()
			at += e.Len()
		}
	}
	return b
}
