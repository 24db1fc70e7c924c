// Package onnxtest writes tiny ONNX models for tests: graphs whose signature is wrong in a
// chosen way, so that load-time checks can be tested without shipping binary fixtures, and
// signature-only graphs (Graph) for readers of a model's inputs, outputs, operators and
// weight types.
package onnxtest

import (
	"google.golang.org/protobuf/encoding/protowire"
)

// Tensor element types, as onnx.proto numbers them.
const (
	Float   = 1
	Int64   = 7
	Float16 = 10
)

// Value is a graph input or output: a tensor of elemType with the given dims, where a
// negative dim is a named dynamic axis.
type Value struct {
	Name     string
	ElemType int
	Dims     []int64
}

// Identity returns a model whose outputs are Identity copies of its inputs, pairwise
// (out[i] = Identity(in[i])), so the output types and shapes equal the inputs'.
func Identity(inputs []Value, outputNames []string) []byte {
	var graph []byte
	for i, in := range inputs {
		graph = appendNode(graph, "Identity", in.Name, outputNames[i])
	}
	outputs := make([]Value, len(inputs))
	for i, in := range inputs {
		outputs[i] = in
		outputs[i].Name = outputNames[i]
	}
	return model(graph, inputs, outputs, nil, 0)
}

// Graph is a model for readers of a signature: its inputs and outputs, one node per
// operator in Ops, and initializers (name, element type and dims, without values). It
// need not run: nothing connects the nodes.
type Graph struct {
	Inputs, Outputs []Value
	Ops             []string // op_type of each node, in the default domain
	Initializers    []Value
	// RawBytes, if not 0, gives each initializer a raw_data of that many zero bytes after its
	// name, as weights come in a real file: for readers that must stream past them.
	RawBytes int
}

// Encode returns g as an ONNX ModelProto.
func (g Graph) Encode() []byte {
	var graph []byte
	for i, op := range g.Ops {
		graph = appendNode(graph, op, "", "n"+string(rune('a'+i%26)))
	}
	return model(graph, g.Inputs, g.Outputs, g.Initializers, g.RawBytes)
}

// appendNode appends a NodeProto of op with one input and one output ("" for none).
func appendNode(graph []byte, op, input, output string) []byte {
	var node []byte
	if input != "" {
		node = protowire.AppendTag(node, 1, protowire.BytesType) // input
		node = protowire.AppendString(node, input)
	}
	node = protowire.AppendTag(node, 2, protowire.BytesType) // output
	node = protowire.AppendString(node, output)
	node = protowire.AppendTag(node, 4, protowire.BytesType) // op_type
	node = protowire.AppendString(node, op)
	graph = protowire.AppendTag(graph, 1, protowire.BytesType) // node
	return protowire.AppendBytes(graph, node)
}

// model wraps a graph's nodes with its initializers (raw bytes of raw_data each, if not 0),
// inputs and outputs into a ModelProto (IR 8, opset 17).
func model(graph []byte, inputs, outputs, inits []Value, raw int) []byte {
	graph = protowire.AppendTag(graph, 2, protowire.BytesType) // name
	graph = protowire.AppendString(graph, "onnxtest")
	for _, in := range inits {
		var t []byte
		for _, d := range in.Dims {
			t = protowire.AppendTag(t, 1, protowire.VarintType) // dims
			t = protowire.AppendVarint(t, uint64(max(d, 1)))
		}
		t = protowire.AppendTag(t, 2, protowire.VarintType) // data_type
		t = protowire.AppendVarint(t, uint64(in.ElemType))
		t = protowire.AppendTag(t, 8, protowire.BytesType) // name
		t = protowire.AppendString(t, in.Name)
		if raw > 0 {
			t = protowire.AppendTag(t, 9, protowire.BytesType) // raw_data
			t = protowire.AppendBytes(t, make([]byte, raw))
		}
		graph = protowire.AppendTag(graph, 5, protowire.BytesType) // initializer
		graph = protowire.AppendBytes(graph, t)
	}
	for _, in := range inputs {
		graph = protowire.AppendTag(graph, 11, protowire.BytesType) // input
		graph = protowire.AppendBytes(graph, valueInfo(in))
	}
	for _, out := range outputs {
		graph = protowire.AppendTag(graph, 12, protowire.BytesType) // output
		graph = protowire.AppendBytes(graph, valueInfo(out))
	}
	var m []byte
	m = protowire.AppendTag(m, 1, protowire.VarintType) // ir_version
	m = protowire.AppendVarint(m, 8)
	var opset []byte
	opset = protowire.AppendTag(opset, 2, protowire.VarintType) // version
	opset = protowire.AppendVarint(opset, 17)
	m = protowire.AppendTag(m, 8, protowire.BytesType) // opset_import
	m = protowire.AppendBytes(m, opset)
	m = protowire.AppendTag(m, 7, protowire.BytesType) // graph
	return protowire.AppendBytes(m, graph)
}

func valueInfo(v Value) []byte {
	var shape []byte
	for i, d := range v.Dims {
		var dim []byte
		if d >= 0 {
			dim = protowire.AppendTag(dim, 1, protowire.VarintType) // dim_value
			dim = protowire.AppendVarint(dim, uint64(d))
		} else {
			dim = protowire.AppendTag(dim, 2, protowire.BytesType) // dim_param
			dim = protowire.AppendString(dim, "d"+string(rune('0'+i)))
		}
		shape = protowire.AppendTag(shape, 1, protowire.BytesType)
		shape = protowire.AppendBytes(shape, dim)
	}
	var tensor []byte
	tensor = protowire.AppendTag(tensor, 1, protowire.VarintType) // elem_type
	tensor = protowire.AppendVarint(tensor, uint64(v.ElemType))
	tensor = protowire.AppendTag(tensor, 2, protowire.BytesType) // shape
	tensor = protowire.AppendBytes(tensor, shape)
	var typ []byte
	typ = protowire.AppendTag(typ, 1, protowire.BytesType) // tensor_type
	typ = protowire.AppendBytes(typ, tensor)
	var vi []byte
	vi = protowire.AppendTag(vi, 1, protowire.BytesType) // name
	vi = protowire.AppendString(vi, v.Name)
	vi = protowire.AppendTag(vi, 2, protowire.BytesType) // type
	vi = protowire.AppendBytes(vi, typ)
	return vi
}
