package report

import (
	"slices"
	"strings"
)

// Series is one set of points on a Scatter chart, drawn alike and named once in the legend.
type Series struct {
	Name   string
	Colour string // "": the palette's colour for the series' index
	X, Y   []float64
	// Ring draws each point as a larger hollow circle, to mark a chosen point over the
	// dots of another series.
	Ring bool
}

// Scatter draws series of points as one self-contained SVG document with the axes, palette
// and SLO colour of the other charts: linear axes from zero (y logarithmic when its values
// span more than 20×) and, when hline > 0, a dashed horizontal line there labelled
// hlineLabel, in the SLO's colour. Points an axis cannot show are left out.
func Scatter(title, xLabel, yLabel string, series []Series, hline float64, hlineLabel string) string {
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
		if Finite(y) && y > 0 {
			pos = append(pos, y)
		}
	}
	logY := len(pos) > 0 && slices.Max(pos)/slices.Min(pos) > 20
	p := NewPlot(title, 760, 420, NewAxis(xLabel, xs, false, true), NewAxis(yLabel, ys, logY, true))
	if hline > 0 {
		p.HLine(hline, SLOColour, SLODash, hlineLabel)
	}
	for i, s := range series {
		colour := s.Colour
		if colour == "" {
			colour = Colour(i)
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
			p.Legend(s.Name, colour, "")
		}
	}
	if hline > 0 {
		p.Legend(hlineLabel, SLOColour, SLODash)
	}
	return p.SVG() + "\n"
}
