//go:build cgo && ort

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Golden outputs from the Python reference stack (scripts/models/reference.py).
const goldenDir = "../../testdata/golden"

type goldenEmbeddings struct {
	MaxLength int `json:"max_length"`
	Items     []struct {
		Index int       `json:"index"`
		Torch []float32 `json:"torch"` // sentence-transformers
	} `json:"items"`
}

type goldenLogits struct {
	Items []struct {
		Index  int       `json:"index"`
		Label  string    `json:"label"`
		Logits []float32 `json:"logits"` // onnxruntime (Python) on fp32.onnx
		Probs  []float32 `json:"probs"`
	} `json:"items"`
}

func readGolden(t *testing.T, name string, v any) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(goldenDir, name))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

const (
	positiveReview = "An absolute triumph: gorgeous performances, a witty script and a finale that had the whole audience cheering. I loved every minute."
	negativeReview = "A dull, tedious mess with wooden acting and a plot that makes no sense. I walked out bored and angry."
)

// TestServeEndToEnd runs the real server on the real models and checks its answers
// against the Python reference.
func TestServeEndToEnd(t *testing.T) {
	t.Parallel()
	url := sharedServer(t)
	var texts []string
	readGolden(t, "texts.json", &texts)

	t.Run("embed matches sentence-transformers", func(t *testing.T) {
		var golden goldenEmbeddings
		readGolden(t, "minilm.json", &golden)
		for _, version := range []string{"fp32", "int8"} {
			var vecs [][]float32
			resp := postJSON(t, url+"/embed", map[string]any{"inputs": texts, "version": version}, &vecs)
			if resp.StatusCode != 200 || len(vecs) != len(texts) {
				t.Fatalf("%s: %d, %d vectors", version, resp.StatusCode, len(vecs))
			}
			if got := resp.Header.Get("x-model-version"); got != "minilm/"+version {
				t.Errorf("x-model-version %q", got)
			}
			if resp.Header.Get("x-truncated-inputs") != "1" {
				t.Errorf("x-truncated-inputs %q: the golden texts have one over 256 tokens", resp.Header.Get("x-truncated-inputs"))
			}
			minCos := 0.9999 // fp32: the golden graph itself, so only float rounding differs
			if version == "int8" {
				minCos = 0.95 // quantized: close, not equal (docs/quantization.md has the distribution)
			}
			for _, g := range golden.Items {
				v := vecs[g.Index]
				if len(v) != 384 {
					t.Fatalf("dimension %d", len(v))
				}
				if n := norm(v); math.Abs(n-1) > 1e-5 {
					t.Errorf("%s text %d: norm %v, want a unit vector", version, g.Index, n)
				}
				if c := cosine(v, g.Torch); c < minCos {
					t.Errorf("%s text %d %q: cosine %.6f with the reference, want ≥ %v", version, g.Index, texts[g.Index], c, minCos)
				}
			}
		}
	})

	t.Run("hello world", func(t *testing.T) {
		var golden goldenEmbeddings
		readGolden(t, "minilm.json", &golden)
		var vecs [][]float32
		postJSON(t, url+"/embed", map[string]any{"inputs": []string{"hello world"}}, &vecs)
		if texts[golden.Items[0].Index] != "hello world" || len(vecs) != 1 || cosine(vecs[0], golden.Items[0].Torch) < 0.9999 {
			t.Errorf("hello world does not match the reference")
		}
		// One vector is 4.7 KB of JSON, past net/http's 2 KiB buffer: it is sent with its
		// length, not chunked.
		resp, body := postRaw(t, url+"/embed", map[string]any{"inputs": []string{"hello world"}})
		if len(body) < 4<<10 || resp.ContentLength != int64(len(body)) || len(resp.TransferEncoding) > 0 {
			t.Errorf("a %d-byte vector came with Content-Length %d, Transfer-Encoding %q", len(body), resp.ContentLength, resp.TransferEncoding)
		}
		var raw [][]float32
		postJSON(t, url+"/embed", map[string]any{"inputs": "hello world", "normalize": false}, &raw)
		if n := norm(raw[0]); n < 1.5 || cosine(raw[0], vecs[0]) < 0.99999 {
			t.Errorf("normalize=false: norm %v", n)
		}
	})

	t.Run("classifier logits match onnxruntime", func(t *testing.T) {
		var golden goldenLogits
		readGolden(t, "sentiment.json", &golden)
		batch := make([][]string, len(texts))
		for i, s := range texts {
			batch[i] = []string{s}
		}
		var preds [][]struct {
			Score float32 `json:"score"`
			Label string  `json:"label"`
		}
		resp := postJSON(t, url+"/predict", map[string]any{"inputs": batch, "raw_scores": true}, &preds)
		if resp.StatusCode != 200 {
			t.Fatal(resp.Status)
		}
		labels := []string{"negative", "positive"}
		for _, g := range golden.Items {
			got := map[string]float32{}
			for _, p := range preds[g.Index] {
				got[p.Label] = p.Score
			}
			for j, l := range labels {
				if d := math.Abs(float64(got[l] - g.Logits[j])); d > 1e-4 {
					t.Errorf("text %d %s logit %v, reference %v (|Δ| %.2g > 1e-4)", g.Index, l, got[l], g.Logits[j], d)
				}
			}
			if preds[g.Index][0].Label != g.Label {
				t.Errorf("text %d: label %s, reference %s", g.Index, preds[g.Index][0].Label, g.Label)
			}
		}
	})

	t.Run("obvious reviews, fp32 and int8", func(t *testing.T) {
		for _, version := range []string{"fp32", "int8"} {
			for _, tc := range []struct{ text, label string }{{positiveReview, "positive"}, {negativeReview, "negative"}} {
				var preds []struct {
					Score float32 `json:"score"`
					Label string  `json:"label"`
				}
				resp := postJSON(t, url+"/predict", map[string]any{"inputs": tc.text, "version": version}, &preds)
				if resp.StatusCode != 200 || len(preds) != 2 {
					t.Fatalf("%s: %d %v", version, resp.StatusCode, preds)
				}
				if preds[0].Label != tc.label || preds[0].Score <= 0.5 {
					t.Errorf("%s %q: got %+v, want %s first", version, tc.text[:20], preds, tc.label)
				}
				if s := preds[0].Score + preds[1].Score; math.Abs(float64(s)-1) > 1e-5 {
					t.Errorf("%s: scores sum to %v", version, s)
				}
			}
		}
	})

	t.Run("too long without truncation", func(t *testing.T) {
		long := strings.Repeat("word ", 400)
		resp := postJSON(t, url+"/embed", map[string]any{"inputs": []string{"short", long}, "truncate": false}, nil)
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Errorf("got %d, want 413", resp.StatusCode)
		}
	})

	t.Run("OpenAI, KServe and tokenize", func(t *testing.T) { testCompat(t, url, texts) })

	t.Run("info, health and metrics", func(t *testing.T) {
		var info struct {
			Provider       string `json:"provider"`
			FallbackReason string `json:"fallback_reason"`
			Models         []struct {
				Name     string   `json:"name"`
				Versions []string `json:"versions"`
			} `json:"models"`
		}
		body := get(t, url+"/info")
		if err := json.Unmarshal([]byte(body), &info); err != nil || info.Provider != "CPUExecutionProvider" || len(info.Models) != 3 { // minilm, reranker, sentiment
			t.Errorf("info: %s", body)
		}
		if get(t, url+"/health") == "" {
			t.Error("health")
		}
		m := get(t, url+"/metrics")
		// Earlier subtests sent traffic to minilm fp32 and int8: every phase is there for both.
		for _, phase := range []string{"tokenize", "queue", "inference", "postprocess", "request"} {
			for _, v := range []string{"fp32", "int8"} {
				want := fmt.Sprintf(`ortserve_%s_duration_seconds_count{model="minilm",version="%s"}`, phase, v)
				if !strings.Contains(m, want) {
					t.Errorf("metrics lack %s", want)
				}
			}
		}
		for _, want := range []string{
			`ortserve_batch_size_count{model="minilm",version="fp32"}`,
			`ortserve_batch_tokens_count{model="minilm",version="int8"}`,
			`ortserve_queue_requests{model="minilm",version="fp32"} 0`,
			`ortserve_requests_total{code="200",model="minilm",route="/embed",version="int8"}`,
			`ortserve_execution_provider_info{model="minilm",provider="CPUExecutionProvider",version="fp32"} 1`,
			`ortserve_execution_provider_info{model="sentiment",provider="CPUExecutionProvider",version="int8"} 1`,
		} {
			if !strings.Contains(m, want) {
				t.Errorf("metrics lack %s", want)
			}
		}
	})
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Errorf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	return string(b)
}

func norm(v []float32) float64 {
	var s float64
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	return math.Sqrt(s)
}
