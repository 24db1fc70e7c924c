package models

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/ortserve/ortserve/runtime"
	"github.com/ortserve/ortserve/tokenize"
)

// ErrPooledOnly is EmbedAll's error for a model whose graph output is already one vector per
// text (pooling none): it has no per-token vectors to give.
var ErrPooledOnly = errors.New("models: the model's output is pooled: it gives no per-token vectors")

// PooledOnlyError names the model EmbedAll could not serve. It wraps ErrPooledOnly.
type PooledOnlyError struct{ Model, Output string }

func (e *PooledOnlyError) Error() string {
	return fmt.Sprintf("models: model %q gives pooled vectors only: its output %q is one vector per text", e.Model, e.Output)
}

func (e *PooledOnlyError) Unwrap() error { return ErrPooledOnly }

// Tokenize returns each text's tokens for display, with or without the special tokens, cut at
// the model's maximum length. It runs no version: the tokenizer is the model's.
func (m *Model) Tokenize(texts []string, addSpecial bool) ([][]tokenize.Token, error) {
	out := make([][]tokenize.Token, len(texts))
	for i, text := range texts {
		toks, err := m.tok.Tokens(text, addSpecial)
		if err != nil {
			return nil, fmt.Errorf("models: %s: input %d: %w", m.Config.Name, i, err)
		}
		out[i] = toks
	}
	return out, nil
}

// Dimension is the length of the model's output vector: the hidden size of an embed model,
// the number of labels of a classify model. It is learned from the check of a version at its
// load (Model.checkVersion): 0 until one has loaded, as when every version is lazy.
func (m *Model) Dimension() int { return int(m.dim.Load()) }

// Decode turns each list of token ids back into text with the model's tokenizer, without the
// special tokens when skipSpecial. An id outside the vocabulary is a
// *tokenize.UnknownIDError, wrapped with the list's index.
func (m *Model) Decode(ids [][]int64, skipSpecial bool) ([]string, error) {
	out := make([]string, len(ids))
	for i, seq := range ids {
		text, err := m.tok.Decode(seq, skipSpecial)
		if err != nil {
			return nil, fmt.Errorf("models: %s: ids %d: %w", m.Config.Name, i, err)
		}
		out[i] = text
	}
	return out, nil
}

// EmbedAll returns, per text, the graph's per-token vectors before pooling (TEI's
// /embed_all): one vector per token, special tokens included, not normalized. A model whose
// output is already pooled fails with a *PooledOnlyError. version is as Embed's. The
// vectors are the caller's; they are never cached (answer.uncached).
func (m *Model) EmbedAll(ctx context.Context, version string, texts []string, o EmbedOptions) ([][][]float32, Stats, error) {
	if m.Config.Task == TaskEmbed && m.Config.Pooling == PoolingNone {
		return nil, Stats{}, &PooledOnlyError{Model: m.Config.Name, Output: m.Config.Output}
	}
	texts, err := m.WithPrompt(texts, o)
	if err != nil {
		return nil, Stats{}, err
	}
	a := answer{cut: tokenize.Options{Truncate: o.Truncate, Left: o.Left}, uncached: true}
	var hidden int
	flat, st, err := m.run(ctx, version, TaskEmbed, singles(texts), a, func(t runtime.Tensor, e tokenize.Encoding) []float32 {
		hidden = int(t.Shape[len(t.Shape)-1])
		return slices.Clone(t.Data[:e.Len()*hidden])
	})
	if err != nil {
		return nil, st, err
	}
	out := make([][][]float32, len(flat))
	for i, f := range flat {
		out[i] = make([][]float32, len(f)/max(hidden, 1))
		for j := range out[i] {
			out[i][j] = f[j*hidden : (j+1)*hidden : (j+1)*hidden]
		}
	}
	return out, st, nil
}
