package onnx

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"io"
	"math"
	"slices"

	"google.golang.org/protobuf/encoding/protowire"
)

// Parsing: the fields of a ModelProto that ModelInfo reports, subgraphs included, read from
// a stream (wire.go) that skips the rest.

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
