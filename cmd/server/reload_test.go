//go:build cgo && ort

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A hot reload that points a version at a corrupt file leaves the old generation serving
// without errors; a good reload then swaps in the new one, also without errors, while
// requests keep coming.
func TestHotReloadUnderLoad(t *testing.T) {
	t.Parallel()
	src := filepath.Join(os.Getenv("ORTSERVE_MODELS"), "sentiment")
	root := t.TempDir()
	dir := filepath.Join(root, "sentiment")
	os.Mkdir(dir, 0o755)
	for _, f := range []string{"tokenizer.json", "fp32.onnx", "int8.onnx"} {
		if err := os.Symlink(filepath.Join(src, f), filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	cfg := func(int8File string) []byte {
		return []byte("name: sentiment\ntask: classify\ntokenizer: tokenizer.json\nmax_length: 256\noutput: logits\n" +
			"labels: [negative, positive]\ndefault_version: int8\nversions:\n  fp32: {file: fp32.onnx}\n  int8: {file: " + int8File + "}\n")
	}
	write := func(name string, data []byte) {
		t.Helper()
		tmp := filepath.Join(dir, "."+name+".tmp")
		if err := os.WriteFile(tmp, data, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	write("model.yaml", cfg("int8.onnx"))
	url := startServer(t, "--models", root, "--reload-interval", "50ms")

	var stop atomic.Bool
	var wg sync.WaitGroup
	var ok, bad atomic.Int64
	for range 4 {
		wg.Go(func() {
			for !stop.Load() {
				var preds []struct{ Label string }
				resp := postJSON(t, url+"/predict", map[string]any{"inputs": negativeReview}, &preds)
				if resp.StatusCode == 200 && len(preds) == 2 && preds[0].Label == "negative" {
					ok.Add(1)
				} else {
					bad.Add(1)
				}
			}
		})
	}
	info := func() (reloads int, reloadErr string) {
		var in struct {
			Models []struct {
				Reloads     int    `json:"reloads"`
				ReloadError string `json:"reload_error"`
			} `json:"models"`
		}
		json.Unmarshal([]byte(get(t, url+"/info")), &in)
		return in.Models[0].Reloads, in.Models[0].ReloadError
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(90 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}

	time.Sleep(200 * time.Millisecond)
	write("corrupt.onnx", []byte("not an onnx model"))
	write("model.yaml", cfg("corrupt.onnx"))
	waitFor("the failed reload", func() bool { _, e := info(); return e != "" })
	// (Writing corrupt.onnx alone may already have caused one good reload, before model.yaml
	// changed: count from here.)
	before, why := info()
	if !strings.Contains(why, "sentiment/int8") {
		t.Errorf("reload error %q does not name the version", why)
	}
	time.Sleep(200 * time.Millisecond) // the old generation keeps serving

	write("model.yaml", cfg("int8.onnx"))
	waitFor("the good reload", func() bool { n, e := info(); return n > before && e == "" })
	if m := get(t, url+"/metrics"); !strings.Contains(m, `ortserve_execution_provider_info{model="sentiment",provider="CPUExecutionProvider",version="int8"} 1`) {
		t.Error("the provider metric lost the reloaded version")
	}
	time.Sleep(200 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	if bad.Load() != 0 || ok.Load() == 0 {
		t.Errorf("%d requests failed and %d succeeded across the reloads", bad.Load(), ok.Load())
	}
	t.Logf("%d requests answered across a failed and a good reload", ok.Load())
}
