//go:build cgo && ort

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ortserve/ortserve/models"
	"github.com/ortserve/ortserve/server"
)

// The Hugging Face layouts `make models` exports beside the model repository
// ($ORTSERVE_MODELS/layouts, scripts/models): the minilm embedder as sentence-transformers and
// optimum save it and in the hub cache, the sentiment classifier and a cross-encoder as
// transformers saves them, and an encoder whose outputs have odd names. Every one is served
// by --model without a model.yaml, and answers as the model.yaml models do.
const (
	layoutSentiment    = "sentiment-hf"
	layoutCrossEncoder = "cross-encoder"
	layoutOddOutputs   = "odd-outputs"
	layoutHub          = "hub/models--ortserve--minilm"
)

// minilmLayouts are the layouts of minilm other than the hub cache's: every folder of
// layouts/ not named above. At least one sentence-transformers (modules.json) and one
// optimum (model.onnx and model_quantized.onnx at the root) must be there.
func minilmLayouts(t *testing.T, root string) []string {
	t.Helper()
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatalf("the Hugging Face layouts are missing (%v): `make models` builds them into $ORTSERVE_MODELS/layouts (scripts/models); rebuild the models", err)
	}
	var dirs []string
	var st, optimum bool
	for _, e := range entries {
		dir := filepath.Join(root, e.Name())
		if !e.IsDir() || slices.Contains([]string{layoutSentiment, layoutCrossEncoder, layoutOddOutputs, "hub", layoutSplade, layoutDense}, e.Name()) {
			continue
		}
		dirs = append(dirs, dir)
		st = st || fileExists(filepath.Join(dir, "modules.json"))
		optimum = optimum || fileExists(filepath.Join(dir, "model.onnx")) && fileExists(filepath.Join(dir, "model_quantized.onnx"))
	}
	for _, need := range []string{layoutSentiment, layoutCrossEncoder, layoutOddOutputs, layoutHub} {
		if !fileExists(filepath.Join(root, need)) {
			t.Errorf("layouts/%s is missing (have %v): rebuild the models with `make models`", need, entryNames(entries))
		}
	}
	if !st || !optimum {
		t.Errorf("layouts/ lacks a sentence-transformers folder (modules.json: %v) or an optimum one (model.onnx + model_quantized.onnx at the root: %v); have %v", st, optimum, entryNames(entries))
	}
	if t.Failed() {
		t.FailNow()
	}
	return dirs
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func entryNames(entries []os.DirEntry) []string {
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// linkTree mirrors src's files as links under dst, so that a model.yaml can be added
// without touching src.
func linkTree(t *testing.T, src, dst string) string {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target, err := filepath.EvalSymlinks(p)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dst, rel)), 0o755); err != nil {
			return err
		}
		return os.Symlink(target, filepath.Join(dst, rel))
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

func TestServeHFLayouts(t *testing.T) {
	t.Parallel()
	root := filepath.Join(os.Getenv("ORTSERVE_MODELS"), "layouts")
	embedders := minilmLayouts(t, root)
	repo := versionRepo(t, "minilm", "fp32")
	if err := os.Symlink(filepath.Join(os.Getenv("ORTSERVE_MODELS"), "reranker"), filepath.Join(repo, "reranker")); err != nil {
		t.Fatal(err)
	}
	// A short calibration: the cost curve decides how batches form, not what they answer, and
	// this server opens a session for each of its many layouts.
	args := []string{"--models", repo, "--sessions", "1", "--calibration-budget", "50ms"}
	var served []string // the embedders' model names
	for _, dir := range embedders {
		name := "layout-" + filepath.Base(dir)
		args = append(args, "--model", name+"="+dir)
		served = append(served, name)
		// `models init`'s output, saved as model.yaml beside the same files, serves the same.
		pinned := linkTree(t, dir, filepath.Join(t.TempDir(), filepath.Base(dir)))
		var yaml bytes.Buffer
		if code := run([]string{"models", "init", pinned}, &yaml, os.Stderr); code != 0 {
			t.Fatalf("models init %s: exit %d", dir, code)
		}
		os.WriteFile(filepath.Join(pinned, models.ConfigFile), yaml.Bytes(), 0o644)
		args = append(args, "--model", name+"-pinned="+pinned)
		served = append(served, name+"-pinned")
	}
	args = append(args, "--model", "layout-hub="+filepath.Join(root, layoutHub), "--model", "layout-sentiment="+filepath.Join(root, layoutSentiment),
		"--model", "layout-cross-encoder="+filepath.Join(root, layoutCrossEncoder))
	served = append(served, "layout-hub")

	// The odd outputs: served right, or refused in one line that names the key to set.
	odd := filepath.Join(root, layoutOddOutputs)
	if _, err := models.InferConfig(odd, models.InferOptions{}); err != nil {
		var ie *models.InferError
		if !errors.As(err, &ie) || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "output:") {
			t.Errorf("odd-outputs refused, but not in one line naming output: %v", err)
		}
		t.Logf("odd-outputs refused: %v", err)
	} else {
		args = append(args, "--model", "layout-odd="+odd)
		served = append(served, "layout-odd")
	}

	url := startServer(t, args...)
	texts := untruncated(t, url, "minilm")
	want := embedAll(t, url, "minilm", "fp32", texts)
	for _, name := range served {
		sameEmbeddings(t, name, embedAll(t, url, name, "", texts), want, 0.9999)
	}

	// The classifier answers with its own label names, from config.json's id2label.
	var hc struct {
		ID2Label map[string]string `json:"id2label"`
	}
	data, err := os.ReadFile(filepath.Join(root, layoutSentiment, "config.json"))
	if err != nil || json.Unmarshal(data, &hc) != nil || len(hc.ID2Label) < 2 {
		t.Fatalf("sentiment-hf config.json: %v %v", err, hc)
	}
	var preds []server.Prediction
	if resp := postJSON(t, url+"/predict", map[string]any{"inputs": positiveReview, "model": "layout-sentiment"}, &preds); resp.StatusCode != 200 {
		t.Fatalf("/predict: %d", resp.StatusCode)
	}
	var predicted, labels []string
	for _, p := range preds {
		predicted = append(predicted, p.Label)
	}
	for _, l := range hc.ID2Label {
		labels = append(labels, l)
	}
	slices.Sort(predicted)
	slices.Sort(labels)
	if !slices.Equal(predicted, labels) {
		t.Errorf("/predict labels %v, want id2label's %v", predicted, labels)
	}

	// The cross-encoder scores as the reranker's model.yaml does (the same graph).
	rerank := func(model string) map[int]float32 {
		var ranks []struct {
			Index int     `json:"index"`
			Score float32 `json:"score"`
		}
		body := map[string]any{"query": "What is the capital of France?", "texts": []string{"Bananas are yellow.", "Paris is the capital of France.", negativeReview}, "model": model, "raw_scores": true}
		if resp := postJSON(t, url+"/rerank", body, &ranks); resp.StatusCode != 200 || len(ranks) != 3 {
			t.Fatalf("/rerank %s: %d, %v", model, resp.StatusCode, ranks)
		}
		out := map[int]float32{}
		for _, r := range ranks {
			out[r.Index] = r.Score
		}
		return out
	}
	ceScores, rrScores := rerank("layout-cross-encoder"), rerank("reranker")
	for i, w := range rrScores {
		if math.Abs(float64(ceScores[i]-w)) > 1e-4 {
			t.Errorf("/rerank: text %d scores %v, the reranker's model.yaml %v", i, ceScores[i], w)
		}
	}
}

// untruncated are the golden texts that fit model's max length: a layout may allow longer
// inputs than minilm's model.yaml (tokenizer_config.json's 512, say), which is the layout's
// own answer, not a wrong one.
func untruncated(t *testing.T, url, model string) []string {
	t.Helper()
	var texts, out []string
	readGolden(t, "texts.json", &texts)
	var toks [][]json.RawMessage
	if resp := postJSON(t, url+"/tokenize", map[string]any{"inputs": texts, "model": model}, &toks); resp.StatusCode != 200 || len(toks) != len(texts) {
		t.Fatalf("/tokenize: %d", resp.StatusCode)
	}
	for i, ts := range toks {
		if len(ts) < 256 {
			out = append(out, texts[i])
		}
	}
	if len(out) < len(texts)/2 {
		t.Fatalf("only %d of %d golden texts fit", len(out), len(texts))
	}
	return out
}
