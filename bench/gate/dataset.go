package gate

import (
	"cmp"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/ortserve/ortserve/bench/dataset"
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
	format := dataset.FormatOf(path)
	if format == "" || format == dataset.TXT {
		return nil, fmt.Errorf("gate: %s: unknown dataset format %q: use a .csv, .tsv, .jsonl or .ndjson file", path, strings.ToLower(filepath.Ext(path)))
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
	f := dataset.ParseFormat(format)
	if f == "" || f == dataset.TXT {
		return nil, fmt.Errorf("gate: unknown dataset format %q: use csv, tsv or jsonl", format)
	}
	examples, err := parse(r, f, "", o)
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
func parse(r io.Reader, format dataset.Format, name string, o DatasetOptions) ([]Example, error) {
	cols := []dataset.Column{
		{Name: cmp.Or(o.TextColumn, "text"), Role: "text", Flag: "--text-column"},
		{Name: cmp.Or(o.LabelColumn, "label"), Role: "label", Flag: "--label-column", Optional: o.LabelsOptional, Scalar: true},
	}
	records, has, err := dataset.Read(r, dataset.Options{Format: format, Columns: cols, Name: name})
	if err != nil {
		return nil, err
	}
	if len(records) == 0 {
		return nil, fmt.Errorf("%s has no examples: the gate needs a labeled dataset", orName(name))
	}
	examples := make([]Example, len(records))
	for i, rec := range records {
		examples[i].Text = rec.Values[0]
		if has[1] {
			if examples[i].Label, err = mapLabel(strings.TrimSpace(rec.Values[1]), o, name, rec.Line); err != nil {
				return nil, err
			}
		}
	}
	return examples, nil
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
		return "", fmt.Errorf("%s: the label is empty: every example needs one", dataset.At(name, line))
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
		return "", fmt.Errorf("%s: label %q is not in the label map (which maps %s): add it, e.g. %s=<class>", dataset.At(name, line), raw, strings.Join(quoteAll(keys), ", "), raw)
	}
	return class, nil
}
