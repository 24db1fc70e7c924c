//go:build cgo && ort

package ort_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/ortserve/ortserve/runtime/ort"
	"github.com/ortserve/ortserve/runtime/ort/onnxtest"
	"github.com/ortserve/ortserve/runtime/ort/orttest"
	"github.com/ortserve/ortserve/tokenize"
)

// These tests run the real ONNX Runtime on the real models: `make test` provides both.
var env *ort.Env

func TestMain(m *testing.M) { orttest.Main(m, "runtime/ort", &env) }

func modelFile(name, version string) string {
	return filepath.Join(os.Getenv("ORTSERVE_MODELS"), name, version+".onnx")
}

// open is a CPU session on a version of the repository's model, closed when t ends.
func open(t *testing.T, model, version, output string) *ort.Session {
	t.Helper()
	s, err := env.NewSession(modelFile(model, version), cpu(output))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func cpu(output string) ort.Options {
	return ort.Options{Provider: ort.ProviderCPU, IntraOpThreads: 1, InterOpThreads: 1, Output: output}
}

// batch is rows × cols of plausible BERT ids (encoding), padded.
func batch(rows, cols int) tokenize.Batch {
	encs := make([]tokenize.Encoding, rows)
	for i := range encs {
		encs[i] = encoding(i, cols)
	}
	return tokenize.Pad(encs)
}

// encoding is the i-th of a batch's rows of n plausible BERT ids: [CLS] 1000+… [SEP].
func encoding(i, n int) tokenize.Encoding {
	ids := make([]int64, n)
	for j := range ids {
		ids[j] = int64(1000 + (i*7+j)%5000)
	}
	ids[0], ids[n-1] = 101, 102
	return tokenize.Encoding{IDs: ids, TypeIDs: make([]int64, n)}
}

func TestSessionRunsRealModels(t *testing.T) {
	tests := []struct {
		model, version, output string
		want                   func(rows, cols int) []int64
	}{
		{"minilm", "fp32", "last_hidden_state", func(r, c int) []int64 { return []int64{int64(r), int64(c), 384} }},
		{"minilm", "int8", "last_hidden_state", func(r, c int) []int64 { return []int64{int64(r), int64(c), 384} }},
		{"sentiment", "fp32", "logits", func(r, c int) []int64 { return []int64{int64(r), 2} }},
		{"sentiment", "int8", "logits", func(r, c int) []int64 { return []int64{int64(r), 2} }},
	}
	for _, tt := range tests {
		t.Run(tt.model+"/"+tt.version, func(t *testing.T) {
			s := open(t, tt.model, tt.version, tt.output)
			if s.Provider() != ort.ProviderCPU {
				t.Errorf("provider %s", s.Provider())
			}
			for _, shape := range [][2]int{{1, 4}, {3, 17}} {
				out, err := s.Run(t.Context(), batch(shape[0], shape[1]))
				if err != nil {
					t.Fatal(err)
				}
				want := tt.want(shape[0], shape[1])
				if fmt.Sprint(out.Shape) != fmt.Sprint(want) || int64(len(out.Data)) != want[0]*want[1]*max(1, wantLast(want)) {
					t.Errorf("shape %v (%d values), want %v", out.Shape, len(out.Data), want)
				}
			}
		})
	}
}

func wantLast(shape []int64) int64 {
	if len(shape) == 3 {
		return shape[2]
	}
	return 1
}

// Concurrent runs on one session are safe, and each gets its own rows back.
func TestSessionConcurrentRuns(t *testing.T) {
	s, err := env.NewSession(modelFile("sentiment", "fp32"), cpu("logits"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ref, err := s.Run(t.Context(), batch(4, 9))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			out, err := s.Run(context.Background(), batch(4, 9))
			if err != nil {
				t.Error(err)
				return
			}
			for i := range out.Data {
				if out.Data[i] != ref.Data[i] {
					t.Errorf("concurrent run differs at %d: %v vs %v", i, out.Data[i], ref.Data[i])
					return
				}
			}
		})
	}
	wg.Wait()
}

// modelWriter returns a fresh temporary folder and a function that writes a model file
// into it and returns its path.
func modelWriter(t *testing.T) (string, func(name string, data []byte) string) {
	dir := t.TempDir()
	return dir, func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
}

func TestNewSessionRefusesBadModels(t *testing.T) {
	dir, write := modelWriter(t)
	ids := onnxtest.Value{Name: "input_ids", ElemType: onnxtest.Int64, Dims: []int64{-1, -1}}
	mask := onnxtest.Value{Name: "attention_mask", ElemType: onnxtest.Int64, Dims: []int64{-1, -1}}
	tests := []struct {
		name, path, output, want string
	}{
		{"missing file", filepath.Join(dir, "nope.onnx"), "out", "no such file"},
		{"not onnx", write("junk.onnx", []byte("this is not a model")), "out", "loading"},
		{"unexpected input", write("pixels.onnx", onnxtest.Identity([]onnxtest.Value{{Name: "pixel_values", ElemType: onnxtest.Float, Dims: []int64{-1, 3}}}, []string{"out"})), "out", `unexpected input "pixel_values"`},
		{"no mask", write("nomask.onnx", onnxtest.Identity([]onnxtest.Value{ids}, []string{"out"})), "out", `lacks input "input_ids" or "attention_mask"`},
		{"float ids", write("floatids.onnx", onnxtest.Identity([]onnxtest.Value{{Name: "input_ids", ElemType: onnxtest.Float, Dims: []int64{-1, -1}}, mask}, []string{"a", "b"})), "a", "want int64 [batch, sequence]"},
		{"int output", write("intout.onnx", onnxtest.Identity([]onnxtest.Value{ids, mask}, []string{"a", "b"})), "a", "reads float32 outputs"},
		{"missing output", write("ok.onnx", onnxtest.Identity([]onnxtest.Value{ids, mask}, []string{"a", "b"})), "logits", `has no output "logits"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := env.NewSession(tt.path, cpu(tt.output))
			if err == nil {
				s.Close()
				t.Fatal("loaded")
			}
			if !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("got %q, want one line containing %q", err, tt.want)
			}
		})
	}
}

// Without a GPU, cuda fails with ErrCUDAUnavailable and auto falls back to CPU with a
// reason; with one, both give CUDA.
func TestResolveDevice(t *testing.T) {
	p, why, err := env.Resolve(ort.DeviceAuto, 0)
	if err != nil {
		t.Fatal(err)
	}
	pc, _, errc := env.Resolve(ort.DeviceCUDA, 0)
	switch p {
	case ort.ProviderCPU:
		if why == "" || !errors.Is(errc, ort.ErrCUDAUnavailable) {
			t.Errorf("auto fell back without a reason (%q) or cuda did not fail (%v)", why, errc)
		}
		t.Logf("no CUDA here: %s", why)
	case ort.ProviderCUDA:
		if errc != nil || pc != ort.ProviderCUDA {
			t.Errorf("auto found CUDA, cuda did not: %v", errc)
		}
	}
	if p, _, err := env.Resolve(ort.DeviceCPU, 0); p != ort.ProviderCPU || err != nil {
		t.Errorf("cpu: %s %v", p, err)
	}
	if _, err := ort.ParseDevice("tpu"); err == nil {
		t.Error("tpu accepted")
	}
}

// minilm fp32 and int8 declare packing (bertonnx's numbered attention mask), and in fp32 a
// text packed with others gets the outputs it gets alone, token for token. int8-static, served
// padded to keep its answers batch-invariant, and the sentiment graph, whose output is one row
// per text, do not pack.
//
// int8 packs by default, so it is checked too, on its mean-pooled output alone: dynamic int8
// quantizes activations with one scale per batch, so a text's token values move with its
// batch-mates however they are laid out, padded or packed, and the shortest text moves most.
// A packing that let the texts attend to one another would move them far more, towards the
// cosine of two different texts. The bound, 0.95, sits below what batching itself does to
// int8 and above what mixing texts does (docs/quantization.md, "Dynamic int8: the answer moves
// with the batch", has the cosines this test logs with -v).
func TestSessionPacks(t *testing.T) {
	lengths := []int{5, 17, 9, 2}
	var encs []tokenize.Encoding
	for i, n := range lengths {
		encs = append(encs, encoding(i, n))
	}
	tests := []struct {
		model, version, output string
		packs                  bool
		maxDiff                float64 // largest |packed − alone| of a token's output
		minCos                 float64 // of the mean-pooled outputs
	}{
		{"minilm", "fp32", "last_hidden_state", true, 1e-4, 0.99999},
		{"minilm", "int8", "last_hidden_state", true, math.Inf(1), 0.95}, // token values move with the batch's scale
		{"minilm", "int8-static", "last_hidden_state", false, 0, 0},
		{"sentiment", "fp32", "logits", false, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.model+"/"+tt.version, func(t *testing.T) {
			s := open(t, tt.model, tt.version, tt.output)
			if s.Packs() != tt.packs {
				t.Fatalf("Packs() = %v, want %v", s.Packs(), tt.packs)
			}
			if !tt.packs || tt.minCos == 0 {
				return
			}
			// One row, and two rows of unequal lengths (text 3 first in its row, text 1 alone in
			// the longer one), as the batcher's packRows lays them out.
			for _, layout := range [][][]int{{{0, 1, 2, 3}}, {{3, 0, 2}, {1}}} {
				b := tokenize.PackRows(encs, layout)
				out, err := s.Run(t.Context(), b)
				if err != nil {
					t.Fatal(err)
				}
				if out.Shape[0] != int64(len(layout)) || out.Shape[1] != int64(b.Cols) {
					t.Fatalf("packed output %v, want [%d %d 384]", out.Shape, len(layout), b.Cols)
				}
				for i, seg := range out.Segments(b.Starts, b.Lengths) {
					alone, err := s.Run(t.Context(), tokenize.Pad(encs[i:i+1]))
					if err != nil {
						t.Fatal(err)
					}
					var diff, dot, na, nb float64
					hidden := 384
					mean := func(d []float32, j int) float64 {
						var m float64
						for tok := range lengths[i] {
							m += float64(d[tok*hidden+j])
						}
						return m
					}
					for j, x := range alone.Data {
						diff = max(diff, math.Abs(float64(x-seg.Data[j])))
					}
					for j := range hidden {
						a, p := mean(alone.Data, j), mean(seg.Data, j)
						dot, na, nb = dot+a*p, na+a*a, nb+p*p
					}
					c := dot / math.Sqrt(na*nb)
					t.Logf("layout %v, text %d (%d tokens): packed vs alone: max |diff| %.3g, cosine %.7f", layout, i, lengths[i], diff, c)
					if diff > tt.maxDiff || c < tt.minCos {
						t.Errorf("layout %v, text %d (%d tokens): packed vs alone: max |diff| %.3g (want ≤ %g), cosine %.7f (want ≥ %g)", layout, i, lengths[i], diff, tt.maxDiff, c, tt.minCos)
					}
				}
			}
		})
	}
}
