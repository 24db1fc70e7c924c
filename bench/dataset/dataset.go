// Package dataset reads texts, and the columns that go with them, from a file in one of the
// formats text data is kept in: plain text with one text per line, CSV or TSV with a header
// row, and JSON Lines. bench reads its workloads with it, and gate its labeled datasets.
//
// Errors name the line they are about, as "data.csv:3" or, without a file name, "line 3",
// and say what to do; they carry no package prefix, for the caller to add its own.
package dataset

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxLine is the longest line, in bytes, of a text, TSV or JSON Lines file. CSV records,
// which may span lines, have no limit.
const MaxLine = 1 << 20

// Format is a file format.
type Format string

// The formats Read reads.
const (
	// TXT is one text per line, with no other column.
	TXT Format = "txt"
	// CSV has a header row naming the columns and fields quoted as RFC 4180 says.
	CSV Format = "csv"
	// TSV has a header row and fields split at every tab, with no quoting, as GLUE's files
	// are: a field cannot hold a tab or a line break.
	TSV Format = "tsv"
	// JSONL is one JSON object per line; its fields are the columns.
	JSONL Format = "jsonl"
)

// ParseFormat reads a format's name in any case; "ndjson" is JSONL. It returns "" for a
// name it does not know.
func ParseFormat(name string) Format {
	switch f := Format(strings.ToLower(name)); f {
	case TXT, CSV, TSV, JSONL:
		return f
	case "ndjson":
		return JSONL
	}
	return ""
}

// FormatOf is the format path's extension names (.txt, .csv, .tsv, .jsonl or .ndjson, in
// any case), or "" for any other.
func FormatOf(path string) Format {
	return ParseFormat(strings.TrimPrefix(filepath.Ext(path), "."))
}

// Column is a column of a CSV or TSV file, or a field of a JSON Lines file, to read.
type Column struct {
	// Name is the column's header or the field's name.
	Name string
	// Role says what the column holds ("text", "label"), and Flag the flag that names it
	// ("--text-column"), for the error that says the file lacks it.
	Role, Flag string
	// Optional lets a file without the column be read, its values "". In JSON Lines the
	// first object decides: if it has the field every object must, and if not none may.
	Optional bool
	// Scalar lets a JSON value be a number or a boolean as well as a string: it reads as
	// its text, and an integral number as the integer, so that 1 and 1.0 both read "1".
	Scalar bool
}

// Options says what to read, and from what.
type Options struct {
	Format Format
	// Columns are the columns to read. A text file has one text per line and nothing
	// else: it fills the first column, and any other must be Optional.
	Columns []Column
	// Name is the file, for errors: "data.csv:3" rather than "line 3".
	Name string
	// Ragged lets a CSV or TSV row have more or fewer fields than the header, as long as it
	// reaches every column read. Without it a row of another length is an error, which
	// catches a field that should have been quoted.
	Ragged bool
}

// Record is one row or object of a file.
type Record struct {
	// Line is the line the record starts on, from 1.
	Line int
	// Values are the values of Options.Columns, in their order.
	Values []string
}

// Read reads the records of r. has[i] says whether the file has Columns[i]: false only for
// an Optional column it lacks, whose values are "". Blank lines are skipped, and a UTF-8
// byte order mark at the start is dropped. Values are checked to be UTF-8 but kept as
// written: a blank value is the caller's to judge.
func Read(r io.Reader, o Options) (records []Record, has []bool, err error) {
	if len(o.Columns) == 0 {
		return nil, nil, errors.New("no column to read")
	}
	switch o.Format {
	case TXT:
		return readTXT(r, o)
	case CSV:
		return readTable(newCSVRows(r, o.Name), o, "comma", "quote fields that contain commas")
	case TSV:
		return readTable(&tsvRows{lines: newLines(r, o.Name)}, o, "tab", "tabs cannot appear inside a .tsv field: write the file as .csv or .jsonl")
	case JSONL:
		return readJSONL(r, o)
	}
	return nil, nil, fmt.Errorf("unknown format %q: use txt, csv, tsv or jsonl", o.Format)
}

// At locates a line for an error: "data.csv:3" in a named file, "line 3" without a name.
func At(name string, line int) string {
	if name == "" {
		return fmt.Sprintf("line %d", line)
	}
	return fmt.Sprintf("%s:%d", name, line)
}

// bom is the UTF-8 byte order mark that some editors and spreadsheets write at the start of
// a file; it is not part of the first line's text or the first column's name.
const bom = "\ufeff"

// lines yields the non-blank lines of a file, without their line endings.
type lines struct {
	sc   *bufio.Scanner
	name string
	n    int
}

func newLines(r io.Reader, name string) *lines {
	sc := bufio.NewScanner(r)
	// +2 leaves room for the \r\n after a line of MaxLine bytes.
	sc.Buffer(make([]byte, 0, 64<<10), MaxLine+2)
	return &lines{sc: sc, name: name}
}

// next returns the next non-blank line and its number, io.EOF after the last. A line that
// is not UTF-8 or is longer than MaxLine is an error.
func (l *lines) next() ([]byte, int, error) {
	for l.sc.Scan() {
		l.n++
		line := l.sc.Bytes()
		if l.n == 1 {
			line = bytes.TrimPrefix(line, []byte(bom))
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if !utf8.Valid(line) {
			return nil, 0, fmt.Errorf("%s: not valid UTF-8: convert the file to UTF-8", At(l.name, l.n))
		}
		return line, l.n, nil
	}
	if err := l.sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, 0, fmt.Errorf("%s: longer than %d bytes: split it, or shorten it", At(l.name, l.n+1), MaxLine)
		}
		return nil, 0, err
	}
	return nil, 0, io.EOF
}

// readTXT reads one text per line.
func readTXT(r io.Reader, o Options) ([]Record, []bool, error) {
	has := make([]bool, len(o.Columns))
	has[0] = true
	for _, c := range o.Columns[1:] {
		if !c.Optional {
			return nil, nil, fmt.Errorf("a text file has one text per line and no %q column: use .csv, .tsv or .jsonl", c.Name)
		}
	}
	var records []Record
	ls := newLines(r, o.Name)
	for {
		line, n, err := ls.next()
		if errors.Is(err, io.EOF) {
			return records, has, nil
		}
		if err != nil {
			return nil, nil, err
		}
		values := make([]string, len(o.Columns))
		values[0] = string(line)
		records = append(records, Record{Line: n, Values: values})
	}
}

// rows yields the rows of a CSV or TSV file.
type rows interface {
	// next returns the next row, io.EOF after the last.
	next() ([]string, error)
	// line is the line field i of the row next returned starts on.
	line(i int) int
}

// csvRows reads quoted CSV. Rows may differ in length here; readTable checks them against
// the header with a clearer message than encoding/csv's.
type csvRows struct {
	cr   *csv.Reader
	name string
}

func newCSVRows(r io.Reader, name string) *csvRows {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	return &csvRows{cr: cr, name: name}
}

func (c *csvRows) next() ([]string, error) {
	rec, err := c.cr.Read()
	if err != nil {
		if pe, ok := errors.AsType[*csv.ParseError](err); ok {
			// An unclosed quote is only noticed lines later: point at the start.
			where := At(c.name, pe.StartLine)
			if pe.Line != pe.StartLine {
				where += fmt.Sprintf(" (the record runs to line %d)", pe.Line)
			}
			return nil, fmt.Errorf("%s: %s", where, csvProblem(pe.Err))
		}
		return nil, err
	}
	return rec, nil
}

func (c *csvRows) line(i int) int {
	line, _ := c.cr.FieldPos(i)
	return line
}

// csvProblem says what a CSV syntax error means for someone holding the file.
func csvProblem(err error) string {
	switch {
	case errors.Is(err, csv.ErrBareQuote):
		return `a '"' inside an unquoted field: quote the whole field and double the quotes in it ("say ""hi""")`
	case errors.Is(err, csv.ErrQuote):
		return `a quoted field is not closed, or has text after its closing '"': double the quotes inside quoted fields`
	default:
		return err.Error()
	}
}

// tsvRows reads tab-separated lines without quoting.
type tsvRows struct {
	lines *lines
	n     int
}

func (t *tsvRows) next() ([]string, error) {
	line, n, err := t.lines.next()
	if err != nil {
		return nil, err
	}
	t.n = n
	return strings.Split(string(line), "\t"), nil
}

func (t *tsvRows) line(int) int { return t.n }

// readTable reads a CSV or TSV file whose first row names the columns. sep names the
// separator, and fix says what to do about a row of the wrong length.
func readTable(rs rows, o Options, sep, fix string) ([]Record, []bool, error) {
	header, err := rs.next()
	if errors.Is(err, io.EOF) {
		empty := "empty file"
		if o.Name != "" {
			empty = o.Name + " is empty"
		}
		return nil, nil, fmt.Errorf("%s: the first line must be a header row naming the columns", empty)
	}
	if err != nil {
		return nil, nil, err
	}
	hline := rs.line(0)
	header[0] = strings.TrimPrefix(header[0], bom)
	for i := range header {
		header[i] = strings.TrimSpace(header[i])
	}
	at := make([]int, len(o.Columns))
	has := make([]bool, len(o.Columns))
	for i, c := range o.Columns {
		at[i] = slices.Index(header, c.Name)
		switch {
		case at[i] < 0 && !c.Optional:
			return nil, nil, fmt.Errorf("%s: no %q column in the header (columns: %s): %s", At(o.Name, hline), c.Name, quoteList(header), c.hint("column"))
		case at[i] >= 0 && slices.Contains(header[at[i]+1:], c.Name):
			return nil, nil, fmt.Errorf("%s: the header has two %q columns: rename one", At(o.Name, hline), c.Name)
		}
		has[i] = at[i] >= 0
	}
	var records []Record
	for {
		row, err := rs.next()
		if errors.Is(err, io.EOF) {
			return records, has, nil
		}
		if err != nil {
			return nil, nil, err
		}
		line := rs.line(0)
		if !o.Ragged && len(row) != len(header) {
			return nil, nil, fmt.Errorf("%s: %d %s-separated fields but the header has %d: %s", At(o.Name, line), len(row), sep, len(header), fix)
		}
		values := make([]string, len(o.Columns))
		for i, j := range at {
			switch {
			case j < 0:
				continue
			case j >= len(row):
				return nil, nil, fmt.Errorf("%s: the row ends before column %q (field %d of the header): give every row a value for it", At(o.Name, line), o.Columns[i].Name, j+1)
			case !utf8.ValidString(row[j]):
				return nil, nil, fmt.Errorf("%s: not valid UTF-8: convert the file to UTF-8", At(o.Name, rs.line(j)))
			}
			values[i] = row[j]
		}
		records = append(records, Record{Line: line, Values: values})
	}
}

// hint says how to name the column, a "column" or a "field": "name the text column with
// --text-column".
func (c Column) hint(what string) string {
	s := strings.Join(strings.Fields("name the "+c.Role+" "+what), " ")
	if c.Flag != "" {
		s += " with " + c.Flag
	}
	return s
}

// readJSONL reads one JSON object per line.
func readJSONL(r io.Reader, o Options) ([]Record, []bool, error) {
	has := make([]bool, len(o.Columns))
	var (
		records []Record
		first   int // the line of the first object, which decides the optional fields
	)
	ls := newLines(r, o.Name)
	for {
		b, line, err := ls.next()
		if errors.Is(err, io.EOF) {
			return records, has, nil
		}
		if err != nil {
			return nil, nil, err
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(b, &obj); err != nil || obj == nil {
			what := "not valid JSON"
			if json.Valid(b) {
				what = jsonKind(b) + ", not an object"
			} else if err != nil {
				what += " (" + strings.TrimPrefix(err.Error(), "json: ") + ")"
			}
			return nil, nil, fmt.Errorf("%s: %s: write one JSON object per line, like %s", At(o.Name, line), what, example(o.Columns))
		}
		values := make([]string, len(o.Columns))
		for i, c := range o.Columns {
			raw, ok := obj[c.Name]
			if first == 0 {
				has[i] = ok || !c.Optional
			}
			switch {
			case has[i] && !ok:
				return nil, nil, fmt.Errorf("%s: no %q field (fields: %s): %s", At(o.Name, line), c.Name, quoteList(slices.Sorted(maps.Keys(obj))), c.hint("field"))
			case !has[i] && ok:
				return nil, nil, fmt.Errorf("%s: has a %q field but line %d has none: give every line a %s or none", At(o.Name, line), c.Name, first, c.Role)
			case ok:
				if values[i], err = jsonValue(raw, c.Scalar); err != nil {
					return nil, nil, fmt.Errorf("%s: the %q field %w", At(o.Name, line), c.Name, err)
				}
			}
		}
		if first == 0 {
			first = line
		}
		records = append(records, Record{Line: line, Values: values})
	}
}

// example is a JSON object with the columns as fields, for messages.
func example(cols []Column) string {
	fields := make([]string, len(cols))
	for i, c := range cols {
		fields[i] = fmt.Sprintf("%q: \"...\"", c.Name)
	}
	return "{" + strings.Join(fields, ", ") + "}"
}

// jsonValue reads a field's value: a string, or when scalar also a number or a boolean.
// An integral number reads as the integer.
func jsonValue(raw json.RawMessage, scalar bool) (string, error) {
	if !scalar {
		var s string
		if jsonKind(raw) != "a string" || json.Unmarshal(raw, &s) != nil {
			return "", fmt.Errorf("is %s, not a string", jsonKind(raw))
		}
		return s, nil
	}
	var v any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		return "", err
	}
	switch v := v.(type) {
	case string:
		return v, nil
	case bool:
		return strconv.FormatBool(v), nil
	case json.Number:
		if i, err := v.Int64(); err == nil {
			return strconv.FormatInt(i, 10), nil
		}
		if f, err := v.Float64(); err == nil && f == math.Trunc(f) && math.Abs(f) < 1<<53 {
			return strconv.FormatInt(int64(f), 10), nil
		}
		return v.String(), nil
	}
	return "", fmt.Errorf("is %s: write it as a string or a number", jsonKind(raw))
}

// jsonKind names the JSON type of a valid JSON value, for messages.
func jsonKind(raw []byte) string {
	switch b := bytes.TrimSpace(raw); {
	case len(b) == 0:
		return "nothing"
	case b[0] == '{':
		return "an object"
	case b[0] == '[':
		return "an array"
	case b[0] == '"':
		return "a string"
	case b[0] == 'n':
		return "null"
	case b[0] == 't' || b[0] == 'f':
		return "a boolean"
	default:
		return "a number"
	}
}

// quoteList formats names as a comma-separated list of quoted strings.
func quoteList(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	return strings.Join(q, ", ")
}
