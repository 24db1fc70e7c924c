//go:build cgo && ort && !race

package ort_test

// The tests that hold a run's time to a bound: without the race detector, in their own step
// of `make test` (-run '^TestTiming'), each bound relative to runs timed in the same test.

import (
	"context"
	"errors"
	goruntime "runtime"
	"sync"
	"testing"
	"time"

	"github.com/ortserve/ortserve/runtime"
)

// Cancelling the context stops the native run well before it would have finished: the
// cancelled run, cancelled a tenth of the way in, takes under half of a full run. The full
// run is timed before and after it, and the slower of the two counts, so that the machine's
// load moving in between does not decide the outcome; a Terminate that did nothing would
// take a whole run.
func TestTimingSessionCancel(t *testing.T) {
	s := open(t, "minilm", "fp32", "last_hidden_state")
	big := batch(8, 128)
	full := func() time.Duration {
		start := time.Now()
		if _, err := s.Run(t.Context(), big); err != nil {
			t.Fatal(err)
		}
		return time.Since(start)
	}
	before := full()

	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(before/10, cancel)
	start := time.Now()
	_, err := s.Run(ctx, big)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want a cancelled run", err)
	}
	took := time.Since(start)
	if _, err := s.Run(ctx, big); !errors.Is(err, context.Canceled) {
		t.Errorf("run with a done context: %v", err)
	}
	// The session still works after a terminated run.
	after := full()
	t.Logf("full run %v before, %v after; cancelled at a tenth: %v", before, after, took)
	if ref := max(before, after); took > ref/2 {
		t.Errorf("cancelled run took %v of a full %v (before) and %v (after): Terminate did not stop it", took, before, after)
	}
}

// Runs at once on one single-thread session run side by side, as runs on separate sessions
// do: what lets a version's streams share one session and its weights (runtime/engine). Two
// runs at once on one session are timed against two at once on two sessions, back to back,
// five times, the fastest of each counting, so that the machine's load weighs on both alike;
// runs that one session took one at a time would take twice as long.
func TestTimingSharedSessionRunsSideBySide(t *testing.T) {
	if goruntime.GOMAXPROCS(0) < 2 {
		t.Skip("GOMAXPROCS 1: no two runs can run at once")
	}
	a := open(t, "minilm", "fp32", "last_hidden_state")
	b := open(t, "minilm", "fp32", "last_hidden_state")
	big := batch(4, 64)
	pair := func(x, y runtime.Runner) time.Duration {
		start := time.Now()
		var wg sync.WaitGroup
		for _, s := range []runtime.Runner{x, y} {
			wg.Go(func() {
				if _, err := s.Run(t.Context(), big); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		return time.Since(start)
	}
	pair(a, b) // warm-up
	shared, separate, alone := time.Hour, time.Hour, time.Hour
	for range 5 {
		shared = min(shared, pair(a, a))
		separate = min(separate, pair(a, b))
		start := time.Now()
		if _, err := a.Run(t.Context(), big); err != nil {
			t.Fatal(err)
		}
		alone = min(alone, time.Since(start))
	}
	t.Logf("two runs at once: %v on one session, %v on two; one run alone %v", shared, separate, alone)
	if shared > separate*13/10 {
		t.Errorf("two runs at once on one session took %v, on two sessions %v: one session ran them one at a time", shared, separate)
	}
}
