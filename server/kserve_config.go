package server

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/ortserve/ortserve/models"
)

// Triton's extensions to KServe v2 that its tools call: a model's configuration (what
// tritonclient's get_model_config returns and perf_analyzer reads for max_batch_size) and
// the repository index. The descriptions here are protocol-independent, so that the REST
// routes and a gRPC service answer the same.

// ModelConfig is Triton's configuration of a model, the fields of its model_config.proto
// that say how to call it. Its JSON is Triton's over REST.
type ModelConfig struct {
	Name     string `json:"name"`
	Platform string `json:"platform"`
	Backend  string `json:"backend"`
	// MaxBatchSize is the most texts one request may carry (the server's MaxInputs). Above
	// zero, the first dimension of every tensor is the batch, which Dims leave out; zero
	// means Dims are the whole shapes.
	MaxBatchSize int            `json:"max_batch_size"`
	Input        []ConfigTensor `json:"input"`
	Output       []ConfigTensor `json:"output"`
	// DynamicBatching is always set: ortserve's batcher gathers concurrent requests into
	// one run, which is what the field tells a client such as perf_analyzer.
	DynamicBatching *DynamicBatching `json:"dynamic_batching,omitempty"`
}

// ConfigTensor is one input or output in a ModelConfig: Triton's data type names
// ("TYPE_STRING", "TYPE_FP32") and the dimensions after the batch's, -1 where any length goes.
type ConfigTensor struct {
	Name     string  `json:"name"`
	DataType string  `json:"data_type"`
	Dims     []int64 `json:"dims"`
}

// DynamicBatching is Triton's dynamic_batching setting. It has no fields here: the
// batcher's knobs are ortserve's (docs/batching.md), not Triton's.
type DynamicBatching struct{}

// IndexEntry is one model version in the repository index (POST /v2/repository/index).
type IndexEntry struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	// State is Triton's: READY, LOADING or UNAVAILABLE.
	State string `json:"state"`
	// Reason says why a version is not READY, or that a lazy one loads on its first request.
	Reason string `json:"reason"`
}

// KServeMetadata describes a model's tensors as KServe v2's model metadata does, the batch
// dimension first (-1). The input is [-1, 1], one text per row, as Triton describes a text
// input of a batching model: perf_analyzer drops the batch dimension and sends [n, 1], and
// could not fill a tensor of no dimensions. Infer takes any shape with as many elements as
// texts, [n] too. A rerank model has no tensors: the KServe routes refuse it.
func KServeMetadata(mi ModelInfo) ModelMetadata {
	dim := int64(mi.Dimension)
	if dim == 0 {
		dim = -1
	}
	md := ModelMetadata{
		Name:     mi.Name,
		Versions: mi.Versions,
		Platform: "onnxruntime_onnx",
		Inputs:   []TensorMetadata{{Name: "text", Datatype: "BYTES", Shape: []int64{-1, 1}}},
	}
	if mi.Task == string(models.TaskClassify) {
		md.Outputs = []TensorMetadata{
			{Name: "probabilities", Datatype: "FP32", Shape: []int64{-1, int64(len(mi.Labels))}},
			{Name: "label", Datatype: "BYTES", Shape: []int64{-1}},
		}
	} else {
		md.Outputs = []TensorMetadata{{Name: "embedding", Datatype: "FP32", Shape: []int64{-1, dim}}}
	}
	return md
}

// TritonConfig is a model's Triton configuration, derived from its KServe metadata so that
// the two never disagree: perf_analyzer reads shapes from the metadata and drops their first
// dimension when max_batch_size is above zero. maxInputs is the most texts one request may
// carry.
func TritonConfig(mi ModelInfo, maxInputs int) ModelConfig {
	md := KServeMetadata(mi)
	batch := max(maxInputs, 0)
	tensors := func(in []TensorMetadata) []ConfigTensor {
		out := make([]ConfigTensor, len(in))
		for i, t := range in {
			dims := t.Shape
			if batch > 0 {
				dims = dims[1:]
			}
			out[i] = ConfigTensor{Name: t.Name, DataType: "TYPE_" + tritonType(t.Datatype), Dims: slices.Clone(dims)}
		}
		return out
	}
	return ModelConfig{
		Name: mi.Name, Platform: md.Platform, Backend: "onnxruntime", MaxBatchSize: batch,
		Input: tensors(md.Inputs), Output: tensors(md.Outputs), DynamicBatching: &DynamicBatching{},
	}
}

// tritonType is the config's name for a KServe datatype: TYPE_ and the name, but for BYTES,
// which the config calls STRING.
func tritonType(datatype string) string {
	if datatype == "BYTES" {
		return "STRING"
	}
	return datatype
}

// RepositoryIndex lists every version of the models the KServe routes serve (all but
// rerank models), by name and then version, with Triton's states. readyOnly keeps the READY
// ones. A lazy version not loaded yet is READY: a request to it loads it and is answered.
func RepositoryIndex(all []ModelInfo, readyOnly bool) []IndexEntry {
	out := []IndexEntry{}
	for _, mi := range all {
		if mi.Task == string(models.TaskRerank) {
			continue
		}
		for _, v := range mi.Versions {
			e := IndexEntry{Name: mi.Name, Version: v, State: "READY"}
			if st, ok := mi.VersionStates[v]; ok {
				switch st.State {
				case models.StateUnloaded:
					e.Reason = "loads on its first request"
				case models.StateLoading:
					e.State = "LOADING"
				case models.StateFailed:
					e.State, e.Reason = "UNAVAILABLE", st.Error
				}
			}
			if !readyOnly || e.State == "READY" {
				out = append(out, e)
			}
		}
	}
	slices.SortFunc(out, func(a, b IndexEntry) int {
		return cmp.Or(strings.Compare(a.Name, b.Name), strings.Compare(a.Version, b.Version))
	})
	return out
}

// IndexRequest is the optional body of POST /v2/repository/index.
type IndexRequest struct {
	// Ready, when true, lists only the versions that are READY.
	Ready bool `json:"ready"`
}

func (s *Server) kserveConfig(w http.ResponseWriter, r *http.Request) {
	mi, _, ok := s.kserveModel(w, r)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, TritonConfig(mi, s.cfg.MaxInputs))
}

// kserveIndex answers POST /v2/repository/index. tritonclient sends it with no body and no
// Content-Type, which stands for {}. A field other than "ready" is refused rather than
// ignored: it is most likely meant for another of Triton's repository routes, which ortserve
// does not serve.
func (s *Server) kserveIndex(w http.ResponseWriter, r *http.Request) {
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	var req IndexRequest
	if len(bytes.TrimSpace(body)) > 0 {
		var fields map[string]json.RawMessage
		if err := decodeJSON(body, &fields); err != nil {
			badJSON(w, r, "bad JSON body: ", err)
			return
		}
		for name, v := range fields {
			if name != "ready" {
				writeError(w, r, http.StatusUnprocessableEntity, "Validation", fmt.Sprintf("unknown field %q: the body may set only \"ready\" (a bool)", name))
				return
			}
			if err := json.Unmarshal(v, &req.Ready); err != nil {
				writeError(w, r, http.StatusUnprocessableEntity, "Validation", "\"ready\" must be a bool")
				return
			}
		}
	}
	writeJSON(w, http.StatusOK, RepositoryIndex(s.repo.Describe(), req.Ready))
}
