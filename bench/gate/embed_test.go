package gate_test

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/ortserve/ortserve/bench/gate"
)

// threeLabels is a dataset of n examples cycling through three labels.
func threeLabels(t *testing.T, n int, names ...string) *gate.Dataset {
	t.Helper()
	if names == nil {
		names = []string{"sports", "finance", "science"}
	}
	ex := make([]gate.Example, n)
	for i := range ex {
		ex[i] = gate.Example{Text: "doc", Label: names[i%3]}
	}
	ds, err := gate.NewDataset("synthetic", ex)
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

func TestEmbedVerdict(t *testing.T) {
	const n, dim = 300, 32
	ds := threeLabels(t, n)
	base := clustered(ds, dim, 0.8, 1)
	scaled := make([][]float32, n)
	for i, v := range base {
		scaled[i] = make([]float32, dim)
		for j, x := range v {
			scaled[i][j] = 3 * x
		}
	}
	tests := []struct {
		name    string
		cand    [][]float32
		budget  gate.Budget
		pass    bool
		reasons []string
		cosine  float64 // the mean cosine, when checked
	}{
		{
			name: "identical", cand: base, budget: gate.Budget{MaxDrop: 1, MinCosineMean: 0.99, MinCosineP1: 0.99},
			pass: true, cosine: 1,
		},
		{
			// Cosine ignores length; an unnormalized candidate is the same embedding.
			name: "scaled", cand: scaled, budget: gate.Budget{MinCosineMean: 0.999, MinCosineP1: 0.999},
			pass: true, cosine: 1,
		},
		{
			name: "slight noise", cand: perturbed(base, 0.01, 2), budget: gate.Budget{MaxDrop: 2, MinCosineMean: 0.99, MinCosineP1: 0.98},
			pass: true,
		},
		{
			name: "heavy noise", cand: perturbed(base, 2, 3), budget: gate.Budget{MinCosineMean: 0.99, MinCosineP1: 0.95},
			reasons: []string{"mean cosine", "is below the 0.990 minimum", "1st-percentile cosine", "is below the 0.950 minimum (lowest"},
		},
		{
			name: "random vectors", cand: randomVectors(n, dim, 4), budget: gate.Budget{MaxDrop: 5},
			reasons: []string{"nearest-centroid accuracy drop", "exceeds the 5.0-point budget"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := gate.Embed(ds, gate.EmbedRun{Version: "fp32", Vectors: base}, gate.EmbedRun{Version: "int8", Vectors: tt.cand}, tt.budget, gate.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if r.Pass() != tt.pass {
				t.Errorf("pass = %v, want %v; reasons %q", r.Pass(), tt.pass, r.Verdict.Reasons)
			}
			if tt.cosine != 0 && math.Abs(r.Comparison.Cosine.Mean-tt.cosine) > 1e-6 {
				t.Errorf("mean cosine %v, want %v", r.Comparison.Cosine.Mean, tt.cosine)
			}
			if *r.Baseline.Accuracy < 0.9 {
				t.Errorf("baseline nearest-centroid accuracy %v on well separated clusters", *r.Baseline.Accuracy)
			}
			for _, want := range tt.reasons {
				if !slices.ContainsFunc(r.Verdict.Reasons, func(s string) bool { return strings.Contains(s, want) }) {
					t.Errorf("no reason with %q in %q", want, r.Verdict.Reasons)
				}
			}
			c := r.Comparison.Cosine
			if !(c.Min <= c.P1 && c.P1 <= c.P5 && c.P5 <= c.P50 && c.P50 <= c.Max) {
				t.Errorf("cosine quantiles out of order: %+v", c)
			}
		})
	}
}

// TestEmbedLabelsSwapped checks that renaming the labels changes neither the cosines nor the
// task metric, while a random candidate still fails the task budget.
func TestEmbedLabelsSwapped(t *testing.T) {
	const n, dim = 240, 16
	ds := threeLabels(t, n)
	swapped := threeLabels(t, n, "finance", "science", "sports")
	vecs := clustered(ds, dim, 0.8, 1)
	cand := perturbed(vecs, 0.05, 2)
	budget := gate.Budget{MaxDrop: 2, MinCosineMean: 0.9}
	a, err := gate.Embed(ds, gate.EmbedRun{Version: "fp32", Vectors: vecs}, gate.EmbedRun{Version: "int8", Vectors: cand}, budget, gate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := gate.Embed(swapped, gate.EmbedRun{Version: "fp32", Vectors: vecs}, gate.EmbedRun{Version: "int8", Vectors: cand}, budget, gate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if *a.Comparison.Cosine != *b.Comparison.Cosine || *a.Baseline.Accuracy != *b.Baseline.Accuracy || *a.Comparison.Drop != *b.Comparison.Drop {
		t.Errorf("renaming labels changed the report: %+v %v against %+v %v", a.Comparison.Cosine, *a.Baseline.Accuracy, b.Comparison.Cosine, *b.Baseline.Accuracy)
	}
	if !a.Pass() || !b.Pass() {
		t.Errorf("a lightly perturbed candidate fails: %q / %q", a.Verdict.Reasons, b.Verdict.Reasons)
	}
	r, err := gate.Embed(swapped, gate.EmbedRun{Version: "fp32", Vectors: vecs}, gate.EmbedRun{Version: "int8", Vectors: randomVectors(n, dim, 9)}, gate.Budget{MaxDrop: 2}, gate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Pass() || *r.Candidate.Accuracy > 0.6 {
		t.Errorf("random candidate passes or scores %v", *r.Candidate.Accuracy)
	}
}

// TestEmbedCentroidHand checks leave-one-out nearest-centroid accuracy on points placed by
// hand.
func TestEmbedCentroidHand(t *testing.T) {
	ex := []gate.Example{{"a0", "a"}, {"a1", "a"}, {"a2", "a"}, {"b0", "b"}, {"b1", "b"}, {"c0", "c"}}
	ds, err := gate.NewDataset("hand", ex)
	if err != nil {
		t.Fatal(err)
	}
	vecs := [][]float32{
		{1, 0.1}, {1, -0.1}, // near the a cluster
		{0.1, 1},         // an a that sits among the b's: wrong, whatever the centroid
		{0, 2}, {0.2, 3}, // b, scaled up: only the direction counts
		{-1, 0}, // c has one example: not scored, but its centroid stays a candidate
	}
	r, err := gate.Embed(ds, gate.EmbedRun{Version: "v1", Vectors: vecs}, gate.EmbedRun{Version: "v2", Vectors: vecs}, gate.Budget{MaxDrop: 1}, gate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Scored: a0, a1, a2, b0, b1; right: a0, a1, b0, b1.
	if d := r.Comparison.Drop; d.N != 5 || d.Metric != gate.MetricCentroidAccuracy {
		t.Errorf("drop %+v, want 5 examples of %s", d, gate.MetricCentroidAccuracy)
	}
	near(t, "accuracy", *r.Baseline.Accuracy, 0.8)
	if !hasNote(r, "1 examples are the only ones of their label") {
		t.Errorf("no note on the unscored example: %q", r.Notes)
	}
}

func TestEmbedErrors(t *testing.T) {
	ds := threeLabels(t, 6)
	good := randomVectors(6, 4, 1)
	ragged := randomVectors(6, 4, 3)
	ragged[2] = ragged[2][:3]
	oneLabel, err := gate.NewDataset("one", []gate.Example{{"a", "x"}, {"b", "x"}})
	if err != nil {
		t.Fatal(err)
	}
	unlabeled, err := gate.NewDataset("u", []gate.Example{{Text: "a"}, {Text: "b"}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		ds     *gate.Dataset
		cand   [][]float32
		budget gate.Budget
		want   []string
	}{
		{"no budget", ds, good, gate.Budget{}, []string{"needs a budget", "--min-cosine-mean"}},
		{"agreement budget", ds, good, gate.Budget{MinCosineMean: 0.9, MinAgreement: 0.9}, []string{"--min-agreement"}},
		{"cosine above 1", ds, good, gate.Budget{MinCosineMean: 2}, []string{"out of range"}},
		{"empty dataset", &gate.Dataset{}, good, gate.Budget{MinCosineMean: 0.9}, []string{"no examples"}},
		{"too few vectors", ds, good[:5], gate.Budget{MinCosineMean: 0.9}, []string{"5 vectors for 6 examples"}},
		{"ragged", ds, ragged, gate.Budget{MinCosineMean: 0.9}, []string{"3-dimensional vector for example 2"}},
		{"other dimension", ds, randomVectors(6, 5, 1), gate.Budget{MinCosineMean: 0.9}, []string{"4-dimensional vectors", "5-dimensional"}},
		{"drop budget with one label", oneLabel, good[:2], gate.Budget{MaxDrop: 1}, []string{"one label only", "drop --max-drop"}},
		{"drop budget without labels", unlabeled, good[:2], gate.Budget{MaxDrop: 1}, []string{"no labels"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := gate.EmbedRun{Version: "fp32", Vectors: good}
			if tt.ds != nil && len(tt.ds.Examples) > 0 {
				base.Vectors = good[:len(tt.ds.Examples)]
			}
			_, err := gate.Embed(tt.ds, base, gate.EmbedRun{Version: "int8", Vectors: tt.cand}, tt.budget, gate.Options{})
			mustFailOneLine(t, err, tt.want...)
		})
	}
}

func TestEmbedUnlabeled(t *testing.T) {
	ds, err := gate.NewDataset("u", []gate.Example{{Text: "a"}, {Text: "b"}, {Text: "c"}})
	if err != nil {
		t.Fatal(err)
	}
	vecs := randomVectors(3, 8, 1)
	zero := perturbed(vecs, 0, 1)
	zero[1] = make([]float32, 8)
	r, err := gate.Embed(ds, gate.EmbedRun{Version: "fp32", Vectors: vecs}, gate.EmbedRun{Version: "int8", Vectors: zero}, gate.Budget{MinCosineMean: 0.5}, gate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Comparison.Drop != nil || r.Baseline.Accuracy != nil {
		t.Errorf("unlabeled dataset has a task metric: %+v", r.Comparison.Drop)
	}
	if r.Comparison.Cosine.Min != 0 || !r.Pass() {
		t.Errorf("cosine %+v, pass %v: want a zero vector's cosine as 0 and a pass at mean 2/3", r.Comparison.Cosine, r.Pass())
	}
	for _, want := range []string{"No nearest-centroid accuracy: the dataset has no labels", `candidate "int8" gave 1 zero vectors`} {
		if !hasNote(r, want) {
			t.Errorf("no note with %q in %q", want, r.Notes)
		}
	}
}
