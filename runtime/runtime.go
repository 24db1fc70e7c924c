// Package runtime runs padded batches on model sessions: the Runner interface that the
// ONNX Runtime binding (runtime/ort) satisfies, and the pool of sessions that formed batches
// run on. On CUDA each session is its own stream; on CPU each is one or more threads.
package runtime

import (
	"context"
	"errors"
	"fmt"

	"github.com/ortserve/ortserve/tokenize"
)

// ErrClosed is returned by a Pool after Close.
var ErrClosed = errors.New("runtime: pool closed")

// Tensor is a float32 tensor, row-major. Whoever receives one owns Data.
type Tensor struct {
	Shape []int64
	Data  []float32
}

// Rows splits a tensor of shape [n, ...] into its n rows of shape [...]. The rows share
// t's data.
func (t Tensor) Rows() []Tensor {
	if len(t.Shape) == 0 || t.Shape[0] == 0 {
		return nil
	}
	n := int(t.Shape[0])
	size := len(t.Data) / n
	rows := make([]Tensor, n)
	for i := range rows {
		rows[i] = Tensor{Shape: t.Shape[1:], Data: t.Data[i*size : (i+1)*size : (i+1)*size]}
	}
	return rows
}

// Runner runs one batch. Implementations must honour ctx cancellation and be safe for
// concurrent use. Run does not keep b after it returns.
type Runner interface {
	Run(ctx context.Context, b tokenize.Batch) (Tensor, error)
}

// Session is a Runner that holds native resources.
type Session interface {
	Runner
	Close() error
}

// Pool runs batches on a fixed set of sessions, one batch per session at a time. Its size
// is a tuning knob: sessions = streams on CUDA, sessions × intra-op threads = cores on CPU.
type Pool struct {
	free     chan Session
	sessions []Session
	done     chan struct{}
}

// NewPool takes ownership of sessions.
func NewPool(sessions []Session) *Pool {
	if len(sessions) == 0 {
		panic("runtime: NewPool needs at least one session")
	}
	p := &Pool{free: make(chan Session, len(sessions)), sessions: sessions, done: make(chan struct{})}
	for _, s := range sessions {
		p.free <- s
	}
	return p
}

// Size is the number of sessions.
func (p *Pool) Size() int { return len(p.sessions) }

// InUse is the number of sessions running a batch now.
func (p *Pool) InUse() int { return len(p.sessions) - len(p.free) }

// Run waits for a free session, runs b on it and gives the session back.
func (p *Pool) Run(ctx context.Context, b tokenize.Batch) (Tensor, error) {
	var s Session
	select {
	case s = <-p.free:
	case <-ctx.Done():
		return Tensor{}, ctx.Err()
	case <-p.done:
		return Tensor{}, ErrClosed
	}
	// Release only after Run returns: the native call may still be using the session.
	defer func() { p.free <- s }()
	return s.Run(ctx, b)
}

// Close waits for running batches to finish, then closes every session. Runs that are
// waiting for a session fail with ErrClosed.
func (p *Pool) Close() error {
	close(p.done)
	var errs []error
	for range p.sessions {
		s := <-p.free
		if err := s.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("runtime: closing pool: %w", err)
	}
	return nil
}
