package gate_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ortserve/ortserve/bench/gate"
)

func TestClassifyMetrics(t *testing.T) {
	type class struct {
		label                 string
		support, predicted    int
		precision, recall, f1 float64
	}
	tests := []struct {
		name      string
		labels    []string // truth per example
		classes   []string
		probs     [][]float32
		accuracy  float64
		macroF1   float64
		perClass  []class
		confusion [][]int
		axes      []string
	}{
		{
			name:    "two classes, one miss",
			labels:  []string{"a", "a", "b", "b"},
			classes: []string{"a", "b"},
			probs:   [][]float32{{0.8, 0.2}, {0.3, 0.7}, {0.1, 0.9}, {0.4, 0.6}},
			// a: P 1/1, R 1/2, F1 2/3; b: P 2/3, R 2/2, F1 4/5.
			accuracy: 0.75, macroF1: (2.0/3 + 0.8) / 2,
			perClass:  []class{{"a", 2, 1, 1, 0.5, 2.0 / 3}, {"b", 2, 3, 2.0 / 3, 1, 0.8}},
			confusion: [][]int{{1, 1}, {0, 2}},
			axes:      []string{"a", "b"},
		},
		{
			name:    "class order of the model differs from the dataset's",
			labels:  []string{"a", "b", "b"},
			classes: []string{"b", "a"},
			probs:   [][]float32{{0.2, 0.8}, {0.9, 0.1}, {0.3, 0.7}},
			// predictions a, b, a.
			accuracy: 2.0 / 3, macroF1: (2.0/3 + 2.0/3) / 2,
			perClass:  []class{{"a", 1, 2, 0.5, 1, 2.0 / 3}, {"b", 2, 1, 1, 0.5, 2.0 / 3}},
			confusion: [][]int{{1, 0}, {1, 1}},
			axes:      []string{"a", "b"},
		},
		{
			name:    "a predicted class no example has joins the axes",
			labels:  []string{"a", "b"},
			classes: []string{"a", "b", "c"},
			probs:   [][]float32{{0.1, 0.2, 0.7}, {0.1, 0.8, 0.1}},
			// a: nothing predicted, F1 0; b: perfect; c: predicted once, never true, F1 0.
			accuracy: 0.5, macroF1: 1.0 / 3,
			perClass:  []class{{"a", 1, 0, 0, 0, 0}, {"b", 1, 1, 1, 1, 1}, {"c", 0, 1, 0, 0, 0}},
			confusion: [][]int{{0, 0, 1}, {0, 1, 0}, {0, 0, 0}},
			axes:      []string{"a", "b", "c"},
		},
		{
			name:    "a tie goes to the first class",
			labels:  []string{"a", "b"},
			classes: []string{"a", "b"},
			probs:   [][]float32{{0.5, 0.5}, {0.5, 0.5}},
			// a: P 1/2, R 1, F1 2/3; b: nothing predicted, F1 0.
			accuracy: 0.5, macroF1: 1.0 / 3,
			perClass:  []class{{"a", 1, 2, 0.5, 1, 2.0 / 3}, {"b", 1, 0, 0, 0, 0}},
			confusion: [][]int{{1, 0}, {1, 0}},
			axes:      []string{"a", "b"},
		},
		{
			name:     "all right",
			labels:   []string{"x", "y", "z"},
			classes:  []string{"x", "y", "z"},
			probs:    [][]float32{{0.8, 0.1, 0.1}, {0.1, 0.8, 0.1}, {0.1, 0.1, 0.8}},
			accuracy: 1, macroF1: 1,
			perClass:  []class{{"x", 1, 1, 1, 1, 1}, {"y", 1, 1, 1, 1, 1}, {"z", 1, 1, 1, 1, 1}},
			confusion: [][]int{{1, 0, 0}, {0, 1, 0}, {0, 0, 1}},
			axes:      []string{"x", "y", "z"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ex []gate.Example
			for _, l := range tt.labels {
				ex = append(ex, gate.Example{Text: "t", Label: l})
			}
			ds, err := gate.NewDataset("hand", ex)
			if err != nil {
				t.Fatal(err)
			}
			run := gate.ClassifyRun{Version: "v", Classes: tt.classes, Probs: tt.probs}
			r, err := gate.Classify(ds, run, run, gate.Budget{MaxDrop: 1}, gate.Options{})
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range []gate.VersionMetrics{r.Baseline, r.Candidate} {
				near(t, "accuracy", *m.Accuracy, tt.accuracy)
				near(t, "macro-F1", *m.MacroF1, tt.macroF1)
				if !slices.Equal(m.Confusion.Labels, tt.axes) {
					t.Errorf("confusion labels %v, want %v", m.Confusion.Labels, tt.axes)
				}
				if !slices.EqualFunc(m.Confusion.Counts, tt.confusion, slices.Equal) {
					t.Errorf("confusion %v, want %v", m.Confusion.Counts, tt.confusion)
				}
				if len(m.Classes) != len(tt.perClass) {
					t.Fatalf("%d class rows, want %d", len(m.Classes), len(tt.perClass))
				}
				for i, want := range tt.perClass {
					got := m.Classes[i]
					if got.Label != want.label || got.Support != want.support || got.Predicted != want.predicted {
						t.Errorf("class row %d: %+v, want %+v", i, got, want)
					}
					near(t, want.label+" precision", got.Precision, want.precision)
					near(t, want.label+" recall", got.Recall, want.recall)
					near(t, want.label+" F1", got.F1, want.f1)
				}
			}
		})
	}
}

func near(t *testing.T, what string, got, want float64) {
	t.Helper()
	if math.Abs(got-want) > 1e-9 {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

func TestClassifyErrors(t *testing.T) {
	ds := binary(t, 4)
	good := predict("fp32", answers(ds, never))
	short := predict("int8", answers(ds, never))
	short.Probs = short.Probs[:3]
	wide := predict("int8", answers(ds, never))
	wide.Probs[0] = []float32{0.5, 0.3, 0.2}
	numeric := good
	numeric.Classes = []string{"NEG", "POS"}
	dup := good
	dup.Classes = []string{"negative", "negative"}
	unlabeled, err := gate.NewDataset("u", []gate.Example{{Text: "a"}, {Text: "b"}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		ds     *gate.Dataset
		cand   gate.ClassifyRun
		budget gate.Budget
		opts   gate.Options
		want   []string
	}{
		{"no budget", ds, good, gate.Budget{}, gate.Options{}, []string{"--max-drop"}},
		{"negative budget", ds, good, gate.Budget{MaxDrop: -1}, gate.Options{}, []string{"out of range"}},
		{"agreement as a percentage", ds, good, gate.Budget{MaxDrop: 1, MinAgreement: 99}, gate.Options{}, []string{"0.99 for 99%"}},
		{"cosine budget", ds, good, gate.Budget{MaxDrop: 1, MinCosineMean: 0.9}, gate.Options{}, []string{"embedding models"}},
		{"too few resamples", ds, good, gate.Budget{MaxDrop: 1}, gate.Options{Resamples: 10}, []string{"at least 100"}},
		{"confidence as a percentage", ds, good, gate.Budget{MaxDrop: 1}, gate.Options{Confidence: 95}, []string{"0.95"}},
		{"nil dataset", nil, good, gate.Budget{MaxDrop: 1}, gate.Options{}, []string{"no examples"}},
		{"unlabeled dataset", unlabeled, good, gate.Budget{MaxDrop: 1}, gate.Options{}, []string{"no label", "--label-column"}},
		{"rows short", ds, short, gate.Budget{MaxDrop: 1}, gate.Options{}, []string{"3 probability rows for 4 examples"}},
		{"row too wide", ds, wide, gate.Budget{MaxDrop: 1}, gate.Options{}, []string{"3 probabilities for example 0 but 2 classes"}},
		{"labels are not classes", ds, numeric, gate.Budget{MaxDrop: 1}, gate.Options{}, []string{`"negative", "positive"`, `"NEG", "POS"`, "--label-map negative=NEG,positive=POS"}},
		{"a class twice", ds, dup, gate.Budget{MaxDrop: 1}, gate.Options{}, []string{`class "negative" twice`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := gate.Classify(tt.ds, good, tt.cand, tt.budget, tt.opts)
			mustFailOneLine(t, err, tt.want...)
		})
	}
}

func TestClassifyVerdict(t *testing.T) {
	ds := binary(t, 1000)
	base := predict("fp32", answers(ds, every10))
	rng := rand.New(rand.NewPCG(5, 6))
	random := gate.ClassifyRun{Version: "int8", Classes: binaryClasses}
	for range ds.Examples {
		p := rng.Float32()
		random.Probs = append(random.Probs, []float32{p, 1 - p})
	}
	reversed := gate.ClassifyRun{Version: "int8", Classes: binaryClasses}
	for _, row := range base.Probs {
		reversed.Probs = append(reversed.Probs, []float32{row[1], row[0]})
	}
	tests := []struct {
		name      string
		cand      gate.ClassifyRun
		budget    gate.Budget
		pass      bool
		reasons   []string
		lowEq0    bool
		highEq0   bool
		minPoints float64
	}{
		{
			name: "identical", cand: predict("int8", answers(ds, every10)), budget: gate.Budget{MaxDrop: 1, MinAgreement: 0.99},
			pass: true, lowEq0: true, highEq0: true,
		},
		{
			// The baseline is wrong on i%10 == 3; the candidate also on i%10 == 7: ten
			// points worse.
			name: "ten percent flipped to wrong", cand: predict("int8", answers(ds, func(i int) bool { return i%10 == 3 || i%10 == 7 })),
			budget: gate.Budget{MaxDrop: 1}, reasons: []string{"accuracy drop 10.0 points", "exceeds the 1.0-point budget", "beyond noise"}, minPoints: 10,
		},
		{
			name: "labels swapped", cand: reversed, budget: gate.Budget{MaxDrop: 1, MinAgreement: 0.9},
			reasons: []string{"exceeds the 1.0-point budget", "agreement 0.0% (1000 of 1000 predictions changed) is below the 90.0% minimum"}, minPoints: 79,
		},
		{
			name: "random probabilities", cand: random, budget: gate.Budget{MaxDrop: 1},
			reasons: []string{"exceeds the 1.0-point budget"}, minPoints: 30,
		},
		{
			// Better than the baseline: a negative drop passes.
			name: "better", cand: predict("int8", answers(ds, never)), budget: gate.Budget{MaxDrop: 1},
			pass: true, minPoints: -100,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := gate.Classify(ds, base, tt.cand, tt.budget, gate.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if r.Pass() != tt.pass {
				t.Errorf("pass = %v, want %v; reasons %q", r.Pass(), tt.pass, r.Verdict.Reasons)
			}
			d := r.Comparison.Drop
			if tt.lowEq0 && d.Low != 0 || tt.highEq0 && d.High != 0 {
				t.Errorf("interval [%v, %v], want [0, 0]", d.Low, d.High)
			}
			if d.Points < tt.minPoints {
				t.Errorf("drop %v points, want at least %v", d.Points, tt.minPoints)
			}
			if !(d.Low <= d.Points && d.Points <= d.High) {
				t.Errorf("point estimate %v outside its interval [%v, %v]", d.Points, d.Low, d.High)
			}
			if got := d.High <= tt.budget.MaxDrop; got != (r.Verdict.Checks[0].Pass) {
				t.Errorf("drop check %v disagrees with the rule (high %v, budget %v)", r.Verdict.Checks[0].Pass, d.High, tt.budget.MaxDrop)
			}
			for _, want := range tt.reasons {
				if !slices.ContainsFunc(r.Verdict.Reasons, func(s string) bool { return strings.Contains(s, want) }) {
					t.Errorf("no reason with %q in %q", want, r.Verdict.Reasons)
				}
			}
			if tt.pass && len(r.Verdict.Reasons) > 0 {
				t.Errorf("passing report has reasons %q", r.Verdict.Reasons)
			}
		})
	}
}

// TestClassifySmallDataset checks that a point estimate of no drop on a small dataset passes
// only a budget the interval fits in, and that the report says why otherwise.
func TestClassifySmallDataset(t *testing.T) {
	ds := binary(t, 20)
	// The baseline misses 0 and 1; the candidate gets those right but misses 2 and 3: no
	// drop on average, four changed answers out of twenty.
	base := predict("fp32", answers(ds, func(i int) bool { return i < 2 }))
	cand := predict("int8", answers(ds, func(i int) bool { return i == 2 || i == 3 }))
	// A zero point estimate with a wide interval is inconclusive under a tight budget: it
	// passes with a note, and fails when the budget is strict.
	tests := []struct {
		budget  float64
		strict  bool
		outcome string
		pass    bool
		note    bool
	}{
		{budget: 1, outcome: "inconclusive", pass: true, note: true},
		{budget: 1, strict: true, outcome: "inconclusive", pass: false, note: true},
		{budget: 15, outcome: "inconclusive", pass: true, note: true},
		{budget: 40, outcome: "within", pass: true, note: false},
		{budget: 40, strict: true, outcome: "within", pass: true, note: false},
	}
	for _, tt := range tests {
		r, err := gate.Classify(ds, base, cand, gate.Budget{MaxDrop: tt.budget, Strict: tt.strict}, gate.Options{})
		if err != nil {
			t.Fatal(err)
		}
		d := r.Comparison.Drop
		if d.Points != 0 {
			t.Fatalf("point estimate %v, want 0", d.Points)
		}
		if d.High < 10 || d.Low > -10 {
			t.Errorf("interval [%v, %v] is narrower than four changed answers in twenty allow", d.Low, d.High)
		}
		if r.Pass() != tt.pass || d.Outcome != tt.outcome {
			t.Errorf("budget %v strict %v: pass = %v outcome %q, want %v %q (interval high %v)", tt.budget, tt.strict, r.Pass(), d.Outcome, tt.pass, tt.outcome, d.High)
		}
		if got := hasNote(r, "The data cannot show the accuracy drop is within the"); got != tt.note {
			t.Errorf("budget %v: note present = %v, want %v; notes %q", tt.budget, got, tt.note, r.Notes)
		}
		if tt.budget == 1 && !hasNote(r, "with 20 examples one changed answer moves the accuracy by 5.0 points") {
			t.Errorf("no resolution note in %q", r.Notes)
		}
		if a := r.Comparison.Agreement; a.Changed != 4 || a.RightToWrong != 2 || a.WrongToRight != 2 || a.WrongToWrong != 0 {
			t.Errorf("agreement %+v, want 4 changed: 2 right→wrong, 2 wrong→right", a)
		}
	}
}

func TestClassifyComparison(t *testing.T) {
	ds := binary(t, 4)
	base := gate.ClassifyRun{Version: "fp32", Classes: binaryClasses, Elapsed: 2 * time.Second,
		Probs: [][]float32{{0.9, 0.1}, {0.2, 0.8}, {0.6, 0.4}, {0.3, 0.7}}}
	// The candidate lists its classes the other way round; example 2 flips to wrong and
	// example 3 keeps its class.
	cand := gate.ClassifyRun{Version: "int8", Classes: []string{"positive", "negative"}, Elapsed: time.Second,
		Probs: [][]float32{{0.1, 0.9}, {0.8, 0.2}, {0.7, 0.3}, {0.5, 0.5}}}
	r, err := gate.Classify(ds, base, cand, gate.Budget{MaxDrop: 50}, gate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Example 2 flips from negative (right) to positive (wrong). Example 3 is a tie for
	// the candidate, which goes to its first class, positive: unchanged.
	a := r.Comparison.Agreement
	// Per example max |Δp|: 0, 0, 0.3, 0.2.
	d := r.Comparison.ProbDelta
	// float32 inputs: equal to about 1e-7.
	if math.Abs(d.Max-0.3) > 1e-6 || math.Abs(d.Mean-0.125) > 1e-6 {
		t.Errorf("max |Δp| distribution %+v, want max 0.3, mean 0.125", d)
	}
	if a.Changed != 1 || a.RightToWrong != 1 || a.Fraction != 0.75 {
		t.Errorf("agreement %+v, want 1 change, right→wrong, 75%%", a)
	}
	near(t, "baseline items/s", r.Baseline.ItemsPerSecond, 2)
	near(t, "candidate items/s", r.Candidate.ItemsPerSecond, 4)
	near(t, "speed ratio", r.Comparison.SpeedRatio, 2)
	if len(r.Comparison.Worst) == 0 || r.Comparison.Worst[0].Index != 2 || r.Comparison.Worst[0].Candidate != "positive" {
		t.Errorf("worst examples %+v, want example 2 first", r.Comparison.Worst)
	}
}

func TestClassifyNotes(t *testing.T) {
	ds := binary(t, 200)
	right := answers(ds, every10)
	// A label map the wrong way round makes a baseline far below chance.
	swapped := answers(ds, func(i int) bool { return !every10(i) })
	logits := predict("int8", right)
	for _, row := range logits.Probs {
		row[0], row[1] = row[0]*10, row[1]*10
	}
	tests := []struct {
		name       string
		base, cand gate.ClassifyRun
		note       string
	}{
		{"identical outputs", predict("fp32", right), predict("int8", right), "identical to the baseline's, to the last bit"},
		{"same name", predict("fp32", right), predict("fp32", answers(ds, never)), `both named "fp32"`},
		{"baseline below chance", predict("fp32", swapped), predict("int8", swapped), "no better than guessing"},
		{"not probabilities", predict("fp32", right), logits, `rows of candidate "int8" are not probabilities`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := gate.Classify(ds, tt.base, tt.cand, gate.Budget{MaxDrop: 1}, gate.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if !hasNote(r, tt.note) {
				t.Errorf("no note with %q in %q", tt.note, r.Notes)
			}
		})
	}
}

func TestBootstrapDeterminism(t *testing.T) {
	ds := binary(t, 300)
	base := predict("fp32", answers(ds, every10))
	cand := predict("int8", answers(ds, func(i int) bool { return i%10 == 3 || i%17 == 0 }))
	run := func(o gate.Options) *gate.Drop {
		r, err := gate.Classify(ds, base, cand, gate.Budget{MaxDrop: 1}, o)
		if err != nil {
			t.Fatal(err)
		}
		return r.Comparison.Drop
	}
	a, b := run(gate.Options{Seed: 42}), run(gate.Options{Seed: 42})
	if *a != *b {
		t.Errorf("same seed, different intervals: %+v and %+v", a, b)
	}
	if def, one := run(gate.Options{}), run(gate.Options{Seed: 1, Resamples: 2000, Confidence: 0.95}); *def != *one {
		t.Errorf("defaults %+v differ from seed 1, 2000 resamples, 95%%: %+v", def, one)
	}
	if c := run(gate.Options{Seed: 43}); c.Low == a.Low && c.High == a.High {
		t.Errorf("seeds 42 and 43 gave the same interval [%v, %v]", a.Low, a.High)
	}
	wide, narrow := run(gate.Options{Confidence: 0.99}), run(gate.Options{Confidence: 0.5})
	if !(wide.High-wide.Low > narrow.High-narrow.Low) {
		t.Errorf("99%% interval [%v, %v] is not wider than the 50%% one [%v, %v]", wide.Low, wide.High, narrow.Low, narrow.High)
	}
}
