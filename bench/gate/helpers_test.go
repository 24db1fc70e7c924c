package gate_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/ortserve/ortserve/bench/gate"
)

// binary is a dataset of n examples alternating between "negative" and "positive".
func binary(t *testing.T, n int) *gate.Dataset {
	t.Helper()
	ex := make([]gate.Example, n)
	for i := range ex {
		ex[i] = gate.Example{Text: fmt.Sprintf("text %d", i), Label: []string{"negative", "positive"}[i%2]}
	}
	ds, err := gate.NewDataset("synthetic", ex)
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

var binaryClasses = []string{"negative", "positive"}

// predict makes a binary run that predicts class pred[i] with probability 0.9.
func predict(version string, pred []string) gate.ClassifyRun {
	run := gate.ClassifyRun{Version: version, Classes: binaryClasses}
	for _, p := range pred {
		if p == "negative" {
			run.Probs = append(run.Probs, []float32{0.9, 0.1})
		} else {
			run.Probs = append(run.Probs, []float32{0.1, 0.9})
		}
	}
	return run
}

// answers is the truth of ds with the examples at wrong answered wrong.
func answers(ds *gate.Dataset, wrong func(i int) bool) []string {
	out := make([]string, len(ds.Examples))
	for i, e := range ds.Examples {
		out[i] = e.Label
		if wrong(i) {
			out[i] = other(e.Label)
		}
	}
	return out
}

func other(label string) string {
	if label == "negative" {
		return "positive"
	}
	return "negative"
}

// every10 is wrong on one example in ten.
func every10(i int) bool { return i%10 == 3 }

func never(int) bool { return false }

// mustFailOneLine checks that err is one line with the package prefix, holding every want.
func mustFailOneLine(t *testing.T, err error, wants ...string) {
	t.Helper()
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	if strings.Contains(msg, "\n") || !strings.HasPrefix(msg, "gate: ") {
		t.Errorf("error is not one line with the package prefix: %q", msg)
	}
	mustContain(t, msg, wants...)
}

func mustContain(t *testing.T, s string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(s, w) {
			t.Errorf("missing %q in:\n%s", w, s)
		}
	}
}

func hasNote(r *gate.Report, sub string) bool {
	for _, n := range r.Notes {
		if strings.Contains(n, sub) {
			return true
		}
	}
	return false
}

// clustered makes unit-ish vectors around one center per label, with noise of the given size.
func clustered(ds *gate.Dataset, dim int, noise float64, seed uint64) [][]float32 {
	rng := rand.New(rand.NewPCG(seed, 7))
	centers := make(map[string][]float64)
	crng := rand.New(rand.NewPCG(99, 99)) // the same centers for every version
	for _, l := range ds.Labels {
		c := make([]float64, dim)
		for j := range c {
			c[j] = crng.NormFloat64()
		}
		centers[l] = c
	}
	out := make([][]float32, len(ds.Examples))
	for i, e := range ds.Examples {
		v := make([]float32, dim)
		for j := range v {
			v[j] = float32(centers[e.Label][j] + noise*rng.NormFloat64())
		}
		out[i] = v
	}
	return out
}

// randomVectors are vectors with no relation to the labels.
func randomVectors(n, dim int, seed uint64) [][]float32 {
	rng := rand.New(rand.NewPCG(seed, 11))
	out := make([][]float32, n)
	for i := range out {
		out[i] = make([]float32, dim)
		for j := range out[i] {
			out[i][j] = float32(rng.NormFloat64())
		}
	}
	return out
}

// perturbed adds noise of the given size to each vector.
func perturbed(vs [][]float32, noise float64, seed uint64) [][]float32 {
	rng := rand.New(rand.NewPCG(seed, 13))
	out := make([][]float32, len(vs))
	for i, v := range vs {
		out[i] = make([]float32, len(v))
		for j, x := range v {
			out[i][j] = x + float32(noise*rng.NormFloat64())
		}
	}
	return out
}
