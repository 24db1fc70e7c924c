package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// LimitConnsPerClient wraps ln so that one client address holds at most perClient of its
// connections open at once (serve's --max-conns-per-client); perClient ≤ 0 returns ln as it
// is. A connection over the cap is refused at accept, before the HTTP server sees it: it is
// answered a minimal HTTP/1.1 429 with Retry-After and closed.
//
// Why answer rather than just close: a bare close looks to the client like a network fault
// (EOF or reset), which HTTP clients retry at once or report as a broken server, while a 429
// says what is wrong and when to come back. The answer follows the request's head (an answer
// before the request reads to a client as a broken connection), then the rest of what the
// client sends is read and discarded until it closes, briefly, so that closing with unread
// bytes does not turn into a reset that destroys the 429 on its way. A refusal takes at most
// refuseTimeout, and at most refusingAtOnce are answered at a time; past that (a flood), the
// rest are closed without a word.
//
// A client is an IP address: behind a proxy or load balancer every connection comes from
// the proxy's address, so leave the cap off there, or set it above what the proxy opens.
func LimitConnsPerClient(ln net.Listener, perClient int) net.Listener {
	if perClient <= 0 {
		return ln
	}
	return &connLimiter{
		Listener: ln,
		max:      perClient,
		open:     map[string]int{},
		refusing: make(chan struct{}, refusingAtOnce),
		tooMany:  tooManyConns(perClient),
	}
}

const (
	// refusingAtOnce bounds the goroutines answering refused connections.
	refusingAtOnce = 64
	// refuseTimeout bounds the time one refusal takes: reading the request's head, writing
	// the 429, and reading what else the client sends.
	refuseTimeout = time.Second
	// refuseHead bounds the request head a refusal reads before it answers (Go's server
	// allows 1 MiB by default; clients of an inference API send a few hundred bytes).
	refuseHead = 16 << 10
	// refuseDiscard bounds what a refusal reads of the client's request body after its
	// answer: more than the default largest body (--max-body-bytes).
	refuseDiscard = 4 << 20
)

type connLimiter struct {
	net.Listener
	max      int
	refusing chan struct{} // a token per refusal being answered
	tooMany  []byte        // the whole 429 response

	mu   sync.Mutex
	open map[string]int // connections open, by client address
}

// Accept returns the next connection within its client's cap; it refuses the others itself.
func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		client := clientAddr(c.RemoteAddr())
		if client == "" { // not an IP connection: nothing to count by
			return c, nil
		}
		l.mu.Lock()
		if l.open[client] >= l.max {
			l.mu.Unlock()
			l.refuse(c)
			continue
		}
		l.open[client]++
		l.mu.Unlock()
		return &limitedConn{Conn: c, l: l, client: client}, nil
	}
}

// refuse answers c with the 429 and closes it, without holding up Accept.
func (l *connLimiter) refuse(c net.Conn) {
	select {
	case l.refusing <- struct{}{}:
	default:
		c.Close()
		return
	}
	go func() {
		defer func() { <-l.refusing }()
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(refuseTimeout)) // fails only once c is closed, when its reads fail too
		// Answer only once the request's head is in: an HTTP client takes an answer that
		// comes before it has sent a request for a fault of the connection, not for a 429.
		// A client that sends nothing loses nothing by a bare close.
		if !readHead(c) {
			return
		}
		if _, err := c.Write(l.tooMany); err != nil {
			return
		}
		if cw, ok := c.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite() // the client reads the 429, then EOF
		}
		// Best effort, as the rest: the connection is closed whatever happens here.
		_, _ = io.Copy(io.Discard, io.LimitReader(c, refuseDiscard))
	}()
}

// readHead reads c up to the blank line that ends a request's head, within refuseHead
// bytes; it reports whether it got there.
func readHead(c net.Conn) bool {
	buf := make([]byte, refuseHead)
	n := 0
	for n < len(buf) {
		m, err := c.Read(buf[n:])
		// The blank line may straddle two reads: look from 3 bytes before this one.
		if bytes.Contains(buf[max(0, n-3):n+m], []byte("\r\n\r\n")) {
			return true
		}
		n += m
		if err != nil {
			return false
		}
	}
	return false
}

// release counts a connection of client's closed.
func (l *connLimiter) release(client string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[client]--; l.open[client] <= 0 {
		delete(l.open, client)
	}
}

// limitedConn is an accepted connection, counted against its client until closed.
type limitedConn struct {
	net.Conn
	l      *connLimiter
	client string
	once   sync.Once
}

func (c *limitedConn) Close() error {
	c.once.Do(func() { c.l.release(c.client) })
	return c.Conn.Close()
}

// CloseWrite half-closes the connection, as net/http does before closing one whose answer
// is on its way while the client still sends (413 on a large body, say), so that the close
// does not turn into a reset. Without it here, the wrapper would hide the TCP connection's.
func (c *limitedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// clientAddr is the IP address a connection comes from, or "" when it has none.
func clientAddr(a net.Addr) string {
	if t, ok := a.(*net.TCPAddr); ok {
		return t.IP.String()
	}
	if a == nil {
		return ""
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil || net.ParseIP(host) == nil {
		return ""
	}
	return net.ParseIP(host).String()
}

// tooManyConns is the refusal: a complete HTTP/1.1 response, with a body in TEI's error shape
// (the route, and so its API's shape, is not known before the request is read).
func tooManyConns(limit int) []byte {
	body, _ := json.Marshal(struct {
		Error     string `json:"error"`
		ErrorType string `json:"error_type"`
	}{
		Error:     fmt.Sprintf("too many connections from your address: at most %d at once (max_conns_per_client); reuse connections (keep-alive) or retry after a second", limit),
		ErrorType: "Overloaded",
	})
	return fmt.Appendf(nil, "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
}
