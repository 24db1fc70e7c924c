package server

import (
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
	p, _, release, err := s.repo.Acquire(req.Model, models.TaskEmbed)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer release()
	texts, err := p.WithPrompt(req.Inputs, models.EmbedOptions{Prompt: req.PromptName, FallbackPrompt: s.cfg.DefaultPromptName})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	toks, err := p.Tokenize(texts, req.AddSpecialTokens == nil || *req.AddSpecialTokens)
	if err != nil {
		s.fail(w, r, err)
		return
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
	writeJSON(w, http.StatusOK, out)
}
