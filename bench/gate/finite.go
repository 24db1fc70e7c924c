package gate

import (
	"fmt"
	"math"
)

// A version whose output holds a NaN or an infinity is broken, not unsupported: a damaged or
// badly quantized model gives NaN on every input, and its accuracy on the other examples says
// nothing. Such a candidate fails the gate with the count in the report (the "finite" check);
// only a baseline that gives them is an error, since the gate has nothing to measure against.

// nonFinite records the rows of a run that hold a NaN or an infinity.
type nonFinite struct {
	bad   []bool // per row; nil when every row is finite
	count int    // rows with either
	nan   int    // of those, rows with a NaN
	first int    // the first such row; -1 for none
}

// scanFinite finds the rows of rows that hold a NaN or an infinity.
func scanFinite(rows [][]float32) nonFinite {
	f := nonFinite{first: -1}
	for i, row := range rows {
		hasNaN, hasInf := false, false
		for _, x := range row {
			hasNaN = hasNaN || math.IsNaN(float64(x))
			hasInf = hasInf || math.IsInf(float64(x), 0)
		}
		if !hasNaN && !hasInf {
			continue
		}
		if f.bad == nil {
			f.bad, f.first = make([]bool, len(rows)), i
		}
		f.bad[i] = true
		f.count++
		if hasNaN {
			f.nan++
		}
	}
	return f
}

// at reports whether row i holds a NaN or an infinity.
func (f nonFinite) at(i int) bool { return f.bad != nil && f.bad[i] }

// String says what the rows held, and on how many of them: "NaN on 3 of 10 examples (first:
// example 4)".
func (f nonFinite) String() string {
	what := "NaN"
	switch {
	case f.nan == 0:
		what = "an infinity"
	case f.nan < f.count:
		what = fmt.Sprintf("NaN or an infinity (%d NaN)", f.nan)
	}
	return fmt.Sprintf("%s on %d of %d examples (first: example %d)", what, f.count, len(f.bad), f.first)
}

// baselineFinite is the error for a baseline whose outputs are not all numbers; nil when
// they are.
func baselineFinite(version string, f nonFinite) error {
	if f.count == 0 {
		return nil
	}
	return fmt.Errorf("gate: %s gave %s: the gate needs a baseline whose outputs are numbers to measure against: gate against another version with --baseline",
		role("baseline", version), f)
}

// checkFinite fails the verdict when the candidate's outputs are not all numbers, and counts
// the examples in the report.
func (r *Report) checkFinite(f nonFinite) {
	if f.count == 0 {
		return
	}
	r.Candidate.NonFinite = f.count
	r.Verdict.add("finite", false, fmt.Sprintf("the candidate gave %s: a version whose outputs are not numbers fails whatever the budget", f))
}
