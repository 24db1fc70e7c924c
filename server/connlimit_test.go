package server_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ortserve/ortserve/server"
)

// pipeListener accepts the server ends of net.Pipe connections that dial makes, each from
// the address it is given.
type pipeListener struct {
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

// Close stops Accept; http.Server closes its listener in both Shutdown and Close.
func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080} }

// dial connects from addr ("10.0.0.1:1234"; any other string is a non-IP address) and
// returns the client's end, or nil once the listener is closed.
func (l *pipeListener) dial(addr string) net.Conn {
	srv, client := net.Pipe()
	select {
	case l.conns <- fromAddr{srv, addr}:
		return client
	case <-l.closed:
		return nil
	}
}

type fromAddr struct {
	net.Conn
	addr string
}

func (c fromAddr) RemoteAddr() net.Addr {
	if ap, err := net.ResolveTCPAddr("tcp", c.addr); err == nil {
		return ap
	}
	return &net.UnixAddr{Name: c.addr, Net: "unix"}
}

// Connections past a client's cap are answered 429 at accept and closed; closing one makes
// room again; each client has its own count; addresses that are not IP are not counted.
func TestLimitConnsPerClient(t *testing.T) {
	type step struct {
		dial  string // an address to connect from; "" to close connection close instead
		close int    // index, among the dials so far, of the connection to close
		want  bool   // for a dial: accepted (true) or refused with 429 (false)
	}
	for _, tt := range []struct {
		name  string
		cap   int
		steps []step
	}{
		{"under the cap", 2, []step{{dial: "10.0.0.1:1", want: true}, {dial: "10.0.0.1:2", want: true}}},
		{"over the cap", 2, []step{{dial: "10.0.0.1:1", want: true}, {dial: "10.0.0.1:2", want: true}, {dial: "10.0.0.1:3", want: false}}},
		{"a close makes room", 1, []step{{dial: "10.0.0.1:1", want: true}, {dial: "10.0.0.1:2", want: false}, {close: 0}, {dial: "10.0.0.1:3", want: true}}},
		{"each client its own cap", 1, []step{{dial: "10.0.0.1:1", want: true}, {dial: "10.0.0.2:1", want: true}, {dial: "[::1]:1", want: true}, {dial: "10.0.0.1:2", want: false}}},
		{"IPv4 in IPv6 is the same client", 1, []step{{dial: "10.0.0.1:1", want: true}, {dial: "[::ffff:10.0.0.1]:2", want: false}}},
		{"non-IP addresses are not counted", 1, []step{{dial: "@", want: true}, {dial: "@", want: true}}},
		{"cap 0 is off", 0, []step{{dial: "10.0.0.1:1", want: true}, {dial: "10.0.0.1:2", want: true}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				pl := newPipeListener()
				ln := server.LimitConnsPerClient(pl, tt.cap)
				defer ln.Close()
				accepted := make(chan net.Conn)
				go func() {
					for {
						c, err := ln.Accept()
						if err != nil {
							return
						}
						accepted <- c
					}
				}()
				var conns []net.Conn // server ends, by dial; nil when refused
				for i, s := range tt.steps {
					if s.dial == "" {
						conns[s.close].Close()
						synctest.Wait()
						continue
					}
					client := pl.dial(s.dial)
					synctest.Wait()
					select {
					case c := <-accepted:
						conns = append(conns, c)
						if !s.want {
							t.Errorf("step %d: %s accepted over the cap", i, s.dial)
						}
					default:
						conns = append(conns, nil)
						if s.want {
							t.Errorf("step %d: %s refused under the cap", i, s.dial)
						}
						checkTooMany(t, client)
					}
				}
			})
		})
	}
}

// checkTooMany sends a request on c and reads the refusal: a 429 with Retry-After, and a
// JSON body that names the limit.
func checkTooMany(t *testing.T, c net.Conn) {
	t.Helper()
	defer c.Close()
	if _, err := io.WriteString(c, "GET /health HTTP/1.1\r\nHost: ortserve\r\n\r\n"); err != nil {
		t.Fatalf("sending a request: %v", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the refusal: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "1" || !resp.Close || !strings.Contains(string(body), "max_conns_per_client") {
		t.Errorf("refusal: %d %v %s", resp.StatusCode, resp.Header, body)
	}
}

// A refused client that sends nothing holds its refusal only refuseTimeout (1 s); past
// refusingAtOnce (64) refusals at once, the rest are closed at once.
func TestLimitConnsRefusalsAreBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pl := newPipeListener()
		ln := server.LimitConnsPerClient(pl, 1)
		defer ln.Close()
		go func() {
			for {
				if _, err := ln.Accept(); err != nil {
					return
				}
			}
		}()
		pl.dial("10.0.0.1:1") // takes the one place
		var stuck []net.Conn
		for i := range 64 {
			stuck = append(stuck, pl.dial(fmt.Sprintf("10.0.0.1:%d", 2+i)))
		}
		synctest.Wait()
		// The 65th is closed without an answer: its first read ends at once.
		c := pl.dial("10.0.0.1:99")
		synctest.Wait()
		start := time.Now()
		if n, err := c.Read(make([]byte, 1)); err == nil || time.Since(start) != 0 {
			t.Errorf("past the bound: read %d bytes, %v after %v; want the end at once", n, err, time.Since(start))
		}
		// The 64 that never read are dropped after a second.
		time.Sleep(time.Second)
		synctest.Wait()
		for i, s := range stuck {
			if _, err := s.Read(make([]byte, 1)); err == nil {
				t.Errorf("refused connection %d still open after a second", i)
				break
			}
		}
	})
}

// Over real TCP, an HTTP client over the cap that has sent its request gets the 429, not a
// reset: the refusal half-closes, then reads what the client sent.
func TestLimitConnsOverTCP(t *testing.T) {
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := server.LimitConnsPerClient(tcp, 1)
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) })}
	closed := make(chan struct{}, 1) // a connection the server served is closed, its place freed
	hs.ConnState = func(c net.Conn, st http.ConnState) {
		// net/http half-closes before closing with the client still sending: the wrapper
		// must not hide the TCP connection's CloseWrite.
		if _, ok := c.(interface{ CloseWrite() error }); st == http.StateNew && !ok {
			t.Error("an accepted connection has no CloseWrite")
		}
		// net/http closes the connection, and so the limiter frees its place, before
		// it reports StateClosed.
		if st == http.StateClosed {
			select {
			case closed <- struct{}{}:
			default:
			}
		}
	}
	go hs.Serve(ln)
	defer hs.Close()
	held, err := net.Dial("tcp", tcp.Addr().String()) // the one connection allowed, idle
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	for i := range 20 {
		client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := client.Post("http://"+tcp.Addr().String()+"/embed", "application/json", strings.NewReader(`{"inputs": "`+strings.Repeat("a", 100_000)+`"}`))
		if err != nil {
			t.Fatalf("request %d: %v, want a 429", i, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("request %d: %d, want 429", i, resp.StatusCode)
		}
	}
	held.Close()
	// The place held is free again once the server has closed its side.
	select {
	case <-closed:
	case <-time.After(time.Minute):
		t.Fatal("the server never closed the held connection")
	}
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Post("http://"+tcp.Addr().String()+"/embed", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatalf("after the held connection closed: %v, want a 200", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("after the held connection closed: %d, want 200: its place was not freed", resp.StatusCode)
	}
}
