package plan

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// The text and Markdown views share one reading of a Result: facts, then the fit table and
// the policy table, then the Helm values and the notes.

type fact struct{ label, value string }

type table struct {
	head []string
	rows [][]string
}

func (r *Result) title() string {
	return fmt.Sprintf("Plan for %s under the %s trace, SLO p95 ≤ %s", r.Version, r.Trace.Name, msText(r.SLOMs))
}

func (r *Result) facts() []fact {
	f := r.Fit
	m := f.Model
	servers := fmt.Sprintf("%d servers (fitted)", m.Servers)
	if !f.Fitted {
		servers = fmt.Sprintf("%d servers (given)", m.Servers)
	}
	admit := "no admission limit"
	if m.MaxInFlight > 0 {
		admit = fmt.Sprintf("429 past %d in flight", m.MaxInFlight)
	}
	sc := r.Scaler
	up := fmt.Sprintf("up by %d pods or %s per %s", sc.UpPods, pct(sc.UpPercent/100), durText(sc.UpPeriodS))
	if sc.UpWindowS > 0 {
		up += " after a " + durText(sc.UpWindowS) + " window"
	}
	down := fmt.Sprintf("down by %s per %s", pct(sc.DownPercent/100), durText(sc.DownPeriodS))
	if sc.DownWindowS > 0 {
		down += " after a " + durText(sc.DownWindowS) + " window"
	}
	down = up + ", " + down
	sim := fmt.Sprintf("%s of trace, %s requests per policy", durText(r.Trace.DurationS), countText(r.Trace.Requests))
	if r.Compress > 1 {
		sim = fmt.Sprintf("%s of trace (%s requests), time compressed %s× to %s (%s requests per policy; notes)",
			durText(r.Trace.DurationS), countText(r.Trace.Requests), shortNum(r.Compress), durText(r.Trace.DurationS/r.Compress),
			countText(r.Trace.Requests/r.Compress))
	}
	sim += fmt.Sprintf("; seed %d; %s balancing; %.1f s", r.Seed, r.Balance, r.Elapsed)
	price := "–"
	if r.Price > 0 {
		price = "$" + strconv.FormatFloat(r.Price, 'f', -1, 64) + " per replica-hour"
	}
	return []fact{
		{"Traffic", fmt.Sprintf("%s, %s, %s to %s rps", r.Trace.Name, durText(r.Trace.DurationS), shortNum(r.Trace.Trough), shortNum(r.Trace.Peak))},
		{"Measured", fmt.Sprintf("one replica met p95 ≤ %s up to %s rps (p95 %s there)", msText(r.SLOMs), shortNum(r.Sizing.Best), msText(f.AtBest.P95Ms))},
		{"Replica model", fmt.Sprintf("%s, FIFO; service time %s; %s; capacity %s rps", servers, f.Service, admit, shortNum(m.Capacity()))},
		{"Autoscaler", fmt.Sprintf("HPA v2: %d to %d replicas, sync %s, tolerance %s, %s, start-up %s",
			sc.Min, sc.Max, durText(sc.SyncS), pct(sc.Tolerance), down, durText(sc.StartupS))},
		{"Simulated", sim},
		{"Price", price},
	}
}

func (r *Result) fitTable() table {
	t := table{head: []string{"offered rps", "measured p95 ms", "model p95 ms", "measured mean ms", "model mean ms", "SLO"}}
	for _, c := range r.Fit.Checks {
		mp95, mmean := "saturated", "saturated"
		if c.ModelP95 > 0 {
			mp95, mmean = shortNum(c.ModelP95), shortNum(c.ModelMean)
		}
		pass := "✗"
		if c.Pass {
			pass = "✓"
		}
		t.rows = append(t.rows, []string{shortNum(c.Offered), shortNum(c.MeasuredP95), mp95, shortNum(c.MeasuredMean), mmean, pass})
	}
	return t
}

func (r *Result) policyTable() table {
	t := table{head: []string{"policy", "target", "≈ rps/pod", "replicas min/mean/max", "replica-hours", "cost",
		"requests over SLO", "429", "minutes p95 > SLO", "longest", "p50 ms", "p95 ms", "p99 ms"}}
	for _, o := range r.Outcomes {
		// The rate per pod each target holds pods at: for in flight, the measured rate it
		// was derived from; for CPU, the busy fraction of the model's capacity.
		target, perPod := shortNum(o.Policy.Target)+" in flight/pod", r.Sizing.PerPod
		if o.Policy.Metric == CPU {
			target, perPod = pct(o.Policy.Target)+" busy", o.Policy.Target*r.Fit.Model.Capacity()
		}
		target += ", " + durText(o.MetricWindowS) + " avg"
		cost := "–"
		if o.Cost > 0 {
			cost = "$" + strconv.FormatFloat(o.Cost, 'f', 2, 64)
		}
		t.rows = append(t.rows, []string{o.Policy.Name, target, shortNum(perPod),
			fmt.Sprintf("%d / %s / %d", o.Replicas.Min, shortNum(o.Replicas.Mean), o.Replicas.Max),
			shortNum(o.ReplicaHours), cost, pct(o.OverFraction()), countText(float64(o.Rejected)),
			fmt.Sprintf("%d of %d", o.Breached, o.Windows), fmt.Sprintf("%d min", o.LongestBreach),
			shortNum(o.Latency.P50), shortNum(o.Latency.P95), shortNum(o.Latency.P99)})
	}
	return t
}

// countText prints a count: 950, 12.3 k, 4.5 M.
func countText(v float64) string {
	switch {
	case v >= 1e6:
		return shortNum(v/1e6) + " M"
	case v >= 1e4:
		return shortNum(v/1e3) + " k"
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}

// WriteText writes the plan for a terminal.
func WriteText(w io.Writer, r *Result) error {
	var b bytes.Buffer
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "%s\n\n", r.title())
	for _, f := range r.facts() {
		fmt.Fprintf(tw, "%s\t%s\n", f.label, f.value)
	}
	tw.Flush()
	textTable(&b, "\nThe model against the measurement", r.fitTable())
	textTable(&b, "\nWhat each autoscaling policy did", r.policyTable())
	b.WriteString("\nRecommended Helm values (as server bench --plan-helm, sized for this trace):\n")
	if err := WriteHelm(&b, r.Sizing); err != nil {
		return err
	}
	if len(r.Notes) > 0 {
		b.WriteString("\nNotes\n")
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "  - %s\n", n)
		}
	}
	_, err := w.Write(b.Bytes())
	return err
}

func textTable(b *bytes.Buffer, title string, t table) {
	fmt.Fprintf(b, "%s\n", title)
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  %s\n", strings.Join(t.head, "\t"))
	for _, row := range t.rows {
		fmt.Fprintf(tw, "  %s\n", strings.Join(row, "\t"))
	}
	tw.Flush()
}

// WriteMarkdown writes the plan as GitHub Markdown.
func WriteMarkdown(w io.Writer, r *Result) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# %s\n\n", r.title())
	for _, f := range r.facts() {
		fmt.Fprintf(&b, "- **%s:** %s\n", f.label, mdEscape(f.value))
	}
	mdTable(&b, "The model against the measurement", r.fitTable())
	mdTable(&b, "What each autoscaling policy did", r.policyTable())
	b.WriteString("\n## Recommended Helm values\n\n```yaml\n")
	if err := WriteHelm(&b, r.Sizing); err != nil {
		return err
	}
	b.WriteString("```\n")
	if len(r.Notes) > 0 {
		b.WriteString("\n## Notes\n\n")
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "- %s\n", mdEscape(n))
		}
	}
	_, err := w.Write(b.Bytes())
	return err
}

func mdTable(b *bytes.Buffer, title string, t table) {
	fmt.Fprintf(b, "\n## %s\n\n|", title)
	for _, h := range t.head {
		fmt.Fprintf(b, " %s |", mdEscape(h))
	}
	b.WriteString("\n|")
	for range t.head {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, row := range t.rows {
		b.WriteString("|")
		for _, c := range row {
			fmt.Fprintf(b, " %s |", mdEscape(c))
		}
		b.WriteString("\n")
	}
}

func mdEscape(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ", "<", "&lt;", ">", "&gt;").Replace(s)
}

// WriteJSON writes the plan as indented JSON (Schema): the data, timelines included.
func WriteJSON(w io.Writer, r *Result) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("plan: json: %w", err)
	}
	_, err := w.Write(b.Bytes())
	return err
}
