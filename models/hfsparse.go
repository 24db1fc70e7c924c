package models

// What a SPLADE model's folder says about its output and pooling.

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ortserve/ortserve/runtime/onnx"
)

// spladeConfig is a sentence-transformers SpladePooling module's config.json.
type spladeConfig struct {
	Strategy   string `json:"pooling_strategy"`
	Activation string `json:"activation_function"`
}

// inferSparse fills a SPLADE model's task, output and pooling: a sentence-transformers
// SparseEncoder (modules.json: MLMTransformer, SpladePooling) whose graph gives the masked
// language model's logits per token.
func inferSparse(inf *Inference, base string, hc hfModelConfig, modules []stModule, ref *candidate, o InferOptions) error {
	c := &inf.Config
	c.Task, c.Pooling = TaskSparse, PoolingSplade
	var kinds []string
	var poolDir string
	for _, m := range modules {
		kinds = append(kinds, m.kind())
		switch m.kind() {
		case "MLMTransformer", "Transformer":
		case "SpladePooling":
			poolDir = m.Path
		default:
			return fmt.Errorf("modules.json has %s (%s), which ortserve does not run in a SPLADE model: write a %s", m.kind(), m.Path, ConfigFile)
		}
	}
	inf.because("task", "modules.json: a sentence-transformers SparseEncoder (%s)", strings.Join(kinds, ", "))

	file := filepath.ToSlash(filepath.Join(cmp.Or(poolDir, "1_SpladePooling"), "config.json"))
	var pc spladeConfig
	if err := readJSON(filepath.Join(base, file), &pc); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if s := cmp.Or(pc.Strategy, "max"); s != "max" {
		return fmt.Errorf("%s: pooling_strategy %q, which ortserve does not do (it pools SPLADE with max)", file, s)
	}
	if a := cmp.Or(pc.Activation, "relu"); a != "relu" {
		return fmt.Errorf("%s: activation_function %q, which ortserve does not do (it pools SPLADE with relu: log(1 + relu(x)))", file, a)
	}
	inf.because("pooling", "%s: SpladePooling max, relu: per vocabulary entry the largest log(1 + relu(logit)) over the text's tokens", file)

	var logits []onnx.IOInfo
	for _, v := range ref.info.Outputs {
		if v.Type == "float32" && len(v.Shape) == 3 && (o.Output == "" || v.Name == o.Output) {
			logits = append(logits, v)
		}
	}
	if i := slices.IndexFunc(logits, func(v onnx.IOInfo) bool { return v.Name == "logits" }); i >= 0 && o.Output == "" {
		logits = logits[i : i+1]
	}
	if vocab := hc.VocabSize; len(logits) > 1 && vocab > 0 {
		logits = slices.DeleteFunc(logits, func(v onnx.IOInfo) bool { return v.Shape[2].Fixed() && int(v.Shape[2].Value) != vocab })
	}
	switch len(logits) {
	case 0:
		return fmt.Errorf("%s has no float32 output of the masked language model's logits [batch, sequence, vocabulary] (it has %s): export it with its head (optimum-cli export onnx --task fill-mask) or write a %s", ref.rel, describe(ref.info.Outputs), ConfigFile)
	case 1:
		c.Output = logits[0].Name
		inf.because("output", "%s: float32 %s, the masked language model's logits", ref.rel, onnx.ShapeString(logits[0].Shape))
		return nil
	}
	return fmt.Errorf("cannot tell which output of %s holds the logits: %s: set output: in %s to one of them", ref.rel, describe(logits), ConfigFile)
}
