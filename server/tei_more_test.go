package server

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ortserve/ortserve/models"
)

// TestTEIMoreRoutes holds /embed_all, /similarity, /decode, /vertex, /invocations and /ping
// to TEI's shapes, on the fakes: an embedding of a text of n bytes is [n, 1, 0], its tokens
// [byte, position], a decoded id the byte it is.
func TestTEIMoreRoutes(t *testing.T) {
	emb := fakeRepo{"emb": {task: models.TaskEmbed}}
	both := fakeRepo{"emb": {task: models.TaskEmbed}, "rr": {task: models.TaskRerank}, "cls": {task: models.TaskClassify}}
	tests := []struct {
		name, path string
		repo       fakeRepo
		body       string
		code       int
		want       string // the body, or on an error a substring of its message
	}{
		{"embed_all", "/embed_all", emb, `{"inputs":["ab","c"]}`, 200, `[[[97,0],[98,1]],[[99,0]]]`},
		{"embed_all one text, left", "/embed_all", emb, `{"inputs":"a","truncate":true,"truncation_direction":"Left"}`, 200, `[[[97,0]]]`},
		{"embed_all empty", "/embed_all", emb, `{"inputs":[]}`, 422, `inputs is empty`},
		{"embed_all too many", "/embed_all", emb, `{"inputs":["a","b","c","d","e"]}`, 413, `over the limit of 4`},
		{"embed_all unknown prompt", "/embed_all", emb, `{"inputs":"a","prompt_name":"q"}`, 422, `not one of the fake's prompts`},
		{"embed_all odd direction", "/embed_all", emb, `{"inputs":"a","truncation_direction":"LEFT"}`, 422, `not one of "left", "right"`},
		{"embed_all of a classifier", "/embed_all", both, `{"inputs":"a","model":"cls"}`, 400, `use /predict`},

		{"similarity", "/similarity", emb, `{"inputs":{"source_sentence":"ab","sentences":["ab","abc"]}}`, 200, `[1,` + ftoa(cosine([]float32{2, 1, 0}, []float32{3, 1, 0})) + `]`},
		{"similarity parameters", "/similarity", emb, `{"inputs":{"source_sentence":"a","sentences":["a"]},"parameters":{"truncate":true,"truncation_direction":"left"}}`, 200, `[1]`},
		{"similarity no sentences", "/similarity", emb, `{"inputs":{"source_sentence":"a","sentences":[]}}`, 422, `inputs.sentences is empty`},
		{"similarity no source", "/similarity", emb, `{"inputs":{"sentences":["a"]}}`, 422, `source_sentence is required`},
		{"similarity no inputs", "/similarity", emb, `{}`, 422, `source_sentence is required`},
		{"similarity inputs a string", "/similarity", emb, `{"inputs":"a"}`, 422, `bad JSON body`},
		{"similarity null sentence", "/similarity", emb, `{"inputs":{"source_sentence":"a","sentences":["a",null]}}`, 422, `null`},
		{"similarity source counts", "/similarity", emb, `{"inputs":{"source_sentence":"a","sentences":["a","b","c","d"]}}`, 413, `over the limit of 4`},
		{"similarity prompt", "/similarity", emb, `{"inputs":{"source_sentence":"a","sentences":["a"]},"parameters":{"prompt_name":"q"}}`, 422, `not one of the fake's prompts`},

		{"decode one", "/decode", emb, `{"ids":[104,105]}`, 200, `["hi"]`},
		{"decode many", "/decode", emb, `{"ids":[[104,105],[],[33]],"skip_special_tokens":false}`, 200, `["hi","","!"]`},
		{"decode empty", "/decode", emb, `{"ids":[]}`, 200, `[""]`},
		{"decode the first model of any task", "/decode", fakeRepo{"rr": {task: models.TaskRerank}}, `{"ids":[104]}`, 200, `["h"]`},
		{"decode no ids", "/decode", emb, `{}`, 422, `ids is required`},
		{"decode negative", "/decode", emb, `{"ids":[-1]}`, 422, `ids must be a list of token ids`},
		{"decode past uint32", "/decode", emb, `{"ids":[4294967296]}`, 422, `ids must be a list of token ids`},
		{"decode a string", "/decode", emb, `{"ids":"hi"}`, 422, `ids must be a list of token ids`},
		{"decode mixed", "/decode", emb, `{"ids":[[1],2]}`, 422, `ids must be a list of token ids`},
		{"decode null list", "/decode", emb, `{"ids":[[1],null]}`, 422, `ids[1] is null`},
		{"decode unknown id", "/decode", emb, `{"ids":[300]}`, 422, `token id 300 is not in the model's vocabulary`},
		{"decode too many", "/decode", emb, `{"ids":[[1],[2],[3],[4],[5]]}`, 413, `over the limit of 4`},

		{"vertex embed", "/vertex", emb, `{"instances":[{"inputs":"ab","normalize":false},{"inputs":["a"],"normalize":false}]}`, 200, `{"predictions":[[[2,1,0]],[[1,1,0]]]}`},
		{"vertex rerank and predict", "/vertex", both, `{"instances":[{"query":"a","texts":["b"],"raw_scores":true,"model":"rr"},{"inputs":"ab","raw_scores":true,"model":"cls"}]}`, 200, `{"predictions":[[{"index":0,"score":-1}],[{"score":2,"label":"positive"},{"score":0,"label":"negative"}]]}`},
		{"vertex no instances", "/vertex", emb, `{"instances":[]}`, 422, `instances is empty`},
		{"vertex too many", "/vertex", emb, `{"instances":[{},{},{},{},{}]}`, 413, `over the limit of 4`},
		{"vertex instance not an object", "/vertex", emb, `{"instances":["a"]}`, 422, `instances[0] is a string`},
		{"vertex bad instance", "/vertex", emb, `{"instances":[{"inputs":"a"},{"inputs":[]}]}`, 422, `instances[1]: inputs is empty`},
		{"vertex instances not a list", "/vertex", emb, `{"instances":{}}`, 422, `bad JSON body`},

		{"invocations", "/invocations", emb, `{"inputs":"ab","normalize":false}`, 200, `[[2,1,0]]`},
		{"invocations bad", "/invocations", emb, `{"inputs":3}`, 422, `inputs is a number`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := newRootServer(t, tt.repo)
			resp, body := post(t, ts.URL+tt.path, tt.body)
			if resp.StatusCode != tt.code {
				t.Fatalf("got %d %s, want %d", resp.StatusCode, body, tt.code)
			}
			if tt.code == 200 {
				if strings.TrimSpace(body) != tt.want {
					t.Errorf("got %s, want %s", body, tt.want)
				}
				return
			}
			var e ErrorResponse
			if err := json.Unmarshal([]byte(body), &e); err != nil || e.ErrorType == "" || !strings.Contains(e.Error, tt.want) {
				t.Errorf("error %s, want TEI's shape containing %q", body, tt.want)
			}
		})
	}
}

// TestTruncationDirection checks that every route that cuts texts passes the side asked for
// down to the model, in TEI's spellings.
func TestTruncationDirection(t *testing.T) {
	repo := fakeRepo{"emb": {task: models.TaskEmbed}, "rr": {task: models.TaskRerank}, "cls": {task: models.TaskClassify}}
	ts := newRootServer(t, repo)
	for _, tt := range []struct{ path, model, body string }{
		{"/embed", "emb", `{"inputs":"a"`},
		{"/", "emb", `{"inputs":"a","model":"emb"`},
		{"/", "cls", `{"inputs":"a","model":"cls","parameters":{}`},
		{"/predict", "cls", `{"inputs":["a","b"]`},
		{"/rerank", "rr", `{"query":"a","texts":["b"]`},
		{"/embed_all", "emb", `{"inputs":"a"`},
		{"/similarity", "emb", `{"inputs":{"source_sentence":"a","sentences":["b"]},"parameters":{"truncate":true`},
	} {
		for _, dir := range []string{"left", "Left", "right", "Right", ""} {
			body := tt.body + `,"truncation_direction":"` + dir + `"}`
			if strings.HasSuffix(tt.body, `"truncate":true`) {
				body = tt.body + `,"truncation_direction":"` + dir + `"}}`
			}
			resp, got := post(t, ts.URL+tt.path, body)
			if resp.StatusCode != http.StatusOK {
				t.Errorf("%s %s: %d %s", tt.path, body, resp.StatusCode, got)
				continue
			}
			if left := repo[tt.model].seenLeft; left != strings.EqualFold(dir, "left") {
				t.Errorf("%s %s: the model was asked to cut on the left: %v", tt.path, body, left)
			}
		}
	}
}

func TestPing(t *testing.T) {
	cfg := DefaultConfig()
	cfg.APIKeys, cfg.AuthExempt = []string{"k"}, []string{"health"}
	s := New(cfg, fakeRepo{}, slog.New(slog.DiscardHandler), nil)
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	for _, ready := range []bool{false, true} {
		s.SetReady(ready)
		resp, err := http.Get(ts.URL + "/ping")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if want := map[bool]int{false: 503, true: 200}[ready]; resp.StatusCode != want {
			t.Errorf("ready %v: /ping %d, want %d without a key, as /health", ready, resp.StatusCode, want)
		}
	}
}

// TestPooledOnly checks /embed_all's refusal of a model whose output is pooled.
func TestPooledOnly(t *testing.T) {
	ts := newRootServer(t, fakeRepo{"emb": {task: models.TaskEmbed, err: &models.PooledOnlyError{Model: "emb", Output: "sentence_embedding"}}})
	resp, body := post(t, ts.URL+"/embed_all", `{"inputs":"a"}`)
	var e ErrorResponse
	if resp.StatusCode != 400 || json.Unmarshal([]byte(body), &e) != nil || !strings.Contains(e.Error, `gives pooled vectors only`) || !errors.Is(&models.PooledOnlyError{}, models.ErrPooledOnly) {
		t.Errorf("got %d %s", resp.StatusCode, body)
	}
}
