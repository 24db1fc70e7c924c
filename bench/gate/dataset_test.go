package gate_test

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ortserve/ortserve/bench/gate"
)

func TestLoadDataset(t *testing.T) {
	binaryMap := map[string]string{"0": "negative", "1": "positive"}
	tests := []struct {
		name     string
		file     string
		content  string
		opts     gate.DatasetOptions
		examples []gate.Example
		labels   []string
	}{
		{
			name:     "csv",
			file:     "d.csv",
			content:  "text,label\ngreat film,positive\n\"dull, slow\",negative\n\"she said \"\"wow\"\"\",positive\n",
			examples: []gate.Example{{"great film", "positive"}, {"dull, slow", "negative"}, {`she said "wow"`, "positive"}},
			labels:   []string{"positive", "negative"},
		},
		{
			name:     "csv with other columns, a label map, CRLF and a byte-order mark",
			file:     "d.csv",
			content:  "\uFEFFid,sentence,y\r\n1,good,1\r\n2,bad,0\r\n\r\n3,\"two\nlines\",1\r\n",
			opts:     gate.DatasetOptions{TextColumn: "sentence", LabelColumn: "y", LabelMap: binaryMap},
			examples: []gate.Example{{"good", "positive"}, {"bad", "negative"}, {"two\nlines", "positive"}},
			labels:   []string{"positive", "negative"},
		},
		{
			name:     "tsv keeps quotes as written",
			file:     "d.TSV",
			content:  "sentence\tlabel\n\"quoted\" start\t0\nit's \"fine\"\t1\n\n",
			opts:     gate.DatasetOptions{TextColumn: "sentence", LabelMap: binaryMap},
			examples: []gate.Example{{`"quoted" start`, "negative"}, {`it's "fine"`, "positive"}},
			labels:   []string{"negative", "positive"},
		},
		{
			name:     "jsonl with string and number labels",
			file:     "d.jsonl",
			content:  "{\"text\": \"a\", \"label\": \"pos\"}\n\n{\"text\": \"b\", \"label\": 0}\n{\"text\": \"c\", \"label\": 1.0, \"extra\": [1]}\n",
			examples: []gate.Example{{"a", "pos"}, {"b", "0"}, {"c", "1"}},
			labels:   []string{"pos", "0", "1"},
		},
		{
			name:     "ndjson with field options and a label map",
			file:     "d.ndjson",
			content:  `{"sentence": "x", "y": 1}` + "\n" + `{"sentence": "y", "y": "0"}`,
			opts:     gate.DatasetOptions{TextColumn: "sentence", LabelColumn: "y", LabelMap: binaryMap},
			examples: []gate.Example{{"x", "positive"}, {"y", "negative"}},
			labels:   []string{"positive", "negative"},
		},
		{
			name:     "optional labels, absent",
			file:     "d.csv",
			content:  "text\nfirst\nsecond\n",
			opts:     gate.DatasetOptions{LabelsOptional: true},
			examples: []gate.Example{{Text: "first"}, {Text: "second"}},
		},
		{
			name:     "optional labels, present",
			file:     "d.jsonl",
			content:  `{"text": "a", "label": "x"}`,
			opts:     gate.DatasetOptions{LabelsOptional: true},
			examples: []gate.Example{{"a", "x"}},
			labels:   []string{"x"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), tt.file)
			if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			ds, err := gate.LoadDataset(path, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			if ds.Source != path {
				t.Errorf("source %q, want %q", ds.Source, path)
			}
			if !slices.Equal(ds.Examples, tt.examples) {
				t.Errorf("examples %q, want %q", ds.Examples, tt.examples)
			}
			if !slices.Equal(ds.Labels, tt.labels) {
				t.Errorf("labels %q, want %q", ds.Labels, tt.labels)
			}
		})
	}
}

func TestLoadDatasetErrors(t *testing.T) {
	binaryMap := map[string]string{"0": "negative", "1": "positive"}
	tests := []struct {
		name    string
		file    string
		content string
		opts    gate.DatasetOptions
		want    []string
	}{
		{"empty csv", "d.csv", "", gate.DatasetOptions{}, []string{"d.csv is empty"}},
		{"header only", "d.csv", "text,label\n", gate.DatasetOptions{}, []string{"d.csv has no examples"}},
		{"empty jsonl", "d.jsonl", "\n\n", gate.DatasetOptions{}, []string{"d.jsonl has no examples"}},
		{"missing text column", "d.csv", "sentence,label\na,1\n", gate.DatasetOptions{}, []string{`d.csv:1: no "text" column`, `(columns: "sentence", "label")`, "--text-column"}},
		{"missing label column", "d.tsv", "text\ty\na\t1\n", gate.DatasetOptions{}, []string{`d.tsv:1: no "label" column`, `"text", "y"`, "--label-column"}},
		{"chosen column missing", "d.csv", "text,label\na,1\n", gate.DatasetOptions{LabelColumn: "gold"}, []string{`no "gold" column`}},
		{"column twice", "d.csv", "text,label,text\na,1,b\n", gate.DatasetOptions{}, []string{`two "text" columns`}},
		{"unquoted comma", "d.csv", "text,label\nok,1\nslow, dull,0\n", gate.DatasetOptions{}, []string{"d.csv:3:", "3 comma-separated fields but the header has 2", "quote fields"}},
		{"bare quote", "d.csv", "text,label\nsay \"hi\",1\n", gate.DatasetOptions{}, []string{"d.csv:2:", "unquoted field"}},
		{"unclosed quote", "d.csv", "text,label\n\"open,1\n", gate.DatasetOptions{}, []string{"d.csv:2:", "not closed"}},
		{"unclosed quote far back", "d.csv", "text,label\n\"open,1\nb,2\nc,3\n", gate.DatasetOptions{}, []string{"d.csv:2 (the record runs to line 4):", "not closed"}},
		{"tab in tsv text", "d.tsv", "text\tlabel\na\tb\t1\n", gate.DatasetOptions{}, []string{"d.tsv:2:", "tabs cannot appear"}},
		{"empty label", "d.csv", "text,label\na, \n", gate.DatasetOptions{}, []string{"d.csv:2:", "label is empty"}},
		{"label not in map", "d.csv", "text,label\na,0\nb,2\n", gate.DatasetOptions{LabelMap: binaryMap}, []string{"d.csv:3:", `label "2" is not in the label map`, `"0", "1"`}},
		{"jsonl not an object", "d.jsonl", `{"text": "a", "label": 1}` + "\n[1, 2]\n", gate.DatasetOptions{}, []string{"d.jsonl:2:", "an array, not an object"}},
		{"jsonl broken", "d.jsonl", `{"text": "a", "label": 1`, gate.DatasetOptions{}, []string{"d.jsonl:1:", "not valid JSON"}},
		{"jsonl missing text", "d.jsonl", `{"sentence": "a", "label": 1}`, gate.DatasetOptions{}, []string{"d.jsonl:1:", `no "text" field (fields: "label", "sentence")`, "--text-column"}},
		{"jsonl text not a string", "d.jsonl", `{"text": 5, "label": 1}`, gate.DatasetOptions{}, []string{`"text" field is a number, not a string`}},
		{"jsonl text null", "d.jsonl", `{"text": null, "label": 1}`, gate.DatasetOptions{}, []string{`"text" field is null`}},
		{"jsonl missing label", "d.jsonl", `{"text": "a", "label": 1}` + "\n" + `{"text": "b"}`, gate.DatasetOptions{}, []string{"d.jsonl:2:", `no "label" field`}},
		{"jsonl label an object", "d.jsonl", `{"text": "a", "label": {"id": 1}}`, gate.DatasetOptions{}, []string{`"label" field is an object`}},
		{"jsonl labels on some lines only", "d.jsonl", `{"text": "a"}` + "\n" + `{"text": "b", "label": 1}`, gate.DatasetOptions{LabelsOptional: true}, []string{"d.jsonl:2:", "line 1 has none"}},
		{"unknown extension", "d.txt", "text,label\na,1\n", gate.DatasetOptions{}, []string{`unknown dataset format ".txt"`, ".jsonl"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), tt.file)
			if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := gate.LoadDataset(path, tt.opts)
			mustFailOneLine(t, err, tt.want...)
		})
	}
	if _, err := gate.LoadDataset(filepath.Join(t.TempDir(), "absent.csv"), gate.DatasetOptions{}); err == nil || !strings.Contains(err.Error(), "absent.csv") {
		t.Errorf("missing file: %v", err)
	}
}

func TestParseLabelMap(t *testing.T) {
	tests := []struct {
		in   string
		want map[string]string
		err  string
	}{
		{in: "", want: nil},
		{in: "  ", want: nil},
		{in: "0=negative,1=positive", want: map[string]string{"0": "negative", "1": "positive"}},
		{in: " 0 = neg , 1=pos ", want: map[string]string{"0": "neg", "1": "pos"}},
		{in: "a=x=y", want: map[string]string{"a": "x=y"}},
		{in: "n=same,p=same", want: map[string]string{"n": "same", "p": "same"}},
		{in: "0:negative", err: `entry "0:negative" has no '='`},
		{in: "0=negative,,1=positive", err: "empty entry"},
		{in: "0=negative,", err: "empty entry"},
		{in: "=negative", err: "on both sides"},
		{in: "0=", err: "on both sides"},
		{in: "0=a,0=b", err: `raw label "0" twice`},
	}
	for _, tt := range tests {
		got, err := gate.ParseLabelMap(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) || !strings.HasPrefix(err.Error(), "gate: ") {
				t.Errorf("ParseLabelMap(%q) error %v, want one with %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseLabelMap(%q): %v", tt.in, err)
			continue
		}
		if (got == nil) != (tt.want == nil) || !maps.Equal(got, tt.want) {
			t.Errorf("ParseLabelMap(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestParseDatasetFormats(t *testing.T) {
	tests := []struct {
		format, in string
		want       []gate.Example
		err        string
	}{
		{format: "csv", in: "text,label\na,1\n", want: []gate.Example{{"a", "1"}}},
		{format: "CSV", in: "label,text\n1,a\n", want: []gate.Example{{"a", "1"}}},
		{format: "tsv", in: "text\tlabel\na\t1", want: []gate.Example{{"a", "1"}}},
		{format: "jsonl", in: `{"text":"a","label":true}`, want: []gate.Example{{"a", "true"}}},
		{format: "ndjson", in: `{"text":"a","label":-2e0}`, want: []gate.Example{{"a", "-2"}}},
		{format: "jsonl", in: `{"text":"a","label":0.5}`, want: []gate.Example{{"a", "0.5"}}},
		{format: "xml", in: "<a/>", err: `unknown dataset format "xml"`},
		{format: "csv", in: "text,label\na,1\nb\n", err: "line 3: 1 comma-separated fields"},
		{format: "jsonl", in: "{}\n", err: `line 1: no "text" field (fields: none)`},
	}
	for _, tt := range tests {
		got, err := gate.ParseDataset(strings.NewReader(tt.in), tt.format, gate.DatasetOptions{})
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s %q: error %v, want one with %q", tt.format, tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("%s %q = %q, %v; want %q", tt.format, tt.in, got, err, tt.want)
		}
	}
}

func TestNewDataset(t *testing.T) {
	if _, err := gate.NewDataset("x", nil); err == nil || !strings.Contains(err.Error(), "x has no examples") {
		t.Errorf("empty: %v", err)
	}
	_, err := gate.NewDataset("x", []gate.Example{{"a", "l"}, {"b", ""}})
	if err == nil || !strings.Contains(err.Error(), "example 1 has no label while example 0 has one") {
		t.Errorf("mixed labels: %v", err)
	}
}

// FuzzParseDataset feeds arbitrary bytes to the CSV and JSON lines parsers. Whatever they
// accept must have a label on every example and must read back the same after writing it
// out again in the same format.
func FuzzParseDataset(f *testing.F) {
	f.Add([]byte("text,label\ngreat,1\n\"a, b\",0\n"), false)
	f.Add([]byte("\uFEFFid,text,label\r\n1,\"x\"\"y\",pos\r\n"), false)
	f.Add([]byte("text,label\n\"two\nlines\",1\n"), false)
	f.Add([]byte(`{"text": "a", "label": 1}`+"\n"+`{"text": "b\u00e9", "label": "neg"}`), true)
	f.Add([]byte(`{"text": "a", "label": 1e400}`), true)
	f.Add([]byte(`{"text": "a", "label": {"x": 1}}`), true)
	f.Fuzz(func(t *testing.T, data []byte, jsonl bool) {
		format := "csv"
		if jsonl {
			format = "jsonl"
		}
		got, err := gate.ParseDataset(bytes.NewReader(data), format, gate.DatasetOptions{})
		if err != nil {
			if msg := err.Error(); !strings.HasPrefix(msg, "gate: ") {
				t.Fatalf("error without the package prefix: %q", msg)
			}
			return
		}
		if len(got) == 0 {
			t.Fatal("no examples and no error")
		}
		for i, e := range got {
			if e.Label == "" || e.Label != strings.TrimSpace(e.Label) {
				t.Fatalf("example %d has label %q", i, e.Label)
			}
		}
		var buf bytes.Buffer
		if jsonl {
			enc := json.NewEncoder(&buf)
			for _, e := range got {
				if err := enc.Encode(e); err != nil {
					t.Fatal(err)
				}
			}
		} else {
			w := csv.NewWriter(&buf)
			_ = w.Write([]string{"text", "label"})
			for _, e := range got {
				_ = w.Write([]string{e.Text, e.Label})
			}
			w.Flush()
			if err := w.Error(); err != nil {
				t.Fatal(err)
			}
		}
		again, err := gate.ParseDataset(&buf, format, gate.DatasetOptions{})
		if err != nil {
			t.Fatalf("written back as %q, it no longer parses: %v", buf.String(), err)
		}
		if !slices.Equal(got, again) {
			t.Fatalf("read %q, wrote and read back %q", got, again)
		}
	})
}
