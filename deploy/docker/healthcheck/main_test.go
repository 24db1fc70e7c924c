package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestTarget(t *testing.T) {
	tests := []struct {
		args []string
		addr string
		want string
		err  string
	}{
		{nil, "", "http://127.0.0.1:8080/health", ""},
		{nil, "0.0.0.0:9000", "http://127.0.0.1:9000/health", ""},
		{nil, ":7000", "http://127.0.0.1:7000/health", ""},
		{[]string{"http://127.0.0.1:1/v2/health/ready"}, "0.0.0.0:9000", "http://127.0.0.1:1/v2/health/ready", ""},
		{nil, "8080", "", `ORTSERVE_ADDR "8080"`},
		{[]string{"a", "b"}, "", "", "usage"},
	}
	for _, tt := range tests {
		got, err := target(tt.args, tt.addr)
		if got != tt.want || (err == nil) != (tt.err == "") || err != nil && !strings.Contains(err.Error(), tt.err) {
			t.Errorf("target(%q, %q) = %q, %v; want %q, error with %q", tt.args, tt.addr, got, err, tt.want, tt.err)
		}
	}
}

func TestCheck(t *testing.T) {
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/health" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(status)
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	if err := check(nil, addr); err != nil {
		t.Errorf("200: %v", err)
	}
	status = http.StatusServiceUnavailable // starting or draining
	if err := check(nil, addr); err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("503: %v, want an error naming it", err)
	}
	srv.Close()
	if err := check(nil, addr); err == nil {
		t.Error("no server: no error")
	}
}
