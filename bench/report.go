package bench

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// The views of a Report (text, Markdown, HTML) share one reading of it: reportView turns the
// Report into facts, tables, warnings and notes once, and each writer only lays them out. So
// the three cannot disagree about what a number is or when a value is missing.

// viewDash stands for a value that was not measured or does not apply; a zero would be a
// fake number.
const viewDash = "–"

// reportView is a Report read for display.
type reportView struct {
	Title    string
	Facts    []viewFact
	Versions []versionView
	// SummaryTitle heads Summary: what "best" means for this report.
	SummaryTitle string
	Summary      viewTable
	// VarianceTitle heads Variance, which has no rows with a single run.
	VarianceTitle string
	Variance      viewTable
	Notes         []string
}

// viewFact is one line of a report's header.
type viewFact struct {
	Label, Value string
}

// viewTable is a table of display strings; Class has one CSS class per row ("pass", "fail"
// or ""), used by the HTML view only.
type viewTable struct {
	Head  []string
	Rows  [][]string
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
		v.SummaryTitle = "Summary: highest rate meeting p95 ≤ " + shortText(durationMs(r.SLO.P95)) + " ms"
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
func reportFacts(r *Report) []viewFact {
	facts := []viewFact{
		{"Target", orDash(r.Target)},
		{"Route", orDash(r.Route)},
		{"Load", loadText(r.Load)},
		{"Inputs", inputsText(r.Load.Inputs)},
		{"Workload", workloadText(r.Workload)},
		{"SLO", sloText(r.SLO)},
	}
	if r.Price > 0 {
		facts = append(facts, viewFact{"Price", "$" + strconv.FormatFloat(r.Price, 'f', 2, 64) + " per hour"})
	}
	if n := len(r.Runs); n > 1 {
		facts = append(facts, viewFact{"Runs", fmt.Sprintf("%d (tables show run 1; the spread is under Variance)", n)})
	}
	facts = append(facts, viewFact{"Tool", toolText(r)}, viewFact{"Host", hostText(r.Host)})
	return facts
}

// loadText says how load was applied. Closed loop says outright that its latency hides
// queueing in the clients, because that is the first thing to know when reading it.
func loadText(l LoadSpec) string {
	if l == (LoadSpec{}) {
		return viewDash
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
			parts = append(parts, "rates searched for the SLO")
		} else {
			parts = append(parts, "rates swept")
		}
	default:
		parts = append(parts, l.Mode)
	}
	if l.StepS > 0 {
		s := secondsText(l.StepS) + " per step"
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
		return viewDash
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
		return viewDash
	}
	return strings.Join(parts, "; ")
}

// distributionText is "p50 120 / p95 400 / max 900", or "" for an empty distribution.
func distributionText(d Distribution) string {
	if d == (Distribution{}) {
		return ""
	}
	return "p50 " + shortText(d.P50) + " / p95 " + shortText(d.P95) + " / max " + shortText(d.Max)
}

func sloText(s *SLO) string {
	if s == nil || (s.P95 <= 0 && s.RPS <= 0) {
		return viewDash
	}
	var parts []string
	if s.P95 > 0 {
		parts = append(parts, "p95 ≤ "+shortText(durationMs(s.P95))+" ms")
	}
	if s.RPS > 0 {
		parts = append(parts, "at ≥ "+shortText(s.RPS)+" req/s")
	}
	return strings.Join(parts, " ")
}

func toolText(r *Report) string {
	s := r.Tool
	if !r.Started.IsZero() {
		s = strings.TrimSpace(s + ", started " + r.Started.Format(time.DateTime+" MST"))
		s = strings.TrimPrefix(s, ", ")
	}
	return orDash(s)
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
		return viewDash
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
			return viewDash
		}
		return strconv.Itoa(s.Concurrency)
	}
	return numOrDash(s.Offered)
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
	t := viewTable{Head: []string{loadHead(closed), "achieved rps", "items/s"}}
	if tokens {
		t.Head = append(t.Head, "tokens/s")
	}
	t.Head = append(t.Head, "p50 ms", "p95 ms", "p99 ms", "max ms", "429/503", "errors", "SLO", "dominant")
	if why {
		t.Head = append(t.Head, "why")
	}
	for _, s := range steps {
		row := []string{loadCell(s, closed), numText(s.Achieved), numText(s.ItemsPerS)}
		if tokens {
			row = append(row, numOrDash(s.TokensPerS))
		}
		errs := strconv.Itoa(s.Errors + s.Timeouts)
		if s.Timeouts > 0 {
			errs += fmt.Sprintf(" (%d timeouts)", s.Timeouts)
		}
		row = append(row,
			msText(s.Latency.P50), msText(s.Latency.P95), msText(s.Latency.P99), msText(s.Latency.Max),
			strconv.Itoa(s.Rejected), errs, passMark(s.Pass), orDash(s.Dominant))
		if why {
			row = append(row, orDash(s.Why))
		}
		t.Rows = append(t.Rows, row)
		t.Class = append(t.Class, passClass(s.Pass))
	}
	return t
}

func passMark(p *bool) string {
	switch {
	case p == nil:
		return viewDash
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
				at, numText(s.Little.InFlight), numText(s.Little.Expected), pctText(math.Abs(s.Little.Deviation)), orDash(s.Little.Cause)))
		}
		if m := s.Bimodal; m != nil {
			w = append(w, fmt.Sprintf("bimodal latency %s: %s of requests near %s ms, the rest near %s ms",
				at, pctText(m.LowShare), msText(m.Low), msText(m.High)))
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
	t := viewTable{Head: []string{"version", "best rps", "best items/s", "vs " + versionLabel(base),
		"peak rps", "offline items/s", "efficiency", "replicas", "in-flight/replica"}}
	if cost {
		t.Head = append(t.Head, "$/M req")
	}
	t.Head = append(t.Head, "verdict")
	for _, vr := range versions {
		ratio := viewDash
		if base.Best > 0 && vr.Best > 0 && isFiniteNum(vr.Best/base.Best) {
			ratio = strconv.FormatFloat(vr.Best/base.Best, 'f', 2, 64) + "×"
		}
		offline := viewDash
		if p, ok := bestOffline(vr.Offline); ok {
			offline = fmt.Sprintf("%s (batch %d)", numText(p.ItemsPerS), p.Batch)
		}
		eff := viewDash
		if vr.Efficiency > 0 {
			eff = pctText(vr.Efficiency)
		}
		replicas, inflight := viewDash, viewDash
		if p := vr.Plan; p != nil {
			if p.Replicas > 0 {
				replicas = strconv.Itoa(p.Replicas)
				if p.TargetRPS > 0 {
					replicas += " for " + shortText(p.TargetRPS) + " rps"
				}
			}
			if p.InFlight > 0 {
				inflight = strconv.Itoa(p.InFlight)
			}
		}
		row := []string{versionLabel(vr), numOrDash(vr.Best), numOrDash(vr.BestItems), ratio,
			numOrDash(peakAchieved(vr.Steps)), offline, eff, replicas, inflight}
		if cost {
			c := viewDash
			if vr.Plan != nil && vr.Plan.CostPerMillion > 0 {
				c = "$" + numText(vr.Plan.CostPerMillion)
			}
			row = append(row, c)
		}
		verdict := viewDash
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
		if isFiniteNum(p.ItemsPerS) && p.ItemsPerS > 0 && (!ok || p.ItemsPerS > best.ItemsPerS) {
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
		if isFiniteNum(s.Achieved) {
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
	t := viewTable{Head: []string{"version", "best rps", at, "p50 ms", "p95 ms"}}
	for _, v := range vs {
		rate, p50, p95 := viewDash, viewDash, viewDash
		if v.Rate > 0 {
			rate, p50, p95 = numText(v.Rate), spreadText(v.P50), spreadText(v.P95)
		}
		t.Rows = append(t.Rows, []string{versionLabel(VersionResult{Name: v.Name}), spreadText(v.Best), rate, p50, p95})
		t.Class = append(t.Class, "")
	}
	return t
}

// spreadText is "412 ± 9.1 (2.2%), 400–425".
func spreadText(s Spread) string {
	if s == (Spread{}) || !isFiniteNum(s.Mean) {
		return viewDash
	}
	out := numText(s.Mean) + " ± " + numText(s.SD)
	if s.CV > 0 && isFiniteNum(s.CV) {
		out += " (" + pctText(s.CV) + ")"
	}
	if s.Min != 0 || s.Max != 0 {
		out += ", " + numText(s.Min) + "–" + numText(s.Max)
	}
	return out
}

// numText prints v to three significant digits without an exponent: 0.0123, 4.56, 78.9,
// 412, 12345. Anything not finite prints as a dash.
func numText(v float64) string {
	if !isFiniteNum(v) {
		return viewDash
	}
	if v == 0 {
		return "0"
	}
	decimals := 2 - int(math.Floor(math.Log10(math.Abs(v))))
	decimals = min(max(decimals, 0), 6)
	s := strconv.FormatFloat(v, 'f', decimals, 64)
	// Rounding can carry into a new digit (9.996 → "10.00"); print it at the new magnitude.
	if r, err := strconv.ParseFloat(s, 64); err == nil && r != 0 && decimals > 0 &&
		2-int(math.Floor(math.Log10(math.Abs(r)))) < decimals {
		s = strconv.FormatFloat(r, 'f', max(decimals-1, 0), 64)
	}
	return s
}

// shortText is numText without trailing zeros, for settings rather than measurements:
// "50 ms", "2.5 s".
func shortText(v float64) string {
	s := numText(v)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}

// numOrDash is numText, with a dash for zero: for quantities where zero means "none".
func numOrDash(v float64) string {
	if v == 0 {
		return viewDash
	}
	return numText(v)
}

// msText prints a latency in milliseconds; zero means no request completed to time.
func msText(v float64) string { return numOrDash(v) }

// pctText prints a fraction as a percentage: 0.42 → "42%", 0.034 → "3.4%".
func pctText(f float64) string {
	if !isFiniteNum(f) {
		return viewDash
	}
	p := f * 100
	if math.Abs(p) < 10 && p != math.Trunc(p) {
		return strconv.FormatFloat(p, 'f', 1, 64) + "%"
	}
	return strconv.FormatFloat(p, 'f', 0, 64) + "%"
}

func secondsText(s float64) string { return shortText(s) + " s" }

func durationMs(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func orDash(s string) string {
	if strings.TrimSpace(s) == "" {
		return viewDash
	}
	return s
}

func isFiniteNum(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// WriteText writes r for a terminal: the header, a table of steps per version with
// warnings under it, a summary with one row per version, the run-to-run spread and the
// notes. Values that were not measured print as "–".
func WriteText(w io.Writer, r *Report) error {
	if r == nil {
		return fmt.Errorf("bench: no report to write")
	}
	v := newReportView(r)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	p := &textPrinter{w: tw}
	p.printf("%s\n\n", v.Title)
	for _, f := range v.Facts {
		p.printf("%s\t%s\n", f.Label, f.Value)
	}
	p.flush()
	if len(v.Versions) == 0 {
		p.printf("\nNo versions were measured.\n")
	}
	for _, vv := range v.Versions {
		p.printf("\n%s\n", vv.Name)
		if len(vv.Steps.Rows) == 0 {
			p.printf("  no steps measured\n")
		} else {
			p.textTable(vv.Steps, "  ")
		}
		for _, warn := range vv.Warnings {
			p.printf("  ! %s\n", warn)
		}
	}
	if len(v.Summary.Rows) > 0 {
		p.printf("\n%s\n", v.SummaryTitle)
		p.textTable(v.Summary, "  ")
	}
	if len(v.Variance.Rows) > 0 {
		p.printf("\n%s (mean ± sd (CV), range)\n", v.VarianceTitle)
		p.textTable(v.Variance, "  ")
	}
	if len(v.Notes) > 0 {
		p.printf("\nNotes\n")
		for _, n := range v.Notes {
			p.printf("  - %s\n", n)
		}
	}
	p.flush()
	return p.err
}

// textPrinter keeps the first write error so that a writer can print freely and check once.
type textPrinter struct {
	w   *tabwriter.Writer
	err error
}

func (p *textPrinter) printf(format string, args ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format, args...)
	}
}

func (p *textPrinter) flush() {
	if p.err == nil {
		p.err = p.w.Flush()
	}
}

// textTable writes t aligned in columns, each line indented.
func (p *textPrinter) textTable(t viewTable, indent string) {
	line := func(cells []string) {
		// A tab inside a cell would start a new column; nothing in a report needs one.
		clean := make([]string, len(cells))
		for i, c := range cells {
			clean[i] = strings.NewReplacer("\t", " ", "\n", " ").Replace(c)
		}
		p.printf("%s%s\n", indent, strings.Join(clean, "\t"))
	}
	line(t.Head)
	for _, row := range t.Rows {
		line(row)
	}
	p.flush()
}

// WriteMarkdown writes r as GitHub Markdown, with the same content as WriteText: for a
// README or a pull request.
func WriteMarkdown(w io.Writer, r *Report) error {
	if r == nil {
		return fmt.Errorf("bench: no report to write")
	}
	v := newReportView(r)
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\n", mdEscape(v.Title))
	for _, f := range v.Facts {
		fmt.Fprintf(&b, "- **%s:** %s\n", f.Label, mdEscape(f.Value))
	}
	if len(v.Summary.Rows) > 0 {
		fmt.Fprintf(&b, "\n## %s\n\n", mdEscape(v.SummaryTitle))
		mdTable(&b, v.Summary)
	}
	if len(v.Versions) == 0 {
		b.WriteString("\nNo versions were measured.\n")
	}
	for _, vv := range v.Versions {
		fmt.Fprintf(&b, "\n## %s\n\n", mdEscape(vv.Name))
		if len(vv.Steps.Rows) == 0 {
			b.WriteString("No steps measured.\n")
		} else {
			mdTable(&b, vv.Steps)
		}
		for _, warn := range vv.Warnings {
			fmt.Fprintf(&b, "\n> ⚠️ %s\n", mdEscape(warn))
		}
	}
	if len(v.Variance.Rows) > 0 {
		fmt.Fprintf(&b, "\n## %s\n\nMean ± sd (CV), range.\n\n", mdEscape(v.VarianceTitle))
		mdTable(&b, v.Variance)
	}
	if len(v.Notes) > 0 {
		b.WriteString("\n## Notes\n\n")
		for _, n := range v.Notes {
			fmt.Fprintf(&b, "- %s\n", mdEscape(n))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// mdTable writes t as a GitHub Markdown table; columns after the first are right-aligned
// where every cell is a number or a dash.
func mdTable(b *strings.Builder, t viewTable) {
	row := func(cells []string) {
		b.WriteString("|")
		for _, c := range cells {
			b.WriteString(" " + mdEscape(c) + " |")
		}
		b.WriteString("\n")
	}
	row(t.Head)
	b.WriteString("|")
	for i := range t.Head {
		if i > 0 && numericColumn(t, i) {
			b.WriteString("---:|")
		} else {
			b.WriteString("---|")
		}
	}
	b.WriteString("\n")
	for _, r := range t.Rows {
		row(r)
	}
}

// numericColumn reports whether column i of t holds only numbers and dashes.
func numericColumn(t viewTable, i int) bool {
	return !slices.ContainsFunc(t.Rows, func(row []string) bool {
		if i >= len(row) || row[i] == viewDash {
			return false
		}
		_, err := strconv.ParseFloat(row[i], 64)
		return err != nil
	})
}

// mdEscape keeps a cell on one line and inside its column, and keeps text that looks like
// HTML from being read as HTML.
func mdEscape(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ", "\r", " ", "<", "&lt;", ">", "&gt;").Replace(s)
}
