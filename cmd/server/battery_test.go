//go:build cgo && ort

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// The bad-input battery: over 900 malformed requests, generated as the cross
// product of every inference route and the ways a body, a header, a method, a path or a model
// name can be wrong, against one real server on loopback. Every one must be refused with the
// 4xx the table states, as JSON in the route's API shape, and the server must serve a good
// request afterwards. docs/api.md's Errors section is the contract the table holds it to.

// Limits the battery's server runs with: small, so that cases over them are cheap to send.
const (
	batteryMaxInputs = 8
	batteryMaxBody   = 64 << 10
)

// apiShape is the error body an API family answers with.
type apiShape int

const (
	shapeTEI    apiShape = iota // {"error": str, "error_type": str}
	shapeOpenAI                 // {"error": {"message", "type", "param", "code"}}
	shapeKServe                 // {"error": str}
)

func shapeOfPath(path string) apiShape {
	switch {
	case path == "/v1" || strings.HasPrefix(path, "/v1/"):
		return shapeOpenAI
	case path == "/v2" || strings.HasPrefix(path, "/v2/"):
		return shapeKServe
	}
	return shapeTEI
}

// routeKind is a column of the expectation table: the inference routes differ in what they
// take and how they say no.
type routeKind int

const (
	kEmbed routeKind = iota
	kPredict
	kTokenize
	kOpenAI
	kKServe // both infer routes, with and without a version
	nKinds
)

// codes is the status each kind of route must answer a malformation with; 0: the
// malformation is not one for that route (a nested list is a batch to /predict).
type codes [nKinds]int

// every is the same status on every route.
func every(code int) codes { return codes{code, code, code, code, code} }

// batteryRoute is one inference route and how a request to it carries its texts.
type batteryRoute struct {
	path string
	kind routeKind
	note string // what tells two routes on one path apart, in case names
	// wrap makes a request body with texts (raw JSON) where the route takes its inputs.
	wrap func(texts string) string
}

func (r batteryRoute) good() string { return r.wrap(`["hello world"]`) }

// kserveBody is a KServe infer body with one input "text" of the given shape and data.
func kserveBody(shape, data string) string {
	return `{"inputs":[{"name":"text","shape":` + shape + `,"datatype":"BYTES","data":` + data + `}]}`
}

func batteryRoutes() []batteryRoute {
	tei := func(texts string) string { return `{"inputs":` + texts + `}` }
	kserve := func(texts string) string { return kserveBody("[1]", texts) }
	return []batteryRoute{
		{"/embed", kEmbed, "", tei},
		// /embed_sparse takes /embed's inputs; the battery's models have no SPLADE one, so a
		// good request is refused (424) after every check these rows make.
		{"/embed_sparse", kEmbed, "", tei},
		{"/predict", kPredict, "", tei},
		{"/tokenize", kTokenize, "", tei},
		{"/v1/embeddings", kOpenAI, "", func(texts string) string { return `{"model":"minilm","input":` + texts + `}` }},
		{"/v2/models/minilm/infer", kKServe, "", kserve},
		{"/v2/models/minilm/versions/int8/infer", kKServe, "", kserve},
		// TEI's root route does what its model's task does: the first model's (minilm, embed)
		// by default, the classifier's when the body names it.
		{"/", kEmbed, "", tei},
		{"/", kPredict, "sentiment: ", func(texts string) string { return `{"model":"sentiment","inputs":` + texts + `}` }},
		// TEI's other routes that take texts answer a malformation as /embed does.
		{"/embed_all", kEmbed, "", tei},
		{"/invocations", kEmbed, "", tei},
		{"/similarity", kEmbed, "", func(texts string) string {
			return `{"inputs":{"source_sentence":"hello","sentences":` + texts + `}}`
		}},
		{"/vertex", kEmbed, "", func(texts string) string { return `{"instances":[{"inputs":` + texts + `}]}` }},
	}
}

// badRequest is one row of the battery.
type badRequest struct {
	name   string
	method string // "" is POST
	path   string
	ctype  string // "" is application/json; noContentType sends none
	header map[string]string
	body   string
	want   int
}

const noContentType = "-"

// batteryCases generates the table.
func batteryCases() []badRequest {
	var cases []badRequest
	add := func(name, path, body string, want int) {
		cases = append(cases, badRequest{name: name, path: path, body: body, want: want})
	}
	long := strings.Repeat("word ", 400) // over the models' 256 tokens
	routes := batteryRoutes()

	// Bodies that are not one JSON object of the route's request, most made from a good one.
	bodies := []struct {
		name string
		make func(good string) string
		want codes
	}{
		{"not JSON", func(string) string { return "hello" }, every(422)},
		{"empty body", func(string) string { return "" }, every(422)},
		{"whitespace only", func(string) string { return " \n\t " }, every(422)},
		{"truncated JSON", func(g string) string { return g[:len(g)-1] }, every(422)},
		{"truncated inside a string", func(g string) string { return g[:strings.Index(g, "hello")+3] }, every(422)},
		{"trailing object", func(g string) string { return g + `{}` }, every(422)},
		{"trailing copy", func(g string) string { return g + "\n" + g }, every(422)},
		{"trailing garbage", func(g string) string { return g + " x" }, every(422)},
		{"trailing comma", func(g string) string { return g + "," }, every(422)},
		{"trailing brace", func(g string) string { return g + "}" }, every(422)},
		{"trailing bracket", func(g string) string { return g + "]" }, every(422)},
		{"byte order mark", func(g string) string { return "\xef\xbb\xbf" + g }, every(422)},
		{"single quotes", func(g string) string { return strings.ReplaceAll(g, `"`, `'`) }, every(422)},
		{"raw control character in a string", func(g string) string { return strings.Replace(g, "hello", "hel\x01lo", 1) }, every(422)},
		{"bad escape", func(g string) string { return strings.Replace(g, "hello", `hel\qlo`, 1) }, every(422)},
		{"short unicode escape", func(g string) string { return strings.Replace(g, "hello", `hel\u12`, 1) }, every(422)},
		{"top-level list", func(g string) string { return "[" + g + "]" }, every(422)},
		{"top-level string", func(string) string { return `"hello world"` }, every(422)},
		{"top-level number", func(string) string { return `42` }, every(422)},
		{"top-level bool", func(string) string { return `true` }, every(422)},
		{"top-level null", func(string) string { return `null` }, codes{422, 422, 422, 400, 400}},
		{"empty object", func(string) string { return `{}` }, codes{422, 422, 422, 400, 400}},
		{"invalid UTF-8 in a text", func(g string) string { return strings.Replace(g, "hello", "hel\xfflo", 1) }, every(400)},
		{"overlong UTF-8 in a text", func(g string) string { return strings.Replace(g, "hello", "hel\xc0\xaflo", 1) }, every(400)},
		{"UTF-8 encoded surrogate in a text", func(g string) string { return strings.Replace(g, "hello", "hel\xed\xa0\x80lo", 1) }, every(400)},
		{"truncated UTF-8 sequence in a text", func(g string) string { return strings.Replace(g, "hello", "hel\xe2\x82lo", 1) }, every(400)},
		{"invalid UTF-8 in a key", func(g string) string { return strings.Replace(g, `{"`, "{\"\xff", 1) }, every(400)},
		{"lone high surrogate escape", func(g string) string { return strings.Replace(g, "hello", `\ud800`, 1) }, every(400)},
		{"lone low surrogate escape", func(g string) string { return strings.Replace(g, "hello", `\udc00`, 1) }, every(400)},
		{"surrogates reversed", func(g string) string { return strings.Replace(g, "hello", `\udc00\ud800`, 1) }, every(400)},
		{"high surrogate then a letter escape", func(g string) string { return strings.Replace(g, "hello", `\ud800\u0041`, 1) }, every(400)},
		{"high surrogate at the end of a string", func(g string) string { return strings.Replace(g, "hello world", `hello\uD83D`, 1) }, every(400)},
		{"nesting past the decoder's depth", func(string) string { return strings.Repeat("[", 20000) + strings.Repeat("]", 20000) }, every(422)},
		{"over --max-body-bytes", func(g string) string {
			return strings.Replace(g, "hello world", strings.Repeat("a", batteryMaxBody), 1)
		}, every(413)},
	}
	for _, r := range routes {
		for _, b := range bodies {
			if code := b.want[r.kind]; code != 0 {
				add(r.note+"body "+b.name, r.path, b.make(r.good()), code)
			}
		}
	}

	// Texts that are not a string or a list of strings, in the place the route takes them.
	texts := []struct {
		name, texts string
		want        codes
	}{
		{"null", `null`, codes{422, 422, 422, 400, 400}},
		{"a number", `1`, codes{422, 422, 422, 400, 400}},
		{"a huge number", `1e999`, codes{422, 422, 422, 400, 400}},
		{"a bool", `true`, codes{422, 422, 422, 400, 400}},
		{"an object", `{"text":"hello"}`, codes{422, 422, 422, 400, 400}},
		{"an empty object", `{}`, codes{422, 422, 422, 400, 400}},
		{"[null]", `[null]`, codes{422, 422, 422, 400, 400}},
		{"[1]", `[1]`, codes{422, 422, 422, 400, 400}},
		{"[-1]", `[-1]`, codes{422, 422, 422, 400, 400}},
		{"[true]", `[true]`, codes{422, 422, 422, 400, 400}},
		{"[{}]", `[{}]`, codes{422, 422, 422, 400, 400}},
		{"a string then null", `["hello",null]`, codes{422, 422, 422, 400, 400}},
		{"a string then a number", `["hello",1]`, codes{422, 422, 422, 400, 400}},
		{"[[]]", `[[]]`, codes{422, 422, 422, 400, 400}},
		{"[[1,2]]", `[[1,2]]`, codes{422, 422, 422, 400, 400}},
		{"nested lists too deep", strings.Repeat("[", 10) + `"hello"` + strings.Repeat("]", 10), codes{422, 422, 422, 400, 400}},
		{"a list of lists", `[["hello"]]`, codes{422, 0, 422, 400, 0}}, // a batch to /predict, a 2-D tensor to KServe
		{"empty list", `[]`, codes{422, 422, 422, 422, 400}},
		{"a text too many", manyTexts(batteryMaxInputs + 1), codes{413, 422, 413, 413, 400}}, // /predict: a "pair" of 9; KServe: shape [1]
	}
	for _, r := range routes {
		for _, x := range texts {
			if code := x.want[r.kind]; code != 0 {
				add(r.note+"inputs "+x.name, r.path, r.wrap(x.texts), code)
			}
		}
	}

	// Headers and methods.
	ctypes := []struct{ ctype, name string }{
		{"text/plain", "text/plain"},
		{"text/plain; charset=utf-8", "text/plain with charset"},
		{"application/x-www-form-urlencoded", "a form"},
		{"multipart/form-data; boundary=x", "multipart"},
		{noContentType, "none"},
		{"application/json; charset=latin1", "JSON in latin1"},
		{"application/jsonx", "application/jsonx"},
		{"json", "not a media type"},
		{"application/json;;", "broken parameters"},
	}
	for _, r := range routes {
		for _, ct := range ctypes {
			if ct.ctype == noContentType && r.kind == kKServe {
				continue // tritonclient sends none: KServe's infer refuses it only from a browser (below)
			}
			cases = append(cases, badRequest{name: r.note + "Content-Type " + ct.name, path: r.path, ctype: ct.ctype, body: r.good(), want: 415})
		}
		// A browser's cross-origin "simple" request: no preflight, so the server must refuse it.
		for _, ct := range []string{noContentType, "text/plain"} {
			cases = append(cases, badRequest{name: r.note + "cross-origin Content-Type " + ct, path: r.path, ctype: ct,
				header: map[string]string{"Origin": "http://evil.example"}, body: r.good(), want: 415})
		}
		if r.kind != kKServe { // KServe's binary extension takes octet-stream
			cases = append(cases, badRequest{name: r.note + "Content-Type octet-stream", path: r.path, ctype: "application/octet-stream", body: r.good(), want: 415})
		}
		for _, m := range []string{http.MethodGet, http.MethodPut, http.MethodDelete, http.MethodPatch} {
			cases = append(cases, badRequest{name: r.note + "method " + m, method: m, path: r.path, body: r.good(), want: 405})
		}
		if r.kind == kTokenize {
			continue // not an inference route: no deadline to set
		}
		for _, h := range []string{"abc", "-5", "0", "-1ms", "5 ms", "NaN", "1e400", "Inf", "1e300", "9223372036854775807s"} {
			cases = append(cases, badRequest{name: r.note + "X-Request-Timeout " + h, path: r.path, header: map[string]string{"X-Request-Timeout": h}, body: r.good(), want: 400})
		}
	}

	// Unknown routes under each prefix answer 404 in the prefix's shape.
	for _, p := range []string{
		"/embeds", "/embed/", "/embed/minilm", "/predicts", "/predict/x", "/tokenize/x", "/rerank/x", "/embed_sparse/", "/embed_sparses", "/nosuch",
		"/v1", "/v1/", "/v1/embedding", "/v1/embeddings/", "/v1/embeddings/x", "/v1/rerank/x", "/v1/chat/completions", "/v1/completions", "/v1/nosuch",
		"/v2/nosuch", "/v2/models", "/v2/models/", "/v2/models/minilm/infer/", "/v2/models/minilm/infer/x", "/v2/models/minilm/versions/int8/infer/",
		"/v2/models/minilm/versions/int8/infer/x", "/v2/models/minilm/versions", "/v2/models/minilm/generate", "/v2/repository", "/v2/repository/index/",
		"/v2/repository/models/minilm/load", "/v2/models/minilm/config/x",
	} {
		add("unknown route", p, `{"inputs":"hello"}`, 404)
	}
	for _, p := range []string{"/v2/models/nosuch", "/v2/models/nosuch/ready", "/v2/models/minilm/versions/nosuch", "/v2/models/minilm/versions/nosuch/ready", "/v2/models/minilm/versions/",
		"/v2/models/nosuch/config", "/v2/models/nosuch/versions/int8/config", "/v2/models/minilm/versions/nosuch/config", "/v2/models/minilm/versions//config", "/v2/models/MINILM/config"} {
		cases = append(cases, badRequest{name: "unknown model or version", method: http.MethodGet, path: p, want: 404})
	}
	for _, p := range []string{"/health", "/ping", "/info", "/metrics", "/openapi.json", "/api-doc/openapi.json", "/v1/models", "/v1/models/minilm", "/v2/health/live", "/v2/health/ready", "/v2/models/minilm", "/v2/models/minilm/ready",
		"/v2/models/minilm/config", "/v2/models/minilm/versions/int8/config"} {
		add("POST to a GET route", p, `{}`, 405)
	}
	for _, p := range []string{"/v1/models/nosuch", "/v1/models/minilm/nosuch", "/v1/models/minilm/fp32/x"} {
		cases = append(cases, badRequest{name: "unknown OpenAI model", method: http.MethodGet, path: p, want: 404})
	}
	for _, method := range []string{http.MethodGet, http.MethodPut, http.MethodDelete} {
		cases = append(cases, badRequest{name: method + " to the repository index", method: method, path: "/v2/repository/index", want: 405})
	}
	for _, tc := range []struct {
		name, ctype, body string
		want              int
	}{
		{"not JSON", "", "hello", 422},
		{"a list", "", `[]`, 422},
		{"a string", "", `"ready"`, 422},
		{"ready a string", "", `{"ready":"yes"}`, 422},
		{"ready a number", "", `{"ready":1}`, 422},
		{"an unknown field", "", `{"inputs":"hello"}`, 422},
		{"Triton's load parameters", "", `{"parameters":{"config":"{}"}}`, 422},
		{"trailing data", "", `{"ready":true}{}`, 422},
		{"not UTF-8", "", "{\"ready\":\"\xff\"}", 400},
		{"text/plain", "text/plain", `{"ready":true}`, 415},
		{"a form", "application/x-www-form-urlencoded", `ready=true`, 415},
		{"over the body limit", "", `{"ready":true,"x":"` + strings.Repeat("x", batteryMaxBody) + `"}`, 413},
	} {
		cases = append(cases, badRequest{name: "repository index: " + tc.name, path: "/v2/repository/index", ctype: tc.ctype, body: tc.body, want: tc.want})
	}

	// Model names and versions.
	for _, name := range []string{"nosuch", "minilm:", ":int8", "/", "minilm/int8", "minilm:int8", "MINILM", " minilm", "../minilm"} {
		for _, path := range []string{"/embed", "/predict", "/tokenize"} {
			add(fmt.Sprintf("model %q", name), path, fmt.Sprintf(`{"inputs":"hello","model":%q}`, name), 404)
		}
	}
	for _, path := range []string{"/embed", "/predict", "/tokenize"} {
		add("model a number", path, `{"inputs":"hello","model":1}`, 422)
		add("model a list", path, `{"inputs":"hello","model":["minilm"]}`, 422)
	}
	for _, path := range []string{"/embed", "/predict"} {
		add("version unknown", path, `{"inputs":"hello","version":"nosuch"}`, 404)
		add("version fp32, not served here", path, `{"inputs":"hello","version":"fp32"}`, 404)
		add("version a number", path, `{"inputs":"hello","version":8}`, 422)
		add("truncate false, too long", path, `{"inputs":"`+long+`","truncate":false}`, 413)
		add("truncate a string", path, `{"inputs":"hello","truncate":"no"}`, 422)
	}
	add("wrong task: /embed on the classifier", "/embed", `{"inputs":"hello","model":"sentiment"}`, 400)
	add("wrong task: /predict on the embedder", "/predict", `{"inputs":"hello","model":"minilm"}`, 400)
	add("normalize a string", "/embed", `{"inputs":"hello","normalize":"yes"}`, 422)
	for _, tc := range []struct{ name, fields string }{
		{"prompt_name on a model without prompts", `"prompt_name":"query"`},
		{"prompt_name a number", `"prompt_name":1`},
		{"dimensions 0", `"dimensions":0`},
		{"dimensions -1", `"dimensions":-1`},
		{"dimensions 385", `"dimensions":385`},
		{"dimensions a string", `"dimensions":"384"`},
		{"dimensions a fraction", `"dimensions":1.5`},
		{"truncation_direction LEFT", `"truncation_direction":"LEFT"`},
		{"truncation_direction up", `"truncation_direction":"up"`},
	} {
		add("embed "+tc.name, "/embed", `{"inputs":"hello",`+tc.fields+`}`, 422)
	}
	for _, tc := range []struct {
		name, body string
		want       int
	}{
		{"on the embedder", `{"inputs":"hello","model":"minilm"}`, 424}, // TEI's answer for a model without SPLADE pooling
		{"on the classifier", `{"inputs":"hello","model":"sentiment"}`, 424},
		{"no SPLADE model served", `{"inputs":"hello"}`, 424},
		{"model unknown", `{"inputs":"hello","model":"nosuch"}`, 404},
		{"model a number", `{"inputs":"hello","model":1}`, 422},
		{"version a number", `{"inputs":"hello","version":8}`, 422},
		{"truncate a string", `{"inputs":"hello","truncate":"no"}`, 422},
		{"truncation_direction unknown", `{"inputs":"hello","truncation_direction":"up"}`, 422},
		{"truncation_direction LEFT", `{"inputs":"hello","truncation_direction":"LEFT"}`, 422},
		{"truncation_direction a number", `{"inputs":"hello","truncation_direction":1}`, 422},
		{"prompt_name, no SPLADE model served", `{"inputs":"hello","prompt_name":"query"}`, 424},
		{"prompt_name a number", `{"inputs":"hello","prompt_name":1}`, 422},
	} {
		add("embed_sparse "+tc.name, "/embed_sparse", tc.body, tc.want)
	}
	add("raw_scores a number", "/predict", `{"inputs":"hello","raw_scores":1}`, 422)
	add("add_special_tokens a string", "/tokenize", `{"inputs":"hello","add_special_tokens":"yes"}`, 422)
	add("tokenize prompt_name on a model without prompts", "/tokenize", `{"inputs":"hello","prompt_name":"query"}`, 422)
	add("tokenize prompt_name a number", "/tokenize", `{"inputs":"hello","prompt_name":1}`, 422)
	// Pairs (["a","b"], [["a","b"]]) are served: the classifier reads them through its
	// tokenizer's pair template.
	for _, in := range []string{`["a","b","c"]`, `[["a","b","c"]]`, `[["a"],"b"]`, `["a",["b"]]`, `[["a"],[]]`, `[["a"],null]`, `[["a"],[1]]`} {
		add("predict inputs "+in, "/predict", `{"inputs":`+in+`}`, 422)
	}
	add("predict batch over --max-inputs", "/predict", `{"inputs":[`+strings.Repeat(`["a"],`, batteryMaxInputs)+`["a"]]}`, 413)

	// POST /, TEI's root route, on either task.
	for _, name := range []string{"nosuch", "minilm:", ":int8", "/", "minilm/int8", "MINILM"} {
		add(fmt.Sprintf("root model %q", name), "/", fmt.Sprintf(`{"inputs":"hello","model":%q}`, name), 404)
	}
	for _, model := range []string{"minilm", "sentiment"} {
		for _, tc := range []struct {
			name, fields string
			want         int
		}{
			{"version unknown", `"version":"nosuch"`, 404},
			{"version a number", `"version":1`, 422},
			{"truncate a string", `"truncate":"no"`, 422},
			{"parameters a string", `"parameters":"top_k"`, 422},
			{"parameters.top_k a string", `"parameters":{"top_k":"1"}`, 422},
		} {
			add("root "+model+" "+tc.name, "/", `{"model":"`+model+`","inputs":"hello",`+tc.fields+`}`, tc.want)
		}
		add("root "+model+" truncate false, too long", "/", `{"model":"`+model+`","inputs":"`+long+`","truncate":false}`, 413)
	}
	for _, tc := range []struct {
		name, fields string
		want         int
	}{
		{"truncation_direction LEFT", `"truncation_direction":"LEFT"`, 422},
		{"truncation_direction up", `"truncation_direction":"up"`, 422},
		{"prompt_name", `"prompt_name":"query"`, 422},
		{"prompt_name a number", `"prompt_name":1`, 422},
		{"dimensions 0", `"dimensions":0`, 422},
		{"dimensions -1", `"dimensions":-1`, 422},
		{"dimensions 385", `"dimensions":385`, 422},
		{"dimensions a string", `"dimensions":"384"`, 422},
		{"encoding_format base64", `"encoding_format":"base64"`, 422},
		{"normalize a string", `"normalize":"yes"`, 422},
		{"top_k on an embed model", `"parameters":{"top_k":1}`, 400},
		{"function_to_apply on an embed model", `"parameters":{"function_to_apply":"softmax"}`, 400},
	} {
		add("root minilm "+tc.name, "/", `{"model":"minilm","inputs":"hello",`+tc.fields+`}`, tc.want)
	}
	for _, tc := range []struct {
		name, fields string
		want         int
	}{
		{"function_to_apply tanh", `"parameters":{"function_to_apply":"tanh"}`, 422},
		{"top_k 0", `"parameters":{"top_k":0}`, 422},
		{"top_k -1", `"parameters":{"top_k":-1}`, 422},
		{"raw_scores a number", `"raw_scores":1`, 422},
	} {
		add("root sentiment "+tc.name, "/", `{"model":"sentiment","inputs":"hello",`+tc.fields+`}`, tc.want)
	}
	// Pairs (["a","b"], [["a","b"]]) are served: the classifier reads them through its
	// tokenizer's pair template.
	for _, in := range []string{`["a","b","c"]`, `[["a"],[]]`} {
		add("root sentiment inputs "+in, "/", `{"model":"sentiment","inputs":`+in+`}`, 422)
	}

	// The routes TEI added past /embed: truncation_direction, /decode's ids, /vertex's
	// instances, /embed_all on a model without per-token outputs.
	for _, path := range []string{"/embed", "/predict", "/embed_all", "/invocations"} {
		add("truncation_direction up", path, `{"inputs":"hello","truncation_direction":"up"}`, 422)
		add("truncation_direction a number", path, `{"inputs":"hello","truncation_direction":1}`, 422)
		add("truncation_direction left, too long", path, `{"inputs":"`+long+`","truncate":false,"truncation_direction":"left"}`, 413)
	}
	add("rerank truncation_direction up", "/rerank", `{"query":"a","texts":["b"],"truncation_direction":"up"}`, 422)
	add("similarity truncation_direction up", "/similarity", `{"inputs":{"source_sentence":"a","sentences":["b"]},"parameters":{"truncation_direction":"up"}}`, 422)
	add("similarity no source_sentence", "/similarity", `{"inputs":{"sentences":["b"]}}`, 422)
	add("similarity inputs a string", "/similarity", `{"inputs":"hello"}`, 422)
	add("similarity parameters a string", "/similarity", `{"inputs":{"source_sentence":"a","sentences":["b"]},"parameters":"x"}`, 422)
	add("similarity on the classifier", "/similarity", `{"inputs":{"source_sentence":"a","sentences":["b"]},"model":"sentiment"}`, 400)
	add("embed_all on the classifier", "/embed_all", `{"inputs":"hello","model":"sentiment"}`, 400)
	for _, tc := range []struct{ name, body string }{
		{"no ids", `{}`}, {"ids null", `{"ids":null}`}, {"ids a string", `{"ids":"101"}`}, {"ids negative", `{"ids":[-1]}`},
		{"ids a float", `{"ids":[1.5]}`}, {"ids past uint32", `{"ids":[4294967296]}`}, {"ids mixed", `{"ids":[[1],2]}`},
		{"ids a null list", `{"ids":[[1],null]}`}, {"ids nested too deep", `{"ids":[[[1]]]}`}, {"id past the vocabulary", `{"ids":[999999]}`},
		{"skip_special_tokens a string", `{"ids":[101],"skip_special_tokens":"no"}`},
	} {
		add("decode "+tc.name, "/decode", tc.body, 422)
	}
	add("decode model nosuch", "/decode", `{"ids":[101],"model":"nosuch"}`, 404)
	add("decode over --max-inputs", "/decode", `{"ids":[`+strings.Repeat(`[1],`, batteryMaxInputs)+`[1]]}`, 413)
	for _, tc := range []struct {
		name, body string
		want       int
	}{
		{"instances missing", `{}`, 422}, {"instances empty", `{"instances":[]}`, 422}, {"instances an object", `{"instances":{}}`, 422},
		{"an instance a string", `{"instances":["hello"]}`, 422}, {"an instance null", `{"instances":[null]}`, 422},
		{"a bad second instance", `{"instances":[{"inputs":"a"},{"inputs":[]}]}`, 422},
		{"a rerank instance without texts", `{"instances":[{"query":"a","texts":[]}]}`, 422},
		{"an instance on an unknown model", `{"instances":[{"inputs":"a","model":"nosuch"}]}`, 404},
		{"instances over --max-inputs", `{"instances":[` + strings.Repeat(`{"inputs":"a"},`, batteryMaxInputs) + `{"inputs":"a"}]}`, 413},
	} {
		add("vertex "+tc.name, "/vertex", tc.body, tc.want)
	}

	// OpenAI.
	for _, tc := range []struct {
		name, body string
		want       int
	}{
		{"model nosuch", `{"model":"nosuch","input":"hello"}`, 404},
		{"model minilm:", `{"model":"minilm:","input":"hello"}`, 400},
		{"model :int8", `{"model":":int8","input":"hello"}`, 400},
		{"model /", `{"model":"/","input":"hello"}`, 400},
		{"model minilm/", `{"model":"minilm/","input":"hello"}`, 400},
		{"model minilm:nosuch", `{"model":"minilm:nosuch","input":"hello"}`, 404},
		{"model minilm/fp32, not served here", `{"model":"minilm/fp32","input":"hello"}`, 404},
		{"model minilm:int8:x", `{"model":"minilm:int8:x","input":"hello"}`, 404},
		{"model the classifier", `{"model":"sentiment","input":"hello"}`, 400},
		{"model the classifier's version", `{"model":"sentiment:int8","input":"hello"}`, 400},
		{"model a number", `{"model":1,"input":"hello"}`, 422},
		{"model null and input null", `{"model":null,"input":null}`, 400},
		{"input missing", `{"model":"minilm"}`, 400},
		{"input token ids", `{"model":"minilm","input":[101,7592,102]}`, 400},
		{"input lists of token ids", `{"model":"minilm","input":[[101,7592,102],[101,102]]}`, 400},
		{"input one token id", `{"model":"minilm","input":7592}`, 400},
		{"input a text then token ids", `{"model":"minilm","input":["hello",[101]]}`, 400},
		{"encoding_format float32", `{"model":"minilm","input":"hello","encoding_format":"float32"}`, 400},
		{"encoding_format BASE64", `{"model":"minilm","input":"hello","encoding_format":"BASE64"}`, 400},
		{"encoding_format binary", `{"model":"minilm","input":"hello","encoding_format":"binary"}`, 400},
		{"encoding_format a number", `{"model":"minilm","input":"hello","encoding_format":1}`, 422},
		{"encoding_format null and input a number", `{"model":"minilm","input":1,"encoding_format":null}`, 400},
		{"dimensions 0", `{"model":"minilm","input":"hello","dimensions":0}`, 400},
		{"dimensions -1", `{"model":"minilm","input":"hello","dimensions":-1}`, 400},
		{"prompt_name on a model without prompts", `{"model":"minilm","input":"hello","prompt_name":"query"}`, 400},
		{"prompt_name a number", `{"model":"minilm","input":"hello","prompt_name":1}`, 422},
		{"dimensions 385", `{"model":"minilm","input":"hello","dimensions":385}`, 400},
		{"dimensions huge", `{"model":"minilm","input":"hello","dimensions":99999999999999999999}`, 422},
		{"dimensions a string", `{"model":"minilm","input":"hello","dimensions":"384"}`, 422},
		{"dimensions a fraction", `{"model":"minilm","input":"hello","dimensions":383.5}`, 422},
		{"user a number", `{"model":"minilm","input":"hello","user":1}`, 422},
		{"input over --max-body-bytes", `{"model":"minilm","input":"` + strings.Repeat("a", batteryMaxBody) + `"}`, 413},
	} {
		add("openai "+tc.name, "/v1/embeddings", tc.body, tc.want)
	}

	// KServe: the tensor, its outputs and parameters, on both infer routes.
	text := func(field string) string { // one input "text" with field replaced or added
		return `{"inputs":[{` + field + `}]}`
	}
	for _, tc := range []struct {
		name, body string
		want       int
	}{
		{"datatype FP32", kserveBodyDT("FP32"), 400},
		{"datatype bytes", kserveBodyDT("bytes"), 400},
		{"datatype STRING", kserveBodyDT("STRING"), 400},
		{"datatype empty", kserveBodyDT(""), 400},
		{"datatype missing", text(`"name":"text","shape":[1],"data":["hello"]`), 400},
		{"datatype a number", text(`"name":"text","shape":[1],"datatype":1,"data":["hello"]`), 422},
		{"input name wrong", text(`"name":"input_ids","shape":[1],"datatype":"BYTES","data":["hello"]`), 400},
		{"input name missing", text(`"shape":[1],"datatype":"BYTES","data":["hello"]`), 400},
		{"two inputs", `{"inputs":[` + strings.Repeat(`{"name":"text","shape":[1],"datatype":"BYTES","data":["hello"]},`, 1) + `{"name":"text","shape":[1],"datatype":"BYTES","data":["hello"]}]}`, 400},
		{"no inputs", `{"inputs":[]}`, 400},
		{"inputs null", `{"inputs":null}`, 400},
		{"inputs an object", `{"inputs":{"name":"text"}}`, 422},
		{"inputs a string", `{"inputs":"hello"}`, 422},
		{"inputs [null]", `{"inputs":[null]}`, 400},
		{"shape [2] for one text", kserveBody("[2]", `["hello"]`), 400},
		{"shape [1] for two texts", kserveBody("[1]", `["hello","world"]`), 400},
		{"shape [0] for one text", kserveBody("[0]", `["hello"]`), 400},
		{"shape [0] and no texts", kserveBody("[0]", `[]`), 422},
		{"shape []", kserveBody("[]", `["hello"]`), 400},
		{"shape missing", text(`"name":"text","datatype":"BYTES","data":["hello"]`), 400},
		{"shape null", kserveBody("null", `["hello"]`), 400},
		{"shape [-1]", kserveBody("[-1]", `["hello"]`), 400},
		{"shape [1,-1]", kserveBody("[1,-1]", `["hello"]`), 400},
		{"shape [-1,-1]", kserveBody("[-1,-1]", `["hello"]`), 400},
		{"shape too large", kserveBody("[4294967296,4294967296]", `["hello"]`), 400},
		{"shape past int64", kserveBody("[99999999999999999999]", `["hello"]`), 422},
		{"shape a string", kserveBody(`["1"]`, `["hello"]`), 422},
		{"shape a fraction", kserveBody("[1.5]", `["hello"]`), 422},
		{"shape an object", kserveBody(`{"0":1}`, `["hello"]`), 422},
		{"shape [2,1] for one text", kserveBody("[2,1]", `[["hello"]]`), 400},
		{"data null", kserveBody("[1]", `null`), 400},
		{"data missing", text(`"name":"text","shape":[1],"datatype":"BYTES"`), 400},
		{"data [null]", kserveBody("[1]", `[null]`), 400},
		{"data a text then null, shape [1]", kserveBody("[1]", `["hello",null]`), 400},
		{"data a text then null, shape [2]", kserveBody("[2]", `["hello",null]`), 400},
		{"data a text then [], shape [1]", kserveBody("[1]", `["hello",[]]`), 400},
		{"data ragged, shape [3]", kserveBody("[3]", `[["a","b"],["c"]]`), 400},
		{"data [[null]]", kserveBody("[1,1]", `[[null]]`), 400},
		{"data numbers", kserveBody("[2]", `[1,2]`), 400},
		{"data an object", kserveBody("[1]", `{"text":"hello"}`), 400},
		{"data base64 bytes as an object", kserveBody("[1]", `[{"b64":"aGVsbG8="}]`), 400},
		{"data over --max-inputs", kserveBody(fmt.Sprintf("[%d]", batteryMaxInputs+1), manyTexts(batteryMaxInputs+1)), 413},
		{"data too long, truncate false", `{"inputs":[{"name":"text","shape":[1],"datatype":"BYTES","data":["` + long + `"]}],"parameters":{"truncate":false}}`, 413},
		{"output unknown", kserveWith(`"outputs":[{"name":"nosuch"}]`), 400},
		{"output of the classifier", kserveWith(`"outputs":[{"name":"probabilities"}]`), 400},
		{"output name missing", kserveWith(`"outputs":[{}]`), 400},
		{"output one good, one unknown", kserveWith(`"outputs":[{"name":"embedding"},{"name":"label"}]`), 400},
		{"outputs a string", kserveWith(`"outputs":"embedding"`), 422},
		{"outputs [null]", kserveWith(`"outputs":[null]`), 400},
		{"output binary_data a string", kserveWith(`"outputs":[{"name":"embedding","parameters":{"binary_data":"true"}}]`), 400},
		{"output binary_data a number", kserveWith(`"outputs":[{"name":"embedding","parameters":{"binary_data":1}}]`), 400},
		{"output classification", kserveWith(`"outputs":[{"name":"embedding","parameters":{"classification":2}}]`), 400},
		{"output parameters a list", kserveWith(`"outputs":[{"name":"embedding","parameters":[]}]`), 422},
		{"parameter truncate a string", kserveWith(`"parameters":{"truncate":"false"}`), 400},
		{"parameter truncate a number", kserveWith(`"parameters":{"truncate":0}`), 400},
		{"parameter truncate null", kserveWith(`"parameters":{"truncate":null}`), 400},
		{"parameter normalize a number", kserveWith(`"parameters":{"normalize":1}`), 400},
		{"parameter binary_data_output a string", kserveWith(`"parameters":{"binary_data_output":"yes"}`), 400},
		{"parameters a list", kserveWith(`"parameters":["truncate"]`), 422},
		{"parameters a string", kserveWith(`"parameters":"truncate"`), 422},
		{"id a number", kserveWith(`"id":42`), 422},
		{"input parameters a list", text(`"name":"text","shape":[1],"datatype":"BYTES","data":["hello"],"parameters":[1]`), 422},
		{"binary_data_size without the framing header", text(`"name":"text","shape":[1],"datatype":"BYTES","parameters":{"binary_data_size":9}`), 400},
		{"binary_data_size a string", text(`"name":"text","shape":[1],"datatype":"BYTES","parameters":{"binary_data_size":"9"}`), 400},
	} {
		for _, path := range []string{"/v2/models/minilm/infer", "/v2/models/minilm/versions/int8/infer"} {
			add("kserve "+tc.name, path, tc.body, tc.want)
		}
	}
	good := kserveBody("[1]", `["hello"]`)
	for _, tc := range []struct{ path string }{
		{"/v2/models/nosuch/infer"}, {"/v2/models/minilm:/infer"}, {"/v2/models/:int8/infer"}, {"/v2/models/%2F/infer"},
		{"/v2/models/minilm:int8/infer"}, {"/v2/models/MINILM/infer"}, {"/v2/models/minilm/versions//infer"},
		{"/v2/models/minilm/versions/nosuch/infer"}, {"/v2/models/minilm/versions/fp32/infer"}, {"/v2/models/minilm/versions/%2E%2E/infer"},
		{"/v2/models/nosuch/versions/int8/infer"}, {"/v2/models/sentiment/versions/fp32/infer"},
	} {
		add("kserve unknown model or version", tc.path, good, 404)
	}
	for _, tc := range []struct {
		name   string
		header map[string]string
		ctype  string
		body   string
	}{
		{"framing header not a number", map[string]string{"Inference-Header-Content-Length": "abc"}, "", good},
		{"framing header negative", map[string]string{"Inference-Header-Content-Length": "-1"}, "", good},
		{"framing header zero", map[string]string{"Inference-Header-Content-Length": "0"}, "application/octet-stream", good},
		{"framing header past the body", map[string]string{"Inference-Header-Content-Length": "99999"}, "application/octet-stream", good},
		{"binary data shorter than said", map[string]string{"Inference-Header-Content-Length": fmt.Sprint(len(binaryHead(9)))}, "application/octet-stream", binaryHead(9) + "\x05\x00\x00\x00hel"},
		{"binary data longer than said", map[string]string{"Inference-Header-Content-Length": fmt.Sprint(len(binaryHead(9)))}, "application/octet-stream", binaryHead(9) + "\x05\x00\x00\x00helloEXTRA"},
		{"binary element length past its data", map[string]string{"Inference-Header-Content-Length": fmt.Sprint(len(binaryHead(9)))}, "application/octet-stream", binaryHead(9) + "\xff\x00\x00\x00hello"},
		{"binary data not UTF-8", map[string]string{"Inference-Header-Content-Length": fmt.Sprint(len(binaryHead(9)))}, "application/octet-stream", binaryHead(9) + "\x05\x00\x00\x00he\xffl\xff"},
		{"octet-stream that is not JSON", nil, "application/octet-stream", "\x00\x01\x02"},
		{"Content-Encoding gzip", map[string]string{"Content-Encoding": "gzip"}, "", good},
	} {
		for _, path := range []string{"/v2/models/minilm/infer", "/v2/models/minilm/versions/int8/infer"} {
			want := 400
			switch tc.name {
			case "Content-Encoding gzip":
				want = 415
			case "octet-stream that is not JSON":
				want = 422
			}
			cases = append(cases, badRequest{name: "kserve " + tc.name, path: path, header: tc.header, ctype: tc.ctype, body: tc.body, want: want})
		}
	}
	return cases
}

// manyTexts is a JSON list of n short texts.
func manyTexts(n int) string {
	return `[` + strings.TrimSuffix(strings.Repeat(`"hello",`, n), ",") + `]`
}

// kserveBodyDT is a one-text KServe infer body with the given datatype.
func kserveBodyDT(dt string) string {
	return `{"inputs":[{"name":"text","shape":[1],"datatype":"` + dt + `","data":["hello"]}]}`
}

// kserveWith is a good one-text KServe infer body with one more top-level field.
func kserveWith(field string) string {
	return `{"inputs":[{"name":"text","shape":[1],"datatype":"BYTES","data":["hello"]}],` + field + `}`
}

// binaryHead is the JSON header of a binary-extension infer request whose one input has
// binary_data_size n.
func binaryHead(n int) string {
	return fmt.Sprintf(`{"inputs":[{"name":"text","shape":[1],"datatype":"BYTES","parameters":{"binary_data_size":%d}}]}`, n)
}

// batteryRepo is a model repository of the two real models, each with only its int8 version
// (links to the built files): the server on it starts in a fraction of the time of one on
// every version.
func batteryRepo(t testing.TB) string {
	t.Helper()
	root := t.TempDir()
	src := os.Getenv("ORTSERVE_MODELS")
	for name, cfg := range map[string]string{
		"minilm": "name: minilm\ntask: embed\ntokenizer: tokenizer.json\nmax_length: 256\npooling: mean\nnormalize: true\n" +
			"output: last_hidden_state\ndefault_version: int8\nversions:\n  int8: {file: int8.onnx}\n",
		"sentiment": "name: sentiment\ntask: classify\ntokenizer: tokenizer.json\nmax_length: 256\noutput: logits\n" +
			"labels: [negative, positive]\ndefault_version: int8\nversions:\n  int8: {file: int8.onnx}\n",
	} {
		dir := filepath.Join(root, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"tokenizer.json", "int8.onnx"} {
			if err := os.Symlink(filepath.Join(src, name, f), filepath.Join(dir, f)); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, "model.yaml"), []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// TestBattery sends every bad request of the table to one real server: each gets its 4xx, as
// JSON in its route's API shape, and the server answers a good request after them all.
func TestBattery(t *testing.T) {
	t.Parallel()
	url := startServer(t, "--models", batteryRepo(t), "--sessions", "1",
		"--max-inputs", fmt.Sprint(batteryMaxInputs), "--max-body-bytes", fmt.Sprint(batteryMaxBody))
	client := &http.Client{Timeout: 30 * time.Second}
	t.Cleanup(client.CloseIdleConnections)

	cases := batteryCases()
	if len(cases) < 300 {
		t.Errorf("the battery has %d cases, want at least 300", len(cases))
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute) // the table takes seconds
	defer cancel()
	perRoute := map[string]int{}
	var wrong []string
	for _, tc := range cases {
		perRoute[batteryGroup(tc.path)]++
		got, err := sendBad(ctx, client, url, tc)
		if err != nil {
			wrong = append(wrong, fmt.Sprintf("%s %s [%s]: %v", cmpOr(tc.method, "POST"), tc.path, tc.name, err))
			continue
		}
		if got != "" {
			wrong = append(wrong, fmt.Sprintf("%s %s [%s]: %s", cmpOr(tc.method, "POST"), tc.path, tc.name, got))
		}
	}
	for _, w := range wrong {
		t.Error(w)
	}
	var summary []string
	for _, p := range slices.Sorted(maps.Keys(perRoute)) {
		summary = append(summary, fmt.Sprintf("%s %d", p, perRoute[p]))
	}
	t.Logf("%d bad requests, %d answered wrong; by route: %s", len(cases), len(wrong), strings.Join(summary, ", "))

	// Nothing broke: a good request still gets its answer.
	var vecs [][]float32
	if resp := postJSON(t, url+"/embed", map[string]any{"inputs": []string{"hello world"}}, &vecs); resp.StatusCode != 200 || len(vecs) != 1 || len(vecs[0]) != 384 {
		t.Errorf("after the battery, /embed: %d, %d vectors", resp.StatusCode, len(vecs))
	}
	if m := regexp.MustCompile(`(?m)^ortserve_requests_total\{code="5\d\d".*$`).FindString(get(t, url+"/metrics")); m != "" {
		t.Errorf("the metrics count a 5xx: %s", m)
	}
}

// batteryGroup is the route a case is counted under in the test's summary.
func batteryGroup(path string) string {
	switch {
	case path == "/v1/embeddings":
		return "POST /v1/embeddings"
	case strings.HasPrefix(path, "/v1"):
		return "other /v1 paths"
	case strings.HasSuffix(path, "/infer") && strings.Contains(path, "/versions/"):
		return "POST /v2/models/{m}/versions/{v}/infer"
	case strings.HasSuffix(path, "/infer"):
		return "POST /v2/models/{m}/infer"
	case strings.HasPrefix(path, "/v2"):
		return "other /v2 paths"
	}
	for _, r := range batteryRoutes() {
		if r.path == path {
			return "POST " + path
		}
	}
	return "other TEI paths"
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// sendBad sends one bad request and says what is wrong with its answer ("" if nothing).
func sendBad(ctx context.Context, client *http.Client, base string, tc badRequest) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var body io.Reader
	if tc.body != "" {
		body = strings.NewReader(tc.body)
	}
	req, err := http.NewRequestWithContext(ctx, cmpOr(tc.method, http.MethodPost), base+tc.path, body)
	if err != nil {
		return "", err
	}
	switch tc.ctype {
	case "":
		req.Header.Set("Content-Type", "application/json")
	case noContentType:
	default:
		req.Header.Set("Content-Type", tc.ctype)
	}
	for k, v := range tc.header {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	var problems []string
	if resp.StatusCode != tc.want {
		problems = append(problems, fmt.Sprintf("status %d, want %d", resp.StatusCode, tc.want))
	}
	if mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		problems = append(problems, fmt.Sprintf("Content-Type %q", resp.Header.Get("Content-Type")))
	}
	if err := checkErrorShape(raw, shapeOfPath(tc.path)); err != nil {
		problems = append(problems, err.Error())
	}
	if len(problems) == 0 {
		return "", nil
	}
	if len(raw) > 300 {
		raw = append(raw[:300], "..."...)
	}
	return strings.Join(problems, "; ") + ": " + strings.TrimSpace(string(raw)), nil
}

// checkErrorShape checks that raw is one JSON error body in the family's shape, with exactly
// its fields.
func checkErrorShape(raw []byte, shape apiShape) error {
	var top map[string]json.RawMessage
	if err := decodeStrict(raw, &top); err != nil {
		return fmt.Errorf("body is not one JSON object: %w", err)
	}
	str := func(m map[string]json.RawMessage, key string, nullable bool) error {
		v, ok := m[key]
		if !ok {
			return fmt.Errorf("no %q", key)
		}
		if nullable && string(v) == "null" {
			return nil
		}
		var s string
		if json.Unmarshal(v, &s) != nil || s == "" {
			return fmt.Errorf("%q is %s, want a non-empty string", key, v)
		}
		return nil
	}
	keys := func(m map[string]json.RawMessage, want ...string) error {
		if got := slices.Sorted(maps.Keys(m)); !slices.Equal(got, want) {
			return fmt.Errorf("fields %v, want %v", got, want)
		}
		return nil
	}
	switch shape {
	case shapeTEI:
		if err := keys(top, "error", "error_type"); err != nil {
			return fmt.Errorf("TEI shape: %w", err)
		}
		if err := cmpErr(str(top, "error", false), str(top, "error_type", false)); err != nil {
			return fmt.Errorf("TEI shape: %w", err)
		}
	case shapeOpenAI:
		if err := keys(top, "error"); err != nil {
			return fmt.Errorf("OpenAI shape: %w", err)
		}
		var e map[string]json.RawMessage
		if err := json.Unmarshal(top["error"], &e); err != nil {
			return fmt.Errorf("OpenAI shape: error is %s, want an object", top["error"])
		}
		if err := cmpErr(keys(e, "code", "message", "param", "type"), str(e, "message", false), str(e, "type", false), str(e, "param", true), str(e, "code", true)); err != nil {
			return fmt.Errorf("OpenAI shape: %w", err)
		}
	case shapeKServe:
		if err := cmpErr(keys(top, "error"), str(top, "error", false)); err != nil {
			return fmt.Errorf("KServe shape: %w", err)
		}
	}
	return nil
}

func cmpErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// decodeStrict decodes exactly one JSON value (a trailing newline allowed).
func decodeStrict(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("data after the JSON value")
	}
	return nil
}
