package server

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ortserve/ortserve/models"
	"github.com/ortserve/ortserve/tokenize"
)

// oneTokenizer encodes every text as [CLS] [SEP].
type oneTokenizer struct{ tokenize.Tokenizer }

func (oneTokenizer) Encode(texts []string, _ tokenize.Options) ([]tokenize.Encoding, error) {
	out := make([]tokenize.Encoding, len(texts))
	for i := range out {
		out[i] = tokenize.Encoding{IDs: []int64{1, 2}, TypeIDs: []int64{0, 0}}
	}
	return out, nil
}
func (oneTokenizer) Close() error { return nil }

// unloadable is a backend on which no version loads.
type unloadable struct{}

func (unloadable) Device() string { return "cpu" }
func (unloadable) Tokenizer(string, int) (tokenize.Tokenizer, error) {
	return oneTokenizer{}, nil
}
func (unloadable) Executor(spec models.ExecSpec) (models.Executor, error) {
	return nil, fmt.Errorf("ort: loading %s: out of memory", spec.Path)
}

// A lazy version that fails to load answers 503, in one line that says why and that the next
// request tries again, the server's paths left out; /info says it failed, and why.
func TestLazyLoadFailure(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "emb")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	yaml := "name: emb\ntask: embed\ntokenizer: tokenizer.json\nmax_length: 8\noutput: h\npooling: mean\ndefault_version: fp32\nload: lazy\nversions:\n  fp32: {file: fp32.onnx}\n"
	if err := os.WriteFile(filepath.Join(dir, models.ConfigFile), []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	repo, err := models.OpenRepository(root, unloadable{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer repo.Close()
	s := New(DefaultConfig(), FromModels(repo), slog.New(slog.DiscardHandler), nil)
	s.SetReady(true)
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()

	info := func() models.VersionState {
		code, body := getURL(t, ts.URL+"/info")
		var i Info
		if err := json.Unmarshal([]byte(body), &i); err != nil || code != http.StatusOK || len(i.Models) != 1 {
			t.Fatalf("/info: %d %s", code, body)
		}
		return i.Models[0].VersionStates["fp32"]
	}
	if st := info(); st.Load != models.LoadLazy || st.State != models.StateUnloaded {
		t.Errorf("before any request: %+v", st)
	}
	resp, body := post(t, ts.URL+"/embed", `{"inputs":"a"}`)
	want := "model emb version fp32 failed to load: ort: loading fp32.onnx: out of memory; the next request tries again"
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, want) || resp.Header.Get("Retry-After") != "1" || strings.Contains(body, root) {
		t.Errorf("embed: %d %q (Retry-After %q); want 503 saying %q", resp.StatusCode, body, resp.Header.Get("Retry-After"), want)
	}
	if st := info(); st.State != models.StateFailed || st.Error != "models: emb/fp32 could not be loaded: ort: loading emb/fp32.onnx: out of memory" {
		t.Errorf("after the failure: %+v", st)
	}
}
