package server

import (
	"log/slog"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/ortserve/ortserve/models"
)

func TestTritonConfigRoutes(t *testing.T) {
	repo := fakeRepo{"emb": {task: models.TaskEmbed}, "cls": {task: models.TaskClassify}, "rr": {task: models.TaskRerank}}
	ts, _ := newCompatServer(t, repo)
	tests := []struct {
		method, path string
		code         int
		want         string // the whole body for a 200, a part of it otherwise
	}{
		{"GET", "/v2/models/emb/config", 200, `{"name":"emb","platform":"onnxruntime_onnx","backend":"onnxruntime","max_batch_size":4,` +
			`"input":[{"name":"text","data_type":"TYPE_STRING","dims":[1]}],"output":[{"name":"embedding","data_type":"TYPE_FP32","dims":[3]}],"dynamic_batching":{}}`},
		{"GET", "/v2/models/cls/config", 200, `{"name":"cls","platform":"onnxruntime_onnx","backend":"onnxruntime","max_batch_size":4,` +
			`"input":[{"name":"text","data_type":"TYPE_STRING","dims":[1]}],"output":[{"name":"probabilities","data_type":"TYPE_FP32","dims":[2]},{"name":"label","data_type":"TYPE_STRING","dims":[]}],"dynamic_batching":{}}`},
		{"GET", "/v2/models/emb/versions/v1/config", 200, `{"name":"emb","platform":"onnxruntime_onnx","backend":"onnxruntime","max_batch_size":4,` +
			`"input":[{"name":"text","data_type":"TYPE_STRING","dims":[1]}],"output":[{"name":"embedding","data_type":"TYPE_FP32","dims":[3]}],"dynamic_batching":{}}`},
		{"GET", "/v2/models/nope/config", 404, `{"error":"unknown model \"nope\"`},
		{"GET", "/v2/models/emb/versions/v9/config", 404, `{"error":"unknown version \"emb/v9\"`},
		{"GET", "/v2/models/emb/versions//config", 404, `unknown version`},
		{"GET", "/v2/models/rr/config", 400, `use /rerank`},
		{"POST", "/v2/models/emb/config", 405, `{"error":"POST is not allowed`},
		{"PUT", "/v2/models/emb/versions/v1/config", 405, `is not allowed`},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			resp, body := do(t, tt.method, ts.URL+tt.path, "", "")
			checkTritonAnswer(t, resp.StatusCode, body, tt.code, tt.want)
		})
	}
}

// TestTritonConfigFollowsMetadata holds the config's dims to the metadata's shapes: with a
// batch, the shapes without their first dimension; without one, the whole shapes.
func TestTritonConfigFollowsMetadata(t *testing.T) {
	for _, mi := range []ModelInfo{
		{Name: "emb", Task: "embed", Dimension: 384},
		{Name: "unknown-width", Task: "embed"},
		{Name: "cls", Task: "classify", Labels: []string{"a", "b", "c"}},
	} {
		md := KServeMetadata(mi)
		for _, maxInputs := range []int{0, 32} {
			c := TritonConfig(mi, maxInputs)
			if c.MaxBatchSize != maxInputs || c.Name != mi.Name || c.Platform != md.Platform {
				t.Errorf("%s, %d inputs: config %+v", mi.Name, maxInputs, c)
			}
			check := func(cts []ConfigTensor, tms []TensorMetadata) {
				if len(cts) != len(tms) {
					t.Fatalf("%s: %d config tensors for %d in the metadata", mi.Name, len(cts), len(tms))
				}
				for i, ct := range cts {
					want := tms[i].Shape
					if maxInputs > 0 {
						want = want[1:]
					}
					if ct.Name != tms[i].Name || !reflect.DeepEqual(ct.Dims, want) || ct.DataType != "TYPE_"+strings.Replace(tms[i].Datatype, "BYTES", "STRING", 1) {
						t.Errorf("%s, %d inputs: config tensor %+v for metadata %+v", mi.Name, maxInputs, ct, tms[i])
					}
				}
			}
			check(c.Input, md.Inputs)
			check(c.Output, md.Outputs)
		}
	}
}

// indexRepo is compatRepo whose versions have the load states of a lazy repository.
type indexRepo struct{ compatRepo }

func (r indexRepo) Describe() []ModelInfo {
	return []ModelInfo{
		{Name: "zeta", Task: "embed", Versions: []string{"v1"}},
		{Name: "emb", Task: "embed", Versions: []string{"v2", "v1", "v3", "v4"}, VersionStates: map[string]models.VersionState{
			"v1": {State: models.StateReady},
			"v2": {State: models.StateUnloaded},
			"v3": {State: models.StateLoading},
			"v4": {State: models.StateFailed, Error: "reading model.onnx: no such file"},
		}},
		{Name: "rr", Task: "rerank", Versions: []string{"v1"}},
	}
}

func TestRepositoryIndex(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxBodyBytes = 1 << 10
	s := New(cfg, indexRepo{compatRepo{fakeRepo{}}}, slog.New(slog.DiscardHandler), nil)
	s.SetReady(true)
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)

	all := `[{"name":"emb","version":"v1","state":"READY","reason":""},` +
		`{"name":"emb","version":"v2","state":"READY","reason":"loads on its first request"},` +
		`{"name":"emb","version":"v3","state":"LOADING","reason":""},` +
		`{"name":"emb","version":"v4","state":"UNAVAILABLE","reason":"reading model.onnx: no such file"},` +
		`{"name":"zeta","version":"v1","state":"READY","reason":""}]`
	ready := `[{"name":"emb","version":"v1","state":"READY","reason":""},` +
		`{"name":"emb","version":"v2","state":"READY","reason":"loads on its first request"},` +
		`{"name":"zeta","version":"v1","state":"READY","reason":""}]`
	tests := []struct {
		name, method, contentType, body string
		code                            int
		want                            string // the whole body for a 200, a part of it otherwise
	}{
		{"tritonclient's: no body, no Content-Type", "POST", "", "", 200, all},
		{"empty object", "POST", "application/json", `{}`, 200, all},
		{"ready only", "POST", "application/json", `{"ready":true}`, 200, ready},
		{"not ready only", "POST", "application/json", `{"ready":false}`, 200, all},
		{"bad JSON", "POST", "application/json", `{"ready":`, 422, `{"error":"bad JSON body`},
		{"not an object", "POST", "application/json", `[true]`, 422, `bad JSON body`},
		{"ready not a bool", "POST", "application/json", `{"ready":"yes"}`, 422, `{"error":"\"ready\" must be a bool"}`},
		{"ready null", "POST", "application/json", `{"ready":null}`, 200, all},
		{"null", "POST", "application/json", `null`, 200, all},
		{"another field", "POST", "application/json", `{"ready":true,"parameters":{}}`, 422, `unknown field \"parameters\"`},
		{"not UTF-8", "POST", "application/json", "{\"ready\":\"\xff\"}", 400, `not valid UTF-8`},
		{"a form", "POST", "application/x-www-form-urlencoded", `ready=true`, 415, `is not accepted here`},
		{"too large", "POST", "application/json", `{"ready":true,"pad":"` + strings.Repeat("x", 2<<10) + `"}`, 413, `over the limit`},
		{"GET", "GET", "", "", 405, `{"error":"GET is not allowed`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := do(t, tt.method, ts.URL+"/v2/repository/index", tt.contentType, tt.body)
			checkTritonAnswer(t, resp.StatusCode, body, tt.code, tt.want)
		})
	}
}

// TestRepositoryIndexEmpty answers an empty repository with an empty list, not null, which
// tritonclient would hand its caller as None.
func TestRepositoryIndexEmpty(t *testing.T) {
	ts, _ := newCompatServer(t, fakeRepo{"rr": {task: models.TaskRerank}})
	if resp, body := do(t, "POST", ts.URL+"/v2/repository/index", "", ""); resp.StatusCode != 200 || strings.TrimSpace(body) != "[]" {
		t.Fatalf("got %d %s, want 200 []", resp.StatusCode, body)
	}
}

// checkTritonAnswer holds an answer to its status and body: a 200's body exactly want, an
// error's containing want, in KServe's {"error": ...} shape.
func checkTritonAnswer(t *testing.T, code int, body string, wantCode int, want string) {
	t.Helper()
	if code != wantCode || wantCode == 200 && strings.TrimSpace(body) != want || !strings.Contains(body, want) {
		t.Fatalf("got %d %s, want %d with %s", code, body, wantCode, want)
	}
	if code != 200 && shapeOf(body) != "kserve" {
		t.Errorf("error body %s is not KServe's {\"error\": ...}", body)
	}
}
