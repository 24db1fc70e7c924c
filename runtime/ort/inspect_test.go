//go:build cgo && ort

package ort_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/ortserve/ortserve/runtime/onnx"
	"github.com/ortserve/ortserve/runtime/ort"
	"github.com/ortserve/ortserve/runtime/ort/onnxtest"
)

// opNodes is how many nodes of m run op.
func opNodes(m onnx.ModelInfo, op string) int {
	for _, o := range m.Ops {
		if o.Op == op {
			return o.Nodes
		}
	}
	return 0
}

func TestInspectReadModel(t *testing.T) {
	tests := []struct {
		version         string
		quantized, fp16 bool
	}{
		{"fp32", false, false},
		{"int8", true, false},
		{"fp16", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.version, func(t *testing.T) {
			m, err := onnx.ReadModel(modelFile("minilm", tt.version))
			if err != nil {
				t.Fatal(err)
			}
			if m.IRVersion == 0 || m.Producer == "" || !slices.Contains(m.Opsets, onnx.Opset{Domain: "ai.onnx", Version: m.Opsets[0].Version}) {
				t.Errorf("header: IR %d, producer %q, opsets %v", m.IRVersion, m.Producer, m.Opsets)
			}
			if fi, _ := os.Stat(m.Path); fi.Size() != m.Size {
				t.Errorf("size %d, file has %d", m.Size, fi.Size())
			}
			if len(m.Inputs) != 3 {
				t.Fatalf("inputs %v", m.Inputs)
			}
			for _, in := range m.Inputs {
				if in.Type != "int64" || len(in.Shape) != 2 || in.Shape[0].Param == "" || in.Shape[1].Param == "" {
					t.Errorf("input %s is %s %s: want int64 [batch, sequence] with named axes", in.Name, in.Type, onnx.ShapeString(in.Shape))
				}
			}
			if m.Inputs[0].Name != "input_ids" || onnx.ShapeString(m.Inputs[0].Shape) != "[batch, sequence]" {
				t.Errorf("first input %s %s", m.Inputs[0].Name, onnx.ShapeString(m.Inputs[0].Shape))
			}
			out := m.Outputs[0]
			if len(m.Outputs) != 1 || out.Name != "last_hidden_state" || out.Type != "float32" || len(out.Shape) != 3 || out.Shape[2] != (onnx.Dim{Value: 384}) {
				t.Errorf("outputs %+v", m.Outputs)
			}
			sum := 0
			for _, o := range m.Ops {
				sum += o.Nodes
			}
			if sum != m.Nodes || m.Nodes < 100 {
				t.Errorf("%d nodes, ops sum to %d", m.Nodes, sum)
			}
			mmi, dql := opNodes(m, "MatMulInteger"), opNodes(m, "DynamicQuantizeLinear")
			if tt.quantized != (m.QuantizedNodes > 0) || tt.quantized != (mmi > 0 && dql > 0) {
				t.Errorf("%d quantized nodes (%d MatMulInteger, %d DynamicQuantizeLinear): want some: %v", m.QuantizedNodes, mmi, dql, tt.quantized)
			}
			if tt.fp16 != (m.FP16Initializers > 0) {
				t.Errorf("%d fp16 initializers of %d: want some: %v", m.FP16Initializers, m.Initializers, tt.fp16)
			}
		})
	}
}

// ONNX Runtime places every node on CPU when CPU is all it has; what it places is the
// optimized graph, so fewer nodes than the file has (fusions, constant folding).
func TestInspectPlace(t *testing.T) {
	for _, version := range []string{"fp32", "int8"} {
		t.Run(version, func(t *testing.T) {
			m, err := onnx.ReadModel(modelFile("minilm", version))
			if err != nil {
				t.Fatal(err)
			}
			p, err := env.Place(m, cpu(""))
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d nodes in the file, %d after optimization, %d/%d quantized", m.Nodes, p.Nodes, m.QuantizedNodes, p.QuantizedNodes)
			if p.Provider != ort.ProviderCPU || len(p.Providers) != 1 || p.Providers[0] != (ort.ProviderCount{Provider: string(ort.ProviderCPU), Nodes: p.Nodes}) {
				t.Errorf("placement %+v: want all %d nodes on CPU", p.Providers, p.Nodes)
			}
			sum := 0
			for _, o := range p.Ops {
				sum += o.Nodes
			}
			if sum != p.Nodes || p.Nodes == 0 || p.Nodes > m.Nodes || len(p.Fallback) != 0 {
				t.Errorf("%d nodes placed (ops sum to %d, file has %d), fallback %v", p.Nodes, sum, m.Nodes, p.Fallback)
			}
			if (version == "int8") != (p.QuantizedNodes > 0) {
				t.Errorf("%d quantized nodes placed", p.QuantizedNodes)
			}
		})
	}
}

// A tiny graph runs on CPU, all its nodes placed there (runtime/onnx tests the reading).
func TestInspectTinyModel(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tiny.onnx")
	ids := onnxtest.Value{Name: "input_ids", ElemType: onnxtest.Int64, Dims: []int64{-1, -1}}
	mask := onnxtest.Value{Name: "attention_mask", ElemType: onnxtest.Int64, Dims: []int64{-1, -1}}
	x := onnxtest.Value{Name: "x", ElemType: onnxtest.Float, Dims: []int64{-1, 3}}
	if err := os.WriteFile(path, onnxtest.Identity([]onnxtest.Value{ids, mask, x}, []string{"a", "b", "c"}), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := onnx.ReadModel(path)
	if err != nil {
		t.Fatal(err)
	}
	p, err := env.Place(m, cpu(""))
	if err != nil {
		t.Fatal(err)
	}
	if p.Nodes != 3 || p.NodesOn(string(ort.ProviderCPU)) != 3 || len(p.Ops) != 1 || p.Ops[0].Op != "Identity" {
		t.Errorf("placement %+v", p)
	}
}
