package ort

// Where ONNX Runtime runs a model's nodes. Env.Place asks ONNX Runtime itself: it profiles one
// run on dummy inputs and reads, from the profile, the execution provider of every node that
// ran. Those are the nodes of the graph *after* ONNX Runtime's optimizations (fusions,
// constant folding, and on CUDA the copies between host and device), so their number differs
// from the file's, which runtime/onnx reads without ONNX Runtime.

import (
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	ortgo "github.com/yalue/onnxruntime_go"

	"github.com/ortserve/ortserve/runtime/onnx"
)

// ProviderUnknown stands for a node that ONNX Runtime's profile names no provider for.
const ProviderUnknown = "unknown"

// Placement is where ONNX Runtime put a model's nodes, as its profiler saw them in one run.
type Placement struct {
	// Provider is the execution provider the session was given; CPU backs it for the
	// nodes it cannot run.
	Provider Provider `json:"provider"`
	// Nodes counts the nodes that ran: those of the graph after ONNX Runtime's optimizations,
	// host/device copies included.
	Nodes int `json:"nodes"`
	// Providers counts the nodes per provider, most first.
	Providers []ProviderCount `json:"providers"`
	// Ops counts the nodes per operator and provider, most first.
	Ops []OpPlacement `json:"ops"`
	// QuantizedNodes counts the nodes that ran a quantized operator (IsQuantizedOp).
	QuantizedNodes int `json:"quantized_nodes"`
	// Fallback lists, in the order they ran, the nodes put on CPU although Provider is
	// another.
	Fallback []PlacedNode `json:"fallback,omitempty"`
}

// ProviderCount is how many nodes run on one provider.
type ProviderCount struct {
	Provider string `json:"provider"`
	Nodes    int    `json:"nodes"`
}

// OpPlacement is how many nodes of one operator run on one provider.
type OpPlacement struct {
	Op        string `json:"op"`
	Provider  string `json:"provider"`
	Nodes     int    `json:"nodes"`
	Quantized bool   `json:"quantized"`
}

// PlacedNode is one node of the optimized graph.
type PlacedNode struct {
	Name string `json:"name"`
	Op   string `json:"op"`
}

// NodesOn counts the nodes placed on provider.
func (p Placement) NodesOn(provider string) int {
	for _, c := range p.Providers {
		if c.Provider == provider {
			return c.Nodes
		}
	}
	return 0
}

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

// ParseProfile reads the nodes' placement from an ONNX Runtime profile (a JSON array of
// trace events; a node's carry cat "Node" and args op_name and provider). requested is the
// provider the session was given, to tell which nodes fell back to CPU.
func ParseProfile(data []byte, requested Provider) (Placement, error) {
	var events []struct {
		Cat  string `json:"cat"`
		Name string `json:"name"`
		Args struct {
			OpName    string          `json:"op_name"`
			Provider  string          `json:"provider"`
			NodeIndex json.RawMessage `json:"node_index"`
		} `json:"args"`
	}
	if err := json.Unmarshal(data, &events); err != nil {
		return Placement{}, fmt.Errorf("ort: reading ONNX Runtime's profile: %v", err)
	}
	type node struct{ name, op, provider string }
	var order []string
	nodes := map[string]*node{}
	for _, ev := range events {
		if ev.Cat != "Node" {
			continue
		}
		name := ev.Name
		for _, suffix := range []string{"_kernel_time", "_fence_before", "_fence_after"} {
			name = strings.TrimSuffix(name, suffix)
		}
		// The node index is unique in the optimized graph; names may be empty.
		key := "name:" + name
		if len(ev.Args.NodeIndex) > 0 {
			key = "index:" + string(ev.Args.NodeIndex)
		}
		n, ok := nodes[key]
		if !ok {
			n = &node{name: name}
			nodes[key] = n
			order = append(order, key)
		}
		n.op = cmp.Or(n.op, ev.Args.OpName)
		n.provider = cmp.Or(n.provider, ev.Args.Provider)
	}
	if len(order) == 0 {
		return Placement{}, errors.New("ort: ONNX Runtime's profile has no node events: the run did not reach the graph")
	}
	p := Placement{Provider: requested, Nodes: len(order)}
	byProvider := map[string]int{}
	byOp := map[[2]string]int{}
	for _, key := range order {
		n := nodes[key]
		prov := cmp.Or(n.provider, ProviderUnknown)
		op := cmp.Or(n.op, ProviderUnknown)
		byProvider[prov]++
		byOp[[2]string{op, prov}]++
		if onnx.IsQuantizedOp(op) {
			p.QuantizedNodes++
		}
		if prov == string(ProviderCPU) && requested != ProviderCPU {
			p.Fallback = append(p.Fallback, PlacedNode{Name: n.name, Op: op})
		}
	}
	for prov, c := range byProvider {
		p.Providers = append(p.Providers, ProviderCount{Provider: prov, Nodes: c})
	}
	slices.SortFunc(p.Providers, func(a, b ProviderCount) int {
		return cmp.Or(b.Nodes-a.Nodes, cmp.Compare(a.Provider, b.Provider))
	})
	for k, c := range byOp {
		p.Ops = append(p.Ops, OpPlacement{Op: k[0], Provider: k[1], Nodes: c, Quantized: onnx.IsQuantizedOp(k[0])})
	}
	slices.SortFunc(p.Ops, func(a, b OpPlacement) int {
		return cmp.Or(b.Nodes-a.Nodes, cmp.Compare(a.Op, b.Op), cmp.Compare(a.Provider, b.Provider))
	})
	return p, nil
}
