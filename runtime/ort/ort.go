//go:build cgo && ort

package ort

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	ortgo "github.com/yalue/onnxruntime_go"

	"github.com/ortserve/ortserve/runtime"
	"github.com/ortserve/ortserve/runtime/onnx"
	"github.com/ortserve/ortserve/tokenize"
)

// Env is the process's ONNX Runtime environment. Open it once, in main, and close it after
// every session.
type Env struct {
	version string
}

// Open loads the ONNX Runtime shared library at libPath and creates the environment.
func Open(libPath string) (*Env, error) {
	if _, err := os.Stat(libPath); err != nil {
		return nil, fmt.Errorf("ort: ONNX Runtime library not found at %s: run `make deps` to fetch it, or point --ort-lib (ORTSERVE_ORT_LIB) at libonnxruntime.so", libPath)
	}
	ortgo.SetSharedLibraryPath(libPath)
	if err := ortgo.InitializeEnvironment(ortgo.WithLogLevelError()); err != nil {
		return nil, fmt.Errorf("ort: loading %s: %w", libPath, err)
	}
	return &Env{version: ortgo.GetVersion()}, nil
}

// Version is the ONNX Runtime library's version.
func (e *Env) Version() string { return e.version }

// Close destroys the environment. Every session must be closed first.
func (e *Env) Close() error {
	if err := ortgo.DestroyEnvironment(); err != nil {
		return fmt.Errorf("ort: %w", err)
	}
	return nil
}

// Resolve decides which provider a device request gets on this machine. For DeviceAuto it
// returns CPU and the reason CUDA could not be used; for DeviceCUDA that reason is an error
// wrapping ErrCUDAUnavailable.
func (e *Env) Resolve(d Device, deviceID int) (p Provider, fallback string, err error) {
	if d == DeviceCPU {
		return ProviderCPU, "", nil
	}
	opts, err := ortgo.NewSessionOptions()
	if err != nil {
		return "", "", fmt.Errorf("ort: %w", err)
	}
	defer opts.Destroy()
	cerr := appendCUDA(opts, deviceID)
	switch {
	case cerr == nil:
		return ProviderCUDA, "", nil
	case d == DeviceCUDA:
		return "", "", fmt.Errorf("%w: %w", ErrCUDAUnavailable, cerr)
	default:
		return ProviderCPU, cerr.Error(), nil
	}
}

// ortError trims ONNX Runtime's source location and status prefix from an error, leaving
// what a user can act on ("Failed to load library ...").
func ortError(err error) error {
	msg := err.Error()
	if i := strings.LastIndex(msg, "[ONNXRuntimeError] : "); i >= 0 {
		msg = msg[i+len("[ONNXRuntimeError] : "):]
		if j := strings.Index(msg, " : "); j >= 0 && j < 16 { // "1 : FAIL : ..."
			msg = msg[j+3:]
		}
		if j := strings.Index(msg, " : "); j >= 0 && j < 24 {
			msg = msg[j+3:]
		}
	}
	return errors.New(msg)
}

// appendCUDA adds the CUDA provider to opts. Updating the provider options is where ONNX
// Runtime loads the provider library, so that is where a missing GPU or CUDA shows up.
func appendCUDA(opts *ortgo.SessionOptions, deviceID int) error {
	cuda, err := ortgo.NewCUDAProviderOptions()
	if err != nil {
		return err
	}
	defer cuda.Destroy()
	if err := cuda.Update(map[string]string{"device_id": strconv.Itoa(deviceID)}); err != nil {
		return ortError(err)
	}
	return opts.AppendExecutionProviderCUDA(cuda)
}

// Session runs batches on one ONNX Runtime session. It is safe for concurrent use.
type Session struct {
	sess     *ortgo.DynamicAdvancedSession
	inputs   []string // in the model's order
	output   string
	outShape ortgo.Shape // -1 for dynamic axes: 0 → rows, 1 → sequence
	provider Provider
	packs    bool
}

var _ runtime.Session = (*Session)(nil)

// NewSession loads the model at path and checks that its inputs and output are ones
// ortserve can feed and read.
func (e *Env) NewSession(path string, o Options) (*Session, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("ort: model file %s: %w", path, errors.Unwrap(err))
	}
	inputs, outShape, err := inspect(path, o.Output)
	if err != nil {
		return nil, err
	}
	opts, err := sessionOptions(o)
	if err != nil {
		return nil, fmt.Errorf("ort: %s: %w", path, err)
	}
	defer opts.Destroy()
	sess, err := ortgo.NewDynamicAdvancedSession(path, inputs, []string{o.Output}, opts)
	if err != nil {
		return nil, fmt.Errorf("ort: loading %s: %w", path, err)
	}
	packs, err := declaresPacking(sess)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("ort: %s: reading its metadata: %w", path, err), sess.Destroy())
	}
	// Packed rows are split per token: only an output of [batch, sequence, hidden] can be.
	packs = packs && len(outShape) == 3 && outShape[1] < 0
	return &Session{sess: sess, inputs: inputs, output: o.Output, outShape: outShape, provider: o.Provider, packs: packs}, nil
}

// declaresPacking reads the model's PackingKey.
func declaresPacking(sess *ortgo.DynamicAdvancedSession) (bool, error) {
	md, err := sess.GetModelMetadata()
	if err != nil {
		return false, err
	}
	v, ok, err := md.LookupCustomMetadataMap(PackingKey)
	return ok && v == PackingSegments, errors.Join(err, md.Destroy())
}

// Packs reports whether the session runs packed batches (tokenize.Pack): its graph declares
// PackingSegments and its output is per token.
func (s *Session) Packs() bool { return s.packs }

func sessionOptions(o Options) (*ortgo.SessionOptions, error) {
	opts, err := ortgo.NewSessionOptions()
	if err != nil {
		return nil, err
	}
	err = errors.Join(
		opts.SetIntraOpNumThreads(o.IntraOpThreads),
		opts.SetInterOpNumThreads(o.InterOpThreads),
		opts.SetGraphOptimizationLevel(ortgo.GraphOptimizationLevelEnableAll),
	)
	if err == nil && o.IntraOpThreads == 1 {
		// A single-thread session has no use for spinning pool threads.
		err = opts.AddSessionConfigEntry("session.intra_op.allow_spinning", "0")
	}
	if err == nil && o.Strict {
		err = opts.AddSessionConfigEntry("session.disable_cpu_ep_fallback", "1")
	}
	if err == nil && o.Provider == ProviderCUDA {
		err = appendCUDA(opts, o.DeviceID)
	}
	if err != nil {
		opts.Destroy()
		return nil, err
	}
	return opts, nil
}

// inspect reads the model's signature: the inputs to bind, in the model's order, and the
// shape of the output with its dynamic axes (-1). It reads the file with the pure ONNX
// reader, streaming past the weights: asking ONNX Runtime instead builds a whole session
// (graph optimisation included) only to read the names, which cost as much CPU as the
// session itself at every start-up.
func inspect(path, output string) ([]string, ortgo.Shape, error) {
	m, err := onnx.ReadModel(path)
	if err != nil {
		return nil, nil, fmt.Errorf("ort: loading %s: %w", path, err)
	}
	var names []string
	has := map[string]bool{}
	for _, in := range m.Inputs {
		switch in.Name {
		case InputIDs, AttentionMask, TokenTypeIDs:
		default:
			return nil, nil, fmt.Errorf("ort: %s has unexpected input %q: ortserve feeds only %s, %s and %s", path, in.Name, InputIDs, AttentionMask, TokenTypeIDs)
		}
		if in.Type != "int64" || len(in.Shape) != 2 {
			return nil, nil, fmt.Errorf("ort: %s input %q is %s %s: want int64 [batch, sequence]", path, in.Name, in.Type, onnx.ShapeString(in.Shape))
		}
		names = append(names, in.Name)
		has[in.Name] = true
	}
	if !has[InputIDs] || !has[AttentionMask] {
		return nil, nil, fmt.Errorf("ort: %s lacks input %q or %q: is it a transformer encoder?", path, InputIDs, AttentionMask)
	}
	var found []string
	for _, out := range m.Outputs {
		if out.Name != output {
			found = append(found, out.Name)
			continue
		}
		if out.Type != "float32" {
			return nil, nil, fmt.Errorf("ort: %s output %q is %s: ortserve reads float32 outputs (convert fp16 models with keep_io_types)", path, output, out.Type)
		}
		shape := make(ortgo.Shape, len(out.Shape))
		for i, d := range out.Shape {
			shape[i] = -1
			if d.Fixed() {
				shape[i] = d.Value
			}
		}
		if len(shape) < 2 || len(shape) > 3 {
			return nil, nil, fmt.Errorf("ort: %s output %q has shape %v: want [batch, n] or [batch, sequence, hidden]", path, output, shape)
		}
		for i := 2; i < len(shape); i++ {
			if shape[i] < 0 {
				return nil, nil, fmt.Errorf("ort: %s output %q has a dynamic axis %d: only batch and sequence axes may be dynamic", path, output, i)
			}
		}
		return names, shape, nil
	}
	return nil, nil, fmt.Errorf("ort: %s has no output %q (it has %v): fix `output` in the model config", path, output, found)
}

// Provider is the execution provider the session runs on.
func (s *Session) Provider() Provider { return s.provider }

// Inputs are the model inputs the session feeds, in the model's order.
func (s *Session) Inputs() []string { return s.inputs }

// Run runs one batch. Cancelling ctx terminates the native run.
func (s *Session) Run(ctx context.Context, b tokenize.Batch) (out runtime.Tensor, err error) {
	if err := ctx.Err(); err != nil {
		return runtime.Tensor{}, err
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("ort: run panicked: %v", r)
		}
	}()
	inShape := ortgo.NewShape(int64(b.Rows), int64(b.Cols))
	values := make([]ortgo.Value, 0, len(s.inputs)+1)
	defer func() {
		for _, v := range values {
			v.Destroy()
		}
	}()
	for _, name := range s.inputs {
		data := b.InputIDs
		switch name {
		case AttentionMask:
			data = b.AttentionMask
		case TokenTypeIDs:
			data = b.TypeIDs
		}
		t, err := ortgo.NewTensor(inShape, data)
		if err != nil {
			return runtime.Tensor{}, fmt.Errorf("ort: input %s: %w", name, err)
		}
		values = append(values, t)
	}
	// Outputs are preallocated: onnxruntime_go mis-sizes some auto-allocated outputs.
	shape := s.outShape.Clone()
	shape[0] = int64(b.Rows)
	if shape[1] < 0 {
		shape[1] = int64(b.Cols)
	}
	data := make([]float32, shape.FlattenedSize())
	t, err := ortgo.NewTensor(shape, data)
	if err != nil {
		return runtime.Tensor{}, fmt.Errorf("ort: output %s: %w", s.output, err)
	}
	values = append(values, t)

	ro, err := ortgo.NewRunOptions()
	if err != nil {
		return runtime.Tensor{}, fmt.Errorf("ort: %w", err)
	}
	defer ro.Destroy()
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(fired)
		// If the flag cannot be set, the run goes on to its end, and Run still returns ctx's error.
		_ = ro.Terminate()
	})
	n := len(s.inputs)
	err = s.sess.RunWithOptions(values[:n], values[n:], ro)
	if !stop() && ctx.Err() != nil {
		<-fired // Terminate must be done with ro before it is destroyed.
		return runtime.Tensor{}, fmt.Errorf("ort: run cancelled: %w", ctx.Err())
	}
	if err != nil {
		return runtime.Tensor{}, fmt.Errorf("ort: run: %w", err)
	}
	return runtime.Tensor{Shape: shape, Data: data}, nil
}

// Close releases the session. No Run may be in progress.
func (s *Session) Close() error {
	if err := s.sess.Destroy(); err != nil {
		return fmt.Errorf("ort: %w", err)
	}
	return nil
}
