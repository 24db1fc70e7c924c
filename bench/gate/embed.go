package gate

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/ortserve/ortserve/bench/report"
)

// EmbedRun is what one version of an embedding model produced on a dataset.
type EmbedRun struct {
	// Version names the version, e.g. "fp32" or "int8".
	Version string
	// Vectors has one embedding per example, in dataset order, all of one dimension.
	// They need not be normalized: the gate computes cosines from the raw vectors. The gate
	// only reads them.
	Vectors [][]float32
	// Elapsed is the wall time the version took over the whole dataset, for items per
	// second; zero when not timed.
	Elapsed time.Duration
}

// Embed compares a candidate embedding model with the baseline on ds and judges it against
// b, which must set at least one of MaxDrop, MinCosineMean and MinCosineP1. The cosine
// between the two versions' embeddings of each example measures how far the candidate
// moved; with labels, the leave-one-out nearest-centroid accuracy measures whether the move
// matters for telling the labels apart, and MaxDrop bounds its drop as in Classify. MaxDrop
// needs a dataset with at least two labels and two examples of some label. The baseline's
// vectors must all be numbers; a candidate's vector that holds a NaN or an infinity has
// cosine 0, is scored wrong, and fails the verdict (the "finite" check). The report's Model
// is left for the caller.
func Embed(ds *Dataset, base, cand EmbedRun, b Budget, o Options) (*Report, error) {
	o, err := o.resolve()
	if err != nil {
		return nil, err
	}
	if err := b.check(TaskEmbed); err != nil {
		return nil, err
	}
	if ds == nil || len(ds.Examples) == 0 {
		return nil, fmt.Errorf("gate: the dataset has no examples: an embedding gate needs texts to embed")
	}
	n := len(ds.Examples)
	bv, err := readEmbed("baseline", base, n)
	if err != nil {
		return nil, err
	}
	if err := baselineFinite(base.Version, bv.nonFinite); err != nil {
		return nil, err
	}
	cv, err := readEmbed("candidate", cand, n)
	if err != nil {
		return nil, err
	}
	if bv.dim != cv.dim {
		return nil, fmt.Errorf("gate: %s has %d-dimensional vectors and %s %d-dimensional ones: compare versions of the same model", role("baseline", base.Version), bv.dim, role("candidate", cand.Version), cv.dim)
	}

	labels := labelOrder(ds)
	r := &Report{
		Schema:  Schema,
		Task:    TaskEmbed,
		Dataset: summarize(ds, labels),
		Budget:  b,
	}
	r.Baseline = VersionMetrics{Version: versionName("baseline", base.Version), Dim: bv.dim}
	r.Candidate = VersionMetrics{Version: versionName("candidate", cand.Version), Dim: cv.dim}
	r.Baseline.timing(base.Elapsed, n)
	r.Candidate.timing(cand.Elapsed, n)

	cos := make([]float64, n)
	for i := range cos {
		cos[i] = cosine(base.Vectors[i], cand.Vectors[i], bv.norm[i], cv.norm[i])
	}
	d := distribution(cos)
	r.Comparison.Cosine = &d
	r.worstCosines(ds, cos)

	scored, why := centroidScored(ds, labels)
	switch {
	case scored != nil:
		truth := make([]int, n)
		for i, e := range ds.Examples {
			truth[i] = slices.Index(labels, e.Label)
		}
		baseOK := centroidCorrect(base.Vectors, bv.norm, truth, len(labels), scored)
		candOK := centroidCorrect(cand.Vectors, cv.norm, truth, len(labels), scored)
		for si, i := range scored {
			candOK[si] = candOK[si] && !cv.nonFinite.at(i)
		}
		r.Baseline.Accuracy = fraction(count(baseOK), len(scored))
		r.Candidate.Accuracy = fraction(count(candOK), len(scored))
		r.Comparison.Drop = newDrop(MetricCentroidAccuracy, baseOK, candOK, o)
		if skipped := n - len(scored); skipped > 0 {
			r.Notes = append(r.Notes, fmt.Sprintf("%d examples are the only ones of their label, so nearest-centroid accuracy leaves them out and scores %d.", skipped, len(scored)))
		}
	case b.MaxDrop > 0:
		return nil, fmt.Errorf("gate: --max-drop needs nearest-centroid accuracy, but %s: add labeled examples or drop --max-drop and gate on cosine alone", why)
	default:
		r.Notes = append(r.Notes, fmt.Sprintf("No nearest-centroid accuracy: %s; the gate judges cosine alone.", why))
	}
	r.speed()

	r.checkFinite(cv.nonFinite)
	if b.MaxDrop > 0 {
		r.checkDrop("nearest-centroid accuracy")
	}
	if b.MinCosineMean > 0 {
		dec := report.Decimals(d.Mean, b.MinCosineMean, 3)
		pass := d.Mean >= b.MinCosineMean-slack
		r.Verdict.add("cosine_mean", pass, fmt.Sprintf("mean cosine %s %s the %s minimum",
			report.Signed(d.Mean, dec), meetsOrBelow(pass), report.Signed(b.MinCosineMean, dec)))
	}
	if b.MinCosineP1 > 0 {
		dec := report.Decimals(d.P1, b.MinCosineP1, 3)
		pass := d.P1 >= b.MinCosineP1-slack
		lowest := slices.Index(cos, d.Min)
		r.Verdict.add("cosine_p1", pass, fmt.Sprintf("1st-percentile cosine %s %s the %s minimum (lowest %s, example %d)",
			report.Signed(d.P1, dec), meetsOrBelow(pass), report.Signed(b.MinCosineP1, dec), report.Signed(d.Min, dec), lowest))
	}
	r.Verdict.decide()
	r.embedNotes(bv, cv, base, cand)
	return r, nil
}

func meetsOrBelow(pass bool) string {
	if pass {
		return "meets"
	}
	return "is below"
}

// embedOutput is an EmbedRun checked against the dataset.
type embedOutput struct {
	dim int
	// norm is each vector's L2 norm; 0 for a vector that is not all numbers, so that it
	// has no direction: cosine 0, and no weight in a centroid.
	norm []float64
	// zeros counts the vectors of norm 0 that are all numbers.
	zeros int
	// nonFinite is the vectors holding a NaN or an infinity.
	nonFinite nonFinite
}

// readEmbed checks a run's vectors and measures them. which is "baseline" or "candidate".
func readEmbed(which string, run EmbedRun, n int) (*embedOutput, error) {
	who := role(which, run.Version)
	if len(run.Vectors) != n {
		return nil, fmt.Errorf("gate: %s has %d vectors for %d examples: run it on the whole dataset, in order", who, len(run.Vectors), n)
	}
	out := &embedOutput{dim: len(run.Vectors[0]), norm: make([]float64, n), nonFinite: scanFinite(run.Vectors)}
	if out.dim == 0 {
		return nil, fmt.Errorf("gate: %s gave an empty vector for example 0: give one embedding per example", who)
	}
	for i, v := range run.Vectors {
		if len(v) != out.dim {
			return nil, fmt.Errorf("gate: %s gave a %d-dimensional vector for example %d after a %d-dimensional one for example 0: give embeddings of one dimension", who, len(v), i, out.dim)
		}
		if out.nonFinite.at(i) {
			continue
		}
		sq := 0.0
		for _, x := range v {
			sq += float64(x) * float64(x)
		}
		out.norm[i] = math.Sqrt(sq)
		if out.norm[i] == 0 {
			out.zeros++
		}
	}
	return out, nil
}

// cosine is the cosine between a and b given their norms; 0 when either is the zero vector,
// which has no direction to agree with.
func cosine(a, b []float32, na, nb float64) float64 {
	if na == 0 || nb == 0 {
		return 0
	}
	dot := 0.0
	for j := range a {
		dot += float64(a[j]) * float64(b[j])
	}
	return max(-1, min(1, dot/(na*nb)))
}

// centroidScored picks the examples nearest-centroid accuracy can score: those whose label
// has another example, so that a centroid without them exists. It returns nil, with the
// reason, when the dataset cannot measure it: no labels, one label, or no label with two
// examples.
func centroidScored(ds *Dataset, labels []string) (scored []int, why string) {
	switch {
	case len(labels) == 0:
		return nil, "the dataset has no labels"
	case len(labels) == 1:
		return nil, fmt.Sprintf("the dataset has one label only (%q)", labels[0])
	}
	count := make(map[string]int)
	for _, e := range ds.Examples {
		count[e.Label]++
	}
	for i, e := range ds.Examples {
		if count[e.Label] > 1 {
			scored = append(scored, i)
		}
	}
	if scored == nil {
		return nil, "no label has two examples"
	}
	return scored, ""
}

// centroidCorrect says, for each scored example, whether the label whose centroid is
// nearest by cosine is its own, the centroid of its own label computed without it (leave
// one out). Vectors are normalized first, so each example weighs the same in a centroid.
// The own-label centroid is the label's sum minus the example, whose dot product and norm
// follow from the sum's, so the whole pass costs one dot product per example and label.
func centroidCorrect(vecs [][]float32, norm []float64, truth []int, k int, scored []int) []bool {
	dim := len(vecs[0])
	sums := make([][]float64, k)
	for c := range sums {
		sums[c] = make([]float64, dim)
	}
	members := make([]int, k)
	for i, v := range vecs {
		members[truth[i]]++
		if norm[i] == 0 {
			continue
		}
		s := sums[truth[i]]
		for j, x := range v {
			s[j] += float64(x) / norm[i]
		}
	}
	sumSq := make([]float64, k)
	for c, s := range sums {
		for _, x := range s {
			sumSq[c] += x * x
		}
	}
	right := make([]bool, len(scored))
	for si, i := range scored {
		v, own := vecs[i], truth[i]
		selfSq := 0.0 // 1 for a unit vector, 0 for a zero one
		if norm[i] > 0 {
			selfSq = 1
		}
		best, bestCos := -1, math.Inf(-1)
		for c := range k {
			m, dot, sq := members[c], 0.0, sumSq[c]
			if norm[i] > 0 {
				for j, x := range v {
					dot += float64(x) * sums[c][j]
				}
				dot /= norm[i]
			}
			if c == own {
				m--
				sq += selfSq - 2*dot
				dot -= selfSq
			}
			if m == 0 {
				continue
			}
			cos := 0.0
			if sq > 1e-12 && norm[i] > 0 {
				cos = dot / math.Sqrt(sq)
			}
			if cos > bestCos {
				best, bestCos = c, cos
			}
		}
		right[si] = best == own
	}
	return right
}

func count(bs []bool) int {
	k := 0
	for _, b := range bs {
		k += b2i(b)
	}
	return k
}

// worstCosines lists the examples whose embeddings moved most.
func (r *Report) worstCosines(ds *Dataset, cos []float64) {
	order := make([]int, len(cos))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(i, j int) int { return cmp.Compare(cos[i], cos[j]) })
	for _, i := range order[:min(len(order), worstShown)] {
		if cos[i] >= 1-1e-6 {
			break
		}
		c := cos[i]
		r.Comparison.Worst = append(r.Comparison.Worst, ExampleDiff{
			Index: i, Label: ds.Examples[i].Label, Text: snippet(ds.Examples[i].Text), Cosine: &c,
		})
	}
}

// embedNotes adds the findings that change how to read an embedding gate.
func (r *Report) embedNotes(bv, cv *embedOutput, base, cand EmbedRun) {
	for _, x := range []struct {
		out *embedOutput
		who string
	}{{bv, role("baseline", base.Version)}, {cv, role("candidate", cand.Version)}} {
		if x.out.zeros > 0 {
			r.Notes = append(r.Notes, fmt.Sprintf("The %s gave %d zero vectors, which have no direction: their cosine counts as 0.", x.who, x.out.zeros))
		}
	}
	r.sameVersionNotes(base.Version, cand.Version, slices.EqualFunc(base.Vectors, cand.Vectors, sameBits))
}
