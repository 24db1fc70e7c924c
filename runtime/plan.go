package runtime

import (
	"slices"
	"time"
)

// Planning: which queued rows go together, by the learned cost curve. The planner is a pure
// function of what it is given (the queue's view, the free sessions, the limits and the cost
// predictor), so that its decisions are tested as a table, without a goroutine or a clock.

// speedupSlack is how much less speed-up a smaller batch may give and still be preferred to
// the best one: a smaller batch finishes sooner, for every row in it.
const speedupSlack = 0.05

// limits bound the batch the planner forms.
type limits struct {
	rows       int           // MaxBatchSize
	tokens     int           // MaxBatchTokens: padded tokens, rows × the longest; 0: none
	packTokens int           // the tokens of a packed batch (BatchConfig.PackLimit)
	runBudget  time.Duration // the SLO controller's batch budget: the longest predicted run; 0: none
	// stopped is, by length band, a mask of the row bands (bit r: rowBandTop[r]) of the
	// classes the planner may not form: the loop's check against batch 1 (regret.go). Zero:
	// none.
	stopped [nLenBands]uint8
}

// allows says whether the planner may form a batch of class c.
func (l limits) allows(c class) bool { return l.stopped[c.length]&(1<<c.rows) == 0 }

// PackLimit is the most tokens a packed batch takes: MaxPackTokens, or MaxBatchTokens if
// that is less.
func (c BatchConfig) PackLimit() int {
	if c.MaxBatchTokens > 0 {
		return min(c.MaxBatchTokens, MaxPackTokens)
	}
	return MaxPackTokens
}

// full says whether a queue of rows rows, tokens tokens in all and longest tokens in its
// longest row already holds a full batch, so that a batching window need not wait for more.
func (l limits) full(rows, tokens, longest int, pack bool) bool {
	if rows >= l.rows {
		return true
	}
	if pack {
		return tokens >= l.packTokens
	}
	return l.tokens > 0 && (rows+1)*longest > l.tokens
}

// view is the queue as the planner reads it. Rows are served lead first, in order, then the
// rows of byLen that are not due (not in lead), shortest first.
type view struct {
	lead  []row // the rows due, oldest first; with OrderArrival, every row
	byLen []row // every row, shortest first, ties in arrival order
}

// head is the row served first.
func (v view) head() row {
	if len(v.lead) > 0 {
		return v.lead[0]
	}
	return v.byLen[0]
}

// served walks the view in the order rows are served.
type served struct {
	v    view
	i, j int
}

func (s *served) next() (row, bool) {
	if s.i < len(s.v.lead) {
		s.i++
		return s.v.lead[s.i-1], true
	}
	for s.j < len(s.v.byLen) {
		w := s.v.byLen[s.j]
		s.j++
		if !w.due {
			return w, true
		}
	}
	return row{}, false
}

// plan is a batch to run: its rows, in arrival order so that the rows of one request stay
// adjacent, and how they are laid out.
type plan struct {
	rows   []row
	layout [][]int // packed: packRows' rows of indices into rows; nil: padded
}

// planBatch plans the next batch of the queue's rows (v, not empty) for one of free sessions,
// within lim, packed or padded, on the cost curve cost (known: fitted to at least one run;
// cost is 0 everywhere before). The row served first always goes. The batch holds at most a
// fair share of the queue when several sessions are free, ⌈rows / free⌉, so that they share
// it instead of one taking it all.
//
// Of the nested candidate batches, grown one row at a time, it takes the one with the highest
// predicted speed-up, or a smaller one within speedupSlack of it. A batch's speed-up is the
// time its rows would take run one by one, each at its own length, over the time the batch
// takes: Σ cost(1, len) / cost(batch). It is 1 for a row alone; above 1 where a run's fixed
// cost amortizes over rows; below 1 where padding, or a device on which rows cost more
// together, makes the batch dearer than its rows. Counting each row at its own length, rather
// than texts per second, keeps a long row from looking cheap company for short ones that
// would have run cheaply alone.
//
// A candidate of a class that lim stops is never taken; the row served first, alone, always
// may be.
func planBatch(v view, free int, lim limits, pack bool, cost func(rows, cols int) time.Duration, known bool) plan {
	if len(v.byLen) == 0 {
		return plan{}
	}
	limit := min(lim.rows, (len(v.byLen)+free-1)/max(free, 1))
	if !pack {
		return plan{rows: planPadded(v, limit, lim, cost, known)}
	}
	rows := planPacked(v, limit, lim, cost, known)
	lens := make([]int, len(rows))
	for i, w := range rows {
		lens[i] = w.len()
	}
	return plan{rows: rows, layout: layout(lens, true, cost)}
}

// planPadded plans a padded batch. The candidates are the rows closest in length to the head
// row, so that short rows are not padded to long ones, grown one neighbour at a time up to
// limit rows, lim.tokens padded tokens and the batch budget.
func planPadded(v view, limit int, lim limits, cost func(rows, cols int) time.Duration, known bool) []row {
	q := v.byLen
	head := v.head()
	at, _ := slices.BinarySearchFunc(q, head, byLength)
	lo, hi := at, at+1 // the window q[lo:hi] holds the batch
	longest := head.len()
	// Σ cost(1, len) of the window's rows, from the model as it is now, as the batch's own
	// cost is: the price a row was admitted at may be from an older fit.
	single := cost(1, longest)
	// Candidate k is the window of k+1 rows from los[k].
	var gainBuf [64]float64
	var loBuf [64]int
	gains, los := append(gainBuf[:0], 1), append(loBuf[:0], lo)
	for hi-lo < limit {
		// Grow towards the neighbour whose length is closer to the head row's.
		var next int
		switch {
		case lo > 0 && hi < len(q):
			if head.len()-q[lo-1].len() <= q[hi].len()-head.len() {
				next = lo - 1
			} else {
				next = hi
			}
		case lo > 0:
			next = lo - 1
		case hi < len(q):
			next = hi
		default:
			next = -1
		}
		if next < 0 {
			break
		}
		l := max(longest, q[next].len())
		rows := hi - lo + 1
		if lim.tokens > 0 && rows*l > lim.tokens {
			break
		}
		d := cost(rows, l)
		if lim.runBudget > 0 && known && d > lim.runBudget {
			break
		}
		longest = l
		if next == hi {
			hi++
		} else {
			lo--
		}
		single += cost(1, q[next].len())
		gains = append(gains, allowed(lim, classOf(rows, 0, l, false), gain(single, d, rows, known)))
		los = append(los, lo)
	}
	k := choose(gains)
	batch := slices.Clone(q[los[k] : los[k]+k+1])
	slices.SortFunc(batch, bySeq)
	return batch
}

// planPacked plans a packed batch (tokenize.PackRows): rows in the order they are served, up
// to limit rows, lim.packTokens tokens and the batch budget. A packed batch pads little, so
// which rows go together barely changes its cost, only how many tokens it holds and how
// packRows lays them out: a candidate's cost is that of packRows' layout.
func planPacked(v view, limit int, lim limits, cost func(rows, cols int) time.Duration, known bool) []row {
	s := served{v: v}
	head, _ := s.next()
	// The candidates are the first len(gains) rows of take.
	take := make([]row, 1, limit)
	take[0] = head
	lens := make([]int, 1, limit)
	lens[0] = head.len()
	tokens := lens[0]
	single := cost(1, tokens)
	var gainBuf [64]float64
	gains := append(gainBuf[:0], 1)
	for len(take) < limit {
		w, ok := s.next()
		if !ok || tokens+w.len() > lim.packTokens {
			break
		}
		cand := append(lens, w.len())
		_, _, d := packWidth(cand, cost)
		if lim.runBudget > 0 && known && d > lim.runBudget {
			break
		}
		tokens, lens = tokens+w.len(), cand
		single += cost(1, w.len())
		take = append(take, w)
		gains = append(gains, allowed(lim, classOf(len(take), tokens, 0, true), gain(single, d, len(take), known)))
	}
	take = take[:choose(gains)+1]
	slices.SortFunc(take, bySeq)
	return take
}

// choose picks among nested candidate batches, smallest first, by their predicted speed-ups:
// the highest, or the first (smallest) within speedupSlack of it.
func choose(gains []float64) int {
	best := 0
	for i, g := range gains {
		if g > gains[best] {
			best = i
		}
	}
	for i, g := range gains[:best] {
		if g >= (1-speedupSlack)*gains[best] {
			return i
		}
	}
	return best
}

// allowed is g, a candidate's speed-up, if lim allows its class c, and 0 if not: choose never
// takes a candidate of speed-up 0, since the first, of 1, is always better.
func allowed(lim limits, c class, g float64) float64 {
	if !lim.allows(c) {
		return 0
	}
	return g
}

// gain is single, the predicted time of a batch's rows one by one, over d, the batch's
// predicted time. Before the model has any observation every batch is taken to cost the same
// as one row: the gain is the batch's rows, so that the largest allowed is formed (or the
// smallest within speedupSlack of it, which choose prefers).
func gain(single, d time.Duration, rows int, known bool) float64 {
	if !known || d <= 0 || single <= 0 {
		return float64(rows)
	}
	return float64(single) / float64(d)
}
