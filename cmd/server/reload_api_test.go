//go:build cgo && ort

package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// A version added to model.yaml while the server runs is served by every API once the
// reload sees it (TEI, OpenAI, KServe, /info, KServe metadata, the provider metric), and a
// model folder removed while the server runs stops being served by every API.
func TestReloadAddsAndRemovesOnEveryAPI(t *testing.T) {
	t.Parallel()
	root, dir := int8Repo(t)
	cfg := minilmYAML
	url := startServer(t, "--models", root, "--reload-interval", "50ms", "--sessions", "1")

	versions := func() []string { // minilm's versions as /info has them; nil when it has no minilm
		var info struct {
			Models []struct {
				Name     string   `json:"name"`
				Versions []string `json:"versions"`
			} `json:"models"`
		}
		if err := json.Unmarshal([]byte(get(t, url+"/info")), &info); err != nil {
			t.Fatalf("/info: %v", err)
		}
		for _, m := range info.Models {
			if m.Name == "minilm" {
				return m.Versions
			}
		}
		return nil
	}
	if v := versions(); !slices.Equal(v, []string{"int8"}) {
		t.Fatalf("before the reload, /info lists versions %v", v)
	}
	var before [][]float32
	if resp := postJSON(t, url+"/embed", map[string]any{"inputs": "hello world"}, &before); resp.StatusCode != 200 {
		t.Fatalf("/embed before the reload: %d", resp.StatusCode)
	}

	// A second name for the same file: its answers must be the first name's.
	writeAtomic(t, filepath.Join(dir, "model.yaml"), cfg("  int8: {file: int8.onnx}\n  int8b: {file: int8.onnx}\n"))
	waitUntil(t, "the reload to add int8b", func() bool { return slices.Contains(versions(), "int8b") })

	var vecs [][]float32
	resp := postJSON(t, url+"/embed", map[string]any{"inputs": "hello world", "version": "int8b"}, &vecs)
	if resp.StatusCode != 200 || resp.Header.Get("x-model-version") != "minilm/int8b" || len(vecs) != 1 || cosine(vecs[0], before[0]) < 0.9999 {
		t.Errorf("TEI /embed version int8b: %d, x-model-version %q, %d vectors", resp.StatusCode, resp.Header.Get("x-model-version"), len(vecs))
	}
	var oa struct {
		Model string `json:"model"`
		Data  []struct {
			Embedding []float32 `json:"embedding"`
		} `json:"data"`
	}
	resp = postJSON(t, url+"/v1/embeddings", map[string]any{"model": "minilm:int8b", "input": "hello world"}, &oa)
	if resp.StatusCode != 200 || oa.Model != "minilm/int8b" || len(oa.Data) != 1 || cosine(oa.Data[0].Embedding, before[0]) < 0.9999 {
		t.Errorf("OpenAI model minilm:int8b: %d, model %q, %d vectors", resp.StatusCode, oa.Model, len(oa.Data))
	}
	var ks struct {
		ModelVersion string `json:"model_version"`
		Outputs      []struct {
			Data []float32 `json:"data"`
		} `json:"outputs"`
	}
	infer := map[string]any{"inputs": []map[string]any{{"name": "text", "shape": []int{1}, "datatype": "BYTES", "data": []string{"hello world"}}}}
	resp = postJSON(t, url+"/v2/models/minilm/versions/int8b/infer", infer, &ks)
	if resp.StatusCode != 200 || ks.ModelVersion != "int8b" || len(ks.Outputs) != 1 || cosine(ks.Outputs[0].Data, before[0]) < 0.9999 {
		t.Errorf("KServe versions/int8b/infer: %d, model_version %q", resp.StatusCode, ks.ModelVersion)
	}
	var md struct {
		Versions []string `json:"versions"`
	}
	if err := json.Unmarshal([]byte(get(t, url+"/v2/models/minilm")), &md); err != nil || !slices.Equal(md.Versions, []string{"int8", "int8b"}) {
		t.Errorf("GET /v2/models/minilm: versions %v (%v), want [int8 int8b]", md.Versions, err)
	}
	get(t, url+"/v2/models/minilm/versions/int8b/ready") // a 200
	// The metric follows once the reload has returned, a moment after the swap /info shows.
	waitUntil(t, "the provider metric to show the added version", func() bool {
		return strings.Contains(get(t, url+"/metrics"), `ortserve_execution_provider_info{model="minilm",provider="CPUExecutionProvider",version="int8b"} 1`)
	})

	// The folder goes: the model goes, from every API.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the reload to remove minilm", func() bool { return versions() == nil })
	for _, tc := range []struct {
		path string
		body any
	}{
		{"/embed", map[string]any{"inputs": "hello world", "model": "minilm"}},
		{"/embed", map[string]any{"inputs": "hello world"}}, // no embed model left
		{"/tokenize", map[string]any{"inputs": "hello world", "model": "minilm"}},
		{"/v1/embeddings", map[string]any{"model": "minilm:int8b", "input": "hello world"}},
		{"/v1/embeddings", map[string]any{"model": "minilm", "input": "hello world"}},
		{"/v2/models/minilm/infer", infer},
		{"/v2/models/minilm/versions/int8b/infer", infer},
	} {
		if resp, raw := postRaw(t, url+tc.path, tc.body); resp.StatusCode != http.StatusNotFound {
			t.Errorf("after the removal, POST %s: %d %s, want 404", tc.path, resp.StatusCode, raw)
		}
	}
	for _, path := range []string{"/v2/models/minilm", "/v2/models/minilm/ready", "/v2/models/minilm/versions/int8b"} {
		resp, err := http.Get(url + path)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("after the removal, GET %s: %d %s, want 404", path, resp.StatusCode, raw)
		}
	}
	if resp, err := http.Get(url + "/health"); err != nil || resp.StatusCode != 200 {
		t.Errorf("after the removal, /health: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
}

// writeAtomic writes a file as a deployment should: whole, by renaming a temporary file over it.
// int8Repo is a model repository of its own holding minilm with its int8 version only (links
// to the built files, and a model.yaml of minilmYAML's that the test may rewrite): a server on
// it starts fast, and the test may change it.
func int8Repo(t *testing.T) (root, dir string) {
	t.Helper()
	src := filepath.Join(os.Getenv("ORTSERVE_MODELS"), "minilm")
	root = t.TempDir()
	dir = filepath.Join(root, "minilm")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"tokenizer.json", "int8.onnx"} {
		if err := os.Symlink(filepath.Join(src, f), filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	writeAtomic(t, filepath.Join(dir, "model.yaml"), minilmYAML("  int8: {file: int8.onnx}\n"))
	return root, dir
}

// minilmYAML is minilm's model.yaml with the given versions block.
func minilmYAML(versions string) []byte {
	return []byte("name: minilm\ntask: embed\ntokenizer: tokenizer.json\nmax_length: 256\npooling: mean\nnormalize: true\n" +
		"output: last_hidden_state\ndefault_version: int8\nversions:\n" + versions)
}

func writeAtomic(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// waitUntil polls cond every 20 ms for at most a minute.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after a minute waiting for %s", what)
		}
	}
}
