package runtime

import (
	"math/rand/v2"
	"testing"
	"time"
)

// queueWork's prefix sums equal the sums of the rows they stand for, through rows queued and
// taken out in any order, lengths of 0 and past maxTrackedLen included (they count as 1 and
// maxTrackedLen).
func TestQueueWork(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var w queueWork
	type queued struct {
		n int
		d time.Duration
	}
	var rows []queued
	for step := range 2000 {
		if len(rows) > 0 && rng.IntN(3) == 0 {
			i := rng.IntN(len(rows))
			w.add(rows[i].n, -rows[i].d)
			rows = append(rows[:i], rows[i+1:]...)
		} else {
			r := queued{rng.IntN(1500) * rng.IntN(2), time.Duration(rng.IntN(1e7))}
			w.add(r.n, r.d)
			rows = append(rows, r)
		}
		n := rng.IntN(1600)
		var want, total time.Duration
		for _, r := range rows {
			total += r.d
			if clamp(r.n) <= clamp(n) {
				want += r.d
			}
		}
		if got := w.upTo(n); got != want || w.total != total {
			t.Fatalf("step %d: upTo(%d) %v, total %v; want %v, %v", step, n, got, w.total, want, total)
		}
	}
	w.reset()
	if w.total != 0 || w.upTo(maxTrackedLen) != 0 {
		t.Errorf("after reset: total %v, upTo %v", w.total, w.upTo(maxTrackedLen))
	}
}

func clamp(n int) int { return min(max(n, 1), maxTrackedLen) }
