package engine

import (
	"context"
	"sync"

	"github.com/ortserve/ortserve/runtime"
	"github.com/ortserve/ortserve/tokenize"
)

// streams are n runtime.Sessions that all run on one session s, for a pool of n slots over
// one copy of the weights: on the CPU, with one intra-op thread, ONNX Runtime runs each Run
// on its caller's thread, and runs of one session at once run side by side (a session is
// safe for concurrent use, and every run has its own RunOptions), so n runs at once use n
// cores as n sessions would, while the graph and its weights are held once. Each stream
// closes once, whatever its callers do; the last stream closed closes s.
func streams(s runtime.Session, n int) []runtime.Session {
	sh := &shared{s: s, open: n}
	out := make([]runtime.Session, n)
	for i := range out {
		out[i] = &stream{shared: sh}
	}
	return out
}

// shared is the session the streams run on, and how many of them are still open.
type shared struct {
	s    runtime.Session
	mu   sync.Mutex
	open int
}

// stream is one of the streams over a shared session.
type stream struct {
	*shared
	once sync.Once
	err  error
}

var _ runtime.Packer = (*stream)(nil)

func (st *stream) Run(ctx context.Context, b tokenize.Batch) (runtime.Tensor, error) {
	return st.s.Run(ctx, b)
}

// Packs is the shared session's answer (runtime.Packer).
func (st *stream) Packs() bool {
	p, ok := st.s.(runtime.Packer)
	return ok && p.Packs()
}

// Close closes the stream; the shared session closes with the last one. Calls after the first
// return the first's error.
func (st *stream) Close() error {
	st.once.Do(func() {
		st.mu.Lock()
		st.open--
		last := st.open == 0
		st.mu.Unlock()
		if last {
			st.err = st.s.Close()
		}
	})
	return st.err
}
