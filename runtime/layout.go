package runtime

import (
	"slices"
	"time"

	"github.com/ortserve/ortserve/tokenize"
)

// Layout: how the texts of one batch are laid out in its tensors, padded or packed. The
// batcher's batches and Pool.RunFixed's are laid out by the same functions: RunFixed's on a
// cost that is the same for every layout.

// MaxPackTokens bounds a packed batch's row. Attention costs the square of the whole row's
// length, in time and in memory (heads × tokens² scores per layer), so past a few hundred
// tokens packing more rows gains nothing the cost model would want.
const MaxPackTokens = 512

// rowsMargin is how much cheaper a packed layout must be predicted than one of fewer rows to
// be taken instead: a fit's noise alone may make the cost of a row's squared length (k3) a
// little above 0, where fewer rows are as good.
const rowsMargin = 0.02

// layout is how a batch of texts of lens tokens is laid out: packed, the rows packRows
// chooses on cost; padded, nil (one text a row).
func layout(lens []int, packed bool, cost func(rows, cols int) time.Duration) [][]int {
	if !packed {
		return nil
	}
	rows, _, _ := packRows(lens, cost)
	return rows
}

// layOut builds the tensors of encs laid out as rows says: packed rows of texts end to end
// (tokenize.PackRows), or with rows nil, padded (tokenize.Pad).
func layOut(encs []tokenize.Encoding, rows [][]int) tokenize.Batch {
	if rows == nil {
		return tokenize.Pad(encs)
	}
	return tokenize.PackRows(encs, rows)
}

// split cuts the output of the batch in into one tensor per text, in the order of its
// encodings.
func split(out Tensor, in tokenize.Batch) []Tensor {
	if in.Packed {
		return out.Segments(in.Starts, in.Lengths)
	}
	return out.Rows()
}

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
// runs for every candidate batch the planner weighs.
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
