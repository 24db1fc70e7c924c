package onnx_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ortserve/ortserve/runtime/onnx"
	"github.com/ortserve/ortserve/runtime/ort/onnxtest"
)

func write(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestReadTinyModel(t *testing.T) {
	ids := onnxtest.Value{Name: "input_ids", ElemType: onnxtest.Int64, Dims: []int64{-1, -1}}
	mask := onnxtest.Value{Name: "attention_mask", ElemType: onnxtest.Int64, Dims: []int64{-1, -1}}
	x := onnxtest.Value{Name: "x", ElemType: onnxtest.Float, Dims: []int64{-1, 3}}
	path := write(t, "tiny.onnx", onnxtest.Identity([]onnxtest.Value{ids, mask, x}, []string{"a", "b", "c"}))
	m, err := onnx.ReadModel(path)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(struct {
		In, Out []onnx.IOInfo
		Ops     []onnx.OpCount
	}{m.Inputs, m.Outputs, m.Ops})
	want := `{"In":[{"name":"input_ids","type":"int64","shape":["d0","d1"]},{"name":"attention_mask","type":"int64","shape":["d0","d1"]},{"name":"x","type":"float32","shape":["d0",3]}],` +
		`"Out":[{"name":"a","type":"int64","shape":["d0","d1"]},{"name":"b","type":"int64","shape":["d0","d1"]},{"name":"c","type":"float32","shape":["d0",3]}],` +
		`"Ops":[{"domain":"ai.onnx","op":"Identity","nodes":3,"quantized":false}]}`
	if string(got) != want || m.Nodes != 3 || m.IRVersion != 8 || len(m.Opsets) != 1 || m.Opsets[0] != (onnx.Opset{Domain: "ai.onnx", Version: 17}) || m.Path != path {
		t.Errorf("got %s (%d nodes, IR %d, opsets %v, path %s)\nwant %s", got, m.Nodes, m.IRVersion, m.Opsets, m.Path, want)
	}
}

// The weights' element types and the quantized operators tell fp32, fp16 and int8 graphs
// apart; initializers that are also graph inputs are not inputs a caller feeds.
func TestReadWeightsAndOps(t *testing.T) {
	ids := onnxtest.Value{Name: "input_ids", ElemType: onnxtest.Int64, Dims: []int64{-1, -1}}
	w := onnxtest.Value{Name: "w", ElemType: onnxtest.Float16, Dims: []int64{4, 4}}
	g := onnxtest.Graph{
		Inputs:       []onnxtest.Value{ids, w},
		Outputs:      []onnxtest.Value{{Name: "y", ElemType: onnxtest.Float, Dims: []int64{-1, -1, 4}}},
		Ops:          []string{"DynamicQuantizeLinear", "MatMulInteger", "MatMulInteger", "Add", "QLinearMatMul"},
		Initializers: []onnxtest.Value{w, {Name: "b", ElemType: onnxtest.Float, Dims: []int64{4}}, {Name: "h", ElemType: onnxtest.Float16, Dims: []int64{4}}},
	}
	m, err := onnx.ParseModel(g.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Inputs) != 1 || m.Inputs[0].Name != "input_ids" {
		t.Errorf("inputs %+v: want input_ids alone", m.Inputs)
	}
	if m.Nodes != 5 || m.QuantizedNodes != 4 || m.Initializers != 3 || m.FP16Initializers != 2 || m.FP32Initializers != 1 {
		t.Errorf("%d nodes, %d quantized, %d initializers (%d fp16, %d fp32)", m.Nodes, m.QuantizedNodes, m.Initializers, m.FP16Initializers, m.FP32Initializers)
	}
	if onnx.ShapeString(m.Outputs[0].Shape) != "[d0, d1, 4]" || onnx.ShapeString(nil) != "(no shape)" {
		t.Errorf("output shape %s", onnx.ShapeString(m.Outputs[0].Shape))
	}
}

func TestReadRefusesBadFiles(t *testing.T) {
	dir := t.TempDir()
	put := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, data, 0o644)
		return p
	}
	tiny := onnxtest.Identity([]onnxtest.Value{{Name: "x", ElemType: onnxtest.Float, Dims: []int64{2}}}, []string{"y"})
	tests := []struct{ name, path, want string }{
		{"missing", filepath.Join(dir, "nope.onnx"), "no such file"},
		{"folder", dir, "is a folder"},
		{"text", put("junk.onnx", []byte("this is not a model")), "not an ONNX model"},
		{"empty", put("empty.onnx", nil), "not an ONNX model (no graph)"},
		{"truncated", put("cut.onnx", tiny[:len(tiny)-5]), "not an ONNX model (truncated)"},
		{"no graph", put("header.onnx", tiny[:2]), "not an ONNX model (no graph)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := onnx.ReadModel(tt.path)
			if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") || !strings.HasPrefix(err.Error(), "onnx: ") {
				t.Errorf("got %v, want one line containing %q", err, tt.want)
			}
		})
	}
}

// ParseModel reads files from anywhere: it must fail cleanly, never panic or loop.
func FuzzParseModel(f *testing.F) {
	ids := onnxtest.Value{Name: "input_ids", ElemType: onnxtest.Int64, Dims: []int64{-1, -1}}
	f.Add(onnxtest.Identity([]onnxtest.Value{ids}, []string{"out"}))
	f.Add(onnxtest.Identity([]onnxtest.Value{ids, {Name: "x", ElemType: onnxtest.Float, Dims: []int64{3}}}, []string{"a", "b"}))
	f.Add(onnxtest.Graph{Inputs: []onnxtest.Value{ids}, Ops: []string{"MatMulInteger"}, Initializers: []onnxtest.Value{{Name: "w", ElemType: onnxtest.Float16}}}.Encode())
	f.Add([]byte{0x3a, 0x02, 0x0a, 0x00}) // a graph with one empty node
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := onnx.ParseModel(data)
		if err != nil {
			return
		}
		sum := 0
		for _, o := range m.Ops {
			sum += o.Nodes
		}
		if sum != m.Nodes || m.Size != int64(len(data)) || m.FP16Initializers+m.FP32Initializers > m.Initializers {
			t.Errorf("%d nodes, ops sum to %d; size %d of %d; initializers %d", m.Nodes, sum, m.Size, len(data), m.Initializers)
		}
	})
}

// A file's weights are sought past, not read: what ReadModel reads of a file with large and
// small initializers is what ParseModel reads of the same bytes, and a file cut inside a
// weight it seeks past is truncated.
func TestReadSeeksPastWeights(t *testing.T) {
	ids := onnxtest.Value{Name: "input_ids", ElemType: onnxtest.Int64, Dims: []int64{-1, -1}}
	out := []onnxtest.Value{{Name: "y", ElemType: onnxtest.Float, Dims: []int64{-1, 4}}}
	inits := []onnxtest.Value{{Name: "w1", ElemType: onnxtest.Float, Dims: []int64{4}}, {Name: "w2", ElemType: onnxtest.Float16, Dims: []int64{4}}, {Name: "w3", ElemType: onnxtest.Float, Dims: []int64{4}}}
	// Larger than ReadModel's 64 KiB buffer, smaller than it, and a few bytes.
	for _, raw := range []int{300_000, 40_000, 7} {
		data := onnxtest.Graph{Inputs: []onnxtest.Value{ids}, Outputs: out, Ops: []string{"MatMul", "Add"}, Initializers: inits, RawBytes: raw}.Encode()
		path := write(t, "weights.onnx", data)
		got, err := onnx.ReadModel(path)
		if err != nil {
			t.Fatalf("raw %d: %v", raw, err)
		}
		want, err := onnx.ParseModel(data)
		if err != nil {
			t.Fatalf("raw %d: %v", raw, err)
		}
		want.Path = path
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want)
		if string(g) != string(w) || got.Initializers != 3 || got.FP16Initializers != 1 || got.Nodes != 2 || len(got.Inputs) != 1 || len(got.Outputs) != 1 {
			t.Errorf("raw %d: ReadModel %s\nParseModel %s", raw, g, w)
		}
		if _, err := onnx.ReadModel(write(t, "cut.onnx", data[:len(data)/2])); err == nil || !strings.Contains(err.Error(), "truncated") {
			t.Errorf("raw %d, cut in half: %v, want truncated", raw, err)
		}
	}
}

// BenchmarkReadModel reads the signature of a file with minilm's weight bytes (90 MB in 100
// initializers), as every session a server opens does.
func BenchmarkReadModel(b *testing.B) {
	ids := onnxtest.Value{Name: "input_ids", ElemType: onnxtest.Int64, Dims: []int64{-1, -1}}
	inits := make([]onnxtest.Value, 100)
	for i := range inits {
		inits[i] = onnxtest.Value{Name: fmt.Sprint("w", i), ElemType: onnxtest.Float, Dims: []int64{384}}
	}
	g := onnxtest.Graph{Inputs: []onnxtest.Value{ids}, Outputs: []onnxtest.Value{{Name: "y", ElemType: onnxtest.Float, Dims: []int64{-1, -1, 384}}},
		Ops: []string{"MatMul"}, Initializers: inits, RawBytes: 900_000}
	path := filepath.Join(b.TempDir(), "weights.onnx")
	if err := os.WriteFile(path, g.Encode(), 0o644); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := onnx.ReadModel(path); err != nil {
			b.Fatal(err)
		}
	}
}
