//go:build cgo && ort

package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// The SPLADE and Dense test folders `make models` builds (layouts/splade, layouts/dense;
// scripts/models/sparse.py), served as Hugging Face folders, against the build's Python
// references ($ORTSERVE_MODELS/golden/splade.json, dense.json: onnxruntime on each text alone,
// pooled in numpy).

const (
	layoutSplade = "splade"
	layoutDense  = "dense"
)

// buildGolden reads one of the build's golden files ($ORTSERVE_MODELS/golden).
func buildGolden(t *testing.T, name string, v any) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(os.Getenv("ORTSERVE_MODELS"), "golden", name))
	if err != nil {
		t.Fatalf("%v: `make models` writes it (scripts/models/sparse.py); rebuild the models", err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

func TestServeSpladeAndDense(t *testing.T) {
	t.Parallel()
	root := filepath.Join(os.Getenv("ORTSERVE_MODELS"), "layouts")
	url := startServer(t, "--model", "splade="+filepath.Join(root, layoutSplade), "--model", "dense="+filepath.Join(root, layoutDense),
		"--calibration-budget", "50ms")
	var texts []string
	readGolden(t, "texts.json", &texts)

	t.Run("embed_sparse", func(t *testing.T) {
		var golden struct {
			Items []struct {
				Indices []uint32  `json:"indices"`
				Values  []float32 `json:"values"`
			} `json:"items"`
		}
		buildGolden(t, "splade.json", &golden)
		// All texts in one request: batched (packed, as the graph allows) and split per text.
		var got [][]struct {
			Index uint32  `json:"index"`
			Value float32 `json:"value"`
		}
		if resp := postJSON(t, url+"/embed_sparse", map[string]any{"inputs": texts, "model": "splade", "truncate": true}, &got); resp.StatusCode != 200 || len(got) != len(golden.Items) {
			t.Fatalf("/embed_sparse: %d, %d results for %d texts", resp.StatusCode, len(got), len(golden.Items))
		}
		worst := 0.0
		for i, want := range golden.Items {
			served := map[uint32]float32{}
			for j, e := range got[i] {
				if j > 0 && e.Index <= got[i][j-1].Index {
					t.Errorf("text %d: indices not ascending at %d", i, j)
				}
				served[e.Index] = e.Value
			}
			if len(got[i]) != len(want.Indices) {
				t.Errorf("text %d: %d entries, the reference %d", i, len(got[i]), len(want.Indices))
			}
			for j, idx := range want.Indices {
				v, ok := served[idx]
				if !ok {
					t.Errorf("text %d: index %d (%g in the reference) not served", i, idx, want.Values[j])
				}
				worst = max(worst, math.Abs(float64(v-want.Values[j])))
			}
		}
		if worst > 1e-4 {
			t.Errorf("served SPLADE weights differ from the reference by up to %.2e, want at most 1e-4", worst)
		}
		t.Logf("%d texts: the same indices, values within %.2e", len(texts), worst)
	})

	t.Run("dense", func(t *testing.T) {
		var golden struct {
			Items []struct {
				Ort []float32 `json:"ort"`
			} `json:"items"`
		}
		buildGolden(t, "dense.json", &golden)
		var got [][]float32
		if resp := postJSON(t, url+"/embed", map[string]any{"inputs": texts, "model": "dense", "truncate": true}, &got); resp.StatusCode != 200 || len(got) != len(golden.Items) {
			t.Fatalf("/embed: %d, %d vectors for %d texts", resp.StatusCode, len(got), len(golden.Items))
		}
		worst, minCos := 0.0, 1.0
		for i, want := range golden.Items {
			if len(got[i]) != len(want.Ort) {
				t.Fatalf("text %d: %d dimensions, the reference %d", i, len(got[i]), len(want.Ort))
			}
			for j := range want.Ort {
				worst = max(worst, math.Abs(float64(got[i][j]-want.Ort[j])))
			}
			minCos = min(minCos, cosine(got[i], want.Ort))
		}
		if worst > 1e-4 || minCos < 0.9999 {
			t.Errorf("served Dense embeddings: max abs diff %.2e, min cosine %.7f; want <= 1e-4 and >= 0.9999", worst, minCos)
		}
		t.Logf("%d texts: max abs diff %.2e, min cosine %.7f", len(texts), worst, minCos)
	})

	t.Run("wrong routes", func(t *testing.T) {
		for _, tc := range []struct {
			path, model string
			code        int
		}{
			{"/embed_sparse", "dense", 424}, // TEI's answer for a model without SPLADE pooling
			{"/embed", "splade", 400},
		} {
			resp, raw := postRaw(t, url+tc.path, map[string]any{"inputs": "hello", "model": tc.model})
			var e struct {
				Error     string `json:"error"`
				ErrorType string `json:"error_type"`
			}
			if resp.StatusCode != tc.code || json.Unmarshal(raw, &e) != nil || e.Error == "" {
				t.Errorf("%s on %s: %d %s, want %d in TEI's shape", tc.path, tc.model, resp.StatusCode, raw, tc.code)
			}
		}
	})
}
