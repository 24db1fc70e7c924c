package engine

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/ortserve/ortserve/runtime"
	"github.com/ortserve/ortserve/tokenize"
)

// session counts its runs, how many run at once at most, and its closes. When started is not
// nil, a run says on it that it has started, then waits for release.
type session struct {
	packs            bool
	started, release chan struct{}

	mu            sync.Mutex
	runs, running int
	most, closes  int
}

func (s *session) Run(context.Context, tokenize.Batch) (runtime.Tensor, error) {
	s.mu.Lock()
	s.runs++
	s.running++
	s.most = max(s.most, s.running)
	s.mu.Unlock()
	if s.started != nil {
		s.started <- struct{}{}
		<-s.release
	}
	s.mu.Lock()
	s.running--
	s.mu.Unlock()
	return runtime.Tensor{}, nil
}

func (s *session) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closes++
	if s.closes > 1 {
		return errors.New("closed twice")
	}
	return nil
}

func (s *session) Packs() bool { return s.packs }

// A pool of streams over one session runs as many batches at once as it has streams, all on
// the session; closing the pool closes the session once, after its last stream.
func TestStreamsShareOneSession(t *testing.T) {
	s := &session{packs: true, started: make(chan struct{}), release: make(chan struct{})}
	pool := runtime.NewPool(streams(s, 3))
	if pool.Size() != 3 || !pool.Packs() {
		t.Errorf("pool of %d streams, packs %v; want 3 and the session's true", pool.Size(), pool.Packs())
	}
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			if _, err := pool.Run(t.Context(), runtime.SyntheticBatch(1, 4)); err != nil {
				t.Error(err)
			}
		})
	}
	// The runs are released only once all three have started: a pool that ran them one by
	// one would never get past this.
	for range 3 {
		<-s.started
	}
	close(s.release)
	wg.Wait()
	if s.runs != 3 || s.most != 3 {
		t.Errorf("%d runs, %d at once; want 3 and 3", s.runs, s.most)
	}
	if err := pool.Close(); err != nil || s.closes != 1 {
		t.Errorf("close: %v, session closed %d times; want once", err, s.closes)
	}
}

// Each stream closes once however often it is closed; the session closes with the last one.
func TestStreamsCloseOnce(t *testing.T) {
	s := &session{}
	st := streams(s, 2)
	for range 2 {
		if err := st[0].Close(); err != nil {
			t.Fatal(err)
		}
	}
	if s.closes != 0 {
		t.Fatalf("session closed while a stream is open")
	}
	if err := st[1].Close(); err != nil || s.closes != 1 {
		t.Errorf("close: %v, session closed %d times; want once", err, s.closes)
	}
	if runtime.NewPool(streams(&session{}, 1)).Packs() {
		t.Error("streams of a session that does not pack say they do")
	}
}
