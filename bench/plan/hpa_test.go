package plan

import (
	"reflect"
	"testing"
	"time"
)

// The cases follow the Kubernetes documentation's algorithm details for the HPA and its
// replica calculator's rules for pods without metrics.
func TestRecommend(t *testing.T) {
	for _, tc := range []struct {
		name    string
		current int
		metrics []float64
		missing int
		target  float64
		metric  Metric
		want    int
	}{
		{"doubles at twice the target", 3, []float64{200, 200, 200}, 0, 100, InFlight, 6},
		{"halves at half", 4, []float64{50, 50, 50, 50}, 0, 100, InFlight, 2},
		{"within tolerance: no change", 4, []float64{108, 108, 108, 108}, 0, 100, InFlight, 4},
		{"just past tolerance", 4, []float64{112, 112, 112, 112}, 0, 100, InFlight, 5},
		{"rounds up", 3, []float64{150, 100, 120}, 0, 100, InFlight, 4},
		{"cpu caps the ratio", 10, []float64{1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, 0, 0.7, CPU, 15},
		{"no metrics: no change", 3, nil, 3, 100, InFlight, 3},
		// Scale-up with missing pods: they count as idle, damping the step.
		{"missing pods damp a scale-up", 4, []float64{300, 300}, 2, 100, InFlight, 6},
		{"missing pods cancel a small scale-up", 4, []float64{200, 200}, 2, 100, InFlight, 4},
		{"unready pods damp a cpu scale-up", 4, []float64{1, 1}, 2, 0.5, CPU, 4},
		// Scale-down with missing pods: they count as at the target (pods metric), or are
		// left out (CPU).
		{"missing pods at target on a scale-down", 4, []float64{20, 20}, 2, 100, InFlight, 3},
		{"unready pods left out of a cpu scale-down", 4, []float64{0.2, 0.2}, 2, 0.7, CPU, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := recommend(tc.current, tc.metrics, tc.missing, tc.target, 0.1, tc.metric); got != tc.want {
				t.Errorf("recommend = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestControllerBehaviour(t *testing.T) {
	a := DefaultAutoscaler()
	a.Min, a.Max = 2, 50
	q := Policy{Name: "queue", Metric: InFlight, Target: 10}

	t.Run("scale-up limited to 4 pods or 100% per sync", func(t *testing.T) {
		c := newController(a, 1)
		if got := c.decide(15, 2, []float64{100, 100}, 0, q); got != 6 {
			t.Errorf("from 2 at 10× the target: %d, want 2+4 = 6", got)
		}
		c = newController(a, 1)
		if got := c.decide(15, 10, repeat(100, 10), 0, q); got != 20 {
			t.Errorf("from 10 at 10× the target: %d, want 2×10 = 20", got)
		}
		c = newController(a, 1)
		if got := c.decide(15, 40, repeat(100, 40), 0, q); got != 50 {
			t.Errorf("from 40: %d, want max 50", got)
		}
	})

	t.Run("scale-down waits out its window", func(t *testing.T) {
		c := newController(a, 1)
		at := 0.0
		step := func(current int, v float64) int {
			at += 15
			return c.decide(at, current, repeat(v, current), 0, q)
		}
		if got := step(10, 10); got != 10 {
			t.Fatalf("at target: %d", got)
		}
		// Load halves: the window still holds the recommendation of 10 for 5 minutes.
		n := 10
		var when float64
		for n == 10 && at < 1000 {
			n = step(10, 5)
			when = at
		}
		if n != 5 {
			t.Fatalf("settled at %d, want 5", n)
		}
		if wait := when - 15; wait < 300 || wait > 315 {
			t.Errorf("scaled down after %v s, want the 300 s window", wait)
		}
	})

	t.Run("scale-down by at most 50% a minute", func(t *testing.T) {
		b := a
		b.DownWindow, b.Min = 0, 1
		c := newController(b, 1)
		n, at := 40, 0.0
		var seen []int
		for at < 200 {
			at += 15
			n = c.decide(at, n, repeat(0.1, n), 0, q)
			seen = append(seen, n)
		}
		// Halved at 15 s, held until the minute since is over (75 s), halved again, ...
		want := []int{20, 20, 20, 20, 10, 10, 10, 10, 5, 5, 5, 5, 2, 2}
		if !reflect.DeepEqual(seen, want) {
			t.Errorf("replicas by sync %v, want %v", seen, want)
		}
	})

	t.Run("windows compress with the trace", func(t *testing.T) {
		c := newController(a, 10) // 300 s of trace is 30 s simulated
		c.decide(15, 10, repeat(10, 10), 0, q)
		if got := c.decide(30, 10, repeat(5, 10), 0, q); got != 10 {
			t.Errorf("15 s later: %d, want 10 still", got)
		}
		if got := c.decide(46, 10, repeat(5, 10), 0, q); got != 5 {
			t.Errorf("31 s later: %d, want 5", got)
		}
	})

	t.Run("min and max", func(t *testing.T) {
		c := newController(a, 1)
		if got := c.decide(15, 2, []float64{0, 0}, 0, q); got != 2 {
			t.Errorf("idle at min: %d, want 2", got)
		}
		b := a
		b.UpWindow = time.Minute
		c = newController(b, 1)
		c.decide(15, 4, repeat(10, 4), 0, q)
		if got := c.decide(30, 4, repeat(30, 4), 0, q); got != 4 {
			t.Errorf("with a scale-up window, a new high waits: %d, want 4", got)
		}
	})
}

func repeat(v float64, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = v
	}
	return out
}
