//go:build !(cgo && ort)

// Package hf is the HuggingFace tokenizer binding: a tokenizer.json read through
// github.com/daulet/tokenizers (Rust, via cgo). This build has neither cgo nor the ort
// build tag, so Load returns ErrNotBuilt.
package hf

import (
	"errors"

	"github.com/ortserve/ortserve/tokenize"
)

// ErrNotBuilt is Load's error in a binary built without the tokenizer library.
var ErrNotBuilt = errors.New("hf: this binary was built without the tokenizer library (it needs cgo and -tags ort): build it with `make build`")

// Tokenizer encodes with a tokenizer.json; in this build, none can be loaded.
type Tokenizer struct{ tokenize.Tokenizer }

// Load returns ErrNotBuilt.
func Load(string, int) (*Tokenizer, error) { return nil, ErrNotBuilt }
