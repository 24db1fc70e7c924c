package server

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/ortserve/ortserve/models"
)

// shapeOf names the error shape of a body: "tei", "openai", "kserve", or "" for none.
func shapeOf(body string) string {
	var v map[string]json.RawMessage
	if json.Unmarshal([]byte(body), &v) != nil {
		return ""
	}
	e, ok := v["error"]
	switch {
	case !ok:
		return ""
	case len(e) > 0 && e[0] == '{':
		var d OpenAIErrorDetail
		if json.Unmarshal(e, &d) == nil && d.Message != "" && d.Type != "" {
			return "openai"
		}
	case v["error_type"] != nil && len(v) == 2:
		return "tei"
	case len(v) == 1:
		return "kserve"
	}
	return ""
}

func do(t *testing.T, method, url, contentType, body string, header ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp, string(data)
}

const kserveBody = `{"inputs":[{"name":"text","shape":[1],"datatype":"BYTES","data":["a"]}]}`

// TestStrictInput: what is not a text is refused, on every route, in the route's shape.
func TestStrictInput(t *testing.T) {
	ts, _ := newCompatServer(t, fakeRepo{"emb": {task: models.TaskEmbed}, "cls": {task: models.TaskClassify}})
	const json = "application/json"
	tests := []struct {
		name, method, path, ct, body string
		code                         int
		shape, want                  string
	}{
		{"text/plain", "POST", "/embed", "text/plain", `{"inputs":"a"}`, 415, "tei", "application/json"},
		{"form", "POST", "/predict", "application/x-www-form-urlencoded", `{"inputs":"a"}`, 415, "tei", "application/json"},
		{"no content type", "POST", "/tokenize", "", `{"inputs":"a"}`, 415, "tei", "no Content-Type"},
		{"openai text/plain", "POST", "/v1/embeddings", "text/plain", `{"input":"a"}`, 415, "openai", "application/json"},
		{"kserve text/plain", "POST", "/v2/models/emb/infer", "text/plain", kserveBody, 415, "kserve", "application/json"},
		{"other charset", "POST", "/embed", "application/json; charset=latin1", `{"inputs":"a"}`, 415, "tei", "UTF-8"},
		{"charset utf-8", "POST", "/embed", "application/json; charset=UTF-8", `{"inputs":"a"}`, 200, "", ""},
		{"kserve without Content-Type", "POST", "/v2/models/emb/infer", "", kserveBody, 200, "", ""},
		{"kserve without Content-Type from a browser", "POST", "/v2/models/emb/infer?origin", "", kserveBody, 415, "kserve", "no Content-Type"},
		{"octet-stream off kserve", "POST", "/embed", "application/octet-stream", `{"inputs":"a"}`, 415, "tei", ""},
		{"null text", "POST", "/embed", json, `{"inputs":[null]}`, 422, "tei", "inputs[0] is null"},
		{"number text", "POST", "/embed", json, `{"inputs":["a",1]}`, 422, "tei", "inputs[1] is a number"},
		{"null text tokenize", "POST", "/tokenize", json, `{"inputs":[null]}`, 422, "tei", "inputs[0] is null"},
		{"null text predict", "POST", "/predict", json, `{"inputs":[null]}`, 422, "tei", "inputs[0] is null"},
		{"null in a pair", "POST", "/predict", json, `{"inputs":[["a"],[null]]}`, 422, "tei", "inputs[1][0] is null"},
		{"kserve null data", "POST", "/v2/models/emb/infer", json, `{"inputs":[{"name":"text","shape":[1],"datatype":"BYTES","data":null}]}`, 400, "kserve", "list of strings"},
		{"kserve null element", "POST", "/v2/models/emb/infer", json, `{"inputs":[{"name":"text","shape":[1],"datatype":"BYTES","data":[null]}]}`, 400, "kserve", "list of strings"},
		{"invalid utf-8", "POST", "/embed", json, "{\"inputs\":\"a\xffb\"}", 400, "tei", "UTF-8"},
		{"invalid utf-8 openai", "POST", "/v1/embeddings", json, "{\"input\":\"a\xc3\"}", 400, "openai", "UTF-8"},
		{"invalid utf-8 kserve", "POST", "/v2/models/emb/infer", json, "{\"inputs\":[{\"name\":\"text\",\"shape\":[1],\"datatype\":\"BYTES\",\"data\":[\"\xed\xa0\x80\"]}]}", 400, "kserve", "UTF-8"},
		{"lone high surrogate", "POST", "/embed", json, `{"inputs":"a\ud800b"}`, 400, "tei", "surrogate"},
		{"lone low surrogate", "POST", "/tokenize", json, `{"inputs":"\udc00"}`, 400, "tei", "surrogate"},
		{"surrogate pair", "POST", "/embed", json, `{"inputs":"\ud83d\ude00"}`, 200, "", ""},
		{"escaped backslash u", "POST", "/embed", json, `{"inputs":"\\ud800"}`, 200, "", ""},
		{"openai model colon", "POST", "/v1/embeddings", json, `{"input":"a","model":"emb:"}`, 400, "openai", `emb:`},
		{"openai version only", "POST", "/v1/embeddings", json, `{"input":"a","model":":v1"}`, 400, "openai", `:v1`},
		{"openai slash", "POST", "/v1/embeddings", json, `{"input":"a","model":"/"}`, 400, "openai", `give a model name`},
		{"kserve empty version", "POST", "/v2/models/emb/versions//infer", json, kserveBody, 404, "kserve", "unknown version"},
		{"kserve empty version metadata", "GET", "/v2/models/emb/versions/", "", "", 404, "kserve", ""},
		{"tei unknown route", "POST", "/nope", json, `{}`, 404, "tei", "no such route"},
		{"openai unknown route", "POST", "/v1/chat/completions", json, `{}`, 404, "openai", "no such route"},
		{"kserve unknown route", "POST", "/v2/repository/models/emb/load", "", "", 404, "kserve", "no such route"},
		{"tei wrong method", "GET", "/embed", "", "", 405, "tei", "GET is not allowed"},
		{"openai wrong method", "GET", "/v1/embeddings", "", "", 405, "openai", "GET is not allowed"},
		{"kserve wrong method", "GET", "/v2/models/emb/infer", "", "", 405, "kserve", "GET is not allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path, browser := strings.CutSuffix(tt.path, "?origin")
			var header []string
			if browser {
				header = []string{"Origin", "https://evil.example"}
			}
			resp, body := do(t, tt.method, ts.URL+path, tt.ct, tt.body, header...)
			if resp.StatusCode != tt.code || !strings.Contains(body, tt.want) {
				t.Errorf("got %d %s, want %d containing %q", resp.StatusCode, body, tt.code, tt.want)
			}
			if tt.code >= 400 {
				if got := shapeOf(body); got != tt.shape {
					t.Errorf("error shape %q, want %q: %s", got, tt.shape, body)
				}
				if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
					t.Errorf("Content-Type %q", ct)
				}
			}
		})
	}
}

// FuzzLoneSurrogate: a body that hasLoneSurrogate and utf8.Valid pass decodes into strings
// that hold U+FFFD only where the body wrote one (raw, or as \ufffd): nothing was replaced.
func FuzzLoneSurrogate(f *testing.F) {
	for _, s := range []string{`"a\ud800"`, `"\ud83d\ude00"`, `"\\ud800"`, `["\udc00x"]`, `"\ud800\u0041"`, `"\ud800`, `"\uzzzz"`, `"\ufffd"`, `{"a":"\ud800\ud800\udc00"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !utf8.Valid(data) || hasLoneSurrogate(data) {
			return
		}
		var v any
		if json.Unmarshal(data, &v) != nil {
			return
		}
		wrote := strings.Count(strings.ToLower(string(data)), `\ufffd`) + strings.Count(string(data), "\uFFFD")
		if got := countReplacement(v); got > wrote {
			t.Fatalf("%q decoded to %d U+FFFD, the body wrote %d", data, got, wrote)
		}
	})
}

func countReplacement(v any) int {
	switch v := v.(type) {
	case string:
		return strings.Count(v, "\uFFFD")
	case []any:
		n := 0
		for _, x := range v {
			n += countReplacement(x)
		}
		return n
	case map[string]any:
		n := 0
		for k, x := range v {
			n += strings.Count(k, "\uFFFD") + countReplacement(x)
		}
		return n
	}
	return 0
}

// TestAPIKey: with keys, every route but the exempt ones wants one, in constant time, and
// says what to send in the route's shape.
func TestAPIKey(t *testing.T) {
	cfg := DefaultConfig()
	cfg.APIKeys = []string{"k1", "second-key"}
	cfg.AuthExempt = []string{"health"}
	s := New(cfg, compatRepo{fakeRepo{"emb": {task: models.TaskEmbed}}}, slog.New(slog.DiscardHandler), nil)
	s.SetReady(true)
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	routes := []struct{ method, path, body, shape string }{
		{"POST", "/embed", `{"inputs":"a"}`, "tei"},
		{"POST", "/predict", `{"inputs":"a"}`, "tei"},
		{"POST", "/tokenize", `{"inputs":"a"}`, "tei"},
		{"GET", "/info", "", "tei"},
		{"GET", "/openapi.json", "", "tei"},
		{"POST", "/v1/embeddings", `{"input":"a"}`, "openai"},
		{"POST", "/v2/models/emb/infer", kserveBody, "kserve"},
		{"GET", "/v2/models/emb", "", "kserve"},
		{"POST", "/nope", "{}", "tei"},
	}
	for _, rt := range routes {
		for _, auth := range []string{"", "Bearer wrong", "Basic k1", "Bearer k1x"} {
			resp, body := do(t, rt.method, ts.URL+rt.path, "application/json", rt.body, "Authorization", auth)
			if resp.StatusCode != 401 || shapeOf(body) != rt.shape || resp.Header.Get("WWW-Authenticate") == "" {
				t.Errorf("%s %s with %q: %d %s", rt.method, rt.path, auth, resp.StatusCode, body)
			}
		}
		for _, h := range [][]string{{"Authorization", "Bearer k1"}, {"Authorization", "bearer second-key"}, {"api-key", "k1"}} {
			if resp, body := do(t, rt.method, ts.URL+rt.path, "application/json", rt.body, h...); resp.StatusCode == 401 {
				t.Errorf("%s %s with %v: %d %s", rt.method, rt.path, h, resp.StatusCode, body)
			}
		}
	}
	for _, path := range []string{"/health", "/v2/health/live", "/v2/health/ready"} {
		if resp, body := do(t, "GET", ts.URL+path, "", ""); resp.StatusCode != 200 {
			t.Errorf("exempt %s: %d %s", path, resp.StatusCode, body)
		}
	}
	if err := ParseAuthExempt([]string{"health", "metrics", "embed"}); err == nil {
		t.Error("--auth-exempt embed accepted")
	}
}

func TestAllowedHosts(t *testing.T) {
	cfg := DefaultConfig()
	cfg.AllowedHosts = []string{"localhost", "ortserve.internal"}
	s := New(cfg, compatRepo{fakeRepo{"emb": {task: models.TaskEmbed}}}, slog.New(slog.DiscardHandler), nil)
	s.SetReady(true)
	h := s.Handler()
	for _, tt := range []struct {
		host, path string
		code       int
		shape      string
	}{
		{"localhost:8080", "/health", 200, ""},
		{"ORTSERVE.internal.", "/health", 200, ""},
		{"evil.example", "/health", 403, "tei"},
		{"127.0.0.1:8080", "/v1/embeddings", 403, "openai"},
		{"rebind.attacker.test", "/v2/health/ready", 403, "kserve"},
	} {
		req := httptest.NewRequest("GET", tt.path, nil)
		req.Host = tt.host
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != tt.code || (tt.shape != "" && shapeOf(w.Body.String()) != tt.shape) {
			t.Errorf("Host %s %s: %d %s", tt.host, tt.path, w.Code, w.Body)
		}
	}
}

// trickleModel counts the requests that reach it.
type trickleModel struct {
	fakeModel
	mu    sync.Mutex
	calls int
}

func (m *trickleModel) Embed(ctx context.Context, version string, texts []string, o models.EmbedOptions) ([][]float32, models.Stats, error) {
	m.mu.Lock()
	m.calls++
	m.mu.Unlock()
	return m.fakeModel.Embed(ctx, version, texts, o)
}

// TestSlowBodyHoldsNoSlot: clients that trickle their bodies hold no in-flight slot, so a
// normal request is served even when there are more of them than slots.
func TestSlowBodyHoldsNoSlot(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxInFlight = 2
	m := &trickleModel{fakeModel: fakeModel{task: models.TaskEmbed}}
	s := New(cfg, oneRepo{m}, slog.New(slog.DiscardHandler), nil)
	s.SetReady(true)
	const (
		slow = 5
		sent = `{"inp` // of a 100-byte body
	)
	// waiting has a token for each slow request whose handler has read what its client sent
	// and asked for more: it is past the head, and past anything the server would do before
	// reading the body, a slot taken included.
	waiting := make(chan struct{}, slow)
	h := s.Handler()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Slow") != "" {
			r.Body = &starvedBody{ReadCloser: r.Body, sent: len(sent), waiting: waiting}
		}
		h.ServeHTTP(w, r)
	}))
	defer ts.Close()
	for range slow {
		c, err := net.Dial("tcp", ts.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, "POST /embed HTTP/1.1\r\nHost: x\r\nX-Slow: 1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"+sent)
	}
	for i := range slow {
		select {
		case <-waiting:
		case <-time.After(time.Minute):
			t.Fatalf("%d of %d slow requests reached their body reads in a minute: the others were answered without reading it (a slot taken first, and 429?)", i, slow)
		}
	}
	// Every slow request is in its handler, waiting for the rest of its body; a normal
	// request must still get a slot at once.
	if resp, body := post(t, ts.URL+"/embed", `{"inputs":"a"}`); resp.StatusCode != 200 {
		t.Fatalf("a normal request behind %d slow bodies: %d %s", slow, resp.StatusCode, body)
	}
	m.mu.Lock()
	calls := m.calls
	m.mu.Unlock()
	if calls != 1 {
		t.Errorf("%d requests reached the model, want 1", calls)
	}
}

// starvedBody is a request body that signals waiting, once, when its reader has read the
// sent bytes the client sent and asks for more, which the client never sends.
type starvedBody struct {
	io.ReadCloser
	sent, read int
	signalled  bool
	waiting    chan<- struct{}
}

func (b *starvedBody) Read(p []byte) (int, error) {
	if b.read >= b.sent && !b.signalled {
		b.signalled = true
		b.waiting <- struct{}{}
	}
	n, err := b.ReadCloser.Read(p)
	b.read += n
	return n, err
}

// liveRepo's models change under the server, as a hot reload changes them.
type liveRepo struct {
	fakeRepo
	mu       sync.Mutex
	versions []string
}

func (r *liveRepo) Describe() []ModelInfo {
	r.mu.Lock()
	defer r.mu.Unlock()
	return []ModelInfo{{Name: "emb", Task: "embed", Versions: append([]string(nil), r.versions...), DefaultVersion: "v1", Dimension: 3}}
}

func (r *liveRepo) Model(name string) (ModelInfo, error) { return modelIn(r.Describe(), name) }

// TestModelListIsLive: KServe's metadata and infer, and /info, see a version a reload adds.
func TestModelListIsLive(t *testing.T) {
	repo := &liveRepo{fakeRepo: fakeRepo{"emb": {task: models.TaskEmbed}}, versions: []string{"v1"}}
	s := New(DefaultConfig(), repo, slog.New(slog.DiscardHandler), nil)
	s.SetReady(true)
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	if resp, _ := do(t, "POST", ts.URL+"/v2/models/emb/versions/v2/infer", "application/json", kserveBody); resp.StatusCode != 404 {
		t.Fatalf("v2 before the reload: %d", resp.StatusCode)
	}
	repo.mu.Lock()
	repo.versions = append(repo.versions, "v2")
	repo.mu.Unlock()
	if resp, body := do(t, "POST", ts.URL+"/v2/models/emb/versions/v2/infer", "application/json", kserveBody); resp.StatusCode != 200 {
		t.Errorf("v2 after the reload: %d %s", resp.StatusCode, body)
	}
	if _, body := do(t, "GET", ts.URL+"/v2/models/emb", "", ""); !strings.Contains(body, `"v2"`) {
		t.Errorf("metadata after the reload: %s", body)
	}
	if _, body := do(t, "GET", ts.URL+"/info", "", ""); !strings.Contains(body, `"v2"`) {
		t.Errorf("/info after the reload: %s", body)
	}
}

func TestRedactPaths(t *testing.T) {
	root := t.TempDir()
	for _, tt := range []struct{ in, want string }{
		{"", ""},
		{"models: " + root + "/minilm/model.yaml:3: unknown key", "models: minilm/model.yaml:3: unknown key"},
		{`open "` + root + `/minilm/fp32.onnx": no such file`, `open "minilm/fp32.onnx": no such file`},
		{"load /usr/lib/x86_64-linux-gnu/libcublas.so.13 failed (dlopen /opt/x/y.so)", "load libcublas.so.13 failed (dlopen y.so)"},
		{"ratio 1/2 and a/b stay", "ratio 1/2 and a/b stay"},
		{"Load model from " + root + "/m/v.onnx failed:Protobuf parsing failed.", "Load model from m/v.onnx failed:Protobuf parsing failed."},
	} {
		if got := redactPaths(tt.in, root); got != tt.want {
			t.Errorf("%q:\n got %q\nwant %q", tt.in, got, tt.want)
		}
	}
}
