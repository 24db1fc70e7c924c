//go:build cgo && ort

package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The security checks on the real server: with --api-key, every route without the key
// gets 401 (but the exempt health routes); /metrics has the Go and process collectors; /info
// names no absolute path, not even in a reload error.
func TestAPIKeyAndInfoOnRealServer(t *testing.T) {
	t.Parallel()
	root, dir := int8Repo(t)
	good := string(minilmYAML("  int8: {file: int8.onnx}\n"))
	keys := filepath.Join(t.TempDir(), "keys")
	os.WriteFile(keys, []byte("# test\nsecret-1\n"), 0o600)
	url := startServer(t, "--models", root, "--sessions", "1", "--reload-interval", "50ms", "--api-key-file", keys, "--auth-exempt", "health")

	call := func(method, path, body, key string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), method, url+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	routes := []struct{ method, path, body string }{
		{"POST", "/embed", `{"inputs":"hi"}`},
		{"POST", "/", `{"inputs":"hi"}`},
		{"POST", "/tokenize", `{"inputs":"hi"}`},
		{"POST", "/v1/embeddings", `{"input":"hi"}`},
		{"POST", "/v2/models/minilm/infer", `{"inputs":[{"name":"text","shape":[1],"datatype":"BYTES","data":["hi"]}]}`},
		{"POST", "/v2/models/minilm/versions/int8/infer", `{"inputs":[{"name":"text","shape":[1],"datatype":"BYTES","data":["hi"]}]}`},
		{"GET", "/info", ""},
		{"GET", "/metrics", ""},
		{"GET", "/v2", ""},
		{"GET", "/v2/models/minilm", ""},
	}
	for _, rt := range routes {
		for _, key := range []string{"", "secret-2", "secret-1x", "SECRET-1"} {
			if code, body := call(rt.method, rt.path, rt.body, key); code != 401 {
				t.Errorf("%s %s with key %q: %d %.200s", rt.method, rt.path, key, code, body)
			}
		}
		if code, body := call(rt.method, rt.path, rt.body, "secret-1"); code != 200 {
			t.Errorf("%s %s with the key: %d %.200s", rt.method, rt.path, code, body)
		}
	}
	for _, path := range []string{"/health", "/v2/health/ready"} {
		if code, _ := call("GET", path, "", ""); code != 200 {
			t.Errorf("exempt %s: %d", path, code)
		}
	}
	_, metrics := call("GET", "/metrics", "", "secret-1")
	for _, name := range []string{"go_goroutines ", "process_resident_memory_bytes "} {
		if !strings.Contains(metrics, "\n"+name) {
			t.Errorf("/metrics has no %s", name)
		}
	}

	// A broken reload: its error, in /info, names the file by its place in the repository.
	writeAtomic(t, filepath.Join(dir, "model.yaml"), []byte(strings.Replace(good, "int8.onnx}", "missing.onnx}", 1)))
	var info string
	waitUntil(t, "the failed reload to show in /info", func() bool {
		_, info = call("GET", "/info", "", "secret-1")
		return strings.Contains(info, "reload_error")
	})
	var parsed struct {
		Models []struct {
			ReloadError string `json:"reload_error"`
		} `json:"models"`
	}
	json.Unmarshal([]byte(info), &parsed)
	for _, secret := range []string{root, os.Getenv("ORTSERVE_MODELS"), os.Getenv("HOME"), os.TempDir() + "/"} {
		if secret != "" && strings.Contains(info, secret) {
			t.Errorf("/info names %s: %s", secret, parsed.Models[0].ReloadError)
		}
	}
	if len(parsed.Models) != 1 || !strings.Contains(parsed.Models[0].ReloadError, "minilm/") {
		t.Errorf("reload error %+v: want it to name minilm/... relative to the repository", parsed.Models)
	}
	t.Logf("reload_error: %s", parsed.Models[0].ReloadError)
}
