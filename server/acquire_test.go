package server

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ortserve/ortserve/models"
)

// countingRepo is a fakeRepo that counts acquires and the holds not yet released (a
// release called twice counts twice, so that held shows it). Pipelines in wrap replace the
// fake model of their name.
type countingRepo struct {
	fakeRepo
	wrap           map[string]Pipeline
	acquires, held atomic.Int64
}

func (r *countingRepo) Acquire(name string, task models.Task) (Pipeline, string, func(), error) {
	p, n, _, err := r.fakeRepo.Acquire(name, task)
	if err != nil {
		return nil, "", nil, err
	}
	if w, ok := r.wrap[n]; ok {
		p = w
	}
	r.acquires.Add(1)
	r.held.Add(1)
	return p, n, func() { r.held.Add(-1) }, nil
}

// Model describes each of fakeRepo's models, so that the routes that ask for a model's
// description first (KServe's, POST / naming a model) reach every one.
func (r *countingRepo) Model(name string) (ModelInfo, error) {
	m, ok := r.fakeRepo[name]
	if !ok {
		return modelIn(nil, name)
	}
	return ModelInfo{Name: name, Task: string(m.task), Versions: []string{"v1"}, DefaultVersion: "v1", Dimension: 3}, nil
}

// panicModel panics in Embed, as a pipeline with a bug would.
type panicModel struct{ *fakeModel }

func (panicModel) Embed(context.Context, string, []string, models.EmbedOptions) ([][]float32, models.Stats, error) {
	panic("a pipeline bug")
}

// Every handler that acquires a model releases it exactly once, whichever way it ends:
// an answer, a model's error, a check on the acquired model that fails (dimensions, a
// score that is not finite), a panic.
func TestEveryAcquireIsReleased(t *testing.T) {
	repo := &countingRepo{
		fakeRepo: fakeRepo{
			"emb":      {task: models.TaskEmbed},
			"cls":      {task: models.TaskClassify},
			"rr":       {task: models.TaskRerank},
			"x-broken": {task: models.TaskEmbed, err: errors.New("backend broke")},
			"nan":      {task: models.TaskRerank},
			"x-panics": {task: models.TaskEmbed},
		},
	}
	repo.wrap = map[string]Pipeline{"nan": nanModel{repo.fakeRepo["nan"]}, "x-panics": panicModel{repo.fakeRepo["x-panics"]}}
	s := New(DefaultConfig(), repo, slog.New(slog.DiscardHandler), nil)
	s.SetReady(true)
	h := s.Handler()
	const kserve = `{"inputs":[{"name":"text","shape":[1],"datatype":"BYTES","data":["a"]}]}`
	for _, tt := range []struct {
		name, path, body string
		code             int // 0: the handler panics
		acquires         int64
	}{
		{"embed", "/embed", `{"inputs":"a"}`, 200, 1},
		{"embed, unknown model", "/embed", `{"inputs":"a","model":"nope"}`, 404, 0},
		{"embed, model error", "/embed", `{"inputs":"a","model":"x-broken"}`, 500, 1},
		{"embed, wrong task", "/embed", `{"inputs":"a","model":"cls"}`, 400, 1},
		{"embed, pipeline panics", "/embed", `{"inputs":"a","model":"x-panics"}`, 0, 1},
		{"root, dimensions not the model's", "/", `{"inputs":"a","dimensions":7}`, 422, 2}, // the first embed model's name, then the request
		{"root, dimensions 0", "/", `{"inputs":"a","dimensions":0}`, 422, 1},               // refused before the request acquires
		{"root, classify", "/", `{"inputs":"a","model":"cls"}`, 200, 1},
		{"predict", "/predict", `{"inputs":"a","model":"cls"}`, 200, 1},
		{"predict, wrong task", "/predict", `{"inputs":"a","model":"emb"}`, 400, 1},
		{"rerank", "/rerank", `{"query":"q","texts":["a","b"],"model":"rr"}`, 200, 1},
		{"rerank, a score not finite", "/rerank", `{"query":"q","texts":["a","b"],"model":"nan"}`, 500, 1},
		{"tokenize", "/tokenize", `{"inputs":"a"}`, 200, 1},
		{"tokenize, model error", "/tokenize", `{"inputs":"a","model":"x-broken"}`, 500, 1},
		{"openai embeddings", "/v1/embeddings", `{"input":"a","model":"emb"}`, 200, 1},
		{"openai embeddings, dimensions not the model's", "/v1/embeddings", `{"input":"a","model":"emb","dimensions":7}`, 400, 1},
		{"openai embeddings, model error", "/v1/embeddings", `{"input":"a","model":"x-broken"}`, 500, 1},
		{"openai rerank", "/v1/rerank", `{"query":"q","documents":["a","b"],"model":"rr"}`, 200, 1},
		{"openai rerank, a score not finite", "/v1/rerank", `{"query":"q","documents":["a","b"],"model":"nan"}`, 500, 1},
		{"kserve infer", "/v2/models/emb/infer", kserve, 200, 1},
		{"kserve infer, a version", "/v2/models/emb/versions/v1/infer", kserve, 200, 1},
		{"kserve infer, classify", "/v2/models/cls/infer", kserve, 200, 1},
		{"kserve infer, model error", "/v2/models/x-broken/infer", kserve, 500, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := repo.acquires.Load()
			w := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodPost, tt.path, strings.NewReader(tt.body))
			req.Header.Set("Content-Type", "application/json")
			panicked := func() (panicked bool) {
				defer func() { panicked = recover() != nil }()
				h.ServeHTTP(w, req)
				return false
			}()
			if tt.code == 0 && !panicked {
				t.Errorf("answered %d %s, want a panic", w.Code, w.Body)
			}
			if tt.code != 0 && (panicked || w.Code != tt.code) {
				t.Errorf("answered %d %s (panicked: %v), want %d", w.Code, w.Body, panicked, tt.code)
			}
			if n := repo.acquires.Load() - before; n != tt.acquires {
				t.Errorf("%d acquires, want %d", n, tt.acquires)
			}
			if n := repo.held.Swap(0); n != 0 {
				t.Errorf("%d holds left after the handler returned, want 0", n)
			}
		})
	}
}
