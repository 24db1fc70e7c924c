package server

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
)

// The guards every route passes before its own checks: the Host allow-list and the API key.

// authExempt are the routes --auth-exempt may open to callers without a key, by the name
// the flag takes.
var authExempt = map[string][]string{
	"health":  {"/health", "/ping", "/v2/health/live", "/v2/health/ready"},
	"metrics": {"/metrics"},
}

// ParseAuthExempt checks --auth-exempt's names (health, metrics).
func ParseAuthExempt(names []string) error {
	for _, n := range names {
		if _, ok := authExempt[n]; !ok {
			return fmt.Errorf("--auth-exempt %q: the routes that may go without a key are health and metrics", n)
		}
	}
	return nil
}

// keyring holds the API keys as SHA-256 digests: a candidate is compared with every one in
// constant time, so neither the time taken nor an early exit says how much of a key matched.
type keyring [][sha256.Size]byte

func newKeyring(keys []string) keyring {
	k := make(keyring, 0, len(keys))
	for _, key := range keys {
		k = append(k, sha256.Sum256([]byte(key)))
	}
	return k
}

func (k keyring) allows(candidate string) bool {
	d := sha256.Sum256([]byte(candidate))
	ok := 0
	for _, want := range k {
		ok |= subtle.ConstantTimeCompare(d[:], want[:])
	}
	return ok == 1
}

// bearer is the key a request presents: "Authorization: Bearer KEY", as OpenAI's,
// huggingface_hub's and TEI's clients send it, or "api-key: KEY" for clients that can only
// add a header.
func bearer(r *http.Request) string {
	return bearerOf(r.Header.Get("Authorization"), r.Header.Get("api-key"))
}

// authorize refuses a request without a valid API key with 401, when keys are configured,
// except on the routes --auth-exempt opens.
func (s *Server) authorize(next http.Handler) http.Handler {
	if len(s.keys) == 0 {
		return next
	}
	var open []string
	for _, name := range s.cfg.AuthExempt {
		open = append(open, authExempt[name]...)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if slices.Contains(open, r.URL.Path) || s.keys.allows(bearer(r)) {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="ortserve"`)
		msg := "missing API key: send the header Authorization: Bearer KEY"
		if bearer(r) != "" {
			msg = "invalid API key: send one of the server's --api-key keys as Authorization: Bearer KEY"
		}
		writeError(w, r, http.StatusUnauthorized, "Unauthorized", msg)
	})
}

// checkHost refuses a request whose Host is not in AllowedHosts (when set) with 403: it is
// what stops DNS rebinding, a web page on another origin reaching a server on loopback by
// pointing its own name at 127.0.0.1.
func (s *Server) checkHost(next http.Handler) http.Handler {
	if len(s.cfg.AllowedHosts) == 0 {
		return next
	}
	allowed := make([]string, len(s.cfg.AllowedHosts))
	for i, h := range s.cfg.AllowedHosts {
		allowed[i] = hostName(h)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !slices.Contains(allowed, hostName(r.Host)) {
			writeError(w, r, http.StatusForbidden, "Forbidden", fmt.Sprintf("host %q is not one this server answers to (--allowed-hosts)", r.Host))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// hostName is a Host header's or an allowed host's name: lower case, without a port or the
// root's trailing dot.
func hostName(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return strings.TrimSuffix(strings.ToLower(host), ".")
}
