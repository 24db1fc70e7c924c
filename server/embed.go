package server

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/ortserve/ortserve/models"
)

// /embed, and the embedding fields TEI's /embed, POST / and OpenAI's /v1/embeddings share:
// prompt_name, dimensions and truncation_direction. The model checks the prompt and the
// dimensions against its own (models.OptionError); fail answers a refusal in the route's
// shape.

func (s *Server) embed(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	var req EmbedRequest
	if s.decode(w, r, &req) {
		s.answerEmbed(w, r, &req, start)
	}
}

// answerEmbed does /embed's work for req (and POST /'s): checks, lookup, inference, answer.
func (s *Server) answerEmbed(w http.ResponseWriter, r *http.Request, req *EmbedRequest, start time.Time) {
	truncate := s.truncate(req.Truncate)
	if !s.checkInputs(w, r, req.Inputs, truncate) {
		return
	}
	opts, err := s.embedOptions(truncate, req.Normalize, req.PromptName, req.Dimensions)
	if err == nil {
		err = checkTruncationDirection(req.TruncationDirection)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	p, name, release, err := s.repo.Acquire(req.Model, models.TaskEmbed)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer release()
	vecs, st, err := p.Embed(r.Context(), req.Version, req.Inputs, opts)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	note(r, name, st)
	setTiming(w, name, st, start)
	writeEncoded(w, r, http.StatusOK, vecs, appendEmbeddings)
}

// embedOptions are the models.EmbedOptions of a request: truncate as the request says (or
// the server's auto_truncate), normalize unless it says false, its prompt_name (the
// server's --default-prompt-name the fallback) and dimensions. A dimensions under 1 is a
// *models.OptionError, as one over the model's width is.
func (s *Server) embedOptions(truncate bool, normalize *bool, prompt string, dimensions *int) (models.EmbedOptions, error) {
	o := models.EmbedOptions{
		Truncate:       truncate,
		Normalize:      normalize == nil || *normalize,
		Prompt:         prompt,
		FallbackPrompt: s.cfg.DefaultPromptName,
	}
	if d := dimensions; d != nil {
		if *d < 1 {
			return o, &models.OptionError{Field: "dimensions", Msg: fmt.Sprintf("dimensions %d: give at least 1, or leave dimensions out for the whole vector", *d)}
		}
		o.Dimensions = *d
	}
	return o, nil
}

// checkTruncationDirection checks a request's truncation_direction, TEI's "right" or
// "left" in any case; "" is right. The served models cut inputs on the right only, so
// "left" is refused rather than ignored.
func checkTruncationDirection(dir string) error {
	switch strings.ToLower(dir) {
	case "", "right":
		return nil
	case "left":
		return &models.OptionError{Field: "truncation_direction", Msg: fmt.Sprintf("truncation_direction %q is not served: inputs are cut on the right; send \"right\" or leave it out", dir)}
	}
	return &models.OptionError{Field: "truncation_direction", Msg: fmt.Sprintf("truncation_direction %q is not one of \"left\", \"right\"", dir)}
}

// optionStatus is the status of a refused embedding field: TEI's 422 (Validation), or on
// OpenAI's route 400, as OpenAI answers a bad field and as the route answers its others.
func optionStatus(r *http.Request) int {
	if familyOf(r) == familyOpenAI {
		return http.StatusBadRequest
	}
	return http.StatusUnprocessableEntity
}
