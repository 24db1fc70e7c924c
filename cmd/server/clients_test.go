//go:build cgo && ort

package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// The official Python clients, with their defaults, against `server serve` on the real
// models: tritonclient.http (KServe v2 with the binary tensor data extension) and
// huggingface_hub's InferenceClient (POST /). Each script runs in the clients venv `make
// clients` builds (scripts/clients.sh), which `make test` names in ORTSERVE_CLIENTS_VENV.

// clientsPython is the clients venv's python.
func clientsPython(t *testing.T) string {
	t.Helper()
	venv := os.Getenv("ORTSERVE_CLIENTS_VENV")
	if venv == "" {
		t.Fatal("ORTSERVE_CLIENTS_VENV is not set: run these tests with `make test`, which builds the clients venv (make clients)")
	}
	python := filepath.Join(venv, "bin", "python")
	if _, err := os.Stat(python); err != nil {
		t.Fatalf("ORTSERVE_CLIENTS_VENV=%s has no bin/python: run `make clients` (or `make test`): %v", venv, err)
	}
	return python
}

// runClient runs scripts/clients/SCRIPT with args, texts as JSON on its stdin, and decodes
// its JSON stdout into out.
func runClient(t *testing.T, script string, texts []string, out any, args ...string) {
	t.Helper()
	in, _ := json.Marshal(texts)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, clientsPython(t), append([]string{"../../scripts/clients/" + script}, args...)...)
	cmd.Stdin = bytes.NewReader(in)
	cmd.Env = append(os.Environ(), "HF_HUB_DISABLE_TELEMETRY=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", script, err, stderr.String())
	}
	if err := json.Unmarshal(stdout, out); err != nil {
		t.Fatalf("%s: %v: %.300s", script, err, stdout)
	}
}

type prediction struct {
	Label string  `json:"label"`
	Score float32 `json:"score"`
}

// predictRows is /predict's answer for texts, one sorted list per text.
func predictRows(t *testing.T, url string, texts []string, raw bool) [][]prediction {
	t.Helper()
	batch := make([][]string, len(texts))
	for i, s := range texts {
		batch[i] = []string{s}
	}
	var rows [][]prediction
	if resp := postJSON(t, url+"/predict", map[string]any{"inputs": batch, "raw_scores": raw}, &rows); resp.StatusCode != 200 || len(rows) != len(texts) {
		t.Fatalf("/predict: %d, %d rows", resp.StatusCode, len(rows))
	}
	return rows
}

// samePredictions compares predictions by label and score (to float32 rounding).
func samePredictions(got, want []prediction) bool {
	return slices.EqualFunc(got, want, func(a, b prediction) bool {
		return a.Label == b.Label && math.Abs(float64(a.Score-b.Score)) <= 1e-6*max(1, math.Abs(float64(b.Score)))
	})
}

// tritonMetadata is the part of get_model_metadata's answer the test reads.
type tritonMetadata struct {
	Name   string `json:"name"`
	Inputs []struct {
		Name     string `json:"name"`
		Datatype string `json:"datatype"`
	} `json:"inputs"`
	Outputs []struct {
		Name  string `json:"name"`
		Shape []int  `json:"shape"`
	} `json:"outputs"`
}

// TestTritonClient drives tritonclient.http with its defaults, which send the texts and ask
// for the outputs in the binary tensor data extension, and with binary_data=False (JSON);
// its answers must be /embed's and /predict's.
func TestTritonClient(t *testing.T) {
	t.Parallel()
	url := sharedServer(t)
	var texts []string
	readGolden(t, "texts.json", &texts)
	texts = texts[:8] // a batch, within --max-inputs; includes the empty and blank strings

	var ref [][]float32
	if resp := postJSON(t, url+"/embed", map[string]any{"inputs": texts}, &ref); resp.StatusCode != 200 {
		t.Fatalf("/embed: %d", resp.StatusCode)
	}
	preds := predictRows(t, url, texts, false)

	var got struct {
		Live   bool `json:"live"`
		Ready  bool `json:"ready"`
		Server struct {
			Name       string   `json:"name"`
			Version    string   `json:"version"`
			Extensions []string `json:"extensions"`
		} `json:"server"`
		Metadata           map[string]tritonMetadata `json:"metadata"`
		ModelReady         bool                      `json:"model_ready"`
		EmbedBinary        [][]float32               `json:"embed_binary"`
		EmbedBinarySize    *int                      `json:"embed_binary_size"`
		EmbedJSON          [][]float32               `json:"embed_json"`
		EmbedJSONSize      *int                      `json:"embed_json_size"`
		Probabilities      [][]float32               `json:"probabilities"`
		Labels             []string                  `json:"labels"`
		ClassifySizes      []*int                    `json:"classify_binary_sizes"`
		MixedProbabilities [][]float32               `json:"mixed_probabilities"`
		MixedLabels        []string                  `json:"mixed_labels"`
		MixedSizes         []*int                    `json:"mixed_binary_sizes"`
		UnknownModelError  string                    `json:"unknown_model_error"`
	}
	runClient(t, "triton_infer.py", texts, &got, url, "minilm", "sentiment")

	if !got.Live || !got.Ready || !got.ModelReady {
		t.Errorf("live %v, ready %v, models ready %v", got.Live, got.Ready, got.ModelReady)
	}
	if got.Server.Name != "ortserve" || got.Server.Version == "" || !slices.Contains(got.Server.Extensions, "binary_tensor_data") {
		t.Errorf("server metadata %+v", got.Server)
	}
	if md := got.Metadata["minilm"]; md.Name != "minilm" || len(md.Inputs) != 1 || md.Inputs[0].Name != "text" || md.Inputs[0].Datatype != "BYTES" ||
		len(md.Outputs) != 1 || md.Outputs[0].Name != "embedding" || !slices.Equal(md.Outputs[0].Shape, []int{-1, 384}) {
		t.Errorf("minilm metadata %+v", md)
	}
	if md := got.Metadata["sentiment"]; len(md.Outputs) != 2 || md.Outputs[0].Name != "probabilities" || md.Outputs[1].Name != "label" {
		t.Errorf("sentiment metadata %+v", md)
	}

	// The default infer was binary both ways; binary_data=False was JSON.
	if got.EmbedBinarySize == nil || *got.EmbedBinarySize != len(texts)*384*4 || got.EmbedJSONSize != nil {
		t.Errorf("binary_data_size %v with the defaults, %v with binary_data=False", got.EmbedBinarySize, got.EmbedJSONSize)
	}
	for format, vecs := range map[string][][]float32{"binary (the default)": got.EmbedBinary, "JSON": got.EmbedJSON} {
		if len(vecs) != len(texts) {
			t.Fatalf("%s: %d vectors for %d texts", format, len(vecs), len(texts))
		}
		for i, v := range vecs {
			if len(v) != 384 || cosine(v, ref[i]) < 0.999999 {
				t.Errorf("%s, text %d %q: %d dims, cosine %.7f with /embed", format, i, texts[i], len(v), cosine(v, ref[i]))
			}
		}
	}

	// The classifier: probabilities in the metadata's label order, and the best label.
	var info struct {
		Models []struct {
			Name   string   `json:"name"`
			Labels []string `json:"labels"`
		} `json:"models"`
	}
	json.Unmarshal([]byte(get(t, url+"/info")), &info)
	var labels []string
	for _, m := range info.Models {
		if m.Name == "sentiment" {
			labels = m.Labels
		}
	}
	if len(got.ClassifySizes) != 2 || got.ClassifySizes[0] == nil || got.ClassifySizes[1] == nil ||
		len(got.MixedSizes) != 2 || got.MixedSizes[0] != nil || got.MixedSizes[1] == nil {
		t.Errorf("binary_data_size of probabilities and label: %v all binary, %v mixed", sizes(got.ClassifySizes), sizes(got.MixedSizes))
	}
	for _, run := range []struct {
		name   string
		probs  [][]float32
		labels []string
	}{{"binary", got.Probabilities, got.Labels}, {"mixed", got.MixedProbabilities, got.MixedLabels}} {
		if len(run.probs) != len(texts) || len(run.labels) != len(texts) {
			t.Fatalf("%s: %d probabilities, %d labels for %d texts", run.name, len(run.probs), len(run.labels), len(texts))
		}
		for i, p := range preds {
			want := make([]prediction, len(labels))
			for j, l := range labels {
				want[j] = prediction{Label: l, Score: run.probs[i][j]}
			}
			slices.SortStableFunc(want, func(a, b prediction) int { return cmp.Compare(b.Score, a.Score) })
			if run.labels[i] != p[0].Label || !samePredictions(want, p) {
				t.Errorf("%s, text %d: label %q, probabilities %v; /predict %+v", run.name, i, run.labels[i], run.probs[i], p)
			}
		}
	}
	if !strings.Contains(got.UnknownModelError, `unknown model "no-such-model"`) {
		t.Errorf("an unknown model raised %q", got.UnknownModelError)
	}
}

// TestTritonConfigClient drives tritonclient.http's get_model_config and
// get_model_repository_index: the config must say what perf_analyzer needs (max_batch_size the
// server's --max-inputs, dims the metadata's shapes after the batch dimension), and the index
// must list every version of every model the KServe routes serve, READY.
func TestTritonConfigClient(t *testing.T) {
	t.Parallel()
	url := sharedServer(t)
	var info struct {
		MaxInputs int `json:"max_client_batch_size"`
		Models    []struct {
			Name     string   `json:"name"`
			Task     string   `json:"task"`
			Versions []string `json:"versions"`
		} `json:"models"`
	}
	if err := json.Unmarshal([]byte(get(t, url+"/info")), &info); err != nil {
		t.Fatal(err)
	}
	type tensor struct {
		Name     string  `json:"name"`
		DataType string  `json:"data_type"`
		Dims     []int64 `json:"dims"`
	}
	type config struct {
		Name            string          `json:"name"`
		Platform        string          `json:"platform"`
		Backend         string          `json:"backend"`
		MaxBatchSize    int             `json:"max_batch_size"`
		Input           []tensor        `json:"input"`
		Output          []tensor        `json:"output"`
		DynamicBatching json.RawMessage `json:"dynamic_batching"`
	}
	type entry struct {
		Name, Version, State, Reason string
	}
	var got struct {
		Config        config `json:"config"`
		VersionConfig config `json:"version_config"`
		Metadata      struct {
			Outputs []struct {
				Name  string  `json:"name"`
				Shape []int64 `json:"shape"`
			} `json:"outputs"`
		} `json:"metadata"`
		Index               []entry `json:"index"`
		UnknownModelError   string  `json:"unknown_model_error"`
		UnknownVersionError string  `json:"unknown_version_error"`
	}
	runClient(t, "triton_config.py", nil, &got, url, "minilm", "int8")

	want := config{
		Name: "minilm", Platform: "onnxruntime_onnx", Backend: "onnxruntime", MaxBatchSize: info.MaxInputs,
		Input:  []tensor{{Name: "text", DataType: "TYPE_STRING", Dims: []int64{1}}},
		Output: []tensor{{Name: "embedding", DataType: "TYPE_FP32", Dims: []int64{384}}},
	}
	for name, c := range map[string]config{"config": got.Config, "config of int8": got.VersionConfig} {
		if string(c.DynamicBatching) != "{}" || info.MaxInputs == 0 {
			t.Errorf("%s: dynamic_batching %s, /info's max_client_batch_size %d", name, c.DynamicBatching, info.MaxInputs)
		}
		c.DynamicBatching = nil
		if !reflect.DeepEqual(c, want) {
			t.Errorf("%s: %+v, want %+v", name, c, want)
		}
	}
	if len(got.Metadata.Outputs) != 1 || !slices.Equal(got.Metadata.Outputs[0].Shape[1:], want.Output[0].Dims) {
		t.Errorf("metadata outputs %+v disagree with the config's %+v", got.Metadata.Outputs, want.Output)
	}

	var wantIndex []entry
	for _, m := range info.Models {
		if m.Task == "rerank" { // the KServe routes refuse rerank models
			continue
		}
		for _, v := range m.Versions {
			wantIndex = append(wantIndex, entry{Name: m.Name, Version: v, State: "READY"})
		}
	}
	slices.SortFunc(wantIndex, func(a, b entry) int {
		return cmp.Or(strings.Compare(a.Name, b.Name), strings.Compare(a.Version, b.Version))
	})
	if !slices.Equal(got.Index, wantIndex) {
		t.Errorf("repository index %+v, want %+v", got.Index, wantIndex)
	}
	if !strings.Contains(got.UnknownModelError, `unknown model "no-such-model"`) || !strings.Contains(got.UnknownVersionError, `unknown version "minilm/no-such-version"`) {
		t.Errorf("an unknown model raised %q, an unknown version %q", got.UnknownModelError, got.UnknownVersionError)
	}
}

func sizes(ps []*int) []any {
	out := make([]any, len(ps))
	for i, p := range ps {
		if p != nil {
			out[i] = *p
		}
	}
	return out
}

// TestHuggingFaceHubClient drives huggingface_hub's InferenceClient(model=URL), which posts
// to the URL itself, against a server with make run's models: feature_extraction and
// sentence_similarity reach the embedder and text_classification the classifier, each by the
// shape of its body.
func TestHuggingFaceHubClient(t *testing.T) {
	t.Parallel()
	var texts []string
	readGolden(t, "texts.json", &texts)
	texts = texts[:8]
	url := sharedServer(t)

	t.Run("feature_extraction", func(t *testing.T) {
		var ref, raw [][]float32
		postJSON(t, url+"/embed", map[string]any{"inputs": texts}, &ref)
		postJSON(t, url+"/embed", map[string]any{"inputs": texts, "normalize": false}, &raw)
		var got struct {
			Single [][]float32 `json:"single"`
			Batch  [][]float32 `json:"batch"`
			Raw    [][]float32 `json:"raw"`
		}
		runClient(t, "hf_inference.py", texts, &got, url, "feature-extraction")
		for _, run := range []struct {
			name      string
			got, want [][]float32
		}{{"one text", got.Single, ref[:1]}, {"a batch", got.Batch, ref}, {"normalize=False", got.Raw, raw}} {
			if len(run.got) != len(run.want) {
				t.Fatalf("%s: %d vectors, want %d", run.name, len(run.got), len(run.want))
			}
			for i, v := range run.got {
				if len(v) != 384 || cosine(v, run.want[i]) < 0.999999 || math.Abs(norm(v)-norm(run.want[i])) > 1e-4*norm(run.want[i]) {
					t.Errorf("%s, text %d: %d dims, cosine %.7f with /embed, norm %v vs %v", run.name, i, len(v), cosine(v, run.want[i]), norm(v), norm(run.want[i]))
				}
			}
		}
	})

	t.Run("sentence_similarity", func(t *testing.T) {
		var ref []float32
		postJSON(t, url+"/similarity", map[string]any{"inputs": map[string]any{"source_sentence": texts[0], "sentences": texts[1:]}}, &ref)
		var got struct {
			Similarity []float32 `json:"similarity"`
		}
		runClient(t, "hf_inference.py", texts, &got, url, "sentence-similarity")
		if len(got.Similarity) != len(texts)-1 || len(ref) != len(texts)-1 {
			t.Fatalf("%d similarities from the client, %d from /similarity; want %d", len(got.Similarity), len(ref), len(texts)-1)
		}
		for i, sim := range got.Similarity {
			if math.Abs(float64(sim-ref[i])) > 1e-6 || sim < -1 || sim > 1 {
				t.Errorf("sentence %d: %v from the client, %v from /similarity", i+1, sim, ref[i])
			}
		}
	})

	t.Run("text_classification", func(t *testing.T) {
		probs, logits := predictRows(t, url, texts, false), predictRows(t, url, texts, true)
		var got struct {
			Default [][]prediction `json:"default"`
			Top1    [][]prediction `json:"top1"`
			None    [][]prediction `json:"none"`
			Sigmoid [][]prediction `json:"sigmoid"`
		}
		runClient(t, "hf_inference.py", texts, &got, url, "text-classification")
		if len(got.Default) != len(texts) || len(got.Top1) != len(texts) || len(got.None) != len(texts) || len(got.Sigmoid) != len(texts) {
			t.Fatalf("answers for %d, %d, %d, %d of %d texts", len(got.Default), len(got.Top1), len(got.None), len(got.Sigmoid), len(texts))
		}
		for i := range texts {
			sig := slices.Clone(logits[i])
			for j := range sig {
				sig[j].Score = float32(1 / (1 + math.Exp(-float64(sig[j].Score))))
			}
			for _, run := range []struct {
				name      string
				got, want []prediction
			}{
				{"default", got.Default[i], probs[i]},
				{"top_k=1", got.Top1[i], probs[i][:1]},
				{"function_to_apply=none", got.None[i], logits[i]},
				{"function_to_apply=sigmoid", got.Sigmoid[i], sig},
			} {
				if !samePredictions(run.got, run.want) {
					t.Errorf("%s, text %d %q: %+v, /predict gives %+v", run.name, i, texts[i], run.got, run.want)
				}
			}
		}
	})
}
