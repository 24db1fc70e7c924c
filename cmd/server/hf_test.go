//go:build cgo && ort

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/ortserve/ortserve/cmd/server/internal/config"
	"github.com/ortserve/ortserve/models"
	"github.com/ortserve/ortserve/runtime/ort/onnxtest"
)

// hfFolder writes a Hugging Face folder whose graphs are signatures only: enough for
// `models init`, which reads and never runs them.
func hfFolder(t *testing.T, outputs ...onnxtest.Value) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tiny")
	ids := onnxtest.Value{Name: "input_ids", ElemType: onnxtest.Int64, Dims: []int64{-1, -1}}
	mask := onnxtest.Value{Name: "attention_mask", ElemType: onnxtest.Int64, Dims: []int64{-1, -1}}
	files := map[string]string{
		"config.json":           `{"architectures": ["BertModel"], "model_type": "bert", "hidden_size": 4, "max_position_embeddings": 512}`,
		"tokenizer.json":        `{}`,
		"tokenizer_config.json": `{"model_max_length": 128}`,
		"model.onnx":            string(onnxtest.Graph{Inputs: []onnxtest.Value{ids, mask}, Outputs: outputs, Ops: []string{"MatMul"}}.Encode()),
	}
	for name, data := range files {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestModelsInit(t *testing.T) {
	hidden := onnxtest.Value{Name: "last_hidden_state", ElemType: onnxtest.Float, Dims: []int64{-1, -1, 4}}
	odd := []onnxtest.Value{{Name: "onnx::Shape_422", ElemType: onnxtest.Float, Dims: []int64{-1, -1, 4}}, {Name: "onnx::Add_9", ElemType: onnxtest.Float, Dims: []int64{-1, -1, 4}}}
	good, ambiguous := hfFolder(t, hidden), hfFolder(t, odd...)
	file := filepath.Join(good, "config.json")
	tests := []struct {
		name string
		args []string
		code int
		want string // in stdout for 0, else in stderr's one line
	}{
		{"a folder", []string{"init", good}, 0, "# model.onnx: float32 [d0, d1, 4], by name\n"},
		{"ambiguous", []string{"init", ambiguous}, 1, "cannot tell which output of model.onnx holds the token embeddings"},
		{"settled by --output after DIR", []string{"init", ambiguous, "--output", "onnx::Add_9"}, 0, "output: onnx::Add_9"},
		{"settled by --output before DIR", []string{"init", "--output", "onnx::Shape_422", ambiguous}, 0, "output: onnx::Shape_422"},
		{"no subcommand", nil, 2, "models: the subcommand is init"},
		{"no folder", []string{"init"}, 2, "name one model folder (got 0)"},
		{"two folders", []string{"init", good, ambiguous}, 2, "name one model folder (got 2)"},
		{"a file", []string{"init", file}, 1, "is not a folder"},
		{"a missing folder", []string{"init", filepath.Join(good, "nope")}, 1, "no such file or directory"},
		{"no model", []string{"init", t.TempDir()}, 1, "no model.yaml and no config.json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(append([]string{"models"}, tt.args...), &out, &errb)
			got := out.String()
			if code != 0 {
				got = strings.TrimSuffix(errb.String(), "\n")
				got = got[strings.LastIndex(got, "\n")+1:] // after a usage text
			}
			if code != tt.code || !strings.Contains(got, tt.want) {
				t.Errorf("exit %d, got %q; want %d with %q", code, got, tt.code, tt.want)
			}
		})
	}
	// What it prints, saved as model.yaml, is the config inferred.
	var out bytes.Buffer
	if code := run([]string{"models", "init", good}, &out, os.Stderr); code != 0 {
		t.Fatal(code)
	}
	inf, err := models.InferConfig(good, models.InferOptions{})
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(good, models.ConfigFile), out.Bytes(), 0o644)
	if cfg, err := models.ReadConfig(good); err != nil || !reflect.DeepEqual(cfg, inf.Config) {
		t.Errorf("saved: %+v (%v), want %+v", cfg, err, inf.Config)
	}
	out.Reset()
	run([]string{"models", "init", good}, &out, os.Stderr)
	if !strings.HasPrefix(out.String(), "# Note: "+good+" already has a model.yaml") {
		t.Errorf("with a model.yaml: %q", out.String()[:80])
	}
}

// minilmFiles are the files of a sentence-transformers save of all-MiniLM-L6-v2 that the
// server reads, with its graphs and tokenizer linked from the built minilm.
func minilmFiles(t *testing.T) map[string]string {
	t.Helper()
	src := filepath.Join(os.Getenv("ORTSERVE_MODELS"), "minilm")
	return map[string]string{
		"config.json":               `{"architectures": ["BertModel"], "hidden_size": 384, "max_position_embeddings": 512, "model_type": "bert", "pad_token_id": 0, "vocab_size": 30522}`,
		"modules.json":              `[{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}, {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}, {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]`,
		"1_Pooling/config.json":     `{"word_embedding_dimension": 384, "pooling_mode_cls_token": false, "pooling_mode_mean_tokens": true, "pooling_mode_max_tokens": false, "pooling_mode_mean_sqrt_len_tokens": false}`,
		"sentence_bert_config.json": `{"max_seq_length": 256, "do_lower_case": false}`,
		"tokenizer_config.json":     `{"do_lower_case": true, "model_max_length": 512, "tokenizer_class": "BertTokenizer"}`,
		"tokenizer.json":            "-> " + filepath.Join(src, "tokenizer.json"),
		"onnx/model.onnx":           "-> " + filepath.Join(src, "fp32.onnx"),
		"onnx/model_quantized.onnx": "-> " + filepath.Join(src, "int8.onnx"),
	}
}

// writeFiles writes files under dir; a content "-> PATH" is a link to PATH.
func writeFiles(t *testing.T, dir string, files map[string]string) string {
	t.Helper()
	for name, data := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		if target, ok := strings.CutPrefix(data, "-> "); ok {
			err = os.Symlink(target, p)
		} else {
			err = os.WriteFile(p, []byte(data), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// hubCacheOf lays files out as the Hugging Face hub cache does: blobs/, a snapshot of links
// to them, refs/main.
func hubCacheOf(t *testing.T, dir string, files map[string]string) string {
	t.Helper()
	const rev = "0123456789abcdef0123456789abcdef01234567"
	snapshot := map[string]string{"refs/main": rev}
	blobs := map[string]string{}
	for name, data := range files {
		blob := fmt.Sprintf("blobs/%x", len(blobs)+1)
		blobs[blob] = data
		rel, _ := filepath.Rel(filepath.Dir(filepath.Join("snapshots", rev, name)), blob)
		snapshot[filepath.Join("snapshots", rev, name)] = "-> " + rel
	}
	writeFiles(t, dir, blobs)
	return writeFiles(t, dir, snapshot)
}

// embedAll embeds texts with model and version on the server at url.
func embedAll(t *testing.T, url, model, version string, texts []string) [][]float32 {
	t.Helper()
	var vecs [][]float32
	if resp := postJSON(t, url+"/embed", map[string]any{"inputs": texts, "model": model, "version": version}, &vecs); resp.StatusCode != 200 || len(vecs) != len(texts) {
		t.Fatalf("%s/%s: %d, %d vectors", model, version, resp.StatusCode, len(vecs))
	}
	return vecs
}

// getJSON decodes the JSON body of a GET.
func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d, %v", url, resp.StatusCode, err)
	}
}

// sameEmbeddings fails unless every pair of vectors has cosine ≥ min.
func sameEmbeddings(t *testing.T, what string, got, want [][]float32, min float64) {
	t.Helper()
	worst := 1.0
	for i := range want {
		if len(got[i]) != len(want[i]) {
			t.Fatalf("%s: text %d has dimension %d, want %d", what, i, len(got[i]), len(want[i]))
		}
		worst = math.Min(worst, cosine(got[i], want[i]))
	}
	if worst < min {
		t.Errorf("%s: min cosine %.6f to minilm's, want ≥ %v", what, worst, min)
	}
}

// Hugging Face folders made of minilm's own graphs and tokenizer — a sentence-transformers
// save, the same in the hub cache, and the first pinned with `models init`'s output — answer
// as minilm's model.yaml does.
func TestServeHFFolders(t *testing.T) {
	t.Parallel()
	files := minilmFiles(t)
	st := writeFiles(t, filepath.Join(t.TempDir(), "all-MiniLM-L6-v2"), files)
	hub := hubCacheOf(t, filepath.Join(t.TempDir(), "models--sentence-transformers--all-MiniLM-L6-v2"), files)
	pinned := writeFiles(t, filepath.Join(t.TempDir(), "pinned"), files)
	var yaml bytes.Buffer
	if code := run([]string{"models", "init", pinned}, &yaml, os.Stderr); code != 0 {
		t.Fatalf("models init: exit %d", code)
	}
	os.WriteFile(filepath.Join(pinned, models.ConfigFile), bytes.Replace(yaml.Bytes(), []byte("name: pinned"), []byte("name: minilm-pinned"), 1), 0o644)

	url := startServer(t, "--models", minilmOnly(t), "--sessions", "1", "--model", "st="+st, "--model", hub, "--model", pinned)
	var info struct {
		Models []struct {
			Name, Task, Pooling string
			Versions            []string
			MaxInputLength      int `json:"max_input_length"`
		}
	}
	getJSON(t, url+"/info", &info)
	var names []string
	for _, m := range info.Models {
		names = append(names, m.Name)
		if m.Name != "minilm" && (m.Task != "embed" || m.Pooling != "mean" || m.MaxInputLength != 256 || !slices.Equal(m.Versions, []string{"fp32", "int8"})) {
			t.Errorf("%+v", m)
		}
	}
	if !slices.Equal(names, []string{"all-MiniLM-L6-v2", "minilm", "minilm-pinned", "st"}) {
		t.Errorf("models %v", names)
	}
	var texts []string
	readGolden(t, "texts.json", &texts)
	// Dynamic int8 quantizes a batch's activations with one scale, so its texts go alone.
	alone := func(model string) (vecs [][]float32) {
		for _, text := range texts[:8] {
			vecs = append(vecs, embedAll(t, url, model, "int8", []string{text})[0])
		}
		return vecs
	}
	want, wantInt8 := embedAll(t, url, "minilm", "fp32", texts), alone("minilm")
	for _, name := range []string{"st", "all-MiniLM-L6-v2", "minilm-pinned"} {
		sameEmbeddings(t, name, embedAll(t, url, name, "fp32", texts), want, 0.9999)
		sameEmbeddings(t, name+"/int8", alone(name), wantInt8, 0.9999)
	}
}

// A Hugging Face folder whose graph cannot be read for sure stops start-up with one line
// naming the key that settles it.
func TestServeHFFolderRefused(t *testing.T) {
	t.Parallel()
	files := minilmFiles(t)
	// A module after pooling that ortserve does not run (a Dense one it runs).
	files["modules.json"] = strings.Replace(files["modules.json"], "Normalize", "LayerNorm", 2)
	dir := writeFiles(t, filepath.Join(t.TempDir(), "layernorm"), files)
	code, log := serveChild(t, "", "--device", "cpu", "--models", "", "--model", dir)
	if want := "server: models: " + dir + ": modules.json has LayerNorm (2_LayerNorm) after pooling, which ortserve does not run, and onnx/model.onnx has no sentence_embedding output"; code != 1 || !strings.HasPrefix(lastLine(log), want) {
		t.Errorf("exit %d, last line %q; want 1, %q", code, lastLine(log), want)
	}
}

// `server inspect DIR` reads a model folder's config as serve does, inferred or not.
func TestInspectModelFolder(t *testing.T) {
	dir := hfFolder(t, onnxtest.Value{Name: "last_hidden_state", ElemType: onnxtest.Float, Dims: []int64{-1, -1, 4}})
	c, err := config.ParseInspect([]string{dir}, os.Getenv, io.Discard)
	var targets []config.InspectTarget
	if c != nil {
		targets = c.Targets
	}
	if err != nil || len(targets) != 1 || targets[0].Model != "tiny" || targets[0].Version != "fp32" || targets[0].Path != filepath.Join(dir, "model.onnx") {
		t.Errorf("%+v %v", targets, err)
	}
	if _, err := config.ParseInspect([]string{filepath.Join(dir, "nope")}, os.Getenv, io.Discard); err == nil || !strings.Contains(err.Error(), "name an .onnx file, a model folder") {
		t.Errorf("%v", err)
	}
}
