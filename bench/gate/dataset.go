package gate

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Example is one text of a gate dataset with its label, the class it truly belongs to.
// Label is empty only in a dataset loaded without labels (DatasetOptions.LabelsOptional).
type Example struct {
	Text  string `json:"text"`
	Label string `json:"label"`
}

// Dataset is the labeled data a gate runs both versions on. Runs hand their outputs back in
// the order of Examples.
type Dataset struct {
	// Source names where the examples came from, for reports: LoadDataset sets the path.
	Source   string
	Examples []Example
	// Labels are the distinct labels of Examples in first-seen order; nil when the dataset
	// has no labels. Confusion matrices and per-class tables follow this order.
	Labels []string
}

// DatasetOptions says where the text and the label are in a dataset file and how to name the
// labels.
type DatasetOptions struct {
	// TextColumn is the column (CSV, TSV) or field (JSON lines) holding the text; "text"
	// when empty.
	TextColumn string
	// LabelColumn is the column or field holding the label; "label" when empty.
	LabelColumn string
	// LabelMap renames raw labels to class names, e.g. "0" to "negative", so that they
	// match the model's classes. With a map, every raw label must be in it; nil keeps the
	// labels as written. ParseLabelMap reads one from a flag.
	LabelMap map[string]string
	// LabelsOptional lets a file without the label column load, with empty labels. Only an
	// embedding gate with cosine budgets alone can use such a dataset.
	LabelsOptional bool
}

// The dataset formats ParseDataset reads.
const (
	FormatCSV   = "csv"
	FormatTSV   = "tsv"
	FormatJSONL = "jsonl"
)

// LoadDataset reads the dataset at path. The extension names the format: .csv and .tsv have a
// header row naming the columns, and .jsonl or .ndjson hold one JSON object per line whose
// label may be a string or a number (1 and 1.0 both read as "1"). A .tsv file is split at
// every tab with no quoting, as GLUE's files are; text with tabs or quotes belongs in .csv
// or .jsonl. Errors name the file and, where there is one, the line.
func LoadDataset(path string, o DatasetOptions) (*Dataset, error) {
	var format string
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".csv":
		format = FormatCSV
	case ".tsv":
		format = FormatTSV
	case ".jsonl", ".ndjson":
		format = FormatJSONL
	default:
		return nil, fmt.Errorf("gate: %s: unknown dataset format %q: use a .csv, .tsv, .jsonl or .ndjson file", path, ext)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("gate: %w", err)
	}
	defer f.Close()
	examples, err := parse(f, format, path, o)
	if err != nil {
		return nil, fmt.Errorf("gate: %w", err)
	}
	return NewDataset(path, examples)
}

// ParseDataset reads examples in format ("csv", "tsv" or "jsonl") from r, as LoadDataset
// reads a file; errors name the line. A dataset without examples is an error.
func ParseDataset(r io.Reader, format string, o DatasetOptions) ([]Example, error) {
	examples, err := parse(r, format, "", o)
	if err != nil {
		return nil, fmt.Errorf("gate: %w", err)
	}
	return examples, nil
}

// NewDataset makes a Dataset of examples, listing their labels in first-seen order. Either
// every example has a label or none has.
func NewDataset(source string, examples []Example) (*Dataset, error) {
	if len(examples) == 0 {
		return nil, fmt.Errorf("gate: %s has no examples: the gate needs a labeled dataset", orName(source))
	}
	ds := &Dataset{Source: source, Examples: examples}
	seen := make(map[string]bool)
	for i, e := range examples {
		if (e.Label == "") != (examples[0].Label == "") {
			return nil, fmt.Errorf("gate: %s: example %d has no label while example %d has one: label every example or none", orName(source), unlabeledIndex(examples, i), labeledIndex(examples, i))
		}
		if e.Label != "" && !seen[e.Label] {
			seen[e.Label] = true
			ds.Labels = append(ds.Labels, e.Label)
		}
	}
	return ds, nil
}

// unlabeledIndex and labeledIndex pick, of example 0 and example i whose labeling differs,
// the one without a label and the one with.
func unlabeledIndex(ex []Example, i int) int {
	if ex[i].Label == "" {
		return i
	}
	return 0
}

func labeledIndex(ex []Example, i int) int {
	if ex[i].Label != "" {
		return i
	}
	return 0
}

func orName(source string) string {
	if source == "" {
		return "the dataset"
	}
	return source
}

// ParseLabelMap reads a label map flag: comma-separated raw=class pairs, as in
// "0=negative,1=positive". Spaces around pairs, raw labels and class names are dropped. An
// empty string is no map (nil).
func ParseLabelMap(s string) (map[string]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	m := make(map[string]string)
	for entry := range strings.SplitSeq(s, ",") {
		raw, class, ok := strings.Cut(entry, "=")
		raw, class = strings.TrimSpace(raw), strings.TrimSpace(class)
		switch {
		case strings.TrimSpace(entry) == "":
			return nil, fmt.Errorf("gate: label map %q has an empty entry: write raw=class pairs separated by single commas, e.g. 0=negative,1=positive", s)
		case !ok:
			return nil, fmt.Errorf("gate: label map entry %q has no '=': write raw=class pairs separated by commas, e.g. 0=negative,1=positive", strings.TrimSpace(entry))
		case raw == "" || class == "":
			return nil, fmt.Errorf("gate: label map entry %q needs a raw label and a class name on both sides of '=', e.g. 0=negative", strings.TrimSpace(entry))
		}
		if prev, dup := m[raw]; dup {
			return nil, fmt.Errorf("gate: label map gives raw label %q twice (%s and %s): give each raw label one class", raw, prev, class)
		}
		m[raw] = class
	}
	return m, nil
}

// parse reads examples in format from r. name is the file for error messages; "" words them
// as "line N".
func parse(r io.Reader, format, name string, o DatasetOptions) ([]Example, error) {
	if o.TextColumn == "" {
		o.TextColumn = "text"
	}
	if o.LabelColumn == "" {
		o.LabelColumn = "label"
	}
	var (
		examples []Example
		err      error
	)
	switch strings.ToLower(format) {
	case FormatCSV, FormatTSV:
		examples, err = parseTable(r, strings.ToLower(format), name, o)
	case FormatJSONL, "ndjson":
		examples, err = parseJSONL(r, name, o)
	default:
		return nil, fmt.Errorf("unknown dataset format %q: use csv, tsv or jsonl", format)
	}
	if err != nil {
		return nil, err
	}
	if len(examples) == 0 {
		return nil, fmt.Errorf("%s has no examples: the gate needs a labeled dataset", orName(name))
	}
	return examples, nil
}

// at locates an error: "data.csv:3" for a file, "line 3" without one.
func at(name string, line int) string {
	if name == "" {
		return fmt.Sprintf("line %d", line)
	}
	return fmt.Sprintf("%s:%d", name, line)
}

// rowReader yields the rows of a table file with the line each starts on; it returns io.EOF
// after the last.
type rowReader func() (fields []string, line int, err error)

// csvRows reads quoted CSV. Rows may differ in length here; parseTable checks them against
// the header with a clearer message than encoding/csv's.
func csvRows(r io.Reader, name string) rowReader {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	return func() ([]string, int, error) {
		rec, err := cr.Read()
		if err != nil {
			if pe, ok := errors.AsType[*csv.ParseError](err); ok {
				// An unclosed quote is only noticed lines later: point at the start.
				where := at(name, pe.StartLine)
				if pe.Line != pe.StartLine {
					where += fmt.Sprintf(" (the record runs to line %d)", pe.Line)
				}
				return nil, 0, fmt.Errorf("%s: %s", where, csvProblem(pe.Err))
			}
			return nil, 0, err
		}
		line, _ := cr.FieldPos(0)
		return rec, line, nil
	}
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

// tsvRows reads tab-separated lines without quoting; blank lines are skipped.
func tsvRows(r io.Reader) rowReader {
	br := bufio.NewReader(r)
	line := 0
	return func() ([]string, int, error) {
		for {
			s, err := br.ReadString('\n')
			if s == "" && err != nil {
				return nil, 0, err
			}
			line++
			s = strings.TrimSuffix(strings.TrimSuffix(s, "\n"), "\r")
			if strings.TrimSpace(s) == "" {
				continue
			}
			return strings.Split(s, "\t"), line, nil
		}
	}
}

// parseTable reads a CSV or TSV file whose first row names the columns.
func parseTable(r io.Reader, format, name string, o DatasetOptions) ([]Example, error) {
	next := tsvRows(r)
	sep, fix := "tab", "tabs cannot appear inside a .tsv field: write the file as .csv or .jsonl"
	if format == FormatCSV {
		next = csvRows(r, name)
		sep, fix = "comma", "quote fields that contain commas"
	}
	header, hline, err := next()
	if errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s is empty: the gate needs a header row and labeled examples", orName(name))
	}
	if err != nil {
		return nil, err
	}
	header[0] = strings.TrimPrefix(header[0], "\uFEFF") // Excel writes a byte-order mark.
	for i := range header {
		header[i] = strings.TrimSpace(header[i])
	}
	textAt, err := column(header, o.TextColumn, "text", false, name, hline)
	if err != nil {
		return nil, err
	}
	labelAt, err := column(header, o.LabelColumn, "label", o.LabelsOptional, name, hline)
	if err != nil {
		return nil, err
	}
	var examples []Example
	for {
		rec, line, err := next()
		if errors.Is(err, io.EOF) {
			return examples, nil
		}
		if err != nil {
			return nil, err
		}
		if len(rec) != len(header) {
			return nil, fmt.Errorf("%s: %d %s-separated fields but the header has %d: %s", at(name, line), len(rec), sep, len(header), fix)
		}
		e := Example{Text: rec[textAt]}
		if labelAt >= 0 {
			if e.Label, err = mapLabel(strings.TrimSpace(rec[labelAt]), o, name, line); err != nil {
				return nil, err
			}
		}
		examples = append(examples, e)
	}
}

// column finds want in header. role is "text" or "label", for the flag to suggest. A missing
// column is -1 when optional.
func column(header []string, want, role string, optional bool, name string, line int) (int, error) {
	i := slices.Index(header, want)
	if i < 0 {
		if optional {
			return -1, nil
		}
		return 0, fmt.Errorf("%s: no %q column in the header (columns: %s): name the %s column with --%s-column", at(name, line), want, strings.Join(quoteAll(header), ", "), role, role)
	}
	if slices.Index(header[i+1:], want) >= 0 {
		return 0, fmt.Errorf("%s: the header has two %q columns: rename one", at(name, line), want)
	}
	return i, nil
}

func quoteAll(ss []string) []string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = strconv.Quote(s)
	}
	return q
}

// mapLabel checks a raw label and renames it through the label map.
func mapLabel(raw string, o DatasetOptions, name string, line int) (string, error) {
	if raw == "" {
		return "", fmt.Errorf("%s: the label is empty: every example needs one", at(name, line))
	}
	if o.LabelMap == nil {
		return raw, nil
	}
	class, ok := o.LabelMap[raw]
	if !ok {
		keys := make([]string, 0, len(o.LabelMap))
		for k := range o.LabelMap {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		return "", fmt.Errorf("%s: label %q is not in the label map (which maps %s): add it, e.g. %s=<class>", at(name, line), raw, strings.Join(quoteAll(keys), ", "), raw)
	}
	return class, nil
}

// parseJSONL reads one JSON object per line; blank lines are skipped. Whether the file has
// labels is decided by its first object when labels are optional; the rest must agree.
func parseJSONL(r io.Reader, name string, o DatasetOptions) ([]Example, error) {
	br := bufio.NewReader(r)
	var (
		examples  []Example
		firstLine int
		labeled   bool
	)
	for line := 1; ; line++ {
		b, err := br.ReadBytes('\n')
		if len(b) == 0 && err != nil {
			if errors.Is(err, io.EOF) {
				return examples, nil
			}
			return nil, err
		}
		if line == 1 {
			b = bytes.TrimPrefix(b, []byte("\uFEFF"))
		}
		b = bytes.TrimSpace(b)
		if len(b) == 0 {
			continue
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(b, &obj); err != nil || obj == nil {
			return nil, fmt.Errorf("%s: not a JSON object (%s): write one object per line, e.g. {\"text\": \"...\", \"label\": \"...\"}", at(name, line), jsonProblem(err))
		}
		rawText, ok := obj[o.TextColumn]
		if !ok {
			return nil, fmt.Errorf("%s: no %q field (fields: %s): name the text field with --text-column", at(name, line), o.TextColumn, fieldList(obj))
		}
		var e Example
		if err := json.Unmarshal(rawText, &e.Text); err != nil || bytes.Equal(rawText, []byte("null")) {
			return nil, fmt.Errorf("%s: the %q field is %s, not a string", at(name, line), o.TextColumn, jsonKind(rawText))
		}
		rawLabel, hasLabel := obj[o.LabelColumn]
		if firstLine == 0 {
			firstLine, labeled = line, hasLabel || !o.LabelsOptional
		}
		switch {
		case labeled && !hasLabel:
			return nil, fmt.Errorf("%s: no %q field (fields: %s): name the label field with --label-column", at(name, line), o.LabelColumn, fieldList(obj))
		case !labeled && hasLabel:
			return nil, fmt.Errorf("%s: has a %q field but line %d has none: label every line or none", at(name, line), o.LabelColumn, firstLine)
		case labeled:
			raw, err := jsonLabel(rawLabel)
			if err != nil {
				return nil, fmt.Errorf("%s: the %q field %v", at(name, line), o.LabelColumn, err)
			}
			if e.Label, err = mapLabel(strings.TrimSpace(raw), o, name, line); err != nil {
				return nil, err
			}
		}
		examples = append(examples, e)
	}
}

// jsonLabel reads a label written as a string, a number or a boolean. An integral number
// reads as the integer, so that 1 and 1.0 both match a label map entry "1".
func jsonLabel(raw json.RawMessage) (string, error) {
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
	return "", fmt.Errorf("is %s: write the label as a string or a number", jsonKind(raw))
}

// jsonKind names the kind of a JSON value for messages.
func jsonKind(raw json.RawMessage) string {
	switch b := bytes.TrimSpace(raw); {
	case len(b) == 0:
		return "empty"
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

// jsonProblem words a JSON decoding error briefly.
func jsonProblem(err error) string {
	if err == nil {
		return "null"
	}
	if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
		return "a JSON " + te.Value
	}
	return err.Error()
}

// fieldList lists an object's fields in sorted order.
func fieldList(obj map[string]json.RawMessage) string {
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if len(keys) == 0 {
		return "none"
	}
	return strings.Join(quoteAll(keys), ", ")
}
