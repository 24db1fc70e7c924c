package bench

import (
	"slices"
	"strings"
)

// ScatterSeries is one set of points on a ScatterSVG chart, drawn alike and named once in
// the legend.
type ScatterSeries struct {
	Name   string
	Colour string // "": the palette's colour for the series' index
	X, Y   []float64
	// Ring draws each point as a larger hollow circle, to mark a chosen point over the
	// dots of another series.
	Ring bool
}

// ScatterSVG draws series of points as one self-contained SVG document with the axes,
// palette and SLO colour of bench's HTML charts: linear axes from zero (y logarithmic when
// its values span more than 20×) and, when hline > 0, a dashed horizontal line there
// labelled hlineLabel, in the SLO's colour. Points an axis cannot show are left out.
func ScatterSVG(title, xLabel, yLabel string, series []ScatterSeries, hline float64, hlineLabel string) string {
	var xs, ys []float64
	for _, s := range series {
		n := min(len(s.X), len(s.Y))
		xs, ys = append(xs, s.X[:n]...), append(ys, s.Y[:n]...)
	}
	if hline > 0 {
		ys = append(ys, hline)
	}
	var pos []float64
	for _, y := range ys {
		if isFiniteNum(y) && y > 0 {
			pos = append(pos, y)
		}
	}
	logY := len(pos) > 0 && slices.Max(pos)/slices.Min(pos) > 20
	p := newSVGPlot(title, 760, 420, newSVGAxis(xLabel, xs, false, true), newSVGAxis(yLabel, ys, logY, true))
	if hline > 0 {
		p.hline(hline, svgSLOColour, "8 4", hlineLabel)
	}
	for i, s := range series {
		colour := s.Colour
		if colour == "" {
			colour = svgColour(i)
		}
		for _, pt := range p.points(s.X, s.Y) {
			if s.Ring {
				p.marks.WriteString(`<circle cx="` + svgNum(pt[0]) + `" cy="` + svgNum(pt[1]) + `" r="8" fill="none" stroke="` +
					svgText(colour) + `" stroke-width="2.5"/>` + "\n")
			} else {
				p.marks.WriteString(`<circle cx="` + svgNum(pt[0]) + `" cy="` + svgNum(pt[1]) + `" r="3.5" fill="` + svgText(colour) + "\"/>\n")
			}
		}
		if strings.TrimSpace(s.Name) != "" {
			p.addLegend(s.Name, colour, "")
		}
	}
	if hline > 0 {
		p.addLegend(hlineLabel, svgSLOColour, "8 4")
	}
	return p.svg() + "\n"
}
