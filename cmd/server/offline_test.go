//go:build cgo && ort

package main

import (
	"io"
	"testing"

	"github.com/ortserve/ortserve/cmd/server/internal/config"
	"github.com/ortserve/ortserve/runtime/engine"
)

// offlineEngine is the engine serve builds on CPU with its default settings.
func offlineEngine(t testing.TB) *engine.Engine {
	t.Helper()
	c, err := config.Parse([]string{"--device", "cpu"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(testEnv, engineConfig(c))
	if err != nil {
		t.Fatal(err)
	}
	return e
}
