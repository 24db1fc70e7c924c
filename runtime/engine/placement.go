package engine

import (
	"time"

	"github.com/ortserve/ortserve/models"
	"github.com/ortserve/ortserve/runtime/inspect"
	"github.com/ortserve/ortserve/runtime/onnx"
	"github.com/ortserve/ortserve/runtime/ort"
)

// Place says where ONNX Runtime puts the nodes of model m on the engine's provider, from the
// profile of one run of a throw-away session with one thread (ort.Env.Place).
func (e *Engine) Place(m onnx.ModelInfo) (*inspect.Placement, error) {
	o := e.opts
	o.IntraOpThreads, o.InterOpThreads, o.Strict = 1, 1, false
	p, err := e.env.Place(m, o)
	if err != nil {
		return nil, err
	}
	return placementView(p), nil
}

// logPlacement logs where a version's nodes run, once, when the version is loaded: the
// file's operators always (reading the file's headers: milliseconds); on CUDA also ONNX
// Runtime's placement, with a warning when nodes fall back to CPU. On CPU there is nothing
// to profile: CPU is the only provider.
func (e *Engine) logPlacement(spec models.ExecSpec) {
	start := time.Now()
	m, err := onnx.ReadModel(spec.Path)
	if err != nil {
		e.log.Warn("placement not checked", "model", spec.Model, "version", spec.Version, "err", err)
		return
	}
	var p *inspect.Placement
	if e.opts.Provider != ort.ProviderCPU {
		placed, err := e.env.Place(m, e.opts)
		if err != nil {
			e.log.Warn("placement not checked", "model", spec.Model, "version", spec.Version, "err", err)
		} else {
			p = placementView(placed)
		}
	}
	inspect.LogPlacement(e.log, spec.Model, spec.Version, m, p, string(e.opts.Provider), time.Since(start))
}

// placementView is p as package inspect lays it out: the same fields, and nil where p has nil.
func placementView(p ort.Placement) *inspect.Placement {
	return &inspect.Placement{
		Provider:       string(p.Provider),
		Nodes:          p.Nodes,
		Providers:      convertAll(p.Providers, func(c ort.ProviderCount) inspect.ProviderCount { return inspect.ProviderCount(c) }),
		Ops:            convertAll(p.Ops, func(o ort.OpPlacement) inspect.OpPlacement { return inspect.OpPlacement(o) }),
		QuantizedNodes: p.QuantizedNodes,
		Fallback:       convertAll(p.Fallback, func(n ort.PlacedNode) inspect.PlacedNode { return inspect.PlacedNode(n) }),
	}
}

// convertAll converts each element of in; nil stays nil.
func convertAll[T, U any](in []T, f func(T) U) []U {
	if in == nil {
		return nil
	}
	out := make([]U, len(in))
	for i, v := range in {
		out[i] = f(v)
	}
	return out
}
