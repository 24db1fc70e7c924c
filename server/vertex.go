package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
)

// POST /vertex is Vertex AI's prediction route as TEI serves it: {"instances": [...]} →
// {"predictions": [...]}, each instance a TEI request body and each prediction that
// request's answer. As in TEI, an instance with "query" and "texts" is a /rerank request;
// any other is POST /'s, which does what its model's task does (tei_root.go). The instances
// run one after another, each as its own request below this route's admission, and the first
// that fails fails the whole request with its status and error, the error naming the
// instance. Like inputs, at most max_client_batch_size instances a request.

// VertexRequest is Vertex AI's prediction body.
type VertexRequest struct {
	Instances []json.RawMessage `json:"instances"`
}

func (s *Server) vertex(w http.ResponseWriter, r *http.Request) {
	var req VertexRequest
	if !s.decode(w, r, &req) {
		return
	}
	if !s.checkCount(w, r, len(req.Instances), "instances") {
		return
	}
	parent, _ := r.Context().Value(infoKey{}).(*reqInfo)
	var out bytes.Buffer
	out.WriteString(`{"predictions":[`)
	for i, inst := range req.Instances {
		var probe struct {
			Query json.RawMessage `json:"query"`
			Texts json.RawMessage `json:"texts"`
		}
		if json.Unmarshal(inst, &probe) != nil {
			writeError(w, r, http.StatusUnprocessableEntity, "Validation", fmt.Sprintf("instances[%d] is %s: send a TEI request body, an object", i, jsonKind(inst)))
			return
		}
		handler := s.root
		if probe.Query != nil && probe.Texts != nil {
			handler = s.rerank
		}
		// The instance is served as a request of its own whose body admit has read.
		ri := &reqInfo{body: inst}
		rec := &recorder{header: http.Header{}}
		handler(rec, r.WithContext(context.WithValue(r.Context(), infoKey{}, ri)))
		if parent != nil && ri.model != "" {
			parent.model, parent.version = ri.model, ri.version
			parent.stats.Tokens += ri.stats.Tokens
		}
		if rec.code != http.StatusOK {
			rec.fail(w, r, i)
			return
		}
		if i > 0 {
			out.WriteByte(',')
		}
		out.Write(bytes.TrimRight(rec.body.Bytes(), "\n"))
		if i == len(req.Instances)-1 {
			for _, h := range []string{"x-model-version", "x-compute-tokens"} {
				w.Header().Set(h, rec.header.Get(h))
			}
		}
	}
	if parent != nil {
		w.Header().Set("x-compute-tokens", strconv.Itoa(parent.stats.Tokens))
	}
	out.WriteString("]}\n")
	writeBody(w, http.StatusOK, "application/json", out.Bytes())
}

// recorder is the ResponseWriter an instance is answered into.
type recorder struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (rec *recorder) Header() http.Header { return rec.header }

func (rec *recorder) WriteHeader(code int) {
	if rec.code == 0 {
		rec.code = code
	}
}

func (rec *recorder) Write(b []byte) (int, error) {
	rec.WriteHeader(http.StatusOK)
	return rec.body.Write(b)
}

// fail answers instance i's failure: its status, its Retry-After, and its error, the message
// prefixed with the instance's place.
func (rec *recorder) fail(w http.ResponseWriter, r *http.Request, i int) {
	for _, h := range []string{"Retry-After", "Retry-After-Ms"} {
		if v := rec.header.Get(h); v != "" {
			w.Header().Set(h, v)
		}
	}
	var e ErrorResponse
	if json.Unmarshal(rec.body.Bytes(), &e) != nil || e.Error == "" {
		w.WriteHeader(rec.code) // a client gone (499) has no body
		return
	}
	writeError(w, r, rec.code, e.ErrorType, fmt.Sprintf("instances[%d]: %s", i, e.Error))
}
