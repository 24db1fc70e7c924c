package models

import (
	"sync"
	"sync/atomic"
)

// generation is one loaded Model and the requests holding it. A request acquires the
// generation serving when it starts and releases it when it is done; once a reload (or a
// removal, or Close) has swapped it out, nobody acquires it again, and drained closes when
// its last holder releases it: then, and only then, may it be closed.
type generation struct {
	m *Model

	mu      sync.Mutex
	holders int
	retired bool
	drained chan struct{}
	err     error // Model.Close's, once the retirement is done
}

func newGeneration(m *Model) *generation {
	return &generation{m: m, drained: make(chan struct{})}
}

// acquire adds a holder. The caller holds the lock under which the generation is swapped
// out, so that a generation is never acquired after retire.
func (g *generation) acquire() {
	g.mu.Lock()
	g.holders++
	g.mu.Unlock()
}

func (g *generation) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.holders--
	if g.holders == 0 && g.retired {
		close(g.drained)
	}
}

// retire marks a generation swapped out: drained closes now if nobody holds it, else at the
// last release.
func (g *generation) retire() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.retired = true
	if g.holders == 0 {
		close(g.drained)
	}
}

// hold is one acquirer's claim on a generation. Its release is the func Acquire returns,
// of which only the first call counts, so that a second call cannot release someone
// else's claim.
type hold struct {
	g    *generation
	done atomic.Bool
}

func (h *hold) release() {
	if h.done.CompareAndSwap(false, true) {
		h.g.release()
	}
}
