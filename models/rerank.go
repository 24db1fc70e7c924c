package models

import (
	"context"
	"math"

	"github.com/ortserve/ortserve/runtime"
	"github.com/ortserve/ortserve/tokenize"
)

// RerankOptions control Rerank.
type RerankOptions struct {
	// Truncate cuts a pair over the maximum length, the longer text first (HF's
	// longest_first); when false such a pair is a *tokenize.TooLongError.
	Truncate bool
	// Left cuts on the left: each text of a cut pair keeps its end.
	Left bool
	// Raw returns the logit; by default its sigmoid, a score in (0, 1), as TEI's /rerank.
	Raw bool
}

// Rerank scores each text against query with a cross-encoder: each (query, text) pair is
// tokenized as one input by the tokenizer's pair template and run through the same
// batcher as every other request; its score is the model's one logit, or its sigmoid. The
// scores are in texts' order (sorting is the caller's) and the caller's, even those served
// from the response cache, whose key holds both texts. version is as Embed's.
func (m *Model) Rerank(ctx context.Context, version, query string, texts []string, o RerankOptions) ([]float32, Stats, error) {
	in := make([]Input, len(texts))
	for i, t := range texts {
		in[i] = Input{Text: query, Second: t, Pair: true}
	}
	a := answer{cut: tokenize.Options{Truncate: o.Truncate, Left: o.Left}, variant: o.Raw}
	rows, st, err := m.run(ctx, version, TaskRerank, in, a, func(t runtime.Tensor, _ tokenize.Encoding) []float32 {
		s := t.Data[0]
		if !o.Raw {
			s = Sigmoid(s)
		}
		return []float32{s}
	})
	if err != nil {
		return nil, st, err
	}
	scores := make([]float32, len(rows))
	for i, r := range rows {
		scores[i] = r[0]
	}
	return scores, st, nil
}

// Sigmoid is 1 / (1 + e^-x), computed in float64.
func Sigmoid(x float32) float32 {
	return float32(1 / (1 + math.Exp(-float64(x))))
}
