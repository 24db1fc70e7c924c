package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ortserve/ortserve/bench/plan"
)

// planReport is a real `server bench --json` report (an earlier run of the command that makes
// docs/bench/sentiment.json, without its histograms): sentiment fp32 and int8 on two CPUs,
// p95 ≤ 100 ms, 300 rps target.
const planReport = "../../bench/plan/testdata/sentiment.json"

// The plan tests run the subcommands in this process; they need no native library.

func planRun(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(append([]string{"plan"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

// TestPlanDiurnal is docs/plan.md's run, `server plan --report bench.json --trace diurnal`,
// made small: 10× one replica's rate rather than 100×, and time-compressed to 200k requests.
func TestPlanDiurnal(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	js, md := filepath.Join(dir, "plan.json"), filepath.Join(dir, "plan.md")
	code, out, errs := planRun("--report", planReport, "--trace", "diurnal", "--peak-rps", "1300",
		"--max-requests", "200000", "--json", js, "--md", md)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{
		"Plan for sentiment/int8 under the diurnal trace, SLO p95 ≤ 100 ms",
		"diurnal, 24 h, 325 to 1300 rps",
		"replicas min/mean/max", "replica-hours", "cost",
		"queue   2.4 in flight/pod, 1 min avg", "cpu     70% busy, 15 s avg",
		"$0.1 per replica-hour",
		"replicaCount: 13 ", "minReplicas: 4 ", "maxReplicas: 26 ",
		"time compressed",
		"wrote " + js, "wrote " + md,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	var r plan.Result
	data, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	if r.Schema != plan.Schema || len(r.Outcomes) != 2 {
		t.Fatalf("json: %s", data[:min(len(data), 400)])
	}
	for _, o := range r.Outcomes {
		// Cost is replica-hours at the report's $0.10; a day at 4 to 26 replicas.
		if o.ReplicaHours < 4*24 || o.ReplicaHours > 26*24 || o.Cost != o.ReplicaHours*0.1 {
			t.Errorf("%s: %.1f replica-hours, $%.2f", o.Policy.Name, o.ReplicaHours, o.Cost)
		}
	}
	if b, err := os.ReadFile(md); err != nil || !strings.Contains(string(b), "| policy |") {
		t.Errorf("markdown: %v\n%s", err, b)
	}
}

// TestPlanTraceFile: a CSV trace, scaled to --peak-rps, one policy, a version by name.
func TestPlanTraceFile(t *testing.T) {
	t.Parallel()
	csv := filepath.Join(t.TempDir(), "traffic.csv")
	if err := os.WriteFile(csv, []byte("seconds,rps\n0,10\n120,40\n240,40\n300,10\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := planRun("--report", planReport, "--version", "fp32", "--trace", csv, "--peak-rps", "400",
		"--policies", "queue", "--balance", "random", "--price-per-hour", "2")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"sentiment/fp32 under the " + csv, "100 to 400 rps", "random balancing", "$2 per replica-hour", "queue "} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "cpu ") {
		t.Errorf("cpu simulated though not asked for:\n%s", out)
	}
}

func TestPlanUsage(t *testing.T) {
	t.Parallel()
	csv := filepath.Join(t.TempDir(), "t.csv")
	os.WriteFile(csv, []byte("0,1\n60,1\n"), 0o644)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "--report is required"},
		{[]string{"--report", "nope.json"}, "nope.json"},
		{[]string{"--report", planReport, "--trace", "weekly"}, `--trace "weekly" is neither a built-in shape (diurnal, burst, constant) nor a file`},
		{[]string{"--report", planReport, "--version", "fp16"}, `no version "fp16"`},
		{[]string{"--report", planReport, "--slo", "p95=10ms"}, "met p95 ≤ 10ms at no measured rate"},
		{[]string{"--report", planReport, "--balance", "least"}, `--balance "least"`},
		{[]string{"--report", planReport, "--policies", "memory"}, `unknown policy "memory"`},
		{[]string{"--report", planReport, "--cpu-target", "70"}, "CPU target 70"},
		{[]string{"--report", planReport, "--min", "9", "--max", "3"}, "--min 9 is above --max 3"},
		{[]string{"--report", planReport, "--trace", csv, "--duration", "1h"}, "--duration sets a built-in shape's length"},
		{[]string{"--report", planReport, "--trace", "burst", "--burst", "0.5"}, "burst factor 0.5"},
		{[]string{"--report", planReport, "--peak-rps", "-1"}, "--peak-rps -1"},
		{[]string{"--report", planReport, "extra"}, "unexpected arguments"},
	} {
		code, _, errs := planRun(tc.args...)
		if code != 2 || !strings.Contains(errs, tc.want) {
			t.Errorf("server plan %v: exit %d, stderr %q; want 2 and %q", tc.args, code, errs, tc.want)
		}
		if lines := strings.Count(strings.TrimSpace(errs), "\n"); code == 2 && lines > 0 {
			t.Errorf("server plan %v: error is %d lines: %q", tc.args, lines+1, errs)
		}
	}
}

// TestBenchPlanHelm: `server bench report --plan-helm` prints the Helm values after the
// report, from plan.Size; `server bench --plan-helm` needs an rps target before it measures.
func TestBenchPlanHelm(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	if code := run([]string{"bench", "report", "--plan-helm", planReport}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	text := out.String()
	i := strings.Index(text, "# Helm values for deploy/ from sentiment/int8")
	if i < 0 || !strings.Contains(text[:i], "Summary") {
		t.Fatalf("no Helm values after the report:\n%s", text)
	}
	for _, want := range []string{
		"replicaCount: 3 ", // the report's own plan for 300 rps: ceil(300 × 1.3 / 130)
		"ceil(300 rps target × 1.3 headroom / 130 rps per replica at p95 ≤ 100 ms, measured)",
		"autoscaling:\n  enabled: true\n",
		"minReplicas: 2 ", "maxReplicas: 9 ", "metric: inflight ",
		"targetInFlightPerPod: 2.4 ", "targetQueuePerPod: 0.51 ",
	} {
		if !strings.Contains(text[i:], want) {
			t.Errorf("values lack %q:\n%s", want, text[i:])
		}
	}

	out.Reset()
	errb.Reset()
	code := run([]string{"bench", "--plan-helm", "--slo", "p95=100ms"}, &out, &errb)
	if code != 2 || !strings.Contains(errb.String(), "--plan-helm sizes replicas for the SLO's throughput target") {
		t.Errorf("--plan-helm without rps: exit %d, %q", code, errb.String())
	}
}
