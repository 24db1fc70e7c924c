package main

// serve's tests that need neither ONNX Runtime nor the tokenizer library: they run without cgo.

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ortserve/ortserve/cmd/server/internal/config"
	"github.com/ortserve/ortserve/runtime/ort"
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
