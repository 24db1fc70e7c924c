package gate

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/ortserve/ortserve/bench/report"
)

// The text and Markdown views share one reading of a Report: newView turns it into facts,
// tables, checks and notes once, and each writer only lays them out, so the two cannot
// disagree about a number.

// view is a Report read for display. Every string in it is already cleaned of control
// characters, since labels and texts come from outside.
type view struct {
	title  string
	facts  []report.Fact
	tables []table
	pass   bool
	checks []Check
	notes  []string
}

// table is a titled table of display strings; Right marks the numeric columns.
type table struct {
	title string
	report.Table
}

// newView reads r for display.
func newView(r *Report) view {
	b, c := report.Clean(r.Baseline.Version), report.Clean(r.Candidate.Version)
	v := view{
		title:  fmt.Sprintf("Gate: %s%s: candidate %s against baseline %s", r.Task, prefixed(" ", report.Clean(r.Model)), c, b),
		pass:   r.Verdict.Pass,
		checks: make([]Check, len(r.Verdict.Checks)),
		notes:  cleanAll(r.Notes),
	}
	for i, ch := range r.Verdict.Checks {
		ch.Detail = report.Clean(ch.Detail)
		v.checks[i] = ch
	}
	fact := func(label, value string) { v.facts = append(v.facts, report.Fact{Label: label, Value: value}) }
	fact("dataset", datasetText(r.Dataset))
	if d := r.Comparison.Drop; d != nil {
		what := "accuracy"
		if d.Metric == MetricCentroidAccuracy {
			what = "centroid accuracy"
		}
		fact(what, fmt.Sprintf("%s %s, %s %s: %s", b, fracText(r.Baseline.Accuracy), c, fracText(r.Candidate.Accuracy), dropText(d, r.Budget.MaxDrop)))
	}
	if r.Baseline.MacroF1 != nil && r.Candidate.MacroF1 != nil {
		fact("macro-F1", fmt.Sprintf("%s %.3f, %s %.3f", b, *r.Baseline.MacroF1, c, *r.Candidate.MacroF1))
	}
	if a := r.Comparison.Agreement; a != nil {
		fact("agreement", fmt.Sprintf("%s: %d of %d predictions changed (%d right→wrong, %d wrong→right, %d wrong→wrong)",
			report.Percent(a.Fraction, report.Decimals(100*a.Fraction, 100*r.Budget.MinAgreement, 1)), a.Changed, r.Dataset.N, a.RightToWrong, a.WrongToRight, a.WrongToWrong))
	}
	if d := r.Comparison.ProbDelta; d != nil {
		fact("max |Δp|", fmt.Sprintf("mean %.3f, p50 %.3f, p95 %.3f, max %.3f", d.Mean, d.P50, d.P95, d.Max))
	}
	if d := r.Comparison.Cosine; d != nil {
		fact("cosine", fmt.Sprintf("mean %s, p1 %s, p5 %s, p50 %s, min %s",
			report.Signed(d.Mean, 3), report.Signed(d.P1, 3), report.Signed(d.P5, 3), report.Signed(d.P50, 3), report.Signed(d.Min, 3)))
	}
	if r.Baseline.Dim > 0 {
		fact("dimension", strconv.Itoa(r.Baseline.Dim))
	}
	fact("speed", speedText(r, b, c))
	fact("budget", budgetText(r.Budget))
	if d := r.Comparison.Drop; d != nil {
		fact("bootstrap", fmt.Sprintf("%d paired resamples of %d examples, seed %d", d.Resamples, d.N, d.Seed))
	}

	if len(r.Baseline.Classes) > 0 && len(r.Baseline.Classes) == len(r.Candidate.Classes) {
		t := table{title: "Per class", Table: report.Table{Head: []string{"class", "support", b + " P", b + " R", b + " F1", c + " P", c + " R", c + " F1"}}}
		t.Right = []bool{false, true, true, true, true, true, true, true}
		for i, bm := range r.Baseline.Classes {
			cm := r.Candidate.Classes[i]
			t.Rows = append(t.Rows, []string{report.Clean(bm.Label), strconv.Itoa(bm.Support),
				report.Fixed(bm.Precision, 3), report.Fixed(bm.Recall, 3), report.Fixed(bm.F1, 3), report.Fixed(cm.Precision, 3), report.Fixed(cm.Recall, 3), report.Fixed(cm.F1, 3)})
		}
		v.tables = append(v.tables, t)
	}
	for _, m := range []VersionMetrics{r.Baseline, r.Candidate} {
		if m.Confusion != nil {
			v.tables = append(v.tables, confusionTable(report.Clean(m.Version), m.Confusion))
		}
	}
	if len(r.Comparison.Worst) > 0 {
		v.tables = append(v.tables, worstTable(r.Comparison.Worst, b, c))
	}
	if r.Served != nil {
		v.tables = append(v.tables, servedTable(r.Task, r.Served))
	}
	return v
}

// servedTable lays out the served-path variability of each version.
func servedTable(task string, s *Served) table {
	how := "informational"
	if s.Required {
		how = "the candidate must be batch-invariant"
	}
	t := table{title: fmt.Sprintf("Served through the batcher (%s; against each version's fixed-chunk answers; %s)", report.Clean(s.Method), how)}
	if task == TaskClassify {
		t.Head = []string{"version", "texts", "label flips", "max |Δp|", "items/s", "batch-invariant"}
	} else {
		t.Head = []string{"version", "texts", "min cosine", "p1 cosine", "items/s", "batch-invariant"}
	}
	t.Right = []bool{false, true, true, true, true, false}
	for _, v := range s.Versions {
		row := []string{report.Clean(v.Version), strconv.Itoa(v.N)}
		if task == TaskClassify {
			if v.LabelFlips == nil {
				row = append(row, report.Dash, report.Dash)
			} else {
				row = append(row, strconv.Itoa(*v.LabelFlips), sci(deref(v.MaxProbDelta)))
			}
		} else {
			row = append(row, cosOrDash(v.CosineMin), cosOrDash(v.CosineP1))
		}
		yes := "no"
		switch {
		case v.Invariant:
			yes = "yes"
		case v.NonFinite > 0:
			yes = fmt.Sprintf("no: %d NaN/Inf", v.NonFinite)
		}
		t.Rows = append(t.Rows, append(row, report.FixedOrDash(v.ItemsPerSecond, 1), yes))
	}
	return t
}

// cosOrDash is a served cosine, or a dash when no text had one to give.
func cosOrDash(c *float64) string {
	if c == nil {
		return report.Dash
	}
	return cos6(*c)
}

func prefixed(p, s string) string {
	if s == "" {
		return ""
	}
	return p + s
}

// datasetText is the dataset line: source, size and label counts.
func datasetText(d DatasetSummary) string {
	s := fmt.Sprintf("%s, %d examples", report.Clean(orName(d.Source)), d.N)
	switch n := len(d.Labels); {
	case n == 0:
		s += ", unlabeled"
	case n > 10:
		s += fmt.Sprintf(", %d labels", n)
	default:
		parts := make([]string, n)
		for i, l := range d.Labels {
			parts[i] = fmt.Sprintf("%s %d", report.Clean(l.Label), l.Count)
		}
		s += " (" + strings.Join(parts, ", ") + ")"
	}
	return s
}

// dropText is the drop with its interval, in the decimals the accuracy check uses.
func dropText(d *Drop, budget float64) string {
	dec := report.Decimals(d.High, budget, 1)
	return fmt.Sprintf("drop %s points (%s%% CI %s … %s)", report.Signed(d.Points, dec), confText(d.Confidence), report.Signed(d.Low, dec), report.Signed(d.High, dec))
}

func fracText(f *float64) string {
	if f == nil {
		return report.Dash
	}
	return report.Percent(*f, 1)
}

// speedText is both versions' items per second and the ratio.
func speedText(r *Report, b, c string) string {
	rate := func(ips float64) string {
		if ips <= 0 {
			return report.Dash
		}
		return strconv.FormatFloat(ips, 'f', 1, 64) + " items/s"
	}
	if r.Baseline.ItemsPerSecond <= 0 && r.Candidate.ItemsPerSecond <= 0 {
		return "not timed"
	}
	s := fmt.Sprintf("%s %s, %s %s", b, rate(r.Baseline.ItemsPerSecond), c, rate(r.Candidate.ItemsPerSecond))
	if x := r.Comparison.SpeedRatio; x > 0 {
		s += fmt.Sprintf(": %.2f× the baseline", x)
	}
	return s
}

// budgetText lists the budgets set.
func budgetText(b Budget) string {
	var parts []string
	if b.MaxDrop > 0 {
		parts = append(parts, fmt.Sprintf("drop ≤ %s", pointsText(b.MaxDrop)))
	}
	if b.MinAgreement > 0 {
		parts = append(parts, fmt.Sprintf("agreement ≥ %s%%", strconv.FormatFloat(100*b.MinAgreement, 'f', -1, 64)))
	}
	if b.MinCosineMean > 0 {
		parts = append(parts, fmt.Sprintf("mean cosine ≥ %s", strconv.FormatFloat(b.MinCosineMean, 'f', -1, 64)))
	}
	if b.MinCosineP1 > 0 {
		parts = append(parts, fmt.Sprintf("p1 cosine ≥ %s", strconv.FormatFloat(b.MinCosineP1, 'f', -1, 64)))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// pointsText is an amount of percentage points, in words.
func pointsText(p float64) string {
	s := strconv.FormatFloat(p, 'f', -1, 64)
	if p == 1 {
		return s + " point"
	}
	return s + " points"
}

// confusionTable lays out one version's confusion matrix.
func confusionTable(version string, m *Confusion) table {
	t := table{
		title: fmt.Sprintf("Confusion, %s (rows: true label, columns: predicted)", version),
		Table: report.Table{
			Head:  append([]string{"true \\ predicted"}, cleanAll(m.Labels)...),
			Right: make([]bool, len(m.Labels)+1),
		},
	}
	for i := range m.Labels {
		t.Right[i+1] = true
		row := []string{report.Clean(m.Labels[i])}
		for _, n := range m.Counts[i] {
			row = append(row, strconv.Itoa(n))
		}
		t.Rows = append(t.Rows, row)
	}
	return t
}

// worstTable lists the examples that changed most.
func worstTable(worst []ExampleDiff, b, c string) table {
	t := table{title: "Most changed examples"}
	if worst[0].Cosine != nil {
		t.Head = []string{"#", "label", "cosine", "text"}
		t.Right = []bool{true, false, true, false}
	} else {
		t.Head = []string{"#", "label", b, c, "max |Δp|", "text"}
		t.Right = []bool{true, false, false, false, true, false}
	}
	for _, w := range worst {
		row := []string{strconv.Itoa(w.Index), report.Clean(w.Label)}
		if w.Cosine != nil {
			row = append(row, report.Signed(*w.Cosine, 3))
		} else {
			row = append(row, report.Clean(w.Baseline), report.Clean(w.Candidate), report.Fixed(deref(w.ProbDelta), 3))
		}
		t.Rows = append(t.Rows, append(row, strconv.Quote(w.Text)))
	}
	return t
}

func deref(f *float64) float64 {
	if f == nil {
		return 0
	}
	return *f
}

func cleanAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = report.Clean(s)
	}
	return out
}

func verdictWord(pass bool) string {
	if pass {
		return "PASS"
	}
	return "FAIL"
}

func checkMark(pass bool) string {
	if pass {
		return "✓"
	}
	return "✗"
}

// WriteText writes r as a compact terminal view: the facts, with both accuracies and the
// drop's interval on one line, the per-class table, the confusion matrices, the most changed
// examples, the verdict with every check, and the notes.
func WriteText(w io.Writer, r *Report) error {
	if r == nil {
		return errors.New("gate: no report to write")
	}
	v := newView(r)
	p := report.NewPrinter(w)
	p.Printf("%s\n", v.title)
	p.Text(report.FactTable(v.facts), "  ")
	for _, t := range v.tables {
		p.Printf("\n%s\n", t.title)
		p.Text(t.Table, "  ")
	}
	p.Printf("\nVerdict: %s\n", verdictWord(v.pass))
	for _, c := range v.checks {
		p.Printf("  %s %s\n", checkMark(c.Pass), c.Detail)
	}
	p.Notes(v.notes)
	return p.Err()
}

// WriteMarkdown writes r as Markdown, for a pull request or a CI summary: the facts as a
// list, the tables as tables, then the verdict and the notes.
func WriteMarkdown(w io.Writer, r *Report) error {
	if r == nil {
		return errors.New("gate: no report to write")
	}
	v := newView(r)
	p := report.NewPrinter(w)
	p.Printf("## %s\n\n", report.Escape(v.title))
	p.Printf("**Verdict: %s**\n\n", verdictWord(v.pass))
	for _, f := range v.facts {
		p.Printf("- **%s**: %s\n", report.Escape(f.Label), report.Escape(f.Value))
	}
	for _, t := range v.tables {
		p.Printf("\n### %s\n\n", report.Escape(t.title))
		p.Markdown(t.Table)
	}
	p.Printf("\n### Checks\n\n")
	for _, c := range v.checks {
		p.Printf("- %s %s\n", checkMark(c.Pass), report.Escape(c.Detail))
	}
	p.MarkdownNotes("### Notes", v.notes)
	return p.Err()
}

// WriteJSON writes r as indented JSON.
func WriteJSON(w io.Writer, r *Report) error {
	if r == nil {
		return errors.New("gate: no report to write")
	}
	if err := report.WriteJSON(w, r); err != nil {
		return fmt.Errorf("gate: json report: %w", err)
	}
	return nil
}
