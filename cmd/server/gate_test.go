//go:build cgo && ort

package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ortserve/ortserve/bench/gate"
	"github.com/ortserve/ortserve/cmd/server/internal/config"
	"github.com/ortserve/ortserve/runtime/ort/onnxtest"
)

// The gate tests run the real models on the polarity test split ($ORTSERVE_DATA/test.csv,
// 400 sentences). The whole split goes only through the runs made as a user makes them; the
// others use slices of it.

// testSplit reads $ORTSERVE_DATA/test.csv as rows of text and label.
func testSplit(t *testing.T) [][]string {
	t.Helper()
	f, err := os.Open(testCSV(t))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	return rows[1:]
}

func testCSV(t *testing.T) string {
	t.Helper()
	d := os.Getenv("ORTSERVE_DATA")
	if d == "" {
		t.Fatal("ORTSERVE_DATA is not set: run these tests with `make test`")
	}
	return filepath.Join(d, "test.csv")
}

// writeCSV writes header and every step-th row of rows (both classes: the split has each
// class in a run) to path, with labels renamed by relabel (nil: as they are).
func writeCSV(t *testing.T, path string, header []string, rows [][]string, step int, relabel map[string]string) string {
	t.Helper()
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	w.Write(header)
	for i := 0; i < len(rows); i += step {
		label := rows[i][1]
		if relabel != nil {
			label = relabel[label]
		}
		w.Write([]string{rows[i][0], label})
	}
	w.Flush()
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// modelCopy makes a repository in a temporary folder holding one model folder, a copy of
// the real one: its tokenizer and ONNX files linked, model.yaml with only the versions given
// (name → file) and extra appended, and files written beside them.
func modelCopy(t *testing.T, model string, versions [][2]string, extra string, files map[string][]byte) (root, dir string) {
	t.Helper()
	src := filepath.Join(os.Getenv("ORTSERVE_MODELS"), model)
	cfg, err := os.ReadFile(filepath.Join(src, "model.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	root = t.TempDir()
	dir = filepath.Join(root, model)
	os.Mkdir(dir, 0o755)
	// Keep the real config up to its versions (a gate section the build may add goes too).
	y := string(cfg)
	y = y[:strings.Index(y, "versions:")] + "versions:\n"
	for _, v := range versions {
		y += fmt.Sprintf("  %s: {file: %s}\n", v[0], v[1])
		if _, ok := files[v[1]]; !ok {
			if err := os.Symlink(filepath.Join(src, v[1]), filepath.Join(dir, v[1])); err != nil && !os.IsExist(err) {
				t.Fatal(err)
			}
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "model.yaml"), []byte(y+extra), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(src, "tokenizer.json"), filepath.Join(dir, "tokenizer.json")); err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root, dir
}

// damagedInt8 is the sentiment int8 model with its head's per-channel weight scales and bias
// negated: its logits are negated, so it predicts the other class on every text.
func damagedInt8(t *testing.T) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(os.Getenv("ORTSERVE_MODELS"), "sentiment", "int8.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	n, err := onnxtest.NegateFloats(data, func(name string) bool { return strings.HasPrefix(name, "head.") })
	if err != nil || n < 2 {
		t.Fatalf("negating the head: %d initializers, %v; want its scale and bias", n, err)
	}
	return data
}

// gateChild runs `server gate args...` in a child process (it opens ONNX Runtime itself) with
// env added to the test's environment, and returns its exit code, stdout and stderr.
func gateChild(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], append([]string{"gate"}, args...)...)
	cmd.Env = append(append(os.Environ(), "ORTSERVE_TEST_EXEC=1"), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return ee.ExitCode(), stdout.String(), stderr.String()
	case err != nil:
		t.Fatal(err)
	}
	return 0, stdout.String(), stderr.String()
}

// gateHere runs `server gate args...` in this process on testEnv and returns its stdout and
// error.
func gateHere(t *testing.T, args ...string) (string, error) {
	t.Helper()
	j, err := config.ParseGate(append([]string{"--device", "cpu"}, args...), os.Getenv, io.Discard)
	if err != nil {
		return "", err
	}
	var out, errb bytes.Buffer
	err = runGateJob(t.Context(), j, testEnv, &out, &errb)
	if errb.Len() > 0 {
		t.Logf("stderr: %s", errb.String())
	}
	return out.String(), err
}

func readReport(t *testing.T, path string) *gate.Report {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var r gate.Report
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	return &r
}

// The run a user makes: the int8 sentiment classifier against fp32 on the whole test split,
// with a budget of 1 point, as a user would run it (real repository, child process).
func TestGateSentimentInt8(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	jsonPath, mdPath := filepath.Join(dir, "gate.json"), filepath.Join(dir, "gate.md")
	start := time.Now()
	// Without the served pass, which TestGateServedVariability drives: it would double the runs.
	code, stdout, stderr := gateChild(t, nil, "--model", "sentiment", "--baseline", "fp32", "--candidate", "int8",
		"--data", testCSV(t), "--max-drop", "1", "--device", "cpu", "--served-concurrency", "0", "--json", jsonPath, "--md", mdPath)
	t.Logf("exit %d in %v\n%s%s", code, time.Since(start).Round(time.Millisecond), stdout, stderr)
	r := readReport(t, jsonPath)
	if want := map[bool]int{true: 0, false: 1}[r.Pass()]; code != want {
		t.Fatalf("exit %d; the report says pass=%v, so want %d", code, r.Pass(), want)
	}
	// fp32 is the build's model and the build's tokenization: its accuracy is the build's
	// report's, 0.7525 (docs/models.md).
	if r.Dataset.N != 400 || r.Baseline.Version != "fp32" || r.Candidate.Version != "int8" || r.Baseline.Accuracy == nil || *r.Baseline.Accuracy != 0.7525 {
		t.Errorf("dataset %d examples, baseline %+v; want 400 and fp32 at 0.7525", r.Dataset.N, r.Baseline)
	}
	d := r.Comparison.Drop
	if d == nil || !(d.Low <= d.Points && d.Points <= d.High) || d.High-d.Low <= 0 {
		t.Errorf("drop %+v: want an interval around the point estimate", d)
	}
	for _, want := range []string{"accuracy   fp32 75.2%, int8 ", "95% CI", "budget     drop ≤ 1 point", "Verdict: "} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q", want)
		}
	}
	if md, err := os.ReadFile(mdPath); err != nil || !bytes.Contains(md, []byte("int8")) {
		t.Errorf("markdown report: %v", err)
	}
}

// A damaged int8 (its classes swapped) fails the gate: exit 1, and the text says why.
func TestGateDamaged(t *testing.T) {
	t.Parallel()
	root, _ := modelCopy(t, "sentiment", [][2]string{{"fp32", "fp32.onnx"}, {"int8", "int8.onnx"}}, "",
		map[string][]byte{"int8.onnx": damagedInt8(t)})
	data := writeCSV(t, filepath.Join(t.TempDir(), "slice.csv"), []string{"text", "label"}, testSplit(t), 8, nil)
	jsonPath := filepath.Join(t.TempDir(), "gate.json")
	code, stdout, stderr := gateChild(t, nil, "--models", root, "--model", "sentiment", "--candidate", "int8",
		"--data", data, "--max-drop", "1", "--device", "cpu", "--json", jsonPath)
	if code != 1 || !strings.Contains(stdout, "Verdict: FAIL") || !strings.Contains(stderr, "server: gate: sentiment: int8 failed against fp32") {
		t.Fatalf("exit %d; want 1 with a FAIL verdict\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	r := readReport(t, jsonPath)
	if r.Comparison.Drop == nil || r.Comparison.Drop.Points < 20 || r.Comparison.Agreement == nil || r.Comparison.Agreement.Fraction > 0.1 {
		t.Errorf("drop %+v, agreement %+v: want the swapped classes to lose tens of points and agree on almost nothing", r.Comparison.Drop, r.Comparison.Agreement)
	}
}

// The embedder's int8 against fp32: the cosine distribution and the nearest-centroid
// accuracy, and a verdict that follows the budgets.
func TestGateEmbedInt8(t *testing.T) {
	t.Parallel()
	root, _ := modelCopy(t, "minilm", [][2]string{{"fp32", "fp32.onnx"}, {"int8", "int8.onnx"}}, "", nil)
	dir := t.TempDir()
	pass := filepath.Join(dir, "pass.json")
	half := writeCSV(t, filepath.Join(dir, "half.csv"), []string{"text", "label"}, testSplit(t), 2, nil)
	// Without the served pass (TestGateServedVariability's): it would double the runs.
	stdout, err := gateHere(t, "--models", root, "--model", "minilm", "--candidate", "int8", "--data", half,
		"--min-cosine-mean", "0.98", "--min-cosine-p1", "0.95", "--max-drop", "3", "--served-concurrency", "0", "--json", pass)
	t.Logf("%s", stdout)
	r := readReport(t, pass)
	if (err == nil) != r.Pass() || errors.Is(err, errUsage) {
		t.Fatalf("error %v, but the report says pass=%v", err, r.Pass())
	}
	c := r.Comparison
	if c.Cosine == nil || !(c.Cosine.Mean > 0.9 && c.Cosine.Mean <= 1) || !(c.Cosine.P1 <= c.Cosine.Mean) {
		t.Errorf("cosine %+v: want a distribution near 1", c.Cosine)
	}
	if c.Drop == nil || c.Drop.Metric != gate.MetricCentroidAccuracy || r.Baseline.Accuracy == nil || *r.Baseline.Accuracy < 0.6 {
		t.Errorf("drop %+v, baseline %+v: want the nearest-centroid accuracy, well above chance", c.Drop, r.Baseline)
	}
	for _, want := range []string{"cosine", "centroid"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q", want)
		}
	}

	// A cosine budget the int8 cannot meet fails it (on a slice, to keep the test short).
	fail := filepath.Join(dir, "fail.json")
	slice := writeCSV(t, filepath.Join(dir, "slice.csv"), []string{"text", "label"}, testSplit(t), 8, nil)
	_, err = gateHere(t, "--models", root, "--model", "minilm", "--candidate", "int8", "--data", slice,
		"--min-cosine-mean", "0.9999", "--served-concurrency", "0", "--json", fail)
	r2 := readReport(t, fail)
	if err == nil || errors.Is(err, errUsage) || r2.Pass() || r2.Comparison.Cosine == nil || r2.Comparison.Cosine.Mean >= 0.9999 {
		t.Errorf("a mean cosine budget of 0.9999: error %v, pass %v, cosine %+v; want a failed gate", err, r2.Pass(), r2.Comparison.Cosine)
	}
}

// A model whose model.yaml has a gate section needs no flags: `server gate --model sentiment`
// with the repository and device from the environment. The section's columns and label map
// are used, and each of its candidates gets its own report and files.
func TestGateConfigSection(t *testing.T) {
	t.Parallel()
	section := `
gate:
  baseline: fp32
  candidates: [int8, int8copy]
  data: gate.csv
  text_column: sentence
  label_column: polarity
  label_map: {0: negative, 1: positive}
  max_drop: 15
`
	root, dir := modelCopy(t, "sentiment", [][2]string{{"fp32", "fp32.onnx"}, {"int8", "int8.onnx"}, {"int8copy", "int8.onnx"}}, section, nil)
	writeCSV(t, filepath.Join(dir, "gate.csv"), []string{"sentence", "polarity"}, testSplit(t), 10, map[string]string{"negative": "0", "positive": "1"})
	out := t.TempDir()
	code, stdout, stderr := gateChild(t, []string{"ORTSERVE_MODELS=" + root, "ORTSERVE_DEVICE=cpu"}, "--model", "sentiment", "--json", filepath.Join(out, "g.json"))
	if code != 0 || strings.Count(stdout, "Verdict: PASS") != 2 {
		t.Fatalf("exit %d; want 0 and two passing reports\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	var reports []*gate.Report
	for _, v := range []string{"int8", "int8copy"} {
		r := readReport(t, filepath.Join(out, "g-"+v+".json"))
		if r.Candidate.Version != v || r.Dataset.N != 40 || !strings.HasSuffix(r.Dataset.Source, filepath.Join("sentiment", "gate.csv")) || r.Budget.MaxDrop != 15 {
			t.Errorf("%s: candidate %s, dataset %+v, budget %+v", v, r.Candidate.Version, r.Dataset, r.Budget)
		}
		reports = append(reports, r)
	}
	// The two are the same file: run the same way, they give the same outputs (int8's
	// dynamic quantization would show a different batching).
	if a, b := reports[0].Comparison, reports[1].Comparison; a.ProbDelta == nil || b.ProbDelta == nil || *a.ProbDelta != *b.ProbDelta || *a.Agreement != *b.Agreement {
		t.Errorf("int8 and its copy differ: %+v %+v against %+v %+v", a.ProbDelta, a.Agreement, b.ProbDelta, b.Agreement)
	}
}

// Mistakes in the invocation or the data are usage errors (exit 2), found before ONNX Runtime
// opens, with a line that says what to do.
func TestGateUsage(t *testing.T) {
	t.Parallel()
	root, _ := modelCopy(t, "sentiment", [][2]string{{"fp32", "fp32.onnx"}, {"int8", "int8.onnx"}}, "", nil)
	rows := testSplit(t)
	tmp := t.TempDir()
	good := writeCSV(t, filepath.Join(tmp, "good.csv"), []string{"text", "label"}, rows, 40, nil)
	binary := writeCSV(t, filepath.Join(tmp, "binary.csv"), []string{"text", "label"}, rows, 40, map[string]string{"negative": "0", "positive": "1"})
	os.WriteFile(filepath.Join(tmp, "data.txt"), []byte("a text\n"), 0o644)
	// A second model folder whose model.yaml is broken: only asking for it is an error; it is known by its folder's name.
	os.Mkdir(filepath.Join(root, "broken"), 0o755)
	os.WriteFile(filepath.Join(root, "broken", "model.yaml"), []byte("name: broken\ntask: generate\n"), 0o644)

	base := []string{"gate", "--models", root, "--device", "cpu"}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no model", []string{"--data", good, "--max-drop", "1"}, "no --model"},
		{"unknown model", []string{"--model", "nope", "--data", good, "--max-drop", "1"}, `unknown model "nope" (have [broken sentiment])`},
		{"broken model.yaml", []string{"--model", "broken", "--data", good, "--max-drop", "1"}, `task "generate"`},
		{"unknown baseline", []string{"--model", "sentiment", "--baseline", "fp64", "--data", good, "--max-drop", "1"}, `baseline "fp64" is not one of the versions`},
		{"unknown candidate", []string{"--model", "sentiment", "--candidate", "int4", "--data", good, "--max-drop", "1"}, `candidate "int4" is not one of the versions`},
		{"candidate is baseline", []string{"--model", "sentiment", "--candidate", "fp32", "--data", good, "--max-drop", "1"}, `candidate "fp32" is the baseline`},
		{"no data", []string{"--model", "sentiment", "--max-drop", "1"}, "no dataset: give --data FILE"},
		{"missing data file", []string{"--model", "sentiment", "--data", filepath.Join(tmp, "missing.csv"), "--max-drop", "1"}, "no such file or directory"},
		{"unknown format", []string{"--model", "sentiment", "--data", filepath.Join(tmp, "data.txt"), "--max-drop", "1"}, "unknown dataset format"},
		{"wrong column", []string{"--model", "sentiment", "--data", good, "--text-column", "sentence", "--max-drop", "1"}, `no "sentence" column`},
		{"labels not the model's", []string{"--model", "sentiment", "--data", binary, "--max-drop", "1"}, `is not one of sentiment's labels [negative positive]: rename the data's labels with --label-map`},
		{"label map to other names", []string{"--model", "sentiment", "--data", binary, "--label-map", "0=neg,1=pos", "--max-drop", "1"}, `not one of the labels [negative positive]`},
		{"bad label map", []string{"--model", "sentiment", "--data", binary, "--label-map", "0negative", "--max-drop", "1"}, "--label-map: gate: label map entry"},
		{"no budget", []string{"--model", "sentiment", "--data", good}, "needs --max-drop > 0"},
		{"cosine budget on a classifier", []string{"--model", "sentiment", "--data", good, "--max-drop", "1", "--min-cosine-mean", "0.9"}, "--min-cosine-mean and --min-cosine-p1 are for embed models"},
		{"budget out of range", []string{"--model", "sentiment", "--data", good, "--max-drop", "1", "--min-agreement", "95"}, "--min-agreement 95: want 0 to 1"},
		{"few resamples", []string{"--model", "sentiment", "--data", good, "--max-drop", "1", "--resamples", "10"}, "--resamples 10: use at least 100"},
		{"bad device", []string{"--model", "sentiment", "--data", good, "--max-drop", "1", "--device", "tpu"}, `unknown device "tpu"`},
		{"arguments", []string{"--model", "sentiment", "extra"}, "unexpected arguments [extra]"},
		{"negative served concurrency", []string{"--model", "sentiment", "--data", good, "--max-drop", "1", "--served-concurrency", "-1"}, "--served-concurrency -1: give the requests in flight, or 0"},
		{"invariance without the served pass", []string{"--model", "sentiment", "--data", good, "--max-drop", "1", "--served-concurrency", "0", "--require-batch-invariance"}, "--require-batch-invariance needs the served pass"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(append(base, tt.args...), &out, &errb)
			if code != 2 || !strings.Contains(errb.String(), tt.want) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", code, errb.String(), tt.want)
			}
		})
	}

	// With the label map the same file runs, and the report speaks the model's labels.
	json := filepath.Join(tmp, "mapped.json")
	if _, err := gateHere(t, "--models", root, "--model", "sentiment", "--candidate", "int8", "--data", binary,
		"--label-map", "0=negative,1=positive", "--max-drop", "50", "--json", json); err != nil {
		t.Fatalf("with --label-map: %v", err)
	}
	if r := readReport(t, json); r.Dataset.N != 10 || len(r.Dataset.Labels) != 2 {
		t.Errorf("dataset %+v; want 10 examples of the model's two labels", r.Dataset)
	}
}

// The served pass: the same texts through the batcher, one per request, many in flight. The
// report has a section per version against its own fixed-chunk answers; int8-static comes out
// batch-invariant and dynamic int8 not (its probabilities and embeddings move with their
// batch-mates; docs/quantization.md has the figures). With --require-batch-invariance that fails
// int8 and passes int8-static; without it the pass is informational.
func TestGateServedVariability(t *testing.T) {
	t.Parallel()
	// A quarter of the split: enough texts for dynamic int8 to move and static int8 not to.
	data := writeCSV(t, filepath.Join(t.TempDir(), "quarter.csv"), []string{"text", "label"}, testSplit(t), 4, nil)
	for _, tc := range []struct {
		model   string
		require bool
	}{{"sentiment", true}, {"minilm", false}} {
		t.Run(tc.model, func(t *testing.T) {
			dir := t.TempDir()
			args := []string{"--model", tc.model, "--baseline", "fp32", "--candidate", "int8,int8-static", "--data", data,
				"--json", filepath.Join(dir, "g.json"), "--md", filepath.Join(dir, "g.md")}
			if tc.require {
				// A wide accuracy budget: the verdicts turn on batch invariance alone.
				args = append(args, "--require-batch-invariance", "--max-drop", "50")
			}
			stdout, err := gateHere(t, args...)
			t.Logf("%s", stdout)
			if strings.Count(stdout, "Served through the batcher (one text per request, 64 in flight, in a shuffled order") != 2 {
				t.Errorf("stdout lacks the served section of each report")
			}
			for _, v := range []string{"int8", "int8-static"} {
				r := readReport(t, filepath.Join(dir, "g-"+v+".json"))
				s := r.Served
				if s == nil || len(s.Versions) != 2 || s.Versions[0].Version != "fp32" || s.Versions[1].Version != v || s.Concurrency != 64 || s.Required != tc.require {
					t.Fatalf("%s: served %+v; want fp32 and %s, 64 in flight, required %v", v, s, v, tc.require)
				}
				cand := s.Versions[1]
				if cand.N != 100 || cand.ItemsPerSecond <= 0 {
					t.Errorf("%s: %d texts at %.1f/s; want 100, timed", v, cand.N, cand.ItemsPerSecond)
				}
				if want := v == "int8-static"; cand.Invariant != want {
					t.Errorf("%s: batch-invariant %v, want %v: %+v", v, cand.Invariant, want, cand)
				}
				// fp32 moves by float noise only.
				if base := s.Versions[0]; !base.Invariant {
					t.Errorf("fp32 is not batch-invariant: %+v", base)
				}
				if tc.model == "minilm" && (cand.CosineMin == nil || cand.CosineP1 == nil || cand.LabelFlips != nil) ||
					tc.model == "sentiment" && (cand.MaxProbDelta == nil || cand.LabelFlips == nil || cand.CosineMin != nil) {
					t.Errorf("%s: %+v: want the %s statistics", v, cand, tc.model)
				}
				var check *gate.Check
				for i, c := range r.Verdict.Checks {
					if c.Rule == "batch_invariance" {
						check = &r.Verdict.Checks[i]
					}
				}
				switch {
				case tc.require && (check == nil || check.Pass != cand.Invariant):
					t.Errorf("%s: checks %+v; want a batch_invariance check that passes iff invariant", v, r.Verdict.Checks)
				case !tc.require && check != nil:
					t.Errorf("%s: a batch_invariance check without --require-batch-invariance", v)
				case !tc.require && v == "int8" && !hasNote(r.Notes, "int8 is not batch-invariant"):
					t.Errorf("notes %q: want one on int8's variability", r.Notes)
				}
				if md, err := os.ReadFile(filepath.Join(dir, "g-"+v+".md")); err != nil || !bytes.Contains(md, []byte("### Served through the batcher")) {
					t.Errorf("%s markdown: %v, no served section", v, err)
				}
			}
			if tc.require && (err == nil || !strings.Contains(err.Error(), "sentiment: int8 failed against fp32")) {
				t.Errorf("error %v; want int8, and only it, to fail the required invariance", err)
			}
		})
	}
}

func hasNote(notes []string, sub string) bool {
	for _, n := range notes {
		if strings.Contains(n, sub) {
			return true
		}
	}
	return false
}
