//go:build cgo && ort

package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ortserve/ortserve/models"
	"github.com/ortserve/ortserve/tokenize"
	"github.com/ortserve/ortserve/tokenize/hf"
)

// The reranker: a MiniLM cross-encoder (BertForSequenceClassification, one logit) that
// scripts/models builds into $ORTSERVE_MODELS/reranker, with the Python reference's scores
// (reranker.json: sentence-transformers CrossEncoder) and pair tokenizations
// (pair_tokens.json: transformers' tokenizer([query], [passage], truncation=True)) in
// testdata/golden (scripts/models/reference.py).
type goldenRerank struct {
	MaxLength int      `json:"max_length"`
	Passages  []string `json:"passages"`
	Items     []struct {
		Query     string    `json:"query"`
		ExpectTop *int      `json:"expect_top"` // the passage that must come first; null: none
		Order     []int     `json:"order"`      // passages by score, highest first
		Logits    []float64 `json:"logits"`     // torch's, one per passage
		Scores    []float64 `json:"scores"`     // sigmoid(logits): CrossEncoder.predict
	} `json:"items"`
}

type goldenPairTokens struct {
	Items []struct {
		Query     string  `json:"query"`
		Passage   string  `json:"passage"`
		MaxLength int     `json:"max_length"`
		IDs       []int64 `json:"ids"`
		TypeIDs   []int64 `json:"type_ids"`
		Truncated bool    `json:"truncated"`
	} `json:"items"`
}

// rerankerDir is the reranker's folder; the test fails, naming what to run, when it is not
// there: the integration suite is never skipped.
func rerankerDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(os.Getenv("ORTSERVE_MODELS"), "reranker")
	if _, err := os.Stat(filepath.Join(dir, models.ConfigFile)); err != nil {
		t.Fatalf("no reranker in the model repository (%v): run `make models`, which builds it (scripts/models)", err)
	}
	return dir
}

// rerankerAndSentiment is a repository of the reranker and the sentiment classifier's fp32
// (the only version the tests ask it for).
func rerankerAndSentiment(t *testing.T) string {
	t.Helper()
	root := versionRepo(t, "sentiment", "fp32")
	if err := os.Symlink(rerankerDir(t), filepath.Join(root, "reranker")); err != nil {
		t.Fatal(err)
	}
	return root
}

type rank struct {
	Index int     `json:"index"`
	Text  string  `json:"text"`
	Score float64 `json:"score"`
}

// TestRerankEndToEnd runs the real server on the real reranker: relevant passages first on
// both routes, scores equal to the torch reference's, and pairs tokenized as HF tokenizers
// does.
func TestRerankEndToEnd(t *testing.T) {
	t.Parallel()
	url := startServer(t, "--models", rerankerAndSentiment(t))
	const query = "What is the capital of France?"
	passages := []string{
		"The Great Barrier Reef is the world's largest coral reef system.",
		"Paris is the capital and most populous city of France.",
		"Bananas are rich in potassium.",
	}

	t.Run("/rerank puts the relevant passage first", func(t *testing.T) {
		var ranks []rank
		resp := postJSON(t, url+"/rerank", map[string]any{"query": query, "texts": passages, "return_text": true}, &ranks)
		if resp.StatusCode != 200 || len(ranks) != 3 {
			t.Fatalf("%d, %d ranks", resp.StatusCode, len(ranks))
		}
		if ranks[0].Index != 1 || ranks[0].Text != passages[1] || ranks[0].Score < 0.5 || ranks[2].Score > 0.5 {
			t.Errorf("ranks %+v: want passage 1 first, above 0.5, and the last below", ranks)
		}
		for i := 1; i < len(ranks); i++ {
			if ranks[i].Score > ranks[i-1].Score || ranks[i].Score <= 0 || ranks[i].Score >= 1 {
				t.Errorf("ranks %+v: want sigmoid scores, highest first", ranks)
			}
		}
		if got := resp.Header.Get("x-model-version"); !strings.HasPrefix(got, "reranker/") {
			t.Errorf("x-model-version %q", got)
		}
		var raw []rank
		postJSON(t, url+"/rerank", map[string]any{"query": query, "texts": passages, "raw_scores": true}, &raw)
		for i, r := range raw {
			if s := 1 / (1 + math.Exp(-r.Score)); r.Index != ranks[i].Index || math.Abs(s-ranks[i].Score) > 1e-6 {
				t.Errorf("raw %+v: sigmoid %v, the score %v", r, s, ranks[i].Score)
			}
		}
	})

	t.Run("/v1/rerank puts the relevant passage first", func(t *testing.T) {
		var out struct {
			Model   string `json:"model"`
			Results []struct {
				Index          int     `json:"index"`
				RelevanceScore float64 `json:"relevance_score"`
				Document       struct {
					Text string `json:"text"`
				} `json:"document"`
			} `json:"results"`
			Usage struct {
				TotalTokens int `json:"total_tokens"`
			} `json:"usage"`
		}
		docs := []any{passages[0], map[string]string{"text": passages[1]}, passages[2]}
		resp := postJSON(t, url+"/v1/rerank", map[string]any{"model": "reranker", "query": query, "documents": docs, "top_n": 2, "return_documents": true}, &out)
		if resp.StatusCode != 200 || len(out.Results) != 2 || out.Results[0].Index != 1 || out.Results[0].Document.Text != passages[1] {
			t.Fatalf("%d %+v: want 2 results, passage 1 first", resp.StatusCode, out)
		}
		if !strings.HasPrefix(out.Model, "reranker/") || out.Usage.TotalTokens <= 0 || resp.Header.Get("x-compute-tokens") != jsonInt(out.Usage.TotalTokens) {
			t.Errorf("model %q, usage %d, x-compute-tokens %q", out.Model, out.Usage.TotalTokens, resp.Header.Get("x-compute-tokens"))
		}
	})

	t.Run("scores equal the torch reference", func(t *testing.T) {
		var golden goldenRerank
		readGolden(t, "reranker.json", &golden)
		if len(golden.Items) == 0 || len(golden.Passages) == 0 {
			t.Fatal("no golden items")
		}
		for i, g := range golden.Items {
			var raw, ranks []rank
			postJSON(t, url+"/rerank", map[string]any{"query": g.Query, "texts": golden.Passages, "raw_scores": true, "model": "reranker", "version": "fp32"}, &raw)
			resp := postJSON(t, url+"/rerank", map[string]any{"query": g.Query, "texts": golden.Passages, "model": "reranker", "version": "fp32"}, &ranks)
			if len(raw) != len(golden.Passages) || len(ranks) != len(golden.Passages) {
				t.Fatalf("item %d: %d and %d ranks for %d passages", i, len(raw), len(ranks), len(golden.Passages))
			}
			if resp.Header.Get("x-truncated-inputs") != "1" {
				t.Errorf("item %d: x-truncated-inputs %q: one golden passage is over the maximum length", i, resp.Header.Get("x-truncated-inputs"))
			}
			order := make([]int, len(ranks))
			for j := range ranks {
				order[j] = ranks[j].Index
				if d := math.Abs(raw[j].Score - g.Logits[raw[j].Index]); d > 1e-4 {
					t.Errorf("item %d %q, passage %d: logit %v, the reference %v (off by %.2g)", i, g.Query, raw[j].Index, raw[j].Score, g.Logits[raw[j].Index], d)
				}
				if d := math.Abs(ranks[j].Score - g.Scores[ranks[j].Index]); d > 1e-4 {
					t.Errorf("item %d %q, passage %d: score %v, the reference %v (off by %.2g)", i, g.Query, ranks[j].Index, ranks[j].Score, g.Scores[ranks[j].Index], d)
				}
			}
			if !slices.Equal(order, g.Order) {
				t.Errorf("item %d %q: order %v, the reference %v", i, g.Query, order, g.Order)
			}
			if g.ExpectTop != nil && order[0] != *g.ExpectTop {
				t.Errorf("item %d %q: passage %d first, want %d", i, g.Query, order[0], *g.ExpectTop)
			}

			// The same through Cohere's and Jina's shape.
			var out struct {
				Results []struct {
					Index          int     `json:"index"`
					RelevanceScore float64 `json:"relevance_score"`
				} `json:"results"`
			}
			postJSON(t, url+"/v1/rerank", map[string]any{"model": "reranker:fp32", "query": g.Query, "documents": golden.Passages}, &out)
			for j, r := range out.Results {
				if r.Index != g.Order[j] || math.Abs(r.RelevanceScore-g.Scores[r.Index]) > 1e-4 {
					t.Errorf("item %d, /v1/rerank result %d: %+v, want passage %d with %v", i, j, r, g.Order[j], g.Scores[g.Order[j]])
				}
			}
		}
	})

	t.Run("pairs tokenize as HF tokenizers does", func(t *testing.T) {
		var golden goldenPairTokens
		readGolden(t, "pair_tokens.json", &golden)
		truncated := 0
		for i, g := range golden.Items {
			tok, err := hf.Load(filepath.Join(rerankerDir(t), "tokenizer.json"), g.MaxLength)
			if err != nil {
				t.Fatal(err)
			}
			encs, err := tok.EncodePairs([]tokenize.Pair{{A: g.Query, B: g.Passage}}, tokenize.Options{Truncate: true})
			tok.Close()
			if err != nil {
				t.Fatal(err)
			}
			if e := encs[0]; !slices.Equal(e.IDs, g.IDs) || !slices.Equal(e.TypeIDs, g.TypeIDs) || e.Truncated != g.Truncated {
				t.Errorf("item %d (%.30q, %.30q, max %d):\n got  %v %v truncated=%v\n want %v %v truncated=%v", i, g.Query, g.Passage, g.MaxLength, e.IDs, e.TypeIDs, e.Truncated, g.IDs, g.TypeIDs, g.Truncated)
			}
			if g.Truncated {
				truncated++
			}
		}
		if truncated == 0 {
			t.Error("the golden pairs include none over the maximum length")
		}
	})

	t.Run("/predict takes pairs", func(t *testing.T) {
		var preds [][]struct {
			Score float32 `json:"score"`
			Label string  `json:"label"`
		}
		batch := [][]string{{"A gorgeous, moving film."}, {"A gorgeous, moving film.", "I loved it."}}
		resp := postJSON(t, url+"/predict", map[string]any{"inputs": batch, "model": "sentiment", "raw_scores": true}, &preds)
		if resp.StatusCode != 200 || len(preds) != 2 || preds[0][0].Score == preds[1][0].Score {
			t.Errorf("%d %+v: want two answers, the pair's not the single text's", resp.StatusCode, preds)
		}
	})

	t.Run("tasks name their routes", func(t *testing.T) {
		for _, tt := range []struct {
			path string
			body any
			want string
		}{
			{"/embed", map[string]any{"inputs": "a", "model": "reranker"}, "use /rerank or /v1/rerank"},
			{"/predict", map[string]any{"inputs": "a", "model": "reranker"}, "use /rerank or /v1/rerank"},
			{"/rerank", map[string]any{"query": "a", "texts": []string{"b"}, "model": "sentiment"}, "use /predict"},
		} {
			resp, raw := postRaw(t, url+tt.path, tt.body)
			if resp.StatusCode != 400 || !strings.Contains(string(raw), tt.want) {
				t.Errorf("%s: %d %s, want 400 saying %q", tt.path, resp.StatusCode, raw, tt.want)
			}
		}
	})
}

func jsonInt(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}
