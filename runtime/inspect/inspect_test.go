package inspect_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ortserve/ortserve/runtime/inspect"
	"github.com/ortserve/ortserve/runtime/onnx"
)

const (
	cpu  = "CPUExecutionProvider"
	cuda = "CUDAExecutionProvider"
)

// int8 is a small quantized model's file: two inputs, an op from another domain, fp16 content.
var int8 = onnx.ModelInfo{
	Path: "/models/m/int8.onnx", Size: 3 << 20, IRVersion: 8, Producer: "onnx.quantize", ProducerVersion: "0.1.0",
	Opsets:  []onnx.Opset{{Domain: "ai.onnx", Version: 17}, {Domain: "com.microsoft", Version: 1}},
	Inputs:  []onnx.IOInfo{{Name: "input_ids", Type: "int64", Shape: []onnx.Dim{{Param: "batch"}, {Param: "sequence"}}}, {Name: "attention_mask", Type: "int64", Shape: []onnx.Dim{{Param: "batch"}, {Param: "sequence"}}}},
	Outputs: []onnx.IOInfo{{Name: "logits", Type: "float32", Shape: []onnx.Dim{{Param: "batch"}, {Value: 2}}}},
	Nodes:   10, QuantizedNodes: 4, Initializers: 9, FP16Initializers: 2, FP16Casts: 1,
	Ops: []onnx.OpCount{
		{Domain: "ai.onnx", Op: "MatMulInteger", Nodes: 3, Quantized: true},
		{Domain: "ai.onnx", Op: "DynamicQuantizeLinear", Nodes: 1, Quantized: true},
		{Domain: "com.microsoft", Op: "Gelu", Nodes: 6},
	},
}

// fallback is a CUDA placement with three nodes on CPU, one unnamed.
var fallback = &inspect.Placement{
	Provider: cuda, Nodes: 8, QuantizedNodes: 3,
	Providers: []inspect.ProviderCount{{Provider: cuda, Nodes: 5}, {Provider: cpu, Nodes: 3}},
	Ops: []inspect.OpPlacement{
		{Op: "MatMulInteger", Provider: cpu, Nodes: 2, Quantized: true},
		{Op: "Add", Provider: cuda, Nodes: 5},
		{Op: "DynamicQuantizeLinear", Provider: cpu, Nodes: 1, Quantized: true},
	},
	Fallback: []inspect.PlacedNode{{Name: "a", Op: "MatMulInteger"}, {Op: "MatMulInteger"}, {Name: "c", Op: "DynamicQuantizeLinear"}},
}

// onCPU is a CPU placement: CPU is the only provider, so nothing falls back.
var onCPU = &inspect.Placement{
	Provider: cpu, Nodes: 7, QuantizedNodes: 3,
	Providers: []inspect.ProviderCount{{Provider: cpu, Nodes: 7}},
	Ops:       []inspect.OpPlacement{{Op: "Add", Provider: cpu, Nodes: 4}, {Op: "MatMulInteger", Provider: cpu, Nodes: 3, Quantized: true}},
}

func TestWriteFile(t *testing.T) {
	tests := []struct {
		name string
		f    inspect.File
		want string
	}{
		{"a version on CUDA with fallback", inspect.File{Model: "m", Version: "int8", Devices: []string{"cpu", "cuda"}, File: int8, Place: fallback, Summary: "provider=CUDAExecutionProvider", Took: "12ms"}, `m/int8  /models/m/int8.onnx  (devices: cpu, cuda)
  file     3.0 MiB, IR version 8, produced by onnx.quantize 0.1.0, opsets ai.onnx 17, com.microsoft 1
  inputs   input_ids       int64    [batch, sequence]
           attention_mask  int64    [batch, sequence]
  outputs  logits          float32  [batch, 2]
  graph    10 nodes, 4 quantized; fp16: 2 of 9 initializers, 1 Cast nodes to float16
  operators in the file (* quantized):
    MatMulInteger*          3
    DynamicQuantizeLinear*  1
    com.microsoft.Gelu      6
  placement on CUDAExecutionProvider, from ONNX Runtime's profile of one run:
    8 nodes after ONNX Runtime's graph optimizations (the file has 10); 3 quantized
    operator (* quantized)  CUDAExecutionProvider  CPUExecutionProvider
    all                                         5                     3
    Add                                         5                     0
    MatMulInteger*                              0                     2
    DynamicQuantizeLinear*                      0                     1
    3 nodes fell back to CPU:
      a (MatMulInteger)
      (unnamed) (MatMulInteger)
      c (DynamicQuantizeLinear)
  summary: provider=CUDAExecutionProvider (took 12ms)

`},
		{"all on CUDA", inspect.File{Model: "m", Version: "int8", File: onnx.ModelInfo{Path: "x.onnx", Size: 100, Nodes: 5}, Place: &inspect.Placement{Provider: cuda, Nodes: 5, Providers: []inspect.ProviderCount{{Provider: cuda, Nodes: 5}}}, Summary: "s", Took: "1ms"}, `m/int8  x.onnx
  file   100 bytes, IR version 0, produced by (unknown), opsets (none)
  graph  5 nodes, 0 quantized; fp16: no
  operators in the file (* quantized):
  placement on CUDAExecutionProvider, from ONNX Runtime's profile of one run:
    5 nodes after ONNX Runtime's graph optimizations (the file has 5); 0 quantized
    operator (* quantized)  CUDAExecutionProvider
    all                                         5
    no node fell back to CPU
  summary: s (took 1ms)

`},
		{"a file on CPU", inspect.File{File: onnx.ModelInfo{Path: "x.onnx", Size: 100, Nodes: 7}, Place: onCPU, Summary: "s", Took: "1ms"}, `x.onnx
  file   100 bytes, IR version 0, produced by (unknown), opsets (none)
  graph  7 nodes, 0 quantized; fp16: no
  operators in the file (* quantized):
  placement on CPUExecutionProvider, from ONNX Runtime's profile of one run:
    7 nodes after ONNX Runtime's graph optimizations (the file has 7); 3 quantized
    operator (* quantized)  CPUExecutionProvider
    all                                        7
    Add                                        4
    MatMulInteger*                             3
  summary: s (took 1ms)

`},
		{"not placed", inspect.File{File: onnx.ModelInfo{Path: "x.onnx", Size: 100}, PlaceError: "ort: boom", Summary: "s", Took: "1ms"}, `x.onnx
  file   100 bytes, IR version 0, produced by (unknown), opsets (none)
  graph  0 nodes, 0 quantized; fp16: no
  operators in the file (* quantized):
  placement: not seen: ort: boom
  summary: s (took 1ms)

`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := inspect.WriteFile(&b, tt.f); err != nil {
				t.Fatal(err)
			}
			if b.String() != tt.want {
				t.Errorf("got\n%s\nwant\n%s", b.String(), tt.want)
			}
		})
	}
}

func TestWriteHeader(t *testing.T) {
	tests := []struct {
		r    inspect.Report
		want string
	}{
		{inspect.Report{ORTVersion: "1.29.0", Device: "auto", Provider: cpu}, "ONNX Runtime 1.29.0; device auto: CPUExecutionProvider\n\n"},
		{inspect.Report{ORTVersion: "1.29.0", Device: "cuda", Provider: cpu, FallbackReason: "no driver"}, "ONNX Runtime 1.29.0; device cuda: CPUExecutionProvider (CUDA unavailable, placing on CPU: no driver)\n\n"},
	}
	for _, tt := range tests {
		var b bytes.Buffer
		if err := inspect.WriteHeader(&b, tt.r); err != nil || b.String() != tt.want {
			t.Errorf("got %q, %v; want %q", b.String(), err, tt.want)
		}
	}
}

func TestWriteJSON(t *testing.T) {
	r := inspect.Report{ORTVersion: "1.29.0", Device: "cpu", Provider: cpu, Files: []inspect.File{
		{Model: "m", Version: "int8", Devices: []string{"cpu"}, File: int8, Place: fallback, Summary: "s", Took: "1ms"},
		{File: onnx.ModelInfo{Path: "x.onnx"}, PlaceError: "ort: boom", Summary: "s", Took: "1ms"},
	}}
	var b bytes.Buffer
	if err := inspect.WriteJSON(&b, r); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(b.String(), "{\n  \"ort_version\": \"1.29.0\",\n  \"device\": \"cpu\",\n  \"provider\": \"CPUExecutionProvider\",\n  \"files\": [\n") || !strings.HasSuffix(b.String(), "}\n") {
		t.Errorf("not the indented report:\n%s", b.String())
	}
	var files struct {
		Files []map[string]json.RawMessage `json:"files"`
	}
	if err := json.Unmarshal(b.Bytes(), &files); err != nil {
		t.Fatal(err)
	}
	keys := func(m map[string]json.RawMessage) (out []string) {
		for _, k := range []string{"model", "version", "devices", "file", "placement", "placement_error", "summary", "took"} {
			if _, ok := m[k]; ok {
				out = append(out, k)
			}
		}
		return out
	}
	if got := strings.Join(keys(files.Files[0]), " "); got != "model version devices file placement summary took" {
		t.Errorf("a placed version's keys: %s", got)
	}
	if got := strings.Join(keys(files.Files[1]), " "); got != "file placement_error summary took" {
		t.Errorf("an unplaced file's keys: %s", got)
	}
	var back inspect.Report
	if err := json.Unmarshal(b.Bytes(), &back); err != nil || back.Files[0].Place.Fallback[2] != fallback.Fallback[2] || back.Files[0].Place.Ops[0] != fallback.Ops[0] {
		t.Errorf("%v: the placement does not read back:\n%s", err, b.String())
	}
}

func TestSummary(t *testing.T) {
	tests := []struct {
		name     string
		m        onnx.ModelInfo
		p        *inspect.Placement
		provider string
		want     string
	}{
		{"placed", int8, fallback, cuda, "provider=CUDAExecutionProvider nodes=10 quantized=4 fp16_initializers=2 placed=CUDAExecutionProvider:5,CPUExecutionProvider:3 placed_nodes=8 placed_quantized=3"},
		{"CPU, not profiled", onnx.ModelInfo{Nodes: 5}, nil, cpu, "provider=CPUExecutionProvider nodes=5 quantized=0 placed=all:CPUExecutionProvider"},
		{"CUDA, not seen", onnx.ModelInfo{Nodes: 5, FP16Casts: 1}, nil, cuda, "provider=CUDAExecutionProvider nodes=5 quantized=0 fp16_initializers=0 placed=unknown"},
	}
	for _, tt := range tests {
		if got := inspect.KVLine(inspect.Summary(tt.m, tt.p, tt.provider)); got != tt.want {
			t.Errorf("%s: got\n%s\nwant\n%s", tt.name, got, tt.want)
		}
	}
}

func TestKVLine(t *testing.T) {
	tests := []struct {
		kv   []any
		want string
	}{
		{nil, ""},
		{[]any{"a", 1}, "a=1"},
		{[]any{"a", 1, "b", "x y", "c", 2.5}, "a=1 b=x y c=2.5"},
		{[]any{"a", 1, "odd"}, "a=1"}, // a key without a value is left out
	}
	for _, tt := range tests {
		if got := inspect.KVLine(tt.kv); got != tt.want {
			t.Errorf("KVLine(%v) = %q; want %q", tt.kv, got, tt.want)
		}
	}
}

// On CUDA, nodes ONNX Runtime put on CPU are a warning naming their operators.
func TestLogPlacement(t *testing.T) {
	m := onnx.ModelInfo{Nodes: 10, QuantizedNodes: 4}
	tests := []struct {
		name     string
		p        *inspect.Placement
		provider string
		want     []string
	}{
		{"fallback", fallback, cuda, []string{
			"level=INFO msg=placement model=m version=int8 provider=CUDAExecutionProvider nodes=10 quantized=4 placed=CUDAExecutionProvider:5,CPUExecutionProvider:3 placed_nodes=8 placed_quantized=3 took=2ms",
			`level=WARN msg="nodes of a CUDAExecutionProvider version run on CPU: expect copies between host and device; ` + "`server inspect`" + ` lists them" model=m version=int8 cpu_nodes=3 ops=MatMulInteger:2,DynamicQuantizeLinear:1`,
		}},
		{"not placed", nil, cuda, []string{
			"level=INFO msg=placement model=m version=int8 provider=CUDAExecutionProvider nodes=10 quantized=4 placed=unknown took=2ms",
		}},
		{"all on CUDA", &inspect.Placement{Provider: cuda, Nodes: 8, Providers: []inspect.ProviderCount{{Provider: cuda, Nodes: 8}}}, cuda, []string{
			"level=INFO msg=placement model=m version=int8 provider=CUDAExecutionProvider nodes=10 quantized=4 placed=CUDAExecutionProvider:8 placed_nodes=8 placed_quantized=0 took=2ms",
		}},
		{"on CPU", nil, cpu, []string{
			"level=INFO msg=placement model=m version=int8 provider=CPUExecutionProvider nodes=10 quantized=4 placed=all:CPUExecutionProvider took=2ms",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
				if a.Key == slog.TimeKey {
					return slog.Attr{}
				}
				return a
			}}))
			inspect.LogPlacement(log, "m", "int8", m, tt.p, tt.provider, 2*time.Millisecond+300*time.Microsecond)
			if got := strings.Split(strings.TrimSpace(logs.String()), "\n"); strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}
