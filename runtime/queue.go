package runtime

import (
	"cmp"
	"slices"
	"time"
)

// The queue: the rows waiting for a batch, their work and their order of service. The loop
// owns it alone; nothing in it locks.

// Order is the order in which a batcher serves queued rows.
type Order string

const (
	// OrderShortest serves the shortest rows first, until a row has waited agingFactor
	// times its own run: then it is due, and due rows go first, oldest first. The default.
	OrderShortest Order = "shortest"
	// OrderArrival serves rows first come, first served.
	OrderArrival Order = "arrival"
)

// agingFactor bounds how long shorter rows may overtake a row: once it has waited this many
// times its own batch-of-one time, it is due and goes before every row not yet due. 8: in a
// simulation of one session on the fp32 curve of one core and bench's lengths (outside the
// repository; docs/performance.md, "Shortest first"), factors of 6 to 15 gave the same p95 and
// 2 to 4 a higher one, while the longest wait grows with the factor.
const agingFactor = 8

// row is one input of a request, waiting in the queue. Rows are values: the queue holds each
// in several orders, and finds it again in each by its seq.
type row struct {
	req *request
	seq uint64 // arrival: a request's rows have consecutive seqs, and later rows higher ones
	i   int32  // the encoding of req
	n   int32  // its tokens
	due bool   // in byLen: the row is due, served before the rows that are not
}

func (w row) len() int { return int(w.n) }

// single is the row's predicted run time in a batch of its own, as admission priced it.
func (w row) single() time.Duration { return w.req.wait.single[w.i] }

func bySeq(a, b row) int { return cmp.Compare(a.seq, b.seq) }

// byLength orders rows shortest first, ties in arrival order.
func byLength(a, b row) int { return cmp.Or(cmp.Compare(a.n, b.n), cmp.Compare(a.seq, b.seq)) }

// queue holds the rows waiting for a batch in the orders the planner reads them, so that
// forming a batch sorts the batch alone, never the queue: rows enter each order where they
// belong, and leave it by a binary search and one compaction.
//
// Served shortest first (OrderShortest), the rows that are due go first, oldest first, then
// the others shortest first. A row's due time is fixed when it is queued (agingFactor × its
// batch-of-one time after its request was enqueued), so a heap of due times tells which rows
// have come due since the last batch, without a look at every row. Served in arrival order,
// every row counts as due at once.
type queue struct {
	order Order
	// arrival holds every queued row, in arrival order.
	arrival []row
	// byLen holds every queued row, shortest first, ties in arrival order: the order of the
	// rows not due, and the neighbourhood in which padded batches find rows of like length.
	// Its rows' due flags say which are due (all of them, with OrderArrival).
	byLen []row
	// due holds the rows that are due, in arrival order (OrderShortest).
	due []row
	// aging holds the due times of rows not yet due. A row that leaves the queue first
	// leaves its entry behind, passed over when its time comes.
	aging dueHeap
	// work is Σ single() over the queued rows, in all and by length: the queue's work in
	// batch-of-one time, for admission's prediction of the wait.
	work     queueWork
	tokens   int // Σ tokens of the queued rows
	requests int // requests with rows queued
	next     uint64
	scratch  []row
}

func newQueue(order Order) queue { return queue{order: order} }

// len is the number of rows queued.
func (q *queue) len() int { return len(q.arrival) }

// oldest is when the request of the longest-queued row was enqueued.
func (q *queue) oldest() time.Time { return q.arrival[0].req.enqueued }

// longest is the most tokens of a queued row.
func (q *queue) longest() int { return q.byLen[len(q.byLen)-1].len() }

// push queues r's rows; admission has priced them (r.wait.single).
func (q *queue) push(r *request) {
	r.wait.seq, r.wait.queued = q.next, len(r.encs)
	q.requests++
	add := q.scratch[:0]
	for i, e := range r.encs {
		w := row{req: r, seq: q.next, i: int32(i), n: int32(e.Len()), due: q.order == OrderArrival}
		q.next++
		q.arrival = append(q.arrival, w)
		add = append(add, w)
		q.work.add(w.len(), w.single())
		q.tokens += w.len()
		if q.order != OrderArrival {
			q.aging.push(dueAt{at: r.enqueued.Add(agingFactor * w.single()), seq: w.seq, n: w.n})
		}
	}
	// Merge the new rows into byLen from its end: every one of them is later than the rows
	// there, so each goes after the rows of its length.
	slices.SortFunc(add, byLength)
	old := len(q.byLen)
	q.byLen = append(q.byLen, add...)
	i, j := old-1, len(add)-1
	for k := len(q.byLen) - 1; j >= 0; k-- {
		if i >= 0 && byLength(add[j], q.byLen[i]) < 0 {
			q.byLen[k] = q.byLen[i]
			i--
		} else {
			q.byLen[k] = add[j]
			j--
		}
	}
	clear(add)
	q.scratch = add[:0]
}

// view is the queue as the planner reads it at now: the rows due by then join lead.
func (q *queue) view(now time.Time) view {
	if q.order == OrderArrival {
		return view{lead: q.arrival, byLen: q.byLen}
	}
	for len(q.aging) > 0 && !now.Before(q.aging[0].at) {
		e := q.aging.pop()
		k, ok := slices.BinarySearchFunc(q.byLen, row{seq: e.seq, n: e.n}, byLength)
		if !ok {
			continue // the row has left the queue
		}
		q.byLen[k].due = true
		at, _ := slices.BinarySearchFunc(q.due, q.byLen[k], bySeq)
		q.due = slices.Insert(q.due, at, q.byLen[k])
	}
	return view{lead: q.due, byLen: q.byLen}
}

// take takes rows, sorted by seq, out of the queue.
func (q *queue) take(rows []row) {
	for _, w := range rows {
		q.work.add(w.len(), -w.single())
		q.tokens -= w.len()
		if w.req.wait.queued--; w.req.wait.queued == 0 {
			q.requests--
		}
		if k, ok := slices.BinarySearchFunc(q.byLen, w, byLength); ok {
			q.byLen[k].req = nil
		}
	}
	q.byLen = slices.DeleteFunc(q.byLen, func(w row) bool { return w.req == nil })
	q.arrival = withoutSeqs(q.arrival, rows)
	q.due = withoutSeqs(q.due, rows)
}

// withoutSeqs removes from list the rows of rows, both sorted by seq, in one pass; rows may
// hold rows that list does not.
func withoutSeqs(list, rows []row) []row {
	kept, j := 0, 0
	for _, w := range list {
		for j < len(rows) && rows[j].seq < w.seq {
			j++
		}
		if j < len(rows) && rows[j].seq == w.seq {
			continue
		}
		list[kept] = w
		kept++
	}
	clear(list[kept:])
	return list[:kept]
}

// drop takes every row still queued of reqs out of the queue.
func (q *queue) drop(reqs []*request) {
	rows := q.scratch[:0]
	for _, r := range reqs {
		if r.wait.queued == 0 {
			continue
		}
		// A request's rows still queued lie between its first seq and the next request's.
		lo, _ := slices.BinarySearchFunc(q.arrival, r.wait.seq, func(w row, s uint64) int { return cmp.Compare(w.seq, s) })
		hi := lo
		for hi < len(q.arrival) && q.arrival[hi].req == r {
			hi++
		}
		rows = append(rows, q.arrival[lo:hi]...)
	}
	slices.SortFunc(rows, bySeq)
	rows = slices.CompactFunc(rows, func(a, b row) bool { return a.seq == b.seq }) // a request named twice
	q.take(rows)
	clear(rows)
	q.scratch = rows[:0]
}

// empty takes every row out of the queue, and calls each for every request that had rows
// queued.
func (q *queue) empty(each func(*request)) {
	for k, w := range q.arrival {
		if k == 0 || q.arrival[k-1].req != w.req {
			w.req.wait.queued = 0
			each(w.req)
		}
	}
	clear(q.arrival)
	clear(q.byLen)
	clear(q.due)
	q.arrival, q.byLen, q.due, q.aging = q.arrival[:0], q.byLen[:0], q.due[:0], q.aging[:0]
	q.work.reset()
	q.tokens, q.requests = 0, 0
}

// dueAt is when the row of seq (n tokens) comes due.
type dueAt struct {
	at  time.Time
	seq uint64
	n   int32
}

// dueHeap is a min-heap of due times. It is container/heap's algorithm on a typed slice, so
// that a push does not box its entry.
type dueHeap []dueAt

func (h *dueHeap) push(e dueAt) {
	*h = append(*h, e)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if !s[i].at.Before(s[p].at) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *dueHeap) pop() dueAt {
	s := *h
	top := s[0]
	n := len(s) - 1
	s[0] = s[n]
	s = s[:n]
	for i := 0; ; {
		c := 2*i + 1
		if c >= n {
			break
		}
		if c+1 < n && s[c+1].at.Before(s[c].at) {
			c++
		}
		if !s[c].at.Before(s[i].at) {
			break
		}
		s[i], s[c] = s[c], s[i]
		i = c
	}
	*h = s
	return top
}

// queueWork is the queue's work in batch-of-one time, in all and by row length: the work of
// the rows up to n tokens is then a prefix sum, kept in a Fenwick tree over lengths, so that
// admission makes no walk of the queue.
type queueWork struct {
	total time.Duration
	byLen []time.Duration // the tree, 1-based; rows past maxTrackedLen count as maxTrackedLen
}

// maxTrackedLen is the longest row length queueWork tells apart.
const maxTrackedLen = 1024

func (w *queueWork) add(n int, d time.Duration) {
	if w.byLen == nil {
		w.byLen = make([]time.Duration, maxTrackedLen+1)
	}
	w.total += d
	for i := min(max(n, 1), maxTrackedLen); i <= maxTrackedLen; i += i & -i {
		w.byLen[i] += d
	}
}

// upTo is the work of the rows of at most n tokens.
func (w *queueWork) upTo(n int) time.Duration {
	var sum time.Duration
	if w.byLen == nil {
		return 0
	}
	for i := min(max(n, 1), maxTrackedLen); i > 0; i -= i & -i {
		sum += w.byLen[i]
	}
	return sum
}

func (w *queueWork) reset() {
	w.total = 0
	clear(w.byLen)
}
