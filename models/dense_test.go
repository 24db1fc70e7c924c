package models

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// safetensorsFile encodes float32 tensors as a safetensors file.
func safetensorsFile(tensors map[string]floatTensor) []byte {
	header := map[string]any{"__metadata__": map[string]string{"format": "pt"}}
	var data bytes.Buffer
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range tensors {
			if !yield(k) {
				return
			}
		}
	}) {
		t := tensors[name]
		begin := data.Len()
		binary.Write(&data, binary.LittleEndian, t.Data)
		header[name] = map[string]any{"dtype": "F32", "shape": t.Shape, "data_offsets": []int{begin, data.Len()}}
	}
	h, _ := json.Marshal(header)
	var out bytes.Buffer
	binary.Write(&out, binary.LittleEndian, uint64(len(h)))
	out.Write(h)
	out.Write(data.Bytes())
	return out.Bytes()
}

func writeDense(t *testing.T, config string, tensors map[string]floatTensor) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "2_Dense")
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "config.json"), []byte(config), 0o644)
	if tensors != nil {
		os.WriteFile(filepath.Join(dir, "model.safetensors"), safetensorsFile(tensors), 0o644)
	}
	return dir
}

func TestDense(t *testing.T) {
	w := floatTensor{Shape: []int{2, 3}, Data: []float32{1, 0, -1, 0.5, 0.5, 0.5}}
	b := floatTensor{Shape: []int{2}, Data: []float32{0.25, -3}}
	x := []float32{1, 2, 3}
	tests := []struct {
		name    string
		config  string
		tensors map[string]floatTensor
		want    []float32
		err     string
	}{
		{"tanh", `{"in_features":3,"out_features":2,"bias":true,"activation_function":"torch.nn.modules.activation.Tanh"}`,
			map[string]floatTensor{"linear.weight": w, "linear.bias": b}, []float32{float32(math.Tanh(-1.75)), 0}, ""},
		{"identity, no bias", `{"in_features":3,"out_features":2,"bias":false,"activation_function":"torch.nn.modules.linear.Identity"}`,
			map[string]floatTensor{"linear.weight": w}, []float32{-2, 3}, ""},
		{"an activation not run", `{"in_features":3,"out_features":2,"activation_function":"torch.nn.modules.activation.Softplus"}`,
			map[string]floatTensor{"linear.weight": w, "linear.bias": b}, nil, `activation_function "torch.nn.modules.activation.Softplus", which ortserve does not run`},
		{"weight of another shape", `{"in_features":2,"out_features":3,"activation_function":"torch.nn.modules.linear.Identity"}`,
			map[string]floatTensor{"linear.weight": w, "linear.bias": b}, nil, "linear.weight has shape [2 3], config.json says [3, 2]"},
		{"no bias tensor", `{"in_features":3,"out_features":2,"activation_function":"torch.nn.modules.linear.Identity"}`,
			map[string]floatTensor{"linear.weight": w}, nil, `no tensor "linear.bias" (it has [linear.weight])`},
		{"no safetensors", `{"in_features":3,"out_features":2,"activation_function":"torch.nn.modules.linear.Identity"}`,
			nil, nil, "no model.safetensors (ortserve does not read pytorch_model.bin)"},
		{"no features", `{"activation_function":"torch.nn.modules.linear.Identity"}`, nil, nil, "must be positive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := loadDense(writeDense(t, tt.config, tt.tensors))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("got %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := d.apply(x); !slices.Equal(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestFloat16(t *testing.T) {
	for h, want := range map[uint16]float32{0x3c00: 1, 0xc000: -2, 0x3555: 0.333251953125, 0x0001: 5.9604645e-08, 0x7bff: 65504, 0x8000: float32(math.Copysign(0, -1))} {
		if got := float16(h); got != want || math.Signbit(float64(got)) != math.Signbit(float64(want)) {
			t.Errorf("float16(%#04x) = %v, want %v", h, got, want)
		}
	}
	if !math.IsInf(float64(float16(0x7c00)), 1) || !math.IsNaN(float64(float16(0x7e00))) {
		t.Error("inf or NaN")
	}
}

// The reader takes files from anywhere: it must fail cleanly or give tensors that fit the
// shapes they claim, never panic or allocate past the file.
func FuzzParseSafetensors(f *testing.F) {
	f.Add(safetensorsFile(map[string]floatTensor{"linear.weight": {Shape: []int{2, 2}, Data: []float32{1, 2, 3, 4}}}))
	f.Add([]byte("\x10\x00\x00\x00\x00\x00\x00\x00{\"linear.weight\":1}"))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		ts, err := parseSafetensors(bytes.NewReader(data), int64(len(data)), "linear.weight")
		if err != nil {
			return
		}
		w := ts["linear.weight"]
		n := 1
		for _, d := range w.Shape {
			n *= d
		}
		if n != len(w.Data) {
			t.Fatalf("shape %v holds %d values, got %d", w.Shape, n, len(w.Data))
		}
	})
}
