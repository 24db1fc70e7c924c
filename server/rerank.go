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
	"strconv"
	"time"

	"github.com/ortserve/ortserve/models"
)

// Reranking: a cross-encoder scores each (query, text) pair, read as one input through the
// tokenizer's pair template. Two shapes of the same work:
//
//   - TEI's POST /rerank: {query, texts, raw_scores, return_text, truncate,
//     truncation_direction} → [{index, text?, score}], highest score first. Scores are the
//     logit's sigmoid unless raw_scores. Plus "model" and "version", as /embed has them.
//   - Cohere's and Jina's POST /v1/rerank (vLLM and Infinity serve it too): {model, query,
//     documents, top_n, return_documents} → {model, results: [{index, relevance_score,
//     document?: {text}}], usage: {total_tokens}}, highest first, cut to top_n; documents are
//     strings or objects with a "text". Errors in OpenAI's shape, as the /v1 group answers.
//
// Ties keep the texts' order (TEI reverses an ascending sort, so its ties come last first).

// TextList is a JSON list of strings; a null element, or anything but a list, is refused
// rather than read as "" (stringList).
type TextList []string

// UnmarshalJSON accepts ["a", "b"] (and null, an absent list, which the handler refuses).
func (l *TextList) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	if bytes.Equal(data, []byte("null")) {
		*l = nil
		return nil
	}
	if len(data) == 0 || data[0] != '[' {
		return fmt.Errorf("texts is %s: send a list of strings", jsonKind(data))
	}
	list, err := stringList(data, "texts")
	if err != nil {
		return err
	}
	*l = list
	return nil
}

// RerankRequest is TEI's /rerank body, plus optional model and version.
type RerankRequest struct {
	Query *string  `json:"query"` // required
	Texts TextList `json:"texts"`
	// RawScores returns the logits rather than their sigmoid.
	RawScores bool `json:"raw_scores"`
	// ReturnText puts each text beside its score.
	ReturnText bool `json:"return_text"`
	// Truncate cuts a pair over the model's maximum length, the longer text first (HF's
	// longest_first); default: the server's auto_truncate.
	Truncate *bool `json:"truncate"`
	// TruncationDirection is as EmbedRequest's: "left" keeps the end of each text of a pair
	// that is cut (HF's longest_first, from the start).
	TruncationDirection string `json:"truncation_direction,omitempty"`
	Model               string `json:"model,omitempty"`
	Version             string `json:"version,omitempty"`
}

// Rank is one text's score, as TEI's /rerank answers it.
type Rank struct {
	Index int     `json:"index"`
	Text  *string `json:"text,omitempty"`
	Score float32 `json:"score"`
}

func (s *Server) rerank(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	var req RerankRequest
	if s.decode(w, r, &req) {
		s.answerRerank(w, r, &req, start)
	}
}

// answerRerank does /rerank's work for req (and POST /'s for a rerank model).
func (s *Server) answerRerank(w http.ResponseWriter, r *http.Request, req *RerankRequest, start time.Time) {
	if req.Query == nil {
		writeError(w, r, http.StatusUnprocessableEntity, "Validation", "query is required: the text to rank the texts against")
		return
	}
	left, ok := s.truncationLeft(w, r, req.TruncationDirection)
	if !ok {
		return
	}
	truncate := s.truncate(req.Truncate)
	query, texts, ok := s.checkRerank(w, r, *req.Query, req.Texts, "texts", truncate)
	if !ok {
		return
	}
	ranks, name, st, err := onModel(r.Context(), s, req.Model, models.TaskRerank,
		rankOn(req.Version, query, texts, req.Texts, req.ReturnText, models.RerankOptions{Truncate: truncate, Left: left, Raw: req.RawScores}))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	setTiming(w, name, st, start)
	writeJSON(w, http.StatusOK, ranks)
}

// rankOn is /rerank's work on a cross-encoder: texts (as cut to the limits) scored against
// query, highest first; with returnText, each beside its text as sent. A score that is not
// finite fails it (finiteError).
func rankOn(version, query string, texts, sent []string, returnText bool, o models.RerankOptions) func(context.Context, Pipeline) ([]Rank, models.Stats, error) {
	return func(ctx context.Context, p Pipeline) ([]Rank, models.Stats, error) {
		scores, st, err := p.Rerank(ctx, version, query, texts, o)
		if err != nil {
			return nil, st, err
		}
		if err := finiteError(scores); err != nil {
			return nil, st, err
		}
		ranks := make([]Rank, len(scores))
		for i, sc := range scores {
			ranks[i] = Rank{Index: i, Score: sc}
			if returnText {
				ranks[i].Text = &sent[i] // as sent, not as cut to max_input_chars
			}
		}
		slices.SortStableFunc(ranks, func(a, b Rank) int { return cmpDesc(a.Score, b.Score) })
		return ranks, st, nil
	}
}

// finiteScores answers 500 if a score is NaN or infinite (finiteError).
func (s *Server) finiteScores(w http.ResponseWriter, r *http.Request, scores []float32) bool {
	return s.answered(w, r, finiteError(scores))
}

// finiteError is a 500 if a score is NaN or infinite, which neither sorts nor goes into
// JSON, as a broken model version might give; TEI refuses NaN scores likewise.
func finiteError(scores []float32) error {
	for i, sc := range scores {
		if f := float64(sc); math.IsNaN(f) || math.IsInf(f, 0) {
			return &requestError{code: http.StatusInternalServerError, kind: "Backend", msg: fmt.Sprintf("inference failed: the score of text %d is %v", i, sc)}
		}
	}
	return nil
}

// checkRerank holds a rerank request to the limits (rerankInputs). On a violation it has
// answered.
func (s *Server) checkRerank(w http.ResponseWriter, r *http.Request, query string, texts []string, field string, truncate bool) (string, []string, bool) {
	q, cut, err := s.rerankInputs(query, texts, field, truncate)
	return q, cut, s.answered(w, r, err)
}

// rerankInputs holds a rerank request to the limits: the texts counted (field names them),
// the query and each text at most MaxInputChars characters, cut when truncate. It returns the
// query and texts to score, as cut; texts itself is left as sent, for return_text.
func (s *Server) rerankInputs(query string, texts []string, field string, truncate bool) (string, []string, error) {
	if err := s.countError(len(texts), field); err != nil {
		return "", nil, err
	}
	q := []string{query}
	if err := s.charsError(q, truncate, func(int) string { return "query" }); err != nil {
		return "", nil, err
	}
	cut := slices.Clone(texts)
	if err := s.charsError(cut, truncate, func(i int) string { return field + "[" + strconv.Itoa(i) + "]" }); err != nil {
		return "", nil, err
	}
	return q[0], cut, nil
}

// OpenAIRerankRequest is the body of Cohere's and Jina's POST /v1/rerank.
type OpenAIRerankRequest struct {
	// Model is "name", "name/version" or "name:version"; "" is the first rerank model.
	Model string  `json:"model"`
	Query *string `json:"query"`
	// Documents is a list of strings, or of objects with a "text" (other keys are ignored).
	Documents json.RawMessage `json:"documents"`
	// TopN, when set, keeps the n best results (at least 1).
	TopN *int `json:"top_n,omitempty"`
	// ReturnDocuments puts each document, as {"text": ...}, beside its score.
	ReturnDocuments bool `json:"return_documents,omitempty"`
}

// OpenAIRerankResponse is the body of a /v1/rerank answer.
type OpenAIRerankResponse struct {
	Model   string               `json:"model"` // "name/version" that answered
	Results []OpenAIRerankResult `json:"results"`
	Usage   OpenAIRerankUsage    `json:"usage"`
}

// OpenAIRerankResult is one document's score.
type OpenAIRerankResult struct {
	Index          int             `json:"index"`
	RelevanceScore float32         `json:"relevance_score"`
	Document       *RerankDocument `json:"document,omitempty"`
}

// RerankDocument is a document as /v1/rerank returns it.
type RerankDocument struct {
	Text string `json:"text"`
}

// OpenAIRerankUsage counts the request's real tokens, special tokens included: every
// pair's, so the query's once per document.
type OpenAIRerankUsage struct {
	TotalTokens int `json:"total_tokens"`
}

// parseDocuments reads /v1/rerank's documents: a list of strings or of {"text": "..."}.
func parseDocuments(raw json.RawMessage) ([]string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, errors.New("documents is required: a list of strings, or of objects with a \"text\"")
	}
	var items []json.RawMessage
	if raw[0] != '[' || json.Unmarshal(raw, &items) != nil {
		return nil, fmt.Errorf("documents is %s: send a list of strings, or of objects with a \"text\"", jsonKind(raw))
	}
	docs := make([]string, len(items))
	for i, item := range items {
		switch item[0] {
		case '"':
			if err := json.Unmarshal(item, &docs[i]); err != nil {
				return nil, fmt.Errorf("documents[%d]: %w", i, err)
			}
		case '{':
			var d struct {
				Text json.RawMessage `json:"text"`
			}
			if err := json.Unmarshal(item, &d); err != nil {
				return nil, fmt.Errorf("documents[%d]: %w", i, err)
			}
			if t := bytes.TrimSpace(d.Text); len(t) == 0 || t[0] != '"' || json.Unmarshal(t, &docs[i]) != nil {
				return nil, fmt.Errorf("documents[%d] has no \"text\" string: send {\"text\": \"...\"}", i)
			}
		default:
			return nil, fmt.Errorf("documents[%d] is %s: send a string or {\"text\": \"...\"}", i, jsonKind(item))
		}
	}
	return docs, nil
}

func (s *Server) openAIRerank(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	var req OpenAIRerankRequest
	if !s.decode(w, r, &req) {
		return
	}
	if req.Query == nil {
		badOpenAIRequest(w, r, "query", "query is required: the text to rank the documents against")
		return
	}
	docs, err := parseDocuments(req.Documents)
	if err != nil {
		badOpenAIRequest(w, r, "documents", err.Error())
		return
	}
	if req.TopN != nil && *req.TopN < 1 {
		badOpenAIRequest(w, r, "top_n", fmt.Sprintf("top_n %d: keep at least 1 result, or leave top_n out for all", *req.TopN))
		return
	}
	truncate := s.truncate(nil)
	query, texts, ok := s.checkRerank(w, r, *req.Query, docs, "documents", truncate)
	if !ok {
		return
	}
	name, version, err := splitModelName(req.Model)
	if err != nil {
		badOpenAIRequest(w, r, "model", err.Error())
		return
	}
	p, name, release, err := s.repo.Acquire(name, models.TaskRerank)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer release()
	scores, st, err := p.Rerank(r.Context(), version, query, texts, models.RerankOptions{Truncate: truncate})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if !s.finiteScores(w, r, scores) {
		return
	}
	resp := OpenAIRerankResponse{
		Model:   name + "/" + st.Version,
		Results: make([]OpenAIRerankResult, len(scores)),
		Usage:   OpenAIRerankUsage{TotalTokens: st.Tokens},
	}
	for i, sc := range scores {
		resp.Results[i] = OpenAIRerankResult{Index: i, RelevanceScore: sc}
		if req.ReturnDocuments {
			resp.Results[i].Document = &RerankDocument{Text: docs[i]}
		}
	}
	slices.SortStableFunc(resp.Results, func(a, b OpenAIRerankResult) int { return cmpDesc(a.RelevanceScore, b.RelevanceScore) })
	if req.TopN != nil && *req.TopN < len(resp.Results) {
		resp.Results = resp.Results[:*req.TopN]
	}
	note(r, name, st)
	setTiming(w, name, st, start)
	writeJSON(w, http.StatusOK, &resp)
}
