package server

// The one place where errors become what a client is told: a problem (a status, a kind, a
// message, maybe a field and a retry delay), from classify; fail writes it over HTTP and
// grpcError (grpc.go) as a gRPC status.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ortserve/ortserve/models"
	"github.com/ortserve/ortserve/runtime"
	"github.com/ortserve/ortserve/tokenize"
)

// problem is an error as the client is told it: a status code (HTTP's; the gRPC face maps it
// on, grpc.go), the kind TEI's error shape carries, the request field at fault (OpenAI's
// param), a one-line message, and when to retry (0: no Retry-After).
type problem struct {
	code        int
	kind, param string
	msg         string
	retry       time.Duration
}

// requestError is a request refused before it reaches a model, its answer ready-made.
type requestError problem

func (e *requestError) Error() string { return e.msg }

// invalid is the 400 for a request that breaks the protocol's rules.
func invalid(format string, args ...any) error {
	return &requestError{code: http.StatusBadRequest, kind: "Validation", msg: fmt.Sprintf(format, args...)}
}

// fail answers an error from below with its status code and a one-line JSON error, as
// classify maps it.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	p := classify(r.Context(), optionStatus(r), err)
	switch p.code {
	case statusClientGone:
		w.WriteHeader(p.code) // nobody reads this answer
		return
	case http.StatusInternalServerError:
		s.log.ErrorContext(r.Context(), "request failed", "path", r.URL.Path, "err", err)
	}
	if p.retry > 0 {
		setRetryAfter(w, p.retry)
	}
	writeParamError(w, r, p.code, p.kind, p.param, p.msg)
}

// statusClientGone is nginx's 499: the client went away before its answer.
const statusClientGone = 499

// classify maps an error from below, or a requestError, to what the client is told. It is
// the only place that does, for HTTP (fail) and gRPC (grpcError) alike. ctx is the request's;
// optionCode is the status of a bad option (models.OptionError), which differs by API family.
func classify(ctx context.Context, optionCode int, err error) problem {
	var (
		refused   *requestError
		tooLong   *tokenize.TooLongError
		unknown   *models.UnknownError
		wrongTask *models.WrongTaskError
		overload  *runtime.OverloadError
		load      *models.LoadError
		pooled    *models.PooledOnlyError
		unknownID *tokenize.UnknownIDError
		option    *models.OptionError
	)
	bad := func(code int, msg string) problem { return problem{code: code, kind: "Validation", msg: msg} }
	switch {
	case errors.As(err, &refused):
		return problem(*refused)
	case errors.As(err, &load):
		// The next request tries the load again: unavailable for now, not broken for good.
		return problem{code: http.StatusServiceUnavailable, kind: "Unhealthy", retry: time.Second, msg: fmt.Sprintf("model %s version %s failed to load: %s; the next request tries again (see /info)", load.Model, load.Version, oneLine(redactPaths(load.Err.Error(), "")))}
	case errors.As(err, &overload):
		return problem{code: http.StatusTooManyRequests, kind: "Overloaded", retry: max(overload.RetryAfter, time.Millisecond), msg: overloadMessage(overload)}
	case errors.Is(err, runtime.ErrQueueFull):
		return problem{code: http.StatusTooManyRequests, kind: "Overloaded", retry: time.Second, msg: "the model version's queue is full: retry after a second"}
	case errors.Is(err, runtime.ErrOverloaded):
		return problem{code: http.StatusTooManyRequests, kind: "Overloaded", retry: time.Second, msg: "the model version is overloaded: retry after a second"}
	case errors.As(err, &tooLong):
		return bad(http.StatusRequestEntityTooLarge, fmt.Sprintf("input %d has %d tokens, over the model's maximum of %d: shorten it or send \"truncate\": true", tooLong.Index, tooLong.Tokens, tooLong.Max))
	case errors.As(err, &unknown):
		return problem{code: http.StatusNotFound, kind: "NotFound", msg: unknownMessage(unknown)}
	case errors.As(err, &wrongTask) && wrongTask.Asked == models.TaskSparse:
		// TEI answers a model without SPLADE pooling with a backend error, 424.
		return problem{code: http.StatusFailedDependency, kind: "Backend", msg: fmt.Sprintf("%s: model %q is a %s model; /embed_sparse needs a SPLADE model (a sentence-transformers SparseEncoder: *ForMaskedLM + SpladePooling)", notSparse, wrongTask.Model, wrongTask.Task)}
	case errors.As(err, &wrongTask):
		route := "/embed or /v1/embeddings"
		switch wrongTask.Task {
		case models.TaskClassify:
			route = "/predict"
		case models.TaskRerank:
			route = "/rerank or /v1/rerank"
		case models.TaskSparse:
			route = "/embed_sparse"
		}
		return bad(http.StatusBadRequest, fmt.Sprintf("model %q is a %s model: use %s", wrongTask.Model, wrongTask.Task, route))
	case errors.As(err, &pooled):
		return bad(http.StatusBadRequest, fmt.Sprintf("model %q gives pooled vectors only (its output %q is one vector per text), not one per token: use /embed", pooled.Model, pooled.Output))
	case errors.As(err, &unknownID):
		return bad(http.StatusUnprocessableEntity, fmt.Sprintf("token id %d is not in the model's vocabulary (ids 0 to %d): send ids from /tokenize", unknownID.ID, unknownID.Vocab-1))
	case errors.Is(err, tokenize.ErrNoLeft):
		return bad(http.StatusUnprocessableEntity, "this model's tokenizer cannot cut texts on the left (its post_processor is not one ortserve reads): send \"truncation_direction\": \"right\"")
	case errors.As(err, &option):
		return problem{code: optionCode, kind: "Validation", param: option.Field, msg: option.Msg}
	case errors.Is(err, tokenize.ErrNoPairs):
		return bad(http.StatusUnprocessableEntity, "this model's tokenizer cannot join pairs of texts (its post_processor is not one ortserve reads): send single texts")
	case errors.Is(err, context.Canceled) && ctx.Err() != nil:
		return problem{code: statusClientGone, kind: "Canceled", msg: "the client went away"}
	case errors.Is(err, context.DeadlineExceeded):
		return problem{code: http.StatusGatewayTimeout, kind: "Timeout", msg: "the request's deadline passed before it was served"}
	case errors.Is(err, runtime.ErrClosed):
		return problem{code: http.StatusServiceUnavailable, kind: "Unhealthy", msg: "the server is shutting down: retry on another replica"}
	}
	return problem{code: http.StatusInternalServerError, kind: "Backend", msg: "inference failed: " + err.Error()}
}

// oneLine joins a message's lines, as errors.Join makes them, into one.
func oneLine(msg string) string { return strings.ReplaceAll(msg, "\n", "; ") }

// setRetryAfter tells a refused client when to come back: Retry-After in whole seconds (at
// least 1, as HTTP has it) and retry-after-ms, which OpenAI's clients honour, in milliseconds.
func setRetryAfter(w http.ResponseWriter, d time.Duration) {
	d = max(d, time.Millisecond)
	w.Header().Set("Retry-After", strconv.FormatInt(max(1, int64((d+time.Second-1)/time.Second)), 10))
	w.Header().Set("Retry-After-Ms", strconv.FormatInt(int64((d+time.Millisecond-1)/time.Millisecond), 10))
}

func overloadMessage(e *runtime.OverloadError) string {
	wait := max(e.RetryAfter, time.Millisecond).Round(time.Millisecond)
	switch e.Reason {
	case "slo":
		return fmt.Sprintf("the model version is at its latency objective: this request was predicted to take %v against a budget of %v; retry in %v", e.Predicted.Round(time.Millisecond), e.Budget.Round(time.Millisecond), wait)
	case "deadline":
		return fmt.Sprintf("the request's deadline (%v) would pass in the queue (predicted %v): retry in %v or allow more time", e.Budget.Round(time.Millisecond), e.Predicted.Round(time.Millisecond), wait)
	}
	return fmt.Sprintf("the model version's queue is full: retry in %v", wait)
}

func unknownMessage(e *models.UnknownError) string {
	what := "model"
	if errors.Is(e, models.ErrUnknownVersion) {
		what = "version"
	}
	return fmt.Sprintf("unknown %s %q: known are %v (see /info)", what, e.Name, e.Known)
}
