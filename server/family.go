package server

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
)

// family is an API family: TEI's (and ortserve's own routes), OpenAI's or KServe v2's. Each
// route group says which one it is (Handler), and every error a route answers, from the
// router's 404 to a model's overload, is written once, in its family's shape, by writeError.
// The status is the caller's: fail is still the one place that maps errors to statuses.
type family uint8

const (
	familyTEI family = iota
	familyOpenAI
	familyKServe
)

type familyKey struct{}

// inFamily marks a route group's requests as being of family f.
func inFamily(f family) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), familyKey{}, f)))
		})
	}
}

// familyOf is r's family, as its route group said; for an error answered before routing
// (checkHost), the family whose prefix the path has.
func familyOf(r *http.Request) family {
	if r == nil {
		return familyTEI
	}
	if f, ok := r.Context().Value(familyKey{}).(family); ok {
		return f
	}
	switch p := r.URL.Path; {
	case p == "/v1" || strings.HasPrefix(p, "/v1/"):
		return familyOpenAI
	case p == "/v2" || strings.HasPrefix(p, "/v2/"):
		return familyKServe
	}
	return familyTEI
}

// writeError answers an error in the shape of r's API family: TEI's {error, error_type},
// OpenAI's {error: {message, type, param, code}} or KServe's {error}. kind is TEI's
// error_type (Validation, Overloaded, NotFound...); param, for OpenAI, the request field at
// fault ("" when none).
func writeError(w http.ResponseWriter, r *http.Request, code int, kind, msg string) {
	writeParamError(w, r, code, kind, "", msg)
}

// writeParamError is writeError naming the request field at fault, which OpenAI's shape
// carries as param.
func writeParamError(w http.ResponseWriter, r *http.Request, code int, kind, param, msg string) {
	var body any
	switch familyOf(r) {
	case familyOpenAI:
		body = openAIErrorFor(code, param, msg)
	case familyKServe:
		body = KServeError{Error: msg}
	default:
		body = ErrorResponse{Error: msg, ErrorType: kind}
	}
	data, _ := json.Marshal(body)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(append(data, '\n'))
}
