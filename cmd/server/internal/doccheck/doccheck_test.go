package doccheck

import (
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestSplit(t *testing.T) {
	tests := []struct {
		line string
		want [][]string
	}{
		{"ORTSERVE_X=1 Y=2 server serve --addr :1", [][]string{{"server", "serve", "--addr", ":1"}}},
		{"./bin/server models init DIR > DIR/model.yaml   # pin it", [][]string{{"./bin/server", "models", "init", "DIR"}}},
		{`curl -s x -d '{"a": "# b"}' | jq .`, [][]string{{"curl", "-s", "x", "-d", `{"a": "# b"}`}, {"jq", "."}}},
		{`server serve 2>&1 >log && echo "a \"b\" $X"`, [][]string{{"server", "serve"}, {"echo", `a "b" $X`}}},
		{"server serve 2>log --addr :1", [][]string{{"server", "serve", "--addr", ":1"}}},
		{"server inspect M|DIR|FILE", [][]string{{"server", "inspect", "M"}, {"DIR"}, {"FILE"}}},
		{"a; b & c || d", [][]string{{"a"}, {"b"}, {"c"}, {"d"}}},
		{`echo a\ b X=1`, [][]string{{"echo", "a b", "X=1"}}},
		{"echo 'unclosed", [][]string{{"echo", "unclosed"}}},
		{"X=1", nil},
		{"# a comment", nil},
	}
	for _, tt := range tests {
		if got := split(tt.line); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("split(%s) = %q, want %q", tt.line, got, tt.want)
		}
	}
}

const sample = "# Doc\n" + // 1
	"\n" +
	"```sh\n" + // 3
	"make build\n" + // 4
	"./bin/server serve --model m \\\n" + // 5
	"  --addr :1   # the note\n" + // 6
	"curl -s localhost:8080/embed -d '{}'\n" + // 7
	"# [[0.1, …]]\n" + // 8
	"\n" + // 9
	"curl -s localhost:8080/info\n" + // 10
	"```\n" +
	"```json\n" + // 12
	"{\"models\": […]}\n" + // 13
	"```\n" +
	"\n" +
	"```\n" + // 16
	"server and models ready\n" + // 17
	"```\n" +
	"\n" +
	"```\n" + // 20
	"$ server plan --report r.json\n" + // 21
	"plan: 3 replicas\n" + // 22
	"```\n" +
	"\n" +
	"```yaml\n" +
	"server: x\n" +
	"```\n" +
	"\n" +
	"Run `server bench\n" + // 29
	"--self` now.\n"

func TestCommands(t *testing.T) {
	got := Parse("sample.md", []byte(sample)).Commands()
	want := []Command{
		{Line: 4, Text: "make build", Args: []string{"make", "build"}},
		{Line: 5, Text: "./bin/server serve --model m   --addr :1   # the note", Args: []string{"./bin/server", "serve", "--model", "m", "--addr", ":1"}},
		{Line: 7, Text: "curl -s localhost:8080/embed -d '{}'", Args: []string{"curl", "-s", "localhost:8080/embed", "-d", "{}"}, Output: "[[0.1, …]]"},
		{Line: 10, Text: "curl -s localhost:8080/info", Args: []string{"curl", "-s", "localhost:8080/info"}, Output: `{"models": […]}`},
		{Line: 21, Text: "server plan --report r.json", Args: []string{"server", "plan", "--report", "r.json"}, Output: "plan: 3 replicas"},
		{Line: 29, Inline: true, Text: "server bench --self", Args: []string{"server", "bench", "--self"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Commands:\n got %+v\nwant %+v", got, want)
	}
}

func TestHeadingsAndSection(t *testing.T) {
	src := "# Top\n\n## `server serve`\n\n## Quick start: a — b, 1.5×\n\nText `q`.\n\n### Results\n\n```sh\nq\n```\n\n" +
		"## Results\n\n## Results\n\n## Ünïcode_x [link](a.md) *em*\n"
	d := Parse("h.md", []byte(src))
	var slugs []string
	for _, h := range d.Headings {
		slugs = append(slugs, h.Slug)
	}
	want := []string{"top", "server-serve", "quick-start-a--b-15", "results", "results-1", "results-2", "ünïcode_x-link-em"}
	if !reflect.DeepEqual(slugs, want) {
		t.Errorf("slugs %q, want %q", slugs, want)
	}
	s, ok := d.Section("QUICK START")
	if !ok || len(s.Spans) != 1 || len(s.Blocks) != 1 || len(s.Headings) != 1 || len(s.Links) != 0 {
		t.Errorf("Section: %v, %+v, want the quick start's span, block and sub-heading", ok, s)
	}
	if _, ok := d.Section("Deploy"); ok {
		t.Error("Section(Deploy) found a section the doc does not have")
	}
}

func TestCheckLinks(t *testing.T) {
	root := t.TempDir()
	write := func(name, text string) {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("docs/b.md", "# B\n\n## Second heading\n")
	write("docs/sub/c.go", "package c\n")
	write("README.md", "# Top\n\n"+
		"[ok](docs/b.md) [ok](docs/b.md#second-heading) [ok](#top) [ok](docs/sub/) [ok](docs/sub/c.go#L1)\n"+
		"[ok](https://example.com/x#y) [ok](mailto:a@b.c) [ok](/docs/b.md#b) ![ok](docs/b.md)\n"+
		"[gone](docs/c.md)\n"+
		"[anchor](docs/b.md#second)\n"+
		"[self](#nope) ![image](img/x.png)\n")
	d, err := Read(root, "README.md")
	if err != nil {
		t.Fatal(err)
	}
	got := CheckLinks(root, d)
	want := []string{
		"README.md:5: link docs/c.md: there is no docs/c.md",
		"README.md:6: link docs/b.md#second: no heading of docs/b.md has the anchor #second",
		"README.md:7: link #nope: no heading of README.md has the anchor #nope",
		"README.md:7: link img/x.png: there is no img/x.png",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("CheckLinks:\n got %q\nwant %q", got, want)
	}
}

func TestParseCurl(t *testing.T) {
	json := http.Header{"Content-Type": {"application/json"}}
	tests := []struct {
		args string // split as the shell would: no spaces in a word here
		want Request
		err  string
	}{
		{"-s localhost:8080/info", Request{Method: "GET", Path: "/info", Header: http.Header{}}, ""},
		{"-sS http://127.0.0.1:8080/embed?x=1 -H Content-Type:application/json -d {}", Request{Method: "POST", Path: "/embed?x=1", Header: json, Body: "{}"}, ""},
		{"-X PUT localhost/a --data-raw @x", Request{Method: "PUT", Path: "/a", Header: http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}, Body: "@x"}, ""},
		{"--json {} localhost", Request{Method: "POST", Path: "/", Header: http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json"}}, Body: "{}"}, ""},
		{"-i localhost", Request{}, "curl option -i"},
		{"-d @body.json localhost", Request{}, "reads a file"},
		{"localhost/a localhost/b", Request{}, "two URLs"},
		{"-s", Request{}, "no URL"},
		{"localhost -H", Request{}, "curl -H has no value"},
		{"localhost -H NoColon", Request{}, "is not Name: value"},
	}
	for _, tt := range tests {
		got, err := ParseCurl(strings.Fields(tt.args))
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("curl %s: %v, want an error with %q", tt.args, err, tt.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("curl %s = %+v, %v, want %+v", tt.args, got, err, tt.want)
		}
	}
}

func TestMatchOutput(t *testing.T) {
	tests := []struct {
		shown, got string
		err        string // in the error; "" for a match
	}{
		{"[[-0.03,0.03,0.006, ... 384 numbers]]", "[[1,2,3,4,5]]", ""},
		{"[[-0.03,0.03,0.006, ... 384 numbers]]", "[[1,2,3,4,5],[1,2,3]]", "$: the doc shows 1 elements, the response has 2"},
		{"[[-0.03,0.03,0.006, ... 384 numbers]]", `[[1,2,3,"4"]]`, "$[0][3]: the doc shows a number, the response has a string"},
		{"[[-0.03,0.03,0.006, ... 384 numbers]]", "[[1,2]]", "$[0]: the doc shows 3 elements before its …, the response has 2"},
		{`[{"score":0.97,"label":"positive"},{"score":0.02,"label":"negative"}]      the note`, `[{"label":"a","score":1},{"score":0,"label":"b"}]`, ""},
		{`{"model":"r","results":[{"index":1,"relevance_score":0.8}],"usage":{"total_tokens":28}}`, `{"model":"r","results":[],"usage":{"total_tokens":3}}`, "$.results: the doc shows 1 elements, the response has 0"},
		{`{"model":"r","usage":{"total_tokens":28}}`, `{"model":"r","id":"x","usage":{"total_tokens":3}}`, `$: the response has the key "id", which the doc does not show`},
		{`{"model":"r", …}`, `{"model":"r","id":"x"}`, ""},
		{`{"model":"r", "usage": {…}}`, `{"model":"r"}`, `$: the doc shows the key "usage", which the response does not have`},
		{`{"usage": {"total_tokens": 28}}`, `{"usage": {"total_tokens": null}}`, "$.usage.total_tokens: the doc shows a number, the response has a null"},
		{`{"models":[{"name":"minilm","versions":["fp32", …`, `{"models":[{"name":"a","versions":["x","y"]}],"more":1}`, ""},
		{`{"models":[{"name":"minilm","versions":["fp32", …`, `{"models":[{"name":"a"}]}`, `$.models[0]: the doc shows the key "versions"`},
		{`[…]`, `[1, {"a": 2}]`, ""},
		{`[{"start":null}, {"start":0}, …]`, `[{"start":null}, {"start":0}, {"start":6}, {"start":null}]`, ""},
		{`[{"start":null}, …]`, `[{"start":null}, {"start":"6"}]`, `$[1].start: the doc shows a null, the response has a string`},
		{`[]`, `[]`, ""},
		{`[true, null, "x"]`, `[false, null, "y"]`, ""},
		{`{"a":`, `{"a":1}`, "the output shown is not JSON"},
		{`{"a" 1}`, `{"a":1}`, "want : after the key"},
		{`[1 2]`, `[1,2]`, "want , or ]"},
		{`[1]`, `text`, "the response is not JSON"},
		{"ortserve_requests_total{route=\"/embed\"} 3\nortserve_up 1", "# HELP x\nortserve_up 1\nortserve_requests_total{route=\"/embed\"} 17\n", ""},
		{`ortserve_batch_size_bucket{…,le="8"} 12`, "ortserve_batch_size_bucket{model=\"m\",le=\"8\"} 1.5e+06\n", ""},
		{`ortserve_requests_total{route="/embed"} 3`, "ortserve_requests_total{route=\"/predict\"} 3\n", `no line of the response has the shape of "ortserve_requests_total{route=\"/embed\"} 3"`},
	}
	for _, tt := range tests {
		err := MatchOutput(tt.shown, []byte(tt.got))
		if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("MatchOutput(%s, %s) = %v, want %q", tt.shown, tt.got, err, tt.err)
		}
	}
}
