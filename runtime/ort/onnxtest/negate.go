package onnxtest

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// NegateFloats flips the sign of every value of the float initializers whose name match
// accepts, in place in model, an encoded ModelProto; it returns how many initializers it
// changed. The encoding keeps its length, so nothing is re-encoded. Negating a two-class
// head's weight and bias (or, in a dynamically quantized model, its per-channel weight scale
// and bias) negates the logits, which swaps the classes: a model damaged on purpose, for
// tests that a quality check catches it.
//
// It reads the initializers of the main graph only (ModelProto.graph = 7,
// GraphProto.initializer = 5) and their values from TensorProto.raw_data (9) or float_data
// (4); a matched tensor whose data lives in an external file is an error.
func NegateFloats(model []byte, match func(name string) bool) (int, error) {
	n := 0
	err := eachBytes(model, 7, func(graph []byte) error {
		return eachBytes(graph, 5, func(tensor []byte) error {
			changed, err := negateTensor(tensor, match)
			if changed {
				n++
			}
			return err
		})
	})
	return n, err
}

// eachBytes calls f with the payload of every length-delimited field num of msg. The payloads
// are msg's own bytes, so f may change them in place.
func eachBytes(msg []byte, num protowire.Number, f func([]byte) error) error {
	for len(msg) > 0 {
		n, typ, l := protowire.ConsumeTag(msg)
		if l < 0 {
			return fmt.Errorf("onnxtest: %w", protowire.ParseError(l))
		}
		msg = msg[l:]
		if n == num && typ == protowire.BytesType {
			v, l := protowire.ConsumeBytes(msg)
			if l < 0 {
				return fmt.Errorf("onnxtest: %w", protowire.ParseError(l))
			}
			if err := f(v); err != nil {
				return err
			}
			msg = msg[l:]
			continue
		}
		if l = protowire.ConsumeFieldValue(n, typ, msg); l < 0 {
			return fmt.Errorf("onnxtest: %w", protowire.ParseError(l))
		}
		msg = msg[l:]
	}
	return nil
}

// TensorProto field numbers.
const (
	tensorDataType  = 2
	tensorFloatData = 4
	tensorName      = 8
	tensorRawData   = 9
)

// negateTensor negates tensor's float values in place if it is a float tensor that match
// accepts.
func negateTensor(tensor []byte, match func(string) bool) (bool, error) {
	var name string
	var dataType uint64
	for msg := tensor; len(msg) > 0; {
		n, typ, l := protowire.ConsumeTag(msg)
		if l < 0 {
			return false, fmt.Errorf("onnxtest: %w", protowire.ParseError(l))
		}
		msg = msg[l:]
		switch {
		case n == tensorName && typ == protowire.BytesType:
			v, _ := protowire.ConsumeBytes(msg)
			name = string(v)
		case n == tensorDataType && typ == protowire.VarintType:
			dataType, _ = protowire.ConsumeVarint(msg)
		}
		if l = protowire.ConsumeFieldValue(n, typ, msg); l < 0 {
			return false, fmt.Errorf("onnxtest: %w", protowire.ParseError(l))
		}
		msg = msg[l:]
	}
	if dataType != Float || !match(name) {
		return false, nil
	}
	// A float32 is little-endian in both fields: its sign is the top bit of its 4th byte.
	values := 0
	for msg := tensor; len(msg) > 0; {
		n, typ, l := protowire.ConsumeTag(msg)
		msg = msg[l:]
		switch {
		case (n == tensorRawData || n == tensorFloatData) && typ == protowire.BytesType:
			v, _ := protowire.ConsumeBytes(msg)
			if len(v)%4 != 0 {
				return false, fmt.Errorf("onnxtest: initializer %q has %d bytes of floats", name, len(v))
			}
			for i := 3; i < len(v); i += 4 {
				v[i] ^= 0x80
			}
			values += len(v) / 4
		case n == tensorFloatData && typ == protowire.Fixed32Type: // unpacked
			msg[3] ^= 0x80
			values++
		}
		msg = msg[protowire.ConsumeFieldValue(n, typ, msg):]
	}
	if values == 0 {
		return false, fmt.Errorf("onnxtest: initializer %q has no values in the model (external data?)", name)
	}
	return true, nil
}
