package dataset_test

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ortserve/ortserve/bench/dataset"
)

var (
	text     = dataset.Column{Name: "text", Role: "text", Flag: "--text-column"}
	label    = dataset.Column{Name: "label", Role: "label", Flag: "--label-column", Scalar: true}
	optLabel = dataset.Column{Name: "label", Role: "label", Optional: true, Scalar: true}
)

func TestRead(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		o       dataset.Options
		want    [][]string // values per record
		lines   []int      // the line each record starts on; nil: not checked
		has     []bool
		wantErr []string // substrings the error must hold; nil: no error
	}{
		// Text files.
		{name: "txt", in: "\ufeffone\n\n  \ntwo\r\n three ", o: dataset.Options{Format: dataset.TXT, Columns: []dataset.Column{text}},
			want: [][]string{{"one"}, {"two"}, {" three "}}, lines: []int{1, 4, 5}, has: []bool{true}},
		{name: "txt optional label", in: "a\n", o: dataset.Options{Format: dataset.TXT, Columns: []dataset.Column{text, optLabel}},
			want: [][]string{{"a", ""}}, has: []bool{true, false}},
		{name: "txt label", in: "a\n", o: dataset.Options{Format: dataset.TXT, Columns: []dataset.Column{text, label}},
			wantErr: []string{`no "label" column`, ".csv"}},
		{name: "txt latin1", in: "ok\ncaf\xe9\n", o: dataset.Options{Format: dataset.TXT, Columns: []dataset.Column{text}, Name: "w.txt"},
			wantErr: []string{"w.txt:2: not valid UTF-8"}},

		// CSV.
		{name: "csv", in: "id,text,label\n1,\"a, \"\"b\"\"\",1\n\n2,\"two\nlines\",0\n3,,1\n", o: dataset.Options{Format: dataset.CSV, Columns: []dataset.Column{text, label}},
			want: [][]string{{`a, "b"`, "1"}, {"two\nlines", "0"}, {"", "1"}}, lines: []int{2, 4, 6}, has: []bool{true, true}},
		{name: "csv header with spaces and bom", in: "\ufeff label , text \nx,y\n", o: dataset.Options{Format: dataset.CSV, Columns: []dataset.Column{text, label}},
			want: [][]string{{"y", "x"}}, has: []bool{true, true}},
		{name: "csv optional column absent", in: "text\na\n", o: dataset.Options{Format: dataset.CSV, Columns: []dataset.Column{text, optLabel}},
			want: [][]string{{"a", ""}}, has: []bool{true, false}},
		{name: "csv ragged", in: "text,id\nhi\nthere,2,extra\n", o: dataset.Options{Format: dataset.CSV, Columns: []dataset.Column{text}, Ragged: true},
			want: [][]string{{"hi"}, {"there"}}, has: []bool{true}},
		{name: "csv ragged too short", in: "id,text\n1,a\n2\n", o: dataset.Options{Format: dataset.CSV, Columns: []dataset.Column{text}, Ragged: true},
			wantErr: []string{"line 3", `the row ends before column "text" (field 2 of the header)`}},
		{name: "csv not ragged", in: "text,label\nok,1\nslow, dull,0\n", o: dataset.Options{Format: dataset.CSV, Columns: []dataset.Column{text, label}, Name: "d.csv"},
			wantErr: []string{"d.csv:3: 3 comma-separated fields but the header has 2", "quote fields"}},
		{name: "csv empty", in: "", o: dataset.Options{Format: dataset.CSV, Columns: []dataset.Column{text}},
			wantErr: []string{"empty file: the first line must be a header row"}},
		{name: "csv empty named", in: "\n\n", o: dataset.Options{Format: dataset.CSV, Columns: []dataset.Column{text}, Name: "d.csv"},
			wantErr: []string{"d.csv is empty: the first line must be a header row"}},
		{name: "csv missing column", in: "id,review\n1,hi\n", o: dataset.Options{Format: dataset.CSV, Columns: []dataset.Column{text}, Name: "d.csv"},
			wantErr: []string{`d.csv:1: no "text" column in the header (columns: "id", "review"): name the text column with --text-column`}},
		{name: "csv missing column without flag", in: "id\n1\n", o: dataset.Options{Format: dataset.CSV, Columns: []dataset.Column{{Name: "body"}}},
			wantErr: []string{`line 1: no "body" column in the header (columns: "id"): name the column`}},
		{name: "csv column twice", in: "text,label,text\na,1,b\n", o: dataset.Options{Format: dataset.CSV, Columns: []dataset.Column{text}},
			wantErr: []string{`the header has two "text" columns`}},
		{name: "csv bare quote", in: "text\nsay \"hi\" now\n", o: dataset.Options{Format: dataset.CSV, Columns: []dataset.Column{text}},
			wantErr: []string{"line 2: a '\"' inside an unquoted field", "double the quotes"}},
		{name: "csv unclosed quote", in: "text\n\"open\nb\nc\n", o: dataset.Options{Format: dataset.CSV, Columns: []dataset.Column{text}, Name: "d.csv"},
			wantErr: []string{"d.csv:2 (the record runs to line 4):", "not closed"}},
		{name: "csv latin1 in the column read", in: "text,x\nok,1\ncaf\xe9,2\n", o: dataset.Options{Format: dataset.CSV, Columns: []dataset.Column{text}},
			wantErr: []string{"line 3: not valid UTF-8"}},
		{name: "csv latin1 elsewhere", in: "text,x\nok,caf\xe9\n", o: dataset.Options{Format: dataset.CSV, Columns: []dataset.Column{text}},
			want: [][]string{{"ok"}}, has: []bool{true}},

		// TSV.
		{name: "tsv keeps quotes", in: "\ufefftext\tlabel\r\n\"quoted\" start\t0\r\n\r\nit's \"fine\"\t1\n", o: dataset.Options{Format: dataset.TSV, Columns: []dataset.Column{text, label}},
			want: [][]string{{`"quoted" start`, "0"}, {`it's "fine"`, "1"}}, lines: []int{2, 4}, has: []bool{true, true}},
		{name: "tsv tab in a field", in: "text\tlabel\na\tb\t1\n", o: dataset.Options{Format: dataset.TSV, Columns: []dataset.Column{text, label}, Name: "d.tsv"},
			wantErr: []string{"d.tsv:2: 3 tab-separated fields but the header has 2", "tabs cannot appear"}},
		{name: "tsv ragged", in: "id\ttext\n1\ta\textra\n", o: dataset.Options{Format: dataset.TSV, Columns: []dataset.Column{text}, Ragged: true},
			want: [][]string{{"a"}}, has: []bool{true}},
		{name: "tsv comma header", in: "id,text\n1,hi\n", o: dataset.Options{Format: dataset.TSV, Columns: []dataset.Column{text}},
			wantErr: []string{`no "text" column in the header (columns: "id,text")`}},
		{name: "tsv latin1", in: "text\ncaf\xe9\n", o: dataset.Options{Format: dataset.TSV, Columns: []dataset.Column{text}},
			wantErr: []string{"line 2: not valid UTF-8"}},

		// JSON Lines.
		{name: "jsonl", in: "\ufeff{\"text\": \"a\", \"label\": \"pos\"}\n\n{\"text\": \"b\", \"label\": 0}\r\n{\"text\": \"c\", \"label\": 1.0, \"x\": [1]}\n{\"text\": \"d\", \"label\": true}\n{\"text\": \"e\", \"label\": 0.5}\n",
			o:    dataset.Options{Format: dataset.JSONL, Columns: []dataset.Column{text, label}},
			want: [][]string{{"a", "pos"}, {"b", "0"}, {"c", "1"}, {"d", "true"}, {"e", "0.5"}}, lines: []int{1, 3, 4, 5, 6}, has: []bool{true, true}},
		{name: "jsonl optional absent", in: `{"text": "a"}` + "\n" + `{"text": "b"}`, o: dataset.Options{Format: dataset.JSONL, Columns: []dataset.Column{text, optLabel}},
			want: [][]string{{"a", ""}, {"b", ""}}, has: []bool{true, false}},
		{name: "jsonl optional on some lines only", in: `{"text": "a"}` + "\n" + `{"text": "b", "label": 1}`, o: dataset.Options{Format: dataset.JSONL, Columns: []dataset.Column{text, optLabel}},
			wantErr: []string{`line 2: has a "label" field but line 1 has none: give every line a label or none`}},
		{name: "jsonl optional then missing", in: `{"text": "a", "label": 1}` + "\n" + `{"text": "b"}`, o: dataset.Options{Format: dataset.JSONL, Columns: []dataset.Column{text, optLabel}},
			wantErr: []string{`line 2: no "label" field (fields: "text")`}},
		{name: "jsonl missing field", in: "{}\n", o: dataset.Options{Format: dataset.JSONL, Columns: []dataset.Column{text}, Name: "d.jsonl"},
			wantErr: []string{`d.jsonl:1: no "text" field (fields: none): name the text field with --text-column`}},
		{name: "jsonl bad json", in: `{"text":"ok"}` + "\n\n" + `{"text": oops}`, o: dataset.Options{Format: dataset.JSONL, Columns: []dataset.Column{text, optLabel}},
			wantErr: []string{"line 3: not valid JSON (invalid character", `like {"text": "...", "label": "..."}`}},
		{name: "jsonl array", in: `["text"]`, o: dataset.Options{Format: dataset.JSONL, Columns: []dataset.Column{text}},
			wantErr: []string{"line 1: an array, not an object"}},
		{name: "jsonl null", in: "null", o: dataset.Options{Format: dataset.JSONL, Columns: []dataset.Column{text}},
			wantErr: []string{"line 1: null, not an object"}},
		{name: "jsonl text a number", in: `{"text": 5}`, o: dataset.Options{Format: dataset.JSONL, Columns: []dataset.Column{text}},
			wantErr: []string{`the "text" field is a number, not a string`}},
		{name: "jsonl text null", in: `{"text": null}`, o: dataset.Options{Format: dataset.JSONL, Columns: []dataset.Column{text}},
			wantErr: []string{`the "text" field is null, not a string`}},
		{name: "jsonl label an object", in: `{"text": "a", "label": {"id": 1}}`, o: dataset.Options{Format: dataset.JSONL, Columns: []dataset.Column{text, label}},
			wantErr: []string{`the "label" field is an object: write it as a string or a number`}},
		{name: "jsonl latin1", in: "{\"text\": \"caf\xe9\"}", o: dataset.Options{Format: dataset.JSONL, Columns: []dataset.Column{text}},
			wantErr: []string{"line 1: not valid UTF-8"}},

		{name: "unknown format", in: "a", o: dataset.Options{Format: "xml", Columns: []dataset.Column{text}}, wantErr: []string{`unknown format "xml"`}},
		{name: "no columns", in: "a", o: dataset.Options{Format: dataset.TXT}, wantErr: []string{"no column"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			records, has, err := dataset.Read(strings.NewReader(tt.in), tt.o)
			if tt.wantErr != nil {
				if err == nil {
					t.Fatalf("Read = %v, want an error", records)
				}
				for _, s := range tt.wantErr {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not contain %q", err, s)
					}
				}
				if strings.Contains(err.Error(), "\n") {
					t.Errorf("error %q spans lines, want one", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var values [][]string
			var lines []int
			for _, r := range records {
				values, lines = append(values, r.Values), append(lines, r.Line)
			}
			if !slices.EqualFunc(values, tt.want, slices.Equal) {
				t.Errorf("values %q, want %q", values, tt.want)
			}
			if tt.lines != nil && !slices.Equal(lines, tt.lines) {
				t.Errorf("lines %v, want %v", lines, tt.lines)
			}
			if !slices.Equal(has, tt.has) {
				t.Errorf("has %v, want %v", has, tt.has)
			}
		})
	}
}

func TestFormats(t *testing.T) {
	for path, want := range map[string]dataset.Format{
		"a.txt": dataset.TXT, "A.TXT": dataset.TXT, "d/a.csv": dataset.CSV, "a.Tsv": dataset.TSV,
		"a.jsonl": dataset.JSONL, "a.ndjson": dataset.JSONL, "a.json": "", "texts": "", "a.csv.gz": "",
	} {
		if got := dataset.FormatOf(path); got != want {
			t.Errorf("FormatOf(%q) = %q, want %q", path, got, want)
		}
	}
	for name, want := range map[string]dataset.Format{"CSV": dataset.CSV, "ndjson": dataset.JSONL, "jsonl": dataset.JSONL, "xml": "", "": ""} {
		if got := dataset.ParseFormat(name); got != want {
			t.Errorf("ParseFormat(%q) = %q, want %q", name, got, want)
		}
	}
}

func TestReadLongLines(t *testing.T) {
	o := dataset.Options{Format: dataset.TXT, Columns: []dataset.Column{text}}
	long := strings.Repeat("x", dataset.MaxLine)
	records, _, err := dataset.Read(strings.NewReader("short\n"+long+"\r\nafter\n"), o)
	if err != nil {
		t.Fatalf("a %d-byte line: %v", dataset.MaxLine, err)
	}
	if len(records) != 3 || len(records[1].Values[0]) != dataset.MaxLine {
		t.Errorf("got %d texts, want 3 with the second %d bytes", len(records), dataset.MaxLine)
	}

	_, _, err = dataset.Read(strings.NewReader("short\n"+strings.Repeat("x", 2*dataset.MaxLine)+"\n"), o)
	if err == nil || !strings.Contains(err.Error(), "line 2") || !strings.Contains(err.Error(), "longer than") {
		t.Errorf("a %d-byte line: err = %v, want line 2 too long", 2*dataset.MaxLine, err)
	}
	o.Format = dataset.JSONL
	_, _, err = dataset.Read(strings.NewReader(`{"text":"`+strings.Repeat("x", 2*dataset.MaxLine)+`"}`), o)
	if err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("JSONL with a %d-byte line: err = %v, want line 1 too long", 2*dataset.MaxLine, err)
	}
}

// checkRead holds what Read returns for any input to what it promises: an error of one
// line, or records in file order whose values are UTF-8, one per column.
func checkRead(t *testing.T, in string, o dataset.Options) []dataset.Record {
	t.Helper()
	records, has, err := dataset.Read(strings.NewReader(in), o)
	if err != nil {
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("Read(%q): error spans lines: %q", in, err)
		}
		return nil
	}
	if len(has) != len(o.Columns) {
		t.Errorf("Read(%q): has %v for %d columns", in, has, len(o.Columns))
	}
	line := 0
	for _, r := range records {
		if r.Line <= line {
			t.Errorf("Read(%q): record on line %d after one on line %d", in, r.Line, line)
		}
		line = r.Line
		if len(r.Values) != len(o.Columns) {
			t.Errorf("Read(%q): %d values for %d columns", in, len(r.Values), len(o.Columns))
		}
		for _, v := range r.Values {
			if !utf8.ValidString(v) {
				t.Errorf("Read(%q): value %q is not UTF-8", in, v)
			}
		}
	}
	return records
}

func FuzzReadTXT(f *testing.F) {
	for _, s := range []string{"", "a\nb\n", "\ufeffx\r\n\r\n y \n", "\n\n\n", "caf\xe9\n", "\r", "a\rb", "\ufeff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, r := range checkRead(t, s, dataset.Options{Format: dataset.TXT, Columns: []dataset.Column{text}}) {
			if text := r.Values[0]; strings.TrimSpace(text) == "" || strings.ContainsAny(text, "\n") {
				t.Errorf("Read(%q) returned text %q", s, text)
			}
		}
	})
}

func FuzzReadJSONL(f *testing.F) {
	for _, s := range []string{
		`{"text":"a"}`,
		"{\"text\":\"a\"}\n\n{\"text\":\"\\u00e9\\n\", \"x\": [1, {}]}\r\n",
		`{"body":"a","text":1}`,
		`{"text":null}`,
		`null`,
		`[]`,
		`"text"`,
		`{"text":"` + "\xff" + `"}`,
		"\ufeff{\"text\":\"bom\"}",
		`{"text":"a"} {"text":"b"}`,
		`{"text":"a","label":1e400}`,
	} {
		f.Add(s, "")
		f.Add(s, "body")
	}
	f.Fuzz(func(t *testing.T, s, column string) {
		checkRead(t, s, dataset.Options{Format: dataset.JSONL, Columns: []dataset.Column{{Name: column}, optLabel}})
	})
}

func FuzzReadCSV(f *testing.F) {
	for _, s := range []string{
		"text\na\n",
		"id,text\n1,\"a, \"\"b\"\"\"\n2,\n",
		"\ufefftext\r\n\"multi\nline\"\r\n",
		"id\ttext\n1\tx\n",
		"text\nsay \"hi\"\n",
		"a,b\n1\n",
		"",
		"text\n\"open",
	} {
		f.Add(s, false, "")
		f.Add(s, true, "text")
		f.Add(s, false, "b")
	}
	f.Fuzz(func(t *testing.T, s string, tsv bool, column string) {
		o := dataset.Options{Format: dataset.CSV, Columns: []dataset.Column{{Name: column}, optLabel}, Ragged: tsv}
		if tsv {
			o.Format = dataset.TSV
		}
		checkRead(t, s, o)
	})
}
