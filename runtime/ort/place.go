//go:build cgo && ort

package ort

// Env.Place runs a model once under ONNX Runtime's profiler; placement.go reads the profile.

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	ortgo "github.com/yalue/onnxruntime_go"

	"github.com/ortserve/ortserve/runtime/onnx"
)

// Place loads the model m describes as o says (o.Output and o.Strict aside), runs it once
// on dummy inputs with ONNX Runtime's profiler on, and reads from the profile which
// execution provider each node ran on. The session is its own, not one that serves: a
// profiling session records every run. Dummy inputs have batch 1 and 8 for every other
// dynamic axis; they are zeros, but for an attention_mask of ones.
func (e *Env) Place(m onnx.ModelInfo, o Options) (p Placement, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("ort: placing %s panicked: %v", m.Path, r)
		}
	}()
	if len(m.Inputs) == 0 || len(m.Outputs) == 0 {
		return Placement{}, fmt.Errorf("ort: %s declares no inputs or no outputs: cannot run it to see its placement", m.Path)
	}
	ins, err := dummyInputs(m.Inputs)
	defer func() {
		for _, v := range ins {
			v.Destroy()
		}
	}()
	if err != nil {
		return Placement{}, fmt.Errorf("ort: %s: %w", m.Path, err)
	}
	dir, err := os.MkdirTemp("", "ortserve-placement-")
	if err != nil {
		return Placement{}, fmt.Errorf("ort: profile folder: %w", err)
	}
	defer os.RemoveAll(dir)

	o.Strict = false // the point is to see what falls back, not to fail on it
	opts, err := sessionOptions(o)
	if err != nil {
		return Placement{}, fmt.Errorf("ort: %s: %w", m.Path, err)
	}
	defer opts.Destroy()
	if err := opts.EnableProfiling(filepath.Join(dir, "profile")); err != nil {
		return Placement{}, fmt.Errorf("ort: enabling the profiler: %w", err)
	}
	names := func(vs []onnx.IOInfo) []string {
		out := make([]string, len(vs))
		for i, v := range vs {
			out[i] = v.Name
		}
		return out
	}
	sess, err := ortgo.NewDynamicAdvancedSession(m.Path, names(m.Inputs), names(m.Outputs), opts)
	if err != nil {
		return Placement{}, fmt.Errorf("ort: loading %s: %w", m.Path, err)
	}
	outs := make([]ortgo.Value, len(m.Outputs)) // nil: ONNX Runtime allocates them
	runErr := sess.Run(ins, outs)
	for _, v := range outs {
		if v != nil {
			v.Destroy()
		}
	}
	// The profile file is written when the session is released: the binding has no
	// SessionEndProfiling.
	if err := sess.Destroy(); err != nil {
		return Placement{}, fmt.Errorf("ort: %w", err)
	}
	// The binding copies outputs ONNX Runtime allocated into Go memory after the run, and
	// fails on some element types (float16); the run itself, and so the profile, is whole.
	if runErr != nil && !strings.HasPrefix(runErr.Error(), "Error creating tensor from ort") {
		return Placement{}, fmt.Errorf("ort: running %s on dummy inputs: %w", m.Path, runErr)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "profile*.json"))
	if len(files) != 1 {
		return Placement{}, fmt.Errorf("ort: ONNX Runtime wrote %d profiles for %s, want 1: is the profiler built in?", len(files), m.Path)
	}
	data, err := os.ReadFile(files[0])
	if err != nil {
		return Placement{}, fmt.Errorf("ort: reading the profile: %w", err)
	}
	return ParseProfile(data, o.Provider)
}

// elemSize is the bytes per element of the tensor types a dummy input can be made of.
var elemSize = map[int]int{
	1: 4, 2: 1, 3: 1, 4: 2, 5: 2, 6: 4, 7: 8, 9: 1, 10: 2, 11: 8, 12: 4, 13: 8, 16: 2,
	17: 1, 18: 1, 19: 1, 20: 1,
}

// dummyInputs makes one tensor per input (see Place). The caller destroys them, also on an
// error.
func dummyInputs(ins []onnx.IOInfo) ([]ortgo.Value, error) {
	var values []ortgo.Value
	for _, in := range ins {
		size, ok := elemSize[in.Elem]
		if !ok {
			return values, fmt.Errorf("input %q is %s: inspect can feed only numeric tensors", in.Name, in.Type)
		}
		if in.Shape == nil {
			return values, fmt.Errorf("input %q declares no shape: inspect cannot size a dummy input", in.Name)
		}
		shape := make(ortgo.Shape, len(in.Shape))
		n := int64(1)
		for i, d := range in.Shape {
			switch {
			case d.Fixed():
				shape[i] = d.Value
			case i == 0:
				shape[i] = 1
			default:
				shape[i] = 8
			}
			if shape[i] > 1<<24 || n*shape[i] > 1<<24 {
				return values, fmt.Errorf("input %q of shape %v is too large for a dummy input", in.Name, shape)
			}
			n *= shape[i]
		}
		data := make([]byte, n*int64(size))
		if in.Name == AttentionMask {
			fillOnes(data, in.Elem, size)
		}
		if len(data) == 0 {
			data = []byte{0} // an empty tensor; the binding wants a byte to point at
		}
		t, err := ortgo.NewCustomDataTensor(shape, data, ortgo.TensorElementDataType(in.Elem))
		if err != nil {
			return values, fmt.Errorf("dummy input %q: %w", in.Name, err)
		}
		values = append(values, t)
	}
	return values, nil
}

// fillOnes writes the value 1 of element type elem into every element of data.
func fillOnes(data []byte, elem, size int) {
	var one []byte
	switch elem {
	case 1: // float32
		one = binary.LittleEndian.AppendUint32(nil, math.Float32bits(1))
	case 10: // float16
		one = []byte{0x00, 0x3c}
	case 11: // float64
		one = binary.LittleEndian.AppendUint64(nil, math.Float64bits(1))
	case 2, 3, 4, 5, 6, 7, 9, 12, 13: // integers, bool
		one = make([]byte, size)
		one[0] = 1
	default:
		return
	}
	for i := 0; i+size <= len(data); i += size {
		copy(data[i:], one)
	}
}
