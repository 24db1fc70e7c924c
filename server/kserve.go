package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/ortserve/ortserve/models"
)

// KServe's Open Inference Protocol (v2) over REST: server metadata, health, model metadata and
// readiness, and infer with one BYTES input of texts, in JSON or with the binary tensor data
// extension (kserve_binary.go).

// KServeError is KServe v2's error body.
type KServeError struct {
	Error string `json:"error"`
}

// InferRequest is the body of POST /v2/models/{model}[/versions/{version}]/infer.
type InferRequest struct {
	ID string `json:"id,omitempty"`
	// Inputs must be one tensor named "text", datatype BYTES, whose data are the texts.
	Inputs []InferInput `json:"inputs"`
	// Outputs, when set, picks which outputs to return by name.
	Outputs []RequestedOutput `json:"outputs,omitempty"`
	// Parameters may set "truncate" and, for embed models, "normalize" (bools), and
	// "binary_data_output" (a bool: every output as binary data unless the output says
	// otherwise). Others, such as tritonclient's "priority" or "timeout", are ignored.
	Parameters map[string]any `json:"parameters,omitempty"`
}

// RequestedOutput names one output to return. Its parameters may set "binary_data" (a bool:
// return it as binary data after the JSON, overriding the request's "binary_data_output").
type RequestedOutput struct {
	Name       string         `json:"name"`
	Parameters map[string]any `json:"parameters,omitempty"`
}

// InferInput is one input tensor. Data is a flat list of strings in row-major order; nested
// lists are flattened. With the binary tensor data extension, Parameters has
// "binary_data_size" instead and the tensor's bytes follow the JSON (kserve_binary.go).
type InferInput struct {
	Name       string          `json:"name"`
	Shape      []int64         `json:"shape"`
	Datatype   string          `json:"datatype"`
	Parameters map[string]any  `json:"parameters,omitempty"`
	Data       json.RawMessage `json:"data"`

	// binary holds the tensor's bytes when they came after the JSON (hasBinary); it aliases
	// the request body.
	binary    []byte
	hasBinary bool
}

// InferOutput is one output tensor; Data is flat, row-major. An output sent as binary data
// has Parameters (its binary_data_size) and no Data.
type InferOutput struct {
	Name       string            `json:"name"`
	Shape      []int64           `json:"shape"`
	Datatype   string            `json:"datatype"`
	Parameters *OutputParameters `json:"parameters,omitempty"`
	Data       any               `json:"data,omitempty"`
}

// OutputParameters are an output's parameters in an infer answer.
type OutputParameters struct {
	// BinaryDataSize is the length of the output's bytes after the JSON.
	BinaryDataSize int `json:"binary_data_size"`
}

// InferResponse is the body of an infer answer.
type InferResponse struct {
	ModelName    string        `json:"model_name"`
	ModelVersion string        `json:"model_version"`
	ID           string        `json:"id,omitempty"`
	Outputs      []InferOutput `json:"outputs"`
}

// TensorMetadata describes one input or output of a model.
type TensorMetadata struct {
	Name     string  `json:"name"`
	Datatype string  `json:"datatype"`
	Shape    []int64 `json:"shape"`
}

// ModelMetadata is the body of GET /v2/models/{model}.
type ModelMetadata struct {
	Name     string           `json:"name"`
	Versions []string         `json:"versions"`
	Platform string           `json:"platform"`
	Inputs   []TensorMetadata `json:"inputs"`
	Outputs  []TensorMetadata `json:"outputs"`
}

// texts checks the request and returns its texts.
func (req *InferRequest) texts() ([]string, error) {
	if len(req.Inputs) != 1 {
		return nil, fmt.Errorf("want exactly one input, \"text\", got %d", len(req.Inputs))
	}
	in := req.Inputs[0]
	if in.Name != "text" {
		return nil, fmt.Errorf("unknown input %q: the only input is \"text\"", in.Name)
	}
	if in.Datatype != "BYTES" {
		return nil, fmt.Errorf("input %q has datatype %q, want BYTES", in.Name, in.Datatype)
	}
	if len(in.Shape) == 0 {
		return nil, fmt.Errorf("input %q has no shape: send [n] for n texts", in.Name)
	}
	n := int64(1)
	for _, d := range in.Shape {
		if d < 0 {
			return nil, fmt.Errorf("input %q has shape %v: dimensions must not be negative", in.Name, in.Shape)
		}
		if d > 0 && n > math.MaxInt32/d {
			return nil, fmt.Errorf("input %q has shape %v: too large", in.Name, in.Shape)
		}
		n *= d
	}
	var texts []string
	if in.hasBinary {
		var err error
		if texts, err = decodeBytesTensor(in.binary); err != nil {
			return nil, fmt.Errorf("input %q: %w", in.Name, err)
		}
	} else {
		var err error
		if texts, err = flatten(in.Data, in.Shape); err != nil {
			return nil, fmt.Errorf("input %q: %w", in.Name, err)
		}
	}
	if int64(len(texts)) != n {
		return nil, fmt.Errorf("input %q has shape %v (%d elements) but %d texts in data", in.Name, in.Shape, n, len(texts))
	}
	for _, name := range []string{"truncate", "normalize", "binary_data_output"} {
		if v, ok := req.Parameters[name]; ok {
			if _, isBool := v.(bool); !isBool {
				return nil, fmt.Errorf("parameter %q must be a bool", name)
			}
		}
	}
	for _, out := range req.Outputs {
		if v, ok := out.Parameters["binary_data"]; ok {
			if _, isBool := v.(bool); !isBool {
				return nil, fmt.Errorf("output %q: parameter \"binary_data\" must be a bool", out.Name)
			}
		}
		if v, ok := out.Parameters["classification"]; ok && v != float64(0) {
			return nil, fmt.Errorf("output %q asks for the classification extension, which ortserve does not serve: leave \"classification\" (class_count) out and read the \"label\" output", out.Name)
		}
	}
	return texts, nil
}

// flatten returns the strings of data: a string, a flat list of them in row-major order
// (any shape), or lists nested as shape says. Nested lists must make a tensor: every list at
// one depth as long as the others, strings at the deepest level only, and the lengths
// shape's; a ragged or partly empty nesting is no tensor and is refused.
func flatten(data json.RawMessage, shape []int64) ([]string, error) {
	t := tensorWalk{}
	if err := t.walk(data, 0); err != nil {
		return nil, err
	}
	if len(t.dims) > 1 && !slices.Equal(t.dims, shape) {
		return nil, fmt.Errorf("data is nested as %v, which is not the shape %v: send the shape's nesting, or a flat list", t.dims, shape)
	}
	return t.out, nil
}

// tensorWalk gathers a nested list's strings and the length of its lists at each depth.
type tensorWalk struct {
	out       []string
	dims      []int64 // the length of the lists at each depth
	leafDepth int     // where the strings are; -1 until one is seen
	seenLeaf  bool
}

func (t *tensorWalk) walk(data json.RawMessage, depth int) error {
	const maxDepth = 8
	const want = "data must be a list of strings (BYTES as UTF-8 text), nested as the shape if at all"
	data = bytes.TrimSpace(data)
	if len(data) > 0 && data[0] == '"' {
		if t.seenLeaf && t.leafDepth != depth || len(t.dims) > depth {
			return errors.New("data is ragged: " + want)
		}
		t.seenLeaf, t.leafDepth = true, depth
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return err
		}
		t.out = append(t.out, s)
		return nil
	}
	var list []json.RawMessage
	if depth >= maxDepth || len(data) == 0 || data[0] != '[' || json.Unmarshal(data, &list) != nil {
		return errors.New(want)
	}
	switch {
	case t.seenLeaf && t.leafDepth <= depth:
		return errors.New("data is ragged: " + want)
	case len(t.dims) == depth:
		t.dims = append(t.dims, int64(len(list)))
	case t.dims[depth] != int64(len(list)):
		return fmt.Errorf("data is ragged: lists of %d and %d items at depth %d: %s", t.dims[depth], len(list), depth, want)
	}
	for _, item := range list {
		if err := t.walk(item, depth+1); err != nil {
			return err
		}
	}
	return nil
}

func (req *InferRequest) boolParam(name string, def bool) bool {
	if v, ok := req.Parameters[name].(bool); ok {
		return v
	}
	return def
}

// ServerMetadata is the body of GET /v2.
type ServerMetadata struct { //nolint:revive // KServe v2's name for it, beside ModelMetadata
	Name       string   `json:"name"`
	Version    string   `json:"version"`
	Extensions []string `json:"extensions"`
}

func (s *Server) kserveServerMetadata(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, ServerMetadata{Name: "ortserve", Version: s.cfg.Info.Version, Extensions: []string{"binary_tensor_data", "model_configuration"}})
}

func (s *Server) kserveLive(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]bool{"live": true})
}

func (s *Server) kserveReady(w http.ResponseWriter, _ *http.Request) {
	if !s.ready.Load() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]bool{"ready": false})
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{"ready": true})
}

// kserveModel finds the model and version in the URL, as the repository has them now; on
// failure it has answered. A version segment in the URL must name one: an empty one
// (/versions//infer) is not the default version.
func (s *Server) kserveModel(w http.ResponseWriter, r *http.Request) (ModelInfo, string, bool) {
	name, version := chi.URLParam(r, "model"), chi.URLParam(r, "version")
	hasVersion := slices.Contains(chi.RouteContext(r.Context()).URLParams.Keys, "version")
	mi, err := s.kserveModelOf(name, version, hasVersion)
	return mi, version, s.answered(w, r, err)
}

// kserveModelOf finds a model, and its version when hasVersion, as the repository has them
// now, for KServe's routes and methods. A rerank model is not served over KServe (400,
// naming /rerank).
func (s *Server) kserveModelOf(name, version string, hasVersion bool) (ModelInfo, error) {
	mi, err := s.repo.Model(name)
	if err != nil {
		return mi, err
	}
	if mi.Task == string(models.TaskRerank) {
		// KServe's tensors here are one BYTES input of texts; a reranker takes a query and
		// its texts, which /rerank and /v1/rerank serve. Refused rather than described as
		// what it is not.
		return mi, &models.WrongTaskError{Model: mi.Name, Task: models.TaskRerank}
	}
	if hasVersion && !slices.Contains(mi.Versions, version) {
		return mi, &models.UnknownError{Kind: models.ErrUnknownVersion, Name: name + "/" + version, Known: mi.Versions}
	}
	return mi, nil
}

func (s *Server) kserveMetadata(w http.ResponseWriter, r *http.Request) {
	mi, _, ok := s.kserveModel(w, r)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, KServeMetadata(mi))
}

func (s *Server) kserveModelReady(w http.ResponseWriter, r *http.Request) {
	mi, _, ok := s.kserveModel(w, r)
	if !ok {
		return
	}
	ready := s.ready.Load()
	code := http.StatusOK
	if !ready {
		code = http.StatusServiceUnavailable
	}
	writeJSON(w, code, map[string]any{"name": mi.Name, "ready": ready})
}

func (s *Server) kserveInfer(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	mi, version, ok := s.kserveModel(w, r)
	if !ok {
		return
	}
	req, ok := s.readInferRequest(w, r)
	if !ok {
		return
	}
	resp, st, err := s.kserveRun(r.Context(), mi, version, req)
	if !s.answered(w, r, err) {
		return
	}
	setTiming(w, resp.ModelName, st, start)
	writeInferResponse(w, r, resp, req.binaryOutputs(resp.Outputs))
}

// kserveRun serves an infer request of model mi (version "": its default), whatever protocol
// it came in: it checks the request, runs the model and returns the outputs asked for, each
// flat with its Data a []float32 or a []string. It notes the version served for the
// request's metrics.
func (s *Server) kserveRun(ctx context.Context, mi ModelInfo, version string, req *InferRequest) (*InferResponse, models.Stats, error) {
	texts, err := req.texts()
	if err != nil {
		return nil, models.Stats{}, invalid("%s", err.Error())
	}
	truncate := req.boolParam("truncate", s.cfg.AutoTruncate)
	if err := s.inputsError(texts, truncate); err != nil {
		return nil, models.Stats{}, err
	}
	task := models.Task(mi.Task)
	for _, want := range req.Outputs {
		if !slices.Contains(outputNames(task), want.Name) {
			return nil, models.Stats{}, invalid("unknown output %q: %s has %q", want.Name, mi.Name, outputNames(task))
		}
	}
	p, name, release, err := s.repo.Acquire(mi.Name, task)
	if err != nil {
		return nil, models.Stats{}, err
	}
	defer release()
	n := int64(len(texts))
	var (
		outs []InferOutput
		st   models.Stats
	)
	switch task {
	case models.TaskClassify:
		var scores [][]float32
		scores, st, err = p.Classify(ctx, version, texts, models.ClassifyOptions{Truncate: truncate})
		if err != nil {
			return nil, st, err
		}
		labels := st.Labels
		flat := make([]float32, 0, len(scores)*len(labels))
		best := make([]string, len(scores))
		for i, sc := range scores {
			flat = append(flat, sc...)
			best[i] = labels[argmax(sc)]
		}
		outs = []InferOutput{
			{Name: "probabilities", Shape: []int64{n, int64(len(labels))}, Datatype: "FP32", Data: flat},
			{Name: "label", Shape: []int64{n}, Datatype: "BYTES", Data: best},
		}
	default:
		var vecs [][]float32
		vecs, st, err = p.Embed(ctx, version, texts, models.EmbedOptions{Truncate: truncate, Normalize: req.boolParam("normalize", true)})
		if err != nil {
			return nil, st, err
		}
		var dim int64
		if len(vecs) > 0 {
			dim = int64(len(vecs[0]))
		}
		flat := make([]float32, 0, len(vecs)*int(dim))
		for _, v := range vecs {
			flat = append(flat, v...)
		}
		outs = []InferOutput{{Name: "embedding", Shape: []int64{n, dim}, Datatype: "FP32", Data: flat}}
	}
	if len(req.Outputs) > 0 {
		picked := make([]InferOutput, len(req.Outputs))
		for i, want := range req.Outputs {
			picked[i] = outs[slices.IndexFunc(outs, func(o InferOutput) bool { return o.Name == want.Name })]
		}
		outs = picked
	}
	noteIn(ctx, name, st)
	return &InferResponse{ModelName: name, ModelVersion: st.Version, ID: req.ID, Outputs: outs}, st, nil
}

// outputNames are the outputs infer returns for a task, as KServeMetadata describes them.
func outputNames(task models.Task) []string {
	if task == models.TaskClassify {
		return []string{"probabilities", "label"}
	}
	return []string{"embedding"}
}

func argmax(v []float32) int {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return best
}
