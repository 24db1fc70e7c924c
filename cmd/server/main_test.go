//go:build cgo && ort

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ortserve/ortserve/cmd/server/internal/config"
	"github.com/ortserve/ortserve/runtime/ort"
	"github.com/ortserve/ortserve/runtime/ort/onnxtest"
)

// The end-to-end tests run the real server: real ONNX Runtime, tokenizer and models, which
// `make test` provides through the environment. Start-up failures run the test binary
// itself as the server in a child process (one ONNX Runtime environment per process).
func TestMain(m *testing.M) {
	if os.Getenv("ORTSERVE_TEST_EXEC") == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	if os.Getenv("ORTSERVE_ORT_LIB") == "" || os.Getenv("ORTSERVE_MODELS") == "" {
		fmt.Fprintln(os.Stderr, "cmd/server: ORTSERVE_ORT_LIB and ORTSERVE_MODELS are not set: run these tests with `make test`")
		os.Exit(1)
	}
	// The children this binary re-executes (serve, gate, bench, tune, inspect) exit without
	// the race detector's second of sleep at exit (GORACE atexit_sleep_ms, 1000 by
	// default): tests wait on their exit, and some time it from SIGTERM. Races they hit are
	// still reported, and still fail them (exit 66).
	os.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	// The servers the tests start, here and in children, keep their calibrations in a folder
	// of this run's, not in the user's: the first start of a version measures, later ones
	// read it, as restarts do, and nothing is left behind.
	calibrations, err := os.MkdirTemp("", "ortserve-calibration-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("ORTSERVE_CALIBRATION_CACHE", calibrations)
	if testEnv, err = ort.Open(os.Getenv("ORTSERVE_ORT_LIB")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	for name, s := range map[string]*lazyServer{"shared": &shared, "load": &loadShared} {
		if err := s.close(); err != nil {
			fmt.Fprintf(os.Stderr, "%s server shutdown: %v\n", name, err)
			code = 1
		}
	}
	testEnv.Close()
	os.RemoveAll(calibrations)
	os.Exit(code)
}

// testEnv is this test process's ONNX Runtime environment, shared by in-process servers.
var testEnv *ort.Env

func TestUsage(t *testing.T) {
	tests := []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "usage: server <command>"},
		{[]string{"nope"}, 2, `unknown command "nope"`},
		{[]string{"bench"}, 2, "no load given"},
		{[]string{"gate"}, 2, "no --model: name the model to gate"},
		{[]string{"inspect"}, 2, "name a model or an .onnx file"},
		{[]string{"serve", "--device", "tpu"}, 2, `unknown device "tpu"`},
		{[]string{"serve", "--max-batch", "0"}, 2, "max_batch_size"},
		{[]string{"serve", "extra"}, 2, "unexpected arguments"},
		{[]string{"version"}, 0, ""},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := run(tt.args, &out, &errb); code != tt.code || !strings.Contains(errb.String(), tt.want) {
				t.Errorf("exit %d, stderr %q; want %d containing %q", code, errb.String(), tt.code, tt.want)
			}
		})
	}
}

// serveChild runs `server serve args...` in a child process until it exits or until a line
// of stderr contains until; it returns the exit code (-1 if stopped) and stderr.
func serveChild(t *testing.T, until string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], append([]string{"serve", "--addr", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(os.Environ(), "ORTSERVE_TEST_EXEC=1")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		log.WriteString(sc.Text() + "\n")
		if until != "" && strings.Contains(sc.Text(), until) {
			cmd.Process.Kill()
			cmd.Wait()
			return -1, log.String()
		}
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), log.String()
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0, log.String()
}

// lastLine is the final line of a log: where a failed start-up says why.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func TestDeviceSelection(t *testing.T) {
	t.Parallel()
	code, log := serveChild(t, "", "--device", "cuda")
	if code != 1 || !strings.HasPrefix(lastLine(log), "server: --device cuda: ort: CUDA execution provider unavailable") {
		t.Errorf("--device cuda without a GPU: exit %d, last line %q", code, lastLine(log))
	}
	code, log = serveChild(t, "msg=serving", "--device", "auto", "--models", versionRepo(t, "minilm", "int8"))
	if code != -1 || !strings.Contains(log, "CUDA unavailable, serving on CPU") || !strings.Contains(log, "provider=CPUExecutionProvider") {
		t.Errorf("--device auto: exit %d, log:\n%s", code, log)
	}
}

// A broken model repository stops start-up with one clear line and exit code 1.
func TestStartupFailures(t *testing.T) {
	t.Parallel()
	src := filepath.Join(os.Getenv("ORTSERVE_MODELS"), "minilm")
	cfg, err := os.ReadFile(filepath.Join(src, "model.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := os.ReadFile(filepath.Join(src, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	// A tokenizer that does not match the model: the same one with every id moved past the
	// end of the model's vocabulary.
	var doc map[string]any
	if err := json.Unmarshal(tok, &doc); err != nil {
		t.Fatal(err)
	}
	vocab := doc["model"].(map[string]any)["vocab"].(map[string]any)
	for k, v := range vocab {
		vocab[k] = v.(float64) + 100000
	}
	for _, at := range doc["added_tokens"].([]any) {
		at.(map[string]any)["id"] = at.(map[string]any)["id"].(float64) + 100000
	}
	badTok, _ := json.Marshal(doc)
	badTok = bytes.ReplaceAll(badTok, []byte(`"ids":[101]`), []byte(`"ids":[100101]`))
	badTok = bytes.ReplaceAll(badTok, []byte(`"ids":[102]`), []byte(`"ids":[100102]`))

	pixels := onnxtest.Identity([]onnxtest.Value{{Name: "pixel_values", ElemType: onnxtest.Float, Dims: []int64{-1, 3}}}, []string{"last_hidden_state"})
	fp32 := filepath.Join(src, "fp32.onnx")

	tests := []struct {
		name  string
		files map[string][]byte // written into a one-model repository; nil means link the real fp32
		want  string
	}{
		{"missing model file", map[string][]byte{"tokenizer.json": tok}, "models: minilm/fp32: ort: model file"},
		{"tokenizer does not match", map[string][]byte{"tokenizer.json": badTok, "fp32.onnx": nil}, "does the tokenizer match the model?"},
		{"unexpected inputs", map[string][]byte{"tokenizer.json": tok, "fp32.onnx": pixels}, `has unexpected input "pixel_values"`},
		{"not a model", map[string][]byte{"tokenizer.json": tok, "fp32.onnx": []byte("garbage")}, "models: minilm/fp32: ort: loading"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			dir := filepath.Join(root, "minilm")
			os.Mkdir(dir, 0o755)
			// Only fp32 is declared, so the test is about exactly one file.
			yaml := string(cfg)
			if i := strings.Index(yaml, "versions:"); i >= 0 {
				yaml = yaml[:i] + "versions:\n  fp32: {file: fp32.onnx}\n"
			}
			os.WriteFile(filepath.Join(dir, "model.yaml"), []byte(yaml), 0o644)
			for name, data := range tt.files {
				if data == nil {
					if err := os.Symlink(fp32, filepath.Join(dir, name)); err != nil {
						t.Fatal(err)
					}
					continue
				}
				os.WriteFile(filepath.Join(dir, name), data, 0o644)
			}
			code, log := serveChild(t, "msg=serving", "--models", root, "--device", "cpu")
			last := lastLine(log)
			if code != 1 || !strings.HasPrefix(last, "server: ") || !strings.Contains(last, tt.want) {
				t.Errorf("exit %d, last line %q, want exit 1 and a line containing %q", code, last, tt.want)
			}
		})
	}
	code, log := serveChild(t, "", "--ort-lib", "/nonexistent/libonnxruntime.so")
	if code != 1 || !strings.Contains(lastLine(log), "run `make deps`") {
		t.Errorf("missing ORT library: exit %d, %q", code, lastLine(log))
	}
}

// startServer runs `server serve` in this process on a free port and stops it when the
// test ends; it returns the base URL.
func startServer(t testing.TB, args ...string) string {
	t.Helper()
	url, stop, err := launch(args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("server shutdown: %v", err)
		}
	})
	return url
}

// launch starts `server serve` in this process on a free port, with one session per version
// unless args ask for more (opening sessions is most of a start-up's time); stop shuts it down.
func launch(args ...string) (url string, stop func() error, err error) {
	c, err := config.Parse(append([]string{"--addr", "127.0.0.1:0", "--device", "cpu", "--sessions", "1"}, args...), io.Discard)
	if err != nil {
		return "", nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan string, 1)
	ready := func(addr string) { addrc <- addr }
	done := make(chan error, 1)
	go func() { done <- serve(ctx, c, testEnv, slog.New(slog.DiscardHandler), io.Discard, ready) }()
	select {
	case addr := <-addrc:
		return "http://" + addr, func() error { cancel(); return <-done }, nil
	case err := <-done:
		cancel()
		return "", nil, fmt.Errorf("server did not start: %w", err)
	}
}

// lazyServer is an in-process server that the first test asking for it starts, and that
// TestMain stops after every test.
type lazyServer struct {
	once sync.Once
	url  string
	stop func() error
	dir  string // a repository made for it, removed at the end
	err  error
}

// start starts the server once, with the arguments args returns, and returns its URL.
func (s *lazyServer) start(t testing.TB, args func() ([]string, error)) string {
	t.Helper()
	s.once.Do(func() {
		a, err := args()
		if err != nil {
			s.err = err
			return
		}
		s.url, s.stop, s.err = launch(a...)
	})
	if s.err != nil {
		t.Fatal(s.err)
	}
	return s.url
}

func (s *lazyServer) close() error {
	var err error
	if s.stop != nil {
		err = s.stop()
	}
	if s.dir != "" {
		err = errors.Join(err, os.RemoveAll(s.dir))
	}
	return err
}

// shared is one server of the whole built repository, make run's.
var shared lazyServer

// sharedServer returns the shared server's URL. Tests that only send a few requests to make
// run's models use it, and may run in parallel: none of them changes the server, nor loads it
// so that another's gauges would read other than idle.
func sharedServer(t testing.TB) string {
	t.Helper()
	return shared.start(t, func() ([]string, error) { return nil, nil })
}

// loadShared is one server of minilm's fp32 and int8, with the default settings, for the
// tests that put load on a server (bench's) but need it for nothing else.
var loadShared lazyServer

// loadServer returns the load server's URL.
func loadServer(t testing.TB) string {
	t.Helper()
	return loadShared.start(t, func() ([]string, error) {
		dir, err := os.MkdirTemp("", "ortserve-load-")
		if err != nil {
			return nil, err
		}
		loadShared.dir = dir
		return []string{"--models", dir}, writeVersionRepo(dir, "minilm", "fp32", "int8")
	})
}

// versionRepo is a repository of one model of the built repository, with only the versions
// named (its default the first), for tests that need a server but not every version.
func versionRepo(t testing.TB, model string, versions ...string) string {
	t.Helper()
	root := t.TempDir()
	if err := writeVersionRepo(root, model, versions...); err != nil {
		t.Fatal(err)
	}
	return root
}

// writeVersionRepo writes versionRepo's repository into root: model's folder, of links to
// the built files and a model.yaml with only the versions named.
func writeVersionRepo(root, model string, versions ...string) error {
	src := filepath.Join(os.Getenv("ORTSERVE_MODELS"), model)
	cfg, err := os.ReadFile(filepath.Join(src, "model.yaml"))
	if err != nil {
		return err
	}
	yaml, _, ok := strings.Cut(string(cfg), "versions:")
	if !ok {
		return fmt.Errorf("%s/model.yaml has no versions", src)
	}
	yaml = regexp.MustCompile(`(?m)^default_version: .*$`).ReplaceAllString(yaml, "default_version: "+versions[0]) + "versions:\n"
	dir := filepath.Join(root, model)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	links := []string{"tokenizer.json"}
	for _, v := range versions {
		yaml += fmt.Sprintf("  %s: {file: %s.onnx}\n", v, v)
		links = append(links, v+".onnx")
	}
	if head := filepath.Join(src, "head.json"); fileExists(head) {
		links = append(links, "head.json")
	}
	for _, f := range links {
		if err := os.Symlink(filepath.Join(src, f), filepath.Join(dir, f)); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(dir, "model.yaml"), []byte(yaml), 0o644)
}

// postRaw posts body as JSON and returns the response with its whole body read.
func postRaw(t *testing.T, url string, body any) (*http.Response, []byte) {
	t.Helper()
	data, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp, raw
}

// postJSON posts body and, on a 200, decodes the answer into out (when not nil).
func postJSON(t *testing.T, url string, body any, out any) *http.Response {
	t.Helper()
	resp, raw := postRaw(t, url, body)
	if out != nil && resp.StatusCode == 200 {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
	}
	if resp.StatusCode != 200 {
		t.Logf("%s → %d %s", url, resp.StatusCode, raw)
	}
	return resp
}

func cosine(a, b []float32) float64 {
	var dot, na, nb float64
	for i := range a {
		dot += float64(a[i]) * float64(b[i])
		na += float64(a[i]) * float64(a[i])
		nb += float64(b[i]) * float64(b[i])
	}
	return dot / math.Sqrt(na*nb)
}
