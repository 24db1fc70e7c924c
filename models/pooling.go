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
