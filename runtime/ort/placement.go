package ort

// Where ONNX Runtime runs a model's nodes. Env.Place asks ONNX Runtime itself: it profiles one
// run on dummy inputs and reads, from the profile, the execution provider of every node that
// ran. Those are the nodes of the graph *after* ONNX Runtime's optimizations (fusions,
// constant folding, and on CUDA the copies between host and device), so their number differs
// from the file's, which runtime/onnx reads without ONNX Runtime.

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

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
		return Placement{}, fmt.Errorf("ort: reading ONNX Runtime's profile: %w", err)
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
