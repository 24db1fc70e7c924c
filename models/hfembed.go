package models

// What an embedding model's folder says about its output, pooling and normalization.

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ortserve/ortserve/runtime/onnx"
)

// Output names that say what an output holds.
var (
	tokenOutputs  = []string{"last_hidden_state", "token_embeddings"}
	pooledOutputs = []string{"sentence_embedding", "sentence_embeddings"}
)

// inferEmbed fills an embedder's task, output, pooling and normalization.
func inferEmbed(inf *Inference, base string, hc hfModelConfig, modules []stModule, st bool, ref *candidate, o InferOptions) error {
	c := &inf.Config
	c.Task = TaskEmbed
	var kinds, extra []string
	var poolDir string
	for _, m := range modules {
		kinds = append(kinds, m.kind())
		switch m.kind() {
		case "Transformer":
		case "Pooling":
			poolDir = m.Path
		case "Normalize":
			c.Normalize = true
		case "Dense":
			if poolDir == "" || c.Normalize {
				extra = append(extra, fmt.Sprintf("Dense (%s) where ortserve does not run it, not between pooling and Normalize", m.Path))
				break
			}
			c.Dense = append(c.Dense, filepath.ToSlash(m.Path))
		default:
			extra = append(extra, fmt.Sprintf("%s (%s)", m.kind(), m.Path))
		}
	}
	switch {
	case st:
		inf.because("task", "modules.json: a sentence-transformers model (%s)", strings.Join(kinds, ", "))
		if c.Normalize {
			inf.because("normalize", "modules.json: a Normalize module")
		} else {
			inf.because("normalize", "modules.json: no Normalize module")
		}
	default:
		inf.because("task", "config.json: %s, no sequence classification head: an encoder", cmp.Or(strings.Join(hc.Architectures, ", "), hc.ModelType, "no architectures"))
		inf.because("normalize", "no modules.json (requests still choose: /embed normalizes unless asked not to)")
	}

	// Pooling: 1_Pooling/config.json's mode, or the graph's own pooled output.
	var pooling Pooling
	var poolWhy, poolErr string
	if st {
		pooling, poolWhy, poolErr = stPooling(base, cmp.Or(poolDir, "1_Pooling"))
	}
	if len(extra) > 0 && poolErr == "" {
		poolErr = fmt.Sprintf("modules.json has %s after pooling, which ortserve does not run", strings.Join(extra, ", "))
	}
	dense := c.Dense
	c.Dense = nil // only with pooling done here (useToken): a pooled output has run them

	var token, pooled []onnx.IOInfo
	for _, v := range ref.info.Outputs {
		switch {
		case v.Type != "float32" || v.Name == "logits":
		case len(v.Shape) == 3:
			token = append(token, v)
		case len(v.Shape) == 2 && slices.Contains(pooledOutputs, v.Name):
			pooled = append(pooled, v)
		}
	}
	byName := func(vs []onnx.IOInfo, names []string) (onnx.IOInfo, bool) {
		for _, n := range names {
			if i := slices.IndexFunc(vs, func(v onnx.IOInfo) bool { return v.Name == n }); i >= 0 {
				return vs[i], true
			}
		}
		return onnx.IOInfo{}, false
	}
	usePooled := func(v onnx.IOInfo, why string) {
		c.Output, c.Pooling = v.Name, PoolingNone
		inf.because("output", "%s: float32 %s, %s", ref.rel, onnx.ShapeString(v.Shape), why)
		inf.because("pooling", "the output is already one vector per text")
	}
	useToken := func(v onnx.IOInfo, why string) {
		c.Output = v.Name
		inf.because("output", "%s: float32 %s, %s", ref.rel, onnx.ShapeString(v.Shape), why)
		if pooling == "" {
			pooling, poolWhy = PoolingMean, "no 1_Pooling/config.json: mean, as sentence-transformers pools a plain transformer"
			inf.Warnings = append(inf.Warnings, "pooling: mean is a guess (no sentence-transformers pooling config): pin pooling: in model.yaml if the model card says cls or another")
		}
		c.Pooling = pooling
		inf.because("pooling", "%s", poolWhy)
		if len(dense) > 0 {
			c.Dense = dense
			inf.because("dense", "modules.json: Dense modules after pooling (config.json and model.safetensors in each), run before Normalize")
		}
	}

	if o.Output != "" {
		v := ref.info.Outputs[slices.IndexFunc(ref.info.Outputs, func(v onnx.IOInfo) bool { return v.Name == o.Output })]
		switch {
		case len(v.Shape) == 2:
			usePooled(v, "given (--output)")
		case len(v.Shape) == 3 && poolErr == "":
			useToken(v, "given (--output)")
		case len(v.Shape) == 3:
			return fmt.Errorf("%s: token embeddings %q cannot be pooled as the model does", poolErr, v.Name)
		default:
			return fmt.Errorf("output %q has shape %s: an embedder's output is [batch, sequence, hidden] or [batch, hidden]", v.Name, onnx.ShapeString(v.Shape))
		}
		return nil
	}
	// A pooling ortserve cannot do, or modules past pooling: only the graph's own pooled
	// output answers as the model does.
	if poolErr != "" {
		if v, ok := byName(pooled, pooledOutputs); ok {
			usePooled(v, "by name: the graph pools as the model does ("+poolErr+")")
			return nil
		}
		return fmt.Errorf("%s, and %s has no sentence_embedding output (it has %s): export the whole sentence-transformers pipeline, or write a %s (pooling: one of %s)", poolErr, ref.rel, describe(ref.info.Outputs), ConfigFile, poolingNames())
	}
	// A graph exported with its Dense modules has run them in its pooled output already.
	if v, ok := byName(pooled, pooledOutputs); ok && len(dense) > 0 {
		usePooled(v, "by name: the graph pools and runs modules.json's Dense modules itself")
		return nil
	}
	if v, ok := byName(token, tokenOutputs); ok {
		useToken(v, "by name")
		return nil
	}
	if !st { // a graph that pools itself beats a guessed pooling
		if v, ok := byName(pooled, pooledOutputs); ok {
			usePooled(v, "by name")
			return nil
		}
	}
	// By shape: [batch, sequence, hidden], hidden as config.json says when both say.
	var shaped []onnx.IOInfo
	for _, v := range token {
		if d := v.Shape[2]; !d.Fixed() || hc.hidden() == 0 || int(d.Value) == hc.hidden() {
			shaped = append(shaped, v)
		}
	}
	switch {
	case len(shaped) == 1:
		useToken(shaped[0], "the only [batch, sequence, hidden] output")
		return nil
	case len(shaped) == 0 && len(pooled) == 1:
		usePooled(pooled[0], "by name")
		return nil
	case len(shaped) == 0:
		return fmt.Errorf("no output of %s is token embeddings [batch, sequence, hidden] or a sentence_embedding [batch, hidden] in float32 (it has %s): set output: in %s", ref.rel, describe(ref.info.Outputs), ConfigFile)
	}
	return fmt.Errorf("cannot tell which output of %s holds the token embeddings: %s: set output: in %s to one of them (server models init --output NAME DIR writes the rest)", ref.rel, describe(shaped), ConfigFile)
}

// poolingNames lists the poolings the pipeline implements.
func poolingNames() string {
	s := make([]string, len(Poolings))
	for i, p := range Poolings {
		s[i] = string(p)
	}
	return strings.Join(s, ", ")
}

// stPooling reads a sentence-transformers Pooling module's config: the pooling, why, or
// why ortserve cannot do it.
func stPooling(base, dir string) (Pooling, string, string) {
	file := filepath.ToSlash(filepath.Join(dir, "config.json"))
	var pc map[string]any
	if err := readJSON(filepath.Join(base, file), &pc); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", "", ""
		}
		return "", "", err.Error()
	}
	modes := map[string]Pooling{
		"pooling_mode_mean_tokens": PoolingMean, "pooling_mode_cls_token": PoolingCLS,
		"pooling_mode_max_tokens": PoolingMax, "pooling_mode_lasttoken": PoolingLastToken,
		"pooling_mode_mean_sqrt_len_tokens": "", "pooling_mode_weightedmean_tokens": "",
	}
	var on []string
	for _, k := range slices.Sorted(maps.Keys(pc)) {
		if _, known := modes[k]; known && pc[k] == true {
			on = append(on, k)
		}
	}
	if mode, ok := pc["pooling_mode"].(string); ok && len(on) == 0 { // a newer spelling
		on = append(on, "pooling_mode_"+mode)
		modes["pooling_mode_"+mode] = map[string]Pooling{"mean": PoolingMean, "cls": PoolingCLS, "max": PoolingMax, "lasttoken": PoolingLastToken}[mode]
	}
	switch {
	case len(on) == 0:
		return "", "", fmt.Sprintf("%s sets no pooling mode", file)
	case len(on) > 1:
		return "", "", fmt.Sprintf("%s concatenates %s, which ortserve does not do (it pools one way: %s)", file, strings.Join(on, " + "), poolingNames())
	case modes[on[0]] == "":
		return "", "", fmt.Sprintf("%s: %s, which ortserve does not do (it pools %s)", file, on[0], poolingNames())
	}
	return modes[on[0]], file + ": " + on[0], ""
}
