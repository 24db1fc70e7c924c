package report

import (
	"html/template"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Plot is one chart being drawn: a frame of fixed size, an x and a y axis, and the marks
// drawn so far. Its methods take data values and map them to pixels; a value an axis cannot
// show (not finite, or not positive on a log axis) is left out rather than drawn at a made-up
// place. All text is escaped when it is written.
type Plot struct {
	title         string
	width, height float64
	X, Y          Axis
	marks         strings.Builder
	legend        []legendEntry
}

// Axis maps data values in [Lo, Hi] to pixels in [p0, p1], linearly or by log10.
type Axis struct {
	label  string
	Lo, Hi float64
	log    bool
	step   float64 // linear tick step; 0 on a log axis
	// Ticks are the values marked on the axis; a caller may set its own.
	Ticks  []float64
	p0, p1 float64
}

// legendEntry is one line of a legend: a stroke sample and what it stands for.
type legendEntry struct {
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

// SLOColour and SLODash draw the service level on every chart, so it reads as the same
// line.
const (
	SLOColour = "#d62728"
	SLODash   = "8 4"
)

// Colour is the colour of series i: one per version, the same on every chart. Red is left
// out, for the SLO.
func Colour(i int) string {
	palette := []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f"}
	return palette[i%len(palette)]
}

// NewAxis fits an axis to values: a linear axis from nice tick to nice tick (from zero
// if fromZero), or a log axis from one 1-2-5 step to another. Values an axis cannot show
// are ignored; with none left it spans a unit range.
func NewAxis(label string, values []float64, log, fromZero bool) Axis {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range values {
		if !Finite(v) || (log && v <= 0) {
			continue
		}
		lo, hi = min(lo, v), max(hi, v)
	}
	a := Axis{label: label, log: log}
	if log {
		if lo > hi {
			lo, hi = 1, 10
		}
		a.Lo, a.Hi = logStepDown(lo), logStepUp(hi)
		if a.Hi <= a.Lo {
			a.Hi = logStepUp(a.Lo * 1.01)
		}
		a.Ticks = logTicks(a.Lo, a.Hi)
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
	a.Lo = math.Floor(lo/a.step) * a.step
	a.Hi = math.Ceil(hi/a.step) * a.step
	// About six ticks; the bound only matters for ranges that float rounding has made odd.
	for i := range 20 {
		t := a.Lo + float64(i)*a.step
		if t > a.Hi+a.step/2 {
			break
		}
		a.Ticks = append(a.Ticks, t)
	}
	return a
}

// niceStep rounds a raw tick step up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 || !Finite(raw) {
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
func (a Axis) at(v float64) (px float64, ok bool) {
	if !Finite(v) || (a.log && v <= 0) {
		return 0, false
	}
	var f float64
	if a.log {
		f = (math.Log10(v) - math.Log10(a.Lo)) / (math.Log10(a.Hi) - math.Log10(a.Lo))
	} else {
		f = (v - a.Lo) / (a.Hi - a.Lo)
	}
	if !Finite(f) {
		return 0, false
	}
	f = min(max(f, 0), 1)
	return a.p0 + f*(a.p1-a.p0), true
}

// contains reports whether v lies on the axis, not clamped to it.
func (a Axis) contains(v float64) bool {
	if !Finite(v) {
		return false
	}
	if a.log {
		return v > 0 && v >= a.Lo*(1-1e-9) && v <= a.Hi*(1+1e-9)
	}
	eps := 1e-9 * (a.Hi - a.Lo)
	return v >= a.Lo-eps && v <= a.Hi+eps
}

// tickLabel prints a tick value with no more decimals than the ticks need.
func (a Axis) tickLabel(v float64) string {
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

// NewPlot starts a chart of the given size with its axes placed in the frame.
func NewPlot(title string, width, height float64, x, y Axis) *Plot {
	x.p0, x.p1 = svgMarginLeft, width-svgMarginRight
	y.p0, y.p1 = height-svgMarginBottom, svgMarginTop
	return &Plot{title: title, width: width, height: height, X: x, Y: y}
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
func (p *Plot) points(xs, ys []float64) [][2]float64 {
	var out [][2]float64
	for i := range min(len(xs), len(ys)) {
		px, okx := p.X.at(xs[i])
		py, oky := p.Y.at(ys[i])
		if okx && oky {
			out = append(out, [2]float64{px, py})
		}
	}
	return out
}

// Polyline draws a series joined point to point, named in a tooltip.
func (p *Plot) Polyline(xs, ys []float64, colour, dash, name string) {
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

// Dots marks each point of a series, so that a single point still shows.
func (p *Plot) Dots(xs, ys []float64, colour string) {
	for _, pt := range p.points(xs, ys) {
		p.marks.WriteString(`<circle cx="` + svgNum(pt[0]) + `" cy="` + svgNum(pt[1]) + `" r="3" fill="` + svgText(colour) + "\"/>\n")
	}
}

// Segment draws a straight line between two data points.
func (p *Plot) Segment(x1, y1, x2, y2 float64, colour, dash string) {
	pts := p.points([]float64{x1, x2}, []float64{y1, y2})
	if len(pts) != 2 {
		return
	}
	p.marks.WriteString(`<line x1="` + svgNum(pts[0][0]) + `" y1="` + svgNum(pts[0][1]) + `" x2="` + svgNum(pts[1][0]) +
		`" y2="` + svgNum(pts[1][1]) + `" stroke="` + svgText(colour) + `" stroke-width="1.5"` + dashAttr(dash) + "/>\n")
}

// HLine draws a horizontal line across the plot at y, labelled at its right end; nothing if
// y is off the axis.
func (p *Plot) HLine(y float64, colour, dash, label string) {
	if !p.Y.contains(y) {
		return
	}
	py, _ := p.Y.at(y)
	p.marks.WriteString(`<line x1="` + svgNum(p.X.p0) + `" y1="` + svgNum(py) + `" x2="` + svgNum(p.X.p1) + `" y2="` + svgNum(py) +
		`" stroke="` + svgText(colour) + `" stroke-width="1.5"` + dashAttr(dash) + "/>\n")
	if label != "" {
		p.marks.WriteString(`<text x="` + svgNum(p.X.p1-4) + `" y="` + svgNum(py-4) + `" text-anchor="end" fill="` + svgText(colour) + `">` +
			svgText(label) + "</text>\n")
	}
}

// VLine draws a vertical line up the plot at x, labelled at its top; row staggers the labels
// of lines that stand close together.
func (p *Plot) VLine(x float64, colour, dash, label string, row int) {
	if !p.X.contains(x) {
		return
	}
	px, _ := p.X.at(x)
	p.marks.WriteString(`<line x1="` + svgNum(px) + `" y1="` + svgNum(p.Y.p0) + `" x2="` + svgNum(px) + `" y2="` + svgNum(p.Y.p1) +
		`" stroke="` + svgText(colour) + `" stroke-width="1.5"` + dashAttr(dash) + "/>\n")
	if label != "" {
		p.marks.WriteString(`<text x="` + svgNum(px+3) + `" y="` + svgNum(p.Y.p1+10+float64(row)*12) + `" fill="` + svgText(colour) + `">` +
			svgText(label) + "</text>\n")
	}
}

// Bars draws one bar per value, from the x axis up to ys[i], spanning los[i] to his[i].
func (p *Plot) Bars(los, his, ys []float64, colour string) {
	for i := range min(len(los), len(his), len(ys)) {
		x0, ok0 := p.X.at(los[i])
		x1, ok1 := p.X.at(his[i])
		y, oky := p.Y.at(ys[i])
		if !ok0 || !ok1 || !oky || x1 <= x0 {
			continue
		}
		p.marks.WriteString(`<rect x="` + svgNum(x0) + `" y="` + svgNum(y) + `" width="` + svgNum(x1-x0) + `" height="` + svgNum(p.Y.p0-y) +
			`" fill="` + svgText(colour) + `" fill-opacity="0.55" stroke="` + svgText(colour) + `" stroke-width="0.5"/>` + "\n")
	}
}

// note writes a line of text in the middle of the plot, for a chart with nothing to show.
func (p *Plot) note(text string) {
	p.marks.WriteString(`<text x="` + svgNum((p.X.p0+p.X.p1)/2) + `" y="` + svgNum((p.Y.p0+p.Y.p1)/2) + `" text-anchor="middle" fill="#555">` +
		svgText(text) + "</text>\n")
}

// Legend adds a line to the legend.
func (p *Plot) Legend(label, colour, dash string) {
	p.legend = append(p.legend, legendEntry{label: label, colour: colour, dash: dash})
}

// clip shortens a label to n characters, so that a long version name keeps to the legend.
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}

// SVG returns the chart as an <svg> element. Drawing order: grid, marks, axes, legend, so
// that the data sits over the grid and under nothing.
func (p *Plot) SVG() string {
	var b strings.Builder
	b.WriteString(`<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ` + svgNum(p.width) + " " + svgNum(p.height) +
		`" width="` + svgNum(p.width) + `" height="` + svgNum(p.height) + `" role="img" font-family="sans-serif" font-size="11">` + "\n")
	b.WriteString("<title>" + svgText(p.title) + "</title>\n")
	b.WriteString(`<rect width="100%" height="100%" fill="#fff"/>` + "\n")
	b.WriteString(`<text x="` + svgNum(p.X.p0) + `" y="18" font-size="13" font-weight="bold">` + svgText(p.title) + "</text>\n")

	for _, t := range p.X.Ticks {
		px, ok := p.X.at(t)
		if !ok || !p.X.contains(t) {
			continue
		}
		b.WriteString(`<line x1="` + svgNum(px) + `" y1="` + svgNum(p.Y.p0) + `" x2="` + svgNum(px) + `" y2="` + svgNum(p.Y.p1) + `" stroke="#e5e5e5"/>` + "\n")
		b.WriteString(`<text x="` + svgNum(px) + `" y="` + svgNum(p.Y.p0+15) + `" text-anchor="middle" fill="#333">` + svgText(p.X.tickLabel(t)) + "</text>\n")
	}
	for _, t := range p.Y.Ticks {
		py, ok := p.Y.at(t)
		if !ok || !p.Y.contains(t) {
			continue
		}
		b.WriteString(`<line x1="` + svgNum(p.X.p0) + `" y1="` + svgNum(py) + `" x2="` + svgNum(p.X.p1) + `" y2="` + svgNum(py) + `" stroke="#e5e5e5"/>` + "\n")
		b.WriteString(`<text x="` + svgNum(p.X.p0-6) + `" y="` + svgNum(py+4) + `" text-anchor="end" fill="#333">` + svgText(p.Y.tickLabel(t)) + "</text>\n")
	}

	b.WriteString(p.marks.String())

	b.WriteString(`<path d="M` + svgNum(p.X.p0) + " " + svgNum(p.Y.p1) + " V" + svgNum(p.Y.p0) + " H" + svgNum(p.X.p1) + `" fill="none" stroke="#333"/>` + "\n")
	b.WriteString(`<text x="` + svgNum((p.X.p0+p.X.p1)/2) + `" y="` + svgNum(p.height-8) + `" text-anchor="middle">` + svgText(p.X.label) + "</text>\n")
	cy := (p.Y.p0 + p.Y.p1) / 2
	b.WriteString(`<text transform="translate(14 ` + svgNum(cy) + `) rotate(-90)" text-anchor="middle">` + svgText(p.Y.label) + "</text>\n")

	lx := p.X.p1 + 14
	for i, e := range p.legend {
		ly := p.Y.p1 + 8 + float64(i)*16
		b.WriteString(`<line x1="` + svgNum(lx) + `" y1="` + svgNum(ly) + `" x2="` + svgNum(lx+24) + `" y2="` + svgNum(ly) +
			`" stroke="` + svgText(e.colour) + `" stroke-width="2"` + dashAttr(e.dash) + "/>\n")
		b.WriteString(`<text x="` + svgNum(lx+30) + `" y="` + svgNum(ly+4) + `">` + svgText(clip(e.label, 20)) + "</text>\n")
	}
	b.WriteString("</svg>")
	return b.String()
}
