// Package doccheck reads the project's Markdown docs for what a test can hold them to: the
// command lines in their code, their links and #anchors, and the output an example shows.
// It only reads and compares; cmd/server's tests decide which docs, commands and servers.
//
// Markdown is parsed with goldmark, as CommonMark with GitHub's tables: fenced blocks, code
// spans (which may run over lines), links and headings are then nodes with positions, not
// patterns to guess at. Raw HTML (<a href>, <img src>) is not read.
package doccheck

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/text"
)

// Doc is what one Markdown file holds that the checks read. Every line number is 1-based.
type Doc struct {
	Path     string // as the messages name it, relative to the repository's root
	Headings []Heading
	Blocks   []Block
	Spans    []Span
	Links    []Link
}

// Heading is a heading with its GitHub anchor (Slug).
type Heading struct {
	Level, Line int
	Text, Slug  string
}

// Block is a fenced code block.
type Block struct {
	Lang  string
	Line  int // the line of its first content line
	Lines []string
	// AfterBlock says it follows another fenced block with nothing between: the output
	// shown for that block's last command.
	AfterBlock bool
}

// Span is an inline code span, its line endings turned into spaces as Markdown renders it.
type Span struct {
	Line int
	Text string
}

// Link is a link's or an image's destination.
type Link struct {
	Line int
	Dest string
}

// Read reads and parses root/rel; the Doc's Path is rel.
func Read(root, rel string) (*Doc, error) {
	src, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		return nil, err
	}
	return Parse(rel, src), nil
}

// Parse parses src, the Markdown file named path.
func Parse(path string, src []byte) *Doc {
	md := goldmark.New(goldmark.WithExtensions(extension.Table))
	root := md.Parser().Parse(text.NewReader(src))
	d := &Doc{Path: path}
	lines := newLineIndex(src)
	slugs := map[string]int{}
	_ = ast.Walk(root, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch n := n.(type) {
		case *ast.Heading:
			t := plainText(n, src)
			d.Headings = append(d.Headings, Heading{Level: n.Level, Line: lines.at(n.Pos()), Text: t, Slug: uniqueSlug(slugs, t)})
		case *ast.FencedCodeBlock:
			b := Block{Lang: string(n.Language(src)), Line: lines.at(n.Pos())}
			for i := range n.Lines().Len() {
				seg := n.Lines().At(i)
				if i == 0 {
					b.Line = lines.at(seg.Start)
				}
				b.Lines = append(b.Lines, strings.TrimRight(string(seg.Value(src)), "\n"))
			}
			_, b.AfterBlock = n.PreviousSibling().(*ast.FencedCodeBlock)
			d.Blocks = append(d.Blocks, b)
		case *ast.CodeSpan:
			d.Spans = append(d.Spans, Span{Line: lines.at(n.Pos()), Text: strings.ReplaceAll(plainText(n, src), "\n", " ")})
			return ast.WalkSkipChildren, nil
		case *ast.Link:
			d.Links = append(d.Links, Link{Line: lines.at(n.Pos()), Dest: string(n.Destination)})
		case *ast.Image:
			d.Links = append(d.Links, Link{Line: lines.at(n.Pos()), Dest: string(n.Destination)})
		}
		return ast.WalkContinue, nil
	})
	return d
}

// Section is the part of d under the first heading whose text contains title, any case, up
// to the next heading of the same level or higher; false if no heading has it.
func (d *Doc) Section(title string) (*Doc, bool) {
	from, to := -1, math.MaxInt
	for i, h := range d.Headings {
		if !strings.Contains(strings.ToLower(h.Text), strings.ToLower(title)) {
			continue
		}
		from = h.Line
		for _, next := range d.Headings[i+1:] {
			if next.Level <= h.Level {
				to = next.Line
				break
			}
		}
		break
	}
	if from < 0 {
		return nil, false
	}
	in := func(line int) bool { return line > from && line < to }
	return &Doc{
		Path:     d.Path,
		Headings: slices.DeleteFunc(slices.Clone(d.Headings), func(h Heading) bool { return !in(h.Line) }),
		Blocks:   slices.DeleteFunc(slices.Clone(d.Blocks), func(b Block) bool { return !in(b.Line) }),
		Spans:    slices.DeleteFunc(slices.Clone(d.Spans), func(s Span) bool { return !in(s.Line) }),
		Links:    slices.DeleteFunc(slices.Clone(d.Links), func(l Link) bool { return !in(l.Line) }),
	}, true
}

// plainText is n's text as it renders, without markup: what GitHub makes a heading's anchor
// from.
func plainText(n ast.Node, src []byte) string {
	var b strings.Builder
	for c := n.FirstChild(); c != nil; c = c.NextSibling() {
		switch c := c.(type) {
		case *ast.Text:
			b.Write(c.Value(src))
			if c.SoftLineBreak() {
				b.WriteByte('\n')
			}
		case *ast.String:
			b.Write(c.Value)
		default:
			b.WriteString(plainText(c, src))
		}
	}
	return b.String()
}

// Slug is GitHub's anchor for a heading's text: lower case, every character but letters,
// digits, marks, '-', '_' and spaces dropped, each space a '-'.
func Slug(heading string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r == ' ':
			return '-'
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.IsMark(r):
			return unicode.ToLower(r)
		}
		return -1
	}, heading)
}

// uniqueSlug is Slug, with "-1", "-2", ... after a slug the doc has had before, as GitHub
// numbers repeated headings.
func uniqueSlug(seen map[string]int, heading string) string {
	base := Slug(heading)
	s := base
	for {
		if _, ok := seen[s]; !ok {
			break
		}
		seen[base]++
		s = base + "-" + strconv.Itoa(seen[base])
	}
	seen[s] = 0
	return s
}

// lineIndex turns byte offsets into line numbers.
type lineIndex []int // the offset each line starts at

func newLineIndex(src []byte) lineIndex {
	idx := lineIndex{0}
	for i, c := range src {
		if c == '\n' {
			idx = append(idx, i+1)
		}
	}
	return idx
}

func (l lineIndex) at(offset int) int {
	if offset < 0 {
		return 0
	}
	return sort.SearchInts(l, offset+1)
}
