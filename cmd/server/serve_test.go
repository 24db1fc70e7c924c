package main

// serve's tests that need neither ONNX Runtime nor the tokenizer library: they run without cgo.

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ortserve/ortserve/cmd/server/internal/config"
	"github.com/ortserve/ortserve/runtime/ort"
	"github.com/ortserve/ortserve/tokenize"
)

// A bad file stops `server serve` with exit code 2 before anything loads.
func TestServeBadConfigExits2(t *testing.T) {
	path := filepath.Join(t.TempDir(), "serve.yaml")
	os.WriteFile(path, []byte("batching:\n  max_queue_delay: soon\n"), 0o644)
	var out, errb bytes.Buffer
	if code := run([]string{"serve", "--config", path}, &out, &errb); code != 2 || !strings.HasPrefix(errb.String(), "server: config "+path+": line 2: batching.max_queue_delay soon") {
		t.Errorf("exit %d, stderr %q", code, errb.String())
	}
}

// --packing auto packs on the CPU only; on and off hold on every provider.
func TestPackingOn(t *testing.T) {
	for _, tc := range []struct {
		mode     string
		provider ort.Provider
		want     bool
	}{
		{"auto", ort.ProviderCPU, true},
		{"auto", ort.ProviderCUDA, false},
		{"on", ort.ProviderCUDA, true},
		{"off", ort.ProviderCPU, false},
	} {
		if got := packingOn(tc.mode, tc.provider); got != tc.want {
			t.Errorf("packingOn(%q, %s) = %v, want %v", tc.mode, tc.provider, got, tc.want)
		}
	}
}

// A version's cost model is seeded with the shapes its batches will have: padded rows × tokens
// up to the max batch, or, packed, one row of up to runtime.MaxPackTokens tokens; cheapest
// first, since calibration stops at its budget.
func TestCalibrationBatches(t *testing.T) {
	shapes := func(bs []tokenize.Batch) string {
		var s []string
		for _, b := range bs {
			s = append(s, fmt.Sprintf("%dx%d", b.Rows, b.Cols))
		}
		return strings.Join(s, " ")
	}
	if got, want := shapes(calibrationBatches(4, false)), "1x16 2x16 1x48 4x16 2x48 4x48"; got != want {
		t.Errorf("padded: %s, want %s", got, want)
	}
	if got, want := shapes(calibrationBatches(32, true)), "1x16 1x32 1x64 2x32 1x128 4x32 2x64 1x256 8x32 4x64 1x512 8x64"; got != want {
		t.Errorf("packed: %s, want %s", got, want)
	}
	if got, want := shapes(calibrationBatches(4, true)), "1x16 1x32 1x64 2x32 1x128 4x32 2x64 1x256 4x64 1x512"; got != want {
		t.Errorf("packed, at most 4 rows: %s, want %s", got, want)
	}
}

// The config package checks --device without runtime/ort, which is cgo: it takes every
// device that ort.ParseDevice takes, and refuses what ort refuses, with its own message.
func TestDevices(t *testing.T) {
	none := func(string) string { return "" }
	for _, d := range []ort.Device{ort.DeviceAuto, ort.DeviceCUDA, ort.DeviceCPU} {
		if _, err := config.Load([]string{"--device", string(d)}, none, io.Discard); err != nil {
			t.Errorf("--device %s: %v", d, err)
		}
	}
	for _, d := range []string{"gpu", "CPU", ""} {
		_, err := config.Load([]string{"--device", d}, none, io.Discard)
		if _, ortErr := ort.ParseDevice(d); ortErr == nil || err == nil || !strings.Contains(err.Error(), `unknown device "`+d+`"`) {
			t.Errorf("--device %q: config says %v, ort says %v; want both to refuse it", d, err, ortErr)
		}
	}
}
