// Package onnxtest writes tiny ONNX models for tests: graphs whose signature is wrong in a
// chosen way, so that load-time checks can be tested without shipping binary fixtures.
package onnxtest

import (
	"google.golang.org/protobuf/encoding/protowire"
)

// Tensor element types, as onnx.proto numbers them.
const (
	Float = 1
	Int64 = 7
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
		var node []byte
		node = protowire.AppendTag(node, 1, protowire.BytesType) // input
		node = protowire.AppendString(node, in.Name)
		node = protowire.AppendTag(node, 2, protowire.BytesType) // output
		node = protowire.AppendString(node, outputNames[i])
		node = protowire.AppendTag(node, 4, protowire.BytesType) // op_type
		node = protowire.AppendString(node, "Identity")
		graph = protowire.AppendTag(graph, 1, protowire.BytesType) // node
		graph = protowire.AppendBytes(graph, node)
	}
	graph = protowire.AppendTag(graph, 2, protowire.BytesType) // name
	graph = protowire.AppendString(graph, "onnxtest")
	for _, in := range inputs {
		graph = protowire.AppendTag(graph, 11, protowire.BytesType) // input
		graph = protowire.AppendBytes(graph, valueInfo(in))
	}
	for i, in := range inputs {
		out := in
		out.Name = outputNames[i]
		graph = protowire.AppendTag(graph, 12, protowire.BytesType) // output
		graph = protowire.AppendBytes(graph, valueInfo(out))
	}
	var model []byte
	model = protowire.AppendTag(model, 1, protowire.VarintType) // ir_version
	model = protowire.AppendVarint(model, 8)
	var opset []byte
	opset = protowire.AppendTag(opset, 2, protowire.VarintType) // version
	opset = protowire.AppendVarint(opset, 17)
	model = protowire.AppendTag(model, 8, protowire.BytesType) // opset_import
	model = protowire.AppendBytes(model, opset)
	model = protowire.AppendTag(model, 7, protowire.BytesType) // graph
	model = protowire.AppendBytes(model, graph)
	return model
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
