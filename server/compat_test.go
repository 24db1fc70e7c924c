package server

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/ortserve/ortserve/models"
	"github.com/ortserve/ortserve/runtime"
)

// compatRepo is fakeRepo with versions ("v1" only) and a Describe that matches its models,
// which the OpenAI and KServe routes read.
type compatRepo struct{ fakeRepo }

// versioned refuses any version but "" and "v1", as a loaded model refuses unknown ones.
type versioned struct{ *fakeModel }

func (v versioned) Embed(ctx context.Context, version string, texts []string, o models.EmbedOptions) ([][]float32, models.Stats, error) {
	if version != "" && version != "v1" {
		return nil, models.Stats{}, &models.UnknownError{Kind: models.ErrUnknownVersion, Name: version, Known: []string{"v1"}}
	}
	return v.fakeModel.Embed(ctx, version, texts, o)
}

func (v versioned) ClassifyPairs(ctx context.Context, version string, inputs []models.Input, o models.ClassifyOptions) ([][]float32, models.Stats, error) {
	if version != "" && version != "v1" {
		return nil, models.Stats{}, &models.UnknownError{Kind: models.ErrUnknownVersion, Name: version, Known: []string{"v1"}}
	}
	return v.fakeModel.ClassifyPairs(ctx, version, inputs, o)
}

func (v versioned) Rerank(ctx context.Context, version, query string, texts []string, o models.RerankOptions) ([]float32, models.Stats, error) {
	if version != "" && version != "v1" {
		return nil, models.Stats{}, &models.UnknownError{Kind: models.ErrUnknownVersion, Name: version, Known: []string{"v1"}}
	}
	return v.fakeModel.Rerank(ctx, version, query, texts, o)
}

func (r compatRepo) Acquire(name string, task models.Task) (Pipeline, string, func(), error) {
	p, n, release, err := r.fakeRepo.Acquire(name, task)
	if err != nil {
		return nil, "", nil, err
	}
	return versioned{p.(*fakeModel)}, n, release, nil
}

func (r compatRepo) Describe() []ModelInfo {
	var out []ModelInfo
	for name, m := range r.fakeRepo {
		mi := ModelInfo{Name: name, Task: string(m.task), Versions: []string{"v1"}, DefaultVersion: "v1", Dimension: 3}
		if m.task == models.TaskClassify {
			mi.Labels, mi.Dimension = m.Labels(), 2
		}
		out = append(out, mi)
	}
	return out
}

func (r compatRepo) Model(name string) (ModelInfo, error) { return modelIn(r.Describe(), name) }

func newCompatServer(t *testing.T, repo fakeRepo) (*httptest.Server, *Server) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.MaxInputs = 4
	cfg.MaxBodyBytes = 1 << 10
	s := New(cfg, compatRepo{repo}, slog.New(slog.DiscardHandler), nil)
	s.SetReady(true)
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return ts, s
}

func decodeFloats(t *testing.T, s string) []float32 {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(b)%4 != 0 {
		t.Fatalf("base64 %q: %v", s, err)
	}
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

func TestOpenAIEmbeddings(t *testing.T) {
	repo := fakeRepo{"emb": {task: models.TaskEmbed}, "cls": {task: models.TaskClassify}}
	ts, _ := newCompatServer(t, repo)
	tests := []struct {
		name, body string
		code       int
		want       string // substring of the body
		param      string // the OpenAI error's param
	}{
		{"string", `{"model":"emb","input":"abc"}`, 200, `"object":"list"`, ""},
		{"list", `{"model":"emb","input":["a","bb"],"user":"u1"}`, 200, `"index":1`, ""},
		{"default model", `{"input":"a"}`, 200, `"model":"emb/v1"`, ""},
		{"model/version", `{"model":"emb/v1","input":"a"}`, 200, `"model":"emb/v1"`, ""},
		{"model:version", `{"model":"emb:v1","input":"a"}`, 200, `"model":"emb/v1"`, ""},
		{"dimensions equal", `{"model":"emb","input":"a","dimensions":3}`, 200, `"embedding":[`, ""},
		{"usage", `{"model":"emb","input":["a","b"]}`, 200, `"usage":{"prompt_tokens":2,"total_tokens":2}`, ""},
		{"token ids", `{"model":"emb","input":[1,2,3]}`, 400, `token ids is not supported`, "input"},
		{"token id lists", `{"model":"emb","input":[[1,2],[3]]}`, 400, `token ids is not supported`, "input"},
		{"no input", `{"model":"emb"}`, 400, `input is required`, "input"},
		{"wrong input", `{"model":"emb","input":{"a":1}}`, 400, `a string or a list of strings`, "input"},
		{"mixed list", `{"model":"emb","input":["a",true]}`, 400, `input[1] must be a string`, "input"},
		{"empty list", `{"model":"emb","input":[]}`, 422, `inputs is empty`, ""},
		{"too many", `{"model":"emb","input":["a","b","c","d","e"]}`, 413, `over the limit of 4`, ""},
		{"bad format", `{"model":"emb","input":"a","encoding_format":"int8"}`, 400, `not one of`, "encoding_format"},
		{"dimensions shorter", `{"model":"emb","input":"a","dimensions":2}`, 200, `"embedding":[0.70710677,0.70710677]}`, ""},
		{"dimensions over the width", `{"model":"emb","input":"a","dimensions":4}`, 400, `over the fake's 3`, "dimensions"},
		{"dimensions 0", `{"model":"emb","input":"a","dimensions":0}`, 400, `give at least 1`, "dimensions"},
		{"dimensions -1", `{"model":"emb","input":"a","dimensions":-1}`, 400, `give at least 1`, "dimensions"},
		{"prompt_name", `{"model":"emb","input":"a","prompt_name":"query"}`, 200, `"embedding":[`, ""},
		{"prompt_name unknown", `{"model":"emb","input":"a","prompt_name":"doc"}`, 400, `not one of the fake's prompts`, "prompt_name"},
		{"float explicit", `{"model":"emb","input":"a","encoding_format":"float"}`, 200, `"embedding":[0.70710677,0.70710677,0]`, ""},
		{"unknown model", `{"model":"text-embedding-3-small","input":"a"}`, 404, `"code":"model_not_found"`, "model"},
		{"unknown version", `{"model":"emb:int4","input":"a"}`, 404, `unknown version`, "model"},
		{"classifier", `{"model":"cls","input":"a"}`, 400, `use /predict`, ""},
		{"bad json", `{"input":`, 422, `bad JSON body`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := post(t, ts.URL+"/v1/embeddings", tt.body)
			if resp.StatusCode != tt.code || !strings.Contains(body, tt.want) {
				t.Fatalf("got %d %s, want %d containing %q", resp.StatusCode, body, tt.code, tt.want)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			if tt.code == 200 {
				return
			}
			var e OpenAIError
			if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Message == "" || e.Error.Type == "" {
				t.Fatalf("error body %s is not OpenAI's shape", body)
			}
			wantType := "invalid_request_error"
			if e.Error.Type != wantType {
				t.Errorf("type %q, want %q", e.Error.Type, wantType)
			}
			if got := e.Error.Param; (got == nil) != (tt.param == "") || (got != nil && *got != tt.param) {
				t.Errorf("param %v, want %q", got, tt.param)
			}
		})
	}

	// Floats and base64 carry the same unit vectors.
	var fl, b64 OpenAIEmbeddingResponse
	_, body := post(t, ts.URL+"/v1/embeddings", `{"input":["abc","x"]}`)
	json.Unmarshal([]byte(body), &fl)
	_, body = post(t, ts.URL+"/v1/embeddings", `{"input":["abc","x"],"encoding_format":"base64"}`)
	json.Unmarshal([]byte(body), &b64)
	if len(fl.Data) != 2 || len(b64.Data) != 2 {
		t.Fatalf("float %+v, base64 %+v", fl, b64)
	}
	for i := range fl.Data {
		var got []float32
		for _, x := range fl.Data[i].Embedding.([]any) {
			got = append(got, float32(x.(float64)))
		}
		dec := decodeFloats(t, b64.Data[i].Embedding.(string))
		if !slices.Equal(got, dec) || fl.Data[i].Index != i || fl.Data[i].Object != "embedding" {
			t.Errorf("item %d: float %v, base64 %v", i, got, dec)
		}
		if n := math.Hypot(float64(got[0]), float64(got[1])); math.Abs(n-1) > 1e-6 {
			t.Errorf("item %d: norm %v, want a unit vector", i, n)
		}
	}
}

func TestOpenAIErrorMapping(t *testing.T) {
	tests := []struct {
		err        error
		code       int
		typ, ecode string
	}{
		{runtime.ErrClosed, 503, "server_error", "service_unavailable"},
		{context.DeadlineExceeded, 504, "server_error", "timeout"},
		{runtime.ErrQueueFull, 429, "rate_limit_error", "rate_limit_exceeded"},
		{io.ErrUnexpectedEOF, 500, "server_error", ""},
	}
	for _, tt := range tests {
		ts, _ := newCompatServer(t, fakeRepo{"emb": {task: models.TaskEmbed, err: tt.err}})
		resp, body := post(t, ts.URL+"/v1/embeddings", `{"input":"a"}`)
		var e OpenAIError
		if err := json.Unmarshal([]byte(body), &e); err != nil || resp.StatusCode != tt.code || e.Error.Type != tt.typ || (e.Error.Code == nil) != (tt.ecode == "") || (e.Error.Code != nil && *e.Error.Code != tt.ecode) {
			t.Errorf("%v: got %d %s, want %d %s %s", tt.err, resp.StatusCode, body, tt.code, tt.typ, tt.ecode)
		}
	}
}

func getURL(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestKServe(t *testing.T) {
	repo := fakeRepo{"emb": {task: models.TaskEmbed}, "cls": {task: models.TaskClassify}, "rr": {task: models.TaskRerank}}
	ts, s := newCompatServer(t, repo)
	gets := []struct {
		path string
		code int
		want string
	}{
		{"/v2/health/live", 200, `{"live":true}`},
		{"/v2/health/ready", 200, `{"ready":true}`},
		{"/v2/models/emb", 200, `"outputs":[{"name":"embedding","datatype":"FP32","shape":[-1,3]}]`},
		{"/v2/models/emb", 200, `"inputs":[{"name":"text","datatype":"BYTES","shape":[-1,1]}]`},
		{"/v2/models/emb/versions/v1", 200, `"platform":"onnxruntime_onnx"`},
		{"/v2/models/cls", 200, `{"name":"probabilities","datatype":"FP32","shape":[-1,2]},{"name":"label","datatype":"BYTES","shape":[-1]}`},
		{"/v2/models/emb/ready", 200, `"ready":true`},
		{"/v2/models/emb/versions/v1/ready", 200, `"ready":true`},
		{"/v2/models/nope", 404, `{"error":"unknown model \"nope\"`},
		{"/v2/models/emb/versions/v9", 404, `{"error":"unknown version \"emb/v9\"`},
		{"/v2/models/emb/versions/v9/ready", 404, `unknown version`},
		{"/v2/models/rr", 400, `{"error":"model \"rr\" is a rerank model: use /rerank or /v1/rerank"}`},
		{"/v2/models/rr/ready", 400, `use /rerank`},
	}
	for _, tt := range gets {
		if code, body := getURL(t, ts.URL+tt.path); code != tt.code || !strings.Contains(body, tt.want) {
			t.Errorf("GET %s: got %d %s, want %d containing %s", tt.path, code, body, tt.code, tt.want)
		}
	}

	infer := func(texts string) string {
		return `{"id":"r1","inputs":[{"name":"text","shape":[2],"datatype":"BYTES","data":` + texts + `}]}`
	}
	posts := []struct {
		name, path, body string
		code             int
		want             string
	}{
		{"embed", "/v2/models/emb/infer", infer(`["a","bb"]`), 200,
			`"model_name":"emb","model_version":"v1","id":"r1","outputs":[{"name":"embedding","shape":[2,3],"datatype":"FP32","data":[`},
		{"versioned", "/v2/models/emb/versions/v1/infer", infer(`["a","bb"]`), 200, `"shape":[2,3]`},
		{"raw vectors", "/v2/models/emb/infer", `{"inputs":[{"name":"text","shape":[2],"datatype":"BYTES","data":["a","bb"]}],"parameters":{"normalize":false}}`, 200, `"data":[1,1,0,2,1,0]`},
		{"nested data", "/v2/models/emb/infer", `{"inputs":[{"name":"text","shape":[2,1],"datatype":"BYTES","data":[["a"],["bb"]]}],"parameters":{"normalize":false}}`, 200, `"shape":[2,3],"datatype":"FP32","data":[1,1,0,2,1,0]`},
		{"classify", "/v2/models/cls/infer", infer(`["a",""]`), 200, `{"name":"label","shape":[2],"datatype":"BYTES","data":["positive","negative"]}`},
		{"pick an output", "/v2/models/cls/infer", `{"inputs":[{"name":"text","shape":[1],"datatype":"BYTES","data":["a"]}],"outputs":[{"name":"label"}]}`, 200, `"outputs":[{"name":"label","shape":[1],"datatype":"BYTES","data":["positive"]}]}`},
		{"unknown output", "/v2/models/cls/infer", `{"inputs":[{"name":"text","shape":[1],"datatype":"BYTES","data":["a"]}],"outputs":[{"name":"logits"}]}`, 400, `unknown output \"logits\"`},
		{"shape mismatch", "/v2/models/emb/infer", infer(`["a"]`), 400, `has shape [2] (2 elements) but 1 texts`},
		{"negative shape", "/v2/models/emb/infer", `{"inputs":[{"name":"text","shape":[-1],"datatype":"BYTES","data":["a"]}]}`, 400, `must not be negative`},
		{"wrong datatype", "/v2/models/emb/infer", `{"inputs":[{"name":"text","shape":[1],"datatype":"FP32","data":[1.5]}]}`, 400, `want BYTES`},
		{"wrong name", "/v2/models/emb/infer", `{"inputs":[{"name":"input_ids","shape":[1],"datatype":"BYTES","data":["a"]}]}`, 400, `unknown input \"input_ids\"`},
		{"two inputs", "/v2/models/emb/infer", `{"inputs":[]}`, 400, `want exactly one input`},
		{"numbers as bytes", "/v2/models/emb/infer", `{"inputs":[{"name":"text","shape":[1],"datatype":"BYTES","data":[7]}]}`, 400, `data must be a list of strings`},
		{"bad parameter", "/v2/models/emb/infer", `{"inputs":[{"name":"text","shape":[1],"datatype":"BYTES","data":["a"]}],"parameters":{"truncate":"yes"}}`, 400, `must be a bool`},
		{"no texts", "/v2/models/emb/infer", `{"inputs":[{"name":"text","shape":[0],"datatype":"BYTES","data":[]}]}`, 422, `{"error":"inputs is empty`},
		{"unknown model", "/v2/models/nope/infer", infer(`["a","b"]`), 404, `{"error":"unknown model \"nope\"`},
		{"unknown version", "/v2/models/emb/versions/v9/infer", infer(`["a","b"]`), 404, `unknown version`},
		{"bad json", "/v2/models/emb/infer", `{"inputs":`, 422, `{"error":"bad JSON body`},
	}
	for _, tt := range posts {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := post(t, ts.URL+tt.path, tt.body)
			if resp.StatusCode != tt.code || !strings.Contains(body, tt.want) {
				t.Fatalf("got %d %s, want %d containing %s", resp.StatusCode, body, tt.code, tt.want)
			}
			if tt.code != 200 {
				var e map[string]any
				if err := json.Unmarshal([]byte(body), &e); err != nil || len(e) != 1 || e["error"] == "" {
					t.Errorf("error body %s is not KServe's {\"error\": ...}", body)
				}
			}
		})
	}

	s.SetReady(false)
	if code, _ := getURL(t, ts.URL+"/v2/health/ready"); code != 503 {
		t.Errorf("ready while not ready: %d", code)
	}
	if code, _ := getURL(t, ts.URL+"/v2/models/emb/ready"); code != 503 {
		t.Errorf("model ready while not ready: %d", code)
	}
	if code, _ := getURL(t, ts.URL+"/v2/health/live"); code != 200 {
		t.Errorf("live while not ready: %d", code)
	}
}

func TestTokenize(t *testing.T) {
	ts, _ := newCompatServer(t, fakeRepo{"emb": {task: models.TaskEmbed}})
	tests := []struct {
		name, body string
		code       int
		want       string
	}{
		{"single", `{"inputs":"Hello  world"}`, 200,
			`[[{"id":101,"text":"[CLS]","special":true,"start":null,"stop":null},{"id":5,"text":"Hello","special":false,"start":0,"stop":5},{"id":5,"text":"world","special":false,"start":7,"stop":12},{"id":102,"text":"[SEP]","special":true,"start":null,"stop":null}]]`},
		{"batch without special tokens", `{"inputs":["a","bb c"],"add_special_tokens":false}`, 200,
			`[[{"id":1,"text":"a","special":false,"start":0,"stop":1}],[{"id":2,"text":"bb","special":false,"start":0,"stop":2},{"id":1,"text":"c","special":false,"start":3,"stop":4}]]`},
		{"empty text", `{"inputs":"","add_special_tokens":false}`, 200, `[[]]`},
		{"prompt", `{"inputs":"a","prompt_name":"query","add_special_tokens":false}`, 200,
			`[[{"id":6,"text":"query:","special":false,"start":0,"stop":6},{"id":1,"text":"a","special":false,"start":7,"stop":8}]]`},
		{"unknown prompt", `{"inputs":"a","prompt_name":"doc"}`, 422, `prompt_name doc is not one of the fake's prompts`},
		{"named model", `{"inputs":"a","model":"emb"}`, 200, `"id":101`},
		{"unknown model", `{"inputs":"a","model":"nope"}`, 404, `"error_type":"NotFound"`},
		{"empty", `{"inputs":[]}`, 422, `"error_type":"Empty"`},
		{"wrong type", `{"inputs":[1]}`, 422, `inputs[0] is a number, not a string`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := post(t, ts.URL+"/tokenize", tt.body)
			if resp.StatusCode != tt.code || !strings.Contains(body, tt.want) {
				t.Fatalf("got %d %s, want %d containing %s", resp.StatusCode, body, tt.code, tt.want)
			}
		})
	}
}

func TestOpenAPICoversEveryRoute(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Metrics = http.NotFoundHandler() // so that /metrics is routed
	s := New(cfg, compatRepo{fakeRepo{}}, slog.New(slog.DiscardHandler), nil)
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	code, body := getURL(t, ts.URL+"/openapi.json")
	var doc struct {
		OpenAPI string                    `json:"openapi"`
		Paths   map[string]map[string]any `json:"paths"`
	}
	if err := json.Unmarshal([]byte(body), &doc); err != nil || code != 200 || doc.OpenAPI != "3.1.0" {
		t.Fatalf("%d, %v: %.200s", code, err, body)
	}
	routes := 0
	err := chi.Walk(s.Handler().(chi.Routes), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		routes++
		if _, ok := doc.Paths[route][strings.ToLower(method)]; !ok {
			t.Errorf("%s %s is routed but not in openapi.json", method, route)
		}
		return nil
	})
	if err != nil || routes < 15 {
		t.Fatalf("walked %d routes: %v", routes, err)
	}
	// And the reverse: nothing documented that is not served.
	for path, ops := range doc.Paths {
		for method := range ops {
			rctx := chi.NewRouteContext()
			if !s.Handler().(chi.Routes).Match(rctx, strings.ToUpper(method), strings.NewReplacer("{model}", "m", "{version}", "v").Replace(path)) {
				t.Errorf("%s %s is documented but not routed", method, path)
			}
		}
	}
}

func FuzzOpenAIInput(f *testing.F) {
	for _, s := range []string{`"a"`, `["a","b"]`, `[1,2]`, `[[1],[2]]`, `[]`, `null`, `{"a":1}`, `["a",null]`, ` "x" `, `[-1]`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data string) {
		texts, err := parseOpenAIInput(json.RawMessage(data))
		if err != nil {
			return
		}
		// What is accepted is exactly what a string or a list of strings decodes to.
		var s string
		var list []string
		if json.Unmarshal([]byte(data), &s) == nil && len(texts) == 1 && texts[0] == s {
			return
		}
		if json.Unmarshal([]byte(data), &list) != nil || !slices.Equal(list, texts) {
			t.Fatalf("%q: accepted as %q", data, texts)
		}
	})
}

func FuzzInferRequest(f *testing.F) {
	for _, s := range []string{
		`{"inputs":[{"name":"text","shape":[2],"datatype":"BYTES","data":["a","b"]}]}`,
		`{"inputs":[{"name":"text","shape":[2,1],"datatype":"BYTES","data":[["a"],["b"]]}],"parameters":{"truncate":true}}`,
		`{"inputs":[{"name":"text","shape":[9223372036854775807,2],"datatype":"BYTES","data":[]}]}`,
		`{"inputs":[{"name":"text","shape":[0],"datatype":"BYTES","data":[[[[[[[[[["a"]]]]]]]]]]}]}`,
		`{"inputs":[]}`, `{}`, `null`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data string) {
		var req InferRequest
		if decodeJSON([]byte(data), &req) != nil {
			return
		}
		texts, err := req.texts()
		if err != nil {
			return
		}
		n := int64(1)
		for _, d := range req.Inputs[0].Shape {
			n *= d
		}
		if n != int64(len(texts)) || req.Inputs[0].Datatype != "BYTES" {
			t.Fatalf("%q: accepted %d texts for shape %v", data, len(texts), req.Inputs[0].Shape)
		}
	})
}

func TestSplitModelName(t *testing.T) {
	for _, tt := range []struct {
		in, name, version string
		bad               bool
	}{
		{in: "minilm", name: "minilm"}, {in: "minilm/int8", name: "minilm", version: "int8"},
		{in: "minilm:int8", name: "minilm", version: "int8"}, {in: ""},
		{in: "minilm:", bad: true}, {in: ":int8", bad: true}, {in: "/", bad: true}, {in: ":", bad: true}, {in: "minilm/", bad: true},
	} {
		n, v, err := splitModelName(tt.in)
		if (err != nil) != tt.bad || n != tt.name || v != tt.version {
			t.Errorf("%q: got %q %q %v", tt.in, n, v, err)
		}
	}
}

func TestFlatten(t *testing.T) {
	for _, tt := range []struct {
		data  string
		shape []int64
		want  int // texts; -1: refused
	}{
		{`"a"`, []int64{1}, 1},
		{`["a","b","c","d"]`, []int64{2, 2}, 4},
		{`[["a","b"],["c","d"]]`, []int64{2, 2}, 4},
		{`[["a","b"],["c","d"]]`, []int64{4}, -1},
		{`[["a","b"],["c"]]`, []int64{3}, -1},
		{`["hello",[]]`, []int64{1}, -1},
		{`[["a"],"b"]`, []int64{2}, -1},
		{`["a",["b"]]`, []int64{2}, -1},
		{`[[],[]]`, []int64{2, 0}, 0},
		{`null`, []int64{1}, -1},
		{`[null]`, []int64{1}, -1},
		{`[1]`, []int64{1}, -1},
	} {
		got, err := flatten(json.RawMessage(tt.data), tt.shape)
		if (err != nil) != (tt.want < 0) || (err == nil && len(got) != tt.want) {
			t.Errorf("%s shape %v: %d texts, %v", tt.data, tt.shape, len(got), err)
		}
	}
}
