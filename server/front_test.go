package server_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ortserve/ortserve/server"
)

// client is one connection to the server.
type client struct {
	net.Conn
	br *bufio.Reader
}

// connect dials the server from a client at 127.0.0.1.
func (l *pipeListener) connect(t *testing.T) *client {
	c := l.dial("127.0.0.1:1234")
	if c == nil {
		t.Fatal("dial: the listener is closed")
	}
	return &client{c, bufio.NewReader(c)}
}

// do sends a request (a body, if any, at once) and reads the response whole.
func (c *client) do(method, path, body string) (*http.Response, string, error) {
	req := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: ortserve\r\nContent-Length: %d\r\n\r\n%s", method, path, len(body), body)
	if _, err := io.WriteString(c, req); err != nil {
		return nil, "", err
	}
	return c.read()
}

func (c *client) read() (*http.Response, string, error) {
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		return nil, "", err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b), err
}

// closed says whether the server has closed the connection: a read ends at once.
func (c *client) closed() bool {
	c.SetReadDeadline(time.Now())
	defer c.SetReadDeadline(time.Time{})
	_, err := c.br.Peek(1)
	return err != nil && !isTimeout(err)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// startFront serves h on a pipe listener with c; the front end is shut down (closed at
// once) when the test ends.
func startFront(t *testing.T, h http.Handler, c server.Conn) (*server.Front, *pipeListener) {
	pl := newPipeListener()
	f := server.NewFront(pl, h, c, slog.New(slog.DiscardHandler))
	t.Cleanup(func() { f.Close() })
	return f, pl
}

// A keep-alive connection is closed once it has waited idle_timeout for its next request;
// each request starts the wait anew; 0 keeps it open.
func TestIdleTimeout(t *testing.T) {
	for _, tt := range []struct {
		name       string
		idle       time.Duration
		wantClosed bool // after waiting 10 s
	}{
		{"closed after idle_timeout", 5 * time.Second, true},
		{"0 is forever", 0, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := server.DefaultConn()
				c.IdleTimeout = tt.idle
				_, pl := startFront(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}), c)
				cl := pl.connect(t)
				defer cl.Close()
				for i := range 3 { // 4 s apart: each request restarts the idle wait
					if resp, _, err := cl.do("GET", "/health", ""); err != nil || resp.StatusCode != 200 {
						t.Fatalf("request %d on the kept-alive connection: %v", i, err)
					}
					time.Sleep(4 * time.Second)
					synctest.Wait()
					if cl.closed() {
						t.Fatalf("closed after 4 s idle, before idle_timeout")
					}
				}
				time.Sleep(6 * time.Second)
				synctest.Wait()
				if got := cl.closed(); got != tt.wantClosed {
					t.Errorf("closed after 10 s idle: %v, want %v", got, tt.wantClosed)
				}
			})
		})
	}
}

// read_timeout bounds the request, body included, but not the inference after it: the
// handler's context outlives it. write_timeout bounds the answer from its first byte, not
// the time to compute it.
func TestConnTimeouts(t *testing.T) {
	const compute = 10 * time.Second // well past both timeouts
	for _, tt := range []struct {
		name     string
		trickle  time.Duration // between the body's bytes; 0: sent at once
		answer   int           // bytes of answer; the client reads all of it unless noRead
		noRead   bool
		wantCode int    // what the client gets; 0: nothing (the connection is cut)
		wantErr  string // what the handler saw, "" for nothing wrong
	}{
		{"slow inference is not cut", 0, 100, false, 200, ""},
		{"a trickled body is cut at read_timeout", 300 * time.Millisecond, 100, false, 400, "timeout"},
		{"a large answer to a reader is not cut", 0, 4 << 20, false, 200, ""},
		{"a client that does not read is cut at write_timeout", 0, 4 << 20, true, 0, "timeout"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := server.DefaultConn()
				c.ReadTimeout, c.WriteTimeout = time.Second, time.Second
				handlerErr := make(chan string, 1)
				_, pl := startFront(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if _, err := io.ReadAll(r.Body); err != nil {
						handlerErr <- fmt.Sprintf("reading the body: %v", err)
						w.WriteHeader(400)
						return
					}
					time.Sleep(compute)
					if err := r.Context().Err(); err != nil {
						handlerErr <- fmt.Sprintf("context after inference: %v", err)
						return
					}
					if _, err := w.Write(make([]byte, tt.answer)); err != nil {
						handlerErr <- fmt.Sprintf("writing the answer: %v", err)
						return
					}
					handlerErr <- ""
				}), c)
				cl := pl.connect(t)
				defer cl.Close()
				body := "0123456789"
				trickled := make(chan struct{})
				defer func() { cl.Close(); <-trickled }()
				if tt.trickle == 0 {
					close(trickled)
					io.WriteString(cl, fmt.Sprintf("POST /embed HTTP/1.1\r\nHost: ortserve\r\nContent-Length: %d\r\n\r\n%s", len(body), body))
				} else {
					io.WriteString(cl, fmt.Sprintf("POST /embed HTTP/1.1\r\nHost: ortserve\r\nContent-Length: %d\r\n\r\n", len(body)))
					go func() {
						defer close(trickled)
						for i := range body {
							time.Sleep(tt.trickle)
							if _, err := io.WriteString(cl, body[i:i+1]); err != nil {
								return
							}
						}
					}()
				}
				if tt.noRead {
					time.Sleep(compute + 2*time.Second)
				} else {
					resp, got, err := cl.read()
					switch {
					case tt.wantCode == 0 && err == nil:
						t.Errorf("got %d, want the connection cut", resp.StatusCode)
					case tt.wantCode != 0 && err != nil:
						t.Errorf("got %v, want %d", err, tt.wantCode)
					case err == nil && (resp.StatusCode != tt.wantCode || (tt.wantCode == 200 && len(got) != tt.answer)):
						t.Errorf("got %d with %d bytes, want %d", resp.StatusCode, len(got), tt.wantCode)
					}
				}
				if got := <-handlerErr; (tt.wantErr == "") != (got == "") || !strings.Contains(got, tt.wantErr) {
					t.Errorf("the handler saw %q, want %q", got, tt.wantErr)
				}
			})
		})
	}
}

// shutdownHarness is a front end whose /work requests wait until released (200) or until
// the harness's Abort (503), as requests wait in a batcher's queue; /quick answers 200 at
// once.
type shutdownHarness struct {
	f        *server.Front
	pl       *pipeListener
	ready    atomic.Bool
	release  chan struct{}
	aborted  chan struct{}
	abortAt  time.Time
	deadline time.Time // of Abort's ctx
	ignore   bool      // a handler that does not honour the abort
}

func newShutdownHarness(t *testing.T) *shutdownHarness {
	h := &shutdownHarness{release: make(chan struct{}), aborted: make(chan struct{})}
	h.ready.Store(true)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		if !h.ready.Load() {
			w.WriteHeader(503)
		}
	})
	mux.HandleFunc("POST /quick", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("POST /work", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-h.release:
		case <-h.aborted:
			if h.ignore {
				<-h.release
				return
			}
			w.WriteHeader(503)
		}
	})
	h.f, h.pl = startFront(t, mux, server.DefaultConn())
	return h
}

func (h *shutdownHarness) plan(grace, drain time.Duration) server.ShutdownPlan {
	return server.ShutdownPlan{Grace: grace, DrainDelay: drain, SetReady: h.ready.Store, Abort: func(ctx context.Context) error {
		h.abortAt = time.Now()
		h.deadline, _ = ctx.Deadline()
		close(h.aborted)
		return nil
	}}
}

// The shutdown's phases, in fake time: readiness 503 while serving through the drain delay;
// requests in flight answered until the grace's tail; then Abort, whose 503s are written;
// the end, within the grace.
func TestShutdownPhases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newShutdownHarness(t)
		waiting := h.pl.connect(t) // a request that waits past the grace, as in a long queue
		io.WriteString(waiting, "POST /work HTTP/1.1\r\nHost: ortserve\r\nContent-Length: 0\r\n\r\n")
		synctest.Wait()

		start := time.Now()
		done := make(chan error, 1)
		go func() { done <- h.f.Shutdown(h.plan(8*time.Second, 2*time.Second)) }()
		time.Sleep(time.Second) // inside the drain delay
		cl := h.pl.connect(t)   // new connections are still accepted
		if resp, _, err := cl.do("GET", "/health", ""); err != nil || resp.StatusCode != 503 {
			t.Errorf("/health during the drain delay: %v %v, want 503", resp, err)
		}
		cl = h.pl.connect(t)
		if resp, _, err := cl.do("POST", "/quick", ""); err != nil || resp.StatusCode != 200 || !resp.Close {
			t.Errorf("a request during the drain delay: %v %v, want 200 with Connection: close", resp, err)
		}

		resp, _, err := (&client{waiting, bufio.NewReader(waiting)}).read()
		if err != nil || resp.StatusCode != 503 {
			t.Errorf("the request waiting at the end of the grace: %v %v, want 503", resp, err)
		}
		// grace 8 s: its tail is 1 s; Abort at 7 s, its running batches until 7.5 s.
		if at, dl := h.abortAt.Sub(start), h.deadline.Sub(start); at != 7*time.Second || dl != 7500*time.Millisecond {
			t.Errorf("Abort at %v with a deadline at %v, want 7s and 7.5s", at, dl)
		}
		if err := <-done; err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if took := time.Since(start); took > 8*time.Second {
			t.Errorf("shutdown took %v, past the 8 s grace", took)
		}
	})
}

// When every request is answered before the grace's tail, nothing is aborted; a handler
// that ignores the abort is cut off at the end of the grace, not later.
func TestShutdownEnds(t *testing.T) {
	for _, tt := range []struct {
		name      string
		inFlight  bool
		finishAt  time.Duration // when the request in flight is released; 0: at the end
		ignore    bool          // the handler ignores the abort
		wantAbort bool
		wantTook  time.Duration // at most
	}{
		{"nothing in flight", false, 0, false, false, server.MinDrain},
		{"answered in time", true, 2 * time.Second, false, false, 2*time.Second + 500*time.Millisecond},
		{"answered 503 at the abort", true, 0, false, true, 4 * time.Second},
		{"a handler that ignores the abort", true, 0, true, true, 4 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newShutdownHarness(t)
				h.ignore = tt.ignore
				released := false
				release := func() {
					if !released {
						released = true
						close(h.release)
					}
				}
				defer release()
				if tt.inFlight {
					c := h.pl.connect(t)
					defer c.Close()
					io.WriteString(c, "POST /work HTTP/1.1\r\nHost: ortserve\r\nContent-Length: 0\r\n\r\n")
					go io.Copy(io.Discard, c)
					if tt.finishAt > 0 {
						time.AfterFunc(tt.finishAt, release)
					}
				}
				synctest.Wait()
				start := time.Now()
				if err := h.f.Shutdown(h.plan(4*time.Second, 0)); err != nil {
					t.Errorf("shutdown: %v", err)
				}
				if took := time.Since(start); took > tt.wantTook || h.abortAt.IsZero() == tt.wantAbort {
					t.Errorf("took %v, aborted %v; want at most %v, %v", took, !h.abortAt.IsZero(), tt.wantTook, tt.wantAbort)
				}
			})
		})
	}
}

// A client that sends on its idle keep-alive connection as SIGTERM arrives gets its answer,
// with Connection: close, not a reset: for server.MinDrain after the signal, with no drain delay
// configured, the server goes on reading. An answer that starts after the signal closes its
// connection even when its request came before; a connection still idle at the end is closed.
func TestShutdownAnswersWhatWasSentAtTheSignal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newShutdownHarness(t)
		sender, idle, slow := h.pl.connect(t), h.pl.connect(t), h.pl.connect(t)
		for _, c := range []*client{sender, idle} {
			if resp, _, err := c.do("POST", "/quick", ""); err != nil || resp.StatusCode != 200 || resp.Close {
				t.Fatalf("before the signal: %v %v, want 200 kept alive", resp, err)
			}
		}
		// Admitted before the signal, answered after it.
		io.WriteString(slow, "POST /work HTTP/1.1\r\nHost: ortserve\r\nContent-Length: 0\r\n\r\n")
		synctest.Wait()

		start := time.Now()
		done := make(chan error, 1)
		go func() { done <- h.f.Shutdown(h.plan(8*time.Second, 0)) }()
		synctest.Wait() // the signal has arrived: not ready, draining
		if resp, _, err := sender.do("POST", "/quick", ""); err != nil || resp.StatusCode != 200 || !resp.Close {
			t.Errorf("a request sent on a kept-alive connection at the signal: %v %v, want 200 with Connection: close", resp, err)
		}
		close(h.release)
		if resp, _, err := slow.read(); err != nil || resp.StatusCode != 200 || !resp.Close {
			t.Errorf("a request admitted before the signal, answered after: %v %v, want 200 with Connection: close", resp, err)
		}
		if err := <-done; err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if took := time.Since(start); took != server.MinDrain {
			t.Errorf("shutdown took %v, want the least drain, %v", took, server.MinDrain)
		}
		synctest.Wait()
		for name, c := range map[string]*client{"answered at the signal": sender, "idle": idle, "answered after the signal": slow} {
			if !c.closed() {
				t.Errorf("the connection %s is still open after the shutdown", name)
			}
		}
	})
}
