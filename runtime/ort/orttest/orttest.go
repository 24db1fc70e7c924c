//go:build cgo && ort

// Package orttest runs a package's tests on the real ONNX Runtime and the built models, as
// `make test` provides them (ORTSERVE_ORT_LIB, ORTSERVE_MODELS).
package orttest

import (
	"fmt"
	"os"
	"testing"

	"github.com/ortserve/ortserve/runtime/ort"
)

// Main is a TestMain for package pkg: it opens the ONNX Runtime environment into *env, runs
// the tests, closes it and exits with the tests' code. Without the environment `make test`
// sets, it exits 1 and says so.
func Main(m *testing.M, pkg string, env **ort.Env) {
	lib := os.Getenv("ORTSERVE_ORT_LIB")
	if lib == "" || os.Getenv("ORTSERVE_MODELS") == "" {
		fmt.Fprintf(os.Stderr, "%s: ORTSERVE_ORT_LIB and ORTSERVE_MODELS are not set: run these tests with `make test`\n", pkg)
		os.Exit(1)
	}
	var err error
	if *env, err = ort.Open(lib); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	if err := (*env).Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}
