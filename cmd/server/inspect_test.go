//go:build cgo && ort

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ortserve/ortserve/cmd/server/internal/config"
	"github.com/ortserve/ortserve/models"
	"github.com/ortserve/ortserve/runtime/inspect"
	"github.com/ortserve/ortserve/runtime/ort"
	"github.com/ortserve/ortserve/runtime/ort/onnxtest"
)

// runInspectHere runs `server inspect args...` in this process, on the test's ONNX Runtime
// environment.
func runInspectHere(t *testing.T, args ...string) (string, error) {
	t.Helper()
	c, err := config.ParseInspect(args, os.Getenv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err = inspectFiles(t.Context(), c, testEnv, &out)
	return out.String(), err
}

func TestInspectModelText(t *testing.T) {
	out, err := runInspectHere(t, "minilm", "--version", "int8", "--device", "cpu")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"minilm/int8", "input_ids", "int64", "[batch, sequence]", "last_hidden_state",
		"MatMulInteger*", "DynamicQuantizeLinear*", "placement on CPUExecutionProvider",
		"after ONNX Runtime's graph optimizations", "summary: provider=CPUExecutionProvider",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "minilm/fp32") || strings.Contains(out, "fell back") {
		t.Errorf("report of int8 on CPU names fp32 or a fallback:\n%s", out)
	}
}

func TestInspectModelJSON(t *testing.T) {
	t.Parallel()
	out, err := runInspectHere(t, "--json", "--device", "cpu", "minilm")
	if err != nil {
		t.Fatal(err)
	}
	var r inspect.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	cfg, err := models.ReadConfig(filepath.Join(os.Getenv("ORTSERVE_MODELS"), "minilm"))
	if err != nil {
		t.Fatal(err)
	}
	if r.Provider != string(ort.ProviderCPU) || len(r.Files) != len(cfg.Versions) {
		t.Fatalf("provider %s, %d files: want CPU and every one of %d versions", r.Provider, len(r.Files), len(cfg.Versions))
	}
	for _, f := range r.Files {
		p := f.Place
		if p == nil {
			t.Errorf("%s: no placement: %s", f.Version, f.PlaceError)
			continue
		}
		// The optimized graph has fewer nodes than the file, except fp16 on the CPU: ORT adds a
		// Cast around each node it runs in float (93 for minilm, 218 nodes in the file, 335 placed).
		onCPU := 0
		for _, c := range p.Providers {
			if c.Provider == string(ort.ProviderCPU) {
				onCPU += c.Nodes
			}
		}
		if onCPU != p.Nodes || p.Nodes == 0 || (p.Nodes > f.File.Nodes && f.Version != "fp16") {
			t.Errorf("%s: %d of %d nodes on CPU, %d in the file", f.Version, onCPU, p.Nodes, f.File.Nodes)
		}
		switch quantized := f.File.QuantizedNodes > 0 && p.QuantizedNodes > 0; f.Version {
		case "fp32", "fp16", "int8":
			if quantized != (f.Version == "int8") || (f.File.FP16Initializers > 0) != (f.Version == "fp16") {
				t.Errorf("%s: %d quantized nodes in the file, %d placed; %d fp16 initializers", f.Version, f.File.QuantizedNodes, p.QuantizedNodes, f.File.FP16Initializers)
			}
		}
	}
}

func TestInspectFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tiny.onnx")
	ids := onnxtest.Value{Name: "input_ids", ElemType: onnxtest.Int64, Dims: []int64{-1, -1}}
	if err := os.WriteFile(path, onnxtest.Identity([]onnxtest.Value{ids}, []string{"out"}), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := runInspectHere(t, path, "--device", "cpu")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, path) || !strings.Contains(out, "input_ids  int64  [d0, d1]") || !regexp.MustCompile(`Identity +1\n`).MatchString(out) {
		t.Errorf("report:\n%s", out)
	}
}

// Usage errors are found before ONNX Runtime is opened, so run() takes them in this process.
func TestInspectUsage(t *testing.T) {
	file := filepath.Join(os.Getenv("ORTSERVE_MODELS"), "minilm", "int8.onnx")
	tests := []struct {
		args []string
		want []string
	}{
		{nil, []string{"name a model or an .onnx file"}},
		{[]string{"nope"}, []string{`unknown model "nope" in ` + os.Getenv("ORTSERVE_MODELS") + ": have ", "minilm", "sentiment", "or name an .onnx file"}},
		{[]string{"/no/such/model.onnx"}, []string{"no file /no/such/model.onnx"}},
		{[]string{"minilm", "--version", "q4"}, []string{`model minilm has no version "q4": have `, "fp32", "int8"}},
		{[]string{file, "--version", "int8"}, []string{"--version is for a model in the repository"}},
		{[]string{"minilm", "sentiment"}, []string{"unexpected arguments [sentiment]"}},
		{[]string{"minilm", "--device", "tpu"}, []string{`unknown device "tpu"`}},
		{[]string{"minilm", "--models", "/no/repo"}, []string{"model repository /no/repo: no such file", "or name an .onnx file"}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(append([]string{"inspect"}, tt.args...), &out, &errb)
			msg := strings.TrimSuffix(errb.String(), "\n")
			ok := code == 2 && !strings.Contains(msg, "\n")
			for _, w := range tt.want {
				ok = ok && strings.Contains(msg, w)
			}
			if !ok {
				t.Errorf("exit %d, stderr %q; want 2 and one line containing %q", code, msg, tt.want)
			}
		})
	}
}

// The command as a user runs it: its own ONNX Runtime environment, so a child process.
func TestInspectCommand(t *testing.T) {
	t.Parallel()
	junk := filepath.Join(t.TempDir(), "junk.onnx")
	os.WriteFile(junk, []byte("not a model"), 0o644)
	tests := []struct {
		args []string
		code int
		want string // in stdout for exit 0, in stderr's last line otherwise
	}{
		{[]string{filepath.Join(os.Getenv("ORTSERVE_MODELS"), "sentiment", "int8.onnx"), "--json", "--device", "cpu"}, 0, `"op": "MatMulInteger"`},
		{[]string{junk}, 1, "is not an ONNX model"},
	}
	for _, tt := range tests {
		t.Run(filepath.Base(tt.args[0]), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], append([]string{"inspect"}, tt.args...)...)
			cmd.Env = append(os.Environ(), "ORTSERVE_TEST_EXEC=1")
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tt.code {
				t.Fatalf("exit %d, want %d; stderr %s", code, tt.code, stderr.String())
			}
			if code == 0 {
				var r inspect.Report
				if err := json.Unmarshal(stdout.Bytes(), &r); err != nil || !strings.Contains(stdout.String(), tt.want) {
					t.Errorf("%v; stdout lacks %q:\n%s", err, tt.want, stdout.String())
				}
				return
			}
			if last := lastLine(stderr.String()); !strings.HasPrefix(last, "server: ") || !strings.Contains(last, tt.want) {
				t.Errorf("last line %q, want one containing %q", last, tt.want)
			}
		})
	}
}
