//go:build cgo && ort

package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/ortserve/ortserve/cmd/server/internal/doccheck"
)

// TestDocsQuickStart sends every curl command of the README's quick start (the section whose
// heading says "Quick start") to the shared server, make run's models, and holds the
// response to the output the README shows right under the command: the same JSON shape, its
// values free to differ, by doccheck.MatchOutput's rule (… cuts an array, an object or the
// rest). A command with no output shown fails: the quick start is what a newcomer copies.
func TestDocsQuickStart(t *testing.T) {
	t.Parallel()
	readme, err := doccheck.Read(repoRoot, "README.md")
	if err != nil {
		t.Fatal(err)
	}
	quick, ok := readme.Section("quick start")
	if !ok {
		t.Fatal("README.md has no section whose heading says Quick start: give the curl examples one")
	}
	base := sharedServer(t)
	n := 0
	for _, c := range quick.Commands() {
		if c.Inline || c.Args[0] != "curl" {
			continue
		}
		n++
		where := fmt.Sprintf("%s:%d: %s", readme.Path, c.Line, c.Text)
		if c.Output == "" {
			t.Errorf("%s: shows no output: put the response in # lines right under it (… marks a cut)", where)
			continue
		}
		r, err := doccheck.ParseCurl(c.Args[1:])
		if err != nil {
			t.Errorf("%s: %v", where, err)
			continue
		}
		req, err := http.NewRequestWithContext(t.Context(), r.Method, base+r.Path, strings.NewReader(r.Body))
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		req.Header = r.Header
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case err != nil:
			t.Errorf("%s: reading the response: %v", where, err)
		case resp.StatusCode/100 != 2:
			t.Errorf("%s: %s: %.200s", where, resp.Status, body)
		default:
			if err := doccheck.MatchOutput(c.Output, body); err != nil {
				t.Errorf("%s: the response does not have the shape shown: %v; it was %.300s", where, err, body)
			}
		}
	}
	if n == 0 {
		t.Error("README.md's quick start has no curl command: show one a route")
	}
}
