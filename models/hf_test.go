package models_test

import (
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ortserve/ortserve/models"
	"github.com/ortserve/ortserve/runtime"
	"github.com/ortserve/ortserve/runtime/ort/onnxtest"
)

// Graph pieces for synthetic Hugging Face folders: hidden size 4.
var (
	inIDs   = onnxtest.Value{Name: "input_ids", ElemType: onnxtest.Int64, Dims: []int64{-1, -1}}
	inMask  = onnxtest.Value{Name: "attention_mask", ElemType: onnxtest.Int64, Dims: []int64{-1, -1}}
	inTypes = onnxtest.Value{Name: "token_type_ids", ElemType: onnxtest.Int64, Dims: []int64{-1, -1}}
	hidden  = onnxtest.Value{Name: "last_hidden_state", ElemType: onnxtest.Float, Dims: []int64{-1, -1, 4}}
	pooled  = onnxtest.Value{Name: "sentence_embedding", ElemType: onnxtest.Float, Dims: []int64{-1, 4}}
)

func logits(n int64) onnxtest.Value {
	return onnxtest.Value{Name: "logits", ElemType: onnxtest.Float, Dims: []int64{-1, n}}
}

func out(name string, elem int, dims ...int64) onnxtest.Value {
	return onnxtest.Value{Name: name, ElemType: elem, Dims: dims}
}

// Weights: fp32 and fp16 initializers, and the operators of dynamic int8 and of 4-bit.
var (
	fp32W = []onnxtest.Value{{Name: "w", ElemType: onnxtest.Float, Dims: []int64{4, 4}}, {Name: "b", ElemType: onnxtest.Float, Dims: []int64{4}}}
	fp16W = []onnxtest.Value{{Name: "w", ElemType: onnxtest.Float16, Dims: []int64{4, 4}}, {Name: "b", ElemType: onnxtest.Float16, Dims: []int64{4}}}
	int8  = []string{"DynamicQuantizeLinear", "MatMulInteger", "MatMulInteger", "Add"}
	int4  = []string{"MatMulNBits", "Add"}
)

// graph encodes an encoder with inputs ids, mask and types, the outputs given, fp32 weights
// unless weights says otherwise.
func graph(weights []onnxtest.Value, ops []string, outs ...onnxtest.Value) []byte {
	return graphIn([]onnxtest.Value{inIDs, inMask, inTypes}, weights, ops, outs...)
}

func graphIn(ins, weights []onnxtest.Value, ops []string, outs ...onnxtest.Value) []byte {
	if weights == nil {
		weights = fp32W
	}
	return onnxtest.Graph{Inputs: ins, Outputs: outs, Ops: append([]string{"MatMul"}, ops...), Initializers: weights}.Encode()
}

func js(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// folder is a model folder's files by path.
type folder map[string][]byte

func (f folder) with(more folder) folder {
	out := maps.Clone(f)
	for k, v := range more {
		if v == nil {
			delete(out, k)
		} else {
			out[k] = v
		}
	}
	return out
}

func writeFolder(t *testing.T, dir string, f folder) string {
	t.Helper()
	for p, data := range f {
		p = filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

var (
	bertConfig = js(map[string]any{"architectures": []string{"BertModel"}, "model_type": "bert", "hidden_size": 4, "max_position_embeddings": 512})
	stModules  = js([]map[string]any{
		{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
		{"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
		{"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
	})
	withDense = js([]map[string]any{
		{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
		{"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
		{"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"},
	})
)

func poolingConfig(mode string) []byte {
	pc := map[string]any{"word_embedding_dimension": 4, "include_prompt": true}
	for _, m := range []string{"cls_token", "mean_tokens", "max_tokens", "mean_sqrt_len_tokens", "weightedmean_tokens", "lasttoken"} {
		pc["pooling_mode_"+m] = slices.Contains(strings.Split(mode, "+"), m)
	}
	return js(pc)
}

// stFolder is a sentence-transformers folder as its ONNX backend saves it: onnx/ with the
// plain, quantized and fp16 exports.
var stFolder = folder{
	"config.json":               bertConfig,
	"tokenizer.json":            []byte(`{}`),
	"tokenizer_config.json":     js(map[string]any{"model_max_length": 512}),
	"modules.json":              stModules,
	"sentence_bert_config.json": js(map[string]any{"max_seq_length": 256, "do_lower_case": false}),
	"1_Pooling/config.json":     poolingConfig("mean_tokens"),
	"onnx/model.onnx":           graph(nil, nil, hidden),
	"onnx/model_quantized.onnx": graph(nil, int8, hidden),
	"onnx/model_fp16.onnx":      graph(fp16W, []string{"Cast"}, hidden),
}

// optimumFolder is optimum's export of a bare encoder: the graphs at the root.
var optimumFolder = folder{
	"config.json":           bertConfig,
	"tokenizer.json":        []byte(`{}`),
	"tokenizer_config.json": js(map[string]any{"model_max_length": 512}),
	"model.onnx":            graph(nil, nil, hidden),
	"model_quantized.onnx":  graph(nil, int8, hidden),
}

func classifierFolder(id2label map[string]string, outs ...onnxtest.Value) folder {
	return folder{
		"config.json":           js(map[string]any{"architectures": []string{"BertForSequenceClassification"}, "model_type": "bert", "hidden_size": 4, "max_position_embeddings": 512, "id2label": id2label}),
		"tokenizer.json":        []byte(`{}`),
		"tokenizer_config.json": js(map[string]any{"model_max_length": 512}),
		"model.onnx":            graph(nil, nil, outs...),
	}
}

// want is what a row checks of an inferred config; zero fields are not checked.
type want struct {
	task     models.Task
	output   string
	pooling  models.Pooling
	norm     bool
	maxLen   int
	labels   []string
	versions map[string]string // name → file
	def      string
	skipped  string // in Skipped
	warning  string // in Warnings
	dense    []string
}

// spladeFolder is a sentence-transformers SparseEncoder: a masked language model (vocabulary
// 8) and SpladePooling.
var spladeFolder = folder{
	"config.json":    js(map[string]any{"architectures": []string{"BertForMaskedLM"}, "model_type": "bert", "hidden_size": 4, "vocab_size": 8, "max_position_embeddings": 512}),
	"tokenizer.json": []byte(`{}`),
	"modules.json": js([]map[string]any{
		{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.sparse_encoder.models.MLMTransformer"},
		{"idx": 1, "name": "1", "path": "1_SpladePooling", "type": "sentence_transformers.sparse_encoder.models.SpladePooling"},
	}),
	"1_SpladePooling/config.json": js(map[string]any{"pooling_strategy": "max", "activation_function": "relu", "word_embedding_dimension": 8}),
	"sentence_bert_config.json":   js(map[string]any{"max_seq_length": 256}),
	"onnx/model.onnx":             graph(nil, nil, out("logits", onnxtest.Float, -1, -1, 8)),
}

func TestInferConfig(t *testing.T) {
	stVersions := map[string]string{"fp32": "onnx/model.onnx", "int8": "onnx/model_quantized.onnx", "fp16": "onnx/model_fp16.onnx"}
	tests := []struct {
		name string
		f    folder
		o    models.InferOptions
		want want
		err  string
	}{
		{"sentence-transformers", stFolder, models.InferOptions{}, want{task: models.TaskEmbed, output: "last_hidden_state", pooling: models.PoolingMean, norm: true, maxLen: 256, versions: stVersions, def: "fp32"}, ""},
		{"optimum, bare encoder", optimumFolder, models.InferOptions{}, want{task: models.TaskEmbed, output: "last_hidden_state", pooling: models.PoolingMean, maxLen: 512,
			versions: map[string]string{"fp32": "model.onnx", "int8": "model_quantized.onnx"}, warning: "pooling: mean is a guess"}, ""},
		{"cls pooling", stFolder.with(folder{"1_Pooling/config.json": poolingConfig("cls_token")}), models.InferOptions{}, want{pooling: models.PoolingCLS}, ""},
		{"max pooling", stFolder.with(folder{"1_Pooling/config.json": poolingConfig("max_tokens")}), models.InferOptions{}, want{pooling: models.PoolingMax}, ""},
		{"last-token pooling", stFolder.with(folder{"1_Pooling/config.json": poolingConfig("lasttoken")}), models.InferOptions{}, want{pooling: models.PoolingLastToken}, ""},
		{"pooling spelled as a string", stFolder.with(folder{"1_Pooling/config.json": js(map[string]any{"pooling_mode": "cls"})}), models.InferOptions{}, want{pooling: models.PoolingCLS}, ""},
		{"no Normalize module", stFolder.with(folder{"modules.json": js([]map[string]any{{"path": "", "type": "sentence_transformers.models.Transformer"}, {"path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}})}),
			models.InferOptions{}, want{task: models.TaskEmbed, pooling: models.PoolingMean, norm: false}, ""},
		{"weighted mean is refused", stFolder.with(folder{"1_Pooling/config.json": poolingConfig("weightedmean_tokens")}), models.InferOptions{}, want{},
			"pooling_mode_weightedmean_tokens, which ortserve does not do"},
		{"two modes are refused", stFolder.with(folder{"1_Pooling/config.json": poolingConfig("cls_token+mean_tokens")}), models.InferOptions{}, want{}, "concatenates"},
		{"weighted mean served from the graph's own pooling", stFolder.with(folder{"1_Pooling/config.json": poolingConfig("weightedmean_tokens"),
			"onnx/model.onnx": graph(nil, nil, hidden, pooled), "onnx/model_quantized.onnx": nil, "onnx/model_fp16.onnx": nil}),
			models.InferOptions{}, want{output: "sentence_embedding", pooling: models.PoolingNone}, ""},
		{"a Dense module is run after pooling", stFolder.with(folder{"modules.json": withDense}), models.InferOptions{}, want{task: models.TaskEmbed, pooling: models.PoolingMean, dense: []string{"2_Dense"}}, ""},
		{"a Dense module after Normalize is refused", stFolder.with(folder{"modules.json": js([]map[string]any{
			{"path": "", "type": "sentence_transformers.models.Transformer"}, {"path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
			{"path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}, {"path": "3_Dense", "type": "sentence_transformers.models.Dense"}})}),
			models.InferOptions{}, want{}, "Dense (3_Dense) where ortserve does not run it"},
		{"SPLADE", spladeFolder, models.InferOptions{}, want{task: models.TaskSparse, output: "logits", pooling: models.PoolingSplade, maxLen: 256, versions: map[string]string{"fp32": "onnx/model.onnx"}}, ""},
		{"SPLADE logits by vocabulary size", spladeFolder.with(folder{"onnx/model.onnx": graph(nil, nil, out("h", onnxtest.Float, -1, -1, 4), out("out", onnxtest.Float, -1, -1, 8))}),
			models.InferOptions{}, want{task: models.TaskSparse, output: "out"}, ""},
		{"SPLADE sum pooling is refused", spladeFolder.with(folder{"1_SpladePooling/config.json": js(map[string]any{"pooling_strategy": "sum", "activation_function": "relu"})}),
			models.InferOptions{}, want{}, `pooling_strategy "sum", which ortserve does not do`},
		{"SPLADE without logits", spladeFolder.with(folder{"onnx/model.onnx": graph(nil, nil, logits(2))}), models.InferOptions{}, want{}, "no float32 output of the masked language model's logits"},
		{"a Dense module with the pooled output", stFolder.with(folder{"modules.json": withDense, "onnx/model.onnx": graph(nil, nil, out("token_embeddings", onnxtest.Float, -1, -1, 4), pooled),
			"onnx/model_quantized.onnx": nil, "onnx/model_fp16.onnx": nil}), models.InferOptions{}, want{output: "sentence_embedding", pooling: models.PoolingNone}, ""},
		{"a bare encoder that pools itself", optimumFolder.with(folder{"model.onnx": graph(nil, nil, pooled), "model_quantized.onnx": nil}), models.InferOptions{},
			want{output: "sentence_embedding", pooling: models.PoolingNone}, ""},
		{"token_embeddings by name among others", optimumFolder.with(folder{"model.onnx": graph(nil, nil, out("h3", onnxtest.Float, -1, -1, 4), out("token_embeddings", onnxtest.Float, -1, -1, 4)), "model_quantized.onnx": nil}),
			models.InferOptions{}, want{output: "token_embeddings"}, ""},
		{"odd output names, one by shape", optimumFolder.with(folder{"model.onnx": graph(nil, nil, out("onnx::Shape_422", onnxtest.Float, -1, -1, 4), out("pooler_output", onnxtest.Float, -1, 4), out("mask", onnxtest.Int64, -1, -1)), "model_quantized.onnx": nil}),
			models.InferOptions{}, want{output: "onnx::Shape_422", pooling: models.PoolingMean}, ""},
		{"odd output names, hidden size decides", optimumFolder.with(folder{"model.onnx": graph(nil, nil, out("onnx::Shape_422", onnxtest.Float, -1, -1, 4), out("attn", onnxtest.Float, -1, -1, 12)), "model_quantized.onnx": nil}),
			models.InferOptions{}, want{output: "onnx::Shape_422"}, ""},
		{"odd output names, ambiguous", optimumFolder.with(folder{"model.onnx": graph(nil, nil, out("onnx::Shape_422", onnxtest.Float, -1, -1, 4), out("onnx::Add_99", onnxtest.Float, -1, -1, 4)), "model_quantized.onnx": nil}),
			models.InferOptions{}, want{}, `cannot tell which output of model.onnx holds the token embeddings: "onnx::Shape_422" float32 [d0, d1, 4], "onnx::Add_99" float32 [d0, d1, 4]: set output: in model.yaml`},
		{"odd output names, settled by --output", optimumFolder.with(folder{"model.onnx": graph(nil, nil, out("onnx::Shape_422", onnxtest.Float, -1, -1, 4), out("onnx::Add_99", onnxtest.Float, -1, -1, 4)), "model_quantized.onnx": nil}),
			models.InferOptions{Output: "onnx::Add_99"}, want{output: "onnx::Add_99", pooling: models.PoolingMean}, ""},
		{"--output names no output", optimumFolder, models.InferOptions{Output: "nope"}, want{}, `model.onnx has no output "nope" (it has "last_hidden_state" float32 [d0, d1, 4])`},
		{"no usable output", optimumFolder.with(folder{"model.onnx": graph(nil, nil, out("last_hidden_state", onnxtest.Float16, -1, -1, 4)), "model_quantized.onnx": nil}), models.InferOptions{}, want{},
			`no output of model.onnx is token embeddings [batch, sequence, hidden] or a sentence_embedding [batch, hidden] in float32 (it has "last_hidden_state" float16 [d0, d1, 4])`},
		{"no token_type_ids input", optimumFolder.with(folder{"model.onnx": graphIn([]onnxtest.Value{inIDs, inMask}, nil, nil, hidden), "model_quantized.onnx": nil}), models.InferOptions{}, want{output: "last_hidden_state"}, ""},

		{"classifier", classifierFolder(map[string]string{"1": "positive", "0": "negative"}, logits(2)), models.InferOptions{},
			want{task: models.TaskClassify, output: "logits", labels: []string{"negative", "positive"}, maxLen: 512, versions: map[string]string{"fp32": "model.onnx"}}, ""},
		{"classifier without id2label", classifierFolder(nil, logits(3)), models.InferOptions{}, want{task: models.TaskClassify, labels: []string{"LABEL_0", "LABEL_1", "LABEL_2"}}, ""},
		{"classifier logits by shape", classifierFolder(map[string]string{"0": "a", "1": "b"}, out("output_0", onnxtest.Float, -1, 2)), models.InferOptions{}, want{output: "output_0"}, ""},
		{"cross-encoder", classifierFolder(map[string]string{"0": "LABEL_0"}, logits(1)), models.InferOptions{}, want{task: models.TaskRerank, output: "logits"}, ""},
		{"cross-encoder saved with modules.json", classifierFolder(map[string]string{"0": "LABEL_0"}, logits(1)).with(folder{"modules.json": stModules}), models.InferOptions{}, want{task: models.TaskRerank}, ""},
		{"classifier's encoder in a sentence-transformers folder", classifierFolder(map[string]string{"0": "a", "1": "b"}, hidden).with(folder{"modules.json": stModules, "1_Pooling/config.json": poolingConfig("cls_token")}),
			models.InferOptions{}, want{task: models.TaskEmbed, pooling: models.PoolingCLS, norm: true}, ""},
		{"cross-encoder without token types", classifierFolder(map[string]string{"0": "LABEL_0"}).with(folder{"model.onnx": graphIn([]onnxtest.Value{inIDs, inMask}, nil, nil, logits(1))}),
			models.InferOptions{}, want{task: models.TaskRerank}, ""},
		{"classifier exported without its head", classifierFolder(map[string]string{"0": "a", "1": "b"}, hidden), models.InferOptions{}, want{}, "config.json says BertForSequenceClassification, but model.onnx has no logits output"},
		{"labels and logits disagree", classifierFolder(map[string]string{"0": "a", "1": "b"}, logits(3)), models.InferOptions{}, want{}, `output "logits" has 3 columns, but config.json has 2 labels`},
		{"id2label with a gap", classifierFolder(map[string]string{"0": "a", "2": "b"}, logits(2)), models.InferOptions{}, want{}, "want ids 0 to 1"},

		{"max_seq_length beyond the positions", stFolder.with(folder{"sentence_bert_config.json": js(map[string]any{"max_seq_length": 1024})}), models.InferOptions{}, want{maxLen: 512}, ""},
		{"tokenizer's no-limit sentinel", optimumFolder.with(folder{"tokenizer_config.json": []byte(`{"model_max_length": 1000000000000000019884624838656}`)}), models.InferOptions{}, want{maxLen: 512}, ""},
		{"RoBERTa positions keep two for padding", optimumFolder.with(folder{"tokenizer_config.json": nil,
			"config.json": js(map[string]any{"architectures": []string{"XLMRobertaModel"}, "model_type": "xlm-roberta", "max_position_embeddings": 514, "pad_token_id": 1})}), models.InferOptions{}, want{maxLen: 512}, ""},
		{"no length anywhere", optimumFolder.with(folder{"tokenizer_config.json": nil, "config.json": js(map[string]any{"architectures": []string{"BertModel"}})}), models.InferOptions{}, want{}, "cannot tell the longest input"},

		{"a quantized name without quantized operators", optimumFolder.with(folder{"model_quantized.onnx": graph(nil, nil, hidden)}), models.InferOptions{},
			want{versions: map[string]string{"fp32": "model.onnx", "model_quantized": "model_quantized.onnx"}, warning: "model_quantized.onnx is named as int8 but its graph is fp32 (float32 weights, no quantized operators): served as version model_quantized"}, ""},
		{"an fp16 name on an int8 graph", optimumFolder.with(folder{"model_quantized.onnx": nil, "model_fp16.onnx": graph(nil, int8, hidden)}), models.InferOptions{},
			want{versions: map[string]string{"fp32": "model.onnx", "int8": "model_fp16.onnx"}, warning: "model_fp16.onnx is named as fp16 but its graph is int8"}, ""},
		{"other files named by their file", optimumFolder.with(folder{"onnx/model_O4.onnx": graph(nil, nil, hidden), "onnx/model_q4.onnx": graph(nil, int4, hidden), "onnx/model_int8.onnx": graph(nil, int8, hidden)}), models.InferOptions{},
			want{versions: map[string]string{"fp32": "model.onnx", "model_quantized": "model_quantized.onnx", "model_O4": "onnx/model_O4.onnx", "int4": "onnx/model_q4.onnx", "int8": "onnx/model_int8.onnx"}}, ""},
		{"a version without float32 output is skipped", stFolder.with(folder{"onnx/model_fp16.onnx": graph(fp16W, nil, out("last_hidden_state", onnxtest.Float16, -1, -1, 4))}), models.InferOptions{},
			want{versions: map[string]string{"fp32": "onnx/model.onnx", "int8": "onnx/model_quantized.onnx"}, skipped: `onnx/model_fp16.onnx: output "last_hidden_state" is float16: ortserve reads float32 outputs`}, ""},
		{"a version with an input not fed is skipped", stFolder.with(folder{"onnx/model_quantized.onnx": graphIn([]onnxtest.Value{inIDs, inMask, out("position_ids", onnxtest.Int64, -1, -1)}, nil, int8, hidden)}), models.InferOptions{},
			want{versions: map[string]string{"fp32": "onnx/model.onnx", "fp16": "onnx/model_fp16.onnx"}, skipped: `onnx/model_quantized.onnx: input "position_ids" is not one ortserve feeds`}, ""},
		{"a junk file is skipped", stFolder.with(folder{"onnx/decoder.onnx": []byte("junk")}), models.InferOptions{}, want{versions: stVersions, skipped: "onnx/decoder.onnx: not an ONNX model"}, ""},
		{"no plain export: the fp32 graph is the default", stFolder.with(folder{"onnx/model.onnx": nil, "onnx/model_O2.onnx": graph(nil, nil, hidden)}), models.InferOptions{},
			want{def: "model_O2", versions: map[string]string{"model_O2": "onnx/model_O2.onnx", "int8": "onnx/model_quantized.onnx", "fp16": "onnx/model_fp16.onnx"}}, ""},
		{"fixed shapes are refused", optimumFolder.with(folder{"model.onnx": graphIn([]onnxtest.Value{out("input_ids", onnxtest.Int64, 1, 128), out("attention_mask", onnxtest.Int64, 1, 128)}, nil, nil, hidden), "model_quantized.onnx": nil}),
			models.InferOptions{}, want{}, `no .onnx file ortserve can serve: model.onnx: input "input_ids" has a fixed shape [1, 128]`},
		{"no tokenizer.json", optimumFolder.with(folder{"tokenizer.json": nil}), models.InferOptions{}, want{}, "no tokenizer.json"},
		{"no .onnx", optimumFolder.with(folder{"model.onnx": nil, "model_quantized.onnx": nil}), models.InferOptions{}, want{}, "no .onnx file at its root or in onnx/"},
		{"no config.json", optimumFolder.with(folder{"config.json": nil}), models.InferOptions{}, want{}, "no model.yaml and no config.json"},
		{"a broken config.json", optimumFolder.with(folder{"config.json": []byte("{")}), models.InferOptions{}, want{}, "config.json: unexpected end of JSON input"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := writeFolder(t, filepath.Join(t.TempDir(), "mini"), tt.f)
			inf, err := models.InferConfig(dir, tt.o)
			if tt.err != "" {
				var ie *models.InferError
				if err == nil || !strings.Contains(err.Error(), tt.err) || strings.Contains(err.Error(), "\n") || !errors.As(err, &ie) || !strings.HasPrefix(err.Error(), "models: "+dir+": ") {
					t.Fatalf("got %v, want one line containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c, w := inf.Config, tt.want
			if c.Name != "mini" || c.Tokenizer != "tokenizer.json" || (w.task != "" && c.Task != w.task) || (w.output != "" && c.Output != w.output) ||
				(w.pooling != "" && c.Pooling != w.pooling) || c.Normalize != w.norm && w.task != "" || (w.maxLen != 0 && c.MaxLength != w.maxLen) ||
				(w.labels != nil && !slices.Equal(c.Labels, w.labels)) || c.DefaultVersion != cmp(w.def, "fp32") || !slices.Equal(c.Dense, w.dense) {
				t.Errorf("got %+v\nwant %+v", c, w)
			}
			if w.versions != nil {
				got := map[string]string{}
				for name, v := range c.Versions {
					got[name] = v.File
				}
				if !maps.Equal(got, w.versions) {
					t.Errorf("versions %v, want %v", got, w.versions)
				}
			}
			if !containsLine(inf.Skipped, w.skipped) || !containsLine(inf.Warnings, w.warning) || (w.skipped == "" && len(inf.Skipped) > 0) {
				t.Errorf("skipped %q, warnings %q; want %q, %q", inf.Skipped, inf.Warnings, w.skipped, w.warning)
			}
			for _, key := range []string{"name", "task", "tokenizer", "max_length", "output", "default_version"} {
				if inf.Why[key] == "" {
					t.Errorf("no reason for %s", key)
				}
			}
			// The printed model.yaml is the same config, and so is the folder read with it.
			again, err := models.ParseConfig(inf.YAML())
			if err != nil || !reflect.DeepEqual(again, c) {
				t.Errorf("YAML reads back as %+v (%v), want %+v\n%s", again, err, c, inf.YAML())
			}
			os.WriteFile(filepath.Join(dir, models.ConfigFile), inf.YAML(), 0o644)
			if pinned, err := models.LoadConfig(dir, slog.New(slog.DiscardHandler)); err != nil || !reflect.DeepEqual(pinned, c) {
				t.Errorf("pinned: %+v (%v)", pinned, err)
			}
		})
	}
}

func cmp(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func containsLine(lines []string, want string) bool {
	return want == "" || slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, want) })
}

// What `server models init` prints for a sentence-transformers folder.
func TestInferYAML(t *testing.T) {
	dir := writeFolder(t, filepath.Join(t.TempDir(), "minilm"), stFolder.with(folder{"onnx/model_fp16.onnx": graph(fp16W, nil, out("last_hidden_state", onnxtest.Float16, -1, -1, 4))}))
	inf, err := models.InferConfig(dir, models.InferOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := `# Inferred by ` + "`server models init`" + ` from DIR, which has no model.yaml.
# Each comment says where a value came from. Edit what is wrong and save this as
# DIR/model.yaml to pin it: a model.yaml always wins over inference (docs/models.md).
name: minilm                               # the folder's name
task: embed                                # modules.json: a sentence-transformers model (Transformer, Pooling, Normalize)
tokenizer: tokenizer.json                  # the fast tokenizer's file
max_length: 256                            # sentence_bert_config.json: max_seq_length
output: last_hidden_state                  # onnx/model.onnx: float32 [d0, d1, 4], by name
pooling: mean                              # 1_Pooling/config.json: pooling_mode_mean_tokens
normalize: true                            # modules.json: a Normalize module
default_version: fp32                      # onnx/model.onnx, the model's plain export
versions:
  fp32: {file: onnx/model.onnx}            # float32 weights, no quantized operators
  int8: {file: onnx/model_quantized.onnx}  # 3 quantized nodes (MatMulInteger, DynamicQuantizeLinear)
# not served: onnx/model_fp16.onnx: output "last_hidden_state" is float16: ortserve reads float32 outputs (convert fp16 models with keep_io_types)
`
	if got := strings.ReplaceAll(string(inf.YAML()), dir, "DIR"); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// hubCache lays a folder out as the Hugging Face hub cache does: files in blobs/, linked
// from snapshots/<rev>/ (subfolders real), refs/main naming the revision.
func hubCache(t *testing.T, repo string, revs map[string]folder, main string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), repo)
	for rev, f := range revs {
		for p, data := range f {
			blob := filepath.Join(dir, "blobs", rev+"-"+strings.ReplaceAll(p, "/", "-"))
			link := filepath.Join(dir, "snapshots", rev, p)
			os.MkdirAll(filepath.Dir(blob), 0o755)
			os.MkdirAll(filepath.Dir(link), 0o755)
			if err := os.WriteFile(blob, data, 0o644); err != nil {
				t.Fatal(err)
			}
			target, _ := filepath.Rel(filepath.Dir(link), blob)
			if err := os.Symlink(target, link); err != nil {
				t.Fatal(err)
			}
		}
	}
	if main != "" {
		os.MkdirAll(filepath.Join(dir, "refs"), 0o755)
		os.WriteFile(filepath.Join(dir, "refs", "main"), []byte(main), 0o644)
	}
	return dir
}

func TestHubCache(t *testing.T) {
	old := stFolder.with(folder{"sentence_bert_config.json": js(map[string]any{"max_seq_length": 128})})
	revs := map[string]folder{"aaa111": old, "bbb222": stFolder}
	t.Run("refs/main", func(t *testing.T) {
		dir := hubCache(t, "models--ortserve--minilm", revs, "aaa111\n")
		inf, err := models.InferConfig(dir, models.InferOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c := inf.Config
		if c.Name != "minilm" || c.MaxLength != 128 || c.Tokenizer != "snapshots/aaa111/tokenizer.json" || c.Versions["fp32"].File != "snapshots/aaa111/onnx/model.onnx" {
			t.Errorf("%+v", c)
		}
		if !strings.Contains(inf.Why["tokenizer"], "refs/main") || !strings.Contains(inf.Why["name"], "models--ortserve--minilm") {
			t.Errorf("why: %v", inf.Why)
		}
		if !models.IsHFDir(dir) {
			t.Error("IsHFDir")
		}
		// A snapshot named directly is served from itself, under the model's name.
		inf, err = models.InferConfig(filepath.Join(dir, "snapshots", "bbb222"), models.InferOptions{})
		if err != nil || inf.Config.Name != "minilm" || inf.Config.Tokenizer != "tokenizer.json" || inf.Config.MaxLength != 256 {
			t.Errorf("snapshot: %+v %v", inf, err)
		}
	})
	t.Run("newest without refs/main", func(t *testing.T) {
		dir := hubCache(t, "models--minilm", revs, "")
		now := time.Now()
		os.Chtimes(filepath.Join(dir, "snapshots", "aaa111"), now, now)
		os.Chtimes(filepath.Join(dir, "snapshots", "bbb222"), now.Add(-time.Hour), now.Add(-time.Hour))
		inf, err := models.InferConfig(dir, models.InferOptions{})
		if err != nil || inf.Config.Name != "minilm" || inf.Config.MaxLength != 128 || !strings.Contains(inf.Why["tokenizer"], "the newest of 2 snapshots (no refs/main)") {
			t.Errorf("%+v %v", inf, err)
		}
	})
	t.Run("refs/main not downloaded", func(t *testing.T) {
		dir := hubCache(t, "models--org--minilm", map[string]folder{"bbb222": stFolder}, "ccc333")
		inf, err := models.InferConfig(dir, models.InferOptions{})
		if err != nil || !strings.Contains(inf.Why["tokenizer"], "the only snapshot (refs/main names ccc333, which is not downloaded)") {
			t.Errorf("%+v %v", inf, err)
		}
	})
	t.Run("no snapshots", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "models--org--empty")
		os.MkdirAll(filepath.Join(dir, "snapshots"), 0o755)
		_, err := models.InferConfig(dir, models.InferOptions{})
		if err == nil || !strings.Contains(err.Error(), "hub cache folder without snapshots") || models.IsHFDir(dir) {
			t.Errorf("%v", err)
		}
	})
	t.Run("served, and a new revision reloads in place", func(t *testing.T) {
		dir := hubCache(t, "models--ortserve--minilm", revs, "aaa111")
		r, err := models.OpenSources(models.Sources{Models: []models.ModelDir{{Dir: dir}}}, &fakeBackend{device: "cpu"}, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		st, _ := r.StatusOf("minilm")
		if st.Config.MaxLength != 128 || !slices.Equal(st.Versions, []string{"fp16", "fp32", "int8"}) {
			t.Fatalf("%+v", st)
		}
		os.WriteFile(filepath.Join(dir, "refs", "main"), []byte("bbb222"), 0o644)
		if err := r.Reload(); err != nil {
			t.Fatal(err)
		}
		if st, _ := r.StatusOf("minilm"); st.Config.MaxLength != 256 || st.Reloads != 1 {
			t.Errorf("after refs/main moved: %+v", st)
		}
	})
}

func TestRepositoryFindsModelFolders(t *testing.T) {
	root := t.TempDir()
	writeModel(t, root, "emb", embedYAML)
	writeFolder(t, filepath.Join(root, "hf"), optimumFolder)
	writeFolder(t, filepath.Join(root, "golden"), folder{"minilm.json": []byte("{}")})                        // no model: skipped
	writeFolder(t, filepath.Join(root, "layouts", "st"), stFolder)                                            // too deep: skipped
	odd := writeFolder(t, filepath.Join(root, "odd"), optimumFolder.with(folder{"model.onnx": graph(nil, nil, // refused: skipped
		out("a", onnxtest.Float, -1, -1, 4), out("b", onnxtest.Float, -1, -1, 4))}))
	other := writeFolder(t, filepath.Join(t.TempDir(), "st"), stFolder)
	b := &fakeBackend{device: "cpu"}
	r, err := models.OpenSources(models.Sources{Root: root, Models: []models.ModelDir{{Name: "named", Dir: other}}}, b, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got := r.Names(); !slices.Equal(got, []string{"emb", "hf", "named"}) {
		t.Errorf("models %v", got)
	}
	m, release, err := r.Acquire("named")
	if err != nil {
		t.Fatal(err)
	}
	if vecs, _, err := m.Embed(t.Context(), "int8", []string{"ab"}, models.EmbedOptions{}); err != nil || len(vecs[0]) != 2 {
		t.Errorf("embed: %v %v", vecs, err)
	}
	release()
	// The refused folder, unchanged, is not tried again; fixed, it is added.
	if err := r.Reload(); err != nil {
		t.Errorf("reload of unchanged folders: %v", err)
	}
	os.WriteFile(filepath.Join(odd, "model.onnx"), graph(nil, nil, hidden), 0o644)
	if err := r.Reload(); err != nil || !slices.Contains(r.Names(), "odd") {
		t.Errorf("fixed folder: %v, models %v", err, r.Names())
	}
	// A change in a subfolder (onnx/, 1_Pooling/) reloads the model.
	writeFolder(t, other, folder{"1_Pooling/config.json": poolingConfig("cls_token")})
	os.Chtimes(filepath.Join(other, "1_Pooling", "config.json"), time.Now().Add(time.Minute), time.Now().Add(time.Minute))
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if st, _ := r.StatusOf("named"); st.Config.Pooling != models.PoolingCLS || st.Reloads != 1 {
		t.Errorf("after 1_Pooling changed: %+v", st)
	}
}

// Find resolves a name as serve does: by the name a folder's model is served under, not the
// folder's own name; Hugging Face folders and named folders too.
func TestFind(t *testing.T) {
	root := t.TempDir()
	renamed := writeModel(t, root, "renamed", embedYAML) // name: emb
	hf := writeFolder(t, filepath.Join(root, "hf"), optimumFolder)
	odd := writeFolder(t, filepath.Join(root, "odd"), optimumFolder.with(folder{"model.onnx": graph(nil, nil,
		out("a", onnxtest.Float, -1, -1, 4), out("b", onnxtest.Float, -1, -1, 4))}))
	writeFolder(t, filepath.Join(root, "golden"), folder{"minilm.json": []byte("{}")}) // no model
	other := writeFolder(t, filepath.Join(t.TempDir(), "st"), stFolder)
	src := models.Sources{Root: root, Models: []models.ModelDir{{Name: "named", Dir: other}}}
	tests := []struct {
		name, model string
		src         models.Sources
		dir         string
		task        models.Task
		err         string // one line containing it; "": no error
	}{
		{"a folder named otherwise than its model", "emb", src, renamed, models.TaskEmbed, ""},
		{"a Hugging Face folder without model.yaml", "hf", src, hf, models.TaskEmbed, ""},
		{"a folder named with NAME=DIR", "named", src, other, models.TaskEmbed, ""},
		{"a folder's own name, not its model's", "renamed", src, "", "", `models: unknown model "renamed" (have [emb hf named odd])`},
		{"unknown, listing the known", "nope", src, "", "", `models: unknown model "nope" (have [emb hf named odd])`},
		{"a folder whose config cannot be inferred says why", "odd", src, "", "", odd + ": cannot tell which output"},
		{"no repository", "emb", models.Sources{Root: filepath.Join(root, "nope")}, "", "", "model repository " + filepath.Join(root, "nope")},
		{"a named folder that is missing", "emb", models.Sources{Root: root, Models: []models.ModelDir{{Dir: filepath.Join(root, "gone")}}}, "", "", "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, cfg, err := models.Find(tt.src, tt.model)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) || strings.Contains(err.Error(), "\n") {
					t.Errorf("got %q, %v; want one line containing %q", dir, err, tt.err)
				}
				return
			}
			if err != nil || dir != tt.dir || cfg.Name != tt.model || cfg.Task != tt.task {
				t.Errorf("got %q, name %q, task %q, %v; want %q, %q, %q", dir, cfg.Name, cfg.Task, err, tt.dir, tt.model, tt.task)
			}
		})
	}
	var ue *models.UnknownError
	if _, _, err := models.Find(src, "nope"); !errors.As(err, &ue) || !errors.Is(err, models.ErrUnknownModel) {
		t.Errorf("unknown model: %v; want an *UnknownError", err)
	}
}

func TestOpenSourcesFailures(t *testing.T) {
	root := t.TempDir()
	st := writeFolder(t, filepath.Join(root, "st"), stFolder)
	odd := writeFolder(t, filepath.Join(t.TempDir(), "odd"), optimumFolder.with(folder{"model.onnx": graph(nil, nil, out("a", onnxtest.Float, -1, -1, 4), out("b", onnxtest.Float, -1, -1, 4))}))
	opt := writeFolder(t, filepath.Join(t.TempDir(), "opt"), optimumFolder)
	notModel := writeFolder(t, filepath.Join(t.TempDir(), "data"), folder{"x.csv": []byte("a")})
	tests := []struct {
		name string
		src  models.Sources
		want string
	}{
		{"a named folder that is no model", models.Sources{Models: []models.ModelDir{{Dir: notModel}}}, "has no model.yaml and is not a Hugging Face model folder"},
		{"a missing folder", models.Sources{Models: []models.ModelDir{{Dir: filepath.Join(root, "nope")}}}, "no such file"},
		{"a refused folder named on its own", models.Sources{Models: []models.ModelDir{{Dir: odd}}}, "cannot tell which output"},
		{"the same folder twice", models.Sources{Root: root, Models: []models.ModelDir{{Name: "again", Dir: st}}}, "is given twice"},
		{"two models of one name", models.Sources{Models: []models.ModelDir{{Dir: st}, {Name: "st", Dir: opt}}}, `two models named "st"`},
		{"only refused folders", models.Sources{Root: filepath.Dir(odd)}, "skipped 1: models: " + odd + ": cannot tell which output"},
		{"a model folder as the repository", models.Sources{Root: st}, "is itself a model folder: serve it with --model " + st},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := models.OpenSources(tt.src, &fakeBackend{device: "cpu"}, slog.New(slog.DiscardHandler))
			if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("got %v, want one line containing %q", err, tt.want)
			}
		})
	}
}

func TestPoolings(t *testing.T) {
	// Three real tokens of two dimensions, then a padding row.
	hs := runtime.Tensor{Shape: []int64{4, 2}, Data: []float32{1, 6, 3, 2, 2, 4, 9, 9}}
	for _, tt := range []struct {
		p    models.Pooling
		want []float32
	}{
		{models.PoolingMean, []float32{2, 4}},
		{models.PoolingCLS, []float32{1, 6}},
		{models.PoolingMax, []float32{3, 6}},
		{models.PoolingLastToken, []float32{2, 4}},
		// log(1 + relu(x)), the largest over the real tokens: the padding row's 9 is not read.
		{models.PoolingSplade, []float32{float32(math.Log1p(3)), float32(math.Log1p(6))}},
	} {
		if got := models.Pool(tt.p, hs, 3); !slices.Equal(got, tt.want) {
			t.Errorf("%s: %v, want %v", tt.p, got, tt.want)
		}
	}
	neg := runtime.Tensor{Shape: []int64{2, 3}, Data: []float32{-1, 0, 2, -3, 0.5, -2}}
	if got := models.Sparse(models.Pool(models.PoolingSplade, neg, 2)); !slices.Equal(got, []models.SparseValue{{Index: 1, Value: float32(math.Log1p(0.5))}, {Index: 2, Value: float32(math.Log1p(2))}}) {
		t.Errorf("splade of negative logits: %v", got)
	}
	if got := models.Sparse(make([]float32, 3)); got == nil || len(got) != 0 {
		t.Errorf("Sparse of zeros: %#v, want an empty list", got)
	}
	if got := models.Pool(models.PoolingNone, runtime.Tensor{Shape: []int64{2}, Data: []float32{5, 7}}, 3); !slices.Equal(got, []float32{5, 7}) {
		t.Errorf("none: %v", got)
	}
}

// InferConfig reads files from anywhere: it must refuse in one line or infer a config whose
// model.yaml reads back the same, never panic.
func FuzzInferConfig(f *testing.F) {
	f.Add(string(bertConfig), string(stModules), string(poolingConfig("mean_tokens")), `{"max_seq_length": 256}`, `{"model_max_length": 512}`, 1)
	f.Add(`{"architectures": ["BertForSequenceClassification"], "id2label": {"0": "a: b", "1": "#c, [d]"}}`, "", "", "", `{"model_max_length": 1e30}`, 2)
	f.Add(`{"architectures": ["XForSequenceClassification"], "model_type": "roberta", "max_position_embeddings": 514, "pad_token_id": -3, "num_labels": 1}`, "null", "{}", "", "", 0)
	f.Add(`{"id2label": {"x": "y"}}`, `[{"type": "Dense"}]`, `{"pooling_mode": "lasttoken"}`, `[]`, `"s"`, 3)
	outputs := [][]onnxtest.Value{{hidden}, {logits(2)}, {logits(1)}, {pooled}, {hidden, pooled, logits(2)}}
	f.Fuzz(func(t *testing.T, config, modules, pooling, stConfig, tokConfig string, graphs int) {
		files := folder{"config.json": []byte(config), "tokenizer.json": []byte("{}")}
		for name, data := range map[string]string{"modules.json": modules, "1_Pooling/config.json": pooling, "sentence_bert_config.json": stConfig, "tokenizer_config.json": tokConfig} {
			if data != "" {
				files[name] = []byte(data)
			}
		}
		files["model.onnx"] = graph(nil, nil, outputs[uint(graphs)%uint(len(outputs))]...)
		dir := writeFolder(t, filepath.Join(t.TempDir(), "m"), files)
		inf, err := models.InferConfig(dir, models.InferOptions{})
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("not one line: %v", err)
			}
			return
		}
		again, err := models.ParseConfig(inf.YAML())
		if err != nil || !reflect.DeepEqual(again, inf.Config) {
			t.Fatalf("YAML reads back as %+v (%v), want %+v\n%s", again, err, inf.Config, inf.YAML())
		}
	})
}
