package bench

import (
	"cmp"
	_ "embed"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/ortserve/ortserve/bench/dataset"
)

// builtIn is the built-in workload: one text per line.
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
	texts, err := readTexts(strings.NewReader(builtIn), dataset.TXT, "")
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
// column defaults to "text" when empty; it is ignored for .txt. Rows may be ragged as long as
// they reach the column, and blank texts are skipped. An error says what is wrong with the
// file, where, and what to do about it; a file with no texts is an error too.
func LoadWorkload(path, column string) (*Workload, error) {
	format := dataset.FormatOf(path)
	if format == "" {
		return nil, fmt.Errorf("workload %s: unknown format %q: use .txt (one text per line), .csv or .tsv (with a header row), or .jsonl/.ndjson (one JSON object per line)", path, strings.ToLower(filepath.Ext(path)))
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("workload: %w", err)
	}
	defer f.Close()
	texts, err := readTexts(f, format, column)
	if err != nil {
		return nil, fmt.Errorf("workload %s: %w", path, err)
	}
	if len(texts) == 0 {
		return nil, fmt.Errorf("workload %s: no texts in the file: give a file with at least one non-blank text", path)
	}
	return &Workload{Source: path, Texts: texts}, nil
}

// readTexts reads the non-blank texts of r; errors name the line.
func readTexts(r io.Reader, format dataset.Format, column string) ([]string, error) {
	col := dataset.Column{Name: cmp.Or(column, "text"), Role: "text", Flag: "--column"}
	records, _, err := dataset.Read(r, dataset.Options{Format: format, Columns: []dataset.Column{col}, Ragged: true})
	if err != nil {
		return nil, err
	}
	var texts []string
	for _, rec := range records {
		if strings.TrimSpace(rec.Values[0]) != "" {
			texts = append(texts, rec.Values[0])
		}
	}
	return texts, nil
}
