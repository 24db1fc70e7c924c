// Package ort is the only ONNX Runtime cgo in ortserve (through github.com/yalue/onnxruntime_go):
// the process's one environment, sessions over transformer encoders, and the choice of
// execution provider with its fallback. Everything above it sees a runtime.Runner.
package ort

import (
	"errors"
	"fmt"
)

// Device is what a user asks for.
type Device string

// Devices a user may ask for.
const (
	DeviceAuto Device = "auto" // CUDA when it works, else CPU with a logged reason
	DeviceCUDA Device = "cuda" // CUDA or fail
	DeviceCPU  Device = "cpu"
)

// ParseDevice checks a user's device string.
func ParseDevice(s string) (Device, error) {
	switch d := Device(s); d {
	case DeviceAuto, DeviceCUDA, DeviceCPU:
		return d, nil
	}
	return "", fmt.Errorf("ort: unknown device %q: use auto, cuda or cpu", s)
}

// PackingKey is the model metadata key (ONNX metadata_props) by which a graph declares that
// it reads packed batches (tokenize.Pack) when its value is PackingSegments: its
// attention_mask may number the texts of one row (1, 1, 2, 2, 2, …), each token attends to its
// own text's tokens only, positions restart at each text, and the output is per token. With
// a 0/1 mask such a graph is an ordinary encoder. scripts/models/bertonnx.py writes it.
const (
	PackingKey      = "ortserve.packing"
	PackingSegments = "segments"
)

// Provider is the execution provider a session really runs on.
type Provider string

// Execution providers, named as ONNX Runtime names them.
const (
	ProviderCPU  Provider = "CPUExecutionProvider"
	ProviderCUDA Provider = "CUDAExecutionProvider"
)

// ErrCUDAUnavailable is returned when CUDA was required and cannot be used.
var ErrCUDAUnavailable = errors.New("ort: CUDA execution provider unavailable")

// Options configure a session.
type Options struct {
	Provider       Provider
	DeviceID       int
	IntraOpThreads int // 0: ONNX Runtime's default (one per core)
	InterOpThreads int // 0: ONNX Runtime's default
	// Output is the graph output the session returns; it must be float32.
	Output string
	// Strict makes session creation fail if any node would fall back to CPU.
	Strict bool
}

// Input names ortserve knows how to feed.
const (
	InputIDs      = "input_ids"
	AttentionMask = "attention_mask"
	TokenTypeIDs  = "token_type_ids"
)

// ErrNotBuilt is what every ONNX Runtime call returns in a binary built without it: cgo off,
// or the build tag ort not given. `make build` and `make test` build with both.
var ErrNotBuilt = errors.New("ort: this binary was built without ONNX Runtime (it needs cgo and -tags ort): build it with `make build`")
