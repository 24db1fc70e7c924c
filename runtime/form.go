package runtime

import (
	"slices"
	"time"
)

// Batch formation: which queued rows go together, by the learned cost curve.

// speedupSlack is how much less speed-up a smaller batch may give and still be preferred to
// the best one: a smaller batch finishes sooner, for every row in it.
const speedupSlack = 0.05

// form takes the next batch out of the queue. The oldest row always goes (first come, first
// served). The candidates are the rows closest to it in length, so that short rows are not
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
	if b.pack {
		return b.formPacked()
	}
	q := b.queue
	oldest := q[0]
	if oldest.req.whole {
		return b.formWhole()
	}
	// Candidates by length; ties keep arrival order, so among equals the oldest go first.
	idx := make([]int, len(q))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, c int) int { return q[a].len() - q[c].len() })
	at := slices.Index(idx, 0)
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
	longest := oldest.len()
	// Σ cost(1, len) of the window's rows, from the model as it is now, as the batch's own
	// cost is: the price a row was admitted at may be from an older fit.
	single := b.cost.Predict(1, longest)
	cands := []cand{{lo, hi, 1}}
	for hi-lo < limit {
		// Grow towards the neighbour whose length is closer to the oldest row's.
		var next int
		switch {
		case lo > 0 && hi < len(idx):
			if oldest.len()-q[idx[lo-1]].len() <= q[idx[hi]].len()-oldest.len() {
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
	take := idx[pick.lo:pick.hi]
	slices.Sort(take) // back to arrival order
	batch := make([]row, len(take))
	for i, j := range take {
		batch[i] = q[j]
	}
	b.queue = slices.DeleteFunc(q, func(w row) bool {
		return slices.ContainsFunc(batch, func(x row) bool { return x == w })
	})
	return batch
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

// formPacked takes the next packed batch (tokenize.Pack): the oldest row, then rows in
// arrival order (a whole-batch request's own rows only, which queue together), up to
// MaxBatchSize rows, packLimit
// tokens, the controller's batch budget and a fair share of the queue when several sessions
// are free. A packed batch pads nothing, so which rows go together does not change its cost,
// only how many tokens it holds: of the nested candidates it takes the one with the highest
// predicted speed-up, Σ cost(1, len) / cost(1, Σ len), or a smaller one within speedupSlack of
// it. A whole-batch request takes as many of its rows as the bounds allow.
func (b *Batcher) formPacked() []row {
	q := b.queue
	req := q[0].req
	limit := b.cfg.MaxBatchSize
	if !req.whole {
		limit = min(limit, (len(q)+b.free-1)/b.free)
	}
	var runBudget time.Duration
	if b.ctl != nil && !req.whole {
		_, runBudget = b.ctl.budgets()
	}
	known := b.cost.Observations() > 0
	// The candidates are the queue's first n rows: n = len(gains).
	tokens, limitTokens := q[0].len(), b.packLimit()
	single := b.cost.Predict(1, tokens)
	gains := []float64{1}
	for _, w := range q[1:min(len(q), limit)] {
		t := tokens + w.len()
		if (req.whole && w.req != req) || t > limitTokens || (runBudget > 0 && known && b.cost.Predict(1, t) > runBudget) {
			break
		}
		tokens = t
		single += b.cost.Predict(1, w.len())
		gains = append(gains, speedup(b.cost, single, 1, t, known))
	}
	n := len(gains)
	if !req.whole {
		n = choose(gains) + 1
	}
	batch := slices.Clone(q[:n])
	b.queue = slices.Delete(q, 0, n)
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

// formWhole takes the oldest request's rows, in order, up to MaxBatchSize rows and
// MaxBatchTokens padded tokens.
func (b *Batcher) formWhole() []row {
	req := b.queue[0].req
	var batch []row
	longest := 0
	for _, w := range b.queue {
		if w.req != req {
			continue
		}
		l := max(longest, w.len())
		if len(batch) == b.cfg.MaxBatchSize || (len(batch) > 0 && b.cfg.MaxBatchTokens > 0 && (len(batch)+1)*l > b.cfg.MaxBatchTokens) {
			break
		}
		batch, longest = append(batch, w), l
	}
	b.queue = slices.DeleteFunc(b.queue, func(w row) bool {
		return w.req == req && slices.Contains(batch, w)
	})
	return batch
}

// speedup is single, the rows' predicted time one by one, over the predicted time of the
// batch of rows × cols. Before the model has any observation every batch is taken to cost
// the same as one row, so the largest allowed is formed.
func speedup(m *CostModel, single time.Duration, rows, cols int, known bool) float64 {
	d := m.Predict(rows, cols)
	if !known || d <= 0 || single <= 0 {
		return float64(rows)
	}
	return float64(single) / float64(d)
}
