package models

import (
	"math"
	"slices"

	"github.com/ortserve/ortserve/runtime"
)

// The pipelines' arithmetic: pooling hidden states to one vector, L2 normalization, softmax.

// Pool reduces hidden states t ([seq, hidden], of which the first n rows are real tokens,
// padding on the right) to one vector; with PoolingNone, t is that vector ([hidden]).
func Pool(p Pooling, t runtime.Tensor, n int) []float32 {
	hidden := int(t.Shape[len(t.Shape)-1])
	out := make([]float32, hidden)
	switch {
	case p == PoolingNone:
		copy(out, t.Data[:hidden])
		return out
	case n <= 0:
		return out
	case p == PoolingCLS:
		copy(out, t.Data[:hidden])
		return out
	case p == PoolingLastToken:
		copy(out, t.Data[(n-1)*hidden:n*hidden])
		return out
	case p == PoolingSplade:
		return PoolSplade(t, n)
	case p == PoolingMax:
		copy(out, t.Data[:hidden])
		for tok := 1; tok < n; tok++ {
			for j, x := range t.Data[tok*hidden : (tok+1)*hidden] {
				out[j] = max(out[j], x)
			}
		}
		return out
	}
	// Accumulate in float64: sums over hundreds of tokens lose bits in float32.
	acc := make([]float64, hidden)
	for tok := range n {
		row := t.Data[tok*hidden : (tok+1)*hidden]
		for j, x := range row {
			acc[j] += float64(x)
		}
	}
	for j := range out {
		out[j] = float32(acc[j] / float64(n))
	}
	return out
}

// PoolSplade is sentence-transformers' SpladePooling(max, relu) of per-token logits t
// ([seq, vocab], the first n rows real tokens): per vocabulary entry, the largest
// log(1 + relu(x)) over the real tokens. log1p is monotonic, so it takes the largest logit
// first and the logarithm once per entry, not once per token.
func PoolSplade(t runtime.Tensor, n int) []float32 {
	vocab := int(t.Shape[len(t.Shape)-1])
	out := make([]float32, vocab)
	for tok := range n {
		for j, x := range t.Data[tok*vocab : (tok+1)*vocab] {
			out[j] = max(out[j], x) // out starts at 0: relu
		}
	}
	for j, x := range out {
		if x > 0 {
			out[j] = float32(math.Log1p(float64(x)))
		}
	}
	return out
}

// SparseValue is one non-zero entry of a sparse embedding: a vocabulary index and its
// weight, as TEI's /embed_sparse writes it.
type SparseValue struct {
	Index uint32  `json:"index"`
	Value float32 `json:"value"`
}

// Sparse lists v's non-zero entries by ascending index; none is an empty list, not nil.
func Sparse(v []float32) []SparseValue {
	out := []SparseValue{}
	for i, x := range v {
		if x != 0 {
			out = append(out, SparseValue{Index: uint32(i), Value: x})
		}
	}
	return out
}

// Normalize scales v to unit L2 norm in place (a zero vector stays zero).
func Normalize(v []float32) {
	var ss float64
	for _, x := range v {
		ss += float64(x) * float64(x)
	}
	norm := max(math.Sqrt(ss), 1e-12)
	for i := range v {
		v[i] = float32(float64(v[i]) / norm)
	}
}

// Softmax turns logits into probabilities in place.
func Softmax(v []float32) {
	if len(v) == 0 {
		return
	}
	m := slices.Max(v)
	var sum float64
	for i, x := range v {
		e := math.Exp(float64(x - m))
		v[i] = float32(e)
		sum += e
	}
	for i := range v {
		v[i] = float32(float64(v[i]) / sum)
	}
}
