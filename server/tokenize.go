package server

import (
	"context"
	"net/http"
	"strings"

	"github.com/ortserve/ortserve/models"
)

// TokenizeRequest is TEI's /tokenize body, plus an optional model (default: the first embed
// model). Tokens are cut at the model's maximum length, as /embed cuts them. PromptName is
// /embed's: the tokens are those of the prompt and the text joined, offsets into the joined
// text, as /embed tokenizes them (the model's default prompt too, when the request names none).
type TokenizeRequest struct {
	Inputs           Inputs `json:"inputs"`
	AddSpecialTokens *bool  `json:"add_special_tokens"` // default true, as TEI
	PromptName       string `json:"prompt_name,omitempty"`
	Model            string `json:"model,omitempty"`
}

// SimpleToken is one token as TEI's /tokenize shows it. For a text's own tokens Text is the
// slice of the input it came from and Start, Stop are its byte offsets; for special tokens
// Text is the token ([CLS]) and the offsets are null.
type SimpleToken struct {
	ID      int64  `json:"id"`
	Text    string `json:"text"`
	Special bool   `json:"special"`
	Start   *int   `json:"start"`
	Stop    *int   `json:"stop"`
}

func (s *Server) tokenize(w http.ResponseWriter, r *http.Request) {
	var req TokenizeRequest
	if !s.decode(w, r, &req) {
		return
	}
	// /tokenize has no "truncate": it follows the server's auto_truncate.
	if !s.checkInputs(w, r, req.Inputs, s.cfg.AutoTruncate) {
		return
	}
	out, _, _, err := onModel(r.Context(), s, req.Model, models.TaskEmbed, s.tokensOn(req.Inputs, req.AddSpecialTokens == nil || *req.AddSpecialTokens, req.PromptName))
	if !s.answered(w, r, err) {
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// tokensOn is /tokenize's work on an embedding model: each text's tokens, the prompt named
// (or the model's default, else the server's) before it, as /embed tokenizes them. It
// computes nothing on the model: its Stats are empty.
func (s *Server) tokensOn(inputs []string, addSpecial bool, prompt string) func(context.Context, Pipeline) ([][]SimpleToken, models.Stats, error) {
	return func(_ context.Context, p Pipeline) ([][]SimpleToken, models.Stats, error) {
		texts, err := p.WithPrompt(inputs, models.EmbedOptions{Prompt: prompt, FallbackPrompt: s.cfg.DefaultPromptName})
		if err != nil {
			return nil, models.Stats{}, err
		}
		toks, err := p.Tokenize(texts, addSpecial)
		if err != nil {
			return nil, models.Stats{}, err
		}
		out := make([][]SimpleToken, len(toks))
		for i, ts := range toks {
			text := texts[i]
			out[i] = make([]SimpleToken, len(ts))
			for j, t := range ts {
				st := SimpleToken{ID: t.ID, Text: t.Text, Special: t.Special}
				if !t.Special && 0 <= t.Start && t.Start <= t.Stop && t.Stop <= len(text) {
					start, stop := t.Start, t.Stop
					st.Text = strings.ToValidUTF8(text[start:stop], "\uFFFD")
					st.Start, st.Stop = &start, &stop
				}
				out[i][j] = st
			}
		}
		return out, models.Stats{}, nil
	}
}
