package bench

import (
	"bytes"
	"fmt"
	"html/template"
	"io"
	"math"
	"slices"

	"github.com/ortserve/ortserve/bench/report"
)

// WriteHTML writes r as one self-contained HTML page: the header, the summary, SVG charts
// (latency and throughput against load, the latency histogram at each version's operating
// point, offline throughput against batch size), the steps of each version and the notes.
// Styles and charts are inline and nothing is fetched, so the file reads offline and in a
// headless browser.
func WriteHTML(w io.Writer, r *Report) error {
	if r == nil {
		return fmt.Errorf("bench: no report to write")
	}
	v := newReportView(r)
	page := htmlPage{
		Title:         v.Title,
		Facts:         v.Facts,
		SummaryTitle:  v.SummaryTitle,
		Summary:       newHTMLTable(v.Summary),
		Plots:         reportCharts(r),
		VarianceTitle: v.VarianceTitle,
		Variance:      newHTMLTable(v.Variance),
		Notes:         v.Notes,
	}
	for _, vv := range v.Versions {
		page.Versions = append(page.Versions, htmlVersion{Name: vv.Name, Steps: newHTMLTable(vv.Steps), Warnings: vv.Warnings})
	}
	// The template is a constant: failing to parse it is a bug here, not a condition to handle.
	t := template.Must(template.New("report").Parse(htmlPageTemplate))
	var buf bytes.Buffer
	if err := t.Execute(&buf, page); err != nil {
		return fmt.Errorf("bench: html report: %w", err)
	}
	_, err := w.Write(buf.Bytes())
	return err
}

// htmlPage is what the page template reads.
type htmlPage struct {
	Title         string
	Facts         []report.Fact
	SummaryTitle  string
	Summary       htmlTable
	Plots         []htmlPlot
	Versions      []htmlVersion
	VarianceTitle string
	Variance      htmlTable
	Notes         []string
}

// htmlPlot is one chart with its caption; SVG is empty when there was nothing to draw and
// the caption says why.
type htmlPlot struct {
	Caption string
	SVG     template.HTML
}

type htmlVersion struct {
	Name     string
	Steps    htmlTable
	Warnings []string
}

type htmlTable struct {
	Head []string
	Rows []htmlRow
}

type htmlRow struct {
	Class string
	Cells []string
}

func newHTMLTable(t viewTable) htmlTable {
	h := htmlTable{Head: t.Head}
	for i, cells := range t.Rows {
		row := htmlRow{Cells: cells}
		if i < len(t.Class) {
			row.Class = t.Class[i]
		}
		h.Rows = append(h.Rows, row)
	}
	return h
}

// reportCharts draws the charts that r has data for.
func reportCharts(r *Report) []htmlPlot {
	var plots []htmlPlot
	add := func(svg, caption string) {
		// svg comes from report.Plot, which escapes every piece of text it writes.
		plots = append(plots, htmlPlot{Caption: caption, SVG: template.HTML(svg)}) //nolint:gosec // G203: escaped by report.Plot, as above
	}
	if svg, ok := latencyChart(r); ok {
		caption := "Latency quantiles against load, per version."
		if sloMs(r) > 0 {
			caption += " The dashed red line is the SLO's p95."
		}
		add(svg, caption)
	}
	if svg, ok := throughputChart(r); ok {
		caption := "Throughput achieved against offered; on the grey diagonal the server kept up."
		if closedLoop(r) {
			caption = "Throughput achieved against the number of clients."
		}
		add(svg, caption)
	}
	plots = append(plots, histogramCharts(r)...)
	if svg, ok := offlineChart(r); ok {
		add(svg, "Offline session throughput against batch size: the raw limit with no HTTP in the way.")
	}
	return plots
}

// stepX is where a step sits on a chart's load axis: its offered rate, or its clients in
// closed loop.
func stepX(s Step, closed bool) float64 {
	if closed {
		return float64(s.Concurrency)
	}
	return s.Offered
}

func loadAxisLabel(closed bool) string {
	if closed {
		return "concurrency (clients)"
	}
	return "offered rate (requests/s)"
}

// latencyQuantile is one quantile drawn on the latency chart, each in its own line style.
type latencyQuantile struct {
	name, dash string
	of         func(Latency) float64
}

func latencyQuantiles() []latencyQuantile {
	return []latencyQuantile{
		{"p50", "", func(l Latency) float64 { return l.P50 }},
		{"p95", "7 4", func(l Latency) float64 { return l.P95 }},
		{"p99", "2 3", func(l Latency) float64 { return l.P99 }},
	}
}

// chartSeries is the (x, y) points of steps, in ascending x, where y is a measured value: steps
// whose y is zero (nothing completed) or not finite are left out.
func chartSeries(steps []Step, closed bool, y func(Step) float64) (xs, ys []float64) {
	all := make([]float64, len(steps))
	for i, s := range steps {
		all[i] = stepX(s, closed)
	}
	for _, i := range sortedByX(all) {
		if v := y(steps[i]); v > 0 && report.Finite(v) && report.Finite(all[i]) {
			xs, ys = append(xs, all[i]), append(ys, v)
		}
	}
	return xs, ys
}

// sloMs is the SLO's p95 in milliseconds, 0 without one.
func sloMs(r *Report) float64 {
	if r.SLO == nil || r.SLO.P95 <= 0 {
		return 0
	}
	return durationMs(r.SLO.P95)
}

// latencyChart draws p50, p95 and p99 against load for every version, with the SLO. The y
// axis is logarithmic when latencies span more than a factor of 20, as they do past the knee.
func latencyChart(r *Report) (string, bool) {
	closed := closedLoop(r)
	versions := firstRun(r)
	quantiles := latencyQuantiles()
	var xs, ys []float64
	for _, vr := range versions {
		for _, q := range quantiles {
			sx, sy := chartSeries(vr.Steps, closed, func(s Step) float64 { return q.of(s.Latency) })
			xs, ys = append(xs, sx...), append(ys, sy...)
		}
	}
	if len(ys) == 0 {
		return "", false
	}
	slo := sloMs(r)
	if slo > 0 {
		ys = append(ys, slo)
	}
	logY := slices.Min(ys) > 0 && slices.Max(ys)/slices.Min(ys) > 20
	title := "Latency against offered rate"
	if closed {
		title = "Latency against concurrency"
	}
	p := report.NewPlot(title, 760, 380,
		report.NewAxis(loadAxisLabel(closed), xs, false, true), report.NewAxis("latency (ms)", ys, logY, true))
	if slo > 0 {
		p.HLine(slo, report.SLOColour, report.SLODash, "SLO p95 "+report.Short(slo)+" ms")
	}
	for i, vr := range versions {
		for _, q := range quantiles {
			sx, sy := chartSeries(vr.Steps, closed, func(s Step) float64 { return q.of(s.Latency) })
			p.Polyline(sx, sy, report.Colour(i), q.dash, versionLabel(vr)+" "+q.name)
			p.Dots(sx, sy, report.Colour(i))
		}
		p.Legend(versionLabel(vr), report.Colour(i), "")
	}
	for _, q := range quantiles {
		p.Legend(q.name, "#555", q.dash)
	}
	if slo > 0 {
		p.Legend("SLO p95", report.SLOColour, report.SLODash)
	}
	return p.SVG(), true
}

// throughputChart draws achieved requests/s against load for every version. In open loop
// both axes are requests/s on one scale, and the diagonal y = x is where the server kept up.
func throughputChart(r *Report) (string, bool) {
	closed := closedLoop(r)
	versions := firstRun(r)
	var xs, ys []float64
	for _, vr := range versions {
		sx, sy := chartSeries(vr.Steps, closed, func(s Step) float64 { return s.Achieved })
		xs, ys = append(xs, sx...), append(ys, sy...)
	}
	if len(ys) == 0 {
		return "", false
	}
	target := 0.0
	if r.SLO != nil && r.SLO.RPS > 0 {
		target = r.SLO.RPS
		ys = append(ys, target)
	}
	x := report.NewAxis(loadAxisLabel(closed), xs, false, true)
	y := report.NewAxis("achieved (requests/s)", ys, false, true)
	if !closed {
		both := slices.Concat(xs, ys)
		x = report.NewAxis(loadAxisLabel(closed), both, false, true)
		y = report.NewAxis("achieved (requests/s)", both, false, true)
	}
	p := report.NewPlot("Achieved throughput", 760, 380, x, y)
	if !closed {
		end := math.Min(p.X.Hi, p.Y.Hi)
		p.Segment(0, 0, end, end, "#999", "3 3")
	}
	if target > 0 {
		p.HLine(target, report.SLOColour, report.SLODash, "SLO target "+report.Short(target)+" rps")
	}
	for i, vr := range versions {
		sx, sy := chartSeries(vr.Steps, closed, func(s Step) float64 { return s.Achieved })
		p.Polyline(sx, sy, report.Colour(i), "", versionLabel(vr)+" achieved")
		p.Dots(sx, sy, report.Colour(i))
		p.Legend(versionLabel(vr), report.Colour(i), "")
	}
	if !closed {
		p.Legend("y = x", "#999", "3 3")
	}
	if target > 0 {
		p.Legend("SLO target", report.SLOColour, report.SLODash)
	}
	return p.SVG(), true
}

// operatingStep picks the step whose latency histogram stands for a version: the highest
// load that passed the SLO, or else the lowest load measured. It returns -1 for no steps,
// and whether the step passed.
func operatingStep(steps []Step, closed bool) (int, bool) {
	best, lowest := -1, -1
	for i, s := range steps {
		x := stepX(s, closed)
		if s.Pass != nil && *s.Pass && (best < 0 || x > stepX(steps[best], closed)) {
			best = i
		}
		if lowest < 0 || x < stepX(steps[lowest], closed) {
			lowest = i
		}
	}
	if best >= 0 {
		return best, true
	}
	return lowest, false
}

// binEdges returns each bin's lower and upper edge. Bins are log-spaced, so the first bin's
// lower edge continues the spacing of the next; a bin that ends at or under zero cannot sit
// on a log axis and gets no edges (lo = hi = 0).
func binEdges(bins []Bin) (los, his []float64) {
	for i, b := range bins {
		lo := 0.0
		switch {
		case i > 0:
			lo = bins[i-1].UpTo
		case len(bins) > 1 && bins[1].UpTo > b.UpTo && b.UpTo > 0:
			lo = b.UpTo * b.UpTo / bins[1].UpTo
		}
		if lo <= 0 || lo >= b.UpTo {
			lo = b.UpTo / 2
		}
		if b.UpTo <= 0 || !report.Finite(b.UpTo) {
			lo, b.UpTo = 0, 0
		}
		los, his = append(los, lo), append(his, b.UpTo)
	}
	return los, his
}

// histogramCharts draws, per version, the latency histogram at its operating point on a log
// latency axis, with its p50, p95 and p99 and the SLO marked.
func histogramCharts(r *Report) []htmlPlot {
	closed := closedLoop(r)
	slo := sloMs(r)
	var plots []htmlPlot
	for i, vr := range firstRun(r) {
		name := versionLabel(vr)
		at, passed := operatingStep(vr.Steps, closed)
		if at < 0 {
			continue
		}
		s := vr.Steps[at]
		why := "the highest load that met the SLO"
		if !passed {
			why = "no step met the SLO, so the lowest load"
		}
		caption := fmt.Sprintf("Latency histogram of %s %s (%s).", name, loadWhere(s, closed), why)
		los, his := binEdges(s.Histogram)
		var xs, counts []float64
		var blo, bhi, bc []float64
		for j, b := range s.Histogram {
			if b.Count <= 0 || his[j] <= 0 {
				continue
			}
			xs = append(xs, los[j], his[j])
			counts = append(counts, float64(b.Count))
			blo, bhi, bc = append(blo, los[j]), append(bhi, his[j]), append(bc, float64(b.Count))
		}
		if len(bc) == 0 {
			plots = append(plots, htmlPlot{Caption: fmt.Sprintf("%s: no latency histogram was recorded %s.", name, loadWhere(s, closed))})
			continue
		}
		marks := []struct {
			label, dash string
			v           float64
		}{{"p50", "", s.Latency.P50}, {"p95", "7 4", s.Latency.P95}, {"p99", "2 3", s.Latency.P99}}
		for _, m := range marks {
			if m.v > 0 {
				xs = append(xs, m.v)
			}
		}
		if slo > 0 {
			xs = append(xs, slo)
		}
		p := report.NewPlot(name+" "+loadWhere(s, closed), 760, 260,
			report.NewAxis("latency (ms)", xs, true, false), report.NewAxis("requests", counts, false, true))
		p.Bars(blo, bhi, bc, report.Colour(i))
		for row, m := range marks {
			if m.v > 0 {
				p.VLine(m.v, "#333", m.dash, m.label+" "+report.NumOrDash(m.v), row)
				p.Legend(m.label, "#333", m.dash)
			}
		}
		if slo > 0 {
			p.VLine(slo, report.SLOColour, report.SLODash, "SLO", len(marks))
			p.Legend("SLO p95", report.SLOColour, report.SLODash)
		}
		// report.Plot escapes all the text it writes.
		plots = append(plots, htmlPlot{Caption: caption, SVG: template.HTML(p.SVG())}) //nolint:gosec // G203: escaped by report.Plot, as above
	}
	return plots
}

// offlineChart draws offline items/s against batch size per version, when any version was
// measured offline.
func offlineChart(r *Report) (string, bool) {
	versions := firstRun(r)
	var xs, ys []float64
	for _, vr := range versions {
		for _, o := range vr.Offline {
			if o.Batch > 0 && o.ItemsPerS > 0 && report.Finite(o.ItemsPerS) {
				xs, ys = append(xs, float64(o.Batch)), append(ys, o.ItemsPerS)
			}
		}
	}
	if len(ys) == 0 {
		return "", false
	}
	// Batch sizes are usually powers of two: a log axis spaces them evenly, and ticks at the
	// sizes measured read better than 1-2-5 steps.
	logX := slices.Max(xs)/slices.Min(xs) >= 8
	x := report.NewAxis("batch size", xs, logX, true)
	if logX {
		ticks := slices.Clone(xs)
		slices.Sort(ticks)
		if ticks = slices.Compact(ticks); len(ticks) <= 12 {
			x.Ticks = ticks
		}
	}
	p := report.NewPlot("Offline throughput", 760, 340, x, report.NewAxis("items/s", ys, false, true))
	for i, vr := range versions {
		var sx, sy []float64
		points := slices.Clone(vr.Offline)
		slices.SortFunc(points, func(a, b OfflinePoint) int { return a.Batch - b.Batch })
		for _, o := range points {
			if o.Batch > 0 && o.ItemsPerS > 0 && report.Finite(o.ItemsPerS) {
				sx, sy = append(sx, float64(o.Batch)), append(sy, o.ItemsPerS)
			}
		}
		if len(sx) == 0 {
			continue
		}
		p.Polyline(sx, sy, report.Colour(i), "", versionLabel(vr)+" offline")
		p.Dots(sx, sy, report.Colour(i))
		p.Legend(versionLabel(vr), report.Colour(i), "")
	}
	return p.SVG(), true
}

// htmlPageTemplate is the page. html/template escapes every value put into it; the charts
// arrive already escaped as template.HTML.
const htmlPageTemplate = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}}</title>
<style>
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #222; max-width: 1100px; margin: 2em auto; padding: 0 1em; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.6em; }
table { border-collapse: collapse; margin: .5em 0 1em; font-size: 13px; }
th, td { border-bottom: 1px solid #ddd; padding: 3px 9px; text-align: right; white-space: nowrap; font-variant-numeric: tabular-nums; }
th { background: #f4f4f4; }
th:first-child, td:first-child, td:last-child { text-align: left; }
td:last-child { white-space: normal; min-width: 18em; }
table.facts th { text-align: left; background: none; vertical-align: top; }
table.facts td { text-align: left; white-space: normal; }
tr.pass td:first-child { border-left: 3px solid #2ca02c; }
tr.fail td:first-child { border-left: 3px solid #d62728; }
ul.warnings { color: #8a5a00; font-size: 13px; }
figure { margin: 1.2em 0; }
figcaption { font-size: 13px; color: #555; }
svg { max-width: 100%; height: auto; }
</style>
</head>
<body>
<h1>{{.Title}}</h1>
<table class="facts">
{{range .Facts}}<tr><th>{{.Label}}</th><td>{{.Value}}</td></tr>
{{end}}</table>
{{if .Summary.Rows}}<h2>{{.SummaryTitle}}</h2>
{{template "table" .Summary}}{{end}}
{{range .Plots}}<figure>
{{if .SVG}}{{.SVG}}
{{end}}<figcaption>{{.Caption}}</figcaption>
</figure>
{{end}}
{{if not .Versions}}<p>No versions were measured.</p>{{end}}
{{range .Versions}}<h2>{{.Name}}</h2>
{{if .Steps.Rows}}{{template "table" .Steps}}{{else}}<p>No steps measured.</p>{{end}}
{{if .Warnings}}<ul class="warnings">
{{range .Warnings}}<li>{{.}}</li>
{{end}}</ul>{{end}}
{{end}}
{{if .Variance.Rows}}<h2>{{.VarianceTitle}}</h2>
<p>Mean ± sd (CV), range.</p>
{{template "table" .Variance}}{{end}}
{{if .Notes}}<h2>Notes</h2>
<ul>
{{range .Notes}}<li>{{.}}</li>
{{end}}</ul>{{end}}
</body>
</html>
{{define "table"}}<table>
<thead><tr>{{range .Head}}<th>{{.}}</th>{{end}}</tr></thead>
<tbody>
{{range .Rows}}<tr{{if .Class}} class="{{.Class}}"{{end}}>{{range .Cells}}<td>{{.}}</td>{{end}}</tr>
{{end}}</tbody>
</table>
{{end}}`

// sortedByX returns the indices of xs in ascending order of value, so that a series is
// drawn left to right whatever order it was measured in.
func sortedByX(xs []float64) []int {
	idx := make([]int, len(xs))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		switch {
		case xs[a] < xs[b]:
			return -1
		case xs[a] > xs[b]:
			return 1
		}
		return 0
	})
	return idx
}
