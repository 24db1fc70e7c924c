package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"

	"github.com/ortserve/ortserve/bench/report"
)

// ReadReport reads a Report written by WriteJSON. A file of another schema is refused with
// one line that says what it is and what to do, since comparing fields whose meaning has
// changed would print wrong numbers without complaint.
func ReadReport(path string) (*Report, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	return parseReport(data, path)
}

// parseReport decodes a report read from name, checking its schema first.
func parseReport(data []byte, name string) (*Report, error) {
	path := name
	var probe struct {
		Schema *string `json:"schema"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, fmt.Errorf("bench: %s is not a JSON report: %w", path, err)
	}
	switch {
	case probe.Schema == nil || *probe.Schema == "":
		return nil, fmt.Errorf("bench: %s has no schema field, so it is not a report of `server bench`: write one with `server bench --json`", path)
	case *probe.Schema != Schema:
		return nil, fmt.Errorf("bench: %s is schema %q but this build reads %q: compare it with the ortserve that wrote it, or rerun the benchmark with this one", path, *probe.Schema, Schema)
	}
	var r Report
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("bench: %s: %w", path, err)
	}
	return &r, nil
}

// WriteJSON writes r as indented JSON, the form ReadReport reads back.
func WriteJSON(w io.Writer, r *Report) error {
	if r == nil {
		return errors.New("bench: no report to write")
	}
	if err := report.WriteJSON(w, r); err != nil {
		return fmt.Errorf("bench: json report: %w", err)
	}
	return nil
}

// Compare writes how after differs from before, version by version: the best rate at the
// SLO with its change and whether the change stands out from run-to-run noise, then the
// latency quantiles and achieved throughput at every load level both reports measured.
// Best is the mean over a report's runs; steps are from its first run. Versions in only one
// report are listed; differences in how the two were measured are noted first.
func Compare(w io.Writer, before, after *Report) error {
	if before == nil || after == nil {
		return errors.New("bench: compare needs two reports")
	}
	p := report.NewPrinter(w)
	p.Text(report.FactTable([]report.Fact{{Label: "before", Value: reportLine(before)}, {Label: "after", Value: reportLine(after)}}), "")
	for _, d := range setupDiffs(before, after) {
		p.Printf("! %s\n", d)
	}
	modesMatch := closedLoop(before) == closedLoop(after)
	closed := closedLoop(before)

	beforeVersions, afterVersions := firstRun(before), firstRun(after)
	var onlyBefore, onlyAfter []string
	for _, b := range beforeVersions {
		name := versionLabel(b)
		a, ok := findVersion(afterVersions, name)
		if !ok {
			onlyBefore = append(onlyBefore, name)
			continue
		}
		p.Printf("\n%s\n", name)
		bBest, bRuns := meanBest(before, name)
		aBest, aRuns := meanBest(after, name)
		label := "best rps at SLO"
		if bRuns > 1 || aRuns > 1 {
			label += fmt.Sprintf(" (mean of %d → %d runs)", bRuns, aRuns)
		}
		p.Printf("  %s: %s → %s (%s); %s\n", label, report.NumOrDash(bBest), report.NumOrDash(aBest), deltaText(bBest, aBest),
			noiseText(aBest-bBest, findVariance(before, b.Name), findVariance(after, a.Name)))
		if !modesMatch {
			continue
		}
		compareSteps(p, b.Steps, a.Steps, closed)
	}
	for _, a := range afterVersions {
		if _, ok := findVersion(beforeVersions, versionLabel(a)); !ok {
			onlyAfter = append(onlyAfter, versionLabel(a))
		}
	}
	if len(onlyBefore) > 0 {
		p.Printf("\nonly before: %s\n", strings.Join(onlyBefore, ", "))
	}
	if len(onlyAfter) > 0 {
		p.Printf("\nonly after: %s\n", strings.Join(onlyAfter, ", "))
	}
	return p.Err()
}

// compareSteps writes the quantiles and throughput at each load level both versions measured.
func compareSteps(p *report.Printer, before, after []Step, closed bool) {
	t := report.Table{Head: []string{loadHead(closed), "p50 ms", "p95 ms", "p99 ms", "achieved rps"}}
	for _, b := range before {
		a, ok := matchStep(after, b, closed)
		if !ok {
			continue
		}
		t.Rows = append(t.Rows, []string{
			loadCell(b, closed),
			changeText(b.Latency.P50, a.Latency.P50),
			changeText(b.Latency.P95, a.Latency.P95),
			changeText(b.Latency.P99, a.Latency.P99),
			changeText(b.Achieved, a.Achieved),
		})
	}
	if len(t.Rows) == 0 {
		p.Printf("  no load level measured in both\n")
		return
	}
	p.Text(t, "  ")
}

// reportLine identifies a report in one line.
func reportLine(r *Report) string {
	parts := []string{report.OrDash(r.Tool)}
	if !r.Started.IsZero() {
		parts = append(parts, r.Started.Format("2006-01-02 15:04 MST"))
	}
	parts = append(parts, report.OrDash(strings.TrimSpace(r.Target+r.Route)))
	if n := len(r.Runs); n != 1 {
		parts = append(parts, fmt.Sprintf("%d runs", n))
	}
	return strings.Join(parts, ", ")
}

// setupDiffs lists the ways the two reports were measured differently, each of which can
// explain a difference in the numbers by itself.
func setupDiffs(before, after *Report) []string {
	var d []string
	diff := func(what, b, a string) {
		if b != a {
			d = append(d, fmt.Sprintf("%s differ: %s → %s", what, report.OrDash(b), report.OrDash(a)))
		}
	}
	diff("targets", before.Target, after.Target)
	diff("routes", before.Route, after.Route)
	if closedLoop(before) != closedLoop(after) {
		d = append(d, "load modes differ (open and closed loop): steps cannot be matched, only the best rates are compared")
	}
	diff("arrivals", before.Load.Arrival, after.Load.Arrival)
	diff("inputs per request", inputsText(before.Load.Inputs), inputsText(after.Load.Inputs))
	// Both move a search's best rate: longer steps steady the p95, a confirmed failure
	// gives a rate a second window.
	diff("least requests per step (--min-requests)", fmt.Sprint(before.Load.MinRequests), fmt.Sprint(after.Load.MinRequests))
	diff("windows more a failed search step gets (--search-confirm)", fmt.Sprint(before.Load.Confirm), fmt.Sprint(after.Load.Confirm))
	diff("workloads", workloadText(before.Workload), workloadText(after.Workload))
	diff("SLOs", sloText(before.SLO), sloText(after.SLO))
	diff("hosts", hostText(before.Host), hostText(after.Host))
	return d
}

func findVersion(vs []VersionResult, name string) (VersionResult, bool) {
	for _, v := range vs {
		if versionLabel(v) == name {
			return v, true
		}
	}
	return VersionResult{}, false
}

func findVariance(r *Report, name string) *Variance {
	for i := range r.Variance {
		if r.Variance[i].Name == name {
			return &r.Variance[i]
		}
	}
	return nil
}

// meanBest is a version's Best averaged over the runs that measured it, and how many did.
// With --repeat the mean is the better estimate; a single run is its own mean.
func meanBest(r *Report, name string) (float64, int) {
	sum, n := 0.0, 0
	for _, run := range r.Runs {
		if v, ok := findVersion(run.Versions, name); ok {
			sum += v.Best
			n++
		}
	}
	if n == 0 {
		return 0, 0
	}
	return sum / float64(n), n
}

// matchStep finds the step of steps at the same load as s: the same clients in closed loop,
// the same offered rate to a part in a million in open loop.
func matchStep(steps []Step, s Step, closed bool) (Step, bool) {
	for _, o := range steps {
		if closed {
			if o.Concurrency == s.Concurrency && s.Concurrency > 0 {
				return o, true
			}
			continue
		}
		if s.Offered > 0 && math.Abs(o.Offered-s.Offered) <= 1e-6*s.Offered {
			return o, true
		}
	}
	return Step{}, false
}

// deltaText is the relative change from b to a: "+10.4%", "-4.9%"; a dash when b is zero
// or either was not measured.
func deltaText(b, a float64) string {
	if b == 0 || a == 0 || !report.Finite(b) || !report.Finite(a) {
		return report.Dash
	}
	return fmt.Sprintf("%+.1f%%", (a-b)/b*100)
}

// changeText is "4.10 → 3.90 (-4.9%)".
func changeText(b, a float64) string {
	return report.NumOrDash(b) + " → " + report.NumOrDash(a) + " (" + deltaText(b, a) + ")"
}

// noiseText says whether a change of best rate stands out from run-to-run noise: beyond
// twice the larger standard deviation of the two reports. Without --repeat there is no
// measure of noise, and it says so rather than guess.
func noiseText(delta float64, before, after *Variance) string {
	if before == nil && after == nil {
		return "noise unknown: use --repeat"
	}
	sd := 0.0
	for _, v := range []*Variance{before, after} {
		if v != nil && report.Finite(v.Best.SD) {
			sd = max(sd, v.Best.SD)
		}
	}
	if math.Abs(delta) > 2*sd {
		return fmt.Sprintf("beyond noise (|Δ| %s > 2×sd %s)", report.Num(math.Abs(delta)), report.Num(2*sd))
	}
	return fmt.Sprintf("within noise (|Δ| %s ≤ 2×sd %s)", report.Num(math.Abs(delta)), report.Num(2*sd))
}
