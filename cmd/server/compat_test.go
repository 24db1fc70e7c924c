//go:build cgo && ort

package main

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"net/http"
	"slices"
	"strconv"
	"testing"
)

// testCompat checks the OpenAI, KServe and /tokenize routes against /embed, /predict and the
// tokenizer golden on the real models. TestServeEndToEnd calls it: only one server may run
// per test process (the ONNX Runtime environment is process-wide).
func testCompat(t *testing.T, url string, texts []string) {
	texts = texts[:8] // enough to be a batch; within --max-inputs

	// The routes must give /embed's answers. fp32 and int8-static answer a text the same
	// whatever batch it is in; dynamic int8 quantizes activations per batch, and the batcher
	// may split the same request differently from one call to the next (by its learned cost
	// and the sessions free), so its answers are held to what batch-mates move them by
	// (docs/quantization.md, "Results": min cosine about 0.96 alone against batched).
	for _, version := range []string{"fp32", "int8-static", "int8"} {
		minCos := 0.999999
		if version == "int8" {
			minCos = 0.95
		}
		var ref [][]float32
		resp := postJSON(t, url+"/embed", map[string]any{"inputs": texts, "version": version}, &ref)
		if resp.StatusCode != 200 {
			t.Fatalf("/embed %s: %d", version, resp.StatusCode)
		}
		tokens, _ := strconv.Atoi(resp.Header.Get("x-compute-tokens"))

		t.Run("openai "+version, func(t *testing.T) {
			for _, format := range []string{"float", "base64"} {
				var out struct {
					Object string `json:"object"`
					Data   []struct {
						Index     int             `json:"index"`
						Embedding json.RawMessage `json:"embedding"`
					} `json:"data"`
					Model string `json:"model"`
					Usage struct {
						PromptTokens int `json:"prompt_tokens"`
						TotalTokens  int `json:"total_tokens"`
					} `json:"usage"`
				}
				resp := postJSON(t, url+"/v1/embeddings", map[string]any{"model": "minilm:" + version, "input": texts, "encoding_format": format}, &out)
				if resp.StatusCode != 200 || out.Object != "list" || len(out.Data) != len(texts) || out.Model != "minilm/"+version {
					t.Fatalf("%s: %d, %s, %d items, model %q", format, resp.StatusCode, out.Object, len(out.Data), out.Model)
				}
				if out.Usage.PromptTokens != tokens || out.Usage.TotalTokens != tokens {
					t.Errorf("%s: usage %+v, /embed counted %d tokens", format, out.Usage, tokens)
				}
				for i, d := range out.Data {
					var v []float32
					if format == "float" {
						json.Unmarshal(d.Embedding, &v)
					} else {
						var s string
						json.Unmarshal(d.Embedding, &s)
						v = littleEndianFloats(t, s)
					}
					if d.Index != i || len(v) != 384 || cosine(v, ref[i]) < minCos || math.Abs(norm(v)-1) > 1e-5 {
						t.Errorf("%s item %d: index %d, %d dims, cosine %.7f with /embed, norm %v", format, i, d.Index, len(v), cosine(v, ref[i]), norm(v))
					}
				}
			}
		})

		t.Run("kserve "+version, func(t *testing.T) {
			var out struct {
				ModelName    string `json:"model_name"`
				ModelVersion string `json:"model_version"`
				Outputs      []struct {
					Name  string    `json:"name"`
					Shape []int     `json:"shape"`
					Data  []float32 `json:"data"`
				} `json:"outputs"`
			}
			body := map[string]any{"inputs": []map[string]any{{"name": "text", "shape": []int{len(texts)}, "datatype": "BYTES", "data": texts}}}
			resp := postJSON(t, url+"/v2/models/minilm/versions/"+version+"/infer", body, &out)
			if resp.StatusCode != 200 || out.ModelName != "minilm" || out.ModelVersion != version || len(out.Outputs) != 1 || !slices.Equal(out.Outputs[0].Shape, []int{len(texts), 384}) {
				t.Fatalf("%d %+v", resp.StatusCode, out)
			}
			for i := range texts {
				if c := cosine(out.Outputs[0].Data[i*384:(i+1)*384], ref[i]); c < minCos {
					t.Errorf("text %d: cosine %.7f with /embed", i, c)
				}
			}
		})
	}

	t.Run("kserve classify, metadata and health", func(t *testing.T) {
		var preds [][]struct {
			Score float32 `json:"score"`
			Label string  `json:"label"`
		}
		batch := make([][]string, len(texts))
		for i, s := range texts {
			batch[i] = []string{s}
		}
		postJSON(t, url+"/predict", map[string]any{"inputs": batch}, &preds)
		var out struct {
			Outputs []struct {
				Name string          `json:"name"`
				Data json.RawMessage `json:"data"`
			} `json:"outputs"`
		}
		body := map[string]any{"inputs": []map[string]any{{"name": "text", "shape": []int{len(texts)}, "datatype": "BYTES", "data": texts}}}
		if resp := postJSON(t, url+"/v2/models/sentiment/infer", body, &out); resp.StatusCode != 200 || len(out.Outputs) != 2 {
			t.Fatalf("%d %+v", resp.StatusCode, out)
		}
		var probs []float32
		var labels []string
		json.Unmarshal(out.Outputs[0].Data, &probs)
		json.Unmarshal(out.Outputs[1].Data, &labels)
		for i, p := range preds {
			if labels[i] != p[0].Label || math.Abs(float64(slices.Max(probs[2*i:2*i+2])-p[0].Score)) > 1e-6 {
				t.Errorf("text %d: kserve %s %v, /predict %+v", i, labels[i], probs[2*i:2*i+2], p)
			}
		}
		var md struct {
			Outputs []struct {
				Shape []int `json:"shape"`
			} `json:"outputs"`
		}
		json.Unmarshal([]byte(get(t, url+"/v2/models/minilm")), &md)
		if len(md.Outputs) != 1 || !slices.Equal(md.Outputs[0].Shape, []int{-1, 384}) {
			t.Errorf("metadata %+v", md)
		}
		get(t, url+"/v2/health/ready")
		get(t, url+"/v2/health/live")
		get(t, url+"/v2/models/sentiment/versions/int8/ready")
	})

	t.Run("tokenize matches the tokenizer golden", func(t *testing.T) {
		var golden struct {
			Items []struct {
				Index int     `json:"index"`
				IDs   []int64 `json:"ids"`
			} `json:"items"`
		}
		readGolden(t, "tokens.json", &golden)
		if texts[golden.Items[0].Index] != "hello world" {
			t.Fatalf("golden item 0 is %q", texts[golden.Items[0].Index])
		}
		var toks [][]struct {
			ID      int64  `json:"id"`
			Text    string `json:"text"`
			Special bool   `json:"special"`
			Start   *int   `json:"start"`
			Stop    *int   `json:"stop"`
		}
		if resp := postJSON(t, url+"/tokenize", map[string]any{"inputs": "hello world"}, &toks); resp.StatusCode != 200 || len(toks) != 1 {
			t.Fatalf("%d %+v", resp.StatusCode, toks)
		}
		var ids []int64
		for _, tk := range toks[0] {
			ids = append(ids, tk.ID)
		}
		if !slices.Equal(ids, golden.Items[0].IDs) {
			t.Errorf("ids %v, golden %v", ids, golden.Items[0].IDs)
		}
		hello := toks[0][1]
		if !toks[0][0].Special || toks[0][0].Start != nil || hello.Text != "hello" || hello.Special || *hello.Start != 0 || *hello.Stop != 5 || toks[0][2].Text != "world" || *toks[0][2].Start != 6 {
			t.Errorf("tokens %+v", toks[0])
		}
	})

	t.Run("openapi", func(t *testing.T) {
		var doc map[string]any
		if err := json.Unmarshal([]byte(get(t, url+"/openapi.json")), &doc); err != nil || doc["openapi"] != "3.1.0" {
			t.Errorf("openapi.json: %v", err)
		}
	})

	t.Run("errors in each API's shape", func(t *testing.T) {
		var e struct {
			Error struct {
				Type string  `json:"type"`
				Code *string `json:"code"`
			} `json:"error"`
		}
		resp := postJSONErr(t, url+"/v1/embeddings", map[string]any{"model": "minilm:int4", "input": "a"}, &e)
		if resp.StatusCode != http.StatusNotFound || e.Error.Type != "invalid_request_error" || e.Error.Code == nil || *e.Error.Code != "model_not_found" {
			t.Errorf("openai unknown version: %d %+v", resp.StatusCode, e)
		}
		var k struct{ Error string }
		resp = postJSONErr(t, url+"/v2/models/minilm/infer", map[string]any{"inputs": []map[string]any{{"name": "text", "shape": []int{3}, "datatype": "BYTES", "data": []string{"a"}}}}, &k)
		if resp.StatusCode != http.StatusBadRequest || k.Error == "" {
			t.Errorf("kserve shape mismatch: %d %+v", resp.StatusCode, k)
		}
	})
}

// postJSONErr posts body and decodes the answer into out, which is expected to be an error.
func postJSONErr(t *testing.T, url string, body, out any) *http.Response {
	t.Helper()
	resp, raw := postRaw(t, url, body)
	if err := json.Unmarshal(raw, out); err != nil {
		t.Errorf("%s: %d, body: %v", url, resp.StatusCode, err)
	}
	return resp
}

func littleEndianFloats(t *testing.T, s string) []float32 {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(b)%4 != 0 {
		t.Fatalf("base64: %v (%d bytes)", err, len(b))
	}
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}
