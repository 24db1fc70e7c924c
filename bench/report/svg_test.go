package report

import (
	"encoding/xml"
	"math"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// checkXML fails t unless s is well-formed XML: SVG inline in HTML still has to be, for
// every tag to close and every piece of text to be escaped.
func checkXML(t *testing.T, name, s string) {
	t.Helper()
	if err := xml.Unmarshal([]byte(s), new(struct{})); err != nil {
		t.Errorf("%s is not well-formed: %v", name, err)
	}
}

// hasBadNumber reports whether s prints a NaN or an infinity.
func hasBadNumber(s string) bool { return regexp.MustCompile(`NaN|[+-]?Inf\b`).MatchString(s) }

func TestSVGAxis(t *testing.T) {
	tests := []struct {
		name     string
		values   []float64
		log      bool
		fromZero bool
		lo, hi   float64
		ticks    []float64
	}{
		{"linear from zero", []float64{120, 437}, false, true, 0, 500, []float64{0, 100, 200, 300, 400, 500}},
		{"linear not from zero", []float64{12, 19}, false, false, 12, 20, []float64{12, 14, 16, 18, 20}},
		{"linear small", []float64{0.013, 0.07}, false, true, 0, 0.08, []float64{0, 0.02, 0.04, 0.06, 0.08}},
		{"one value", []float64{5}, false, false, 2, 8, []float64{2, 3, 4, 5, 6, 7, 8}},
		{"nothing", nil, false, true, 0, 1, []float64{0, 0.2, 0.4, 0.6, 0.8, 1}},
		{"only NaN", []float64{math.NaN(), math.Inf(1)}, false, true, 0, 1, []float64{0, 0.2, 0.4, 0.6, 0.8, 1}},
		{"log two decades", []float64{3.2, 87}, true, false, 2, 100, []float64{2, 5, 10, 20, 50, 100}},
		{"log wide", []float64{0.8, 2900}, true, false, 0.5, 5000, []float64{1, 10, 100, 1000}},
		{"log ignores zero", []float64{0, -3, 4, 40}, true, false, 2, 50, []float64{2, 5, 10, 20, 50}},
		{"log one value", []float64{10}, true, false, 10, 20, []float64{10, 20}},
		{"log nothing", nil, true, false, 1, 10, []float64{1, 2, 5, 10}},
	}
	for _, tt := range tests {
		a := NewAxis("x", tt.values, tt.log, tt.fromZero)
		if math.Abs(a.Lo-tt.lo) > 1e-9 || math.Abs(a.Hi-tt.hi) > 1e-9 || !slices.EqualFunc(a.Ticks, tt.ticks, func(x, y float64) bool { return math.Abs(x-y) <= 1e-9 }) {
			t.Errorf("%s: axis %v..%v ticks %v; want %v..%v ticks %v", tt.name, a.Lo, a.Hi, a.Ticks, tt.lo, tt.hi, tt.ticks)
		}
	}
}

func TestSVGAxisAtAndLabels(t *testing.T) {
	lin := Axis{Lo: 0, Hi: 100, step: 20, p0: 50, p1: 250}
	log := Axis{Lo: 1, Hi: 100, log: true, p0: 300, p1: 100}
	tests := []struct {
		name string
		a    Axis
		v    float64
		px   float64
		ok   bool
	}{
		{"linear middle", lin, 50, 150, true},
		{"linear clamped", lin, 130, 250, true},
		{"linear NaN", lin, math.NaN(), 0, false},
		{"log middle", log, 10, 200, true},
		{"log bottom", log, 1, 300, true},
		{"log zero", log, 0, 0, false},
		{"log negative", log, -1, 0, false},
	}
	for _, tt := range tests {
		px, ok := tt.a.at(tt.v)
		if ok != tt.ok || math.Abs(px-tt.px) > 1e-9 {
			t.Errorf("%s: at(%v) = %v, %v; want %v, %v", tt.name, tt.v, px, ok, tt.px, tt.ok)
		}
	}
	labels := []struct {
		a    Axis
		v    float64
		want string
	}{
		{Axis{step: 0.2}, 0.6000000000000001, "0.6"},
		{Axis{step: 50}, 150, "150"},
		{Axis{step: 5000}, 20000, "20k"},
		{Axis{log: true}, 0.05, "0.05"},
		{Axis{log: true}, 2000, "2000"},
		{Axis{step: 1}, 0, "0"},
	}
	for _, l := range labels {
		if got := l.a.tickLabel(l.v); got != l.want {
			t.Errorf("tickLabel(%v) = %q, want %q", l.v, got, l.want)
		}
	}
}

func TestSVGPlotEscapesAndSkips(t *testing.T) {
	p := NewPlot(`<t>"&'`, 400, 300,
		NewAxis(`x <ms>`, []float64{1, 100}, true, false), NewAxis(`y & z`, []float64{0, 10}, false, true))
	p.Polyline([]float64{1, 10, 0, math.NaN(), 100}, []float64{1, 2, 3, 4, math.Inf(1)}, `re"d`, "", "<s>")
	p.Polyline([]float64{0}, []float64{1}, "blue", "", "nothing drawable")
	p.HLine(5, "red", "4 2", "<slo>")
	p.HLine(50, "red", "4 2", "off the axis")
	p.VLine(10, "red", "", "<v>", 1)
	p.Bars([]float64{1, 20}, []float64{2, 10}, []float64{3, 4}, "green") // the second is reversed
	p.note("<none>")
	p.Legend(strings.Repeat("long name ", 5)+"<end>", "blue", "2 2")
	out := p.SVG()
	checkXML(t, "plot", out)
	for _, raw := range []string{"<t>", "<ms>", "<s>", "<slo>", "<v>", "<none>", `re"d`, "off the axis", "nothing drawable", "<end>"} {
		if strings.Contains(out, raw) {
			t.Errorf("svg has %q", raw)
		}
	}
	for _, want := range []string{"&lt;t&gt;&#34;&amp;&#39;", "x &lt;ms&gt;", "y &amp; z", "&lt;slo&gt;", "long name long name…"} {
		if !strings.Contains(out, want) {
			t.Errorf("svg lacks %q", want)
		}
	}
	if n := strings.Count(out, "<polyline"); n != 1 {
		t.Errorf("%d polylines, want 1 (the other has no point the axes can show)", n)
	}
	if !strings.Contains(out, `points="64.0,233.4 148.0,210.8"`) {
		t.Errorf("polyline points are not the two drawable ones:\n%s", out)
	}
	if n := strings.Count(out, "<rect"); n != 2 { // the background and one bar
		t.Errorf("%d rects, want 2", n)
	}
	if hasBadNumber(out) {
		t.Error("svg has NaN or Inf")
	}
}

func TestScatter(t *testing.T) {
	tests := []struct {
		name   string
		series []Series
		hline  float64
		label  string
		want   []string
		not    []string
		circle int
	}{
		{
			name: "points, a ring and the SLO",
			series: []Series{
				{Name: "every <step>", Colour: "#ccc", X: []float64{1, 2, 3, math.NaN()}, Y: []float64{10, 20, 30, 40}},
				{Name: "", X: []float64{2}, Y: []float64{15}},
				{Name: "chosen", X: []float64{2}, Y: []float64{20}, Ring: true},
			},
			hline: 100, label: "SLO p95 100 ms",
			want:   []string{"every &lt;step&gt;", `r="8" fill="none"`, `stroke="#d62728" stroke-width="1.5" stroke-dasharray="8 4"`, "SLO p95 100 ms", `fill="#ff7f0e"`},
			circle: 5, // three drawable points, one unnamed, one ring
		},
		{
			name:   "log y over a wide range",
			series: []Series{{Name: "a", X: []float64{1, 2}, Y: []float64{1, 1000}}},
			want:   []string{">1000</text>", ">10</text>"},
			not:    []string{"stroke-dasharray"},
			circle: 2,
		},
		{name: "nothing", want: []string{"<svg", "</svg>"}, not: []string{"<circle"}},
	}
	for _, tt := range tests {
		out := Scatter("t", "x", "y", tt.series, tt.hline, tt.label)
		checkXML(t, tt.name, out)
		for _, w := range tt.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: lacks %q", tt.name, w)
			}
		}
		for _, w := range tt.not {
			if strings.Contains(out, w) {
				t.Errorf("%s: has %q", tt.name, w)
			}
		}
		if n := strings.Count(out, "<circle"); n != tt.circle {
			t.Errorf("%s: %d circles, want %d", tt.name, n, tt.circle)
		}
		if hasBadNumber(out) || !strings.HasSuffix(out, "</svg>\n") {
			t.Errorf("%s: NaN, Inf or no closing tag:\n%s", tt.name, out)
		}
	}
}
