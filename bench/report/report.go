// Package report holds what the reports of bench, gate and tune are laid out with: number
// formats, a sanitiser and a Markdown escaper for text from outside, tables written as
// aligned text or as Markdown, an SVG plot, and indented JSON. It knows nothing of what the
// reports measure; each caller reads its own results into facts and tables and hands them
// here to be written.
package report

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Fact is one line of a report's header: a label and its value.
type Fact struct {
	Label, Value string
}

// Table is a table of display strings. Head may be empty, for a table of facts; Right, when
// set, marks the columns aligned right (numbers).
type Table struct {
	Head  []string
	Rows  [][]string
	Right []bool
}

// FactTable is facts as a two-column table without a head.
func FactTable(facts []Fact) Table {
	t := Table{Rows: make([][]string, len(facts))}
	for i, f := range facts {
		t.Rows[i] = []string{f.Label, f.Value}
	}
	return t
}

// right reports whether column j is aligned right.
func (t Table) right(j int) bool { return j < len(t.Right) && t.Right[j] }

// lines returns the head, if any, then the rows.
func (t Table) lines() [][]string {
	if len(t.Head) == 0 {
		return t.Rows
	}
	return append([][]string{t.Head}, t.Rows...)
}

// Clean keeps s on one line and free of control characters, so that a label or a name from
// outside cannot move the cursor of the terminal that shows it, or break a table row: tabs
// and line breaks become spaces, any other control character U+FFFD.
func Clean(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r == '\t' || r == '\n' || r == '\r':
			return ' '
		case unicode.IsControl(r):
			return '�'
		}
		return r
	}, s)
}

// mdEscaper escapes what would end a table cell or turn text into Markdown or HTML markup.
var mdEscaper = strings.NewReplacer(`\`, `\\`, "|", `\|`, "*", `\*`, "_", `\_`, "`", "\\`",
	"<", "&lt;", ">", "&gt;", "[", `\[`, "]", `\]`)

// Escape makes s safe to put in Markdown, in a table cell or in running text: Clean, then
// escape the characters that are markup.
func Escape(s string) string { return mdEscaper.Replace(Clean(s)) }

// Printer writes formatted text and keeps the first write error, so that a view can print
// freely and check once, with Err.
type Printer struct {
	w   io.Writer
	err error
}

// NewPrinter returns a Printer writing to w.
func NewPrinter(w io.Writer) *Printer { return &Printer{w: w} }

// Printf writes as fmt.Fprintf does, unless an earlier write failed.
func (p *Printer) Printf(format string, args ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format, args...)
	}
}

// Err is the first write error, or nil.
func (p *Printer) Err() error { return p.err }

// Text writes t for a terminal: each line indented, columns two spaces apart, each as wide
// as its widest cell in characters, aligned left (the last without trailing blanks) or
// right. Cells are cleaned first.
func (p *Printer) Text(t Table, indent string) {
	lines := t.lines()
	var widths []int
	for _, row := range lines {
		for j, cell := range row {
			if j == len(widths) {
				widths = append(widths, 0)
			}
			widths[j] = max(widths[j], utf8.RuneCountInString(Clean(cell)))
		}
	}
	for _, row := range lines {
		var b strings.Builder
		b.WriteString(indent)
		for j, cell := range row {
			cell = Clean(cell)
			pad := strings.Repeat(" ", widths[j]-utf8.RuneCountInString(cell))
			switch {
			case t.right(j):
				b.WriteString(pad + cell)
			case j == len(row)-1:
				b.WriteString(cell)
			default:
				b.WriteString(cell + pad)
			}
			if j < len(row)-1 {
				b.WriteString("  ")
			}
		}
		p.Printf("%s\n", b.String())
	}
}

// Markdown writes t as a GitHub Markdown table, every cell escaped; columns marked Right
// are aligned right. A table without a head writes nothing.
func (p *Printer) Markdown(t Table) {
	if len(t.Head) == 0 {
		return
	}
	row := func(cells []string) {
		var b strings.Builder
		b.WriteString("|")
		for _, c := range cells {
			b.WriteString(" " + Escape(c) + " |")
		}
		p.Printf("%s\n", b.String())
	}
	row(t.Head)
	var b strings.Builder
	b.WriteString("|")
	for j := range t.Head {
		if t.right(j) {
			b.WriteString("---:|")
		} else {
			b.WriteString("---|")
		}
	}
	p.Printf("%s\n", b.String())
	for _, r := range t.Rows {
		row(r)
	}
}

// Notes writes notes for a terminal under the heading "Notes", an indented item each;
// nothing when there are none.
func (p *Printer) Notes(notes []string) {
	if len(notes) == 0 {
		return
	}
	p.Printf("\nNotes\n")
	for _, n := range notes {
		p.Printf("  - %s\n", n)
	}
}

// MarkdownNotes writes notes as a Markdown list under heading ("## Notes"), each escaped;
// nothing when there are none.
func (p *Printer) MarkdownNotes(heading string, notes []string) {
	if len(notes) == 0 {
		return
	}
	p.Printf("\n%s\n\n", heading)
	for _, n := range notes {
		p.Printf("- %s\n", Escape(n))
	}
}

// WriteJSON writes v as JSON indented by two spaces, the form the reports are read back
// from. Nothing is written when v cannot be encoded (a NaN, say). The error is json's or
// w's, for the caller to wrap.
func WriteJSON(w io.Writer, v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	_, err := w.Write(buf.Bytes())
	return err
}
