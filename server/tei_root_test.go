package server

import (
	"cmp"
	"encoding/json"
	"log/slog"
	"math"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/ortserve/ortserve/models"
)

// sortedRepo is compatRepo describing its models by name, as the real repository does, so
// that "the first model" is well defined.
type sortedRepo struct{ compatRepo }

func (r sortedRepo) Describe() []ModelInfo {
	all := r.compatRepo.Describe()
	slices.SortFunc(all, func(a, b ModelInfo) int { return cmp.Compare(a.Name, b.Name) })
	return all
}

func newRootServer(t *testing.T, repo fakeRepo) *httptest.Server {
	t.Helper()
	cfg := DefaultConfig()
	cfg.MaxInputs = 4
	s := New(cfg, sortedRepo{compatRepo{repo}}, slog.New(slog.DiscardHandler), nil)
	s.SetReady(true)
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return ts
}

// TestRoot holds POST / to /embed's and /predict's answers for the same body, by the task of
// the model it serves, and to the Inference API's shapes for huggingface_hub's fields. The
// fake classifier's logits for a text of n bytes are [0, n].
func TestRoot(t *testing.T) {
	sigmoid := func(x float64) float64 { return 1 / (1 + math.Exp(-x)) }
	// softmax([0, 3]), the fake's probabilities for the text "abc", as models.Softmax rounds them.
	p3, n3 := float32(1/(1+math.Exp(-3))), float32(float64(float32(math.Exp(-3)))/(1+math.Exp(-3)))
	tests := []struct {
		name  string
		repo  fakeRepo
		body  string
		code  int
		same  string // a route whose answer to the same body POST / must give
		want  string // else a substring of the answer
		model string // x-model-version's model, on a 200
	}{
		{"embed model: as /embed", fakeRepo{"emb": {task: models.TaskEmbed}}, `{"inputs":"abc"}`, 200, "/embed", "", "emb"},
		{"embed batch", fakeRepo{"emb": {task: models.TaskEmbed}}, `{"inputs":["a","bb"],"normalize":false,"truncate":true}`, 200, "/embed", "", "emb"},
		{"huggingface_hub feature_extraction", fakeRepo{"emb": {task: models.TaskEmbed}}, `{"inputs":"abc","normalize":true,"truncate":true,"truncation_direction":"right","dimensions":3,"encoding_format":"float"}`, 200, "", `[[0.9486833,0.31622776,0]]`, "emb"},
		{"harmless unknown fields", fakeRepo{"emb": {task: models.TaskEmbed}}, `{"inputs":"abc","options":{"wait_for_model":true},"user":"u"}`, 200, "", `[[0.9486833,0.31622776,0]]`, "emb"},
		{"classify model: as /predict", fakeRepo{"cls": {task: models.TaskClassify}}, `{"inputs":"abc"}`, 200, "/predict", "", "cls"},
		{"classify batch", fakeRepo{"cls": {task: models.TaskClassify}}, `{"inputs":[["a"],["bb"]],"raw_scores":true}`, 200, "/predict", "", "cls"},
		{"huggingface_hub text_classification", fakeRepo{"cls": {task: models.TaskClassify}}, `{"inputs":"abc","parameters":{}}`, 200, "", `[[{"score":` + ftoa(p3) + `,"label":"positive"},{"score":` + ftoa(n3) + `,"label":"negative"}]]`, "cls"},
		{"top_k", fakeRepo{"cls": {task: models.TaskClassify}}, `{"inputs":"abc","parameters":{"top_k":1}}`, 200, "", `[[{"score":` + ftoa(p3) + `,"label":"positive"}]]`, "cls"},
		{"top_k past the labels", fakeRepo{"cls": {task: models.TaskClassify}}, `{"inputs":"abc","parameters":{"top_k":5,"function_to_apply":"softmax"}}`, 200, "", `,"label":"negative"}]]`, "cls"},
		{"sigmoid", fakeRepo{"cls": {task: models.TaskClassify}}, `{"inputs":"abc","parameters":{"function_to_apply":"sigmoid"}}`, 200, "", `[[{"score":` + ftoa(float32(sigmoid(3))) + `,"label":"positive"},{"score":0.5,"label":"negative"}]]`, "cls"},
		{"none", fakeRepo{"cls": {task: models.TaskClassify}}, `{"inputs":["abc"],"parameters":{"function_to_apply":"none","top_k":2}}`, 200, "", `[[{"score":3,"label":"positive"},{"score":0,"label":"negative"}]]`, "cls"},
		{"huggingface_hub sentence_similarity: as /similarity", fakeRepo{"a-cls": {task: models.TaskClassify}, "emb": {task: models.TaskEmbed}}, `{"inputs":{"source_sentence":"abc","sentences":["ab","abc"]},"parameters":{}}`, 200, "/similarity", "", "emb"},
		{"similarity without a source", fakeRepo{"emb": {task: models.TaskEmbed}}, `{"inputs":{"sentences":["ab"]}}`, 422, "", `inputs.source_sentence is required`, ""},
		{"first embed model for an embedding body", fakeRepo{"b-emb": {task: models.TaskEmbed}, "a-cls": {task: models.TaskClassify}}, `{"inputs":"abc"}`, 200, "/embed", "", "b-emb"},
		{"first classifier for text classification's parameters", fakeRepo{"a-emb": {task: models.TaskEmbed}, "b-cls": {task: models.TaskClassify}}, `{"inputs":"abc","parameters":{}}`, 200, "", `[[{"score":`, "b-cls"},
		{"first model when none does the task", fakeRepo{"b-cls": {task: models.TaskClassify}, "c-cls": {task: models.TaskClassify}}, `{"inputs":"abc"}`, 200, "/predict", "", "b-cls"},
		{"named model", fakeRepo{"b-emb": {task: models.TaskEmbed}, "a-cls": {task: models.TaskClassify}}, `{"inputs":"abc","model":"b-emb","version":"v1"}`, 200, "/embed", "", "b-emb"},

		{"unknown model", fakeRepo{"emb": {task: models.TaskEmbed}}, `{"inputs":"abc","model":"nope"}`, 404, "", `unknown model "nope"`, ""},
		{"unknown version", fakeRepo{"emb": {task: models.TaskEmbed}}, `{"inputs":"abc","version":"v9"}`, 404, "", `unknown version`, ""},
		{"no inputs", fakeRepo{"emb": {task: models.TaskEmbed}}, `{}`, 422, "", `inputs is empty`, ""},
		{"inputs of the wrong kind", fakeRepo{"emb": {task: models.TaskEmbed}}, `{"inputs":3}`, 422, "", `inputs is a number`, ""},
		{"no classify inputs", fakeRepo{"cls": {task: models.TaskClassify}}, `{}`, 422, "", `inputs must be a string`, ""},
		{"a pair", fakeRepo{"cls": {task: models.TaskClassify}}, `{"inputs":["a","b"]}`, 200, "/predict", "", "cls"},
		{"a batch with pairs", fakeRepo{"cls": {task: models.TaskClassify}}, `{"inputs":[["a","b"],["c"]],"raw_scores":true}`, 200, "/predict", "", "cls"},
		{"rerank model: as /rerank", fakeRepo{"rr": {task: models.TaskRerank}}, `{"query":"a","texts":["b","ab"],"return_text":true}`, 200, "/rerank", "", "rr"},
		{"rerank model named", fakeRepo{"emb": {task: models.TaskEmbed}, "rr": {task: models.TaskRerank}}, `{"model":"rr","query":"a","texts":["b","ab"]}`, 200, "", `[{"index":1,"score":`, "rr"},
		{"rerank without a query", fakeRepo{"rr": {task: models.TaskRerank}}, `{"texts":["b"]}`, 422, "", `query is required`, ""},
		{"too many", fakeRepo{"emb": {task: models.TaskEmbed}}, `{"inputs":["a","b","c","d","e"]}`, 413, "", `over the limit of 4`, ""},
		{"left truncation", fakeRepo{"emb": {task: models.TaskEmbed}}, `{"inputs":"a","truncation_direction":"left","normalize":false}`, 200, "", `[[1,1,0]]`, "emb"},
		{"odd truncation", fakeRepo{"emb": {task: models.TaskEmbed}}, `{"inputs":"a","truncation_direction":"middle"}`, 422, "", `not one of`, ""},
		{"prompt_name", fakeRepo{"emb": {task: models.TaskEmbed}}, `{"inputs":"a","prompt_name":"query"}`, 200, "", `[[0.70710677,0.70710677,0]]`, "emb"},
		{"prompt_name unknown", fakeRepo{"emb": {task: models.TaskEmbed}}, `{"inputs":"a","prompt_name":"doc"}`, 422, "", `not one of the fake's prompts`, ""},
		{"dimensions", fakeRepo{"emb": {task: models.TaskEmbed}}, `{"inputs":"a","dimensions":2}`, 200, "", `[[0.70710677,0.70710677]]`, "emb"},
		{"dimensions over the width", fakeRepo{"emb": {task: models.TaskEmbed}}, `{"inputs":"a","dimensions":4}`, 422, "", `over the fake's 3`, ""},
		{"dimensions 0", fakeRepo{"emb": {task: models.TaskEmbed}}, `{"inputs":"a","dimensions":0}`, 422, "", `give at least 1`, ""},
		{"base64", fakeRepo{"emb": {task: models.TaskEmbed}}, `{"inputs":"a","encoding_format":"base64"}`, 422, "", `answers floats`, ""},
		{"classification parameters for an embedder", fakeRepo{"emb": {task: models.TaskEmbed}}, `{"inputs":"a","parameters":{"top_k":1}}`, 400, "", `is an embed model`, ""},
		{"top_k zero", fakeRepo{"cls": {task: models.TaskClassify}}, `{"inputs":"a","parameters":{"top_k":0}}`, 422, "", `keep at least 1`, ""},
		{"top_k not an integer", fakeRepo{"cls": {task: models.TaskClassify}}, `{"inputs":"a","parameters":{"top_k":1.5}}`, 422, "", `bad JSON body`, ""},
		{"odd function", fakeRepo{"cls": {task: models.TaskClassify}}, `{"inputs":"a","parameters":{"function_to_apply":"relu"}}`, 422, "", `not one of "softmax", "sigmoid", "none"`, ""},
		{"bad JSON", fakeRepo{"emb": {task: models.TaskEmbed}}, `{"inputs":`, 422, "", `bad JSON body`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := newRootServer(t, tt.repo)
			resp, body := post(t, ts.URL+"/", tt.body)
			if resp.StatusCode != tt.code {
				t.Fatalf("got %d %s, want %d", resp.StatusCode, body, tt.code)
			}
			if tt.code != 200 {
				var e ErrorResponse
				if err := json.Unmarshal([]byte(body), &e); err != nil || e.ErrorType == "" || !strings.Contains(e.Error, tt.want) {
					t.Fatalf("error %s, want TEI's shape containing %q", body, tt.want)
				}
				return
			}
			if mv := resp.Header.Get("x-model-version"); mv != tt.model+"/v1" {
				t.Errorf("x-model-version %q, want %s/v1", mv, tt.model)
			}
			if tt.same != "" {
				if _, want := post(t, ts.URL+tt.same, tt.body); body != want {
					t.Errorf("POST / answered %s, %s answered %s", body, tt.same, want)
				}
				return
			}
			if !strings.Contains(body, tt.want) {
				t.Errorf("got %s, want it to contain %s", body, tt.want)
			}
		})
	}
}

// ftoa writes f as the server's JSON does.
func ftoa(f float32) string {
	b, _ := appendFloat32(nil, f)
	return string(b)
}
