package bench

import (
	"html/template"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// svgPlot is one chart being drawn: a frame of fixed size, an x and a y axis, and the marks
// drawn so far. Its methods take data values and map them to pixels; a value an axis cannot
// show (not finite, or not positive on a log axis) is left out rather than drawn at a made-up
// place. All text is escaped when it is written.
type svgPlot struct {
	title         string
	width, height float64
	x, y          svgAxis
	marks         strings.Builder
	legend        []svgLegendEntry
}

// svgAxis maps data values in [lo, hi] to pixels in [p0, p1], linearly or by log10.
type svgAxis struct {
	label  string
	lo, hi float64
	log    bool
	step   float64 // linear tick step; 0 on a log axis
	ticks  []float64
	p0, p1 float64
}

// svgLegendEntry is one line of a legend: a stroke sample and what it stands for.
type svgLegendEntry struct {
	label, colour, dash string
}

// The frame's margins in pixels: room for tick labels and axis labels on the left and
// bottom, the title on top, the legend on the right.
const (
	svgMarginLeft   = 64
	svgMarginRight  = 168
	svgMarginTop    = 30
	svgMarginBottom = 44
)

// svgSLOColour draws the service level on every chart, so it reads as the same line.
const svgSLOColour = "#d62728"

// svgColour is the colour of series i: one per version, the same on every chart. Red is left
// out, for the SLO.
func svgColour(i int) string {
	palette := []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f"}
	return palette[i%len(palette)]
}

// newSVGAxis fits an axis to values: a linear axis from nice tick to nice tick (from zero
// if fromZero), or a log axis from one 1-2-5 step to another. Values an axis cannot show
// are ignored; with none left it spans a unit range.
func newSVGAxis(label string, values []float64, log, fromZero bool) svgAxis {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range values {
		if !isFiniteNum(v) || (log && v <= 0) {
			continue
		}
		lo, hi = min(lo, v), max(hi, v)
	}
	a := svgAxis{label: label, log: log}
	if log {
		if lo > hi {
			lo, hi = 1, 10
		}
		a.lo, a.hi = logStepDown(lo), logStepUp(hi)
		if a.hi <= a.lo {
			a.hi = logStepUp(a.lo * 1.01)
		}
		a.ticks = logTicks(a.lo, a.hi)
		return a
	}
	if lo > hi {
		lo, hi = 0, 1
	}
	if fromZero {
		lo, hi = min(lo, 0), max(hi, 0)
	}
	if hi == lo {
		if lo == 0 {
			hi = 1
		} else {
			lo, hi = lo-math.Abs(lo)/2, hi+math.Abs(hi)/2
		}
	}
	// hi/5 - lo/5 rather than (hi-lo)/5: the difference of two huge values overflows.
	a.step = niceStep(hi/5 - lo/5)
	a.lo = math.Floor(lo/a.step) * a.step
	a.hi = math.Ceil(hi/a.step) * a.step
	// About six ticks; the bound only matters for ranges that float rounding has made odd.
	for i := range 20 {
		t := a.lo + float64(i)*a.step
		if t > a.hi+a.step/2 {
			break
		}
		a.ticks = append(a.ticks, t)
	}
	return a
}

// niceStep rounds a raw tick step up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 || !isFiniteNum(raw) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	switch f := raw / p; {
	case f <= 1:
		return p
	case f <= 2:
		return 2 * p
	case f <= 5:
		return 5 * p
	default:
		return 10 * p
	}
}

// logSteps lists 1, 2 and 5 times the powers of ten around [lo, hi], ascending.
func logSteps(lo, hi float64) []float64 {
	var out []float64
	for k := int(math.Floor(math.Log10(lo))) - 1; k <= int(math.Ceil(math.Log10(hi)))+1; k++ {
		for _, m := range []float64{1, 2, 5} {
			out = append(out, m*math.Pow10(k))
		}
	}
	return out
}

// logStepDown is the largest 1-2-5 step at or under v.
func logStepDown(v float64) float64 {
	steps := logSteps(v, v)
	best := steps[0]
	for _, s := range steps {
		if s <= v*(1+1e-9) {
			best = s
		}
	}
	return best
}

// logStepUp is the smallest 1-2-5 step at or over v.
func logStepUp(v float64) float64 {
	steps := logSteps(v, v)
	for _, s := range steps {
		if s >= v*(1-1e-9) {
			return s
		}
	}
	return steps[len(steps)-1]
}

// logTicks are the 1-2-5 steps in [lo, hi]; over more than about two decades, only the
// powers of ten, so that the labels do not crowd.
func logTicks(lo, hi float64) []float64 {
	var all, decades []float64
	for _, s := range logSteps(lo, hi) {
		if s < lo*(1-1e-9) || s > hi*(1+1e-9) {
			continue
		}
		all = append(all, s)
		if m := s / math.Pow10(int(math.Floor(math.Log10(s)+1e-9))); math.Abs(m-1) < 1e-9 {
			decades = append(decades, s)
		}
	}
	if len(all) > 9 && len(decades) >= 2 {
		return decades
	}
	return all
}

// at maps v to a pixel; ok is false for a value the axis cannot show. Values outside the
// axis are clamped to its ends.
func (a svgAxis) at(v float64) (px float64, ok bool) {
	if !isFiniteNum(v) || (a.log && v <= 0) {
		return 0, false
	}
	var f float64
	if a.log {
		f = (math.Log10(v) - math.Log10(a.lo)) / (math.Log10(a.hi) - math.Log10(a.lo))
	} else {
		f = (v - a.lo) / (a.hi - a.lo)
	}
	if !isFiniteNum(f) {
		return 0, false
	}
	f = min(max(f, 0), 1)
	return a.p0 + f*(a.p1-a.p0), true
}

// contains reports whether v lies on the axis, not clamped to it.
func (a svgAxis) contains(v float64) bool {
	if !isFiniteNum(v) {
		return false
	}
	if a.log {
		return v > 0 && v >= a.lo*(1-1e-9) && v <= a.hi*(1+1e-9)
	}
	eps := 1e-9 * (a.hi - a.lo)
	return v >= a.lo-eps && v <= a.hi+eps
}

// tickLabel prints a tick value with no more decimals than the ticks need.
func (a svgAxis) tickLabel(v float64) string {
	if math.Abs(v) < 1e-12 {
		return "0"
	}
	if math.Abs(v) >= 10000 && math.Mod(v, 1000) == 0 {
		return strconv.FormatFloat(v/1000, 'f', -1, 64) + "k"
	}
	ref := a.step
	if a.log || ref <= 0 {
		ref = math.Abs(v)
	}
	decimals := max(0, -int(math.Floor(math.Log10(ref)+1e-9)))
	return strconv.FormatFloat(v, 'f', decimals, 64)
}

// newSVGPlot starts a chart of the given size with its axes placed in the frame.
func newSVGPlot(title string, width, height float64, x, y svgAxis) *svgPlot {
	x.p0, x.p1 = svgMarginLeft, width-svgMarginRight
	y.p0, y.p1 = height-svgMarginBottom, svgMarginTop
	return &svgPlot{title: title, width: width, height: height, x: x, y: y}
}

// svgNum prints a pixel coordinate.
func svgNum(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

// svgText escapes text for SVG inside HTML.
func svgText(s string) string { return template.HTMLEscapeString(s) }

// dashAttr is a stroke-dasharray attribute, or nothing for a solid line.
func dashAttr(dash string) string {
	if dash == "" {
		return ""
	}
	return ` stroke-dasharray="` + svgText(dash) + `"`
}

// points maps paired values to pixels, leaving out pairs an axis cannot show.
func (p *svgPlot) points(xs, ys []float64) [][2]float64 {
	var out [][2]float64
	for i := range min(len(xs), len(ys)) {
		px, okx := p.x.at(xs[i])
		py, oky := p.y.at(ys[i])
		if okx && oky {
			out = append(out, [2]float64{px, py})
		}
	}
	return out
}

// polyline draws a series joined point to point, named in a tooltip.
func (p *svgPlot) polyline(xs, ys []float64, colour, dash, name string) {
	pts := p.points(xs, ys)
	if len(pts) == 0 {
		return
	}
	var b strings.Builder
	for i, pt := range pts {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(svgNum(pt[0]) + "," + svgNum(pt[1]))
	}
	p.marks.WriteString(`<polyline fill="none" stroke="` + svgText(colour) + `" stroke-width="2"` + dashAttr(dash) +
		` points="` + b.String() + `"><title>` + svgText(name) + "</title></polyline>\n")
}

// dots marks each point of a series, so that a single point still shows.
func (p *svgPlot) dots(xs, ys []float64, colour string) {
	for _, pt := range p.points(xs, ys) {
		p.marks.WriteString(`<circle cx="` + svgNum(pt[0]) + `" cy="` + svgNum(pt[1]) + `" r="3" fill="` + svgText(colour) + "\"/>\n")
	}
}

// segment draws a straight line between two data points.
func (p *svgPlot) segment(x1, y1, x2, y2 float64, colour, dash string) {
	pts := p.points([]float64{x1, x2}, []float64{y1, y2})
	if len(pts) != 2 {
		return
	}
	p.marks.WriteString(`<line x1="` + svgNum(pts[0][0]) + `" y1="` + svgNum(pts[0][1]) + `" x2="` + svgNum(pts[1][0]) +
		`" y2="` + svgNum(pts[1][1]) + `" stroke="` + svgText(colour) + `" stroke-width="1.5"` + dashAttr(dash) + "/>\n")
}

// hline draws a horizontal line across the plot at y, labelled at its right end; nothing if
// y is off the axis.
func (p *svgPlot) hline(y float64, colour, dash, label string) {
	if !p.y.contains(y) {
		return
	}
	py, _ := p.y.at(y)
	p.marks.WriteString(`<line x1="` + svgNum(p.x.p0) + `" y1="` + svgNum(py) + `" x2="` + svgNum(p.x.p1) + `" y2="` + svgNum(py) +
		`" stroke="` + svgText(colour) + `" stroke-width="1.5"` + dashAttr(dash) + "/>\n")
	if label != "" {
		p.marks.WriteString(`<text x="` + svgNum(p.x.p1-4) + `" y="` + svgNum(py-4) + `" text-anchor="end" fill="` + svgText(colour) + `">` +
			svgText(label) + "</text>\n")
	}
}

// vline draws a vertical line up the plot at x, labelled at its top; row staggers the labels
// of lines that stand close together.
func (p *svgPlot) vline(x float64, colour, dash, label string, row int) {
	if !p.x.contains(x) {
		return
	}
	px, _ := p.x.at(x)
	p.marks.WriteString(`<line x1="` + svgNum(px) + `" y1="` + svgNum(p.y.p0) + `" x2="` + svgNum(px) + `" y2="` + svgNum(p.y.p1) +
		`" stroke="` + svgText(colour) + `" stroke-width="1.5"` + dashAttr(dash) + "/>\n")
	if label != "" {
		p.marks.WriteString(`<text x="` + svgNum(px+3) + `" y="` + svgNum(p.y.p1+10+float64(row)*12) + `" fill="` + svgText(colour) + `">` +
			svgText(label) + "</text>\n")
	}
}

// bars draws one bar per value, from the x axis up to ys[i], spanning los[i] to his[i].
func (p *svgPlot) bars(los, his, ys []float64, colour string) {
	for i := range min(len(los), len(his), len(ys)) {
		x0, ok0 := p.x.at(los[i])
		x1, ok1 := p.x.at(his[i])
		y, oky := p.y.at(ys[i])
		if !ok0 || !ok1 || !oky || x1 <= x0 {
			continue
		}
		p.marks.WriteString(`<rect x="` + svgNum(x0) + `" y="` + svgNum(y) + `" width="` + svgNum(x1-x0) + `" height="` + svgNum(p.y.p0-y) +
			`" fill="` + svgText(colour) + `" fill-opacity="0.55" stroke="` + svgText(colour) + `" stroke-width="0.5"/>` + "\n")
	}
}

// note writes a line of text in the middle of the plot, for a chart with nothing to show.
func (p *svgPlot) note(text string) {
	p.marks.WriteString(`<text x="` + svgNum((p.x.p0+p.x.p1)/2) + `" y="` + svgNum((p.y.p0+p.y.p1)/2) + `" text-anchor="middle" fill="#555">` +
		svgText(text) + "</text>\n")
}

// addLegend adds a line to the legend.
func (p *svgPlot) addLegend(label, colour, dash string) {
	p.legend = append(p.legend, svgLegendEntry{label: label, colour: colour, dash: dash})
}

// svgClip shortens a label to n characters, so that a long version name keeps to the legend.
func svgClip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}

// svg returns the chart as an <svg> element. Drawing order: grid, marks, axes, legend, so
// that the data sits over the grid and under nothing.
func (p *svgPlot) svg() string {
	var b strings.Builder
	b.WriteString(`<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ` + svgNum(p.width) + " " + svgNum(p.height) +
		`" width="` + svgNum(p.width) + `" height="` + svgNum(p.height) + `" role="img" font-family="sans-serif" font-size="11">` + "\n")
	b.WriteString("<title>" + svgText(p.title) + "</title>\n")
	b.WriteString(`<rect width="100%" height="100%" fill="#fff"/>` + "\n")
	b.WriteString(`<text x="` + svgNum(p.x.p0) + `" y="18" font-size="13" font-weight="bold">` + svgText(p.title) + "</text>\n")

	for _, t := range p.x.ticks {
		px, ok := p.x.at(t)
		if !ok || !p.x.contains(t) {
			continue
		}
		b.WriteString(`<line x1="` + svgNum(px) + `" y1="` + svgNum(p.y.p0) + `" x2="` + svgNum(px) + `" y2="` + svgNum(p.y.p1) + `" stroke="#e5e5e5"/>` + "\n")
		b.WriteString(`<text x="` + svgNum(px) + `" y="` + svgNum(p.y.p0+15) + `" text-anchor="middle" fill="#333">` + svgText(p.x.tickLabel(t)) + "</text>\n")
	}
	for _, t := range p.y.ticks {
		py, ok := p.y.at(t)
		if !ok || !p.y.contains(t) {
			continue
		}
		b.WriteString(`<line x1="` + svgNum(p.x.p0) + `" y1="` + svgNum(py) + `" x2="` + svgNum(p.x.p1) + `" y2="` + svgNum(py) + `" stroke="#e5e5e5"/>` + "\n")
		b.WriteString(`<text x="` + svgNum(p.x.p0-6) + `" y="` + svgNum(py+4) + `" text-anchor="end" fill="#333">` + svgText(p.y.tickLabel(t)) + "</text>\n")
	}

	b.WriteString(p.marks.String())

	b.WriteString(`<path d="M` + svgNum(p.x.p0) + " " + svgNum(p.y.p1) + " V" + svgNum(p.y.p0) + " H" + svgNum(p.x.p1) + `" fill="none" stroke="#333"/>` + "\n")
	b.WriteString(`<text x="` + svgNum((p.x.p0+p.x.p1)/2) + `" y="` + svgNum(p.height-8) + `" text-anchor="middle">` + svgText(p.x.label) + "</text>\n")
	cy := (p.y.p0 + p.y.p1) / 2
	b.WriteString(`<text transform="translate(14 ` + svgNum(cy) + `) rotate(-90)" text-anchor="middle">` + svgText(p.y.label) + "</text>\n")

	lx := p.x.p1 + 14
	for i, e := range p.legend {
		ly := p.y.p1 + 8 + float64(i)*16
		b.WriteString(`<line x1="` + svgNum(lx) + `" y1="` + svgNum(ly) + `" x2="` + svgNum(lx+24) + `" y2="` + svgNum(ly) +
			`" stroke="` + svgText(e.colour) + `" stroke-width="2"` + dashAttr(e.dash) + "/>\n")
		b.WriteString(`<text x="` + svgNum(lx+30) + `" y="` + svgNum(ly+4) + `">` + svgText(svgClip(e.label, 20)) + "</text>\n")
	}
	b.WriteString("</svg>")
	return b.String()
}

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
