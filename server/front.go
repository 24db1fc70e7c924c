package server

// serve's HTTP front end: how it treats connections (timeouts, a cap per client) and how it
// stops on SIGTERM within --grace.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// Conn is how serve's HTTP server treats connections (docs/config.md, "Connections").
type Conn struct {
	// ReadTimeout bounds reading a request, head and body, from its first byte. Once the
	// body is read, net/http lifts the deadline (for its background read, which watches for
	// the client going away): the inference that follows is bounded by --request-timeout,
	// not by this.
	ReadTimeout time.Duration
	// WriteTimeout bounds writing a response, from its first byte: a client that does not
	// read its answer is cut off, but the time to compute the answer never counts.
	WriteTimeout time.Duration
	// IdleTimeout is how long a keep-alive connection may wait for its next request.
	IdleTimeout time.Duration
	// MaxConnsPerClient caps the connections one IP address holds open; 0: no cap.
	MaxConnsPerClient int
}

// DefaultConn is how connections are treated when nothing is configured. The timeouts are
// generous for what they bound, since each only cuts off a client that stalls, never
// inference (see Conn). TEI's router sets none and leaves them to the proxy in front;
// ortserve may face clients directly, so it sets its own.
//   - read 30s: the largest body (2 MiB) at 1 Mbit/s takes 17 s. nginx allows 60 s between
//     two reads of a body, which a client trickling a byte a minute satisfies forever; here
//     it is 30 s for the whole request.
//   - write 30s: a large answer (32 embeddings of 1024 floats, ~400 KB) to a slow reader.
//   - idle 120s: longer than what load balancers and proxies keep an idle upstream
//     connection (AWS ALB 60 s, nginx's upstream keepalive_timeout 60 s), so that they, not
//     ortserve, close it: a server that closes first races the proxy's next request on it,
//     which the proxy then answers 502. Behind a Google Cloud load balancer (600 s), raise it
//     past 620 s.
func DefaultConn() Conn {
	return Conn{ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: 120 * time.Second}
}

// readHeaderTimeout bounds a request's head, and a new connection's wait for its first
// request: headers are small, and a client that trickles them holds a connection for
// nothing.
const readHeaderTimeout = 10 * time.Second

// MinDrain is the least time Shutdown goes on serving after SIGTERM, whatever --drain-delay
// says (within --grace). http.Server.Shutdown closes the listener and every idle keep-alive
// connection at once. A request that a client wrote on an idle connection just before the
// signal, still in the kernel's socket buffer because the server had not yet read it, is
// lost with the connection, and so is one on a connection still in the listener's backlog:
// its client sees a reset or an EOF for a request it sent while the server was up. Serving
// on for MinDrain, every such request is read and answered (with Connection: close, so that
// its connection closes after the answer); a connection still idle at the end has sent
// nothing since the signal, and Shutdown closes it. Reading what has already arrived takes
// a busy server milliseconds (a goroutine's scheduling delay); half a second leaves a wide
// margin, and costs every shutdown that much.
const MinDrain = 500 * time.Millisecond

// Front is serve's HTTP server over one listener: its connection timeouts and cap per
// client, and its shutdown.
type Front struct {
	hs     *http.Server
	served chan error // Serve's return
	// draining is set by shutdown: answers then say Connection: close.
	draining atomic.Bool
	log      *slog.Logger
}

// NewFront serves h on ln as c says, until Shutdown.
func NewFront(ln net.Listener, h http.Handler, c Conn, log *slog.Logger) *Front {
	f := &Front{served: make(chan error, 1), log: log}
	f.hs = &http.Server{
		Handler:           f.deadlines(h, c.WriteTimeout),
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       c.ReadTimeout,
		// WriteTimeout runs from the end of the request's head: it would count inference
		// time. deadlines sets a write deadline per response instead, from its first byte;
		// this one covers only what the server writes before the handler runs.
		WriteTimeout: c.WriteTimeout,
		IdleTimeout:  c.IdleTimeout,
		ErrorLog:     slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	if c.ReadTimeout > 0 {
		f.hs.ReadHeaderTimeout = min(readHeaderTimeout, c.ReadTimeout)
	}
	if c.IdleTimeout == 0 {
		f.hs.IdleTimeout = -1 // no timeout; http.Server would take ReadTimeout for 0
	}
	ln = LimitConnsPerClient(ln, c.MaxConnsPerClient)
	go func() { f.served <- f.hs.Serve(ln) }()
	return f
}

// deadlines gives each response the write deadline Conn describes. http.Server's own
// WriteTimeout runs from the end of the request's head, so by itself it would bound
// inference too: the write of an answer that took long to compute would fail, and the
// client would see a reset. So the deadline is lifted when the handler starts, and set anew
// when the answer does. (The read deadline needs no such care: net/http lifts it once the
// body is read.)
//
// An answer that starts while draining (after SIGTERM) says Connection: close, so that
// clients stop reusing their keep-alive connections before shutdown closes them, and move to
// other replicas: behind a Kubernetes Service, connections already open keep reaching this
// pod after it leaves the endpoints. That is decided when the answer starts, not when the
// request does: a request admitted before the signal and answered after it closes its
// connection too, rather than leaving it idle for the client to send on as it is closed.
func (f *Front) deadlines(h http.Handler, write time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		// Fails only where the writer cannot take deadlines (ErrNotSupported) or the
		// connection is gone: either way the answer is written as it would be without one.
		_ = rc.SetWriteDeadline(time.Time{})
		ww := &writeDeadline{ResponseWriter: w, rc: rc, d: write, draining: &f.draining}
		h.ServeHTTP(ww, r)
		// A handler that wrote nothing: net/http writes its header once this returns.
		ww.start()
	})
}

// writeDeadline starts an answer: it sets the connection's write deadline, d from now, and
// Connection: close while draining.
type writeDeadline struct {
	http.ResponseWriter
	rc       *http.ResponseController
	d        time.Duration
	draining *atomic.Bool
	started  bool
}

func (w *writeDeadline) start() {
	if w.started {
		return
	}
	w.started = true
	if w.draining.Load() {
		w.Header().Set("Connection", "close")
	}
	if w.d > 0 {
		_ = w.rc.SetWriteDeadline(time.Now().Add(w.d)) // as in deadlines: nothing to do if it fails
	}
}

func (w *writeDeadline) WriteHeader(code int) {
	if code >= 200 { // an informational header (100, 103) does not start the answer
		w.start()
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *writeDeadline) Write(p []byte) (int, error) {
	w.start()
	return w.ResponseWriter.Write(p)
}

func (w *writeDeadline) FlushError() error {
	w.start()
	return w.rc.Flush()
}

// Unwrap lets http.ResponseController reach the connection.
func (w *writeDeadline) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// ShutdownPlan is what Shutdown stops, besides the HTTP server.
type ShutdownPlan struct {
	Grace time.Duration // from SIGTERM to the last connection closed
	// DrainDelay is, of Grace, how long to keep serving while not ready; at least MinDrain.
	DrainDelay time.Duration
	// SetReady flips readiness (/health, KServe's ready).
	SetReady func(bool)
	// Abort fails what is still queued with runtime.ErrClosed (503) and lets the batches
	// running finish until its ctx ends (models.Repository.Abort).
	Abort func(context.Context) error
	// GRPC, when set, is the gRPC server, stopped beside the HTTP one: GracefulStop where
	// Shutdown is, then Stop at the end of the grace.
	GRPC *GRPCServer
}

// stopGRPC starts gs's GracefulStop (no new RPCs, those in flight answered) and returns what
// is closed once it has returned; a nil gs is stopped already.
func stopGRPC(gs *GRPCServer) <-chan struct{} {
	done := make(chan struct{})
	if gs == nil {
		close(done)
		return done
	}
	go func() {
		defer close(done)
		gs.GracefulStop()
	}()
	return done
}

// waitGRPC waits for grpcStopped until ctx ends. A stop already done wins over an ended
// ctx (select would pick either at random): without a gRPC server, grpcStopped is closed
// from the start, and there is nothing to Stop.
func waitGRPC(ctx context.Context, grpcStopped <-chan struct{}) error {
	select {
	case <-grpcStopped:
		return nil
	default:
	}
	select {
	case <-grpcStopped:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("grpc server: %w", ctx.Err())
	}
}

// Shutdown stops the front end within p.Grace of its call, which is SIGTERM's arrival:
//
//  1. not ready: /health and KServe's ready say 503, while everything else is served as
//     before (with Connection: close) for the drain delay, for load balancers to notice,
//     and for at least MinDrain, for what clients sent before the signal to be read;
//  2. http.Server.Shutdown (and the gRPC server's GracefulStop): no new connections; the
//     requests in flight are answered, until the last tail of the grace, tail = min(grace/4, 1s);
//  3. if some are still waiting: Abort answers what is queued with 503 at once, and lets the
//     batches already running finish in the first half of the tail (their requests get
//     200), cancelling them past it (503);
//  4. the second half of the tail is for those answers to be written; at the end of the
//     grace, the connections left are closed.
//
// So every request admitted gets an answer within the grace, and the process exits a few
// milliseconds after it, once the models are closed. It returns nil even when step 3 was
// needed: the shutdown went as configured.
//
//nolint:contextcheck // it starts when serve's ctx is done: its deadlines are the grace's, on fresh contexts
func (f *Front) Shutdown(p ShutdownPlan) error {
	start := time.Now()
	end := start.Add(p.Grace)
	tail := min(p.Grace/4, time.Second)
	p.SetReady(false)
	f.draining.Store(true)
	drain := min(max(p.DrainDelay, MinDrain), p.Grace-tail)
	f.log.Info("shutting down", "grace", p.Grace, "drain_delay", drain)
	if d := drain; d > 0 {
		select {
		case <-time.After(d):
		case err := <-f.served:
			return fmt.Errorf("http server: %w", err)
		}
	}
	ctx, cancel := context.WithDeadline(context.Background(), end.Add(-tail))
	grpcStopped := stopGRPC(p.GRPC)
	err := f.hs.Shutdown(ctx)
	if err == nil {
		err = waitGRPC(ctx, grpcStopped)
	}
	cancel()
	if err == nil {
		f.log.Info("shut down: every request answered", "took", time.Since(start).Round(time.Millisecond))
		return f.serveErr()
	}
	f.log.Warn("grace nearly over: answering the requests still queued with 503", "took", time.Since(start).Round(time.Millisecond))
	ctx, cancel = context.WithDeadline(context.Background(), end.Add(-tail/2))
	if err := p.Abort(ctx); err != nil {
		f.log.Warn("batches still running at the end of the grace were cancelled", "err", err)
	}
	cancel()
	ctx, cancel = context.WithDeadline(context.Background(), end)
	defer cancel()
	if err := f.hs.Shutdown(ctx); err != nil {
		f.log.Warn("closing the connections still open at the end of the grace", "err", err)
		f.hs.Close()
	}
	if err := waitGRPC(ctx, grpcStopped); err != nil {
		f.log.Warn("closing the gRPC connections still open at the end of the grace", "err", err)
		p.GRPC.Stop()
	}
	f.log.Info("shut down", "took", time.Since(start).Round(time.Millisecond))
	return f.serveErr()
}

// Stopped receives the HTTP server's error if it stops by itself, before Shutdown.
func (f *Front) Stopped() <-chan error { return f.served }

// Close closes the listener and every connection at once.
func (f *Front) Close() error { return f.hs.Close() }

// serveErr is Serve's error once the server is shut down: none for a clean stop.
func (f *Front) serveErr() error {
	if err := <-f.served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("http server: %w", err)
	}
	return nil
}
