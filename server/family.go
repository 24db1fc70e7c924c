package server

import (
	"encoding/json"
	"net/http"
	"strings"
)

// family is an API family: TEI's (and ortserve's own routes), OpenAI's or KServe v2's. Each
// has its route group (Handler: /v1 is OpenAI's, /v2 KServe's, the rest TEI's), and every
// error a route answers, from the router's 404 to a model's overload, is written once, in its
// family's shape, by writeError. The status is the caller's: fail is still the one place that
// maps errors to statuses.
type family uint8

const (
	familyTEI family = iota
	familyOpenAI
	familyKServe
)

// familyOf is r's family: that of the route group its path is under, the groups' mount
// points being the families' prefixes. Read from the path, it costs a request nothing, and
// holds for errors answered before routing (checkHost, authorize) too.
func familyOf(r *http.Request) family {
	if r == nil {
		return familyTEI
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
	writeBody(w, code, "application/json", append(data, '\n'))
}
