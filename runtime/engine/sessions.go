package engine

import (
	"context"
	"fmt"
	"sync"

	"github.com/ortserve/ortserve/runtime"
	"github.com/ortserve/ortserve/runtime/ort"
)

// opened are a version's sessions and the streams its pool runs on them.
type opened struct {
	// sessions are the graphs loaded, each holding its own weights.
	sessions []runtime.Session
	// streams are the pool's slots: the sessions themselves, or, where they share
	// (sharesWeights), as many streams over the one session. Closing them all closes the
	// sessions.
	streams []runtime.Session
}

// sharesWeights says whether a version's streams run on one session on provider p with
// threads intra-op threads a session. On the CPU with one thread they do: each run executes on
// its caller's thread, runs of one session side by side use as many cores as separate
// sessions would, and the weights are held once instead of once a stream. With more threads
// a session's runs would share its one pool of threads, and on CUDA a session is a stream: one
// session a stream there.
func sharesWeights(p ort.Provider, threads int) bool { return p == ort.ProviderCPU && threads == 1 }

// OpenSessions opens n streams over the ONNX file at path, reading output, as a version's
// are opened, and warms up every session under them under ctx: what bench --offline measures
// on. Closing every stream closes the sessions.
func (e *Engine) OpenSessions(ctx context.Context, path, output string, n int) ([]runtime.Session, error) {
	o, err := e.openSessions(ctx, path, output, n, true)
	return o.streams, err
}

// openSessions opens n streams: n sessions, or one that n streams share (sharesWeights). It
// warms the sessions up, the first only if warmFirst: a version warms its first session on
// one shape and leaves the rest to its calibration, which runs every shape it measures twice,
// the first run warming it up (Load), so a version's first answer waits for one warm-up run. The sessions are opened and warmed up side by
// side, each a graph to load and optimize mostly on one thread. On any failure it closes the
// ones it opened and returns the first error: the sessions of one file fail alike, and one
// line says why.
func (e *Engine) openSessions(ctx context.Context, path, output string, n int, warmFirst bool) (opened, error) {
	o := e.opts
	o.Output = output
	k := n
	if sharesWeights(o.Provider, o.IntraOpThreads) {
		k = 1
	}
	sessions := make([]runtime.Session, k)
	errs := make([]error, k)
	var wg sync.WaitGroup
	for i := range k {
		wg.Go(func() {
			s, err := e.env.NewSession(path, o)
			if err != nil {
				errs[i] = err
				return
			}
			sessions[i] = s
			if i == 0 && !warmFirst {
				return
			}
			if err := warmUp(ctx, s, warmUpShapes); err != nil {
				errs[i] = fmt.Errorf("warm-up: %w", err)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err == nil {
			continue
		}
		for _, s := range sessions {
			if s != nil {
				s.Close()
			}
		}
		return opened{}, err
	}
	if k < n {
		return opened{sessions: sessions, streams: streams(sessions[0], n)}, nil
	}
	return opened{sessions: sessions, streams: sessions}, nil
}

// warmUpShapes are the batch × sequence shapes every session runs once before its version
// serves: the first runs of a shape allocate memory (and on CUDA pick kernels).
var warmUpShapes = [][2]int{{1, 16}, {4, 16}, {1, 64}, {4, 64}}

// warmUp runs a session once on each of shapes.
func warmUp(ctx context.Context, s runtime.Session, shapes [][2]int) error {
	for _, sh := range shapes {
		if _, err := s.Run(ctx, runtime.SyntheticBatch(sh[0], sh[1])); err != nil {
			return err
		}
	}
	return nil
}
