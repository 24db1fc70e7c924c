package report_test

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/ortserve/ortserve/bench/report"
)

func TestCleanEscape(t *testing.T) {
	tests := []struct {
		in, clean, escaped string
	}{
		{"plain text", "plain text", "plain text"},
		{"two\nlines\r\tand tab", "two lines  and tab", "two lines  and tab"},
		{"bell\a esc\x1b[2J", "bell� esc�[2J", `bell� esc�\[2J`},
		{"a | b", "a | b", `a \| b`},
		{"<b>x</b> & y", "<b>x</b> & y", "&lt;b&gt;x&lt;/b&gt; & y"},
		{`*em* _em_ ` + "`code`" + ` [l](u) \`, `*em* _em_ ` + "`code`" + ` [l](u) \`, `\*em\* \_em\_ ` + "\\`code\\`" + ` \[l\](u) \\`},
		{"p95 ≤ 50 ms, 2.00×, ✓", "p95 ≤ 50 ms, 2.00×, ✓", "p95 ≤ 50 ms, 2.00×, ✓"},
	}
	for _, tt := range tests {
		if got := report.Clean(tt.in); got != tt.clean {
			t.Errorf("Clean(%q) = %q, want %q", tt.in, got, tt.clean)
		}
		if got := report.Escape(tt.in); got != tt.escaped {
			t.Errorf("Escape(%q) = %q, want %q", tt.in, got, tt.escaped)
		}
	}
}

func TestPrinterText(t *testing.T) {
	tests := []struct {
		name   string
		t      report.Table
		indent string
		want   string
	}{
		{"facts", report.FactTable([]report.Fact{{Label: "Target", Value: "http://x"}, {Label: "SLO", Value: "p95 ≤ 50 ms"}}), "",
			"Target  http://x\nSLO     p95 ≤ 50 ms\n"},
		{"left, last without trailing blanks", report.Table{Head: []string{"rate", "p50 ms", "why"}, Rows: [][]string{{"400", "11.2", "ok"}, {"1600", "880", "over the SLO"}}}, "  ",
			"  rate  p50 ms  why\n  400   11.2    ok\n  1600  880     over the SLO\n"},
		{"right aligned", report.Table{Head: []string{"class", "n", "F1"}, Rows: [][]string{{"negative", "10", "0.900"}, {"pos", "9", "1"}}, Right: []bool{false, true, true}}, "  ",
			"  class      n     F1\n  negative  10  0.900\n  pos        9      1\n"},
		{"characters, not bytes, and cleaned cells", report.Table{Rows: [][]string{{"é\tè", "x"}, {"abcd", "y\nz"}}}, "",
			"é è   x\nabcd  y z\n"},
		{"empty last cell keeps the padding before it", report.Table{Rows: [][]string{{"a", ""}, {"bbb", "c"}}}, "",
			"a    \nbbb  c\n"},
	}
	for _, tt := range tests {
		var b bytes.Buffer
		p := report.NewPrinter(&b)
		p.Text(tt.t, tt.indent)
		if err := p.Err(); err != nil {
			t.Fatal(err)
		}
		if b.String() != tt.want {
			t.Errorf("%s:\n%s\nwant\n%s", tt.name, b.String(), tt.want)
		}
	}
}

func TestPrinterMarkdown(t *testing.T) {
	tests := []struct {
		name string
		t    report.Table
		want string
	}{
		{"left", report.Table{Head: []string{"a", "b"}, Rows: [][]string{{"x|y", "<z>"}}},
			"| a | b |\n|---|---|\n| x\\|y | &lt;z&gt; |\n"},
		{"right", report.Table{Head: []string{"name", "n"}, Rows: [][]string{{"int8_x", "3"}}, Right: []bool{false, true}},
			"| name | n |\n|---|---:|\n| int8\\_x | 3 |\n"},
		{"no head", report.Table{Rows: [][]string{{"a"}}}, ""},
	}
	for _, tt := range tests {
		var b bytes.Buffer
		p := report.NewPrinter(&b)
		p.Markdown(tt.t)
		if b.String() != tt.want || p.Err() != nil {
			t.Errorf("%s: %q, %v; want %q", tt.name, b.String(), p.Err(), tt.want)
		}
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestPrinterKeepsFirstError(t *testing.T) {
	p := report.NewPrinter(failWriter{})
	p.Printf("a")
	p.Text(report.Table{Rows: [][]string{{"b"}}}, "")
	if err := p.Err(); err == nil || err.Error() != "disk full" {
		t.Errorf("Err() = %v, want disk full", err)
	}
}

func TestWriteJSON(t *testing.T) {
	tests := []struct {
		name string
		v    any
		want string
		err  string
	}{
		{name: "indented", v: map[string]any{"a": []int{1, 2}, "b": "x"}, want: "{\n  \"a\": [\n    1,\n    2\n  ],\n  \"b\": \"x\"\n}\n"},
		{name: "NaN writes nothing", v: map[string]float64{"x": math.NaN()}, want: "", err: "json: unsupported value: NaN"},
	}
	for _, tt := range tests {
		var b bytes.Buffer
		err := report.WriteJSON(&b, tt.v)
		if b.String() != tt.want || (err == nil) != (tt.err == "") || (err != nil && err.Error() != tt.err) {
			t.Errorf("%s: %q, %v; want %q, %q", tt.name, b.String(), err, tt.want, tt.err)
		}
	}
	if err := report.WriteJSON(failWriter{}, 1); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("write error: %v", err)
	}
}

func TestPrinterNotes(t *testing.T) {
	tests := []struct {
		name  string
		notes []string
		text  string
		md    string
	}{
		{"none", nil, "", ""},
		{"two", []string{"first", "a | b_c"}, "\nNotes\n  - first\n  - a | b_c\n", "\n## Notes\n\n- first\n- a \\| b\\_c\n"},
	}
	for _, tt := range tests {
		var text, md bytes.Buffer
		report.NewPrinter(&text).Notes(tt.notes)
		report.NewPrinter(&md).MarkdownNotes("## Notes", tt.notes)
		if text.String() != tt.text || md.String() != tt.md {
			t.Errorf("%s: %q and %q, want %q and %q", tt.name, text.String(), md.String(), tt.text, tt.md)
		}
	}
}
