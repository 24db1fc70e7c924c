package server

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/ortserve/ortserve/models"
)

// TEI's routes past /embed, /predict and /rerank, in TEI's shapes:
//
//   - POST /embed_all: /embed's body without normalize → per text, the model's last hidden
//     state, one vector per token, special tokens included ([[[f32]]]).
//   - POST /similarity: {"inputs": {"source_sentence", "sentences"}, "parameters":
//     {"truncate", "truncation_direction", "prompt_name"}} → the cosine similarity of each
//     sentence's embedding to the source sentence's ([f32]).
//   - POST /decode: {"ids": [u32] or [[u32]], "skip_special_tokens" (default true)} → the
//     texts (["text"]).
//   - POST /vertex (vertex.go) and SageMaker's POST /invocations and GET /ping.
//
// Each also takes "model" (and, but for /decode, "version") to pick one of many models.

// EmbedAllRequest is TEI's /embed_all body, plus optional model and version.
type EmbedAllRequest struct {
	Inputs              Inputs `json:"inputs"`
	Truncate            *bool  `json:"truncate"`
	TruncationDirection string `json:"truncation_direction,omitempty"`
	PromptName          string `json:"prompt_name,omitempty"`
	Model               string `json:"model,omitempty"`
	Version             string `json:"version,omitempty"`
}

func (s *Server) embedAll(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	var req EmbedAllRequest
	if !s.decode(w, r, &req) {
		return
	}
	opts, ok := s.embedOptions(w, r, req.Truncate, nil, req.TruncationDirection, req.PromptName, nil)
	if !ok || !s.checkInputs(w, r, req.Inputs, opts.Truncate) {
		return
	}
	runModel(s, w, r, req.Model, models.TaskEmbed, start, func(ctx context.Context, p Pipeline) ([][][]float32, models.Stats, error) {
		return p.EmbedAll(ctx, req.Version, req.Inputs, opts)
	}, func(b []byte, v [][][]float32) ([]byte, error) {
		return appendList(b, v, appendEmbeddings)
	})
}

// SimilarityRequest is TEI's /similarity body (the Inference API's sentence-similarity
// task), plus optional model and version.
type SimilarityRequest struct {
	Inputs     *SimilarityInput      `json:"inputs"`
	Parameters *SimilarityParameters `json:"parameters,omitempty"`
	Model      string                `json:"model,omitempty"`
	Version    string                `json:"version,omitempty"`
}

// SimilarityInput is the text to compare with and the texts compared.
type SimilarityInput struct {
	SourceSentence *string  `json:"source_sentence"`
	Sentences      TextList `json:"sentences"`
}

// SimilarityParameters are /similarity's options, /embed's for the texts' embeddings.
type SimilarityParameters struct {
	Truncate            *bool  `json:"truncate"`
	TruncationDirection string `json:"truncation_direction,omitempty"`
	PromptName          string `json:"prompt_name,omitempty"`
}

func (s *Server) similarity(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	var req SimilarityRequest
	if s.decode(w, r, &req) {
		s.answerSimilarity(w, r, &req, start)
	}
}

// answerSimilarity does /similarity's work for req (and POST /'s for a body whose inputs are
// an object, the Inference API's sentence-similarity).
func (s *Server) answerSimilarity(w http.ResponseWriter, r *http.Request, req *SimilarityRequest, start time.Time) {
	if req.Inputs == nil || req.Inputs.SourceSentence == nil {
		writeError(w, r, http.StatusUnprocessableEntity, "Validation", `inputs.source_sentence is required: send {"inputs": {"source_sentence": "...", "sentences": ["..."]}}`)
		return
	}
	if len(req.Inputs.Sentences) == 0 {
		writeError(w, r, http.StatusUnprocessableEntity, "Empty", "inputs.sentences is empty: send at least one text to compare with source_sentence")
		return
	}
	params := cmp.Or(req.Parameters, &SimilarityParameters{})
	opts, ok := s.embedOptions(w, r, params.Truncate, nil, params.TruncationDirection, params.PromptName, nil)
	// The source sentence counts against max_client_batch_size, as in TEI.
	texts := append([]string{*req.Inputs.SourceSentence}, req.Inputs.Sentences...)
	if !ok || !s.checkInputs(w, r, texts, opts.Truncate) {
		return
	}
	runModel(s, w, r, req.Model, models.TaskEmbed, start, func(ctx context.Context, p Pipeline) ([]float32, models.Stats, error) {
		vecs, st, err := p.Embed(ctx, req.Version, texts, opts)
		if err != nil {
			return nil, st, err
		}
		sims := make([]float32, len(vecs)-1)
		for i, v := range vecs[1:] {
			sims[i] = cosine(vecs[0], v)
		}
		return sims, st, nil
	}, appendFloat32s)
}

// cosine is the cosine similarity of a and b, computed in float64; 0 when either is zero.
func cosine(a, b []float32) float32 {
	var ab, aa, bb float64
	for i := range min(len(a), len(b)) {
		x, y := float64(a[i]), float64(b[i])
		ab, aa, bb = ab+x*y, aa+x*x, bb+y*y
	}
	if aa == 0 || bb == 0 {
		return 0
	}
	return float32(ab / math.Sqrt(aa*bb))
}

// TokenIDs is TEI's `ids` for /decode: one list of token ids or a list of them. Single is
// true for the first form; the answer is a list of texts either way.
type TokenIDs struct {
	Seqs [][]int64
}

// UnmarshalJSON accepts [1, 2] or [[1, 2], [3]], each id a uint32, as TEI.
func (ids *TokenIDs) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	const want = "ids must be a list of token ids [101, 7592, 102] or a list of such lists"
	if len(data) == 0 || data[0] != '[' {
		return fmt.Errorf("%s, not %s", want, jsonKind(data))
	}
	var one []uint32
	if err := json.Unmarshal(data, &one); err == nil {
		ids.Seqs = [][]int64{widen(one)}
		return nil
	}
	var many [][]uint32
	if err := json.Unmarshal(data, &many); err != nil {
		return fmt.Errorf("%s (ids run from 0 to 4294967295): %w", want, err)
	}
	ids.Seqs = make([][]int64, len(many))
	for i, seq := range many {
		if seq == nil {
			return fmt.Errorf("ids[%d] is null: %s", i, want)
		}
		ids.Seqs[i] = widen(seq)
	}
	return nil
}

func widen(ids []uint32) []int64 {
	out := make([]int64, len(ids))
	for i, id := range ids {
		out[i] = int64(id)
	}
	return out
}

// DecodeRequest is TEI's /decode body, plus an optional model (default: the first embed
// model, else the first model).
type DecodeRequest struct {
	IDs               *TokenIDs `json:"ids"`
	SkipSpecialTokens *bool     `json:"skip_special_tokens"` // default true, as TEI
	Model             string    `json:"model,omitempty"`
}

func (s *Server) decodeIDs(w http.ResponseWriter, r *http.Request) {
	var req DecodeRequest
	if !s.decode(w, r, &req) {
		return
	}
	if req.IDs == nil {
		writeError(w, r, http.StatusUnprocessableEntity, "Validation", "ids is required: a list of token ids, or a list of such lists")
		return
	}
	if !s.checkCount(w, r, len(req.IDs.Seqs), "ids") {
		return
	}
	texts, _, _, err := onModel(r.Context(), s, cmp.Or(req.Model, s.firstModel(models.TaskEmbed)), models.TaskEmbed, decodeOn(req.IDs.Seqs, req.SkipSpecialTokens == nil || *req.SkipSpecialTokens))
	if !s.answered(w, r, err) {
		return
	}
	writeJSON(w, http.StatusOK, texts)
}

// decodeOn is /decode's work on a model: its tokenizer's texts of ids. It computes nothing
// on the model: its Stats are empty.
func decodeOn(ids [][]int64, skipSpecial bool) func(context.Context, Pipeline) ([]string, models.Stats, error) {
	return func(_ context.Context, p Pipeline) ([]string, models.Stats, error) {
		texts, err := p.Decode(ids, skipSpecial)
		return texts, models.Stats{}, err
	}
}

// ping is SageMaker's health check: /health's answer.
func (s *Server) ping(w http.ResponseWriter, r *http.Request) { s.health(w, r) }
