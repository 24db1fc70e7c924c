package runtime

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// A batch's class: its texts' band, and its length's (padded, the longest; packed, the
// mean, rounded up), with the names /info and the metrics give the bands.
func TestClassOf(t *testing.T) {
	for _, tc := range []struct {
		rows, tokens, longest int
		packed                bool
		want                  string
	}{
		{1, 16, 16, false, "1 × 1-32"},
		{2, 40, 32, false, "2 × 1-32"},
		{3, 70, 33, false, "3-4 × 33-64"},
		{8, 800, 256, false, "5-8 × 129-256"},
		{9, 9 * 300, 300, false, "9-16 × 257+"},
		{40, 40, 1, false, "17+ × 1-32"},
		// Packed: 8 + 120 tokens are a mean of 64, 8 + 121 one of 65 (rounded up).
		{2, 128, 120, true, "2 × 33-64"},
		{2, 129, 121, true, "2 × 65-128"},
		{1, 200, 200, true, "1 × 129-256"},
	} {
		c := classOf(tc.rows, tc.tokens, tc.longest, tc.packed)
		if got := bandName(rowBandTop[:], c.rows) + " × " + bandName(lenBandTop[:], c.length); got != tc.want {
			t.Errorf("classOf(%d, %d, %d, %v) = %s, want %s", tc.rows, tc.tokens, tc.longest, tc.packed, got, tc.want)
		}
	}
}

// How many measurements a judgement needs: checkMinObs at the margin, fewer further off, and
// never fewer than checkFewest; a ratio of exactly 1 is never told from 1.
func TestNeeded(t *testing.T) {
	for _, tc := range []struct {
		x    float64
		want int
	}{
		{1.1, 8}, {0.9, 8}, {1.12, 6}, {1.15, 4}, {1.2, 4}, {2, 4}, {1.05, 32}, {1, math.MaxInt},
	} {
		if got := needed(tc.x); got != tc.want {
			t.Errorf("needed(%v) = %d, want %d", tc.x, got, tc.want)
		}
	}
}

// step is n batches of rows texts of tokens tokens each, that each took took.
type step struct {
	rows, tokens int
	took         time.Duration
	n            int
}

// modelCost is the model the tests price texts by: 1 µs a token, so that a text of 16 tokens
// weighs half one of 32, its band's reference.
func modelCost(rows, cols int) time.Duration { return time.Duration(rows*cols) * time.Microsecond }

// feed dispatches and observes the steps' batches in order, padded.
func feed(g *regret, steps []step) {
	for _, s := range steps {
		lens := make([]int, s.rows)
		for i := range lens {
			lens[i] = s.tokens
		}
		for range s.n {
			c := classOf(s.rows, s.rows*s.tokens, s.tokens, false)
			g.dispatched(c, s.rows)
			g.observe(c, lens, s.took, modelCost(s.rows, s.tokens), modelCost)
		}
	}
}

// Texts of 16 tokens take 1 ms alone (one): a class is stopped, with the larger row bands of
// its length band, once it has measured over checkMargin dearer per text than batch 1, as
// often as needed tells; it is formed again once it measures cheaper. One run that stalled
// stops nothing.
func TestRegretJudges(t *testing.T) {
	one := step{1, 16, time.Millisecond, 10}
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	for _, tc := range []struct {
		name      string
		steps     []step
		band      int   // the length band looked at
		stopped   uint8 // its standing mask: bit r, row band r
		fallbacks int
	}{
		{"batch 1 alone", []step{one}, 0, 0, 0},
		{"no batch of one yet: nothing to judge by", []step{{4, 16, ms(8), 10}}, 0, 0, 0},
		{"25% dearer: stopped, with the larger bands", []step{one, {4, 16, ms(5), 4}}, 0, 0b111100, 1},
		{"three measurements are not enough", []step{one, {4, 16, ms(5), 3}}, 0, 0, 0},
		{"one stalled batch among batches at par", []step{one, {4, 16, ms(150), 1}, {4, 16, ms(4), 3}}, 0, 0, 0},
		{"a stalled batch of one moves batch 1 little", []step{one, {1, 16, ms(100), 1}, {4, 16, ms(5), 4}}, 0, 0b111100, 1},
		{"a class far dearer: stopped as soon as it may be", []step{one, {4, 16, ms(40), 4}}, 0, 0b111100, 1},
		{"within the margin: kept", []step{one, {4, 16, ms(4.2), 40}}, 0, 0, 0},
		{"11% dearer: 6 measurements are not enough", []step{one, {4, 16, ms(4.44), 6}}, 0, 0, 0},
		{"11% dearer: 7 are", []step{one, {4, 16, ms(4.44), 7}}, 0, 0b111100, 1},
		{"cheaper than batch 1: never stopped", []step{one, {16, 16, ms(4), 20}}, 0, 0, 0},
		{"a larger band measured cheaper is formed", []step{one, {2, 16, ms(2.6), 4}, {16, 16, ms(8), 4}}, 0, 0b101110, 1},
		{"stopped, then measured cheaper: formed again", []step{one, {4, 16, ms(5), 4}, {4, 16, ms(3), 30}}, 0, 0, 1},
		{"the other length bands are not touched", []step{one, {4, 16, ms(5), 4}}, 1, 0, 1},
		// Texts of 100 tokens never ran alone: they are priced at the model's 100 µs times
		// what batches of one took over the model's prediction (1 ms / 16 µs), 6.25 ms.
		{"a band that never ran alone: priced from the others", []step{one, {4, 100, ms(4 * 6.25 * 1.3), 4}}, 2, 0b111100, 1},
		{"… and cheaper there", []step{one, {4, 100, ms(4 * 6.25 * 0.7), 20}}, 2, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var g regret
			feed(&g, tc.steps)
			if got := g.standing(tc.band); got != tc.stopped || g.fallbacks != tc.fallbacks {
				t.Errorf("band %d: stopped %06b, %d fallbacks; want %06b, %d", tc.band, got, g.fallbacks, tc.stopped, tc.fallbacks)
			}
		})
	}
}

// What the planner may not form, checks included: batch 1 is measured (every band of several
// rows stopped, so that the row served first goes alone) every learnGap batches of several
// rows until checkMinObs batches of one have run, then every exploreGap; a length band's
// stopped classes are tried (none stopped for a batch) once the band has served exploreGap
// times the rows of the last try.
func TestRegretChecks(t *testing.T) {
	const all = ^uint8(1)
	probe := [nLenBands]uint8{all, all, all, all, all}
	cheap := step{4, 16, 2 * time.Millisecond, 1} // 0.5× batch 1
	dear := step{4, 16, 5 * time.Millisecond, 1}  // 1.25×
	one := func(n int) step { return step{1, 16, time.Millisecond, n} }
	times := func(s step, n int) step { s.n = n; return s }
	for _, tc := range []struct {
		name  string
		steps []step
		want  [nLenBands]uint8
	}{
		{"learning: not before learnGap batches", []step{one(1), times(cheap, learnGap-1)}, [nLenBands]uint8{}},
		{"learning: batch 1 is measured", []step{one(1), times(cheap, learnGap)}, probe},
		{"a batch of one resets the count", []step{one(1), times(cheap, learnGap), one(1)}, [nLenBands]uint8{}},
		{"learned: not before exploreGap batches", []step{one(checkMinObs), times(cheap, exploreGap-1)}, [nLenBands]uint8{}},
		{"learned: every exploreGap", []step{one(checkMinObs), times(cheap, exploreGap)}, probe},
		// 10 texts alone and 4 batches of 4: the band has served 26 texts when the class is
		// stopped, and tries it again from 26 + 32 × 4 = 154.
		{"stopped", []step{one(10), times(dear, 4), one(127)}, [nLenBands]uint8{0b111100}},
		{"tried", []step{one(10), times(dear, 4), one(128)}, [nLenBands]uint8{}},
		{"after a try, the next waits", []step{one(10), times(dear, 4), one(128), dear, one(1)}, [nLenBands]uint8{0b111100}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var g regret
			feed(&g, tc.steps)
			if got := g.stopped(); got != tc.want {
				t.Errorf("stopped %s, want %s", masks(got), masks(tc.want))
			}
		})
	}
}

func masks(m [nLenBands]uint8) string {
	var s []string
	for _, b := range m {
		s = append(s, fmt.Sprintf("%06b", b))
	}
	return fmt.Sprint(s)
}

// /info's view: a class measured, in milliseconds per text of its band's reference length.
func TestCheckView(t *testing.T) {
	var g regret
	feed(&g, []step{{1, 16, time.Millisecond, 10}, {4, 16, 5 * time.Millisecond, 4}})
	var v checkView
	v.publish(&g)
	st := v.state()
	want := `{1 [{1 1-32 32 10 0.032 2 2 1 true} {3-4 1-32 32 4 0.032 2.5 2 1.25 false}]}`
	if got := fmt.Sprint(st); got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}
