// Package inspect lays out what `server inspect` reports of an ONNX file, as text or JSON:
// its size, format, signature, operators and fp16 content (runtime/onnx's ModelInfo), and
// where ONNX Runtime placed its nodes (Placement); and the one-line placement summary that
// serve logs per version at load. Reading the file is runtime/onnx's, profiling a run
// runtime/engine's.
//
// It needs neither ONNX Runtime nor the tokenizer library: it builds and tests without cgo.
package inspect

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/ortserve/ortserve/runtime/onnx"
)

// The providers as runtime/ort names them (ort.ProviderCPU, ort.ProviderUnknown). They are
// not asked of it: runtime/ort is cgo, and this package builds without. runtime/engine's
// TestPlacementView holds the two to agree.
const (
	providerCPU     = "CPUExecutionProvider"
	providerUnknown = "unknown"
)

// Report is the whole report: what --json writes.
type Report struct {
	ORTVersion string `json:"ort_version"`
	Device     string `json:"device"`   // asked for
	Provider   string `json:"provider"` // given to the sessions
	// FallbackReason says why CUDA was asked for and CPU is used.
	FallbackReason string `json:"fallback_reason,omitempty"`
	Files          []File `json:"files"`
}

// File is one file's part of the report.
type File struct {
	Model   string         `json:"model,omitempty"`
	Version string         `json:"version,omitempty"`
	Devices []string       `json:"devices,omitempty"`
	File    onnx.ModelInfo `json:"file"`
	Place   *Placement     `json:"placement,omitempty"`
	// PlaceError says why the placement could not be seen.
	PlaceError string `json:"placement_error,omitempty"`
	Summary    string `json:"summary"`
	Took       string `json:"took"` // reading the file and placing it
}

// Placement is where ONNX Runtime put a model's nodes, as its profiler saw them in one run:
// runtime/ort's Placement field for field, with the same JSON, which runtime/engine converts.
// It is a copy rather than an import: runtime/ort is cgo, and this package builds without.
// runtime/engine's TestPlacementView holds the two to agree.
type Placement struct {
	// Provider is the execution provider the session was given; CPU backs it for the
	// nodes it cannot run.
	Provider string `json:"provider"`
	// Nodes counts the nodes that ran: those of the graph after ONNX Runtime's optimizations,
	// host/device copies included.
	Nodes int `json:"nodes"`
	// Providers counts the nodes per provider, most first.
	Providers []ProviderCount `json:"providers"`
	// Ops counts the nodes per operator and provider, most first.
	Ops []OpPlacement `json:"ops"`
	// QuantizedNodes counts the nodes that ran a quantized operator (onnx.IsQuantizedOp).
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

// WriteJSON writes the report as indented JSON: what --json writes.
func WriteJSON(w io.Writer, r Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// Summary is the one-line summary of a file's placement that inspect prints and serve logs
// at load, as key-value pairs: the provider the sessions get, the file's nodes and
// quantized nodes, and the nodes per provider after ONNX Runtime's optimizations. Without a
// placement, placed is all:CPUExecutionProvider on CPU (the only provider there: serve does
// not profile it) and unknown on another provider.
func Summary(m onnx.ModelInfo, p *Placement, provider string) []any {
	kv := []any{"provider", provider, "nodes", m.Nodes, "quantized", m.QuantizedNodes}
	if m.FP16Initializers > 0 || m.FP16Casts > 0 {
		kv = append(kv, "fp16_initializers", m.FP16Initializers)
	}
	if p == nil {
		if provider != providerCPU {
			return append(kv, "placed", providerUnknown)
		}
		return append(kv, "placed", "all:"+providerCPU)
	}
	placed := make([]string, len(p.Providers))
	for i, c := range p.Providers {
		placed[i] = fmt.Sprintf("%s:%d", c.Provider, c.Nodes)
	}
	return append(kv, "placed", strings.Join(placed, ","), "placed_nodes", p.Nodes, "placed_quantized", p.QuantizedNodes)
}

// FallbackOps counts the nodes ONNX Runtime put on CPU per operator: "MatMulInteger:18,...".
func FallbackOps(p Placement) string {
	var out []string
	for _, o := range p.Ops {
		if o.Provider == providerCPU {
			out = append(out, fmt.Sprintf("%s:%d", o.Op, o.Nodes))
		}
	}
	return strings.Join(out, ",")
}

// KVLine writes key-value pairs as slog's text handler does: k=v separated by spaces.
func KVLine(kv []any) string {
	var b strings.Builder
	for i := 0; i+1 < len(kv); i += 2 {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%v=%v", kv[i], kv[i+1])
	}
	return b.String()
}

// LogPlacement logs a model version's placement summary, and a warning if it has nodes on
// CPU although its sessions run on another provider. p is nil when the placement was not
// seen.
func LogPlacement(log *slog.Logger, model, version string, m onnx.ModelInfo, p *Placement, provider string, took time.Duration) {
	attrs := append([]any{"model", model, "version", version}, Summary(m, p, provider)...)
	log.Info("placement", append(attrs, "took", took.Round(time.Millisecond))...)
	if p != nil && len(p.Fallback) > 0 {
		log.Warn("nodes of a "+provider+" version run on CPU: expect copies between host and device; `server inspect` lists them",
			"model", model, "version", version, "cpu_nodes", len(p.Fallback), "ops", FallbackOps(*p))
	}
}
