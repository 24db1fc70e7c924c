package server

import (
	"encoding/json"
	"net/http"
)

// errorShape turns one of the server's errors (its status, as fail, decode, checkInputs or
// admit chose it, and its TEI body) into another API's error body.
type errorShape func(code int, e ErrorResponse) any

// shapeErrors lets the OpenAI and KServe routes reuse the server's one error→status mapping
// (fail) and its request checks while answering in their own error shape: an error status is
// held back until its body comes, and a TEI error body (ErrorResponse with an error_type) is
// re-encoded with shape. Anything else, success or an error already in the route's shape,
// passes through untouched.
//
// Why a writer and not a shape parameter on fail: fail and its helpers write through
// writeError, and leaving them be keeps /embed and /predict byte-for-byte as they were.
func shapeErrors(shape errorShape) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			sw := &shapedWriter{ResponseWriter: w, shape: shape}
			defer sw.finish()
			next.ServeHTTP(sw, r)
		})
	}
}

type shapedWriter struct {
	http.ResponseWriter
	shape errorShape
	code  int // an error status waiting for its body; 0 when none
}

func (w *shapedWriter) WriteHeader(code int) {
	if code < 400 {
		w.ResponseWriter.WriteHeader(code)
		return
	}
	w.code = code
}

func (w *shapedWriter) Write(b []byte) (int, error) {
	code := w.code
	if code == 0 {
		return w.ResponseWriter.Write(b)
	}
	w.code = 0
	var e ErrorResponse
	if err := json.Unmarshal(b, &e); err != nil || e.ErrorType == "" {
		w.ResponseWriter.WriteHeader(code)
		return w.ResponseWriter.Write(b)
	}
	writeShaped(w.ResponseWriter, code, w.shape(code, e))
	return len(b), nil
}

// finish sends an error status that came without a body (a client that went away).
func (w *shapedWriter) finish() {
	if w.code != 0 {
		w.ResponseWriter.WriteHeader(w.code)
		w.code = 0
	}
}

// Unwrap lets http.ResponseController reach the connection.
func (w *shapedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// writeShaped writes an error body that is already in its route's shape.
func writeShaped(w http.ResponseWriter, code int, body any) {
	data, _ := json.Marshal(body)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(append(data, '\n'))
}
