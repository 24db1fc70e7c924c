// Package runtime runs padded batches on model sessions: the Runner interface that the
// ONNX Runtime binding (runtime/ort) satisfies, and the pool of sessions that formed batches
// run on. On CUDA each session is its own stream; on CPU each is one or more threads.
package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ortserve/ortserve/tokenize"
)

// ErrClosed is returned by a Pool after Close, and by a Batcher after Close or Abort (and
// for the requests an Abort fails): the server is shutting down.
var ErrClosed = errors.New("runtime: closed")

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

// Segments splits a packed batch's output, of shape [rows, cols, ...] (tokenize.Pack,
// tokenize.PackRows), into one tensor per encoding, of shape [lengths[i], ...], from the
// token at starts[i] of the rows × cols, row-major. They share t's data.
func (t Tensor) Segments(starts, lengths []int) []Tensor {
	size := 1
	for _, d := range t.Shape[2:] {
		size *= int(d)
	}
	out := make([]Tensor, len(lengths))
	for i, n := range lengths {
		s := append([]int64{int64(n)}, t.Shape[2:]...)
		at := starts[i]
		out[i] = Tensor{Shape: s, Data: t.Data[at*size : (at+n)*size : (at+n)*size]}
	}
	return out
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

// Packer is a Session that may say it runs packed batches (tokenize.Pack): its graph reads
// an attention mask that numbers the texts of a row, keeps each text's attention to its own
// tokens, and answers per token.
type Packer interface {
	Packs() bool
}

// Pool runs batches on a fixed set of sessions, one batch per session at a time. Its size
// is a tuning knob: sessions = streams on CUDA, sessions × intra-op threads = cores on CPU.
// Every run it makes is timed into its CostModel: what a batch costs is a property of the
// version's graph on this device, so the pool is where it is learned.
type Pool struct {
	free     chan Session
	sessions []Session
	done     chan struct{}
	cost     *CostModel
	// calibrating is set while Calibrate or CalibrateServing measures.
	calibrating atomic.Bool
	// calibration are the runs Calibrate measured, or Seed gave, for Calibration.
	calibMu     sync.Mutex
	calibration []Observation
}

// NewPool takes ownership of sessions.
func NewPool(sessions []Session) *Pool {
	if len(sessions) == 0 {
		panic("runtime: NewPool needs at least one session")
	}
	p := &Pool{free: make(chan Session, len(sessions)), sessions: sessions, done: make(chan struct{}), cost: NewCostModel()}
	for _, s := range sessions {
		p.free <- s
	}
	return p
}

// Size is the number of sessions.
func (p *Pool) Size() int { return len(p.sessions) }

// Packs reports whether every session runs packed batches.
func (p *Pool) Packs() bool {
	for _, s := range p.sessions {
		if pk, ok := s.(Packer); !ok || !pk.Packs() {
			return false
		}
	}
	return true
}

// InUse is the number of sessions running a batch now.
func (p *Pool) InUse() int { return len(p.sessions) - len(p.free) }

// Cost is what the pool has learned of its batches' run times.
func (p *Pool) Cost() *CostModel { return p.cost }

// Run waits for a free session, runs b on it and gives the session back.
func (p *Pool) Run(ctx context.Context, b tokenize.Batch) (Tensor, error) {
	s, err := p.acquire(ctx)
	if err != nil {
		return Tensor{}, err
	}
	// Release only after Run returns: the native call may still be using the session.
	defer func() { p.free <- s }()
	start := time.Now()
	out, err := s.Run(ctx, b)
	if err == nil {
		p.cost.Observe(b.Rows, b.Cols, time.Since(start), false)
	}
	return out, err
}

func (p *Pool) acquire(ctx context.Context) (Session, error) {
	select {
	case s := <-p.free:
		return s, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-p.done:
		return nil, ErrClosed
	}
}

// RunFixed runs encs as one batch on a free session and returns one tensor per encoding, in
// order. Its layout depends on encs alone, never on what the pool's cost model has learned:
// packed, one row of every text end to end (tokenize.PackRows); padded, one text a row
// (tokenize.Pad). The same encodings then always make the same tensors, so that a graph whose
// answers depend on its batch-mates (dynamic int8) answers the same on every run, as `server
// gate`'s fixed chunks need. No bound splits the batch, so the caller sizes it. packed needs a
// pool that packs (Packs).
func (p *Pool) RunFixed(ctx context.Context, encs []tokenize.Encoding, packed bool) ([]Tensor, error) {
	// With every layout predicted to cost nothing, packRows takes one row.
	return p.runLaidOut(ctx, encs, packed, func(int, int) time.Duration { return 0 })
}

// runLaidOut runs encs as one batch laid out on cost (layout).
func (p *Pool) runLaidOut(ctx context.Context, encs []tokenize.Encoding, packed bool, cost func(rows, cols int) time.Duration) ([]Tensor, error) {
	if len(encs) == 0 {
		return nil, nil
	}
	if packed && !p.Packs() {
		return nil, errors.New("runtime: a packed batch on sessions that do not pack: run it padded")
	}
	lens := make([]int, len(encs))
	for i, e := range encs {
		lens[i] = e.Len()
	}
	in := layOut(encs, layout(lens, packed, cost))
	out, err := p.Run(ctx, in)
	if err != nil {
		return nil, err
	}
	return split(out, in), nil
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
