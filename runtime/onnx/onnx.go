// Package onnx reads what an ONNX file says about itself from its own bytes (a ModelProto),
// without ONNX Runtime: header, signature with named dynamic axes, operators and the element
// types of the weights. It streams the file, so the weights are read past, not held in
// memory. It has no cgo: the model repository infers configs with it, runtime/ort checks and
// places graphs with it, and both test without native libraries.
package onnx

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
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

// Field numbers of onnx.proto.
const (
	modelIRVersion       = 1
	modelOpsetImport     = 8
	modelProducerName    = 2
	modelProducerVersion = 3
	modelGraph           = 7

	graphNode        = 1
	graphInitializer = 5
	graphInput       = 11
	graphOutput      = 12

	nodeOpType    = 4
	nodeAttribute = 5
	nodeDomain    = 7

	attrName   = 1
	attrI      = 3
	attrG      = 6
	attrGraphs = 11

	tensorDataType = 2
	tensorName     = 8
)

// maxNesting bounds subgraph depth, so that a hostile file cannot recurse without end.
const maxNesting = 32

// parseModel reads a ModelProto of size bytes from r, a buffer over src (which may be nil:
// the stream then reads past what it skips instead of seeking).
func parseModel(r *bufio.Reader, src io.ReadSeeker, size int64) (ModelInfo, error) {
	m := ModelInfo{Size: size}
	ops := map[[2]string]int{}
	inits := map[string]bool{}
	var inputs []IOInfo
	s := &stream{r: r, src: src, left: size}
	sawGraph := false
	for {
		num, typ, ok, err := s.next()
		if err != nil {
			return ModelInfo{}, err
		}
		if !ok {
			break
		}
		switch {
		case num == modelIRVersion && typ == protowire.VarintType:
			v, err := s.varint()
			if err != nil {
				return ModelInfo{}, err
			}
			m.IRVersion = int64(v)
		case (num == modelProducerName || num == modelProducerVersion) && typ == protowire.BytesType:
			b, err := s.bytes()
			if err != nil {
				return ModelInfo{}, err
			}
			if num == modelProducerName {
				m.Producer = string(b)
			} else {
				m.ProducerVersion = string(b)
			}
		case num == modelOpsetImport && typ == protowire.BytesType:
			b, err := s.bytes()
			if err != nil {
				return ModelInfo{}, err
			}
			o, err := parseOpset(b)
			if err != nil {
				return ModelInfo{}, err
			}
			m.Opsets = append(m.Opsets, o)
		case num == modelGraph && typ == protowire.BytesType:
			g, err := s.sub()
			if err != nil {
				return ModelInfo{}, err
			}
			if err := m.graph(g, 0, ops, inits, &inputs); err != nil {
				return ModelInfo{}, err
			}
			sawGraph = true
		default:
			if err := s.skip(typ); err != nil {
				return ModelInfo{}, err
			}
		}
	}
	if !sawGraph {
		return ModelInfo{}, errors.New("no graph")
	}
	for _, in := range inputs {
		if !inits[in.Name] {
			m.Inputs = append(m.Inputs, in)
		}
	}
	for k, n := range ops {
		m.Ops = append(m.Ops, OpCount{Domain: k[0], Op: k[1], Nodes: n, Quantized: IsQuantizedOp(k[1])})
		if IsQuantizedOp(k[1]) {
			m.QuantizedNodes += n
		}
	}
	slices.SortFunc(m.Ops, func(a, b OpCount) int {
		return cmp.Or(b.Nodes-a.Nodes, cmp.Compare(a.Op, b.Op), cmp.Compare(a.Domain, b.Domain))
	})
	return m, nil
}

// graph reads a GraphProto: the main graph at depth 0, subgraphs below it. Only the main
// graph's inputs and outputs are the model's.
func (m *ModelInfo) graph(s *stream, depth int, ops map[[2]string]int, inits map[string]bool, inputs *[]IOInfo) error {
	if depth > maxNesting {
		return errors.New("subgraphs nested too deep")
	}
	for {
		num, typ, ok, err := s.next()
		if err != nil || !ok {
			return err
		}
		switch {
		case num == graphNode && typ == protowire.BytesType:
			b, err := s.bytes()
			if err != nil {
				return err
			}
			if err := m.node(b, depth, ops, inits); err != nil {
				return err
			}
		case num == graphInitializer && typ == protowire.BytesType:
			t, err := s.sub()
			if err != nil {
				return err
			}
			name, elem, err := initializer(t)
			if err != nil {
				return err
			}
			m.Initializers++
			switch elem {
			case elemFloat16:
				m.FP16Initializers++
			case elemFloat32:
				m.FP32Initializers++
			}
			if depth == 0 {
				inits[name] = true
			}
		case (num == graphInput || num == graphOutput) && typ == protowire.BytesType && depth == 0:
			b, err := s.bytes()
			if err != nil {
				return err
			}
			v, err := parseValueInfo(b)
			if err != nil {
				return err
			}
			if num == graphInput {
				*inputs = append(*inputs, v)
			} else {
				m.Outputs = append(m.Outputs, v)
			}
		default:
			if err := s.skip(typ); err != nil {
				return err
			}
		}
	}
}

// node counts one NodeProto and the nodes of its subgraphs.
func (m *ModelInfo) node(b []byte, depth int, ops map[[2]string]int, inits map[string]bool) error {
	var op, domain string
	var castTo int64 = -1
	var subgraphs [][]byte
	err := fields(b, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case nodeOpType:
			op = string(v)
		case nodeDomain:
			domain = string(v)
		case nodeAttribute:
			var name string
			var i int64
			err := fields(v, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
				switch {
				case num == attrName && typ == protowire.BytesType:
					name = string(v)
				case num == attrI && typ == protowire.VarintType:
					i = int64(x)
				case (num == attrG || num == attrGraphs) && typ == protowire.BytesType:
					subgraphs = append(subgraphs, v)
				}
				return nil
			})
			if err != nil {
				return err
			}
			if name == "to" {
				castTo = i
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if domain == "" || domain == "ai.onnx" {
		domain = "ai.onnx"
	}
	m.Nodes++
	ops[[2]string{domain, op}]++
	if op == "Cast" && domain == "ai.onnx" && castTo == elemFloat16 {
		m.FP16Casts++
	}
	for _, g := range subgraphs {
		s := &stream{r: bufio.NewReader(bytes.NewReader(g)), left: int64(len(g))}
		if err := m.graph(s, depth+1, ops, inits, nil); err != nil {
			return err
		}
	}
	return nil
}

// initializer reads a TensorProto's name and element type, reading past its data.
func initializer(s *stream) (name string, elem int, err error) {
	for {
		num, typ, ok, err := s.next()
		if err != nil || !ok {
			return name, elem, err
		}
		switch {
		case num == tensorDataType && typ == protowire.VarintType:
			v, err := s.varint()
			if err != nil {
				return "", 0, err
			}
			elem = int(v)
		case num == tensorName && typ == protowire.BytesType:
			b, err := s.bytes()
			if err != nil {
				return "", 0, err
			}
			name = string(b)
		default:
			if err := s.skip(typ); err != nil {
				return "", 0, err
			}
		}
	}
}

func parseOpset(b []byte) (Opset, error) {
	o := Opset{Domain: "ai.onnx"}
	err := fields(b, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		switch {
		case num == 1 && typ == protowire.BytesType && len(v) > 0:
			o.Domain = string(v)
		case num == 2 && typ == protowire.VarintType:
			o.Version = int64(x)
		}
		return nil
	})
	return o, err
}

// parseValueInfo reads a ValueInfoProto: name, and type with shape.
func parseValueInfo(b []byte) (IOInfo, error) {
	v := IOInfo{Type: "unknown"}
	err := fields(b, func(num protowire.Number, typ protowire.Type, b []byte, _ uint64) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			v.Name = string(b)
		case num == 2 && typ == protowire.BytesType: // TypeProto
			return fields(b, func(num protowire.Number, typ protowire.Type, b []byte, _ uint64) error {
				if typ != protowire.BytesType {
					return nil
				}
				switch num {
				case 1: // tensor_type
					return parseTensorType(b, &v)
				case 4:
					v.Type = "sequence"
				case 5:
					v.Type = "map"
				case 8:
					v.Type = "sparse_tensor"
				case 9:
					v.Type = "optional"
				}
				return nil
			})
		}
		return nil
	})
	return v, err
}

func parseTensorType(b []byte, v *IOInfo) error {
	return fields(b, func(num protowire.Number, typ protowire.Type, b []byte, x uint64) error {
		switch {
		case num == 1 && typ == protowire.VarintType:
			v.Elem = int(min(x, math.MaxInt32))
			v.Type = elemName(v.Elem)
		case num == 2 && typ == protowire.BytesType:
			v.Shape = []Dim{}
			return fields(b, func(num protowire.Number, typ protowire.Type, b []byte, _ uint64) error {
				if num != 1 || typ != protowire.BytesType {
					return nil
				}
				d := Dim{Value: -1}
				err := fields(b, func(num protowire.Number, typ protowire.Type, b []byte, x uint64) error {
					switch {
					case num == 1 && typ == protowire.VarintType:
						d.Value = int64(x)
					case num == 2 && typ == protowire.BytesType:
						d.Param = string(b)
					}
					return nil
				})
				v.Shape = append(v.Shape, d)
				return err
			})
		}
		return nil
	})
}
