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
