package models

import (
	"fmt"

	"github.com/ortserve/ortserve/tokenize"
)

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
