// Package onnx reads what an ONNX file says about itself from its own bytes (a ModelProto),
// without ONNX Runtime: header, signature with named dynamic axes, operators and the element
// types of the weights. It streams the file, so the weights are read past, not held in
// memory. It has no cgo: the model repository infers configs with it, runtime/ort checks and
// places graphs with it, and both test without native libraries.
package onnx

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ModelInfo is what an ONNX file says about itself.
type ModelInfo struct {
	Path            string  `json:"path"`
	Size            int64   `json:"size_bytes"`
	IRVersion       int64   `json:"ir_version"`
	Producer        string  `json:"producer"`
	ProducerVersion string  `json:"producer_version"`
	Opsets          []Opset `json:"opsets"`
	// Inputs are the graph inputs a caller feeds: those that are not also initializers.
	Inputs  []IOInfo `json:"inputs"`
	Outputs []IOInfo `json:"outputs"`
	// Nodes counts the graph's nodes, those of subgraphs (If, Loop, Scan bodies) included.
	Nodes int `json:"nodes"`
	// Ops counts the nodes per operator, most frequent first.
	Ops []OpCount `json:"ops"`
	// QuantizedNodes counts the nodes whose operator is a quantized one (see IsQuantizedOp).
	QuantizedNodes int `json:"quantized_nodes"`
	Initializers   int `json:"initializers"`
	// FP16Initializers and FP16Casts tell an fp16 graph: float16 weights, and Cast nodes to
	// float16 (keep_io_types graphs cast their float32 inputs).
	FP16Initializers int `json:"fp16_initializers"`
	FP16Casts        int `json:"fp16_casts"`
	// FP32Initializers counts the float32 weights, to tell a mostly-fp16 graph from a float32
	// one with a few fp16 constants.
	FP32Initializers int `json:"fp32_initializers"`
}

// Opset is one operator set the model imports. The default ONNX domain is "ai.onnx".
type Opset struct {
	Domain  string `json:"domain"`
	Version int64  `json:"version"`
}

// IOInfo is a graph input or output.
type IOInfo struct {
	Name string `json:"name"`
	// Type is the tensor element type ("int64", "float32", "float16", ...), or the kind of a
	// value that is not a tensor ("sequence", "map", "optional", "sparse_tensor").
	Type  string `json:"type"`
	Shape []Dim  `json:"shape"` // nil when the file declares no shape
	// Elem is the element type as onnx.proto numbers it (TensorProto.DataType); 0 for a
	// value that is not a tensor.
	Elem int `json:"-"`
}

// Dim is one axis of a declared shape: a fixed size, a named dynamic axis, or neither (an
// unnamed dynamic axis).
type Dim struct {
	Value int64  // ≥ 0 when fixed
	Param string // the dynamic axis' name
}

// Fixed reports whether the axis has a fixed size.
func (d Dim) Fixed() bool { return d.Param == "" && d.Value >= 0 }

// String is the size, the axis' name, or "?".
func (d Dim) String() string {
	switch {
	case d.Param != "":
		return d.Param
	case d.Value >= 0:
		return strconv.FormatInt(d.Value, 10)
	}
	return "?"
}

// MarshalJSON writes a fixed axis as a number, a named one as its name, an unnamed one as
// null.
func (d Dim) MarshalJSON() ([]byte, error) {
	switch {
	case d.Param != "":
		return json.Marshal(d.Param)
	case d.Value >= 0:
		return []byte(strconv.FormatInt(d.Value, 10)), nil
	}
	return []byte("null"), nil
}

// UnmarshalJSON reads what MarshalJSON writes.
func (d *Dim) UnmarshalJSON(b []byte) error {
	*d = Dim{Value: -1}
	switch {
	case string(b) == "null":
		return nil
	case len(b) > 0 && b[0] == '"':
		return json.Unmarshal(b, &d.Param)
	}
	return json.Unmarshal(b, &d.Value)
}

// ShapeString formats a shape as [batch_size, sequence_length, 384].
func ShapeString(dims []Dim) string {
	if dims == nil {
		return "(no shape)"
	}
	s := make([]string, len(dims))
	for i, d := range dims {
		s[i] = d.String()
	}
	return "[" + strings.Join(s, ", ") + "]"
}

// OpCount is how many nodes run one operator.
type OpCount struct {
	Domain    string `json:"domain"` // "ai.onnx" for the default domain
	Op        string `json:"op"`
	Nodes     int    `json:"nodes"`
	Quantized bool   `json:"quantized"`
}

// quantizedOps are the operators that compute on quantized (integer) tensors or convert to
// and from them: the ONNX ones, and com.microsoft's. A com.microsoft operator is not
// quantized for its domain alone: fp32 graphs carry fused com.microsoft operators too
// (Attention, SkipLayerNormalization, FusedMatMul, QuickGelu).
var quantizedOps = map[string]bool{
	// ai.onnx
	"MatMulInteger": true, "ConvInteger": true, "DynamicQuantizeLinear": true,
	"QuantizeLinear": true, "DequantizeLinear": true, "QLinearMatMul": true, "QLinearConv": true,
	// com.microsoft
	"DynamicQuantizeMatMul": true, "MatMulIntegerToFloat": true, "DynamicQuantizeLSTM": true,
	"QAttention": true, "QEmbedLayerNormalization": true, "QGemm": true, "QMoE": true,
	"MatMulNBits": true, "MatMulBnb4": true, "GatherBlockQuantized": true,
	"QuantizeBFP": true, "DequantizeBFP": true,
}

// IsQuantizedOp reports whether op (in any domain) computes on quantized tensors or converts
// to or from them: MatMulInteger, DynamicQuantizeLinear, QuantizeLinear, DequantizeLinear,
// QLinear*, and com.microsoft's DynamicQuantizeMatMul, MatMulIntegerToFloat, QAttention,
// QOrdered* and the like.
func IsQuantizedOp(op string) bool {
	return quantizedOps[op] || strings.HasPrefix(op, "QLinear") || strings.HasPrefix(op, "QOrdered")
}

// Element types as onnx.proto's TensorProto.DataType numbers them.
const (
	elemFloat32 = 1
	elemFloat16 = 10
)

// elemTypes names onnx.proto's tensor element types.
var elemTypes = map[int]string{
	1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64",
	8: "string", 9: "bool", 10: "float16", 11: "float64", 12: "uint32", 13: "uint64",
	14: "complex64", 15: "complex128", 16: "bfloat16", 17: "float8e4m3fn", 18: "float8e4m3fnuz",
	19: "float8e5m2", 20: "float8e5m2fnuz", 21: "uint4", 22: "int4", 23: "float4e2m1",
}

func elemName(t int) string {
	if n, ok := elemTypes[t]; ok {
		return n
	}
	return fmt.Sprintf("type%d", t)
}

// ReadModel reads an ONNX file's header, signature and operators. It streams the file, so
// the weights are read past, not held in memory.
func ReadModel(path string) (ModelInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return ModelInfo{}, fmt.Errorf("onnx: model file %s: %w", path, errors.Unwrap(err))
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return ModelInfo{}, fmt.Errorf("onnx: model file %s: %w", path, err)
	}
	if fi.IsDir() {
		return ModelInfo{}, fmt.Errorf("onnx: model file %s is a folder: name an .onnx file", path)
	}
	m, err := parseModel(bufio.NewReaderSize(f, 1<<16), f, fi.Size())
	if err != nil {
		return ModelInfo{}, fmt.Errorf("onnx: %s is not an ONNX model (%w): check the file or export it again", path, err)
	}
	m.Path = path
	return m, nil
}

// ParseModel reads an ONNX model held in memory, as ReadModel reads a file.
func ParseModel(data []byte) (ModelInfo, error) {
	m, err := parseModel(bufio.NewReader(bytes.NewReader(data)), nil, int64(len(data)))
	if err != nil {
		return ModelInfo{}, fmt.Errorf("onnx: not an ONNX model (%w): check the data", err)
	}
	return m, nil
}
