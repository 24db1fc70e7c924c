//go:build cgo && ort

package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ortserve/ortserve/bench"
)

// The bench tests run `server bench` end to end against the real server: real ONNX Runtime,
// tokenizer and models. Load steps are short (200 ms of warm-up, 1 s measured) so the whole
// file stays within seconds; the assertions hold on a busy two-core machine because they
// are about what was sent and answered, not how fast.

// benchChild runs `server bench args...` in a child process — the test binary itself, as
// serveChild does — with extra environment variables; --self and --offline open ONNX
// Runtime, and a process has only one environment. It returns the exit code and output.
func benchChild(t *testing.T, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], append([]string{"bench"}, args...)...)
	cmd.Env = append(append(os.Environ(), "ORTSERVE_TEST_EXEC=1"), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return code, out.String(), errb.String()
}

// benchRun runs `server bench args...` in this process, as main would.
func benchRun(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(append([]string{"bench"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

// sentimentOnly is a model repository holding only the real sentiment model (a link to it),
// so that a server on it starts in about half the time.
func sentimentOnly(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	if err := os.Symlink(filepath.Join(os.Getenv("ORTSERVE_MODELS"), "sentiment"), filepath.Join(root, "sentiment")); err != nil {
		t.Fatal(err)
	}
	return root
}

// oneLine is stderr's single line, or fails the test if stderr is not exactly one line:
// a usage error is one line a user can act on, not a page.
func oneLine(t *testing.T, stderr string) string {
	t.Helper()
	s := strings.TrimSuffix(stderr, "\n")
	if s == "" || strings.Contains(s, "\n") {
		t.Errorf("stderr is not one line:\n%s", stderr)
	}
	return s
}

// TestBenchSelf runs the whole `server bench --self` in a child process: serve started in
// it, the offline measurement, an SLO search over two versions with their steps
// interleaved, and all three report files.
func TestBenchSelf(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	jsonPath, htmlPath, mdPath := filepath.Join(dir, "r.json"), filepath.Join(dir, "r.html"), filepath.Join(dir, "r.md")
	// --self reads serve's settings from the environment, as serve does: a one-model
	// repository of the two versions measured, and a largest batch of 4 so that the offline
	// measurement has three batch sizes to run rather than six.
	code, stdout, stderr := benchChild(t, []string{"ORTSERVE_MODELS=" + versionRepo(t, "sentiment", "fp32", "int8"), "ORTSERVE_MAX_BATCH=4"},
		"--self", "--model", "sentiment", "--versions", "fp32,int8", "--slo", "p95=2s",
		"--search-start", "8", "--search-steps", "2", "--step", "1s", "--warmup", "200ms", "--offline-step", "200ms",
		"--json", jsonPath, "--html", htmlPath, "--md", mdPath, "--quiet")
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, want := range []string{"sentiment/fp32", "sentiment/int8", "Summary: highest rate meeting p95", "wrote " + jsonPath, "wrote " + htmlPath, "wrote " + mdPath} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}

	r, err := bench.ReadReport(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	if r.Schema != bench.Schema || r.Route != "/predict" || !strings.Contains(r.Target, "--self") || !r.Load.Search || len(r.Runs) != 1 {
		t.Errorf("schema %q, route %q, target %q, search %v, %d runs; want %q, /predict (sentiment classifies), --self, a search, 1 run",
			r.Schema, r.Route, r.Target, r.Load.Search, len(r.Runs), bench.Schema)
	}
	if r.Workload.Tokens == nil || r.Workload.Tokens.Min < 1 {
		t.Errorf("workload tokens %+v; want the server's x-compute-tokens counts", r.Workload.Tokens)
	}
	if len(r.Runs) == 0 {
		t.Fatalf("no runs:\n%s", stdout)
	}
	var names []string
	for _, v := range r.Runs[0].Versions {
		names = append(names, v.Name)
		ok := 0
		for _, st := range v.Steps {
			if st.OK > 0 {
				ok++
				if !st.Phases.Headers || st.Phases.Inference <= 0 || st.Latency.P95 <= 0 {
					t.Errorf("%s at %g rps: phases %+v, p95 %v ms; want the server's timing headers with inference > 0", v.Name, st.Offered, st.Phases, st.Latency.P95)
				}
			}
			if st.Offered < 8 || st.Pass == nil {
				t.Errorf("%s: step %+v; want an offered rate of at least --search-start 8, judged against the SLO", v.Name, st)
			}
		}
		if ok == 0 || len(v.Steps) > 2 {
			t.Errorf("%s: %d steps, %d with answers; want 1 or 2 steps (--search-steps 2), at least one answered", v.Name, len(v.Steps), ok)
		}
		var batches []int
		for _, p := range v.Offline {
			batches = append(batches, p.Batch)
			if p.ItemsPerS <= 0 || p.P50 <= 0 {
				t.Errorf("%s: offline point %+v; want items/s and p50 > 0", v.Name, p)
			}
		}
		if !slices.Equal(batches, []int{1, 2, 4}) {
			t.Errorf("%s: offline batch sizes %v; want [1 2 4], up to ORTSERVE_MAX_BATCH", v.Name, batches)
		}
		// p95 ≤ 2 s at 8 requests/s is far inside what either version does on any machine
		// that runs these tests, so the search must find an operating point.
		if v.Best < 8 || v.Efficiency <= 0 || v.Verdict == nil || !v.Verdict.Meets {
			t.Errorf("%s: best %g rps, efficiency %g, verdict %+v; want best ≥ 8, efficiency > 0 and the SLO met", v.Name, v.Best, v.Efficiency, v.Verdict)
		}
	}
	if !slices.Equal(names, []string{"sentiment/fp32", "sentiment/int8"}) {
		t.Errorf("versions %v; want [sentiment/fp32 sentiment/int8], the baseline first", names)
	}

	html, err := os.ReadFile(htmlPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(html, []byte("<svg")) || !bytes.Contains(html, []byte("sentiment/int8")) {
		t.Errorf("HTML report has no SVG plot or lacks sentiment/int8 (%d bytes)", len(html))
	}
	md, err := os.ReadFile(mdPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(md, []byte("| sentiment/int8")) && !bytes.Contains(md, []byte("|sentiment/int8")) {
		t.Errorf("Markdown report has no table row for sentiment/int8:\n%s", md)
	}
}

// TestBenchOfflineOnly runs `server bench --offline` with no load in a child process: the
// raw ONNX Runtime limit of two versions at the batch sizes asked for, with no server started
// or contacted, reported as a table and as report files whose versions have no steps.
func TestBenchOfflineOnly(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	jsonPath, mdPath, htmlPath := filepath.Join(dir, "r.json"), filepath.Join(dir, "r.md"), filepath.Join(dir, "r.html")
	code, stdout, stderr := benchChild(t, []string{"ORTSERVE_MODELS=" + minilmOnly(t)},
		"--offline", "--model", "minilm", "--versions", "fp32,int8", "--offline-batches", "1,2", "--offline-step", "200ms",
		"--json", jsonPath, "--md", mdPath, "--html", htmlPath, "--quiet")
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	var rows []string // "version batch" of each table row
	for _, line := range strings.Split(stdout, "\n") {
		if f := strings.Fields(line); len(f) == 4 && strings.HasPrefix(f[0], "minilm/") {
			rows = append(rows, f[0]+" "+f[1])
		}
	}
	if want := []string{"minilm/fp32 1", "minilm/fp32 2", "minilm/int8 1", "minilm/int8 2"}; !slices.Equal(rows, want) {
		t.Errorf("table rows %q; want %q:\n%s", rows, want, stdout)
	}
	for _, want := range []string{"Raw ONNX Runtime limit", "wrote " + jsonPath, "wrote " + mdPath, "wrote " + htmlPath} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}

	r, err := bench.ReadReport(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	if r.Schema != bench.Schema || !strings.Contains(r.Target, "offline") || r.Load != (bench.LoadSpec{}) || r.SLO != nil || len(r.Runs) != 1 {
		t.Fatalf("schema %q, target %q, load %+v, SLO %v, %d runs; want an offline target, no load, no SLO, 1 run", r.Schema, r.Target, r.Load, r.SLO, len(r.Runs))
	}
	var names []string
	for _, v := range r.Runs[0].Versions {
		names = append(names, v.Name)
		if len(v.Steps) != 0 || v.Best != 0 {
			t.Errorf("%s: %d steps, best %g; want no load applied", v.Name, len(v.Steps), v.Best)
		}
		var batches []int
		for _, p := range v.Offline {
			batches = append(batches, p.Batch)
			if p.ItemsPerS <= 0 || p.P50 <= 0 {
				t.Errorf("%s: offline point %+v; want items/s and p50 > 0", v.Name, p)
			}
		}
		if !slices.Equal(batches, []int{1, 2}) {
			t.Errorf("%s: offline batch sizes %v; want [1 2] from --offline-batches", v.Name, batches)
		}
	}
	if !slices.Equal(names, []string{"minilm/fp32", "minilm/int8"}) {
		t.Errorf("versions %v; want [minilm/fp32 minilm/int8] in --versions order", names)
	}
	md, err := os.ReadFile(mdPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(md, []byte("minilm/int8: batch 1:")) {
		t.Errorf("Markdown report lacks the per-batch line of minilm/int8:\n%s", md)
	}
	if html, err := os.ReadFile(htmlPath); err != nil || !bytes.Contains(html, []byte("Offline throughput")) {
		t.Errorf("HTML report lacks the offline chart (err %v)", err)
	}
}

// `server bench --offline` finds a model as serve does: by its model.yaml's name, whatever
// its folder is called.
func TestBenchOfflineFolderNamedOtherwise(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	if err := os.Symlink(filepath.Join(os.Getenv("ORTSERVE_MODELS"), "minilm"), filepath.Join(root, "renamed")); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := benchChild(t, []string{"ORTSERVE_MODELS=" + root, "ORTSERVE_SESSIONS=1"},
		"--offline", "--model", "minilm", "--versions", "int8", "--offline-batches", "1", "--offline-step", "100ms", "--quiet")
	if code != 0 || !strings.Contains(stdout, "minilm/int8") {
		t.Fatalf("exit %d; want 0 and a minilm/int8 row\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
}

// TestBenchURL measures a running server over HTTP, in this process, at one open-loop rate
// on each route an embedder answers; the failure row sends requests the model cannot serve,
// and bench must count them as errors rather than report a fast server.
func TestBenchURL(t *testing.T) {
	t.Parallel()
	url := loadServer(t)
	tests := []struct {
		name   string
		route  []string // --route, if given
		want   string   // the route the report says it used
		failed bool     // every request is expected to fail
	}{
		{"route by task", nil, "/embed", false},
		{"OpenAI route", []string{"--route", "/v1/embeddings"}, "/v1/embeddings", false},
		{"classify route on an embedder", []string{"--route", "/predict"}, "/predict", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "r.json")
			args := append([]string{"--url", url, "--model", "minilm", "--versions", "fp32", "--rate", "20",
				"--step", "1s", "--warmup", "200ms", "--json", path, "--quiet"}, tt.route...)
			code, stdout, stderr := benchRun(args...)
			if code != 0 {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
			}
			if !strings.Contains(stdout, "minilm/fp32") || !strings.Contains(stdout, "wrote "+path) {
				t.Errorf("stdout lacks the version or the file written:\n%s", stdout)
			}
			r, err := bench.ReadReport(path)
			if err != nil {
				t.Fatal(err)
			}
			if r.Route != tt.want || r.Target != url || r.SLO != nil || r.Load.Search {
				t.Errorf("route %q, target %q, SLO %v, search %v; want %s at %s, a sweep with no SLO", r.Route, r.Target, r.SLO, r.Load.Search, tt.want, url)
			}
			if len(r.Runs) != 1 || len(r.Runs[0].Versions) != 1 || len(r.Runs[0].Versions[0].Steps) != 1 {
				t.Fatalf("runs %+v; want one version with one step", r.Runs)
			}
			v := r.Runs[0].Versions[0]
			st := v.Steps[0]
			// Poisson arrivals at 20/s for 1 s: the count strays from 20 by about √20.
			if v.Name != "minilm/fp32" || st.Offered != 20 || st.Sent < 10 || st.Sent > 30 {
				t.Errorf("%s: offered %g, sent %d; want minilm/fp32, 20 rps, 10 to 30 sent", v.Name, st.Offered, st.Sent)
			}
			if tt.failed {
				if st.OK != 0 || st.Errors != st.Sent || st.ErrorSample == "" || !strings.Contains(st.ErrorSample, "HTTP 4") {
					t.Errorf("ok %d, errors %d of %d, sample %q; want every request an HTTP 4xx error", st.OK, st.Errors, st.Sent, st.ErrorSample)
				}
				return
			}
			if st.OK != st.Sent || st.Errors+st.Rejected+st.Timeouts != 0 || st.ErrorSample != "" {
				t.Errorf("ok %d of %d, errors %d, rejected %d, timeouts %d (%q); want every request answered",
					st.OK, st.Sent, st.Errors, st.Rejected, st.Timeouts, st.ErrorSample)
			}
			if st.Latency.P50 <= 0 || st.Latency.P50 > st.Latency.P95 || st.Latency.P95 > st.Latency.Max || st.Achieved <= 0 {
				t.Errorf("latency %+v, achieved %g; want 0 < p50 ≤ p95 ≤ max and throughput > 0", st.Latency, st.Achieved)
			}
			if r.Workload.Tokens == nil || !st.Phases.Headers {
				t.Errorf("tokens %+v, phases %+v; want the server's token counts and timing headers", r.Workload.Tokens, st.Phases)
			}
		})
	}
}

// TestBenchCompare compares a real report with a copy whose p95 doubled, and refuses files
// that are not reports of this schema.
func TestBenchCompare(t *testing.T) {
	t.Parallel()
	url := loadServer(t)
	dir := t.TempDir()
	before, after := filepath.Join(dir, "before.json"), filepath.Join(dir, "after.json")
	if code, stdout, stderr := benchRun("--url", url, "--model", "minilm", "--versions", "fp32", "--rate", "20",
		"--step", "1s", "--warmup", "200ms", "--json", before, "--quiet"); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	r, err := bench.ReadReport(before)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Runs) != 1 || len(r.Runs[0].Versions) != 1 || len(r.Runs[0].Versions[0].Steps) != 1 {
		t.Fatalf("runs %+v; want one version with one step", r.Runs)
	}
	r.Runs[0].Versions[0].Steps[0].Latency.P95 *= 2
	writeReport(t, after, r)

	code, stdout, stderr := benchRun("compare", before, after)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	var row string // the step at 20 rps: offered, p50, p95, p99, achieved
	for _, line := range strings.Split(stdout, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == "20.0" {
			row = line
		}
	}
	if !strings.Contains(stdout, "minilm/fp32") || !strings.Contains(row, "(+100.0%)") || strings.Count(row, "(+0.0%)") != 3 {
		t.Errorf("compare output lacks minilm/fp32, or the 20 rps row lacks +100.0%% (p95) and +0.0%% (the rest):\n%s", stdout)
	}

	// The saved JSON makes every view again.
	html := filepath.Join(dir, "again.html")
	code, stdout, stderr = benchRun("report", "--html", html, before)
	if page, err := os.ReadFile(html); code != 0 || err != nil || !strings.Contains(string(page), "<svg") || !strings.Contains(stdout, "minilm/fp32") {
		t.Errorf("bench report: exit %d, html err %v\nstdout:\n%s\nstderr:\n%s", code, err, stdout, stderr)
	}

	other := filepath.Join(dir, "other.json")
	if err := os.WriteFile(other, []byte(`{"schema": "ortserve.bench/v0", "runs": []}`), 0o644); err != nil {
		t.Fatal(err)
	}
	noSchema := filepath.Join(dir, "no-schema.json")
	if err := os.WriteFile(noSchema, []byte(`{"runs": []}`), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"older schema after", []string{before, other}, `"ortserve.bench/v0"`},
		{"older schema before", []string{other, after}, "schema"},
		{"no schema", []string{before, noSchema}, "no schema field"},
		{"not JSON", []string{before, filepath.Join("..", "..", "go.mod")}, "is not a JSON report"},
		{"missing file", []string{before, filepath.Join(dir, "nope.json")}, "nope.json"},
		{"one file", []string{before}, "usage: server bench compare"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := benchRun(append([]string{"compare"}, tt.args...)...)
			line := oneLine(t, stderr)
			if code != 2 || stdout != "" || !strings.HasPrefix(line, "server: ") || !strings.Contains(line, tt.want) {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit 2, nothing on stdout, one line containing %q", code, stdout, stderr, tt.want)
			}
		})
	}
}

func writeReport(t *testing.T, path string, r *bench.Report) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := bench.WriteJSON(f, r); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestBenchUsage: every invocation that cannot work fails before any load with exit code 2
// and one line that names what to fix. Rows that need /info run against a real server.
func TestBenchUsage(t *testing.T) {
	t.Parallel()
	url := loadServer(t)
	tests := []struct {
		name string
		args []string // "URL" is replaced by the server's URL
		want []string // all in the one line of stderr
	}{
		{"no load", []string{"--url", "URL"}, []string{"no load given", "--slo"}},
		{"bad slo", []string{"--url", "URL", "--slo", "p95=fast"}, []string{"--slo", `"fast"`}},
		{"slo without p95", []string{"--url", "URL", "--slo", "rps=100"}, []string{"--slo", "no p95"}},
		{"bad rate", []string{"--url", "URL", "--rate", "-5"}, []string{"--rate", `"-5"`}},
		{"bad rate range", []string{"--url", "URL", "--rate", "100:10:10"}, []string{"--rate", "ends before it starts"}},
		{"rate and concurrency", []string{"--url", "URL", "--rate", "10", "--concurrency", "4"}, []string{"--rate", "--concurrency"}},
		{"remote url", []string{"--url", "http://10.1.2.3:8080", "--rate", "10"}, []string{"not loopback", "--allow-remote"}},
		{"not a url", []string{"--url", "127.0.0.1:8080", "--rate", "10"}, []string{"--url", "http://127.0.0.1:8080"}},
		{"bad arrival", []string{"--url", "URL", "--rate", "10", "--arrival", "weird"}, []string{"--arrival", `"weird"`, "poisson"}},
		{"bad route", []string{"--url", "URL", "--rate", "10", "--route", "/classify"}, []string{`"/classify"`, "/embed"}},
		{"unknown model", []string{"--url", "URL", "--rate", "10", "--model", "nope"}, []string{"--model", `"nope"`, "[minilm]"}},
		{"unknown version", []string{"--url", "URL", "--rate", "10", "--model", "minilm", "--versions", "fp32,fp64"}, []string{"--versions", `"fp64"`, "fp32", "int8"}},
		{"missing data", []string{"--url", "URL", "--rate", "10", "--data", "missing.csv"}, []string{"missing.csv"}},
		{"data of unknown format", []string{"--url", "URL", "--rate", "10", "--data", "bench_test.go"}, []string{"bench_test.go", "unknown format"}},
		{"stray argument", []string{"--url", "URL", "--rate", "10", "compare"}, []string{"unexpected arguments", "server bench compare"}},
		// --offline with no load measures no server, so these fail before ONNX Runtime opens.
		{"offline only without a model", []string{"--offline"}, []string{"--offline", "--model"}},
		{"offline only with a url", []string{"--offline", "--url", "URL", "--model", "minilm"}, []string{"--url", "no server"}},
		{"offline only, unknown model", []string{"--offline", "--model", "nope"}, []string{"--model", `"nope"`, "minilm", "sentiment"}},
		{"offline only, unknown version", []string{"--offline", "--model", "minilm", "--versions", "fp32,fp64"}, []string{"--versions", `"fp64"`, "fp32", "int8"}},
		{"bad offline batch", []string{"--offline", "--model", "minilm", "--offline-batches", "1,0"}, []string{"--offline-batches", `"0"`}},
		{"offline batches without offline", []string{"--url", "URL", "--rate", "10", "--offline-batches", "1"}, []string{"--offline-batches", "add --offline"}},
		{"curve with load", []string{"--url", "URL", "--rate", "10", "--curve"}, []string{"--curve", "--offline alone"}},
		{"curve without offline", []string{"--model", "minilm", "--curve"}, []string{"--curve", "--offline alone"}},
		{"curve with no run", []string{"--offline", "--model", "minilm", "--curve", "--curve-runs", "0"}, []string{"--curve-runs 0", "at least 1"}},
		{"curve with offline batches", []string{"--offline", "--model", "minilm", "--curve", "--offline-batches", "1"}, []string{"--curve", "leave out --offline-batches"}},
		{"curve with a report file", []string{"--offline", "--model", "minilm", "--curve", "--json", "r.json"}, []string{"--curve", "leave out --json"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := slices.Clone(tt.args)
			for i, a := range args {
				if a == "URL" {
					args[i] = url
				}
			}
			code, stdout, stderr := benchRun(args...)
			line := oneLine(t, stderr)
			if code != 2 || stdout != "" || !strings.HasPrefix(line, "server: ") {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit 2 and one line of stderr", code, stdout, stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(line, w) {
					t.Errorf("stderr %q lacks %q", line, w)
				}
			}
		})
	}
}

// A server that is not there is a failure (exit 1) with one line saying so, not a report of
// a step full of refused connections.
func TestBenchUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	code, stdout, stderr := benchRun("--url", "http://"+addr, "--rate", "10", "--step", "1s")
	line := oneLine(t, stderr)
	if code != 1 || stdout != "" || !strings.Contains(line, "cannot reach the server") || !strings.Contains(line, "is the server running") {
		t.Errorf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

// Two servers (two configs, say) compared in one run: each labelled, steps interleaved.
func TestBenchTwoServers(t *testing.T) {
	t.Parallel()
	a := loadServer(t)
	b := startServer(t, "--models", minilmOnly(t), "--max-batch", "4")
	path := filepath.Join(t.TempDir(), "r.json")
	code, stdout, stderr := benchRun("--url", "default="+a+",small="+b, "--model", "minilm", "--versions", "fp32",
		"--rate", "10", "--step", "1s", "--warmup", "200ms", "--json", path, "--quiet")
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	r, err := bench.ReadReport(path)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, v := range r.Runs[0].Versions {
		names = append(names, v.Name)
		if len(v.Steps) != 1 || v.Steps[0].OK == 0 || v.Steps[0].OK != v.Steps[0].Sent {
			t.Errorf("%s: steps %+v", v.Name, v.Steps)
		}
	}
	if !slices.Equal(names, []string{"default minilm/fp32", "small minilm/fp32"}) {
		t.Errorf("versions %q", names)
	}
	// A label used twice is a usage error.
	code, _, stderr = benchRun("--url", "x="+a+",x="+b, "--rate", "10")
	if line := oneLine(t, stderr); code != 2 || !strings.Contains(line, `label "x" is used twice`) {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
}
