package gate

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/ortserve/ortserve/bench/report"
)

// The gate's main comparison runs every version on the same fixed chunks, one at a time, so
// that its numbers can be reproduced. A server does not: it batches each text with whatever
// else is queued. A version whose output for a text depends on its batch-mates (dynamic int8
// computes one activation scale per batch) then answers the same text differently from one
// request to the next. Served measures that: the same texts, sent again through the
// batcher under concurrency, against the same version's fixed-chunk answers.

// The tolerances under which a version counts as batch-invariant: what float arithmetic in
// a differently shaped batch moves (fp32 stays within them), far below what dynamic
// activation scales move.
const (
	// InvariantMinCosine is the least cosine between a text's served and fixed-chunk
	// embeddings (embed).
	InvariantMinCosine = 0.9999
	// InvariantMaxProbDelta is the largest change in any class probability a text may show
	// (classify), besides keeping its label.
	InvariantMaxProbDelta = 1e-4
)

// Served is the served-path variability of the versions a report compares.
type Served struct {
	// Method says how the served answers were obtained, in words.
	Method string `json:"method"`
	// Concurrency is how many requests were in flight at once.
	Concurrency int `json:"concurrency"`
	// Required is whether the candidate had to be batch-invariant to pass
	// (a "batch_invariance" check in the verdict); otherwise Served is informational.
	Required bool `json:"required"`
	// Versions has one entry per version measured: the baseline, then the candidate.
	Versions []ServedVersion `json:"versions"`
}

// ServedVersion is how far one version's served answers moved from its fixed-chunk answers.
type ServedVersion struct {
	Version string `json:"version"`
	// N is how many texts were compared.
	N int `json:"n"`
	// LabelFlips counts the texts whose predicted class differs, and MaxProbDelta is the
	// largest |Δp| of any class on any text (classify); all four are nil when no text gave
	// numbers both ways.
	LabelFlips   *int     `json:"label_flips,omitempty"`
	MaxProbDelta *float64 `json:"max_prob_delta,omitempty"`
	// CosineMin and CosineP1 are the lowest and the 1st percentile of the cosine between a
	// text's two embeddings (embed).
	CosineMin *float64 `json:"cosine_min,omitempty"`
	CosineP1  *float64 `json:"cosine_p1,omitempty"`
	// NonFinite counts the texts whose served or fixed-chunk answer held a NaN or an
	// infinity: they are left out of the numbers above, and a version with any is not
	// batch-invariant.
	NonFinite int `json:"non_finite,omitempty"`
	// Invariant is whether every text stayed within InvariantMinCosine (embed), or kept its
	// label and InvariantMaxProbDelta (classify).
	Invariant bool `json:"batch_invariant"`
	// ElapsedSeconds and ItemsPerSecond time the served pass; absent when not timed.
	ElapsedSeconds float64 `json:"elapsed_s,omitempty"`
	ItemsPerSecond float64 `json:"items_per_s,omitempty"`
}

// ServedVariability compares one version's served answers with its fixed-chunk answers,
// text by text: probability rows for TaskClassify (the first largest is the label),
// embeddings for TaskEmbed (cosines, so they need not be normalized). Both must have one row
// per text, in the same order; elapsed (zero: not timed) is the served pass's wall time.
// Texts whose answers hold a NaN or an infinity are counted (NonFinite), not compared.
func ServedVariability(task, version string, fixed, served [][]float32, elapsed time.Duration) (ServedVersion, error) {
	v := ServedVersion{Version: version, N: len(fixed)}
	who := role("version", version)
	if len(fixed) == 0 {
		return v, fmt.Errorf("gate: %s has no fixed-chunk answers to compare its served answers with", who)
	}
	if len(served) != len(fixed) {
		return v, fmt.Errorf("gate: %s has %d served answers for %d fixed-chunk ones: serve the same texts, in order", who, len(served), len(fixed))
	}
	for i := range fixed {
		if len(fixed[i]) == 0 || len(served[i]) != len(fixed[i]) {
			return v, fmt.Errorf("gate: %s's answers to text %d have %d and %d values: compare answers of the same version", who, i, len(fixed[i]), len(served[i]))
		}
	}
	fixedBad, servedBad := scanFinite(fixed), scanFinite(served)
	var finite []int // the texts whose two answers are all numbers
	for i := range fixed {
		if fixedBad.at(i) || servedBad.at(i) {
			v.NonFinite++
		} else {
			finite = append(finite, i)
		}
	}
	switch task {
	case TaskClassify:
		if len(finite) == 0 {
			break // nothing to compare
		}
		flips, most := 0, 0.0
		for _, i := range finite {
			if argmax(fixed[i]) != argmax(served[i]) {
				flips++
			}
			for j := range fixed[i] {
				most = max(most, math.Abs(float64(fixed[i][j])-float64(served[i][j])))
			}
		}
		v.LabelFlips, v.MaxProbDelta = &flips, &most
		v.Invariant = flips == 0 && most < InvariantMaxProbDelta && v.NonFinite == 0
	case TaskEmbed:
		if len(finite) == 0 {
			break
		}
		cos := make([]float64, 0, len(finite))
		for _, i := range finite {
			cos = append(cos, cosine(fixed[i], served[i], l2(fixed[i]), l2(served[i])))
		}
		slices.Sort(cos)
		lo, p1 := cos[0], quantile(cos, 0.01)
		v.CosineMin, v.CosineP1 = &lo, &p1
		v.Invariant = lo >= InvariantMinCosine && v.NonFinite == 0
	default:
		return v, fmt.Errorf("gate: task %q: served variability is measured for %q and %q", task, TaskClassify, TaskEmbed)
	}
	if elapsed > 0 {
		v.ElapsedSeconds = elapsed.Seconds()
		v.ItemsPerSecond = float64(v.N) / elapsed.Seconds()
	}
	return v, nil
}

// argmax is the index of the first largest value.
func argmax(row []float32) int {
	best := 0
	for j, x := range row {
		if x > row[best] {
			best = j
		}
	}
	return best
}

func l2(v []float32) float64 {
	s := 0.0
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	return math.Sqrt(s)
}

// AddServed puts s in the report. When s.Required, the candidate's entry (the one named
// like the report's candidate) becomes a "batch_invariance" check of the verdict; otherwise
// the verdict is unchanged and a version that is not batch-invariant gets a note.
func (r *Report) AddServed(s *Served) error {
	if s == nil {
		return nil
	}
	if r.Served != nil {
		return fmt.Errorf("gate: the report already has served-path results")
	}
	var cand *ServedVersion
	for i := range s.Versions {
		if s.Versions[i].Version == r.Candidate.Version {
			cand = &s.Versions[i]
		}
	}
	if s.Required && cand == nil {
		return fmt.Errorf("gate: batch invariance is required of %s, but the served pass did not measure it", role("candidate", r.Candidate.Version))
	}
	r.Served = s
	if s.Required {
		r.Verdict.add("batch_invariance", cand.Invariant, "batch invariance: "+invarianceDetail(r.Task, cand))
		r.Verdict.decide()
	}
	for _, v := range s.Versions {
		if v.NonFinite > 0 && !(s.Required && v.Version == r.Candidate.Version) {
			r.Notes = append(r.Notes, fmt.Sprintf("%s: %s.", v.Version, invarianceDetail(r.Task, &v)))
			continue
		}
		if !v.Invariant && !(s.Required && v.Version == r.Candidate.Version) {
			r.Notes = append(r.Notes, fmt.Sprintf("%s is not batch-invariant: %s. The gate's own numbers use fixed chunks; served under load, its answers vary with their batch-mates (informational: --require-batch-invariance makes it a check).",
				v.Version, invarianceDetail(r.Task, &v)))
		}
	}
	return nil
}

// invarianceDetail is one version's served-path result in words, against the tolerances.
func invarianceDetail(task string, v *ServedVersion) string {
	if v.NonFinite > 0 {
		return fmt.Sprintf("served through the batcher or in fixed chunks, %d of %d texts gave NaN or an infinity", v.NonFinite, v.N)
	}
	if task == TaskClassify {
		return fmt.Sprintf("served through the batcher, %d of %d labels flipped and max |Δp| is %s (batch-invariant: no flips and < %s)",
			deref2(v.LabelFlips), v.N, sci(deref(v.MaxProbDelta)), sci(InvariantMaxProbDelta))
	}
	return fmt.Sprintf("served through the batcher, the lowest cosine to its fixed-chunk answers is %s, p1 %s (batch-invariant: ≥ %s)",
		cos6(deref(v.CosineMin)), cos6(deref(v.CosineP1)), cos6(InvariantMinCosine))
}

func deref2(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

// sci formats a small difference: 0, or two significant digits.
func sci(x float64) string {
	if x == 0 {
		return "0"
	}
	return fmt.Sprintf("%.2g", x)
}

// cos6 formats a cosine with the digits that tell 0.9999 from 0.99999.
func cos6(x float64) string { return report.Signed(x, 6) }
