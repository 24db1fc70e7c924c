package server

import (
	_ "embed"
	"net/http"
)

// openAPIDoc is the hand-written OpenAPI 3.1 description of every route. A test walks the
// router to keep the two in step.
//
//go:embed openapi.json
var openAPIDoc []byte

func (s *Server) openAPI(w http.ResponseWriter, _ *http.Request) {
	writeBody(w, http.StatusOK, "application/json", openAPIDoc)
}
