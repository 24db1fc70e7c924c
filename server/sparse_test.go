package server

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/ortserve/ortserve/models"
)

func TestEmbedSparse(t *testing.T) {
	both := newTestServer(t, fakeRepo{"emb": {task: models.TaskEmbed}, "splade": {task: models.TaskSparse}})
	dense := newTestServer(t, fakeRepo{"emb": {task: models.TaskEmbed}})
	tests := []struct {
		name   string
		dense  bool // to the server without a sparse model
		body   string
		code   int
		want   string // the body, or a substring of an error's
		errTyp string
	}{
		{"single string", false, `{"inputs":"abc"}`, 200, `[[{"index":2,"value":0.25},{"index":3,"value":1.5}]]`, ""},
		{"list", false, `{"inputs":["a","",""]}`, 200, `[[{"index":1,"value":1.5}],[],[]]`, ""},
		{"named model", false, `{"inputs":"ab","model":"splade","truncate":true}`, 200, `[[{"index":2,"value":1.5}]]`, ""},
		{"truncation_direction right", false, `{"inputs":"a","truncation_direction":"Right"}`, 200, `[[{"index":1,"value":1.5}]]`, ""},
		{"prompt_name null", false, `{"inputs":"a","prompt_name":null}`, 200, `[[{"index":1,"value":1.5}]]`, ""},
		{"truncation_direction left", false, `{"inputs":"a","truncation_direction":"left"}`, 200, `[[{"index":1,"value":1.5}]]`, ""},
		{"truncation_direction odd", false, `{"inputs":"a","truncation_direction":"up"}`, 422, `not one of "left", "right"`, "Validation"},
		{"prompt_name", false, `{"inputs":"a","prompt_name":"query"}`, 200, `[[{"index":1,"value":1.5}]]`, ""},
		{"prompt_name unknown", false, `{"inputs":"a","prompt_name":"doc"}`, 422, `not one of the fake's prompts`, "Validation"},
		{"empty list", false, `{"inputs":[]}`, 422, `inputs is empty`, "Empty"},
		{"too many", false, `{"inputs":["a","b","c","d","e"]}`, 413, `over the limit of 4`, "Validation"},
		{"wrong type", false, `{"inputs":3}`, 422, `inputs is a number`, "Validation"},
		{"unknown model", false, `{"inputs":"a","model":"nope"}`, 404, `unknown model`, "NotFound"},
		{"a dense model named", false, `{"inputs":"a","model":"emb"}`, 424, `Model is not an embedding model with SPLADE pooling: model "fake" is a embed model`, "Backend"},
		{"no sparse model", true, `{"inputs":"a"}`, 424, `Model is not an embedding model with SPLADE pooling: no model served here`, "Backend"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := both
			if tt.dense {
				ts = dense
			}
			resp, body := post(t, ts.URL+"/embed_sparse", tt.body)
			if tt.code == 200 {
				if resp.StatusCode != 200 || strings.TrimSpace(body) != tt.want {
					t.Fatalf("got %d %s, want 200 %s", resp.StatusCode, body, tt.want)
				}
				var parsed [][]models.SparseValue
				if err := json.Unmarshal([]byte(body), &parsed); err != nil {
					t.Errorf("the body is not TEI's [[{index, value}]]: %v", err)
				}
				return
			}
			var e ErrorResponse
			if err := json.Unmarshal([]byte(body), &e); err != nil || resp.StatusCode != tt.code || !strings.Contains(e.Error, tt.want) || e.ErrorType != tt.errTyp {
				t.Fatalf("got %d %s, want %d %s containing %q", resp.StatusCode, body, tt.code, tt.errTyp, tt.want)
			}
		})
	}
}

// The sparse model is not /embed's: a request naming it is told where to go.
func TestEmbedOnSparseModel(t *testing.T) {
	ts := newTestServer(t, fakeRepo{"splade": {task: models.TaskSparse}})
	resp, body := post(t, ts.URL+"/embed", `{"inputs":"a","model":"splade"}`)
	if resp.StatusCode != 400 || !strings.Contains(body, "use /embed_sparse") {
		t.Fatalf("got %d %s", resp.StatusCode, body)
	}
}

func TestAppendSparseEmbeddingsMatchesMarshal(t *testing.T) {
	for _, vecs := range [][][]models.SparseValue{
		nil,
		{},
		{{}},
		{{{Index: 0, Value: 0.1}, {Index: 30521, Value: 3.25e-7}}, {{Index: 7, Value: 12345.678}}},
	} {
		got, err := appendSparseEmbeddings(nil, vecs)
		want, werr := json.Marshal(vecs)
		if err != nil || werr != nil || string(got) != string(want) {
			t.Errorf("%v: got %s (%v), json.Marshal %s (%v)", vecs, got, err, want, werr)
		}
	}
}
