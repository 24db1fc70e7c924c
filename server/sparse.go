package server

// POST /embed_sparse: TEI's sparse embeddings of a SPLADE model.
//   {inputs, truncate, truncation_direction, prompt_name, model?, version?} →
//   [[{index, value}, ...] per input]: the non-zero entries of each text's vocabulary-sized
//   vector, by ascending index.

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/ortserve/ortserve/models"
)

// EmbedSparseRequest is TEI's /embed_sparse body, plus optional model and version.
type EmbedSparseRequest struct {
	Inputs   Inputs `json:"inputs"`
	Truncate *bool  `json:"truncate"` // default: the server's auto_truncate
	// TruncationDirection and PromptName are /embed's (EmbedRequest).
	TruncationDirection string `json:"truncation_direction,omitempty"`
	PromptName          string `json:"prompt_name,omitempty"`
	Model               string `json:"model,omitempty"`
	Version             string `json:"version,omitempty"`
}

// notSparse is TEI's answer to /embed_sparse on a model without SPLADE pooling (424, as
// TEI's backend error), with what to do.
const notSparse = "Backend error: Model is not an embedding model with SPLADE pooling"

func (s *Server) embedSparse(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	var req EmbedSparseRequest
	if !s.decode(w, r, &req) {
		return
	}
	opts, ok := s.embedOptions(w, r, req.Truncate, nil, req.TruncationDirection, req.PromptName, nil)
	if !ok || !s.checkInputs(w, r, req.Inputs, opts.Truncate) {
		return
	}
	vecs, name, st, err := s.sparseOn(r.Context(), req.Model, req.Version, req.Inputs, opts)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	setTiming(w, name, st, start)
	writeEncoded(w, r, http.StatusOK, vecs, appendSparseEmbeddings)
}

// sparseOn is /embed_sparse's work: texts' sparse embeddings on the model named, or on the
// first SPLADE model, whose absence is TEI's backend error (424), as TEI answers a server
// whose one model is not a SPLADE one.
func (s *Server) sparseOn(ctx context.Context, model, version string, texts []string, o models.EmbedOptions) ([][]models.SparseValue, string, models.Stats, error) {
	vecs, name, st, err := onModel(ctx, s, model, models.TaskSparse, func(ctx context.Context, p Pipeline) ([][]models.SparseValue, models.Stats, error) {
		return p.EmbedSparse(ctx, version, texts, o)
	})
	if err != nil && model == "" && errors.Is(err, models.ErrUnknownModel) {
		err = &requestError{code: http.StatusFailedDependency, kind: "Backend", msg: notSparse + ": no model served here pools with SPLADE (a sentence-transformers SparseEncoder: *ForMaskedLM + SpladePooling); use /embed"}
	}
	return vecs, name, st, err
}

// appendSparseEmbeddings appends /embed_sparse's body: one array of {index, value} per text.
func appendSparseEmbeddings(b []byte, vecs [][]models.SparseValue) ([]byte, error) {
	return appendList(b, vecs, func(b []byte, v []models.SparseValue) ([]byte, error) {
		return appendList(b, v, appendSparseValue)
	})
}

func appendSparseValue(b []byte, v models.SparseValue) ([]byte, error) {
	b = append(b, `{"index":`...)
	b = strconv.AppendUint(b, uint64(v.Index), 10)
	b = append(b, `,"value":`...)
	b, err := appendFloat32(b, v.Value)
	return append(b, '}'), err
}
