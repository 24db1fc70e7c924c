//go:build cgo && ort

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
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

	// Load runs off the test goroutine, where a failure must not call t.Fatal: each request
	// reports what went wrong as an error, and the test goroutine reports the first few.
	var stop atomic.Bool
	var wg sync.WaitGroup
	var ok, bad atomic.Int64
	var mu sync.Mutex
	var failures []error
	for range 4 {
		wg.Go(func() {
			for !stop.Load() {
				if err := predictNegative(url); err != nil {
					bad.Add(1)
					mu.Lock()
					if len(failures) < 5 {
						failures = append(failures, err)
					}
					mu.Unlock()
					continue
				}
				ok.Add(1)
			}
		})
	}
	// However the test ends, the load stops before the server does (t.Cleanup).
	stopLoad := func() {
		stop.Store(true)
		wg.Wait()
	}
	defer stopLoad()
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
	// answered waits until the load has had more answers, whichever generation serves them
	// (or a failure, which the end reports).
	answered := func(what string) {
		t.Helper()
		mark := ok.Load() + 20
		waitFor(what, func() bool { return ok.Load() >= mark || bad.Load() > 0 })
	}

	answered("answers before any reload")
	write("corrupt.onnx", []byte("not an onnx model"))
	write("model.yaml", cfg("corrupt.onnx"))
	waitFor("the failed reload", func() bool { _, e := info(); return e != "" })
	// (Writing corrupt.onnx alone may already have caused one good reload, before model.yaml
	// changed: count from here.)
	before, why := info()
	if !strings.Contains(why, "sentiment/int8") {
		t.Errorf("reload error %q does not name the version", why)
	}
	answered("answers from the old generation after the failed reload")

	write("model.yaml", cfg("int8.onnx"))
	waitFor("the good reload", func() bool { n, e := info(); return n > before && e == "" })
	if m := get(t, url+"/metrics"); !strings.Contains(m, `ortserve_execution_provider_info{model="sentiment",provider="CPUExecutionProvider",version="int8"} 1`) {
		t.Error("the provider metric lost the reloaded version")
	}
	answered("answers from the new generation")
	stopLoad()
	if bad.Load() != 0 || ok.Load() == 0 {
		t.Errorf("%d requests failed and %d succeeded across the reloads; the first failures: %v", bad.Load(), ok.Load(), failures)
	}
	t.Logf("%d requests answered across a failed and a good reload", ok.Load())
}

// predictNegative posts negativeReview to /predict and checks that it is labelled negative,
// with both labels scored. It reports any failure as an error, for a goroutine of load.
func predictNegative(url string) error {
	body, err := json.Marshal(map[string]any{"inputs": negativeReview})
	if err != nil {
		return err
	}
	resp, err := http.Post(url+"/predict", "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/predict: %d %s", resp.StatusCode, raw)
	}
	var preds []struct{ Label string }
	if err := json.Unmarshal(raw, &preds); err != nil {
		return fmt.Errorf("/predict: %w: %s", err, raw)
	}
	if len(preds) != 2 || preds[0].Label != "negative" {
		return fmt.Errorf("/predict: %s, want negative first of two labels", raw)
	}
	return nil
}
