package onnxtest_test

import (
	"encoding/binary"
	"math"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/ortserve/ortserve/runtime/ort/onnxtest"
)

// initializer encodes a TensorProto named name of dataType; raw values go to raw_data,
// packed ones to packed float_data, unpacked ones to one float_data field each.
func initializer(name string, dataType int, raw, packed, unpacked []float32) []byte {
	var t []byte
	t = protowire.AppendTag(t, 1, protowire.VarintType) // dims
	t = protowire.AppendVarint(t, uint64(len(raw)+len(packed)+len(unpacked)))
	t = protowire.AppendTag(t, 2, protowire.VarintType) // data_type
	t = protowire.AppendVarint(t, uint64(dataType))
	if len(packed) > 0 {
		t = protowire.AppendTag(t, 4, protowire.BytesType)
		t = protowire.AppendBytes(t, floatBytes(packed))
	}
	for _, f := range unpacked {
		t = protowire.AppendTag(t, 4, protowire.Fixed32Type)
		t = protowire.AppendFixed32(t, math.Float32bits(f))
	}
	t = protowire.AppendTag(t, 8, protowire.BytesType) // name
	t = protowire.AppendString(t, name)
	if len(raw) > 0 {
		t = protowire.AppendTag(t, 9, protowire.BytesType)
		t = protowire.AppendBytes(t, floatBytes(raw))
	}
	return t
}

func floatBytes(fs []float32) []byte {
	var b []byte
	for _, f := range fs {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(f))
	}
	return b
}

// modelWith wraps initializers in a graph in a model, after the Identity model's fields.
func modelWith(inits ...[]byte) []byte {
	model := onnxtest.Identity([]onnxtest.Value{{Name: "x", ElemType: onnxtest.Float, Dims: []int64{-1, 2}}}, []string{"y"})
	var graph []byte
	for _, t := range inits {
		graph = protowire.AppendTag(graph, 5, protowire.BytesType)
		graph = protowire.AppendBytes(graph, t)
	}
	model = protowire.AppendTag(model, 7, protowire.BytesType) // a second graph field merges into the first
	return protowire.AppendBytes(model, graph)
}

func TestNegateFloats(t *testing.T) {
	model := modelWith(
		initializer("head.weight", onnxtest.Float, []float32{1.5, -2, 0}, nil, nil),
		initializer("head.scale", onnxtest.Float, nil, []float32{3, 0.25}, nil),
		initializer("head.bias", onnxtest.Float, nil, nil, []float32{-1, 4}),
		initializer("body.weight", onnxtest.Float, []float32{7}, nil, nil),
		initializer("head.quantized", onnxtest.Int64, []float32{5}, nil, nil), // not float: untouched
	)
	before := slices.Clone(model)
	n, err := onnxtest.NegateFloats(model, func(name string) bool { return strings.HasPrefix(name, "head.") })
	if err != nil || n != 3 {
		t.Fatalf("NegateFloats = %d, %v; want 3 initializers", n, err)
	}
	if len(model) != len(before) {
		t.Fatalf("length %d, want %d", len(model), len(before))
	}
	for _, tt := range []struct{ from, to []byte }{
		{floatBytes([]float32{1.5, -2, 0}), floatBytes([]float32{-1.5, 2, float32(math.Copysign(0, -1))})},
		{floatBytes([]float32{3, 0.25}), floatBytes([]float32{-3, -0.25})},
		{floatBytes([]float32{-1}), floatBytes([]float32{1})},
		{floatBytes([]float32{4}), floatBytes([]float32{-4})},
	} {
		if countOf(before, tt.from) == 0 || countOf(model, tt.to) == 0 {
			t.Errorf("values %x did not become %x", tt.from, tt.to)
		}
	}
	if countOf(model, floatBytes([]float32{7})) != countOf(before, floatBytes([]float32{7})) || countOf(model, floatBytes([]float32{5})) == 0 {
		t.Error("an initializer that does not match, or is not float, changed")
	}

	// Negating twice gives the model back.
	if _, err := onnxtest.NegateFloats(model, func(name string) bool { return strings.HasPrefix(name, "head.") }); err != nil || !slices.Equal(model, before) {
		t.Errorf("negating twice: %v, equal %v", err, slices.Equal(model, before))
	}
	if _, err := onnxtest.NegateFloats([]byte{0x3a, 0x10, 1}, func(string) bool { return true }); err == nil {
		t.Error("a truncated model: no error")
	}
	if _, err := onnxtest.NegateFloats(modelWith(initializer("ext", onnxtest.Float, nil, nil, nil)), func(string) bool { return true }); err == nil || !strings.Contains(err.Error(), "external") {
		t.Errorf("a tensor without values: %v", err)
	}
}

func countOf(b, sub []byte) int { return strings.Count(string(b), string(sub)) }
