package runtime

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/ortserve/ortserve/tokenize"
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

// testRequest is a request of rows of lens tokens, enqueued at t, each row priced at single.
func testRequest(t time.Time, single time.Duration, lens ...int) *request {
	r := &request{ctx: context.Background(), enqueued: t, reply: newReply(len(lens))}
	for _, n := range lens {
		r.encs = append(r.encs, tokenize.Encoding{IDs: make([]int64, n), TypeIDs: make([]int64, n)})
		r.wait.single = append(r.wait.single, single)
	}
	return r
}

// servedOrder is the order rows are served in, from first principles, as the batcher has
// always defined it: OrderArrival as they came; OrderShortest the rows that have waited
// agingFactor × their batch-of-one time oldest first, then the others shortest first, ties
// in arrival order. It sorts the whole queue: the reference the queue's view must match.
func servedOrder(order Order, arrival []row, now time.Time) []uint64 {
	var due, rest []row
	for _, w := range arrival {
		if order == OrderArrival || now.Sub(w.req.enqueued) >= agingFactor*w.single() {
			due = append(due, w)
		} else {
			rest = append(rest, w)
		}
	}
	slices.SortStableFunc(rest, func(a, b row) int { return a.len() - b.len() })
	var seqs []uint64
	for _, w := range append(due, rest...) {
		seqs = append(seqs, w.seq)
	}
	return seqs
}

// Through requests queued, batches taken, requests dropped and time passing, in any mix, the
// queue serves rows in the reference order, and its counts, sums and orders agree.
func TestQueueServesInOrder(t *testing.T) {
	for _, order := range []Order{OrderShortest, OrderArrival} {
		t.Run(string(order), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(5, 6))
			q := newQueue(order)
			now := time.Unix(1000, 0)
			var reqs []*request
			for step := range 3000 {
				switch op := rng.IntN(10); {
				case op < 5: // a request of 1 to 3 rows; some priced 0, due at once
					lens := make([]int, 1+rng.IntN(3))
					for i := range lens {
						lens[i] = rng.IntN(40)
					}
					single := time.Duration(rng.IntN(3)) * time.Millisecond
					r := testRequest(now.Add(-time.Duration(rng.IntN(5))*time.Millisecond), single, lens...)
					q.push(r)
					reqs = append(reqs, r)
				case op < 7 && q.len() > 0: // a batch: some of the rows served first, and others
					v := q.view(now)
					s := served{v: v}
					var take []row
					for w, ok := s.next(); ok; w, ok = s.next() {
						if len(take) == 0 || rng.IntN(3) == 0 {
							take = append(take, w)
						}
					}
					slices.SortFunc(take, bySeq)
					q.take(take)
				case op < 8 && len(reqs) > 0: // requests ended
					k := rng.IntN(len(reqs))
					q.drop([]*request{reqs[k], reqs[rng.IntN(len(reqs))]})
				default:
					now = now.Add(time.Duration(rng.IntN(8)) * time.Millisecond)
				}
				checkQueue(t, step, &q, reqs)
				s := served{v: q.view(now)}
				var got []uint64
				for w, ok := s.next(); ok; w, ok = s.next() {
					got = append(got, w.seq)
				}
				if want := servedOrder(order, q.arrival, now); !slices.Equal(got, want) {
					t.Fatalf("step %d: served %v, want %v", step, got, want)
				}
			}
			q.empty(func(*request) {})
			checkQueue(t, -1, &q, reqs)
			if q.len() != 0 {
				t.Errorf("%d rows after empty", q.len())
			}
		})
	}
}

// checkQueue checks that q's orders hold the same rows, sorted as they should be, and that
// its counts and sums are those of its rows.
func checkQueue(t *testing.T, step int, q *queue, reqs []*request) {
	t.Helper()
	if !slices.IsSortedFunc(q.arrival, bySeq) || !slices.IsSortedFunc(q.byLen, byLength) || !slices.IsSortedFunc(q.due, bySeq) {
		t.Fatalf("step %d: an order is not sorted", step)
	}
	byLen := slices.SortedFunc(slices.Values(q.byLen), bySeq)
	if len(byLen) != len(q.arrival) {
		t.Fatalf("step %d: %d rows by length, %d by arrival", step, len(byLen), len(q.arrival))
	}
	tokens, work, queued := 0, time.Duration(0), map[*request]int{}
	for i, w := range q.arrival {
		if byLen[i].seq != w.seq {
			t.Fatalf("step %d: row %d by length is not row %d by arrival", step, byLen[i].seq, w.seq)
		}
		tokens, work = tokens+w.len(), work+w.single()
		queued[w.req]++
	}
	due := 0
	for _, w := range q.byLen {
		if w.due {
			due++
		}
	}
	if q.order == OrderShortest && due != len(q.due) {
		t.Fatalf("step %d: %d rows marked due, %d in due", step, due, len(q.due))
	}
	if tokens != q.tokens || work != q.work.total || len(queued) != q.requests {
		t.Fatalf("step %d: tokens %d, work %v, requests %d; the rows say %d, %v, %d", step, q.tokens, q.work.total, q.requests, tokens, work, len(queued))
	}
	for _, r := range reqs {
		if r.wait.queued != queued[r] {
			t.Fatalf("step %d: a request counts %d rows queued, has %d", step, r.wait.queued, queued[r])
		}
	}
}
