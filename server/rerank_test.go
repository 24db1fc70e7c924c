package server

import (
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ortserve/ortserve/models"
	"github.com/ortserve/ortserve/tokenize"
)

// rerankRepo serves an embedder, a classifier and a reranker, as compatRepo does.
func rerankRepo() fakeRepo {
	return fakeRepo{"emb": {task: models.TaskEmbed}, "cls": {task: models.TaskClassify}, "rr": {task: models.TaskRerank}}
}

func TestRerank(t *testing.T) {
	// fakeModel's logit: +len(text) when the text holds the query, else -len(text).
	s1, s3, n1, n2 := ftoa(models.Sigmoid(1)), ftoa(models.Sigmoid(3)), ftoa(models.Sigmoid(-1)), ftoa(models.Sigmoid(-2))
	tests := []struct {
		name, body string
		code       int
		want       string // the body, or a part of an error's
	}{
		{"sorted by score", `{"query":"a","texts":["xy","a","zab"]}`, 200,
			`[{"index":2,"score":` + s3 + `},{"index":1,"score":` + s1 + `},{"index":0,"score":` + n2 + `}]`},
		{"raw scores", `{"query":"a","texts":["xy","a"],"raw_scores":true}`, 200, `[{"index":1,"score":1},{"index":0,"score":-2}]`},
		{"return text", `{"query":"a","texts":["b","a"],"return_text":true,"model":"rr","version":"v1"}`, 200,
			`[{"index":1,"text":"a","score":` + s1 + `},{"index":0,"text":"b","score":` + n1 + `}]`},
		{"ties keep the texts' order", `{"query":"q","texts":["x","y","z"],"raw_scores":true}`, 200,
			`[{"index":0,"score":-1},{"index":1,"score":-1},{"index":2,"score":-1}]`},
		{"truncation_direction right", `{"query":"a","texts":["a"],"truncate":true,"truncation_direction":"Right"}`, 200, `[{"index":0,"score":` + s1 + `}]`},
		{"an empty query is a query", `{"query":"","texts":["a"],"raw_scores":true}`, 200, `[{"index":0,"score":1}]`},

		{"no query", `{"texts":["a"]}`, 422, "query is required"},
		{"null query", `{"query":null,"texts":["a"]}`, 422, "query is required"},
		{"query not a string", `{"query":1,"texts":["a"]}`, 422, "bad JSON body"},
		{"no texts", `{"query":"a"}`, 422, "texts is empty"},
		{"empty texts", `{"query":"a","texts":[]}`, 422, "texts is empty"},
		{"texts a string", `{"query":"a","texts":"b"}`, 422, "texts is a string: send a list of strings"},
		{"a null text", `{"query":"a","texts":["b",null]}`, 422, "texts[1] is null, not a string"},
		{"too many texts", `{"query":"a","texts":["a","b","c","d","e"]}`, 413, "5 texts is over the limit of 4"},
		{"left truncation", `{"query":"a","texts":["a"],"truncation_direction":"left"}`, 200, `[{"index":0,"score":` + s1 + `}]`},
		{"odd truncation", `{"query":"a","texts":["a"],"truncation_direction":"up"}`, 422, `not one of "left", "right"`},
		{"unknown model", `{"query":"a","texts":["a"],"model":"nope"}`, 404, `unknown model "nope"`},
		{"unknown version", `{"query":"a","texts":["a"],"version":"v9"}`, 404, "unknown version"},
		{"an embedder", `{"query":"a","texts":["a"],"model":"emb"}`, 400, "is a embed model: use /embed or /v1/embeddings"},
		{"a classifier", `{"query":"a","texts":["a"],"model":"cls"}`, 400, "is a classify model: use /predict"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			repo := rerankRepo()
			ts, _ := newCompatServer(t, repo)
			resp, body := post(t, ts.URL+"/rerank", tt.body)
			if resp.StatusCode != tt.code {
				t.Fatalf("got %d %s, want %d", resp.StatusCode, body, tt.code)
			}
			if tt.code != 200 {
				var e ErrorResponse
				if json.Unmarshal([]byte(body), &e) != nil || shapeOf(body) != "tei" || !strings.Contains(e.Error, tt.want) {
					t.Errorf("got %s, want TEI's error shape containing %q", body, tt.want)
				}
				return
			}
			if strings.TrimSpace(body) != tt.want {
				t.Errorf("got  %s\nwant %s", body, tt.want)
			}
			if mv := resp.Header.Get("x-model-version"); mv != "rr/v1" {
				t.Errorf("x-model-version %q", mv)
			}
		})
	}
}

// The tasks point at each other's routes: a reranker on /embed or /predict names /rerank.
func TestRerankWrongTaskNamesRoutes(t *testing.T) {
	ts, _ := newCompatServer(t, rerankRepo())
	for _, tt := range []struct{ path, body, want string }{
		{"/embed", `{"inputs":"a","model":"rr"}`, `is a rerank model: use /rerank or /v1/rerank`},
		{"/predict", `{"inputs":"a","model":"rr"}`, `is a rerank model: use /rerank or /v1/rerank`},
		{"/v1/embeddings", `{"input":"a","model":"rr"}`, `is a rerank model: use /rerank or /v1/rerank`},
		{"/v1/rerank", `{"query":"a","documents":["a"],"model":"emb"}`, `is a embed model: use /embed`},
	} {
		resp, body := post(t, ts.URL+tt.path, tt.body)
		if resp.StatusCode != 400 || !strings.Contains(body, tt.want) {
			t.Errorf("%s: got %d %s, want 400 containing %q", tt.path, resp.StatusCode, body, tt.want)
		}
	}
}

// The model gets the query and the texts, cut to max_input_chars; return_text answers the
// texts as sent.
func TestRerankInputs(t *testing.T) {
	repo := rerankRepo()
	cfg := DefaultConfig()
	cfg.MaxInputChars = 3
	s := New(cfg, compatRepo{repo}, slog.New(slog.DiscardHandler), nil)
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	resp, body := post(t, ts.URL+"/rerank", `{"query":"query","texts":["passage","p"],"return_text":true,"raw_scores":true}`)
	if resp.StatusCode != 200 || repo["rr"].query != "que" || !slices.Equal(repo["rr"].seen, []string{"pas", "p"}) {
		t.Fatalf("%d %s: the model got %q, %q", resp.StatusCode, body, repo["rr"].query, repo["rr"].seen)
	}
	if want := `[{"index":1,"text":"p","score":-1},{"index":0,"text":"passage","score":-3}]`; strings.TrimSpace(body) != want {
		t.Errorf("got %s, want %s", body, want)
	}
	if resp.Header.Get("x-compute-tokens") != "10" {
		t.Errorf("x-compute-tokens %q", resp.Header.Get("x-compute-tokens"))
	}
}

func TestOpenAIRerank(t *testing.T) {
	s1, s3, n2 := ftoa(models.Sigmoid(1)), ftoa(models.Sigmoid(3)), ftoa(models.Sigmoid(-2))
	tests := []struct {
		name, body string
		code       int
		want       string // the body, or a part of an error's message
		param      string // the error's param
	}{
		{"strings", `{"model":"rr","query":"a","documents":["xy","a","zab"]}`, 200,
			`{"model":"rr/v1","results":[{"index":2,"relevance_score":` + s3 + `},{"index":1,"relevance_score":` + s1 + `},{"index":0,"relevance_score":` + n2 + `}],"usage":{"total_tokens":9}}`, ""},
		{"objects, top_n, documents", `{"model":"rr:v1","query":"a","documents":[{"text":"xy","id":7},"a",{"text":"zab"}],"top_n":2,"return_documents":true}`, 200,
			`{"model":"rr/v1","results":[{"index":2,"relevance_score":` + s3 + `,"document":{"text":"zab"}},{"index":1,"relevance_score":` + s1 + `,"document":{"text":"a"}}],"usage":{"total_tokens":9}}`, ""},
		{"top_n past the documents", `{"query":"a","documents":["a"],"top_n":5}`, 200,
			`{"model":"rr/v1","results":[{"index":0,"relevance_score":` + s1 + `}],"usage":{"total_tokens":2}}`, ""},

		{"no query", `{"documents":["a"]}`, 400, "query is required", "query"},
		{"no documents", `{"query":"a"}`, 400, "documents is required", "documents"},
		{"documents a string", `{"query":"a","documents":"a"}`, 400, "documents is a string", "documents"},
		{"a null document", `{"query":"a","documents":["a",null]}`, 400, "documents[1] is null", "documents"},
		{"an object without text", `{"query":"a","documents":[{"title":"a"}]}`, 400, `documents[0] has no "text" string`, "documents"},
		{"a text that is not a string", `{"query":"a","documents":[{"text":3}]}`, 400, `documents[0] has no "text" string`, "documents"},
		{"empty documents", `{"query":"a","documents":[]}`, 422, "documents is empty", ""},
		{"too many", `{"query":"a","documents":["a","b","c","d","e"]}`, 413, "5 documents is over the limit of 4", ""},
		{"top_n zero", `{"query":"a","documents":["a"],"top_n":0}`, 400, "keep at least 1", "top_n"},
		{"bad model name", `{"model":"rr:","query":"a","documents":["a"]}`, 400, "give a model name", "model"},
		{"unknown model", `{"model":"nope","query":"a","documents":["a"]}`, 404, `unknown model "nope"`, "model"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts, _ := newCompatServer(t, rerankRepo())
			resp, body := post(t, ts.URL+"/v1/rerank", tt.body)
			if resp.StatusCode != tt.code {
				t.Fatalf("got %d %s, want %d", resp.StatusCode, body, tt.code)
			}
			if tt.code == 200 {
				if strings.TrimSpace(body) != tt.want {
					t.Errorf("got  %s\nwant %s", body, tt.want)
				}
				return
			}
			var e OpenAIError
			if err := json.Unmarshal([]byte(body), &e); err != nil || shapeOf(body) != "openai" || !strings.Contains(e.Error.Message, tt.want) {
				t.Fatalf("got %s, want OpenAI's error shape containing %q", body, tt.want)
			}
			if param := e.Error.Param; (param == nil) != (tt.param == "") || (param != nil && *param != tt.param) {
				t.Errorf("param %v, want %q", param, tt.param)
			}
		})
	}
}

func TestPredictPairsUnsupported(t *testing.T) {
	ts, _ := newCompatServer(t, fakeRepo{"cls": {task: models.TaskClassify, err: tokenize.ErrNoPairs}})
	resp, body := post(t, ts.URL+"/predict", `{"inputs":["premise","hypothesis"]}`)
	if resp.StatusCode != 422 || !strings.Contains(body, "cannot join pairs of texts") {
		t.Errorf("got %d %s", resp.StatusCode, body)
	}
}

func TestRerankMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := New(DefaultConfig(), compatRepo{rerankRepo()}, slog.New(slog.DiscardHandler), NewMetrics(reg))
	s.SetReady(true)
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	post(t, ts.URL+"/rerank", `{"query":"a","texts":["a","b"]}`)
	post(t, ts.URL+"/rerank", `{"query":"a","texts":[]}`)
	post(t, ts.URL+"/v1/rerank", `{"query":"a","documents":["a"]}`)
	for _, tt := range []struct {
		model, version, route, code string
		want                        float64
	}{
		{"rr", "v1", "/rerank", "200", 1},
		{"", "", "/rerank", "422", 1},
		{"rr", "v1", "/v1/rerank", "200", 1},
	} {
		if got := testutil.ToFloat64(s.metrics.requests.WithLabelValues(tt.model, tt.version, tt.route, tt.code)); got != tt.want {
			t.Errorf("requests_total{%s %s %s %s} = %v, want %v", tt.model, tt.version, tt.route, tt.code, got, tt.want)
		}
	}
}

func FuzzRerankRequest(f *testing.F) {
	for _, s := range []string{`{"query":"a","texts":["a","b"]}`, `{"query":null,"texts":[null]}`, `{"texts":"a"}`, `{}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data string) {
		var req RerankRequest
		if decodeJSON([]byte(data), &req) != nil {
			return
		}
		if strings.Contains(data, "null") && slices.Contains(req.Texts, "") {
			var raw struct{ Texts []json.RawMessage }
			if json.Unmarshal([]byte(data), &raw) == nil {
				for _, item := range raw.Texts {
					if string(item) == "null" {
						t.Fatalf("%q: a null text accepted", data)
					}
				}
			}
		}
	})
}

func FuzzDocuments(f *testing.F) {
	for _, s := range []string{`["a",{"text":"b"}]`, `[null]`, `[{"text":null}]`, `"a"`, `[1,[2]]`, `[{}]`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data string) {
		docs, err := parseDocuments(json.RawMessage(data))
		if err != nil {
			return
		}
		var items []json.RawMessage
		if json.Unmarshal([]byte(data), &items) != nil || len(items) != len(docs) {
			t.Fatalf("%q: %d documents from %d items", data, len(docs), len(items))
		}
	})
}
