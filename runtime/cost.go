package runtime

import (
	"math"
	"slices"
	"sync"
	"time"
)

// CostModel predicts how long one session takes to run a batch of rows × cols padded tokens.
// It is learned from measured runs: a calibration grid at warm-up (Pool.Calibrate), then
// every batch served (Pool.Run). The batcher asks it which batch to form and the admission
// check asks it how long the queue will take. It is safe for concurrent use.
//
// The model is linear in four terms of a batch's shape:
//
//	cost(r, c) = k0 + k1·r + k2·r·c + k3·r·c²
//
// k0 is the fixed cost of a run (launch, allocation, thread wake-up), k1 a per-row cost
// (pooling, copies), k2 what the dense layers cost per padded token and k3 attention's cost,
// quadratic in the sequence. Whether batching pays is then a property of the fit: on a CPU
// where k0 is small against k2·c, a batch of r rows costs about r times one row and padding
// makes mixed lengths dearer per text; on a GPU k0 dominates and cost barely grows with r.
//
// The coefficients come from weighted least squares with relative-error weights (a 1 ms
// batch counts as much as a 100 ms one), constrained to be non-negative. Calibration points
// never fade, so shapes the server has not served lately stay anchored; served batches fade
// with a half-life of HalfLife batches, so the model follows the device as it is loaded now.
type CostModel struct {
	mu     sync.Mutex
	prior  normalEq // calibration
	recent normalEq // served batches, faded
	n      int      // observations, both kinds
	fit    [nTerms]float64
	stale  bool
	decay  float64
}

const (
	nTerms = 4
	// HalfLife is the number of served batches after which one observation weighs half.
	HalfLife = 200
	// colScale puts the sequence terms on a scale near 1 for typical lengths, so that the
	// normal equations stay well conditioned.
	colScale = 64.0
)

// normalEq holds the weighted sums of least squares: XᵀWX and XᵀWy.
type normalEq struct {
	xx [nTerms][nTerms]float64
	xy [nTerms]float64
	w  float64
}

func (e *normalEq) add(x [nTerms]float64, y, w float64) {
	for i := range nTerms {
		for j := range nTerms {
			e.xx[i][j] += w * x[i] * x[j]
		}
		e.xy[i] += w * x[i] * y
	}
	e.w += w
}

func (e *normalEq) scale(f float64) {
	for i := range nTerms {
		for j := range nTerms {
			e.xx[i][j] *= f
		}
		e.xy[i] *= f
	}
	e.w *= f
}

// NewCostModel returns a model that knows nothing yet. Until runs of several shapes show
// otherwise, it takes a batch to cost the same whatever its shape (so batches are formed as
// large as allowed), and with no observation at all Predict is 0.
func NewCostModel() *CostModel {
	return &CostModel{decay: math.Pow(0.5, 1.0/HalfLife)}
}

func terms(rows, cols int) [nTerms]float64 {
	r, c := float64(rows), float64(cols)/colScale
	return [nTerms]float64{1, r, r * c, r * c * c}
}

// Observe records that a batch of rows × cols ran in d; calibration observations never fade.
func (m *CostModel) Observe(rows, cols int, d time.Duration, calibration bool) {
	if rows < 1 || cols < 1 || d <= 0 {
		return
	}
	y := d.Seconds() * 1e3 // milliseconds
	w := 1 / (y * y)       // relative error
	m.mu.Lock()
	defer m.mu.Unlock()
	if calibration {
		m.prior.add(terms(rows, cols), y, w)
	} else {
		m.recent.scale(m.decay)
		m.recent.add(terms(rows, cols), y, w)
	}
	m.n++
	m.stale = true
}

// Observations is how many runs the model has learned from.
func (m *CostModel) Observations() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.n
}

// Predict is the expected time of one run of a batch of rows × cols padded tokens. With no
// observations it is 0.
func (m *CostModel) Predict(rows, cols int) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.predict(rows, cols)
}

func (m *CostModel) predict(rows, cols int) time.Duration {
	if m.n == 0 {
		return 0
	}
	if m.stale {
		m.fit = m.solve()
		m.stale = false
	}
	x := terms(rows, cols)
	ms := 0.0
	for i, k := range m.fit {
		ms += k * x[i]
	}
	return time.Duration(ms * float64(time.Millisecond))
}

// Coefficients are k0…k3 in milliseconds, with c in units of 64 tokens.
func (m *CostModel) Coefficients() [nTerms]float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.predict(1, 1) // refit if stale
	return m.fit
}

// solve fits the coefficients: non-negative least squares over the calibration and the
// faded served sums, by an active set over the four terms (a term whose unconstrained
// coefficient comes out negative is dropped and the rest refitted).
func (m *CostModel) solve() [nTerms]float64 {
	var e normalEq
	for i := range nTerms {
		for j := range nTerms {
			e.xx[i][j] = m.prior.xx[i][j] + m.recent.xx[i][j]
		}
		e.xy[i] = m.prior.xy[i] + m.recent.xy[i]
	}
	e.w = m.prior.w + m.recent.w
	active := [nTerms]bool{true, true, true, true}
	for range nTerms {
		k, ok := solveActive(e, active)
		if !ok {
			break
		}
		neg := -1
		for i := range nTerms {
			if !active[i] || k[i] >= 0 {
				continue
			}
			if k[i] > -1e-9 { // rounding, not a negative cost
				k[i] = 0
				continue
			}
			if neg < 0 || k[i] < k[neg] {
				neg = i
			}
		}
		if neg < 0 {
			return k
		}
		active[neg] = false
	}
	// Degenerate data (one shape, say): the mean cost per padded token.
	var k [nTerms]float64
	k[2] = e.xy[2] / math.Max(e.xx[2][2], 1e-300)
	return k
}

// ridge is the weight of the prior against the data, per unit of observation weight.
const ridge = 1e-4

// solveActive solves the normal equations restricted to the active terms, with a ridge
// small enough to matter only where the data do not determine a term.
func solveActive(e normalEq, active [nTerms]bool) ([nTerms]float64, bool) {
	var idx []int
	for i, a := range active {
		if a {
			idx = append(idx, i)
		}
	}
	n := len(idx)
	if n == 0 {
		return [nTerms]float64{}, false
	}
	a := make([][]float64, n)
	for i, ii := range idx {
		a[i] = make([]float64, n+1)
		for j, jj := range idx {
			a[i][j] = e.xx[ii][jj]
		}
		// The prior: a run's cost is its fixed cost k0. Every other term pays a small
		// ridge, so that data too thin to show a per-row cost (one shape, say) leave the
		// model flat, and batches are formed large, until runs of other shapes show that
		// rows cost.
		if ii == 0 {
			a[i][i] += 1e-12 * (e.xx[ii][ii] + 1e-12)
		} else {
			a[i][i] += ridge * e.w
		}
		a[i][n] = e.xy[ii]
	}
	// Gaussian elimination with partial pivoting.
	for col := range n {
		p := col
		for r := col + 1; r < n; r++ {
			if math.Abs(a[r][col]) > math.Abs(a[p][col]) {
				p = r
			}
		}
		if math.Abs(a[p][col]) < 1e-300 {
			return [nTerms]float64{}, false
		}
		a[col], a[p] = a[p], a[col]
		for r := range n {
			if r == col {
				continue
			}
			f := a[r][col] / a[col][col]
			for c := col; c <= n; c++ {
				a[r][c] -= f * a[col][c]
			}
		}
	}
	var k [nTerms]float64
	for i, ii := range idx {
		k[ii] = a[i][n] / a[i][i]
	}
	return k, true
}

// CostPoint is one point of a learned cost curve.
type CostPoint struct {
	Rows       int     `json:"rows"`
	Tokens     int     `json:"tokens"`       // padded length of every row, or of every packed text
	Ms         float64 `json:"ms"`           // predicted time of the batch
	TextsPerS  float64 `json:"texts_per_s"`  // rows / Ms
	PerTextVs1 float64 `json:"per_text_vs1"` // cost per text relative to a batch of 1
}

// Curve is the model's prediction at every rows × tokens given, for /info and metrics:
// rows padded rows of tokens each or, packed, rows texts of tokens each end to end, laid out
// as packRows would lay them out.
func (m *CostModel) Curve(rows, tokens []int, packed bool) []CostPoint {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.n == 0 {
		return nil
	}
	var out []CostPoint
	for _, t := range tokens {
		one := m.predict(1, t).Seconds()
		for _, r := range rows {
			d := m.predict(r, t).Seconds()
			if packed {
				_, _, pd := packWidth(slices.Repeat([]int{t}, r), m.predict)
				d = pd.Seconds()
			}
			p := CostPoint{Rows: r, Tokens: t, Ms: round3(d * 1e3)}
			if d > 0 {
				p.TextsPerS = round3(float64(r) / d)
			}
			if one > 0 {
				p.PerTextVs1 = round3(d / float64(r) / one)
			}
			out = append(out, p)
		}
	}
	return out
}

func round3(x float64) float64 { return math.Round(x*1e3) / 1e3 }

// curveRows are the batch sizes a curve is shown at: powers of two up to most, and most.
func curveRows(most int) []int {
	var out []int
	for r := 1; r < most; r *= 2 {
		out = append(out, r)
	}
	return append(out, most)
}

// CurveTokens are the padded lengths a curve is shown at.
var CurveTokens = []int{16, 32, 64, 128}
