package engine

import (
	"context"
	"fmt"
	"sync"

	"github.com/ortserve/ortserve/runtime"
)

// OpenSessions opens n sessions of the ONNX file at path, reading output, as a version's
// sessions are opened, and warms every one of them up under ctx: what bench --offline
// measures on.
func (e *Engine) OpenSessions(ctx context.Context, path, output string, n int) ([]runtime.Session, error) {
	return e.openSessions(ctx, path, output, n, true)
}

// openSessions opens n sessions and warms them up, the first only if warmFirst: a pool's
// calibration runs every shape it measures twice on its first session, the first run warming
// it up, so a version that calibrates need not warm that session twice. The sessions are
// opened and warmed up side by side, each a graph to load and optimize mostly on one thread.
// On any failure it closes the ones it opened and returns the first error: the sessions of
// one file fail alike, and one line says why.
func (e *Engine) openSessions(ctx context.Context, path, output string, n int, warmFirst bool) ([]runtime.Session, error) {
	o := e.opts
	o.Output = output
	sessions := make([]runtime.Session, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
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
			if err := warmUp(ctx, s); err != nil {
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
		return nil, err
	}
	return sessions, nil
}

// warmUpShapes are the batch × sequence shapes every session runs once before its version
// serves: the first runs of a shape allocate memory (and on CUDA pick kernels).
var warmUpShapes = [][2]int{{1, 16}, {4, 16}, {1, 64}, {4, 64}}

// warmUp runs a session on warmUpShapes.
func warmUp(ctx context.Context, s runtime.Session) error {
	for _, sh := range warmUpShapes {
		if _, err := s.Run(ctx, runtime.SyntheticBatch(sh[0], sh[1])); err != nil {
			return err
		}
	}
	return nil
}
