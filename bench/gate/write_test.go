package gate_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ortserve/ortserve/bench/gate"
)

// smallReport is a failing classifier report on twenty examples.
func smallReport(t *testing.T) *gate.Report {
	t.Helper()
	ds := binary(t, 20)
	base := predict("fp32", answers(ds, func(i int) bool { return i < 2 }))
	base.Elapsed = time.Second
	cand := predict("int8", answers(ds, func(i int) bool { return i == 2 || i == 3 }))
	cand.Elapsed = 400 * time.Millisecond
	r, err := gate.Classify(ds, base, cand, gate.Budget{MaxDrop: 1, MinAgreement: 0.9}, gate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r.Model = "sst2"
	return r
}

func embedReport(t *testing.T) *gate.Report {
	t.Helper()
	ds := threeLabels(t, 300)
	vb := clustered(ds, 16, 0.8, 1)
	r, err := gate.Embed(ds, gate.EmbedRun{Version: "fp32", Vectors: vb}, gate.EmbedRun{Version: "int8", Vectors: perturbed(vb, 0.3, 2)},
		gate.Budget{MaxDrop: 1, MinCosineMean: 0.99, MinCosineP1: 0.95}, gate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestWriters(t *testing.T) {
	classify, embed := smallReport(t), embedReport(t)
	cosine := embed.Comparison.Cosine
	tests := []struct {
		name  string
		write func(*bytes.Buffer, *gate.Report) error
		r     *gate.Report
		want  []string
	}{
		{"text classify", wt, classify, []string{
			"Gate: classify sst2: candidate int8 against baseline fp32",
			"synthetic, 20 examples (negative 10, positive 10)",
			"fp32 90.0%, int8 90.0%: drop 0.0 points (95% CI −20.0 … 20.0)",
			"macro-F1   fp32 0.900, int8 0.900",
			"80.0%: 4 of 20 predictions changed (2 right→wrong, 2 wrong→right, 0 wrong→wrong)",
			"mean 0.160, p50 0.000, p95 0.800, max 0.800",
			"fp32 20.0 items/s, int8 50.0 items/s: 2.50× the baseline",
			"  negative       10   0.900   0.900    0.900",
			"Confusion, fp32 (rows: true label, columns: predicted)",
			"  negative                 9         1",
			"Verdict: FAIL",
			"✓ accuracy drop 0.0 points is within the 1.0-point budget, but its interval (95% CI −20.0 … 20.0) reaches past it: inconclusive",
			"✗ agreement 80.0% (4 of 20 predictions changed) is below the 90.0% minimum",
			"The data cannot show the accuracy drop is within the 1.0-point budget",
		}},
		{"markdown classify", wm, classify, []string{
			"## Gate: classify sst2: candidate int8 against baseline fp32",
			"**Verdict: FAIL**",
			"- **accuracy**: fp32 90.0%, int8 90.0%: drop 0.0 points (95% CI −20.0 … 20.0)",
			"| class | support | fp32 P | fp32 R | fp32 F1 | int8 P | int8 R | int8 F1 |",
			"| negative | 10 | 0.900 | 0.900 | 0.900 | 0.900 | 0.900 | 0.900 |",
			"| negative | 9 | 1 |",
			"- ✗ agreement 80.0%",
			"### Notes",
		}},
		{"text embed", wt, embed, []string{
			"Gate: embed: candidate int8 against baseline fp32",
			"centroid accuracy  fp32 ",
			"cosine             mean " + sig3(cosine.Mean) + ", p1 " + sig3(cosine.P1),
			"dimension          16",
			"speed              not timed",
			"✗ mean cosine " + sig3(cosine.Mean) + " is below the 0.990 minimum",
			"Most changed examples",
		}},
		{"markdown embed", wm, embed, []string{
			"- **cosine**: mean " + sig3(cosine.Mean),
			"| # | label | cosine | text |",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := tt.write(&buf, tt.r); err != nil {
				t.Fatal(err)
			}
			mustContain(t, buf.String(), tt.want...)
		})
	}
}

func wt(b *bytes.Buffer, r *gate.Report) error { return gate.WriteText(b, r) }
func wm(b *bytes.Buffer, r *gate.Report) error { return gate.WriteMarkdown(b, r) }

// sig3 formats f as the reports do: three decimals, a true minus sign.
func sig3(f float64) string {
	return strings.Replace(strconv.FormatFloat(f, 'f', 3, 64), "-", "−", 1)
}

func TestWriteJSON(t *testing.T) {
	for _, r := range []*gate.Report{smallReport(t), embedReport(t)} {
		var buf bytes.Buffer
		if err := gate.WriteJSON(&buf, r); err != nil {
			t.Fatal(err)
		}
		var top map[string]json.RawMessage
		if err := json.Unmarshal(buf.Bytes(), &top); err != nil {
			t.Fatal(err)
		}
		want := []string{"schema", "task", "dataset", "baseline", "candidate", "comparison", "budget", "verdict"}
		for _, k := range want {
			if _, ok := top[k]; !ok {
				t.Errorf("no %q in %v", k, slices.Sorted(maps.Keys(top)))
			}
		}
		if string(top["schema"]) != `"ortserve.gate/v1"` {
			t.Errorf("schema %s", top["schema"])
		}
		var back gate.Report
		if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(&back, r) {
			t.Errorf("report changed through JSON:\n%+v\n%+v", back, *r)
		}
	}
}

// TestWritersClean checks that labels from a dataset cannot reach the terminal raw.
func TestWritersClean(t *testing.T) {
	ex := []gate.Example{{"a\x1b[2J", "ok\x1b[31m"}, {"b", "x|y"}}
	ds, err := gate.NewDataset("evil", ex)
	if err != nil {
		t.Fatal(err)
	}
	run := gate.ClassifyRun{Version: "v\n1", Classes: []string{"ok\x1b[31m", "x|y"}, Probs: [][]float32{{0.9, 0.1}, {0.6, 0.4}}}
	r, err := gate.Classify(ds, run, run, gate.Budget{MaxDrop: 1}, gate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []func(*bytes.Buffer, *gate.Report) error{wt, wm} {
		var buf bytes.Buffer
		if err := w(&buf, r); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(buf.String(), "\x1b") {
			t.Errorf("escape character in output:\n%q", buf.String())
		}
	}
	var buf bytes.Buffer
	if err := gate.WriteMarkdown(&buf, r); err != nil {
		t.Fatal(err)
	}
	mustContain(t, buf.String(), `x\|y`)
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestWritersErrors(t *testing.T) {
	r := smallReport(t)
	for name, w := range map[string]func(*gate.Report) error{
		"text":     func(r *gate.Report) error { return gate.WriteText(failWriter{}, r) },
		"markdown": func(r *gate.Report) error { return gate.WriteMarkdown(failWriter{}, r) },
		"json":     func(r *gate.Report) error { return gate.WriteJSON(failWriter{}, r) },
	} {
		if err := w(r); err == nil || !strings.Contains(err.Error(), "disk full") {
			t.Errorf("%s: write error %v", name, err)
		}
		if err := w(nil); err == nil || !strings.Contains(err.Error(), "no report") {
			t.Errorf("%s: nil report: %v", name, err)
		}
	}
	var nilReport *gate.Report
	if nilReport.Pass() {
		t.Error("a nil report passes")
	}
}
