package runtime

import (
	"math"
	"strconv"
	"time"
)

// The check against batch 1: whether the batches the planner forms beat running their texts
// one by one, as measured while serving. The planner chooses by the cost model, and the model
// is only as right as its four terms and its data: calibration may have measured the device
// in another state than the one it serves in (a neighbour has taken the cores since, or the
// kernels behave differently at the shapes served), and a device's curve may be one that the
// terms cannot draw. So the loop measures, for each class of batch shape, what its batches
// took against what their texts would have taken in batches of one row, from what batches of
// one row took, and stops the planner from forming a class that costs more. Calibration is
// the first guess; what served batches measure overrides it.
//
// A class is a band of rows (the texts in the batch: 1, 2, 3–4, 5–8, 9–16, 17+) and a band of
// lengths (1–32, 33–64, 65–128, 129–256, 257+ tokens). The bands double, so that they mean
// the same on any device and model: where a batch's cost changes with its shape, it changes
// by ratios. A padded batch's length is its longest text, which every row is padded to; a
// packed batch's, its mean text, since packing pads little and its texts share the run by
// their tokens.
//
// What a batch's texts would have taken one by one: batch 1 is measured by length band, in
// seconds per text of the band's reference length (its upper bound), each text of a batch of
// one row weighed as the model's batch-of-one time of its length over that of the reference
// length, cost(1, len) / cost(1, ref). A text of a batch is then priced at its own band's
// measure times its own weight, and the batch's ratio is took / Σ of its texts' prices. Only
// the model's ratios between lengths within a band (about 2×) enter, never its level: a
// model wrong about the device, or one that has refitted since (it learns from every batch),
// biases neither side, and one wrong about how rows share a run does not enter at all. A band
// whose texts have not run alone is priced by the model's cost(1, len) times what batches of
// one row took over what the model predicted for them, over every band (a discount of batch
// 1's own: the loop's discount, over every batch, would measure batches against themselves).
// Before the model knows anything, a text weighs its tokens.
//
// Wall time is what is measured, and a shared host stalls now and then: a run that took many
// times its due is as likely a stall as a shape that loses. So in the judgement each batch's
// ratio counts as at most checkSpread (and at least its inverse), a class needs at least
// checkFewest batches to be judged, and batch 1's estimates take each new run within
// checkSpread of what they hold: no one run can stop a class, or move the baseline far.
//
// Several sessions on one device slow each other: a class measured while others run is
// compared with batch 1 measured under whatever load it was; batch 1 is measured again among
// the batches (exploreGap), so that both sides see the load served.

const (
	nRowBands = 6
	nLenBands = 5
	// checkMargin is how much dearer than batch 1 a class must measure to be stopped: run
	// times vary by some percent from run to run on a shared device, and a class within this
	// of batch 1 is as good as it, as far as faded estimates of a few measurements tell. A
	// stopped class must measure cheaper than batch 1 to be formed again, so that one near
	// the margin does not flap.
	checkMargin = 0.10
	// checkMinObs is how many batches of a class, and of one row, judging it needs when it is
	// near the margin. The further from batch 1 a class measures, the fewer (needed), down to
	// checkFewest.
	checkMinObs = 8
	// checkSpread bounds what one run counts for (see above). With checkFewest runs, one run
	// at the bound among others at parity stays under the margin: (1.3 + 3) / 4 < 1.1.
	checkSpread = 1 + 3*checkMargin
	checkFewest = 4
	// checkFade is the weight of a measurement in an estimate that has 1/checkFade of them;
	// before, the estimate is their mean.
	checkFade = 0.1
	// exploreGap spaces the checks. A length band's stopped classes are tried again, by one
	// batch planned as if none were stopped, once the band has served exploreGap times the
	// rows of the last try: trying costs at most about 1/exploreGap of the band's texts.
	// Batch 1 is measured again, the row served first alone, once exploreGap batches of
	// several rows have run since the last batch of one (on a GPU, where a row alone costs
	// about as much as a batch, at most 1/exploreGap of the session time); until checkMinObs
	// batches of one have run, once every learnGap, so that the first judgements come soon.
	exploreGap = 32
	learnGap   = 4
)

var (
	rowBandTop = [nRowBands]int{1, 2, 4, 8, 16, math.MaxInt}
	lenBandTop = [nLenBands]int{32, 64, 128, 256, math.MaxInt}
	// lenBandRef are the bands' reference lengths: each bounded band's upper bound, and twice
	// the lower for the last.
	lenBandRef = [nLenBands]int{32, 64, 128, 256, 512}
)

// class is a batch's shape class: its row band and length band, indices into rowBandTop and
// lenBandTop.
type class struct{ rows, length int }

// classOf is the class of a batch of rows texts, tokens tokens in all, the longest longest.
func classOf(rows, tokens, longest int, packed bool) class {
	n := longest
	if packed {
		n = (tokens + rows - 1) / max(rows, 1)
	}
	return class{band(rowBandTop[:], rows), lenBand(n)}
}

func lenBand(tokens int) int { return band(lenBandTop[:], tokens) }

func band(tops []int, n int) int {
	for i, t := range tops {
		if n <= t {
			return i
		}
	}
	return len(tops) - 1
}

// bandName names band i of tops: "1", "3-4", "17+".
func bandName(tops []int, i int) string {
	lo := 1
	if i > 0 {
		lo = tops[i-1] + 1
	}
	switch tops[i] {
	case math.MaxInt:
		return strconv.Itoa(lo) + "+"
	case lo:
		return strconv.Itoa(lo)
	}
	return strconv.Itoa(lo) + "-" + strconv.Itoa(tops[i])
}

// estimate is a faded mean.
type estimate struct {
	v float64
	n int
}

func (e *estimate) add(x float64) {
	e.n++
	e.v += max(checkFade, 1/float64(e.n)) * (x - e.v)
}

// addNear adds x, bounded within checkSpread of the estimate once it has checkFewest
// measurements.
func (e *estimate) addNear(x float64) {
	if e.n >= checkFewest {
		x = min(max(x, e.v/checkSpread), e.v*checkSpread)
	}
	e.add(x)
}

// classStat is what the loop has measured of one class: the ratio of its batches' time to
// their texts' one by one, each bounded by checkSpread for the judgement (score) and as
// measured for /info (ratio), and, for /info, seconds per text of its band's reference
// length, realised, as the model predicted them at dispatch, and one by one.
type classStat struct {
	score, ratio                estimate
	realised, predicted, batch1 estimate
	rows                        int // texts in the class's last batch
}

// regret is the loop's check of its batches against batch 1. The loop alone owns it: it asks
// what the planner may not form (stopped), and tells it of each batch dispatched and each
// batch finished.
type regret struct {
	stats [nRowBands][nLenBands]classStat
	// one is batch 1 by length band: seconds per text of the band's reference length;
	// level, over every band, batch 1's time over the model's cost(1, len).
	one    [nLenBands]estimate
	level  estimate
	judged [nLenBands]uint8 // by length band, bit r: row band r measured dearer than batch 1
	served [nLenBands]int   // texts dispatched, by length band
	retry  [nLenBands]int   // served[b] from which band b's stopped classes are tried again
	since1 int              // batches of several rows since the last of one
	// fallbacks counts the classes stopped, each time one was.
	fallbacks int
}

// stopped is, by length band, a mask of the row bands the planner may not form now: every
// band of several rows when batch 1 is due a measurement, and otherwise each length band's
// standing decision, or none when its stopped classes are due a try.
func (g *regret) stopped() (s [nLenBands]uint8) {
	probe := g.probeDue()
	for b := range nLenBands {
		switch {
		case probe:
			s[b] = ^uint8(1)
		case !g.tryDue(b):
			s[b] = g.standing(b)
		}
	}
	return s
}

func (g *regret) probeDue() bool {
	if g.singles() < checkMinObs {
		return g.since1 >= learnGap
	}
	return g.since1 >= exploreGap
}

// singles is the number of batches of one row measured.
func (g *regret) singles() int {
	n := 0
	for _, e := range g.one {
		n += e.n
	}
	return n
}

func (g *regret) tryDue(b int) bool { return g.judged[b] != 0 && g.served[b] >= g.retry[b] }

// standing is band b's mask between checks: the row bands judged dearer than batch 1, and
// every larger one not measured cheaper than it. At one length a device's cost per text
// moves one way with rows over the bands, as a rule, so a band that loses presumes the
// larger ones lose too, until a try measures them.
func (g *regret) standing(b int) uint8 {
	var s uint8
	lost := false
	for r := 1; r < nRowBands; r++ {
		lost = lost || g.judged[b]&(1<<r) != 0
		if x, ok := g.vsBatch1(class{r, b}); lost && (!ok || x >= 1) {
			s |= 1 << r
		}
	}
	return s
}

// vsBatch1 is class c's measured time over its texts' one by one, and whether there are
// the measurements, of the class and of batch 1, needed to tell it from 1.
func (g *regret) vsBatch1(c class) (float64, bool) {
	s := g.stats[c.rows][c.length].score
	if s.n == 0 {
		return 0, false
	}
	return s.v, min(s.n, g.singles()) >= needed(s.v)
}

// needed is how many measurements tell a ratio x from 1: checkMinObs at checkMargin from 1,
// and, as the standard error of a mean falls with the square root of its measurements, that
// times (checkMargin / |x-1|)² further off; at least checkFewest.
func needed(x float64) int {
	d := math.Abs(x-1) / checkMargin
	if d == 0 {
		return math.MaxInt
	}
	return max(checkFewest, int(math.Ceil(checkMinObs/(d*d)-1e-9))) // less rounding's error
}

// dispatched counts a batch of rows texts of class c, planned under what stopped said.
func (g *regret) dispatched(c class, rows int) {
	b := c.length
	if !g.probeDue() && g.tryDue(b) {
		g.retry[b] = g.served[b] + rows + exploreGap*rows
	}
	g.served[b] += rows
	if c.rows == 0 {
		g.since1 = 0
	} else {
		g.since1++
	}
}

// pricer weighs texts by the model's batch-of-one time, cost(1, len), for one batch.
type pricer struct {
	cost func(rows, cols int) time.Duration
	ref  [nLenBands]float64 // cost(1, ref) of each band's reference length, in seconds
}

func newPricer(cost func(rows, cols int) time.Duration) pricer {
	p := pricer{cost: cost}
	for b, n := range lenBandRef {
		p.ref[b] = cost(1, n).Seconds()
	}
	return p
}

// relative is the model's time of a text of n tokens alone, d, over that of one of band b's
// reference length; their tokens' ratio before the model knows anything.
func (p pricer) relative(n int, d float64, b int) float64 {
	if p.ref[b] > 0 {
		return d / p.ref[b]
	}
	return float64(n) / float64(lenBandRef[b])
}

// alone is what a text of n tokens, whose time alone the model predicts at d, is expected to
// take in a batch of its own, in seconds, from what batches of one row took: 0 before any
// ran.
func (g *regret) alone(n int, d float64, p pricer) float64 {
	b := lenBand(n)
	switch {
	case g.one[b].n > 0:
		return g.one[b].v * p.relative(n, d, b)
	case g.level.n > 0:
		return g.level.v * d
	}
	return 0
}

// observe learns that a batch of class c, of texts of lens tokens, took took where the model
// (cost) predicted predicted, and judges c again.
func (g *regret) observe(c class, lens []int, took, predicted time.Duration, cost func(rows, cols int) time.Duration) {
	if len(lens) == 0 || took <= 0 {
		return
	}
	p := newPricer(cost)
	var w, alone, first float64
	for i, n := range lens {
		d := cost(1, n).Seconds()
		if i == 0 {
			first = d
		}
		w += p.relative(n, d, c.length)
		alone += g.alone(n, d, p)
	}
	if w <= 0 {
		return
	}
	s := &g.stats[c.rows][c.length]
	s.realised.add(took.Seconds() / w)
	s.predicted.add(predicted.Seconds() / w)
	s.rows = len(lens)
	if alone > 0 {
		x := took.Seconds() / alone
		s.batch1.add(alone / w)
		s.ratio.add(x)
		s.score.add(min(max(x, 1/checkSpread), checkSpread))
	}
	if c.rows == 0 {
		g.one[c.length].addNear(took.Seconds() / w)
		if first > 0 {
			g.level.addNear(took.Seconds() / first)
		}
		return
	}
	x, ok := g.vsBatch1(c)
	b, bit := c.length, uint8(1)<<c.rows
	switch {
	case !ok:
	case g.judged[b]&bit == 0 && x > 1+checkMargin:
		if g.judged[b] == 0 {
			g.retry[b] = g.served[b] + exploreGap*s.rows
		}
		g.judged[b] |= bit
		g.fallbacks++
	case g.judged[b]&bit != 0 && x < 1:
		g.judged[b] &^= bit
	}
}
