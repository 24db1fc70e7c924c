package gate_test

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ortserve/ortserve/bench/gate"
)

func TestGateServedStatistic(t *testing.T) {
	probs := [][]float32{{0.9, 0.1}, {0.3, 0.7}, {0.5, 0.5}, {0.2, 0.8}}
	// rotated turns each unit vector by angle a in the plane of its first two axes: cosine
	// cos(a) with the original.
	vecs := [][]float32{{1, 0, 0}, {0, 1, 0}, {0.6, 0.8, 0}, {0, 0, 2}}
	rotated := func(a float64) [][]float32 {
		out := make([][]float32, len(vecs))
		for i, v := range vecs {
			c, s := math.Cos(a), math.Sin(a)
			out[i] = []float32{float32(c*float64(v[0]) - s*float64(v[1])), float32(s*float64(v[0]) + c*float64(v[1])), v[2]}
		}
		return out
	}
	shifted := func(d float32, at ...int) [][]float32 {
		out := make([][]float32, len(probs))
		for i, p := range probs {
			out[i] = []float32{p[0], p[1]}
		}
		for _, i := range at {
			out[i][0] -= d
			out[i][1] += d
		}
		return out
	}
	scaled := make([][]float32, len(vecs))
	for i, v := range vecs {
		scaled[i] = []float32{3 * v[0], 3 * v[1], 3 * v[2]}
	}
	one := func(n int) *int { return &n }
	tests := []struct {
		name           string
		task           string
		fixed, served  [][]float32
		flips          *int
		maxDelta       float64 // classify; -1: not checked
		cosMin, cosP1  float64 // embed
		invariant      bool
		wantErr        []string
		elapsed        time.Duration
		itemsPerSecond float64
	}{
		{name: "classify, same answers", task: gate.TaskClassify, fixed: probs, served: shifted(0), flips: one(0), invariant: true, elapsed: 2 * time.Second, itemsPerSecond: 2},
		{name: "classify, float noise", task: gate.TaskClassify, fixed: probs, served: shifted(3e-5, 0, 3), flips: one(0), maxDelta: 3e-5, invariant: true},
		{name: "classify, over the tolerance, no flip", task: gate.TaskClassify, fixed: probs, served: shifted(2e-3, 1), flips: one(0), maxDelta: 2e-3},
		// A tie breaks to the first class; a tiny move off the tie flips the label, and the
		// flip alone makes the version variant though |Δp| is within the tolerance.
		{name: "classify, a flip at a tie", task: gate.TaskClassify, fixed: probs, served: shifted(1e-5, 2), flips: one(1), maxDelta: 1e-5},
		{name: "classify, just over the tolerance", task: gate.TaskClassify, fixed: [][]float32{{0.5, 0.25}}, served: [][]float32{{0.5, 0.25 + 1.0/8192}}, flips: one(0), maxDelta: 1.0 / 8192},
		{name: "embed, same direction, other length", task: gate.TaskEmbed, fixed: vecs, served: scaled, cosMin: 1, cosP1: 1, invariant: true},
		{name: "embed, within 0.9999", task: gate.TaskEmbed, fixed: vecs, served: rotated(0.01), cosMin: math.Cos(0.01), cosP1: math.Cos(0.01), invariant: true},
		{name: "embed, below 0.9999", task: gate.TaskEmbed, fixed: vecs, served: rotated(0.05), cosMin: math.Cos(0.05), cosP1: math.Cos(0.05)},
		{name: "embed, one text moved", task: gate.TaskEmbed, fixed: vecs, served: append(append([][]float32{}, vecs[:3]...), []float32{0, 2, 0}),
			cosMin: 0, cosP1: 0.03}, // p1 of {0, 1, 1, 1}: 0.01·3 of the way from 0 to 1

		{name: "no texts", task: gate.TaskEmbed, wantErr: []string{`version "int8" has no fixed-chunk answers`}},
		{name: "fewer served", task: gate.TaskClassify, fixed: probs, served: probs[:3], wantErr: []string{"3 served answers for 4 fixed-chunk ones"}},
		{name: "row lengths differ", task: gate.TaskClassify, fixed: probs, served: [][]float32{{1}, {1}, {1}, {1}}, wantErr: []string{"answers to text 0 have 2 and 1 values"}},
		{name: "unknown task", task: "rerank", fixed: probs, served: probs, wantErr: []string{`task "rerank"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := gate.ServedVariability(tt.task, "int8", tt.fixed, tt.served, tt.elapsed)
			if tt.wantErr != nil {
				mustFailOneLine(t, err, tt.wantErr...)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if v.Version != "int8" || v.N != len(tt.fixed) || v.Invariant != tt.invariant {
				t.Errorf("got %+v; want %d texts, invariant %v", v, len(tt.fixed), tt.invariant)
			}
			if tt.task == gate.TaskClassify {
				if v.LabelFlips == nil || *v.LabelFlips != *tt.flips || v.MaxProbDelta == nil || math.Abs(*v.MaxProbDelta-tt.maxDelta) > 1e-7 || v.CosineMin != nil {
					t.Errorf("flips %v, max |Δp| %v; want %d, %g", v.LabelFlips, v.MaxProbDelta, *tt.flips, tt.maxDelta)
				}
			} else if v.CosineMin == nil || math.Abs(*v.CosineMin-tt.cosMin) > 1e-6 || math.Abs(*v.CosineP1-tt.cosP1) > 1e-6 || v.LabelFlips != nil {
				t.Errorf("cosine min %v, p1 %v; want %g, %g", v.CosineMin, v.CosineP1, tt.cosMin, tt.cosP1)
			}
			if v.ItemsPerSecond != tt.itemsPerSecond {
				t.Errorf("items/s %v, want %v", v.ItemsPerSecond, tt.itemsPerSecond)
			}
		})
	}
}

// served is the served-path result of a report's two versions: the baseline invariant, the
// candidate as given.
func served(t *testing.T, task string, candInvariant, required bool) *gate.Served {
	t.Helper()
	s := &gate.Served{Method: "one text per request, 64 in flight, shuffled", Concurrency: 64, Required: required}
	for _, version := range []string{"fp32", "int8"} {
		var fixed, got [][]float32
		if task == gate.TaskClassify {
			fixed, got = [][]float32{{0.9, 0.1}, {0.2, 0.8}}, [][]float32{{0.9, 0.1}, {0.2, 0.8}}
			if version == "int8" && !candInvariant {
				got = [][]float32{{0.4, 0.6}, {0.2, 0.8}}
			}
		} else {
			fixed, got = [][]float32{{1, 0}, {0, 1}}, [][]float32{{1, 0}, {0, 1}}
			if version == "int8" && !candInvariant {
				got = [][]float32{{0.96, 0.28}, {0, 1}}
			}
		}
		v, err := gate.ServedVariability(task, version, fixed, got, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		s.Versions = append(s.Versions, v)
	}
	return s
}

func TestGateAddServed(t *testing.T) {
	tests := []struct {
		name          string
		report        func(*testing.T) *gate.Report
		invariant     bool
		required      bool
		pass          bool // the verdict after AddServed
		check, note   string
		text, md      []string
		wantErrSubstr string
	}{
		{name: "classify, informational, variant", report: passingClassify, pass: true, note: "int8 is not batch-invariant: served through the batcher, 1 of 2 labels flipped and max |Δp| is 0.5",
			text: []string{"Served through the batcher (one text per request, 64 in flight, shuffled; against each version's fixed-chunk answers; informational)",
				"version  texts  label flips  max |Δp|  items/s  batch-invariant", "fp32         2            0         0      2.0  yes", "int8         2            1       0.5      2.0  no"},
			md: []string{"| version | texts | label flips | max \\|Δp\\| | items/s | batch-invariant |", "| int8 | 2 | 1 | 0.5 | 2.0 | no |"}},
		{name: "classify, required, variant", report: passingClassify, required: true, pass: false,
			check: "served through the batcher, 1 of 2 labels flipped and max |Δp| is 0.5 (batch-invariant: no flips and < 0.0001)",
			text:  []string{"the candidate must be batch-invariant", "✗ batch invariance: served through the batcher, 1 of 2 labels flipped"}},
		{name: "classify, required, invariant", report: passingClassify, invariant: true, required: true, pass: true,
			check: "served through the batcher, 0 of 2 labels flipped and max |Δp| is 0 (batch-invariant: no flips and < 0.0001)"},
		{name: "embed, informational, variant", report: embedReport, pass: false, note: "the lowest cosine to its fixed-chunk answers is 0.960000, p1 0.960400",
			text: []string{"version  texts  min cosine  p1 cosine  items/s  batch-invariant", "int8         2    0.960000   0.960400      2.0  no"}},
		{name: "embed, required, invariant", report: embedReport, invariant: true, required: true, pass: false, // embedReport fails its cosine budget
			check: "the lowest cosine to its fixed-chunk answers is 1.000000, p1 1.000000 (batch-invariant: ≥ 0.999900)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.report(t)
			checks := len(r.Verdict.Checks)
			s := served(t, r.Task, tt.invariant, tt.required)
			if err := r.AddServed(s); err != nil {
				t.Fatal(err)
			}
			if r.Pass() != tt.pass || r.Served != s {
				t.Errorf("pass %v, served %p; want %v, %p; reasons %q", r.Pass(), r.Served, tt.pass, s, r.Verdict.Reasons)
			}
			if got := len(r.Verdict.Checks) - checks; got != map[bool]int{true: 1}[tt.required] {
				t.Errorf("%d checks added", got)
			}
			if tt.check != "" {
				last := r.Verdict.Checks[len(r.Verdict.Checks)-1]
				if last.Rule != "batch_invariance" || last.Pass != tt.invariant || !strings.Contains(last.Detail, tt.check) {
					t.Errorf("check %+v; want batch_invariance, pass %v, %q", last, tt.invariant, tt.check)
				}
			}
			if tt.note != "" && !hasNote(r, tt.note) {
				t.Errorf("notes %q lack %q", r.Notes, tt.note)
			}
			if tt.note == "" && hasNote(r, "batch-invariant") {
				t.Errorf("notes %q: want no note on invariance", r.Notes)
			}
			var text, md, js bytes.Buffer
			if err := gate.WriteText(&text, r); err != nil {
				t.Fatal(err)
			}
			mustContain(t, text.String(), tt.text...)
			if err := gate.WriteMarkdown(&md, r); err != nil {
				t.Fatal(err)
			}
			mustContain(t, md.String(), tt.md...)
			if err := gate.WriteJSON(&js, r); err != nil {
				t.Fatal(err)
			}
			var back gate.Report
			if err := json.Unmarshal(js.Bytes(), &back); err != nil || back.Served == nil || len(back.Served.Versions) != 2 || back.Served.Versions[1].Invariant != tt.invariant || back.Served.Required != tt.required {
				t.Errorf("JSON round trip: %v, served %+v", err, back.Served)
			}
			mustContain(t, js.String(), `"served": {`, `"batch_invariant": `, `"concurrency": 64`)
		})
	}

	t.Run("failures", func(t *testing.T) {
		r := passingClassify(t)
		s := served(t, gate.TaskClassify, true, true)
		s.Versions = s.Versions[:1] // the baseline only
		mustFailOneLine(t, r.AddServed(s), `batch invariance is required of candidate "int8", but the served pass did not measure it`)
		if r.Served != nil || r.AddServed(nil) != nil {
			t.Errorf("a failed AddServed changed the report, or nil failed")
		}
		if err := r.AddServed(served(t, gate.TaskClassify, true, false)); err != nil {
			t.Fatal(err)
		}
		mustFailOneLine(t, r.AddServed(served(t, gate.TaskClassify, true, false)), "already has served-path results")
	})
}

// passingClassify is a classifier report that passes: the candidate answers as the baseline.
func passingClassify(t *testing.T) *gate.Report {
	t.Helper()
	ds := binary(t, 20)
	r, err := gate.Classify(ds, predict("fp32", answers(ds, every10)), predict("int8", answers(ds, every10)), gate.Budget{MaxDrop: 1}, gate.Options{})
	if err != nil || !r.Pass() {
		t.Fatalf("%v, pass %v", err, r.Pass())
	}
	return r
}
