//go:build cgo && ort

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os/exec"
	"testing"
	"time"
)

// The official OpenAI Python client's embeddings.create returns the same vectors as /embed,
// both with encoding_format "float" and with the client's default (it asks for base64 and
// decodes the bytes itself); with dimensions=128, each vector's first 128 values normalized
// again. The client runs in the small venv `make clients` builds
// (scripts/clients.sh), which `make test` names in ORTSERVE_CLIENTS_VENV.
func TestOpenAIPythonClient(t *testing.T) {
	t.Parallel()
	python := clientsPython(t)
	url := loadServer(t)
	var texts []string
	readGolden(t, "texts.json", &texts)
	texts = texts[:8] // a batch, within --max-inputs; includes the empty and blank strings

	var ref [][]float32
	if resp := postJSON(t, url+"/embed", map[string]any{"inputs": texts}, &ref); resp.StatusCode != 200 {
		t.Fatalf("/embed: %d", resp.StatusCode)
	}

	in, _ := json.Marshal(texts)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "../../scripts/clients/openai_embed.py", url, "minilm")
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("openai_embed.py: %v\n%s", err, stderr.String())
	}
	var got struct {
		Float  [][]float32 `json:"float"`
		Base64 [][]float32 `json:"base64"`
		Dims   [][]float32 `json:"dimensions"`
		Model  string      `json:"model"`
		Usage  struct {
			PromptTokens int `json:"prompt_tokens"`
			TotalTokens  int `json:"total_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %.300s", err, out)
	}
	if got.Model != "minilm/fp32" || got.Usage.PromptTokens == 0 || got.Usage.TotalTokens != got.Usage.PromptTokens {
		t.Errorf("model %q, usage %+v", got.Model, got.Usage)
	}
	for format, vecs := range map[string][][]float32{"float": got.Float, "base64 (the client's default)": got.Base64} {
		if len(vecs) != len(texts) {
			t.Fatalf("%s: %d vectors for %d texts", format, len(vecs), len(texts))
		}
		for i, v := range vecs {
			if len(v) != 384 || cosine(v, ref[i]) < 0.999999 || math.Abs(norm(v)-1) > 1e-5 {
				t.Errorf("%s, text %d %q: %d dims, cosine %.7f with /embed, norm %v", format, i, texts[i], len(v), cosine(v, ref[i]), norm(v))
			}
		}
	}
	if len(got.Dims) != len(texts) {
		t.Fatalf("dimensions=128: %d vectors for %d texts", len(got.Dims), len(texts))
	}
	for i, v := range got.Dims {
		if want := shortened(ref[i], 128); len(v) != 128 || maxDiff(v, want) > 1e-5 || math.Abs(norm(v)-1) > 1e-5 {
			t.Errorf("dimensions=128, text %d %q: %d dims, %v from /embed's first 128 normalized, norm %v", i, texts[i], len(v), maxDiff(v, want), norm(v))
		}
	}
}

// minilmOnly is a model repository holding only the real minilm, with the two versions the
// tests use, fp32 (the default) and int8: opening a version and measuring its cost is most of
// a start-up, and fp16 on the CPU is the slowest of them.
func minilmOnly(t testing.TB) string {
	t.Helper()
	return versionRepo(t, "minilm", "fp32", "int8")
}
