//go:build cgo && ort && !race

package ort_test

// The tests that hold a run's time to a bound: without the race detector, in their own step
// of `make test` (-run '^TestTiming'), each bound relative to runs timed in the same test.

import (
	"context"
	"errors"
	"testing"
	"time"
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
