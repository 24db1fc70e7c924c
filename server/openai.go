package server

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/ortserve/ortserve/models"
)

// OpenAIEmbeddingRequest is the body of OpenAI's POST /v1/embeddings.
type OpenAIEmbeddingRequest struct {
	// Model is "name", "name/version" or "name:version"; "" is the first embed model.
	Model string `json:"model"`
	// Input is a string or a list of strings; OpenAI's token-id forms are refused.
	Input json.RawMessage `json:"input"`
	// EncodingFormat is "float" (the default) or "base64": the vector's little-endian float32
	// bytes, base64-encoded.
	EncodingFormat string `json:"encoding_format,omitempty"`
	// Dimensions, when set, cuts each vector to its first values, normalized again (1 to
	// the model's width, or one of its model.yaml dimensions).
	Dimensions *int   `json:"dimensions,omitempty"`
	User       string `json:"user,omitempty"` // accepted and ignored
	// PromptName, not OpenAI's, is TEI's prompt_name (EmbedRequest), for clients that send
	// extra fields (the openai client's extra_body).
	PromptName string `json:"prompt_name,omitempty"`
}

// OpenAIEmbeddingResponse is the body of a /v1/embeddings answer.
type OpenAIEmbeddingResponse struct {
	Object string            `json:"object"` // "list"
	Data   []OpenAIEmbedding `json:"data"`
	Model  string            `json:"model"` // "name/version" that answered
	Usage  OpenAIUsage       `json:"usage"`
}

// OpenAIEmbedding is one input's vector.
type OpenAIEmbedding struct {
	Object    string `json:"object"` // "embedding"
	Index     int    `json:"index"`
	Embedding any    `json:"embedding"` // []float32, or base64Floats: a base64 string
}

// OpenAIUsage counts the real tokens of a request, special tokens included.
type OpenAIUsage struct {
	PromptTokens int `json:"prompt_tokens"`
	TotalTokens  int `json:"total_tokens"`
}

// OpenAIError is OpenAI's error body.
type OpenAIError struct {
	Error OpenAIErrorDetail `json:"error"`
}

// OpenAIErrorDetail says what was wrong; Param and Code are null when they do not apply.
type OpenAIErrorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func openAIError(typ, param, code, msg string) OpenAIError {
	e := OpenAIError{Error: OpenAIErrorDetail{Message: msg, Type: typ}}
	if param != "" {
		e.Error.Param = &param
	}
	if code != "" {
		e.Error.Code = &code
	}
	return e
}

// openAIErrorFor is OpenAI's error body for a status: its type and code follow the status
// as OpenAI's own API sets them.
func openAIErrorFor(code int, param, msg string) OpenAIError {
	switch {
	case code == http.StatusNotFound:
		return openAIError("invalid_request_error", cmp.Or(param, "model"), "model_not_found", msg)
	case code == http.StatusUnauthorized:
		return openAIError("invalid_request_error", "", "invalid_api_key", msg)
	case code == http.StatusTooManyRequests:
		return openAIError("rate_limit_error", "", "rate_limit_exceeded", msg)
	case code == http.StatusServiceUnavailable:
		return openAIError("server_error", "", "service_unavailable", msg)
	case code == http.StatusGatewayTimeout:
		return openAIError("server_error", "", "timeout", msg)
	case code >= 500:
		return openAIError("server_error", "", "", msg)
	}
	return openAIError("invalid_request_error", param, "", msg)
}

// badOpenAIRequest answers 400 for a field the handler itself found wrong.
func badOpenAIRequest(w http.ResponseWriter, r *http.Request, param, msg string) {
	writeParamError(w, r, http.StatusBadRequest, "Validation", param, msg)
}

// parseOpenAIInput reads OpenAI's `input`: a string or a list of strings. Token ids (a list of
// integers or of lists of integers) are refused: the server tokenizes itself.
func parseOpenAIInput(raw json.RawMessage) ([]string, error) {
	raw = bytes.Trim(raw, " \t\r\n") // JSON's whitespace, no more
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, errors.New("input is required: a string or a list of strings")
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("input: %w", err)
		}
		return []string{s}, nil
	}
	var list []json.RawMessage
	if raw[0] != '[' || json.Unmarshal(raw, &list) != nil {
		return nil, errors.New("input must be a string or a list of strings")
	}
	texts := make([]string, len(list))
	for i, item := range list {
		if err := json.Unmarshal(item, &texts[i]); err != nil || item[0] != '"' {
			if item[0] == '[' || (item[0] >= '0' && item[0] <= '9') || item[0] == '-' {
				return nil, errors.New("input as token ids is not supported: send text, a string or a list of strings")
			}
			return nil, fmt.Errorf("input[%d] must be a string", i)
		}
	}
	return texts, nil
}

// splitModelName reads OpenAI's `model`: "minilm", "minilm/int8" or "minilm:int8"; "" is the
// first embed model. A separator must have a name before it and a version after it: "minilm:"
// and ":int8" are refused, not read as the default. Model names holding ':' or '/' cannot be
// addressed this way.
func splitModelName(s string) (name, version string, err error) {
	i := strings.LastIndexAny(s, ":/")
	if i < 0 {
		return s, "", nil
	}
	name, version = s[:i], s[i+1:]
	if name == "" || version == "" {
		return "", "", fmt.Errorf("model %q: give a model name, optionally with a version, as name, name/version or name:version (see /info)", s)
	}
	return name, version, nil
}

func (s *Server) openAIEmbeddings(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	var req OpenAIEmbeddingRequest
	if !s.decode(w, r, &req) {
		return
	}
	texts, err := parseOpenAIInput(req.Input)
	if err != nil {
		badOpenAIRequest(w, r, "input", err.Error())
		return
	}
	if !s.checkInputs(w, r, texts, s.truncate(nil)) {
		return
	}
	base64Out := false
	switch req.EncodingFormat {
	case "", "float":
	case "base64":
		base64Out = true
	default:
		badOpenAIRequest(w, r, "encoding_format", fmt.Sprintf("encoding_format %q is not one of \"float\", \"base64\"", req.EncodingFormat))
		return
	}
	name, version, err := splitModelName(req.Model)
	if err != nil {
		badOpenAIRequest(w, r, "model", err.Error())
		return
	}
	opts, ok := s.embedOptions(w, r, nil, nil, "", req.PromptName, req.Dimensions)
	if !ok {
		return
	}
	p, name, release, err := s.repo.Acquire(name, models.TaskEmbed)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer release()
	vecs, st, err := p.Embed(r.Context(), version, texts, opts)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	resp := OpenAIEmbeddingResponse{
		Object: "list",
		Data:   make([]OpenAIEmbedding, len(vecs)),
		Model:  name + "/" + st.Version,
		Usage:  OpenAIUsage{PromptTokens: st.Tokens, TotalTokens: st.Tokens},
	}
	for i, v := range vecs {
		resp.Data[i] = OpenAIEmbedding{Object: "embedding", Index: i, Embedding: v}
		if base64Out {
			resp.Data[i].Embedding = base64Floats(v)
		}
	}
	note(r, name, st)
	setTiming(w, name, st, start)
	writeEncoded(w, r, http.StatusOK, &resp, appendOpenAIResponse)
}
