package gate

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// Options tunes the bootstrap behind the accuracy-drop interval. The zero value is the
// default: 2000 resamples, seed 1, 95% confidence.
type Options struct {
	// Resamples is how many bootstrap resamples estimate the interval; 2000 when zero, and
	// at least 100 otherwise, since the interval's ends are read off the resamples' tails.
	Resamples int
	// Seed seeds the resampling, so that a report can be reproduced; 1 when zero.
	Seed uint64
	// Confidence is the interval's coverage, a fraction such as 0.95; 0.95 when zero.
	Confidence float64
}

// Defaults of Options.
const (
	DefaultResamples  = 2000
	DefaultSeed       = 1
	DefaultConfidence = 0.95
)

// pcgStream is the second word of the bootstrap's PCG state; any constant will do, and a
// fixed one keeps reports reproducible from Seed alone.
const pcgStream = 0x67617465 // "gate"

// resolve fills in defaults and checks the rest.
func (o Options) resolve() (Options, error) {
	if o.Resamples == 0 {
		o.Resamples = DefaultResamples
	}
	if o.Seed == 0 {
		o.Seed = DefaultSeed
	}
	if o.Confidence == 0 {
		o.Confidence = DefaultConfidence
	}
	switch {
	case o.Resamples < 100:
		return o, fmt.Errorf("gate: %d bootstrap resamples are too few to read an interval from: use at least 100 (the default is %d)", o.Resamples, DefaultResamples)
	case !(o.Confidence > 0 && o.Confidence < 1):
		return o, fmt.Errorf("gate: confidence %g is not a fraction between 0 and 1: write 0.95 for a 95%% interval", o.Confidence)
	}
	return o, nil
}

// pairedBootstrap estimates the interval of the drop in a per-example metric between two
// versions, in percentage points. diff[i] is the baseline's score on example i minus the
// candidate's (for correctness: -1, 0 or 1). Each resample draws len(diff) examples with
// replacement and both versions are scored on the same draw, which is what makes the
// interval paired: the examples both get right or both get wrong cancel out, and only the
// ones where the versions differ widen it.
func pairedBootstrap(diff []int8, o Options) (low, high float64) {
	n := len(diff)
	if !slices.ContainsFunc(diff, func(d int8) bool { return d != 0 }) {
		return 0, 0 // every resample is exactly zero
	}
	rng := rand.New(rand.NewPCG(o.Seed, pcgStream))
	drops := make([]float64, o.Resamples)
	for r := range drops {
		sum := 0
		for range n {
			sum += int(diff[rng.IntN(n)])
		}
		drops[r] = 100 * float64(sum) / float64(n)
	}
	slices.Sort(drops)
	tail := (1 - o.Confidence) / 2
	return quantile(drops, tail), quantile(drops, 1-tail)
}

// quantile is the q-quantile of sorted xs, interpolating linearly between order statistics
// (type 7, the default of R and NumPy).
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	h := q * float64(len(sorted)-1)
	lo := int(math.Floor(h))
	if lo >= len(sorted)-1 {
		return sorted[len(sorted)-1]
	}
	return sorted[lo] + (h-float64(lo))*(sorted[lo+1]-sorted[lo])
}

// Distribution summarizes a per-example quantity over the dataset.
type Distribution struct {
	Mean float64 `json:"mean"`
	Min  float64 `json:"min"`
	P1   float64 `json:"p1"`
	P5   float64 `json:"p5"`
	P50  float64 `json:"p50"`
	P95  float64 `json:"p95"`
	Max  float64 `json:"max"`
}

// distribution summarizes xs, which it leaves unchanged.
func distribution(xs []float64) Distribution {
	s := slices.Clone(xs)
	slices.Sort(s)
	sum := 0.0
	for _, x := range s {
		sum += x
	}
	return Distribution{
		Mean: sum / float64(len(s)),
		Min:  s[0],
		P1:   quantile(s, 0.01),
		P5:   quantile(s, 0.05),
		P50:  quantile(s, 0.50),
		P95:  quantile(s, 0.95),
		Max:  s[len(s)-1],
	}
}
