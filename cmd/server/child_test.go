//go:build cgo && ort

package main

// What the tests that run `server serve` in a child process share: starting and stopping it,
// reading its metrics and memory, and timing its answers.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// quantile is the q-quantile of ds (nearest rank); 0 for none.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(ds))
	return s[min(len(s)-1, max(0, int(math.Ceil(q*float64(len(s))))-1))]
}

// postEmbed posts body to url's /embed and reads the answer to its end: its status and
// headers.
func postEmbed(client *http.Client, url string, body []byte) (int, http.Header, error) {
	resp, err := client.Post(url+"/embed", "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header, nil
}

// headerMs is a timing header's milliseconds as a duration; 0 when absent.
func headerMs(h http.Header, name string) time.Duration {
	ms, _ := strconv.ParseFloat(h.Get(name), 64)
	return time.Duration(ms * float64(time.Millisecond))
}

// child is a `server serve` running in a child process.
type child struct {
	cmd    *exec.Cmd
	url    string
	stderr *bytes.Buffer
	done   chan error
}

// startChild runs `server serve --addr 127.0.0.1:0 args...` in a child process (the test
// binary itself: one ONNX Runtime environment per process) and waits until it listens. It is
// killed when the test ends unless stop ran.
func startChild(t *testing.T, args ...string) *child {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	cmd := exec.CommandContext(ctx, os.Args[0], append([]string{"serve", "--addr", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(os.Environ(), "ORTSERVE_TEST_EXEC=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, stderr: &bytes.Buffer{}, done: make(chan error, 1)}
	cmd.Stderr = c.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.done <- cmd.Wait() }()
	t.Cleanup(func() {
		cancel() // kills the child if stop did not run
		<-c.done
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.Contains(line, "http://") {
		cancel()
		<-c.done
		t.Fatalf("server did not start: %v\n%s", err, c.stderr.String())
	}
	go io.Copy(io.Discard, stdout)
	c.url = strings.TrimSpace(line[strings.Index(line, "http://"):])
	return c
}

// rss is the child's resident memory (VmRSS) in bytes.
func (c *child) rss(t *testing.T) int64 {
	t.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", c.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^VmRSS:\s+(\d+) kB$`).FindSubmatch(status)
	if m == nil {
		t.Fatalf("no VmRSS in /proc/%d/status", c.cmd.Process.Pid)
	}
	kb, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return kb << 10
}

// stop sends SIGTERM and expects a clean exit.
func (c *child) stop(t *testing.T) {
	t.Helper()
	c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-c.done:
		if err != nil {
			t.Errorf("server exit: %v\n%s", err, c.stderr.String())
		}
		c.done <- err // for the cleanup
	case <-time.After(time.Minute):
		t.Errorf("server did not stop within a minute of SIGTERM")
	}
}

// metricValues reads the values of the named series (name and labels as /metrics writes
// them) from url's /metrics; a missing series fails the test.
func metricValues(t *testing.T, url string, series ...string) []float64 {
	t.Helper()
	text := get(t, url+"/metrics")
	vals := make([]float64, len(series))
	for i, s := range series {
		m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(s) + ` (\S+)$`).FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("no %s in /metrics", s)
		}
		vals[i], _ = strconv.ParseFloat(m[1], 64)
	}
	return vals
}
