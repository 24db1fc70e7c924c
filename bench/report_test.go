package bench

import (
	"bytes"
	"math"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ortserve/ortserve/bench/report"
)

// viewFixture is a realistic report of two versions, fp32 and int8, swept over five offered
// rates against an SLO of p95 ≤ 50 ms at 600 req/s, three runs, with offline points, one
// step where Little's Law fails and one with two latency modes.
func viewFixture() *Report {
	pass, fail := true, false
	hist := func(modes ...[3]float64) []Bin { // each mode: median ms, p99 ms, requests
		var bins []Bin
		for up := 1.0; up < 5000; up *= 1.25 {
			lo := up / 1.25
			var n float64
			for _, m := range modes {
				sigma := math.Log(m[1]/m[0]) / 2.326
				cdf := func(x float64) float64 { return 0.5 * math.Erfc(-math.Log(x/m[0])/(sigma*math.Sqrt2)) }
				n += m[2] * (cdf(up) - cdf(lo))
			}
			bins = append(bins, Bin{UpTo: math.Round(up*1000) / 1000, Count: int64(math.Round(n))})
		}
		return bins
	}
	step := func(offered, achieved, p50, p95, p99, max float64, ok *bool) Step {
		s := Step{
			Offered: offered, DurationS: 10, Sent: int(offered * 10), OK: int(achieved * 10),
			Achieved: achieved, ItemsPerS: achieved * 8, TokensPerS: achieved * 8 * 31,
			Latency:   Latency{Mean: p50 * 1.1, P50: p50, P90: (p50 + p95) / 2, P95: p95, P99: p99, P999: max * 0.9, Max: max},
			Phases:    Phases{Client: 0.05, Network: 0.4, Tokenize: 0.3, Queue: p50 * 0.3, Inference: p50 * 0.6, Server: p50 * 0.95, Headers: true},
			Dominant:  "inference",
			Little:    Little{InFlight: achieved * p50 * 1.1 / 1000, Expected: achieved * p50 * 1.1 / 1000},
			Histogram: hist([3]float64{p50, p99, achieved * 10}),
			Pass:      ok,
		}
		if ok != nil && !*ok {
			s.Why = "p95 " + report.Num(p95) + " ms over 50 ms"
		}
		return s
	}

	fp32 := []Step{
		step(100, 100, 8.1, 12.3, 15.8, 22, &pass),
		step(200, 199.8, 8.6, 14.1, 19.5, 31, &pass),
		step(400, 399, 11.2, 24.6, 38, 57, &pass),
		step(800, 702, 95, 410, 620, 900, &fail),
		step(1600, 740, 880, 2100, 2900, 3400, &fail),
	}
	fp32[2].Little = Little{InFlight: 3.1, Expected: 4.5, Deviation: 0.311, Flag: true}
	fp32[3].Rejected = 40
	fp32[3].Dominant = "queue"
	fp32[4].Rejected, fp32[4].Errors, fp32[4].Timeouts = 800, 3, 2
	fp32[4].ErrorSample = "context deadline exceeded"
	fp32[4].Dominant = "queue"

	int8 := []Step{
		step(100, 100, 4.2, 6.0, 7.9, 11, &pass),
		step(200, 200, 4.4, 6.8, 9.2, 14, &pass),
		step(400, 400, 5.1, 19.5, 24.1, 33, &pass),
		step(800, 798, 7.9, 38.5, 47.2, 66, &pass),
		step(1600, 1130, 420, 1300, 1800, 2400, &fail),
	}
	int8[2].Bimodal = &Modes{Low: 4.8, High: 21, LowShare: 0.62}
	int8[2].Histogram = hist([3]float64{4.8, 7, 2480}, [3]float64{21, 26, 1520})
	int8[4].Rejected = 420
	int8[4].Dominant = "queue"

	version := func(name string, steps []Step, best float64, offline []OfflinePoint, eff float64, v *Verdict, p *Plan) VersionResult {
		return VersionResult{
			Name: name, Model: "sentiment", Version: strings.TrimPrefix(name, "sentiment/"),
			Steps: steps, Offline: offline, Best: best, BestItems: best * 8, Efficiency: eff, Verdict: v, Plan: p,
		}
	}
	run := func(fp32Best float64) Run {
		return Run{Versions: []VersionResult{
			version("sentiment/fp32", fp32, fp32Best,
				[]OfflinePoint{{Batch: 1, ItemsPerS: 900, P50: 1.1}, {Batch: 8, ItemsPerS: 2900, P50: 2.8}, {Batch: 32, ItemsPerS: 4100, P50: 7.8}},
				0.78, &Verdict{Meets: false, Why: "400 rps at p95 ≤ 50 ms, under the 600 rps target"},
				&Plan{TargetRPS: 600, Replicas: 2, InFlight: 10, CostPerMillion: 2.22}),
			version("sentiment/int8", int8, 800,
				[]OfflinePoint{{Batch: 1, ItemsPerS: 1700, P50: 0.6}, {Batch: 8, ItemsPerS: 5600, P50: 1.4}, {Batch: 32, ItemsPerS: 8000, P50: 4}},
				0.8, &Verdict{Meets: true},
				&Plan{TargetRPS: 600, Replicas: 1, InFlight: 31, CostPerMillion: 1.11}),
		}}
	}
	return &Report{
		Schema:  Schema,
		Tool:    "ortserve v0.4.0",
		Started: time.Date(2025, 3, 14, 9, 26, 53, 0, time.UTC),
		Host:    Host{CPUs: 16, OS: "linux", Arch: "amd64", Name: "bench-1"},
		Target:  "http://127.0.0.1:8080",
		Route:   "/predict",
		Load:    LoadSpec{Mode: "open", Arrival: "poisson", Inputs: 8, WarmupS: 5, StepS: 10, MaxInFlight: 2048, TimeoutS: 30, Seed: 7},
		Workload: WorkloadSummary{
			Source: "built-in", Texts: 500,
			Chars:  Distribution{Min: 12, P50: 96, P95: 310, Max: 540, Mean: 120},
			Words:  Distribution{Min: 2, P50: 17, P95: 55, Max: 98, Mean: 21},
			Tokens: &Distribution{Min: 40, P50: 190, P95: 520, Max: 800, Mean: 230},
		},
		SLO:   &SLO{P95: 50 * time.Millisecond, RPS: 600},
		Price: 3.2,
		Runs:  []Run{run(400), run(425), run(405)},
		Variance: []Variance{{
			Name: "sentiment/fp32",
			Best: Spread{Mean: 410, SD: 12.5, Min: 400, Max: 425, CV: 0.0305},
			Rate: 400,
			P50:  Spread{Mean: 11.3, SD: 0.4, Min: 10.9, Max: 11.8, CV: 0.035},
			P95:  Spread{Mean: 25.1, SD: 1.2, Min: 24.6, Max: 26.5, CV: 0.048},
		}},
		Notes: []string{"the generator used 85% of a CPU at 1600 rps; the highest steps may understate the server"},
	}
}

// lineWith returns the first line of out that contains every one of parts.
func lineWith(out string, parts ...string) string {
	for line := range strings.SplitSeq(out, "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			return line
		}
	}
	return ""
}

// hasBadNumber reports whether s prints a NaN or an infinity ("Inference" is not one).
func hasBadNumber(s string) bool { return regexp.MustCompile(`NaN|[+-]?Inf\b`).MatchString(s) }

func TestWriteTextFixture(t *testing.T) {
	var b bytes.Buffer
	if err := WriteText(&b, viewFixture()); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"Benchmark of http://127.0.0.1:8080/predict",
		"open loop, poisson arrivals; rates swept; 10 s per step after 5 s warm-up; timeout 30 s; at most 2048 in flight; seed 7",
		"8 texts per request",
		"built-in, 500 texts; chars p50 96 / p95 310 / max 540",
		"tokens/request p50 190",
		"p95 ≤ 50 ms at ≥ 600 req/s",
		"3 (tables show run 1",
		"16 CPUs, linux/amd64, bench-1",
		"offered rps", "achieved rps", "p50 ms", "p95 ms", "p99 ms", "max ms", "429/503", "dominant",
		"Little's Law at 400 rps: 3.10 in flight measured, 4.50 expected (λW), off by 31%",
		"bimodal latency at 400 rps: 62% of requests near 4.80 ms, the rest near 21.0 ms",
		"errors at 1600 rps: context deadline exceeded",
		"Summary: highest rate meeting p95 ≤ 50 ms",
		"vs sentiment/fp32",
		"4100 (batch 32)", "8000 (batch 32)",
		"Variance across 3 runs",
		"410 ± 12.5 (3.0%), 400–425",
		"the generator used 85% of a CPU",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("text report lacks %q", want)
		}
	}
	rows := []struct {
		name  string
		parts []string
	}{
		{"fp32 step at 400", []string{"  400  ", "399", "3192", "11.2", "24.6", "38.0", "57.0", "✓", "inference"}},
		{"fp32 step at 1600", []string{"  1600  ", "740", "880", "2100", "2900", "800", "5 (2 timeouts)", "✗", "queue", "p95 2100 ms over 50 ms"}},
		{"int8 summary", []string{"sentiment/int8", "800", "6400", "2.00×", "1130", "80%", "1", "31", "$1.11", "✓ meets"}},
		{"fp32 summary", []string{"sentiment/fp32", "400", "3200", "1.00×", "78%", "2 for 600 rps", "10", "$2.22", "✗ 400 rps at p95"}},
	}
	for _, r := range rows {
		if lineWith(out, r.parts...) == "" {
			t.Errorf("%s: no line has all of %q", r.name, r.parts)
		}
	}
	if hasBadNumber(out) {
		t.Errorf("text report prints NaN or Inf:\n%s", out)
	}
	if testing.Verbose() {
		t.Log("\n" + out)
	}
}

func TestWriteMarkdownFixture(t *testing.T) {
	r := viewFixture()
	r.Notes = append(r.Notes, "a | pipe and <b>tag</b>")
	var b bytes.Buffer
	if err := WriteMarkdown(&b, r); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"# Benchmark of http://127.0.0.1:8080/predict",
		"- **SLO:** p95 ≤ 50 ms at ≥ 600 req/s",
		"## Summary: highest rate meeting p95 ≤ 50 ms",
		"## sentiment/fp32", "## sentiment/int8",
		"| offered rps | achieved rps |",
		"| 2.00× |",
		"> ⚠️ Little's Law at 400 rps",
		"> ⚠️ bimodal latency at 400 rps: 62%",
		"## Variance across 3 runs",
		"| 410 ± 12.5 (3.0%), 400–425 |",
		`a \| pipe and &lt;b&gt;tag&lt;/b&gt;`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("markdown report lacks %q", want)
		}
	}
	// Every table row has as many cells as its header.
	cells := -1
	for line := range strings.SplitSeq(out, "\n") {
		if !strings.HasPrefix(line, "|") {
			cells = -1
			continue
		}
		n := strings.Count(strings.ReplaceAll(line, `\|`, ""), "|")
		if cells < 0 {
			cells = n
		} else if n != cells {
			t.Errorf("row has %d cells, header %d: %s", n-1, cells-1, line)
		}
	}
	if hasBadNumber(out) {
		t.Errorf("markdown report prints NaN or Inf")
	}
}

// edgeReports are reports with parts missing or odd, which every view must print without
// panicking and without inventing numbers.
func edgeReports() map[string]*Report {
	closed := viewFixture()
	closed.Load = LoadSpec{Mode: "closed", Inputs: 1, StepS: 10}
	closed.Variance = nil
	closed.Runs = closed.Runs[:1]
	for i := range closed.Runs[0].Versions {
		steps := closed.Runs[0].Versions[i].Steps
		for j := range steps {
			steps[j].Concurrency = 1 << (j + 1)
			steps[j].Offered = 0
		}
	}
	noSLO := viewFixture()
	noSLO.SLO = nil
	for i := range noSLO.Runs[0].Versions {
		v := &noSLO.Runs[0].Versions[i]
		v.Best, v.BestItems, v.Efficiency, v.Verdict, v.Plan, v.Offline = 0, 0, 0, nil, nil, nil
		for j := range v.Steps {
			v.Steps[j].Pass, v.Steps[j].Why = nil, ""
		}
	}
	notFinite := viewFixture()
	s := &notFinite.Runs[0].Versions[0].Steps[0]
	s.Latency.P95, s.Latency.P99, s.Achieved = math.NaN(), math.Inf(1), math.Inf(-1)
	s.Histogram = append(s.Histogram, Bin{UpTo: math.NaN(), Count: 3}, Bin{UpTo: 0, Count: 1})
	notFinite.Runs[0].Versions[0].Offline = append(notFinite.Runs[0].Versions[0].Offline, OfflinePoint{Batch: 64, ItemsPerS: math.NaN()})
	return map[string]*Report{
		"empty":      {},
		"no runs":    {Schema: Schema, Target: "http://x", SLO: &SLO{P95: time.Second}},
		"no steps":   {Schema: Schema, Runs: []Run{{Versions: []VersionResult{{Name: "a"}, {}}}}},
		"one step":   {Schema: Schema, Runs: []Run{{Versions: []VersionResult{{Name: "a", Steps: []Step{{Offered: 10}}}}}}},
		"closed":     closed,
		"no SLO":     noSLO,
		"not finite": notFinite,
	}
}

func TestWriteTextMarkdownEdgeCases(t *testing.T) {
	writers := map[string]func(*bytes.Buffer, *Report) error{
		"text":     func(b *bytes.Buffer, r *Report) error { return WriteText(b, r) },
		"markdown": func(b *bytes.Buffer, r *Report) error { return WriteMarkdown(b, r) },
		"html":     func(b *bytes.Buffer, r *Report) error { return WriteHTML(b, r) },
	}
	for name, r := range edgeReports() {
		for wname, write := range writers {
			t.Run(name+"/"+wname, func(t *testing.T) {
				var b bytes.Buffer
				if err := write(&b, r); err != nil {
					t.Fatal(err)
				}
				out := b.String()
				if !strings.Contains(out, report.Dash) {
					t.Errorf("no %q for the missing values", report.Dash)
				}
				if hasBadNumber(out) {
					t.Errorf("prints NaN or Inf")
				}
				if name == "closed" {
					for _, want := range []string{"clients", "closed loop: latency from actual send"} {
						if !strings.Contains(out, want) {
							t.Errorf("closed loop report lacks %q", want)
						}
					}
					if strings.Contains(out, "offered rps") {
						t.Errorf("closed loop report labels its load as offered rps")
					}
				}
			})
		}
	}
}

func TestWriteTextNoSLOShowsPeak(t *testing.T) {
	var b bytes.Buffer
	if err := WriteText(&b, edgeReports()["no SLO"]); err != nil {
		t.Fatal(err)
	}
	// Without an SLO there is no best rate; the summary still has the peak and dashes.
	if line := lineWith(b.String(), "sentiment/int8", "1130", "–"); line == "" || strings.Contains(line, "×") {
		t.Errorf("summary row without SLO: %q\n%s", line, b.String())
	}
}

func TestWriteTextNilReport(t *testing.T) {
	var b bytes.Buffer
	if WriteText(&b, nil) == nil || WriteMarkdown(&b, nil) == nil || WriteHTML(&b, nil) == nil || WriteJSON(&b, nil) == nil {
		t.Error("a nil report was written without an error")
	}
}
