package ort_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/ortserve/ortserve/runtime/ort"
)

func TestInspectParseProfile(t *testing.T) {
	// A CUDA session's profile, shaped as ONNX Runtime writes it: session events, then a
	// kernel_time event per node (older versions add fence events for the same node).
	cuda := `[
	{"cat":"Session","name":"session_initialization","args":{}},
	{"cat":"Node","name":"q_fence_before","args":{"op_name":"DynamicQuantizeLinear","node_index":"1"}},
	{"cat":"Node","name":"q_kernel_time","args":{"op_name":"DynamicQuantizeLinear","provider":"CPUExecutionProvider","node_index":"1"}},
	{"cat":"Node","name":"mm_kernel_time","args":{"op_name":"MatMulInteger","provider":"CPUExecutionProvider","node_index":"2"}},
	{"cat":"Node","name":"copy_kernel_time","args":{"op_name":"MemcpyFromHost","provider":"CUDAExecutionProvider","node_index":"3"}},
	{"cat":"Node","name":"ln_kernel_time","args":{"op_name":"LayerNormalization","provider":"CUDAExecutionProvider","node_index":"4"}},
	{"cat":"Node","name":"add_kernel_time","args":{"op_name":"Add","provider":"CUDAExecutionProvider","node_index":"5"}},
	{"cat":"Node","name":"odd_kernel_time","args":{"op_name":"Add","node_index":"6"}}
	]`
	tests := []struct {
		name, profile string
		requested     ort.Provider
		want, err     string
	}{
		{"cuda with fallback", cuda, ort.ProviderCUDA,
			`{"provider":"CUDAExecutionProvider","nodes":6,` +
				`"providers":[{"provider":"CUDAExecutionProvider","nodes":3},{"provider":"CPUExecutionProvider","nodes":2},{"provider":"unknown","nodes":1}],` +
				`"ops":[{"op":"Add","provider":"CUDAExecutionProvider","nodes":1,"quantized":false},{"op":"Add","provider":"unknown","nodes":1,"quantized":false},` +
				`{"op":"DynamicQuantizeLinear","provider":"CPUExecutionProvider","nodes":1,"quantized":true},{"op":"LayerNormalization","provider":"CUDAExecutionProvider","nodes":1,"quantized":false},` +
				`{"op":"MatMulInteger","provider":"CPUExecutionProvider","nodes":1,"quantized":true},{"op":"MemcpyFromHost","provider":"CUDAExecutionProvider","nodes":1,"quantized":false}],` +
				`"quantized_nodes":2,"fallback":[{"name":"q","op":"DynamicQuantizeLinear"},{"name":"mm","op":"MatMulInteger"}]}`, ""},
		{"cpu", `[{"cat":"Node","name":"_kernel_time","args":{"op_name":"Gelu","provider":"CPUExecutionProvider"}}]`, ort.ProviderCPU,
			`{"provider":"CPUExecutionProvider","nodes":1,"providers":[{"provider":"CPUExecutionProvider","nodes":1}],"ops":[{"op":"Gelu","provider":"CPUExecutionProvider","nodes":1,"quantized":false}],"quantized_nodes":0}`, ""},
		{"not json", `{"traceEvents":`, ort.ProviderCPU, "", "reading ONNX Runtime's profile"},
		{"no nodes", `[{"cat":"Session","name":"model_loading_uri"}]`, ort.ProviderCPU, "", "no node events"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := ort.ParseProfile([]byte(tt.profile), tt.requested)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Errorf("got %v, want an error containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := json.Marshal(p); string(got) != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}
