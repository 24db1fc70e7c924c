package bench

import (
	"bufio"
	"bytes"
	_ "embed"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"
)

// MaxLine is the longest line, in bytes, that ParseTXT and ParseJSONL accept.
const MaxLine = 1 << 20

// DefaultColumn is the CSV/TSV column and JSON Lines field that holds the text when none is named.
const DefaultColumn = "text"

// builtIn is the built-in workload: one text per line, as ParseTXT reads it.
//
//go:embed sentences.txt
var builtIn string

// Workload is the texts a bench sends. Request i carries `inputs` consecutive texts,
// wrapping around at the end, so any number of requests can be drawn from any number of texts.
type Workload struct {
	Source string   // file path, or "built-in"
	Texts  []string // never empty in a Workload from LoadWorkload or BuiltIn
}

// BuiltIn returns the built-in workload: about two hundred English texts of the kind a
// search box, a support chat or a review classifier receives, mostly one sentence, some
// short queries and some paragraph-long reviews. Each call returns a new Workload.
func BuiltIn() *Workload {
	texts, err := ParseTXT(strings.NewReader(builtIn))
	if err != nil || len(texts) == 0 {
		// sentences.txt is compiled in; a broken one is a programmer error the tests catch.
		panic(fmt.Sprintf("bench: built-in sentences.txt: %d texts, %v", len(texts), err))
	}
	return &Workload{Source: "built-in", Texts: texts}
}

// Request returns the texts of request i: texts i×inputs through i×inputs+inputs−1, each
// index taken modulo len(w.Texts). The slice is new and belongs to the caller. Request returns
// nil if the workload has no texts or inputs < 1. It is safe for concurrent use.
func (w *Workload) Request(i, inputs int) []string {
	n := len(w.Texts)
	if n == 0 || inputs < 1 {
		return nil
	}
	// Reduce before multiplying so that i×inputs cannot overflow; ((a mod n)+n) mod n keeps
	// a negative i in range too.
	start := ((i%n + n) % n) * (inputs % n) % n
	out := make([]string, inputs)
	for k := range out {
		out[k] = w.Texts[(start+k)%n]
	}
	return out
}

// Summary describes the workload's texts: how many, and their lengths in characters (Unicode
// code points) and words (runs of non-space, as strings.Fields splits them). Tokens is left nil
// for the caller to fill from the server's counts.
func (w *Workload) Summary() WorkloadSummary {
	chars := make([]float64, len(w.Texts))
	words := make([]float64, len(w.Texts))
	for i, t := range w.Texts {
		chars[i] = float64(utf8.RuneCountInString(t))
		words[i] = float64(len(strings.Fields(t)))
	}
	return WorkloadSummary{
		Source: w.Source,
		Texts:  len(w.Texts),
		Chars:  Summarize(chars),
		Words:  Summarize(words),
	}
}

// Summarize returns the minimum, median, 95th percentile, maximum and mean of xs, the
// quantiles by nearest rank (the smallest value with at least that fraction of xs at or below
// it, so always one of xs). It returns the zero Distribution for empty xs and does not modify xs.
func Summarize(xs []float64) Distribution {
	if len(xs) == 0 {
		return Distribution{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	var sum float64
	for _, x := range s {
		sum += x
	}
	return Distribution{
		Min:  s[0],
		P50:  nearestRank(s, 0.50),
		P95:  nearestRank(s, 0.95),
		Max:  s[len(s)-1],
		Mean: sum / float64(len(s)),
	}
}

// nearestRank returns the p-quantile of sorted s by nearest rank: s[⌈p·n⌉−1].
func nearestRank(s []float64, p float64) float64 {
	r := int(math.Ceil(p * float64(len(s))))
	return s[min(max(r, 1), len(s))-1]
}

// LoadWorkload reads the texts of a workload file, choosing the format by the extension:
//
//   - .txt: one text per line.
//   - .csv, .tsv: a header row, then one text per row in the column named column.
//   - .jsonl, .ndjson: one JSON object per line, the text in its string field named column.
//
// column defaults to "text" when empty; it is ignored for .txt. Blank texts are skipped. An
// error says what is wrong with the file, where, and what to do about it; a file with no
// texts is an error too.
func LoadWorkload(path, column string) (*Workload, error) {
	ext := strings.ToLower(filepath.Ext(path))
	var parse func(io.Reader) ([]string, error)
	switch ext {
	case ".txt":
		parse = ParseTXT
	case ".csv", ".tsv":
		comma := ','
		if ext == ".tsv" {
			comma = '\t'
		}
		parse = func(r io.Reader) ([]string, error) { return ParseCSV(r, comma, column) }
	case ".jsonl", ".ndjson":
		parse = func(r io.Reader) ([]string, error) { return ParseJSONL(r, column) }
	default:
		return nil, fmt.Errorf("workload %s: unknown format %q: use .txt (one text per line), .csv or .tsv (with a header row), or .jsonl/.ndjson (one JSON object per line)", path, ext)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("workload: %w", err)
	}
	defer f.Close()
	texts, err := parse(bufio.NewReader(f))
	if err != nil {
		return nil, fmt.Errorf("workload %s: %w", path, err)
	}
	if len(texts) == 0 {
		return nil, fmt.Errorf("workload %s: no texts in the file: give a file with at least one non-blank text", path)
	}
	return &Workload{Source: path, Texts: texts}, nil
}

// ParseTXT reads one text per line. Lines end in \n or \r\n; a UTF-8 byte order mark at the
// start is dropped; blank lines are skipped. A line longer than MaxLine or not valid UTF-8 is
// an error naming its line number.
func ParseTXT(r io.Reader) ([]string, error) {
	var texts []string
	err := scanLines(r, func(line []byte) error {
		texts = append(texts, string(line))
		return nil
	})
	return texts, err
}

// ParseJSONL reads JSON Lines: one JSON object per line, each with a string field named column
// ("text" if column is empty) that holds its text; other fields are ignored. Blank lines, and
// objects whose text is blank, are skipped. A line that is not such an object is an error
// naming its line number.
func ParseJSONL(r io.Reader, column string) ([]string, error) {
	if column == "" {
		column = DefaultColumn
	}
	var texts []string
	err := scanLines(r, func(line []byte) error {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(line, &obj); err != nil || obj == nil {
			what := "not valid JSON"
			if json.Valid(line) {
				what = jsonKind(line) + ", not an object"
			} else if err != nil {
				what += " (" + strings.TrimPrefix(err.Error(), "json: ") + ")"
			}
			return fmt.Errorf("%s: write one JSON object per line, like {%q: \"...\"}", what, column)
		}
		raw, ok := obj[column]
		if !ok {
			return fmt.Errorf("no field %q (fields: %s): name the field that holds the text", column, quoteList(slices.Sorted(maps.Keys(obj))))
		}
		var text string
		if err := json.Unmarshal(raw, &text); err != nil {
			return fmt.Errorf("field %q is %s, not a string: the text must be a JSON string", column, jsonKind(raw))
		}
		if !isBlank(text) {
			texts = append(texts, text)
		}
		return nil
	})
	return texts, err
}

// ParseCSV reads delimiter-separated values with a header row, fields separated by comma
// (',' for CSV, '\t' for TSV) and quoted as RFC 4180 says (a field holding the delimiter, a
// quote or a newline is quoted, and its quotes doubled). The texts are the column whose header
// is column ("text" if column is empty); other columns are ignored; blank texts are skipped.
// A header without that column is an error listing the columns it has; a row too short to
// reach it, a quoting error or text that is not valid UTF-8 is an error naming its line.
func ParseCSV(r io.Reader, comma rune, column string) ([]string, error) {
	if column == "" {
		column = DefaultColumn
	}
	cr := csv.NewReader(r)
	cr.Comma = comma
	cr.FieldsPerRecord = -1 // rows may be ragged; only the text column has to be there
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err == io.EOF {
		return nil, errors.New("empty file: the first line must be a header row naming the columns")
	}
	if err != nil {
		return nil, csvError(err)
	}
	header[0] = strings.TrimPrefix(header[0], bom)
	col := slices.IndexFunc(header, func(h string) bool { return strings.TrimSpace(h) == column })
	if col < 0 {
		return nil, fmt.Errorf("no column %q in the header (columns: %s): name the column that holds the text", column, quoteList(header))
	}
	var texts []string
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			return texts, nil
		}
		if err != nil {
			return nil, csvError(err)
		}
		if col >= len(rec) {
			line, _ := cr.FieldPos(0)
			return nil, fmt.Errorf("line %d: the row ends before column %q (field %d of the header): give every row a value for it", line, column, col+1)
		}
		text := rec[col]
		if !utf8.ValidString(text) {
			line, _ := cr.FieldPos(col)
			return nil, fmt.Errorf("line %d: text is not valid UTF-8: convert the file to UTF-8", line)
		}
		if !isBlank(text) {
			texts = append(texts, text)
		}
	}
}

// bom is the UTF-8 byte order mark that some editors and spreadsheets write at the start of
// a file; it is not part of the first line's text or the first column's name.
const bom = "\ufeff"

// scanLines calls fn with each non-blank line of r, without its line ending, and adds the
// line number to fn's error. It checks that lines are valid UTF-8 and at most MaxLine long.
func scanLines(r io.Reader, fn func(line []byte) error) error {
	sc := bufio.NewScanner(r)
	// +2 leaves room for the \r\n after a line of MaxLine bytes.
	sc.Buffer(make([]byte, 0, 64<<10), MaxLine+2)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Bytes()
		if n == 1 {
			line = bytes.TrimPrefix(line, []byte(bom))
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if !utf8.Valid(line) {
			return fmt.Errorf("line %d: not valid UTF-8: convert the file to UTF-8", n)
		}
		if err := fn(line); err != nil {
			return fmt.Errorf("line %d: %w", n, err)
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return fmt.Errorf("line %d: longer than %d bytes: split it, or shorten it", n+1, MaxLine)
		}
		return err
	}
	return nil
}

// csvError turns an encoding/csv error into one line that says what to do. ParseError
// already names the line and column.
func csvError(err error) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) && (errors.Is(pe.Err, csv.ErrBareQuote) || errors.Is(pe.Err, csv.ErrQuote)) {
		return fmt.Errorf("%w: quote a field that contains quotes, and double the quotes inside it (\"say \"\"hi\"\"\")", err)
	}
	return err
}

// isBlank reports whether s is empty or only white space.
func isBlank(s string) bool {
	return strings.TrimSpace(s) == ""
}

// quoteList formats names as a comma-separated list of quoted strings.
func quoteList(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}

// jsonKind names the JSON type of a valid JSON value, for error messages.
func jsonKind(raw []byte) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 'n':
		return "null"
	case 't', 'f':
		return "a boolean"
	default:
		return "a number"
	}
}
