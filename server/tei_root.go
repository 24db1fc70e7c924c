package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/ortserve/ortserve/models"
)

// POST / is TEI's route for the one model it serves: it does what the model's task does,
// /embed's work for an embed model, /predict's for a classifier and /rerank's for a reranker
// (with /rerank's body). ortserve serves many:
// POST / serves the one the body names with "model" (and "version"), as /embed does; else
// the first model (by name) of the task the body asks for (rootModel); else the first.
//
// It is also where huggingface_hub's InferenceClient(model="http://host:port") sends its
// tasks, in the Hugging Face Inference API's shapes:
//
//   - feature_extraction: {"inputs": ..., "normalize", "truncate", "truncation_direction",
//     "prompt_name", "dimensions", "encoding_format"}, the fields at the top level, as TEI's.
//     Its answer is /embed's.
//   - text_classification: {"inputs": "text", "parameters": {"top_k", "function_to_apply"}};
//     the client sends "parameters" always, if only {}. The client reads one list of
//     predictions per input, [[...]], and takes the first: so a request with "parameters" is
//     answered in that shape, the list cut to top_k, where TEI's /predict answers a single
//     text with one flat list (from which the client would keep the first prediction alone).
//   - sentence_similarity: {"inputs": {"source_sentence", "sentences"}, "parameters": {}}:
//     /similarity's body and answer, on an embed model.

// RootRequest is the body of POST /: TEI's /embed or /predict body, by the model's task, with
// the Inference API's fields huggingface_hub sends. Fields for the other task are ignored.
type RootRequest struct {
	// Inputs is /embed's (a string or a list of strings) or /predict's (a string, a pair, or
	// a batch of lists).
	Inputs  json.RawMessage `json:"inputs"`
	Model   string          `json:"model,omitempty"`
	Version string          `json:"version,omitempty"`
	// Truncate defaults to the server's auto_truncate.
	Truncate *bool `json:"truncate,omitempty"`

	// For embed models, as /embed's (EmbedRequest); EncodingFormat may be "float" (the
	// route answers floats only).
	Normalize           *bool  `json:"normalize,omitempty"`
	TruncationDirection string `json:"truncation_direction,omitempty"`
	PromptName          string `json:"prompt_name,omitempty"`
	Dimensions          *int   `json:"dimensions,omitempty"`
	EncodingFormat      string `json:"encoding_format,omitempty"`

	// For classify models: RawScores as /predict's. Parameters, when present (even empty),
	// asks for the Inference API's text-classification answer: a list of predictions per
	// input.
	RawScores  bool                      `json:"raw_scores,omitempty"`
	Parameters *TextClassificationParams `json:"parameters,omitempty"`
}

// TextClassificationParams are the Inference API's text-classification parameters.
type TextClassificationParams struct {
	// TopK, when set, keeps the k best predictions of each input (at least 1).
	TopK *int `json:"top_k,omitempty"`
	// FunctionToApply is "softmax" (the default: probabilities), "sigmoid" (each logit on
	// its own) or "none" (the logits).
	FunctionToApply string `json:"function_to_apply,omitempty"`
}

func (s *Server) root(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	var req RootRequest
	if !s.decode(w, r, &req) {
		return
	}
	if len(req.Inputs) == 0 {
		req.Inputs = json.RawMessage("null")
	}
	if bytes.HasPrefix(bytes.TrimSpace(req.Inputs), []byte("{")) {
		// {"source_sentence", "sentences"}: sentence similarity, on an embed model, as TEI's
		// POST / answers it (huggingface_hub's sentence_similarity sends it here).
		var sr SimilarityRequest
		if s.decode(w, r, &sr) {
			s.answerSimilarity(w, r, &sr, start)
		}
		return
	}
	task := models.TaskEmbed
	if req.Parameters != nil {
		task = models.TaskClassify
	}
	mi, err := s.rootModel(req.Model, task)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	switch models.Task(mi.Task) {
	case models.TaskClassify:
		s.rootClassify(w, r, &req, mi.Name, start)
	case models.TaskRerank: // TEI's POST / for a reranker is /rerank
		var rr RerankRequest
		if s.decode(w, r, &rr) {
			rr.Model = mi.Name
			s.answerRerank(w, r, &rr, start)
		}
	default:
		s.rootEmbed(w, r, &req, mi.Name, start)
	}
}

// rootModel is the model POST / serves: the one named; else the first (by name) that does
// task, the task the body's shape asks for (text classification's "parameters", which
// huggingface_hub always sends, or else embedding), so that InferenceClient(model=URL) finds
// the classifier and the embedder of one server; else the first model. It asks the
// repository by task (Acquire), as /embed does, not for every model's description: that
// carries each version's learned cost curve, which a request has no use for.
func (s *Server) rootModel(name string, task models.Task) (ModelInfo, error) {
	if name == "" {
		name = s.firstModel(task)
	}
	if name == "" {
		return ModelInfo{}, &models.UnknownError{Kind: models.ErrUnknownModel, Name: "(the first model)"}
	}
	return s.repo.Model(name)
}

// firstModel names the first model, by name, that does task; else the first of any task (the
// least of each task's first); "" when there is none.
func (s *Server) firstModel(task models.Task) string {
	if name := s.firstOf(task); name != "" {
		return name
	}
	first := ""
	for _, t := range []models.Task{models.TaskEmbed, models.TaskClassify, models.TaskRerank} {
		if name := s.firstOf(t); name != "" && (first == "" || name < first) {
			first = name
		}
	}
	return first
}

// firstOf names the first model, by name, that does task; "" when there is none. It holds
// the model only to learn its name: the request acquires it again, by that name.
func (s *Server) firstOf(task models.Task) string {
	_, name, release, err := s.repo.Acquire("", task)
	if err != nil {
		return ""
	}
	release()
	return name
}

func (s *Server) rootEmbed(w http.ResponseWriter, r *http.Request, req *RootRequest, model string, start time.Time) {
	var inputs Inputs
	if err := json.Unmarshal(req.Inputs, &inputs); err != nil {
		writeError(w, r, http.StatusUnprocessableEntity, "Validation", "bad JSON body: "+err.Error())
		return
	}
	if p := req.Parameters; p != nil && (p.TopK != nil || p.FunctionToApply != "") {
		writeError(w, r, http.StatusBadRequest, "Validation", fmt.Sprintf("model %q is an embed model, and top_k and function_to_apply are text classification's: name a classify model in \"model\", or leave them out", model))
		return
	}
	if f := req.EncodingFormat; f != "" && f != "float" {
		writeError(w, r, http.StatusUnprocessableEntity, "Validation", fmt.Sprintf("encoding_format %q is not served here: POST / answers floats (send \"float\" or leave it out; /v1/embeddings serves \"base64\")", f))
		return
	}
	er := EmbedRequest{
		Inputs: inputs, Normalize: req.Normalize, Truncate: req.Truncate, Model: model, Version: req.Version,
		TruncationDirection: req.TruncationDirection, PromptName: req.PromptName, Dimensions: req.Dimensions,
	}
	s.answerEmbed(w, r, &er, start)
}

func (s *Server) rootClassify(w http.ResponseWriter, r *http.Request, req *RootRequest, model string, start time.Time) {
	var inputs PredictInputs
	if err := json.Unmarshal(req.Inputs, &inputs); err != nil {
		writeError(w, r, http.StatusUnprocessableEntity, "Validation", "bad JSON body: "+err.Error())
		return
	}
	raw, sigmoid := req.RawScores, false
	topK := 0 // all
	if p := req.Parameters; p != nil {
		switch p.FunctionToApply {
		case "":
		case "softmax":
			raw = false
		case "sigmoid":
			raw, sigmoid = true, true
		case "none":
			raw = true
		default:
			writeError(w, r, http.StatusUnprocessableEntity, "Validation", fmt.Sprintf("parameters.function_to_apply %q is not one of \"softmax\", \"sigmoid\", \"none\"", p.FunctionToApply))
			return
		}
		if p.TopK != nil {
			if *p.TopK < 1 {
				writeError(w, r, http.StatusUnprocessableEntity, "Validation", fmt.Sprintf("parameters.top_k %d: keep at least 1 prediction, or leave top_k out for all", *p.TopK))
				return
			}
			topK = *p.TopK
		}
	}
	truncate := s.truncate(req.Truncate)
	left, ok := s.truncationLeft(w, r, req.TruncationDirection)
	if !ok {
		return
	}
	texts, ok := s.predictInputs(w, r, inputs, truncate)
	if !ok {
		return
	}
	p, name, release, err := s.repo.Acquire(model, models.TaskClassify)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer release()
	scores, st, err := p.ClassifyPairs(r.Context(), req.Version, texts, models.ClassifyOptions{Truncate: truncate, Left: left, Raw: raw})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if sigmoid {
		for _, row := range scores {
			for j, x := range row {
				row[j] = models.Sigmoid(x)
			}
		}
	}
	out := rankPredictions(scores, st.Labels)
	note(r, name, st)
	setTiming(w, name, st, start)
	switch {
	case req.Parameters != nil: // the Inference API's answer: a list per input
		for i := range out {
			if topK > 0 && topK < len(out[i]) {
				out[i] = out[i][:topK]
			}
		}
		writeEncoded(w, r, http.StatusOK, out, appendPredictionRows)
	case inputs.Single:
		writeEncoded(w, r, http.StatusOK, out[0], appendPredictions)
	default:
		writeEncoded(w, r, http.StatusOK, out, appendPredictionRows)
	}
}
