//go:build cgo && ort

package main

import (
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestTEIMoreEndToEnd runs TEI's routes past /embed on the real minilm and reranker: the
// per-token vectors mean-pool to /embed's vector, /similarity is the cosine of /embed's,
// /decode inverts /tokenize, a text cut on the left keeps its end, and /vertex,
// /invocations and /ping answer as the routes they wrap.
func TestTEIMoreEndToEnd(t *testing.T) {
	root := versionRepo(t, "minilm", "fp32")
	if err := os.Symlink(rerankerDir(t), filepath.Join(root, "reranker")); err != nil {
		t.Fatal(err)
	}
	url := startServer(t, "--models", root)
	texts := []string{"The cat sat on the mat.", "A dog barked."}

	var all [][][]float32
	var pooled [][]float32
	postJSON(t, url+"/embed_all", map[string]any{"inputs": texts, "model": "minilm"}, &all)
	postJSON(t, url+"/embed", map[string]any{"inputs": texts, "model": "minilm", "normalize": false}, &pooled)
	var toks [][]struct {
		ID int64 `json:"id"`
	}
	postJSON(t, url+"/tokenize", map[string]any{"inputs": texts, "model": "minilm"}, &toks)
	if len(all) != 2 || len(pooled) != 2 || len(toks) != 2 {
		t.Fatalf("embed_all %d, embed %d, tokenize %d answers", len(all), len(pooled), len(toks))
	}
	for i := range texts {
		if len(all[i]) != len(toks[i]) {
			t.Errorf("text %d: %d token vectors for %d tokens", i, len(all[i]), len(toks[i]))
		}
		mean := make([]float32, len(pooled[i]))
		for _, v := range all[i] {
			for j, x := range v {
				mean[j] += x / float32(len(all[i]))
			}
		}
		if c := cosine(mean, pooled[i]); c < 0.9999 {
			t.Errorf("text %d: the mean of the token vectors is at cosine %v from /embed's", i, c)
		}
	}

	var sims []float32
	postJSON(t, url+"/similarity", map[string]any{"inputs": map[string]any{"source_sentence": texts[0], "sentences": texts}, "model": "minilm"}, &sims)
	if len(sims) != 2 || sims[0] < 0.9999 || float64(sims[1])-cosine(pooled[0], pooled[1]) > 1e-5 || cosine(pooled[0], pooled[1])-float64(sims[1]) > 1e-5 {
		t.Errorf("similarity %v, want [1, %v]", sims, cosine(pooled[0], pooled[1]))
	}

	ids := make([]int64, len(toks[0]))
	for i, tok := range toks[0] {
		ids[i] = tok.ID
	}
	var decoded []string
	postJSON(t, url+"/decode", map[string]any{"ids": [][]int64{ids}, "model": "minilm"}, &decoded)
	if !slices.Equal(decoded, []string{"the cat sat on the mat."}) {
		t.Errorf("decode %q", decoded)
	}

	// A text past the maximum, cut on either side: left keeps its end.
	long := strings.Repeat("cats purr softly. ", 100) + strings.Repeat("stock markets fell. ", 100)
	var right, left [][]float32
	postJSON(t, url+"/embed", map[string]any{"inputs": []string{long}, "model": "minilm", "truncate": true}, &right)
	resp := postJSON(t, url+"/embed", map[string]any{"inputs": []string{long}, "model": "minilm", "truncate": true, "truncation_direction": "left"}, &left)
	if resp.Header.Get("x-truncated-inputs") != "1" || len(left) != 1 || len(right) != 1 || cosine(left[0], right[0]) > 0.9 {
		t.Errorf("left and right cuts of a long text: truncated %q, cosine %v", resp.Header.Get("x-truncated-inputs"), cosine(left[0], right[0]))
	}
	var ranks [][]rank
	postJSON(t, url+"/vertex", map[string]any{"instances": []any{
		map[string]any{"query": "pets", "texts": texts, "truncation_direction": "left"},
	}}, &struct{ Predictions *[][]rank }{&ranks})
	if len(ranks) != 1 || len(ranks[0]) != 2 {
		t.Errorf("vertex rerank: %v", ranks)
	}
	var inv [][]float32
	postJSON(t, url+"/invocations", map[string]any{"inputs": texts, "model": "minilm", "normalize": false}, &inv)
	if len(inv) != 2 || cosine(inv[0], pooled[0]) < 0.9999 {
		t.Errorf("invocations: %d vectors", len(inv))
	}
	if r, err := http.Get(url + "/ping"); err != nil || r.StatusCode != 200 {
		t.Errorf("/ping: %v %v", r, err)
	} else {
		r.Body.Close()
	}
}
