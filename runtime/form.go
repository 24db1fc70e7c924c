package runtime

import (
	"cmp"
	"slices"
	"time"
)

// Batch formation: which queued rows go together, by the learned cost curve.

// speedupSlack is how much less speed-up a smaller batch may give and still be preferred to
// the best one: a smaller batch finishes sooner, for every row in it.
const speedupSlack = 0.05

// form takes the next batch out of the queue. The row served first (order) always goes. The
// candidates are the rows closest to it in length, so that short rows are not
// padded to long ones, grown one neighbour at a time up to MaxBatchSize rows, MaxBatchTokens
// padded tokens, the controller's batch budget, and a fair share of the queue when several
// sessions are free. Of those nested candidates it takes the one with the highest predicted
// speed-up, or a smaller one within speedupSlack of it.
//
// A batch's speed-up is the time its rows would take run one by one, each at its own
// length, over the time the batch takes: Σ cost(1, len) / cost(rows, longest). It is 1 for a
// row alone; above 1 where a run's fixed cost amortizes over rows of similar length; below 1
// where padding, or a device on which rows cost more together, makes the batch dearer than
// its rows. Counting each row at its own length, rather than texts per second, keeps a long
// row from looking cheap company for short ones that would have run cheaply alone.
func (b *Batcher) form() []row {
	served := b.order(time.Now())
	q := b.queue
	head := q[served[0]]
	if head.req.whole {
		return b.formWhole(head.req)
	}
	if b.pack {
		return b.formPacked(served)
	}
	// Candidates by length; ties keep arrival order, so among equals the oldest go first.
	// Other requests' whole-batch rows go only in batches of their own.
	idx := make([]int, 0, len(q))
	for i, w := range q {
		if !w.req.whole {
			idx = append(idx, i)
		}
	}
	slices.SortStableFunc(idx, func(a, c int) int { return q[a].len() - q[c].len() })
	at := slices.Index(idx, served[0])
	limit := min(b.cfg.MaxBatchSize, (len(q)+b.free-1)/b.free)
	var runBudget time.Duration
	if b.ctl != nil {
		_, runBudget = b.ctl.budgets()
	}
	known := b.cost.Observations() > 0

	type cand struct {
		lo, hi int
		gain   float64
	}
	lo, hi := at, at+1 // the window idx[lo:hi] holds the batch
	longest := head.len()
	// Σ cost(1, len) of the window's rows, from the model as it is now, as the batch's own
	// cost is: the price a row was admitted at may be from an older fit.
	single := b.cost.Predict(1, longest)
	cands := []cand{{lo, hi, 1}}
	for hi-lo < limit {
		// Grow towards the neighbour whose length is closer to the head row's.
		var next int
		switch {
		case lo > 0 && hi < len(idx):
			if head.len()-q[idx[lo-1]].len() <= q[idx[hi]].len()-head.len() {
				next = lo - 1
			} else {
				next = hi
			}
		case lo > 0:
			next = lo - 1
		case hi < len(idx):
			next = hi
		default:
			next = -1
		}
		if next < 0 {
			break
		}
		l := max(longest, q[idx[next]].len())
		rows := hi - lo + 1
		if b.cfg.MaxBatchTokens > 0 && rows*l > b.cfg.MaxBatchTokens {
			break
		}
		if runBudget > 0 && known && b.cost.Predict(rows, l) > runBudget {
			break
		}
		longest = l
		if next == hi {
			hi++
		} else {
			lo--
		}
		single += b.cost.Predict(1, q[idx[next]].len())
		cands = append(cands, cand{lo, hi, speedup(b.cost, single, rows, l, known)})
	}
	gains := make([]float64, len(cands))
	for i, c := range cands {
		gains[i] = c.gain
	}
	pick := cands[choose(gains)]
	return b.takeRows(idx[pick.lo:pick.hi])
}

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
// 2 to 4 a higher one, while the longest wait grows with the factor; 8 × a 60-token fp32
// text's 20 ms is 160 ms.
const agingFactor = 8

// order is the queue's indices in the order their rows are served. OrderArrival: as they
// came. OrderShortest: the rows that are due (they have waited agingFactor × their
// batch-of-one time) oldest first, then the others shortest first, ties in arrival order.
// Shortest first lowers the p95 of mixed lengths: a short text no longer waits behind a long
// one for a run that costs it several of its own, and the long texts are few. It raises the
// longest waits, which the bound caps (docs/batching.md, "Which rows go first").
func (b *Batcher) order(now time.Time) []int {
	q := b.queue
	idx := make([]int, len(q))
	for i := range idx {
		idx[i] = i
	}
	if b.cfg.Order == OrderArrival {
		return idx
	}
	due := 0 // idx[:due] are due
	for i, w := range q {
		if now.Sub(w.req.enqueued) >= agingFactor*w.single() {
			idx[i], idx[due] = idx[due], idx[i]
			due++
		}
	}
	slices.Sort(idx[:due])
	slices.SortFunc(idx[due:], func(a, c int) int { return cmp.Or(cmp.Compare(q[a].len(), q[c].len()), a-c) })
	return idx
}

// MaxPackTokens bounds a packed batch's row. Attention costs the square of the whole row's
// length, in time and in memory (heads × tokens² scores per layer), so past a few hundred
// tokens packing more rows gains nothing the cost model would want.
const MaxPackTokens = 512

// packLimit is the most tokens a packed batch takes.
func (b *Batcher) packLimit() int {
	if b.cfg.MaxBatchTokens > 0 {
		return min(b.cfg.MaxBatchTokens, MaxPackTokens)
	}
	return MaxPackTokens
}

// formPacked takes the next packed batch (tokenize.Pack, PackRows): rows in the order they
// are served (served, from order), skipping other requests' whole-batch rows, up to
// MaxBatchSize rows, packLimit tokens, the controller's batch budget and a fair share of the
// queue when several sessions are free. A packed batch pads little, so which rows go
// together barely changes its cost, only how many tokens it holds and how packRows lays them
// out: of the nested candidates it takes the one with the highest predicted speed-up,
// Σ cost(1, len) / cost(packRows' layout), or a smaller one within speedupSlack of it.
func (b *Batcher) formPacked(served []int) []row {
	q := b.queue
	limit := min(b.cfg.MaxBatchSize, (len(q)+b.free-1)/b.free)
	var runBudget time.Duration
	if b.ctl != nil {
		_, runBudget = b.ctl.budgets()
	}
	known := b.cost.Observations() > 0
	// The candidates are the first len(gains) rows of take.
	take := []int{served[0]}
	lens := []int{q[served[0]].len()}
	tokens, limitTokens := lens[0], b.packLimit()
	single := b.cost.Predict(1, tokens)
	gains := []float64{1}
	for _, i := range served[1:] {
		if len(take) == limit {
			break
		}
		w := q[i]
		if w.req.whole {
			continue
		}
		t := tokens + w.len()
		if t > limitTokens {
			break
		}
		cand := append(lens, w.len())
		_, _, d := packWidth(cand, b.cost.Predict)
		if runBudget > 0 && known && d > runBudget {
			break
		}
		tokens, lens = t, cand
		single += b.cost.Predict(1, w.len())
		take = append(take, i)
		gains = append(gains, gain(single, d, 1, known))
	}
	return b.takeRows(take[:choose(gains)+1])
}

// rowsMargin is how much cheaper a packed layout must be predicted than one of fewer rows to
// be taken instead: a fit's noise alone may make the cost of a row's squared length (k3) a
// little above 0, where fewer rows are as good.
const rowsMargin = 0.02

// packRows lays out a packed batch of texts of lens tokens: which texts go end to end in each
// row (tokenize.PackRows), the rows' padded length, and the layout's predicted cost, for the
// row width packWidth chooses.
func packRows(lens []int, cost func(rows, cols int) time.Duration) (rows [][]int, cols int, d time.Duration) {
	width, order, d := packWidth(lens, cost)
	fill, rows := firstFit(lens, order, width, nil, true)
	return rows, max(slices.Max(fill), 1), d
}

// packWidth chooses how wide a packed batch's rows are, and predicts its cost. Each row adds
// the cost model's per-row term (k1) and attention costs the square of a row's length (k3),
// so past some length several shorter rows cost less, padding included, than one. It tries
// rows as wide as the longest text, then 1.5 times wider, and so on up to one row of every
// text, filling each first-fit with the longest texts first (order, returned for firstFit).
// Of those it takes the one with the fewest rows within rowsMargin of the cheapest: several
// rows only where they are predicted rowsMargin cheaper than fewer. With no cost observed yet
// (cost 0 everywhere) that is one row. It allocates only the order and the fill it reuses: it
// runs for every candidate batch formPacked weighs.
func packWidth(lens []int, cost func(rows, cols int) time.Duration) (width int, order []int, d time.Duration) {
	total, longest := 0, 1
	order = make([]int, len(lens))
	for i, l := range lens {
		total, longest, order[i] = total+l, max(longest, l), i
	}
	total = max(total, 1)
	width, d = total, cost(1, total) // one row
	if len(lens) < 2 {
		return width, order, d
	}
	slices.SortStableFunc(order, func(a, c int) int { return lens[c] - lens[a] })
	// The layouts of several rows, narrowest (most rows) first.
	type option struct {
		width int
		d     time.Duration
	}
	var opts [16]option // widths grow 1.5× from the longest text to at most 512 tokens
	n := 0
	var fill []int
	for w := longest; w < total && n < len(opts); w = max(w+1, w*3/2) {
		fill, _ = firstFit(lens, order, w, fill, false)
		if len(fill) > 1 {
			opts[n] = option{w, cost(len(fill), slices.Max(fill))}
			n++
		}
	}
	cheapest := d
	for _, o := range opts[:n] {
		cheapest = min(cheapest, o.d)
	}
	// From one row towards the most rows, the first within rowsMargin of the cheapest.
	pick := option{width, d}
	for k := n - 1; k >= 0 && (1-rowsMargin)*float64(pick.d) > float64(cheapest); k-- {
		pick = opts[k]
	}
	return pick.width, order, pick.d
}

// firstFit fills rows width tokens wide with the texts of lens, in order, each into the first
// row with room, and returns each row's tokens (reusing fill) and, if keep, its texts.
func firstFit(lens, order []int, width int, fill []int, keep bool) ([]int, [][]int) {
	fill = fill[:0]
	var rows [][]int
	for _, i := range order {
		k := 0
		for k < len(fill) && fill[k]+lens[i] > width {
			k++
		}
		if k == len(fill) {
			fill = append(fill, 0)
			if keep {
				rows = append(rows, nil)
			}
		}
		fill[k] += lens[i]
		if keep {
			rows[k] = append(rows[k], i)
		}
	}
	return fill, rows
}

// takeRows takes the queue's rows at idx out of it and returns them in arrival order, so
// that the rows of one request stay adjacent.
func (b *Batcher) takeRows(idx []int) []row {
	idx = slices.Clone(idx)
	slices.Sort(idx)
	batch := make([]row, 0, len(idx))
	kept := b.queue[:0] // written behind the reading, in place
	for k, w := range b.queue {
		if len(batch) < len(idx) && idx[len(batch)] == k {
			batch = append(batch, w)
		} else {
			kept = append(kept, w)
		}
	}
	clear(b.queue[len(kept):]) // the queue no longer holds the batch's requests
	b.queue = kept
	return batch
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

// formWhole takes req's rows, in order, up to MaxBatchSize rows and MaxBatchTokens padded
// tokens (packed: packLimit tokens).
func (b *Batcher) formWhole(req *request) []row {
	var take []int
	longest, tokens := 0, 0
	for i, w := range b.queue {
		if w.req != req {
			continue
		}
		l, t := max(longest, w.len()), tokens+w.len()
		if len(take) == b.cfg.MaxBatchSize {
			break
		}
		if len(take) > 0 {
			if b.pack && t > b.packLimit() {
				break
			}
			if !b.pack && b.cfg.MaxBatchTokens > 0 && (len(take)+1)*l > b.cfg.MaxBatchTokens {
				break
			}
		}
		take, longest, tokens = append(take, i), l, t
	}
	return b.takeRows(take)
}

// speedup is single, the rows' predicted time one by one, over the predicted time of the
// batch of rows × cols.
func speedup(m *CostModel, single time.Duration, rows, cols int, known bool) float64 {
	return gain(single, m.Predict(rows, cols), rows, known)
}

// gain is single over d, a batch's predicted time. Before the model has any observation
// every batch is taken to cost the same as one row: the gain is rows, so that the largest
// allowed is formed.
func gain(single, d time.Duration, rows int, known bool) float64 {
	if !known || d <= 0 || single <= 0 {
		return float64(rows)
	}
	return float64(single) / float64(d)
}
