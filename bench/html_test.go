package bench

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/ortserve/ortserve/bench/report"
)

// svgElements returns each <svg>…</svg> in an HTML page, in order.
func svgElements(page string) []string {
	var out []string
	for {
		i := strings.Index(page, "<svg")
		if i < 0 {
			return out
		}
		j := strings.Index(page[i:], "</svg>")
		if j < 0 {
			return append(out, page[i:])
		}
		out = append(out, page[i:i+j+len("</svg>")])
		page = page[i+j+len("</svg>"):]
	}
}

// checkXML fails t unless s is well-formed XML: SVG inline in HTML still has to be, for
// every tag to close and every piece of text to be escaped.
func checkXML(t *testing.T, name, s string) {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(s))
	d.Strict = true
	for {
		_, err := d.Token()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Errorf("%s is not well-formed: %v", name, err)
			return
		}
	}
}

func writeHTML(t *testing.T, r *Report) string {
	t.Helper()
	var b bytes.Buffer
	if err := WriteHTML(&b, r); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestWriteHTMLFixture(t *testing.T) {
	r := viewFixture()
	out := writeHTML(t, r)
	// BENCH_HTML_OUT=/tmp/bench-example.html go test -run TestWriteHTMLFixture ./bench/
	// writes the page to look at.
	if path := os.Getenv("BENCH_HTML_OUT"); path != "" {
		if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{
		"<!DOCTYPE html>", "<style>", "Benchmark of http://127.0.0.1:8080/predict",
		"sentiment/fp32", "sentiment/int8",
		"SLO p95 50 ms", // the SLO line on the latency chart
		"offered rate (requests/s)", "latency (ms)", "achieved (requests/s)", "batch size",
		"Little&#39;s Law at 400 rps", "bimodal latency at 400 rps",
		"Variance across 3 runs", "the generator used 85% of a CPU",
		`<tr class="fail">`, `<tr class="pass">`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("html report lacks %q", want)
		}
	}
	for _, banned := range []string{"<script", "http://fonts", "https://", "<link", "@import"} {
		if strings.Contains(out, banned) {
			t.Errorf("html report is not self-contained: has %q", banned)
		}
	}
	if hasBadNumber(out) {
		t.Error("html report prints NaN or Inf")
	}
	for _, tag := range []string{"table", "svg", "figure", "ul", "tr", "h2"} {
		if o, c := strings.Count(out, "<"+tag+">")+strings.Count(out, "<"+tag+" "), strings.Count(out, "</"+tag+">"); o != c {
			t.Errorf("<%s> opened %d times, closed %d", tag, o, c)
		}
	}

	svgs := svgElements(out)
	// Latency, throughput, one histogram per version, offline.
	if len(svgs) != 5 {
		t.Fatalf("%d charts, want 5", len(svgs))
	}
	for i, s := range svgs {
		checkXML(t, "chart "+string(rune('a'+i)), s)
	}
	latency := svgs[0]
	if n := strings.Count(latency, "<polyline"); n != 2*3 {
		t.Errorf("latency chart has %d polylines, want one per version per quantile (6)", n)
	}
	for _, v := range []string{"sentiment/fp32", "sentiment/int8"} {
		for _, q := range []string{"p50", "p95", "p99"} {
			if !strings.Contains(latency, "<title>"+v+" "+q+"</title>") {
				t.Errorf("latency chart has no %s %s line", v, q)
			}
		}
	}
	if !strings.Contains(latency, `stroke="`+report.SLOColour+`" stroke-width="1.5" stroke-dasharray="8 4"`) {
		t.Error("latency chart has no dashed SLO line")
	}
	if !strings.Contains(svgs[1], `stroke="#999" stroke-width="1.5" stroke-dasharray="3 3"`) {
		t.Error("throughput chart has no y = x line")
	}
	// fp32 passed up to 400 rps and int8 up to 800: the histograms stand at those steps.
	for i, want := range []string{"sentiment/fp32 at 400 rps", "sentiment/int8 at 800 rps"} {
		h := svgs[2+i]
		if !strings.Contains(h, want) || strings.Count(h, "<rect") < 10 {
			t.Errorf("histogram %d: want %q with bars, got %d rects", i, want, strings.Count(h, "<rect"))
		}
		for _, m := range []string{">p50 ", ">p95 ", ">p99 ", ">SLO<"} {
			if !strings.Contains(h, m) {
				t.Errorf("histogram %d lacks the %q marker", i, m)
			}
		}
	}
	if n := strings.Count(svgs[4], "<polyline"); n != 2 {
		t.Errorf("offline chart has %d lines, want 2", n)
	}
}

func TestWriteHTMLEscapes(t *testing.T) {
	r := viewFixture()
	evil := `<script>alert("x")</script>`
	r.Target = "http://a/?q=<b>&x"
	r.Runs[0].Versions[1].Name = evil
	r.Runs[0].Versions[1].Steps[2].ErrorSample = "<img src=x onerror=alert(1)>"
	r.Notes = append(r.Notes, "<i>note</i> & more")
	out := writeHTML(t, r)
	if strings.Contains(out, "<script") || strings.Contains(out, "<img") || strings.Contains(out, "<i>") || strings.Contains(out, "<b>") {
		t.Error("html report lets markup through unescaped")
	}
	if !strings.Contains(out, "&lt;script&gt;") {
		t.Error("the version name does not appear escaped")
	}
	for i, s := range svgElements(out) {
		checkXML(t, "chart "+string(rune('a'+i)), s)
		if i == 0 && !strings.Contains(s, "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt; p95") {
			t.Error("the latency chart does not name the escaped version")
		}
	}
}

func TestWriteHTMLClosedLoop(t *testing.T) {
	out := writeHTML(t, edgeReports()["closed"])
	for _, want := range []string{"concurrency (clients)", "Latency against concurrency", "closed loop: latency from actual send", "at 16 clients"} {
		if !strings.Contains(out, want) {
			t.Errorf("closed loop html lacks %q", want)
		}
	}
	svgs := svgElements(out)
	if len(svgs) < 2 {
		t.Fatalf("%d charts", len(svgs))
	}
	if strings.Contains(svgs[1], `stroke-dasharray="3 3"`) {
		t.Error("closed loop throughput chart draws y = x, which means nothing against clients")
	}
}

func TestWriteHTMLEdgeCharts(t *testing.T) {
	tests := []struct {
		name   string
		report *Report
		charts int
	}{
		{"empty", &Report{}, 0},
		{"no steps", edgeReports()["no steps"], 0},
		// One step with nothing measured: no latency, nothing achieved, no histogram to draw.
		{"one empty step", edgeReports()["one step"], 0},
		// No offline points, so no offline chart.
		{"no SLO", edgeReports()["no SLO"], 4},
		{"not finite", edgeReports()["not finite"], 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := writeHTML(t, tt.report)
			svgs := svgElements(out)
			if len(svgs) != tt.charts {
				t.Errorf("%d charts, want %d", len(svgs), tt.charts)
			}
			for i, s := range svgs {
				checkXML(t, "chart "+string(rune('a'+i)), s)
			}
			if hasBadNumber(out) {
				t.Error("prints NaN or Inf")
			}
		})
	}
}

func TestHTMLOperatingStep(t *testing.T) {
	yes, no := true, false
	tests := []struct {
		name   string
		steps  []Step
		closed bool
		want   int
		passed bool
	}{
		{"none", nil, false, -1, false},
		{"highest passing", []Step{{Offered: 100, Pass: &yes}, {Offered: 400, Pass: &yes}, {Offered: 200, Pass: &yes}, {Offered: 800, Pass: &no}}, false, 1, true},
		{"none passed: lowest", []Step{{Offered: 400, Pass: &no}, {Offered: 100, Pass: &no}}, false, 1, false},
		{"no SLO: lowest", []Step{{Offered: 400}, {Offered: 100}, {Offered: 50}}, false, 2, false},
		{"closed loop by clients", []Step{{Concurrency: 4, Pass: &yes}, {Concurrency: 16, Pass: &yes}, {Concurrency: 64, Pass: &no}}, true, 1, true},
	}
	for _, tt := range tests {
		got, passed := operatingStep(tt.steps, tt.closed)
		if got != tt.want || passed != tt.passed {
			t.Errorf("%s: operatingStep = %d, %v; want %d, %v", tt.name, got, passed, tt.want, tt.passed)
		}
	}
}

func TestHTMLBinEdges(t *testing.T) {
	tests := []struct {
		name     string
		bins     []Bin
		los, his []float64
	}{
		{"log spaced", []Bin{{UpTo: 2}, {UpTo: 4}, {UpTo: 8}}, []float64{1, 2, 4}, []float64{2, 4, 8}},
		{"one bin", []Bin{{UpTo: 10}}, []float64{5}, []float64{10}},
		{"zero edge", []Bin{{UpTo: 0}, {UpTo: 4}}, []float64{0, 2}, []float64{0, 4}},
	}
	for _, tt := range tests {
		los, his := binEdges(tt.bins)
		if !equalFloats(los, tt.los) || !equalFloats(his, tt.his) {
			t.Errorf("%s: binEdges = %v, %v; want %v, %v", tt.name, los, his, tt.los, tt.his)
		}
	}
}

func equalFloats(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if d := a[i] - b[i]; d > 1e-9 || d < -1e-9 {
			return false
		}
	}
	return true
}
