// Command healthcheck is the container images' HEALTHCHECK: it asks the server in the same
// container for /health and exits 0 on a 200, 1 otherwise. The runtime images have no shell
// and no curl, so the probe is this static binary (stdlib only, CGO_ENABLED=0).
//
//	healthcheck              GET http://127.0.0.1:PORT/health, PORT from ORTSERVE_ADDR (8080)
//	healthcheck URL          GET URL
//
// /health answers 503 while the server starts and while it drains on SIGTERM, so a container
// shows as unhealthy then, as it should.
package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"
)

func main() {
	if err := check(os.Args[1:], os.Getenv("ORTSERVE_ADDR")); err != nil {
		fmt.Fprintln(os.Stderr, "healthcheck:", err)
		os.Exit(1)
	}
}

// check probes the URL in args, or the loopback port of addr (serve's listen address).
func check(args []string, addr string) error {
	url, err := target(args, addr)
	if err != nil {
		return err
	}
	c := http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

// target is the URL to probe: the one argument, or /health on addr's port over loopback.
func target(args []string, addr string) (string, error) {
	switch {
	case len(args) == 1:
		return args[0], nil
	case len(args) > 1:
		return "", fmt.Errorf("usage: healthcheck [URL]")
	}
	port := "8080"
	if addr != "" {
		_, p, err := net.SplitHostPort(addr)
		if err != nil {
			return "", fmt.Errorf("ORTSERVE_ADDR %q: %v: give host:port or a URL argument", addr, err)
		}
		port = p
	}
	return "http://" + net.JoinHostPort("127.0.0.1", port) + "/health", nil
}
