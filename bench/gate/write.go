package gate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode"
)

// The text and Markdown views share one reading of a Report: newView turns it into facts,
// tables, checks and notes once, and each writer only lays them out, so the two cannot
// disagree about a number.

// view is a Report read for display. Every string in it is already cleaned of control
// characters, since labels and texts come from outside.
type view struct {
	title  string
	facts  []fact
	tables []table
	pass   bool
	checks []Check
	notes  []string
}

// fact is one line of a report's header.
type fact struct{ label, value string }

// table is a titled table of display strings; right marks the numeric columns.
type table struct {
	title string
	head  []string
	right []bool
	rows  [][]string
}

// dash stands for a value that was not measured; a zero would be a fake number.
const dash = "–"

// newView reads r for display.
func newView(r *Report) view {
	b, c := clean(r.Baseline.Version), clean(r.Candidate.Version)
	v := view{
		title:  fmt.Sprintf("Gate: %s%s: candidate %s against baseline %s", r.Task, prefixed(" ", clean(r.Model)), c, b),
		pass:   r.Verdict.Pass,
		checks: make([]Check, len(r.Verdict.Checks)),
		notes:  cleanAll(r.Notes),
	}
	for i, ch := range r.Verdict.Checks {
		ch.Detail = clean(ch.Detail)
		v.checks[i] = ch
	}
	v.facts = append(v.facts, fact{"dataset", datasetText(r.Dataset)})
	if d := r.Comparison.Drop; d != nil {
		what := "accuracy"
		if d.Metric == MetricCentroidAccuracy {
			what = "centroid accuracy"
		}
		v.facts = append(v.facts, fact{what, fmt.Sprintf("%s %s, %s %s: %s", b, fracText(r.Baseline.Accuracy), c, fracText(r.Candidate.Accuracy), dropText(d, r.Budget.MaxDrop))})
	}
	if r.Baseline.MacroF1 != nil && r.Candidate.MacroF1 != nil {
		v.facts = append(v.facts, fact{"macro-F1", fmt.Sprintf("%s %.3f, %s %.3f", b, *r.Baseline.MacroF1, c, *r.Candidate.MacroF1)})
	}
	if a := r.Comparison.Agreement; a != nil {
		v.facts = append(v.facts, fact{"agreement", fmt.Sprintf("%s: %d of %d predictions changed (%d right→wrong, %d wrong→right, %d wrong→wrong)",
			percent(a.Fraction, decimals(100*a.Fraction, 100*r.Budget.MinAgreement, 1)), a.Changed, r.Dataset.N, a.RightToWrong, a.WrongToRight, a.WrongToWrong)})
	}
	if d := r.Comparison.ProbDelta; d != nil {
		v.facts = append(v.facts, fact{"max |Δp|", fmt.Sprintf("mean %.3f, p50 %.3f, p95 %.3f, max %.3f", d.Mean, d.P50, d.P95, d.Max)})
	}
	if d := r.Comparison.Cosine; d != nil {
		v.facts = append(v.facts, fact{"cosine", fmt.Sprintf("mean %s, p1 %s, p5 %s, p50 %s, min %s",
			signed(d.Mean, 3), signed(d.P1, 3), signed(d.P5, 3), signed(d.P50, 3), signed(d.Min, 3))})
	}
	if r.Baseline.Dim > 0 {
		v.facts = append(v.facts, fact{"dimension", strconv.Itoa(r.Baseline.Dim)})
	}
	v.facts = append(v.facts, fact{"speed", speedText(r, b, c)})
	v.facts = append(v.facts, fact{"budget", budgetText(r.Budget)})
	if d := r.Comparison.Drop; d != nil {
		v.facts = append(v.facts, fact{"bootstrap", fmt.Sprintf("%d paired resamples of %d examples, seed %d", d.Resamples, d.N, d.Seed)})
	}

	if len(r.Baseline.Classes) > 0 && len(r.Baseline.Classes) == len(r.Candidate.Classes) {
		t := table{title: "Per class", head: []string{"class", "support", b + " P", b + " R", b + " F1", c + " P", c + " R", c + " F1"}}
		t.right = []bool{false, true, true, true, true, true, true, true}
		for i, bm := range r.Baseline.Classes {
			cm := r.Candidate.Classes[i]
			t.rows = append(t.rows, []string{clean(bm.Label), strconv.Itoa(bm.Support),
				f3(bm.Precision), f3(bm.Recall), f3(bm.F1), f3(cm.Precision), f3(cm.Recall), f3(cm.F1)})
		}
		v.tables = append(v.tables, t)
	}
	for _, m := range []VersionMetrics{r.Baseline, r.Candidate} {
		if m.Confusion != nil {
			v.tables = append(v.tables, confusionTable(clean(m.Version), m.Confusion))
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
	t := table{title: fmt.Sprintf("Served through the batcher (%s; against each version's fixed-chunk answers; %s)", clean(s.Method), how)}
	if task == TaskClassify {
		t.head = []string{"version", "texts", "label flips", "max |Δp|", "items/s", "batch-invariant"}
	} else {
		t.head = []string{"version", "texts", "min cosine", "p1 cosine", "items/s", "batch-invariant"}
	}
	t.right = []bool{false, true, true, true, true, false}
	for _, v := range s.Versions {
		row := []string{clean(v.Version), strconv.Itoa(v.N)}
		if task == TaskClassify {
			row = append(row, strconv.Itoa(deref2(v.LabelFlips)), sci(deref(v.MaxProbDelta)))
		} else {
			row = append(row, cos6(deref(v.CosineMin)), cos6(deref(v.CosineP1)))
		}
		ips := dash
		if v.ItemsPerSecond > 0 {
			ips = strconv.FormatFloat(v.ItemsPerSecond, 'f', 1, 64)
		}
		yes := "no"
		if v.Invariant {
			yes = "yes"
		}
		t.rows = append(t.rows, append(row, ips, yes))
	}
	return t
}

func prefixed(p, s string) string {
	if s == "" {
		return ""
	}
	return p + s
}

// datasetText is the dataset line: source, size and label counts.
func datasetText(d DatasetSummary) string {
	s := fmt.Sprintf("%s, %d examples", clean(orName(d.Source)), d.N)
	switch n := len(d.Labels); {
	case n == 0:
		s += ", unlabeled"
	case n > 10:
		s += fmt.Sprintf(", %d labels", n)
	default:
		parts := make([]string, n)
		for i, l := range d.Labels {
			parts[i] = fmt.Sprintf("%s %d", clean(l.Label), l.Count)
		}
		s += " (" + strings.Join(parts, ", ") + ")"
	}
	return s
}

// dropText is the drop with its interval, in the decimals the accuracy check uses.
func dropText(d *Drop, budget float64) string {
	dec := decimals(d.High, budget, 1)
	return fmt.Sprintf("drop %s points (%s%% CI %s … %s)", signed(d.Points, dec), confText(d.Confidence), signed(d.Low, dec), signed(d.High, dec))
}

func fracText(f *float64) string {
	if f == nil {
		return dash
	}
	return percent(*f, 1)
}

func f3(f float64) string { return strconv.FormatFloat(f, 'f', 3, 64) }

// speedText is both versions' items per second and the ratio.
func speedText(r *Report, b, c string) string {
	rate := func(ips float64) string {
		if ips <= 0 {
			return dash
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
		head:  append([]string{"true \\ predicted"}, cleanAll(m.Labels)...),
		right: make([]bool, len(m.Labels)+1),
	}
	for i := range m.Labels {
		t.right[i+1] = true
		row := []string{clean(m.Labels[i])}
		for _, n := range m.Counts[i] {
			row = append(row, strconv.Itoa(n))
		}
		t.rows = append(t.rows, row)
	}
	return t
}

// worstTable lists the examples that changed most.
func worstTable(worst []ExampleDiff, b, c string) table {
	t := table{title: "Most changed examples"}
	if worst[0].Cosine != nil {
		t.head = []string{"#", "label", "cosine", "text"}
		t.right = []bool{true, false, true, false}
	} else {
		t.head = []string{"#", "label", b, c, "max |Δp|", "text"}
		t.right = []bool{true, false, false, false, true, false}
	}
	for _, w := range worst {
		row := []string{strconv.Itoa(w.Index), clean(w.Label)}
		if w.Cosine != nil {
			row = append(row, signed(*w.Cosine, 3))
		} else {
			row = append(row, clean(w.Baseline), clean(w.Candidate), f3(deref(w.ProbDelta)))
		}
		t.rows = append(t.rows, append(row, strconv.Quote(w.Text)))
	}
	return t
}

func deref(f *float64) float64 {
	if f == nil {
		return 0
	}
	return *f
}

// clean replaces control characters, so that a label or version from outside cannot move the
// cursor of the terminal that shows it, or break a table row.
func clean(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return '�'
		}
		return r
	}, s)
}

func cleanAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = clean(s)
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

// errWriter remembers the first write error so that the writers can print without checking
// each line.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) printf(format string, args ...any) {
	if e.err == nil {
		_, e.err = fmt.Fprintf(e.w, format, args...)
	}
}

// WriteText writes r as a compact terminal view: the facts, with both accuracies and the
// drop's interval on one line, the per-class table, the confusion matrices, the most changed
// examples, the verdict with every check, and the notes.
func WriteText(w io.Writer, r *Report) error {
	if r == nil {
		return errors.New("gate: no report to write")
	}
	v := newView(r)
	p := &errWriter{w: w}
	p.printf("%s\n", v.title)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	tp := &errWriter{w: tw}
	for _, f := range v.facts {
		tp.printf("  %s\t%s\n", f.label, f.value)
	}
	if tp.err == nil {
		tp.err = tw.Flush()
	}
	p.err = errors.Join(p.err, tp.err)
	for _, t := range v.tables {
		p.printf("\n%s\n", t.title)
		widths := columnWidths(t)
		for _, row := range append([][]string{t.head}, t.rows...) {
			var line strings.Builder
			line.WriteString(" ")
			for j, cell := range row {
				pad := strings.Repeat(" ", widths[j]-runeWidth(cell))
				line.WriteString(" ")
				switch {
				case t.right[j]:
					line.WriteString(pad + cell)
				case j == len(row)-1:
					line.WriteString(cell) // no trailing blanks
				default:
					line.WriteString(cell + pad)
				}
				if j < len(row)-1 {
					line.WriteString(" ")
				}
			}
			p.printf("%s\n", line.String())
		}
	}
	p.printf("\nVerdict: %s\n", verdictWord(v.pass))
	for _, c := range v.checks {
		p.printf("  %s %s\n", checkMark(c.Pass), c.Detail)
	}
	if len(v.notes) > 0 {
		p.printf("\nNotes\n")
		for _, n := range v.notes {
			p.printf("  - %s\n", n)
		}
	}
	return p.err
}

func columnWidths(t table) []int {
	widths := make([]int, len(t.head))
	for _, row := range append([][]string{t.head}, t.rows...) {
		for j, cell := range row {
			widths[j] = max(widths[j], runeWidth(cell))
		}
	}
	return widths
}

func runeWidth(s string) int { return len([]rune(s)) }

// WriteMarkdown writes r as Markdown, for a pull request or a CI summary: the facts as a
// list, the tables as tables, then the verdict and the notes.
func WriteMarkdown(w io.Writer, r *Report) error {
	if r == nil {
		return errors.New("gate: no report to write")
	}
	v := newView(r)
	p := &errWriter{w: w}
	p.printf("## %s\n\n", md(v.title))
	p.printf("**Verdict: %s**\n\n", verdictWord(v.pass))
	for _, f := range v.facts {
		p.printf("- **%s**: %s\n", md(f.label), md(f.value))
	}
	for _, t := range v.tables {
		p.printf("\n### %s\n\n", md(t.title))
		p.printf("|")
		for _, h := range t.head {
			p.printf(" %s |", md(h))
		}
		p.printf("\n|")
		for j := range t.head {
			if t.right[j] {
				p.printf("--:|")
			} else {
				p.printf("---|")
			}
		}
		p.printf("\n")
		for _, row := range t.rows {
			p.printf("|")
			for _, cell := range row {
				p.printf(" %s |", md(cell))
			}
			p.printf("\n")
		}
	}
	p.printf("\n### Checks\n\n")
	for _, c := range v.checks {
		p.printf("- %s %s\n", checkMark(c.Pass), md(c.Detail))
	}
	if len(v.notes) > 0 {
		p.printf("\n### Notes\n\n")
		for _, n := range v.notes {
			p.printf("- %s\n", md(n))
		}
	}
	return p.err
}

// md escapes the characters that would break a table cell or turn text into markup.
var mdEscaper = strings.NewReplacer(`\`, `\\`, "|", `\|`, "*", `\*`, "_", `\_`, "`", "\\`", "<", "&lt;", "[", `\[`, "]", `\]`)

func md(s string) string { return mdEscaper.Replace(clean(s)) }

// WriteJSON writes r as indented JSON.
func WriteJSON(w io.Writer, r *Report) error {
	if r == nil {
		return errors.New("gate: no report to write")
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("gate: json report: %w", err)
	}
	_, err := w.Write(buf.Bytes())
	return err
}
