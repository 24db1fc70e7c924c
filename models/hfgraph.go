package models

// The ONNX files of a Hugging Face folder: which graph is which version, and what is wrong
// with the ones that cannot serve.

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ortserve/ortserve/runtime/onnx"
)

// onnxFiles lists the .onnx files at base's root and in base/onnx, relative to base.
func onnxFiles(base string) ([]string, error) {
	var out []string
	for _, sub := range []string{".", onnxSubdir} {
		entries, err := os.ReadDir(filepath.Join(base, sub))
		if err != nil {
			if sub == "." || !errors.Is(err, fs.ErrNotExist) {
				return nil, err
			}
			continue
		}
		for _, e := range entries {
			p := filepath.Join(sub, e.Name())
			if strings.HasSuffix(e.Name(), ".onnx") && isFile(filepath.Join(base, p)) {
				out = append(out, filepath.ToSlash(p))
			}
		}
	}
	return out, nil
}

// claimByName is the kind a file's name claims: model.onnx is fp32; quantized, int8, qint8
// and uint8 are int8; q4, int4 and bnb4 int4; fp16 fp16; any other says nothing.
func claimByName(rel string) string {
	stem := strings.ToLower(strings.TrimSuffix(baseName(rel), ".onnx"))
	switch {
	case stem == "model" || strings.Contains(stem, "fp32"):
		return "fp32"
	case strings.Contains(stem, "q4") || strings.Contains(stem, "int4") || strings.Contains(stem, "bnb4"):
		return "int4"
	case strings.Contains(stem, "quantized") || strings.Contains(stem, "int8") || strings.Contains(stem, "uint8"):
		return "int8" // qint8 and quint8 contain int8
	case strings.Contains(stem, "fp16") || strings.Contains(stem, "float16"):
		return "fp16"
	}
	return ""
}

// fourBitOps are the quantized operators of 4-bit weights.
var fourBitOps = []string{"MatMulNBits", "MatMulBnb4", "GatherBlockQuantized"}

// kindByGraph is what a graph is: int4 or int8 by its quantized operators, fp16 when most of
// its float weights are float16, else fp32.
func kindByGraph(m onnx.ModelInfo) string {
	switch {
	case slices.ContainsFunc(m.Ops, func(o onnx.OpCount) bool { return slices.Contains(fourBitOps, o.Op) }):
		return "int4"
	case m.QuantizedNodes > 0:
		return "int8"
	case m.FP16Initializers > m.FP32Initializers:
		return "fp16"
	}
	return "fp32"
}

// describe says what a graph is, for a version's comment.
func (cd *candidate) describe() string {
	m := cd.info
	switch cd.kind {
	case "int8", "int4":
		var ops []string
		for _, o := range m.Ops {
			if o.Quantized && len(ops) < 3 {
				ops = append(ops, o.Op)
			}
		}
		return fmt.Sprintf("%d quantized nodes (%s)", m.QuantizedNodes, strings.Join(ops, ", "))
	case "fp16":
		return fmt.Sprintf("float16 weights (%d of %d float initializers)", m.FP16Initializers, m.FP16Initializers+m.FP32Initializers)
	}
	return "float32 weights, no quantized operators"
}

// inputProblem says why the runtime cannot feed a graph's inputs, or "".
func inputProblem(m onnx.ModelInfo) string {
	has := map[string]bool{}
	for _, in := range m.Inputs {
		switch in.Name {
		case inputIDs, attentionMask, tokenTypeIDs:
		default:
			return fmt.Sprintf("input %q is not one ortserve feeds (%s, %s, %s)", in.Name, inputIDs, attentionMask, tokenTypeIDs)
		}
		if in.Type != "int64" || len(in.Shape) != 2 {
			return fmt.Sprintf("input %q is %s %s: ortserve feeds int64 [batch, sequence]", in.Name, in.Type, onnx.ShapeString(in.Shape))
		}
		if in.Shape[0].Fixed() || in.Shape[1].Fixed() {
			return fmt.Sprintf("input %q has a fixed shape %s: ortserve batches texts of any length (export with dynamic axes)", in.Name, onnx.ShapeString(in.Shape))
		}
		has[in.Name] = true
	}
	if !has[inputIDs] || !has[attentionMask] {
		return fmt.Sprintf("lacks input %s or %s: not a transformer encoder ortserve can feed", inputIDs, attentionMask)
	}
	if len(m.Outputs) == 0 {
		return "declares no outputs"
	}
	return ""
}

// outputProblem says why a graph lacks the output the reference graph is read at, or "".
func outputProblem(m onnx.ModelInfo, want onnx.IOInfo) string {
	i := slices.IndexFunc(m.Outputs, func(v onnx.IOInfo) bool { return v.Name == want.Name })
	switch {
	case i < 0:
		return fmt.Sprintf("no output %q (it has %s)", want.Name, describe(m.Outputs))
	case m.Outputs[i].Type != "float32":
		return fmt.Sprintf("output %q is %s: ortserve reads float32 outputs (convert fp16 models with keep_io_types)", want.Name, m.Outputs[i].Type)
	case len(m.Outputs[i].Shape) != len(want.Shape):
		return fmt.Sprintf("output %q has shape %s, the default version's %s", want.Name, onnx.ShapeString(m.Outputs[i].Shape), onnx.ShapeString(want.Shape))
	}
	return ""
}

// preferred is the graph the config is inferred from and the default version: model.onnx
// (at the root, then in onnx/), else the first fp32 graph, else the first usable one.
func preferred(cands []*candidate) *candidate {
	var first, fp32 *candidate
	for _, cd := range cands {
		if cd.problem != "" {
			continue
		}
		if baseName(cd.rel) == "model.onnx" {
			return cd
		}
		if fp32 == nil && cd.kind == "fp32" {
			fp32 = cd
		}
		if first == nil {
			first = cd
		}
	}
	return cmp.Or(fp32, first)
}

// versionName names a version by what its graph is (fp32, fp16, int8, int4) or, for a file
// whose name claims nothing or a name already taken, by its file.
func versionName(cd *candidate, taken map[string]VersionConfig) string {
	name := cd.kind
	if cd.claim == "" && baseName(cd.rel) != "model.onnx" {
		name = safeName(strings.TrimSuffix(baseName(cd.rel), ".onnx"))
	}
	if _, dup := taken[name]; !dup {
		return name
	}
	if stem := safeName(strings.TrimSuffix(baseName(cd.rel), ".onnx")); stem != "model" {
		if _, dup := taken[stem]; !dup {
			return stem
		}
	}
	return safeName(strings.TrimSuffix(cd.rel, ".onnx"))
}

// safeName keeps letters, digits, '.', '_' and '-', and makes anything else '-': names go
// into URLs and metric labels.
func safeName(s string) string {
	s = strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			return r
		}
		return '-'
	}, s)
	if s == "" || s == "." || s == ".." {
		return "model"
	}
	return s
}

// inferName is the model's name, and why: a hub cache folder's model name
// (models--org--NAME, also for one of its snapshots), or the folder's.
func inferName(dir string) (name, why string) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = filepath.Clean(dir)
	}
	base := filepath.Base(abs)
	if up := filepath.Dir(filepath.Dir(abs)); filepath.Base(filepath.Dir(abs)) == "snapshots" && strings.HasPrefix(filepath.Base(up), "models--") {
		base = filepath.Base(up)
	}
	repo, ok := strings.CutPrefix(base, "models--")
	if !ok {
		return safeName(base), "the folder's name"
	}
	if i := strings.LastIndex(repo, "--"); i >= 0 {
		repo = repo[i+2:]
	}
	return safeName(repo), "the hub cache folder's model name (" + base + ")"
}

// describe lists outputs as `"name" type [shape]`.
func describe(vs []onnx.IOInfo) string {
	if len(vs) == 0 {
		return "none"
	}
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = fmt.Sprintf("%q %s %s", v.Name, v.Type, onnx.ShapeString(v.Shape))
	}
	return strings.Join(s, ", ")
}
