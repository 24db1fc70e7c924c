package server

import (
	"context"
	"fmt"
	"net/http"
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
	opts, ok := s.embedOptions(w, r, req.Truncate, req.Normalize, req.TruncationDirection, req.PromptName, req.Dimensions)
	if !ok || !s.checkInputs(w, r, req.Inputs, opts.Truncate) {
		return
	}
	runModel(s, w, r, req.Model, models.TaskEmbed, start, func(ctx context.Context, p Pipeline) ([][]float32, models.Stats, error) {
		return p.Embed(ctx, req.Version, req.Inputs, opts)
	}, appendEmbeddings)
}

// runModel acquires the model named (or the first that does task), runs call on it and
// answers 200 with what it returns, encoded by enc, and the timing headers; or answers the
// error (fail). It is what every inference route does once it has checked its request.
func runModel[T any](s *Server, w http.ResponseWriter, r *http.Request, model string, task models.Task, start time.Time,
	call func(context.Context, Pipeline) (T, models.Stats, error), enc func([]byte, T) ([]byte, error)) {
	out, name, st, err := onModel(r.Context(), s, model, task, call)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	setTiming(w, name, st, start)
	writeEncoded(w, r, http.StatusOK, out, enc)
}

// onModel is runModel's work, for HTTP and gRPC alike: it acquires the model named (or the
// first that does task), runs call on it, and notes for the request's metrics what served
// it. It returns call's answer and the name of the model that gave it.
func onModel[T any](ctx context.Context, s *Server, model string, task models.Task,
	call func(context.Context, Pipeline) (T, models.Stats, error)) (out T, name string, st models.Stats, err error) {
	p, name, release, err := s.repo.Acquire(model, task)
	if err != nil {
		return out, "", st, err
	}
	defer release()
	if out, st, err = call(ctx, p); err != nil {
		return out, "", st, err
	}
	noteIn(ctx, name, st)
	return out, name, st, nil
}

// embedOptions are the models.EmbedOptions of an embedding request's fields (embedOptionsOf),
// truncation_direction read by truncationLeft. On a refusal it has answered, and ok is false.
func (s *Server) embedOptions(w http.ResponseWriter, r *http.Request, truncate, normalize *bool, direction, prompt string, dimensions *int) (o models.EmbedOptions, ok bool) {
	left, ok := s.truncationLeft(w, r, direction)
	if !ok {
		return o, false
	}
	o, err := s.embedOptionsOf(truncate, normalize, left, prompt, dimensions)
	return o, s.answered(w, r, err)
}

// embedOptionsOf are the models.EmbedOptions of an embedding request's fields: truncate as it
// says (or the server's auto_truncate), on the left when left, normalize unless it says
// false, its prompt_name (the server's --default-prompt-name the fallback) and dimensions.
// The model checks the prompt and the dimensions against its own; a dimensions under 1 is
// refused here, with a *models.OptionError.
func (s *Server) embedOptionsOf(truncate, normalize *bool, left bool, prompt string, dimensions *int) (models.EmbedOptions, error) {
	o := models.EmbedOptions{
		Truncate:       s.truncate(truncate),
		Left:           left,
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

// optionStatus is the status of a refused embedding field: TEI's 422 (Validation), or on
// OpenAI's route 400, as OpenAI answers a bad field and as the route answers its others.
func optionStatus(r *http.Request) int {
	if familyOf(r) == familyOpenAI {
		return http.StatusBadRequest
	}
	return http.StatusUnprocessableEntity
}
