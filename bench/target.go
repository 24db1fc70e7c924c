package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// Doer sends one HTTP request; *http.Client satisfies it, and tests hand in a fake.
type Doer interface {
	Do(req *http.Request) (*http.Response, error)
}

// Target is one thing to measure: a route of a server, and the model and version to ask
// for. Model and Version are sent in the body only when set, so any TEI-compatible server
// can be a target.
type Target struct {
	URL     string // base URL, "http://127.0.0.1:8080"
	Route   string // "/embed", "/predict" or "/v1/embeddings"
	Model   string
	Version string
	// Label tells servers apart when several are compared ("default", "tuned"); "" for one.
	Label string
}

// Name is how reports call the target: "model/version", or the route for a bare server,
// after the label if there is one.
func (t Target) Name() string {
	if t.Label != "" {
		return t.Label + " " + Target{Route: t.Route, Model: t.Model, Version: t.Version}.Name()
	}
	switch {
	case t.Model != "" && t.Version != "":
		return t.Model + "/" + t.Version
	case t.Model != "":
		return t.Model
	case t.Version != "":
		return t.Version
	}
	return t.Route
}

// Routes are the request shapes bench knows how to send.
var routes = []string{"/embed", "/predict", "/v1/embeddings"}

// CheckRoute reports whether bench can send requests to route.
func CheckRoute(route string) error {
	for _, r := range routes {
		if r == route {
			return nil
		}
	}
	return fmt.Errorf("bench: route %q is not one bench can send: use one of %s", route, strings.Join(routes, ", "))
}

// body is the JSON body of a request carrying texts.
func (t Target) body(texts []string) ([]byte, error) {
	switch t.Route {
	case "/embed", "/predict":
		return json.Marshal(struct {
			Inputs  []string `json:"inputs"`
			Model   string   `json:"model,omitempty"`
			Version string   `json:"version,omitempty"`
		}{texts, t.Model, t.Version})
	case "/v1/embeddings":
		model := t.Model
		if t.Version != "" {
			model += "/" + t.Version
		}
		return json.Marshal(struct {
			Input []string `json:"input"`
			Model string   `json:"model,omitempty"`
		}{texts, model})
	}
	return nil, CheckRoute(t.Route)
}

// request builds the POST of body to the target.
func (t Target) request(ctx context.Context, body []byte) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(t.URL, "/")+t.Route, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	return req, nil
}
