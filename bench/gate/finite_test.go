package gate_test

import (
	"bytes"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/ortserve/ortserve/bench/gate"
)

var (
	nan = float32(math.NaN())
	inf = float32(math.Inf(1))
)

// A candidate whose outputs hold NaN or an infinity fails the gate, with the examples
// counted, each scored wrong; a baseline that does is an error, since there is nothing to
// measure against.
func TestClassifyNonFinite(t *testing.T) {
	ds := binary(t, 4)
	for _, tt := range []struct {
		name       string
		base, cand map[int][]float32 // rows replaced in a run that gets every example right
		wantErr    []string
		wantBad    int    // the candidate's NonFinite
		wantDetail string // the "finite" check's; "" for no such check
		wantRight  int    // examples the candidate gets right
	}{
		{name: "all numbers", wantRight: 4},
		{name: "a NaN", cand: map[int][]float32{2: {nan, 0.5}}, wantBad: 1, wantRight: 3,
			wantDetail: "the candidate gave NaN on 1 of 4 examples (first: example 2): a version whose outputs are not numbers fails whatever the budget"},
		{name: "an infinity", cand: map[int][]float32{1: {inf, 0}}, wantBad: 1, wantRight: 3,
			wantDetail: "an infinity on 1 of 4 examples (first: example 1)"},
		{name: "both", cand: map[int][]float32{3: {inf, 0}, 1: {0.5, nan}}, wantBad: 2, wantRight: 2,
			wantDetail: "NaN or an infinity (1 NaN) on 2 of 4 examples (first: example 1)"},
		{name: "every example NaN", cand: map[int][]float32{0: {nan, nan}, 1: {nan, nan}, 2: {nan, nan}, 3: {nan, nan}}, wantBad: 4,
			wantDetail: "NaN on 4 of 4 examples (first: example 0)"},
		{name: "the baseline", base: map[int][]float32{3: {nan, 0.5}}, wantErr: []string{`baseline "fp32" gave NaN on 1 of 4 examples (first: example 3)`, "--baseline"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			base, cand := predict("fp32", answers(ds, never)), predict("int8", answers(ds, never))
			for i, row := range tt.base {
				base.Probs[i] = row
			}
			for i, row := range tt.cand {
				cand.Probs[i] = row
			}
			r := checkFinite(t, tt.wantErr, tt.wantBad, tt.wantDetail)(gate.Classify(ds, base, cand, gate.Budget{MaxDrop: 100}, gate.Options{}))
			if r == nil {
				return
			}
			if got := *r.Candidate.Accuracy * 4; got != float64(tt.wantRight) {
				t.Errorf("the candidate got %v right, want %d", got, tt.wantRight)
			}
			// Each bad example is predicted "(NaN/Inf)" in the confusion matrix, and is among
			// the worst with the largest change a probability can make.
			c := r.Candidate.Confusion
			if col := slices.Index(c.Labels, "(NaN/Inf)"); (col >= 0) != (tt.wantBad > 0) || (col >= 0 && c.Counts[0][col]+c.Counts[1][col] != tt.wantBad) {
				t.Errorf("confusion %v %v: want %d in a (NaN/Inf) column", c.Labels, c.Counts, tt.wantBad)
			}
			for i := range tt.cand {
				j := slices.IndexFunc(r.Comparison.Worst, func(d gate.ExampleDiff) bool { return d.Index == i })
				if j < 0 || r.Comparison.Worst[j].Candidate != "(NaN/Inf)" || *r.Comparison.Worst[j].ProbDelta != 1 {
					t.Errorf("example %d not among the worst as (NaN/Inf) with |Δp| 1: %+v", i, r.Comparison.Worst)
				}
			}
			if d := r.Comparison.ProbDelta; math.IsNaN(d.Mean) || math.IsNaN(d.Max) {
				t.Errorf("|Δp| distribution %+v holds NaN", d)
			}
		})
	}
}

func TestEmbedNonFinite(t *testing.T) {
	ds := threeLabels(t, 30)
	good := clustered(ds, 8, 0.1, 1)
	for _, tt := range []struct {
		name       string
		base, cand map[int][]float32
		wantErr    []string
		wantBad    int
		wantDetail string
	}{
		{name: "all numbers"},
		{name: "a NaN", cand: map[int][]float32{4: {1, nan, 0, 0, 0, 0, 0, 0}}, wantBad: 1, wantDetail: "NaN on 1 of 30 examples (first: example 4)"},
		{name: "an infinity", cand: map[int][]float32{7: {inf, 0, 0, 0, 0, 0, 0, 0}}, wantBad: 1, wantDetail: "an infinity on 1 of 30 examples (first: example 7)"},
		{name: "the baseline", base: map[int][]float32{0: {nan, 0, 0, 0, 0, 0, 0, 0}}, wantErr: []string{`baseline "fp32" gave NaN on 1 of 30 examples (first: example 0)`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			base, cand := slices.Clone(good), slices.Clone(good)
			for i, row := range tt.base {
				base[i] = row
			}
			for i, row := range tt.cand {
				cand[i] = row
			}
			r := checkFinite(t, tt.wantErr, tt.wantBad, tt.wantDetail)(gate.Embed(ds, gate.EmbedRun{Version: "fp32", Vectors: base}, gate.EmbedRun{Version: "int8", Vectors: cand},
				gate.Budget{MaxDrop: 100, MinCosineMean: 0.01}, gate.Options{}))
			if r == nil {
				return
			}
			// A bad vector has cosine 0 and is scored wrong: the others are the baseline's own.
			want := 1 - float64(tt.wantBad)/30
			if c := r.Comparison.Cosine; math.Abs(c.Mean-want) > 1e-6 || (tt.wantBad > 0 && c.Min != 0) {
				t.Errorf("cosine %+v, want mean %v", c, want)
			}
			if got := *r.Baseline.Accuracy - *r.Candidate.Accuracy; math.Abs(got-float64(tt.wantBad)/30) > 1e-9 {
				t.Errorf("centroid accuracy %v against %v: want %d example(s) fewer right", *r.Candidate.Accuracy, *r.Baseline.Accuracy, tt.wantBad)
			}
		})
	}
}

// checkFinite returns a check of a gate's outcome: the error, one line holding every
// wantErr, when wantErr is set (it then returns nil); otherwise a report whose "finite"
// check is first of the checks and failed, saying detail, when the candidate gave bad
// examples, and absent when it gave none, with the verdict and the text report to match.
func checkFinite(t *testing.T, wantErr []string, bad int, detail string) func(*gate.Report, error) *gate.Report {
	return func(r *gate.Report, err error) *gate.Report {
		t.Helper()
		if wantErr != nil {
			mustFailOneLine(t, err, wantErr...)
			return nil
		}
		if err != nil {
			t.Fatal(err)
		}
		if r.Candidate.NonFinite != bad {
			t.Errorf("NonFinite %d, want %d", r.Candidate.NonFinite, bad)
		}
		has := len(r.Verdict.Checks) > 0 && r.Verdict.Checks[0].Rule == "finite"
		switch {
		case bad == 0 && (has || !r.Pass()):
			t.Errorf("all numbers: verdict %+v, want a pass without a finite check", r.Verdict)
		case bad > 0 && (!has || r.Verdict.Checks[0].Pass || r.Pass() || !strings.Contains(r.Verdict.Checks[0].Detail, detail)):
			t.Errorf("verdict %+v: want a failed finite check first, saying %q", r.Verdict, detail)
		}
		if bad > 0 {
			var text bytes.Buffer
			if err := gate.WriteText(&text, r); err != nil {
				t.Fatal(err)
			}
			mustContain(t, text.String(), "FAIL", detail)
		}
		return r
	}
}

// Served answers that hold NaN or an infinity are counted and left out of the comparison;
// the version is not batch-invariant.
func TestServedNonFinite(t *testing.T) {
	vecs := [][]float32{{1, 0, 0}, {0, 1, 0}, {0, 0, 1}, {1, 1, 0}}
	probs := [][]float32{{0.9, 0.1}, {0.2, 0.8}, {0.5, 0.5}, {0.6, 0.4}}
	allNaN := [][]float32{{nan, nan, nan}, {nan, nan, nan}, {nan, nan, nan}, {nan, nan, nan}}
	for _, tt := range []struct {
		name          string
		task          string
		fixed, served [][]float32
		wantBad       int
		wantCosMin    float64 // embed; -1: none to give
	}{
		{"embed, one served NaN", gate.TaskEmbed, vecs, [][]float32{vecs[0], {nan, 0, 0}, vecs[2], vecs[3]}, 1, 1},
		{"embed, one fixed infinity", gate.TaskEmbed, [][]float32{vecs[0], vecs[1], {0, inf, 0}, vecs[3]}, vecs, 1, 1},
		{"embed, every answer NaN", gate.TaskEmbed, allNaN, allNaN, 4, -1},
		{"classify, one NaN", gate.TaskClassify, probs, [][]float32{probs[0], probs[1], {nan, nan}, probs[3]}, 1, 0},
		{"classify, every answer NaN", gate.TaskClassify, probs, [][]float32{{nan, nan}, {nan, nan}, {nan, nan}, {nan, nan}}, 4, -1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v, err := gate.ServedVariability(tt.task, "int8", tt.fixed, tt.served, 0)
			if err != nil {
				t.Fatal(err)
			}
			if v.NonFinite != tt.wantBad || v.Invariant || v.N != 4 {
				t.Errorf("got %+v: want %d of 4 texts not finite, and not invariant", v, tt.wantBad)
			}
			switch {
			case tt.task == gate.TaskClassify && tt.wantCosMin < 0:
				if v.LabelFlips != nil || v.MaxProbDelta != nil {
					t.Errorf("flips %v, max |Δp| %v with no finite text", v.LabelFlips, v.MaxProbDelta)
				}
			case tt.task == gate.TaskClassify:
				if *v.LabelFlips != 0 || *v.MaxProbDelta != 0 {
					t.Errorf("flips %d, max |Δp| %v: want the finite texts compared alone", *v.LabelFlips, *v.MaxProbDelta)
				}
			case tt.wantCosMin < 0:
				if v.CosineMin != nil || v.CosineP1 != nil {
					t.Errorf("cosines %v %v with no finite text", v.CosineMin, v.CosineP1)
				}
			case v.CosineMin == nil:
				t.Errorf("no cosine, want a min of %v", tt.wantCosMin)
			case math.Abs(*v.CosineMin-tt.wantCosMin) > 1e-9:
				t.Errorf("cosine min %v, want %v", *v.CosineMin, tt.wantCosMin)
			}
		})
	}
}

// A version whose served answers hold NaN gets a note that says so, not one about its
// batch-mates; required, it fails the batch_invariance check with the count.
func TestAddServedNonFinite(t *testing.T) {
	for _, required := range []bool{false, true} {
		ds := binary(t, 4)
		r, err := gate.Classify(ds, predict("fp32", answers(ds, never)), predict("int8", answers(ds, never)), gate.Budget{MaxDrop: 100}, gate.Options{})
		if err != nil {
			t.Fatal(err)
		}
		probs := [][]float32{{0.9, 0.1}, {0.2, 0.8}}
		base, err := gate.ServedVariability(gate.TaskClassify, "fp32", probs, probs, 0)
		if err != nil {
			t.Fatal(err)
		}
		cand, err := gate.ServedVariability(gate.TaskClassify, "int8", probs, [][]float32{{nan, nan}, {0.2, 0.8}}, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.AddServed(&gate.Served{Method: "m", Concurrency: 2, Required: required, Versions: []gate.ServedVersion{base, cand}}); err != nil {
			t.Fatal(err)
		}
		const want = "1 of 2 texts gave NaN or an infinity"
		var text bytes.Buffer
		if err := gate.WriteText(&text, r); err != nil {
			t.Fatal(err)
		}
		switch {
		case !required && (!hasNote(r, "int8: served through the batcher or in fixed chunks, "+want) || hasNote(r, "batch-mates") || !r.Pass()):
			t.Errorf("informational: notes %q, pass %v: want the NaN note alone, and a pass", r.Notes, r.Pass())
		case required && (r.Pass() || !strings.Contains(strings.Join(r.Verdict.Reasons, "\n"), want)):
			t.Errorf("required: verdict %+v, want a batch_invariance failure saying %q", r.Verdict, want)
		}
		mustContain(t, text.String(), "no: 1 NaN/Inf")
	}
}
