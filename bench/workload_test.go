package bench_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ortserve/ortserve/bench"
)

func TestLoadWorkload(t *testing.T) {
	tests := []struct {
		name    string
		file    string // written to a temp dir; "" leaves the file missing
		content string
		column  string
		want    []string
		wantErr []string // substrings the error must hold; nil: no error
	}{
		// Text files.
		{name: "txt", file: "w.txt", content: "first text\n\n  \nsecond text\r\nthird, no newline", want: []string{"first text", "second text", "third, no newline"}},
		{name: "txt bom", file: "w.txt", content: "\ufeffhello\n", want: []string{"hello"}},
		{name: "txt upper ext", file: "W.TXT", content: "a\n", want: []string{"a"}},
		{name: "txt column ignored", file: "w.txt", content: "a\n", column: "body", want: []string{"a"}},
		{name: "txt empty", file: "w.txt", content: "", wantErr: []string{"w.txt", "no texts"}},
		{name: "txt blank", file: "w.txt", content: "\n \r\n\t\n", wantErr: []string{"w.txt", "no texts"}},
		{name: "txt latin1", file: "w.txt", content: "ok\ncaf\xe9\n", wantErr: []string{"w.txt", "line 2", "UTF-8"}},

		// CSV and TSV.
		{name: "csv", file: "w.csv", content: "id,text,label\n1,good product,pos\n2,\"bad, really \"\"bad\"\"\",neg\n", want: []string{"good product", `bad, really "bad"`}},
		{name: "csv crlf multiline", file: "w.csv", content: "text\r\n\"two\nlines\"\r\nsingle\r\n", want: []string{"two\nlines", "single"}},
		{name: "csv column", file: "w.csv", content: "review,stars\nnice,5\n", column: "review", want: []string{"nice"}},
		{name: "csv header spaces bom", file: "w.csv", content: "\ufeffid, text \n1,hi\n", want: []string{"hi"}},
		{name: "csv blank cells skipped", file: "w.csv", content: "id,text\n1,\n2,  \n3,x\n", want: []string{"x"}},
		{name: "csv ragged rows", file: "w.csv", content: "text,id\nhi\nthere,2,extra\n", want: []string{"hi", "there"}},
		{name: "csv missing column", file: "w.csv", content: "id,review\n1,hi\n", wantErr: []string{"w.csv", `no "text" column`, `"id", "review"`}},
		{name: "csv missing named column", file: "w.csv", content: "id,text\n1,hi\n", column: "body", wantErr: []string{`no "body" column`, `"id", "text"`}},
		{name: "csv short row", file: "w.csv", content: "id,text\n1,a\n2\n", wantErr: []string{"w.csv", "line 3", `column "text"`}},
		{name: "csv bare quote", file: "w.csv", content: "text\nsay \"hi\" now\n", wantErr: []string{"w.csv", "line 2", "double the quotes"}},
		{name: "csv unterminated quote", file: "w.csv", content: "text\n\"open\n", wantErr: []string{"w.csv", "line 2", "quote"}},
		{name: "csv empty", file: "w.csv", content: "", wantErr: []string{"w.csv", "empty file", "header"}},
		{name: "csv header only", file: "w.csv", content: "text\n", wantErr: []string{"w.csv", "no texts"}},
		{name: "csv latin1", file: "w.csv", content: "text\nok\ncaf\xe9\n", wantErr: []string{"line 3", "UTF-8"}},
		{name: "tsv", file: "w.tsv", content: "id\ttext\n1\tcommas, fine\n2\tsecond\n", want: []string{"commas, fine", "second"}},
		{name: "tsv missing column", file: "w.tsv", content: "id,text\n1,hi\n", wantErr: []string{`no "text" column`, `"id,text"`}},

		// JSON Lines.
		{name: "jsonl", file: "w.jsonl", content: "{\"text\": \"one\", \"label\": 1}\n\n{\"text\":\"two \\\"quoted\\\"\"}\r\n", want: []string{"one", `two "quoted"`}},
		{name: "ndjson column", file: "w.ndjson", content: `{"body":"hi","text":5}` + "\n", column: "body", want: []string{"hi"}},
		{name: "jsonl blank text skipped", file: "w.jsonl", content: `{"text":""}` + "\n" + `{"text":"x"}`, want: []string{"x"}},
		{name: "jsonl bad json", file: "w.jsonl", content: `{"text":"ok"}` + "\n\n" + `{"text": oops}` + "\n", wantErr: []string{"w.jsonl", "line 3", "not valid JSON"}},
		{name: "jsonl array", file: "w.jsonl", content: `["text"]`, wantErr: []string{"line 1", "an array, not an object"}},
		{name: "jsonl null", file: "w.jsonl", content: "null", wantErr: []string{"line 1", "null, not an object"}},
		{name: "jsonl missing field", file: "w.jsonl", content: `{"text":"a"}` + "\n" + `{"review":"b","id":2}`, wantErr: []string{"line 2", `no "text" field`, `"id", "review"`}},
		{name: "jsonl not string", file: "w.jsonl", content: `{"text":["a"]}`, wantErr: []string{"line 1", "an array, not a string"}},
		{name: "jsonl empty", file: "w.jsonl", content: "\n\n", wantErr: []string{"w.jsonl", "no texts"}},

		// Files that cannot be read.
		{name: "unknown extension", file: "w.json", content: `["a"]`, wantErr: []string{"w.json", `".json"`, ".txt", ".csv", ".tsv", ".jsonl"}},
		{name: "no extension", file: "texts", content: "a\n", wantErr: []string{"unknown format", ".txt"}},
		{name: "missing file", file: "", wantErr: []string{"missing.txt", "no such file"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "missing.txt")
			if tt.file != "" {
				path = filepath.Join(dir, tt.file)
				if err := os.WriteFile(path, []byte(tt.content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			w, err := bench.LoadWorkload(path, tt.column)
			if tt.wantErr != nil {
				if err == nil {
					t.Fatalf("LoadWorkload = %q, want an error", w.Texts)
				}
				msg := err.Error()
				for _, s := range tt.wantErr {
					if !strings.Contains(msg, s) {
						t.Errorf("error %q does not contain %q", msg, s)
					}
				}
				if strings.Contains(msg, "\n") {
					t.Errorf("error %q spans lines, want one", msg)
				}
				return
			}
			if err != nil {
				t.Fatalf("LoadWorkload: %v", err)
			}
			if w.Source != path {
				t.Errorf("Source = %q, want %q", w.Source, path)
			}
			if !slices.Equal(w.Texts, tt.want) {
				t.Errorf("Texts = %q, want %q", w.Texts, tt.want)
			}
		})
	}
}

func TestWorkloadRequest(t *testing.T) {
	w := &bench.Workload{Texts: []string{"a", "b", "c", "d", "e"}}
	tests := []struct {
		i, inputs int
		want      []string
	}{
		{0, 1, []string{"a"}},
		{4, 1, []string{"e"}},
		{5, 1, []string{"a"}},
		{0, 2, []string{"a", "b"}},
		{1, 2, []string{"c", "d"}},
		{2, 2, []string{"e", "a"}},                          // wraps inside a request
		{3, 2, []string{"b", "c"}},                          // and carries on after it
		{0, 7, []string{"a", "b", "c", "d", "e", "a", "b"}}, // more inputs than texts
		{1, 7, []string{"c", "d", "e", "a", "b", "c", "d"}},
		{1_000_000_000_000, 3, []string{"a", "b", "c"}}, // 3e12 mod 5 = 0
		// i×inputs overflows int; 2^62 ≡ 4 (mod 5), so 2^62+1 ≡ 0 and the request starts at "a".
		{1<<62 + 1, 3, []string{"a", "b", "c"}},
		{-1, 1, []string{"e"}},
		{0, 0, nil},
		{3, -1, nil},
	}
	for _, tt := range tests {
		got := w.Request(tt.i, tt.inputs)
		if !slices.Equal(got, tt.want) {
			t.Errorf("Request(%d, %d) = %q, want %q", tt.i, tt.inputs, got, tt.want)
		}
	}

	got := w.Request(0, 2)
	got[0] = "changed"
	if w.Texts[0] != "a" {
		t.Error("writing to Request's slice changed the workload")
	}
	if got := (&bench.Workload{}).Request(3, 2); got != nil {
		t.Errorf("Request on an empty workload = %q, want nil", got)
	}
}

func TestSummarize(t *testing.T) {
	tests := []struct {
		name string
		xs   []float64
		want bench.Distribution
	}{
		{"empty", nil, bench.Distribution{}},
		{"one", []float64{7}, bench.Distribution{Min: 7, P50: 7, P95: 7, Max: 7, Mean: 7}},
		{"two", []float64{4, 2}, bench.Distribution{Min: 2, P50: 2, P95: 4, Max: 4, Mean: 3}},
		{"four", []float64{4, 1, 3, 2}, bench.Distribution{Min: 1, P50: 2, P95: 4, Max: 4, Mean: 2.5}},
		// 1..20: p50 is the 10th value, p95 the 19th.
		{"twenty", seq(20), bench.Distribution{Min: 1, P50: 10, P95: 19, Max: 20, Mean: 10.5}},
		// 1..100: p50 is the 50th value, p95 the 95th.
		{"hundred", seq(100), bench.Distribution{Min: 1, P50: 50, P95: 95, Max: 100, Mean: 50.5}},
		{"ties", []float64{5, 5, 5, 1}, bench.Distribution{Min: 1, P50: 5, P95: 5, Max: 5, Mean: 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := slices.Clone(tt.xs)
			if got := bench.Summarize(in); got != tt.want {
				t.Errorf("Summarize(%v) = %+v, want %+v", tt.xs, got, tt.want)
			}
			if !slices.Equal(in, tt.xs) {
				t.Errorf("Summarize reordered its input: %v", in)
			}
		})
	}
}

// seq returns 1, 2, …, n in reverse order, so Summarize has to sort.
func seq(n int) []float64 {
	xs := make([]float64, n)
	for i := range xs {
		xs[i] = float64(n - i)
	}
	return xs
}

func TestWorkloadSummary(t *testing.T) {
	w := &bench.Workload{Source: "x.txt", Texts: []string{"one", "two words", "café au lait", "  spaced   out  "}}
	got := w.Summary()
	want := bench.WorkloadSummary{
		Source: "x.txt",
		Texts:  4,
		// Characters are code points: "café au lait" is 12, not 13 bytes.
		Chars: bench.Distribution{Min: 3, P50: 9, P95: 16, Max: 16, Mean: 10},
		Words: bench.Distribution{Min: 1, P50: 2, P95: 3, Max: 3, Mean: 2},
	}
	if got.Tokens != nil {
		t.Errorf("Tokens = %+v, want nil", got.Tokens)
	}
	if got.Source != want.Source || got.Texts != want.Texts || got.Chars != want.Chars || got.Words != want.Words {
		t.Errorf("Summary() = %+v, want %+v", got, want)
	}
}

func TestBuiltIn(t *testing.T) {
	w := bench.BuiltIn()
	if w.Source != "built-in" {
		t.Errorf("Source = %q, want built-in", w.Source)
	}
	if n := len(w.Texts); n < 150 || n > 300 {
		t.Errorf("%d texts, want about 200", n)
	}
	seen := make(map[string]bool)
	var short, long int
	for _, text := range w.Texts {
		if strings.TrimSpace(text) != text || text == "" {
			t.Errorf("text %q is blank or has surrounding space", text)
		}
		if !utf8.ValidString(text) {
			t.Errorf("text %q is not UTF-8", text)
		}
		if seen[text] {
			t.Errorf("text %q appears twice", text)
		}
		seen[text] = true
		switch n := len(strings.Fields(text)); {
		case n <= 4:
			short++
		case n >= 40:
			long++
		}
	}
	if short < 5 || long < 5 {
		t.Errorf("%d texts of ≤4 words and %d of ≥40, want at least 5 of each", short, long)
	}
	s := w.Summary()
	if s.Words.P50 < 8 || s.Words.P50 > 20 {
		t.Errorf("median %v words, want a sentence's worth (8–20)", s.Words.P50)
	}
	if s.Words.Max > 100 {
		t.Errorf("longest text %v words, want at most 100", s.Words.Max)
	}

	// Each call is a fresh workload: changing one does not change the next.
	w.Texts[0] = "changed"
	if bench.BuiltIn().Texts[0] == "changed" {
		t.Error("BuiltIn returned a shared workload")
	}
}
