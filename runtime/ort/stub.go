//go:build !(cgo && ort)

package ort

// Without cgo or the ort build tag there is no ONNX Runtime: every call that needs it
// returns ErrNotBuilt, so that the packages above build, and their pure tests run, with
// CGO_ENABLED=0 and no native library.

import (
	"context"

	"github.com/ortserve/ortserve/runtime"
	"github.com/ortserve/ortserve/runtime/onnx"
	"github.com/ortserve/ortserve/tokenize"
)

// Env is the process's ONNX Runtime environment; in this build, none can be opened.
type Env struct{}

// Open returns ErrNotBuilt.
func Open(string) (*Env, error) { return nil, ErrNotBuilt }

// Version is empty.
func (e *Env) Version() string { return "" }

// Close does nothing.
func (e *Env) Close() error { return nil }

// Resolve returns ErrNotBuilt.
func (e *Env) Resolve(Device, int) (Provider, string, error) { return "", "", ErrNotBuilt }

// NewSession returns ErrNotBuilt.
func (e *Env) NewSession(string, Options) (*Session, error) { return nil, ErrNotBuilt }

// Place returns ErrNotBuilt.
func (e *Env) Place(onnx.ModelInfo, Options) (Placement, error) { return Placement{}, ErrNotBuilt }

// Session runs batches on one ONNX Runtime session; in this build, none exists.
type Session struct{}

var _ runtime.Session = (*Session)(nil)

// Provider is empty.
func (s *Session) Provider() Provider { return "" }

// Inputs is empty.
func (s *Session) Inputs() []string { return nil }

// Packs is false.
func (s *Session) Packs() bool { return false }

// Run returns ErrNotBuilt.
func (s *Session) Run(context.Context, tokenize.Batch) (runtime.Tensor, error) {
	return runtime.Tensor{}, ErrNotBuilt
}

// Close does nothing.
func (s *Session) Close() error { return nil }
