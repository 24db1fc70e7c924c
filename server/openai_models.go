package server

import (
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"
)

// OpenAI's GET /v1/models and GET /v1/models/{id}: the ids a request's "model" may say.
// Every served model is listed as "name", its default version (or traffic split), and as
// "name/version" for each version, as /v1/embeddings and /v1/rerank read them.

// OpenAIModelList is the body of GET /v1/models.
type OpenAIModelList struct {
	Object string        `json:"object"` // "list"
	Data   []OpenAIModel `json:"data"`
}

// OpenAIModel is one id a request may name. Created is when the server started (Unix
// seconds): a model version has no creation date of its own.
type OpenAIModel struct {
	ID      string `json:"id"`
	Object  string `json:"object"` // "model"
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"` // "ortserve"
}

// openAIModelList lists every model, by name, then each of its versions, sorted.
func (s *Server) openAIModelList() OpenAIModelList {
	list := OpenAIModelList{Object: "list", Data: []OpenAIModel{}}
	add := func(id string) {
		list.Data = append(list.Data, OpenAIModel{ID: id, Object: "model", Created: s.started.Unix(), OwnedBy: "ortserve"})
	}
	infos := s.repo.Describe()
	slices.SortFunc(infos, func(a, b ModelInfo) int { return strings.Compare(a.Name, b.Name) })
	for _, mi := range infos {
		add(mi.Name)
		for _, v := range slices.Sorted(slices.Values(mi.Versions)) {
			add(mi.Name + "/" + v)
		}
	}
	return list
}

func (s *Server) openAIModels(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.openAIModelList())
}

func (s *Server) openAIModel(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "model")
	if v := chi.URLParam(r, "version"); v != "" {
		id += "/" + v
	}
	for _, m := range s.openAIModelList().Data {
		if m.ID == id {
			writeJSON(w, http.StatusOK, m)
			return
		}
	}
	writeParamError(w, r, http.StatusNotFound, "NotFound", "model", "unknown model "+strconv.Quote(id)+": GET /v1/models lists the ids, name or name/version")
}
