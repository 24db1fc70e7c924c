package server

import (
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

// KServe's Open Inference Protocol (v2) over REST: health, model metadata and readiness, and
// infer with one BYTES input of texts.

// KServeError is KServe v2's error body.
type KServeError struct {
	Error string `json:"error"`
}

func kserveShape(_ int, e ErrorResponse) any { return KServeError{Error: e.Error} }

// InferRequest is the body of POST /v2/models/{model}[/versions/{version}]/infer.
type InferRequest struct {
	ID string `json:"id,omitempty"`
	// Inputs must be one tensor named "text", datatype BYTES, whose data are the texts.
	Inputs []InferInput `json:"inputs"`
	// Outputs, when set, picks which outputs to return by name.
	Outputs []struct {
		Name string `json:"name"`
	} `json:"outputs,omitempty"`
	// Parameters may set "truncate" and, for embed models, "normalize" (bools).
	Parameters map[string]any `json:"parameters,omitempty"`
}

// InferInput is one input tensor. Data is a flat list of strings in row-major order; nested
// lists are flattened.
type InferInput struct {
	Name       string          `json:"name"`
	Shape      []int64         `json:"shape"`
	Datatype   string          `json:"datatype"`
	Parameters map[string]any  `json:"parameters,omitempty"`
	Data       json.RawMessage `json:"data"`
}

// InferOutput is one output tensor; Data is flat, row-major.
type InferOutput struct {
	Name     string  `json:"name"`
	Shape    []int64 `json:"shape"`
	Datatype string  `json:"datatype"`
	Data     any     `json:"data"`
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
	if err := flatten(in.Data, &texts, 0); err != nil {
		return nil, fmt.Errorf("input %q: %w", in.Name, err)
	}
	if int64(len(texts)) != n {
		return nil, fmt.Errorf("input %q has shape %v (%d elements) but %d texts in data", in.Name, in.Shape, n, len(texts))
	}
	for _, name := range []string{"truncate", "normalize"} {
		if v, ok := req.Parameters[name]; ok {
			if _, isBool := v.(bool); !isBool {
				return nil, fmt.Errorf("parameter %q must be a bool", name)
			}
		}
	}
	return texts, nil
}

// flatten appends the strings of data, a string or (nested) list of them, to out.
func flatten(data json.RawMessage, out *[]string, depth int) error {
	const maxDepth = 8
	var s string
	if err := json.Unmarshal(data, &s); err == nil {
		*out = append(*out, s)
		return nil
	}
	var list []json.RawMessage
	if depth >= maxDepth || json.Unmarshal(data, &list) != nil {
		return errors.New("data must be a list of strings (BYTES as UTF-8 text)")
	}
	for _, item := range list {
		if err := flatten(item, out, depth+1); err != nil {
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

// kserveModel finds the model and version in the URL; on failure it has answered.
func (s *Server) kserveModel(w http.ResponseWriter, r *http.Request) (ModelInfo, string, bool) {
	name, version := chi.URLParam(r, "model"), chi.URLParam(r, "version")
	mi := s.modelInfo(name)
	if mi.Name == "" {
		known := make([]string, len(s.cfg.Info.Models))
		for i, m := range s.cfg.Info.Models {
			known[i] = m.Name
		}
		s.fail(w, r, &models.UnknownError{Kind: models.ErrUnknownModel, Name: name, Known: known})
		return mi, "", false
	}
	if version != "" && !slices.Contains(mi.Versions, version) {
		s.fail(w, r, &models.UnknownError{Kind: models.ErrUnknownVersion, Name: name + "/" + version, Known: mi.Versions})
		return mi, "", false
	}
	return mi, version, true
}

func (s *Server) kserveMetadata(w http.ResponseWriter, r *http.Request) {
	mi, _, ok := s.kserveModel(w, r)
	if !ok {
		return
	}
	dim := int64(mi.Dimension)
	if dim == 0 {
		dim = -1
	}
	md := ModelMetadata{
		Name:     mi.Name,
		Versions: mi.Versions,
		Platform: "onnxruntime_onnx",
		Inputs:   []TensorMetadata{{Name: "text", Datatype: "BYTES", Shape: []int64{-1}}},
	}
	if mi.Task == string(models.TaskClassify) {
		md.Outputs = []TensorMetadata{
			{Name: "probabilities", Datatype: "FP32", Shape: []int64{-1, int64(len(mi.Labels))}},
			{Name: "label", Datatype: "BYTES", Shape: []int64{-1}},
		}
	} else {
		md.Outputs = []TensorMetadata{{Name: "embedding", Datatype: "FP32", Shape: []int64{-1, dim}}}
	}
	writeJSON(w, http.StatusOK, md)
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
	var req InferRequest
	if !s.decode(w, r, &req) {
		return
	}
	texts, err := req.texts()
	if err != nil {
		writeShaped(w, http.StatusBadRequest, KServeError{Error: err.Error()})
		return
	}
	truncate := req.boolParam("truncate", s.cfg.AutoTruncate)
	if !s.checkInputs(w, texts, truncate) {
		return
	}
	task := models.Task(mi.Task)
	for _, want := range req.Outputs {
		if !slices.Contains(outputNames(task), want.Name) {
			writeShaped(w, http.StatusBadRequest, KServeError{Error: fmt.Sprintf("unknown output %q: %s has %q", want.Name, mi.Name, outputNames(task))})
			return
		}
	}
	p, name, err := s.repo.Lookup(mi.Name, task)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	n := int64(len(texts))
	var (
		outs []InferOutput
		st   models.Stats
	)
	switch task {
	case models.TaskClassify:
		var scores [][]float32
		scores, st, err = p.Classify(r.Context(), version, texts, models.ClassifyOptions{Truncate: truncate})
		if err != nil {
			s.fail(w, r, err)
			return
		}
		labels := p.Labels()
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
		vecs, st, err = p.Embed(r.Context(), version, texts, models.EmbedOptions{Truncate: truncate, Normalize: req.boolParam("normalize", true)})
		if err != nil {
			s.fail(w, r, err)
			return
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
	note(r, name, st)
	setTiming(w, name, st, start)
	writeEncoded(w, http.StatusOK, &InferResponse{ModelName: name, ModelVersion: st.Version, ID: req.ID, Outputs: outs}, appendInferResponse)
}

// outputNames are the outputs infer returns for a task, as kserveMetadata describes them.
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
