package bench

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ortserve/ortserve/bench/report"
)

// The views of a Report (text, Markdown, HTML) share one reading of it: reportView turns the
// Report into facts, tables, warnings and notes once, and each writer only lays them out. So
// the three cannot disagree about what a number is or when a value is missing.

// reportView is a Report read for display.
type reportView struct {
	Title    string
	Facts    []report.Fact
	Versions []versionView
	// SummaryTitle heads Summary: what "best" means for this report.
	SummaryTitle string
	Summary      viewTable
	// VarianceTitle heads Variance, which has no rows with a single run.
	VarianceTitle string
	Variance      viewTable
	Notes         []string
}

// viewTable is a table with one CSS class per row ("pass", "fail" or ""), for the HTML view.
type viewTable struct {
	report.Table
	Class []string
}

// versionView is one version's steps with the warnings about them.
type versionView struct {
	Name     string
	Steps    viewTable
	Warnings []string
}

// closedLoop reports whether the load was a fixed number of clients rather than a rate.
func closedLoop(r *Report) bool { return r.Load.Mode == "closed" }

// firstRun returns the versions of the run the views show: the first.
func firstRun(r *Report) []VersionResult {
	if len(r.Runs) == 0 {
		return nil
	}
	return r.Runs[0].Versions
}

// newReportView reads r for display.
func newReportView(r *Report) reportView {
	closed := closedLoop(r)
	v := reportView{
		Title: "Benchmark",
		Facts: reportFacts(r),
		Notes: r.Notes,
	}
	if t := strings.TrimSpace(r.Target); t != "" {
		v.Title = "Benchmark of " + t
		if strings.HasPrefix(t, "http") {
			v.Title += r.Route
		} else if r.Route != "" {
			v.Title += ", " + r.Route
		}
	}
	versions := firstRun(r)
	for _, vr := range versions {
		v.Versions = append(v.Versions, versionView{
			Name:     versionLabel(vr),
			Steps:    stepTable(vr.Steps, closed),
			Warnings: stepWarnings(vr.Steps, closed),
		})
	}
	v.SummaryTitle = "Summary"
	if r.SLO != nil && r.SLO.P95 > 0 {
		v.SummaryTitle = "Summary: highest rate meeting p95 ≤ " + report.Short(durationMs(r.SLO.P95)) + " ms"
	}
	v.Summary = summaryTable(versions)
	if len(r.Variance) > 0 {
		v.VarianceTitle = fmt.Sprintf("Variance across %d runs", len(r.Runs))
		v.Variance = varianceTable(r.Variance, closed)
	}
	return v
}

// versionLabel names a version for display; a target without model or version names has
// an empty Name.
func versionLabel(vr VersionResult) string {
	if vr.Name != "" {
		return vr.Name
	}
	if s := strings.Trim(vr.Model+"/"+vr.Version, "/"); s != "" {
		return s
	}
	return "(default)"
}

// reportFacts is the header: what was measured, how, and against what.
func reportFacts(r *Report) []report.Fact {
	facts := []report.Fact{
		{Label: "Target", Value: report.OrDash(r.Target)},
		{Label: "Route", Value: report.OrDash(r.Route)},
		{Label: "Load", Value: loadText(r.Load)},
		{Label: "Inputs", Value: inputsText(r.Load.Inputs)},
		{Label: "Workload", Value: workloadText(r.Workload)},
		{Label: "SLO", Value: sloText(r.SLO)},
	}
	if r.Price > 0 {
		facts = append(facts, report.Fact{Label: "Price", Value: "$" + report.Fixed(r.Price, 2) + " per hour"})
	}
	if n := len(r.Runs); n > 1 {
		facts = append(facts, report.Fact{Label: "Runs", Value: fmt.Sprintf("%d (tables show run 1; the spread is under Variance)", n)})
	}
	facts = append(facts, report.Fact{Label: "Tool", Value: toolText(r)}, report.Fact{Label: "Host", Value: hostText(r.Host)})
	return facts
}

// loadText says how load was applied. Closed loop says outright that its latency hides
// queueing in the clients, because that is the first thing to know when reading it.
func loadText(l LoadSpec) string {
	if l == (LoadSpec{}) {
		return report.Dash
	}
	var parts []string
	switch l.Mode {
	case "closed":
		parts = append(parts, "closed loop: latency from actual send")
	case "open", "":
		s := "open loop"
		if l.Arrival != "" {
			s += ", " + l.Arrival + " arrivals"
		}
		parts = append(parts, s)
		if l.Search {
			s := "rates searched for the SLO"
			if l.Confirm > 0 {
				s += fmt.Sprintf(", a failed step measured again up to %d× before its rate fails", l.Confirm)
			}
			parts = append(parts, s)
		} else {
			parts = append(parts, "rates swept")
		}
	default:
		parts = append(parts, l.Mode)
	}
	if l.StepS > 0 {
		s := secondsText(l.StepS) + " per step"
		if l.MinRequests > 0 {
			s = fmt.Sprintf("%s per step or %d requests, whichever is longer,", secondsText(l.StepS), l.MinRequests)
		}
		if l.WarmupS > 0 {
			s += " after " + secondsText(l.WarmupS) + " warm-up"
		}
		parts = append(parts, s)
	}
	if l.TimeoutS > 0 {
		parts = append(parts, "timeout "+secondsText(l.TimeoutS))
	}
	if l.MaxInFlight > 0 {
		parts = append(parts, fmt.Sprintf("at most %d in flight", l.MaxInFlight))
	}
	if l.Seed != 0 {
		parts = append(parts, fmt.Sprintf("seed %d", l.Seed))
	}
	return strings.Join(parts, "; ")
}

func inputsText(n int) string {
	switch {
	case n <= 0:
		return report.Dash
	case n == 1:
		return "1 text per request"
	default:
		return fmt.Sprintf("%d texts per request", n)
	}
}

// workloadText summarises the texts sent.
func workloadText(w WorkloadSummary) string {
	var parts []string
	src := w.Source
	if w.Texts > 0 {
		if src != "" {
			src += ", "
		}
		src += fmt.Sprintf("%d texts", w.Texts)
	}
	if src != "" {
		parts = append(parts, src)
	}
	if d := distributionText(w.Chars); d != "" {
		parts = append(parts, "chars "+d)
	}
	if d := distributionText(w.Words); d != "" {
		parts = append(parts, "words "+d)
	}
	if w.Tokens != nil {
		if d := distributionText(*w.Tokens); d != "" {
			parts = append(parts, "tokens/request "+d)
		}
	}
	if len(parts) == 0 {
		return report.Dash
	}
	return strings.Join(parts, "; ")
}

// distributionText is "p50 120 / p95 400 / max 900", or "" for an empty distribution.
func distributionText(d Distribution) string {
	if d == (Distribution{}) {
		return ""
	}
	return "p50 " + report.Short(d.P50) + " / p95 " + report.Short(d.P95) + " / max " + report.Short(d.Max)
}

func sloText(s *SLO) string {
	if s == nil || (s.P95 <= 0 && s.RPS <= 0) {
		return report.Dash
	}
	var parts []string
	if s.P95 > 0 {
		parts = append(parts, "p95 ≤ "+report.Short(durationMs(s.P95))+" ms")
	}
	if s.RPS > 0 {
		parts = append(parts, "at ≥ "+report.Short(s.RPS)+" req/s")
	}
	return strings.Join(parts, " ")
}

func toolText(r *Report) string {
	s := r.Tool
	if !r.Started.IsZero() {
		s = strings.TrimSpace(s + ", started " + r.Started.Format(time.DateTime+" MST"))
		s = strings.TrimPrefix(s, ", ")
	}
	return report.OrDash(s)
}

func hostText(h Host) string {
	var parts []string
	if h.CPUs > 0 {
		parts = append(parts, fmt.Sprintf("%d CPUs", h.CPUs))
	}
	if s := strings.Trim(h.OS+"/"+h.Arch, "/"); s != "" {
		parts = append(parts, s)
	}
	if h.Name != "" {
		parts = append(parts, h.Name)
	}
	if len(parts) == 0 {
		return report.Dash
	}
	return strings.Join(parts, ", ")
}

// loadHead names the load column: requests/s offered, or clients in closed loop.
func loadHead(closed bool) string {
	if closed {
		return "clients"
	}
	return "offered rps"
}

// loadCell is a step's load level: its offered rate, or its clients in closed loop.
func loadCell(s Step, closed bool) string {
	if closed {
		if s.Concurrency <= 0 {
			return report.Dash
		}
		return strconv.Itoa(s.Concurrency)
	}
	return report.NumOrDash(s.Offered)
}

// loadWhere is loadCell as a phrase: "at 400 rps", "at 32 clients".
func loadWhere(s Step, closed bool) string {
	if closed {
		return "at " + loadCell(s, closed) + " clients"
	}
	return "at " + loadCell(s, closed) + " rps"
}

// stepTable is one version's steps, one row each.
func stepTable(steps []Step, closed bool) viewTable {
	var tokens, why bool
	for _, s := range steps {
		tokens = tokens || s.TokensPerS > 0
		why = why || s.Why != ""
	}
	t := viewTable{Table: report.Table{Head: []string{loadHead(closed), "achieved rps", "items/s"}}}
	if tokens {
		t.Head = append(t.Head, "tokens/s")
	}
	t.Head = append(t.Head, "p50 ms", "p95 ms", "p99 ms", "max ms", "429/503", "errors", "SLO", "dominant")
	if why {
		t.Head = append(t.Head, "why")
	}
	for _, s := range steps {
		row := []string{loadCell(s, closed), report.Num(s.Achieved), report.Num(s.ItemsPerS)}
		if tokens {
			row = append(row, report.NumOrDash(s.TokensPerS))
		}
		errs := strconv.Itoa(s.Errors + s.Timeouts)
		if s.Timeouts > 0 {
			errs += fmt.Sprintf(" (%d timeouts)", s.Timeouts)
		}
		row = append(row,
			report.NumOrDash(s.Latency.P50), report.NumOrDash(s.Latency.P95), report.NumOrDash(s.Latency.P99), report.NumOrDash(s.Latency.Max),
			strconv.Itoa(s.Rejected), errs, passMark(s.Pass), report.OrDash(s.Dominant))
		if why {
			row = append(row, report.OrDash(s.Why))
		}
		t.Rows = append(t.Rows, row)
		t.Class = append(t.Class, passClass(s.Pass))
	}
	return t
}

func passMark(p *bool) string {
	switch {
	case p == nil:
		return report.Dash
	case *p:
		return "✓"
	default:
		return "✗"
	}
}

func passClass(p *bool) string {
	switch {
	case p == nil:
		return ""
	case *p:
		return "pass"
	default:
		return "fail"
	}
}

// stepWarnings says what in the steps should make a reader doubt or look closer at the
// numbers: Little's Law failing, two latency modes, steps cut short, errors.
func stepWarnings(steps []Step, closed bool) []string {
	var w []string
	for _, s := range steps {
		at := loadWhere(s, closed)
		if s.Little.Flag {
			w = append(w, fmt.Sprintf("Little's Law %s: %s in flight measured, %s expected (λW), off by %s: %s",
				at, report.Num(s.Little.InFlight), report.Num(s.Little.Expected), report.Pct(math.Abs(s.Little.Deviation)), report.OrDash(s.Little.Cause)))
		}
		if m := s.Bimodal; m != nil {
			w = append(w, fmt.Sprintf("bimodal latency %s: %s of requests near %s ms, the rest near %s ms",
				at, report.Pct(m.LowShare), report.NumOrDash(m.Low), report.NumOrDash(m.High)))
		}
		if s.Interrupted {
			w = append(w, "interrupted "+at+": the step was cut short")
		}
		if s.ErrorSample != "" {
			w = append(w, "errors "+at+": "+s.ErrorSample)
		}
	}
	return w
}

// summaryTable has one row per version: its operating point against the SLO, how it
// compares with the first version, what the raw session could do, and what to deploy.
func summaryTable(versions []VersionResult) viewTable {
	if len(versions) == 0 {
		return viewTable{}
	}
	var cost bool
	for _, vr := range versions {
		cost = cost || (vr.Plan != nil && vr.Plan.CostPerMillion > 0)
	}
	base := versions[0]
	t := viewTable{Table: report.Table{Head: []string{"version", "best rps", "best items/s", "vs " + versionLabel(base),
		"peak rps", "offline items/s", "efficiency", "replicas", "in-flight/replica"}}}
	if cost {
		t.Head = append(t.Head, "$/M req")
	}
	t.Head = append(t.Head, "verdict")
	for _, vr := range versions {
		ratio := report.Dash
		if base.Best > 0 && vr.Best > 0 && report.Finite(vr.Best/base.Best) {
			ratio = strconv.FormatFloat(vr.Best/base.Best, 'f', 2, 64) + "×"
		}
		offline := report.Dash
		if p, ok := bestOffline(vr.Offline); ok {
			offline = fmt.Sprintf("%s (batch %d)", report.Num(p.ItemsPerS), p.Batch)
		}
		eff := report.Dash
		if vr.Efficiency > 0 {
			eff = report.Pct(vr.Efficiency)
		}
		replicas, inflight := report.Dash, report.Dash
		if p := vr.Plan; p != nil {
			if p.Replicas > 0 {
				replicas = strconv.Itoa(p.Replicas)
				if p.TargetRPS > 0 {
					replicas += " for " + report.Short(p.TargetRPS) + " rps"
				}
			}
			if p.InFlight > 0 {
				inflight = strconv.Itoa(p.InFlight)
			}
		}
		row := []string{versionLabel(vr), report.NumOrDash(vr.Best), report.NumOrDash(vr.BestItems), ratio,
			report.NumOrDash(peakAchieved(vr.Steps)), offline, eff, replicas, inflight}
		if cost {
			c := report.Dash
			if vr.Plan != nil && vr.Plan.CostPerMillion > 0 {
				c = "$" + report.Num(vr.Plan.CostPerMillion)
			}
			row = append(row, c)
		}
		verdict := report.Dash
		class := ""
		if v := vr.Verdict; v != nil {
			mark, word := "✗", "fails"
			class = "fail"
			if v.Meets {
				mark, word, class = "✓", "meets", "pass"
			}
			if v.Why != "" {
				word = v.Why
			}
			verdict = mark + " " + word
		}
		t.Rows = append(t.Rows, append(row, verdict))
		t.Class = append(t.Class, class)
	}
	return t
}

// bestOffline is the offline point with the most items/s.
func bestOffline(points []OfflinePoint) (OfflinePoint, bool) {
	var best OfflinePoint
	ok := false
	for _, p := range points {
		if report.Finite(p.ItemsPerS) && p.ItemsPerS > 0 && (!ok || p.ItemsPerS > best.ItemsPerS) {
			best, ok = p, true
		}
	}
	return best, ok
}

// peakAchieved is the most requests/s any step completed, met SLO or not: with no SLO, the
// only measure of capacity there is.
func peakAchieved(steps []Step) float64 {
	peak := 0.0
	for _, s := range steps {
		if report.Finite(s.Achieved) {
			peak = max(peak, s.Achieved)
		}
	}
	return peak
}

// varianceTable shows each version's spread across runs.
func varianceTable(vs []Variance, closed bool) viewTable {
	at := "at rps"
	if closed {
		at = "at"
	}
	t := viewTable{Table: report.Table{Head: []string{"version", "best rps", at, "p50 ms", "p95 ms"}}}
	for _, v := range vs {
		rate, p50, p95 := report.Dash, report.Dash, report.Dash
		if v.Rate > 0 {
			rate, p50, p95 = report.Num(v.Rate), spreadText(v.P50), spreadText(v.P95)
		}
		t.Rows = append(t.Rows, []string{versionLabel(VersionResult{Name: v.Name}), spreadText(v.Best), rate, p50, p95})
		t.Class = append(t.Class, "")
	}
	return t
}

// spreadText is "412 ± 9.1 (2.2%), 400–425".
func spreadText(s Spread) string {
	if s == (Spread{}) || !report.Finite(s.Mean) {
		return report.Dash
	}
	out := report.Num(s.Mean) + " ± " + report.Num(s.SD)
	if s.CV > 0 && report.Finite(s.CV) {
		out += " (" + report.Pct(s.CV) + ")"
	}
	if s.Min != 0 || s.Max != 0 {
		out += ", " + report.Num(s.Min) + "–" + report.Num(s.Max)
	}
	return out
}

func secondsText(s float64) string { return report.Short(s) + " s" }

func durationMs(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// WriteText writes r for a terminal: the header, a table of steps per version with
// warnings under it, a summary with one row per version, the run-to-run spread and the
// notes. Values that were not measured print as "–".
func WriteText(w io.Writer, r *Report) error {
	if r == nil {
		return fmt.Errorf("bench: no report to write")
	}
	v := newReportView(r)
	p := report.NewPrinter(w)
	p.Printf("%s\n\n", v.Title)
	p.Text(report.FactTable(v.Facts), "")
	if len(v.Versions) == 0 {
		p.Printf("\nNo versions were measured.\n")
	}
	for _, vv := range v.Versions {
		p.Printf("\n%s\n", vv.Name)
		if len(vv.Steps.Rows) == 0 {
			p.Printf("  no steps measured\n")
		} else {
			p.Text(vv.Steps.Table, "  ")
		}
		for _, warn := range vv.Warnings {
			p.Printf("  ! %s\n", warn)
		}
	}
	if len(v.Summary.Rows) > 0 {
		p.Printf("\n%s\n", v.SummaryTitle)
		p.Text(v.Summary.Table, "  ")
	}
	if len(v.Variance.Rows) > 0 {
		p.Printf("\n%s (mean ± sd (CV), range)\n", v.VarianceTitle)
		p.Text(v.Variance.Table, "  ")
	}
	p.Notes(v.Notes)
	return p.Err()
}

// WriteMarkdown writes r as GitHub Markdown, with the same content as WriteText: for a
// README or a pull request.
func WriteMarkdown(w io.Writer, r *Report) error {
	if r == nil {
		return fmt.Errorf("bench: no report to write")
	}
	v := newReportView(r)
	p := report.NewPrinter(w)
	p.Printf("# %s\n\n", report.Escape(v.Title))
	for _, f := range v.Facts {
		p.Printf("- **%s:** %s\n", f.Label, report.Escape(f.Value))
	}
	if len(v.Summary.Rows) > 0 {
		p.Printf("\n## %s\n\n", report.Escape(v.SummaryTitle))
		p.Markdown(numeric(v.Summary.Table))
	}
	if len(v.Versions) == 0 {
		p.Printf("\nNo versions were measured.\n")
	}
	for _, vv := range v.Versions {
		p.Printf("\n## %s\n\n", report.Escape(vv.Name))
		if len(vv.Steps.Rows) == 0 {
			p.Printf("No steps measured.\n")
		} else {
			p.Markdown(numeric(vv.Steps.Table))
		}
		for _, warn := range vv.Warnings {
			p.Printf("\n> ⚠️ %s\n", report.Escape(warn))
		}
	}
	if len(v.Variance.Rows) > 0 {
		p.Printf("\n## %s\n\nMean ± sd (CV), range.\n\n", report.Escape(v.VarianceTitle))
		p.Markdown(numeric(v.Variance.Table))
	}
	p.MarkdownNotes("## Notes", v.Notes)
	return p.Err()
}

// numeric aligns right the columns after the first where every cell is a number or a dash.
func numeric(t report.Table) report.Table {
	t.Right = make([]bool, len(t.Head))
	for i := 1; i < len(t.Head); i++ {
		t.Right[i] = !slices.ContainsFunc(t.Rows, func(row []string) bool {
			if i >= len(row) || row[i] == report.Dash {
				return false
			}
			_, err := strconv.ParseFloat(row[i], 64)
			return err != nil
		})
	}
	return t
}
