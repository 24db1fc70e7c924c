//go:build cgo && ort

package main

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// promptRepo is minilm (fp32) with prompts: its folder's config_sentence_transformers.json,
// as sentence-transformers saves it, names "query" and "passage", and model.yaml lists the
// Matryoshka dimensions it allows.
func promptRepo(t *testing.T) string {
	t.Helper()
	root := versionRepo(t, "minilm", "fp32")
	dir := filepath.Join(root, "minilm")
	st := `{"prompts": {"query": "query: ", "passage": "passage: "}, "default_prompt_name": null, "similarity_fn_name": "cosine"}`
	if err := os.WriteFile(filepath.Join(dir, "config_sentence_transformers.json"), []byte(st), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "model.yaml"), os.O_APPEND|os.O_WRONLY, 0)
	if err == nil {
		_, err = f.WriteString("dimensions: [64, 128, 256, 384]\n")
		err = errors.Join(err, f.Close())
	}
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// A prompt changes the real model's vectors exactly as putting its text before each input
// does, on /embed, POST /, /v1/embeddings and through huggingface_hub's InferenceClient;
// dimensions cut them to their first values, normalized again; a prompt or dimensions the
// model does not have is refused in the route's shape; and serve refuses a
// --default-prompt-name no model has.
func TestPromptsAndDimensions(t *testing.T) {
	t.Parallel()
	root := promptRepo(t)
	url := startServer(t, "--models", root)
	var texts []string
	readGolden(t, "texts.json", &texts)
	texts = texts[:8]

	joined := make([]string, len(texts))
	for i, s := range texts {
		joined[i] = "query: " + s
	}
	var ref, bare [][]float32
	postJSON(t, url+"/embed", map[string]any{"inputs": joined}, &ref)
	postJSON(t, url+"/embed", map[string]any{"inputs": texts}, &bare)
	if len(ref) != len(texts) || len(bare) != len(texts) {
		t.Fatalf("/embed: %d and %d vectors for %d texts", len(ref), len(bare), len(texts))
	}

	var viaEmbed, viaRoot [][]float32
	var viaOpenAI struct {
		Data []struct {
			Embedding []float32 `json:"embedding"`
		} `json:"data"`
	}
	postJSON(t, url+"/embed", map[string]any{"inputs": texts, "prompt_name": "query"}, &viaEmbed)
	postJSON(t, url+"/", map[string]any{"inputs": texts, "prompt_name": "query", "truncation_direction": "right"}, &viaRoot)
	postJSON(t, url+"/v1/embeddings", map[string]any{"input": texts, "model": "minilm", "prompt_name": "query"}, &viaOpenAI)
	var viaHub struct {
		Prompted [][]float32 `json:"prompted"`
		Short    [][]float32 `json:"short"`
	}
	runClient(t, "hf_inference.py", texts, &viaHub, url, "feature-extraction-prompt", "query")
	openAI := make([][]float32, len(viaOpenAI.Data))
	for i, d := range viaOpenAI.Data {
		openAI[i] = d.Embedding
	}
	changed := false
	for _, run := range []struct {
		name string
		got  [][]float32
	}{{"/embed", viaEmbed}, {"POST /", viaRoot}, {"/v1/embeddings", openAI}, {"InferenceClient", viaHub.Prompted}} {
		if len(run.got) != len(texts) {
			t.Fatalf("%s: %d vectors for %d texts", run.name, len(run.got), len(texts))
		}
		for i, v := range run.got {
			if c := cosine(v, ref[i]); len(v) != 384 || c < 0.9999 {
				t.Errorf("%s, text %d %q: %d dims, cosine %.6f with the prompt's text put before it", run.name, i, texts[i], len(v), c)
			}
			changed = changed || cosine(v, bare[i]) < 0.99
		}
	}
	if !changed {
		t.Errorf("prompt_name changed no vector: was the prompt put before the text?")
	}

	// /tokenize and /embed_all put the prompt before the text too, as /embed tokenizes it.
	var tokPrompted, tokJoined, allPrompted, allJoined any
	postJSON(t, url+"/tokenize", map[string]any{"inputs": texts[:2], "prompt_name": "query"}, &tokPrompted)
	postJSON(t, url+"/tokenize", map[string]any{"inputs": joined[:2]}, &tokJoined)
	postJSON(t, url+"/embed_all", map[string]any{"inputs": texts[:1], "prompt_name": "query"}, &allPrompted)
	postJSON(t, url+"/embed_all", map[string]any{"inputs": joined[:1]}, &allJoined)
	if !reflect.DeepEqual(tokPrompted, tokJoined) {
		t.Errorf("/tokenize with prompt_name: %v; want the tokens of the joined text, %v", tokPrompted, tokJoined)
	}
	if !reflect.DeepEqual(allPrompted, allJoined) {
		t.Error("/embed_all with prompt_name differs from /embed_all of the joined text")
	}

	// Dimensions: the first values of the whole vector, normalized again.
	var short [][]float32
	postJSON(t, url+"/embed", map[string]any{"inputs": texts, "dimensions": 64}, &short)
	for _, run := range []struct {
		name string
		got  [][]float32
		d    int
	}{{"/embed dimensions 64", short, 64}, {"InferenceClient dimensions=128", viaHub.Short, 128}} {
		if len(run.got) != len(texts) {
			t.Fatalf("%s: %d vectors for %d texts", run.name, len(run.got), len(texts))
		}
		for i, v := range run.got {
			if want := shortened(bare[i], run.d); len(v) != run.d || maxDiff(v, want) > 1e-5 {
				t.Errorf("%s, text %d: %d dims, %v from the whole vector's first %d normalized", run.name, i, len(v), maxDiff(v, want), run.d)
			}
		}
	}

	for _, tt := range []struct {
		name, path string
		body       map[string]any
		code       int
		want       string
	}{
		{"unknown prompt", "/embed", map[string]any{"inputs": "a", "prompt_name": "doc"}, 422, `"error":"prompt_name \"doc\" is not one of model minilm's prompts: passage, query","error_type":"Validation"`},
		{"unknown prompt, POST /", "/", map[string]any{"inputs": "a", "prompt_name": "doc"}, 422, `not one of model minilm's prompts`},
		{"unknown prompt, OpenAI", "/v1/embeddings", map[string]any{"input": "a", "model": "minilm", "prompt_name": "doc"}, 400, `"param":"prompt_name"`},
		{"dimensions not listed", "/embed", map[string]any{"inputs": "a", "dimensions": 100}, 422, `give one of 64, 128, 256, 384`},
		{"dimensions not listed, OpenAI", "/v1/embeddings", map[string]any{"input": "a", "model": "minilm", "dimensions": 100}, 400, `"param":"dimensions"`},
	} {
		resp, body := postRaw(t, url+tt.path, tt.body)
		if resp.StatusCode != tt.code || !strings.Contains(string(body), tt.want) {
			t.Errorf("%s: %d %s, want %d with %s", tt.name, resp.StatusCode, body, tt.code, tt.want)
		}
	}

	_, stop, err := launch("--models", root, "--default-prompt-name", "doc")
	if err == nil {
		t.Errorf("--default-prompt-name doc: served: %v", stop())
	} else if !strings.Contains(err.Error(), `no served model has a prompt of that name; they have minilm:passage, minilm:query`) {
		t.Errorf("--default-prompt-name doc: %v", err)
	}
}

// shortened is v's first d values, normalized.
func shortened(v []float32, d int) []float32 {
	out := make([]float32, d)
	var ss float64
	for i := range out {
		ss += float64(v[i]) * float64(v[i])
	}
	for i := range out {
		out[i] = float32(float64(v[i]) / math.Sqrt(ss))
	}
	return out
}

// maxDiff is the largest difference between a and b's values, of equal length.
func maxDiff(a, b []float32) float64 {
	m := 0.0
	for i := range a {
		m = max(m, math.Abs(float64(a[i])-float64(b[i])))
	}
	return m
}
