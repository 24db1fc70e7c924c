package gate

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ortserve/ortserve/bench/report"
)

// ClassifyRun is what one version of a classifier produced on a dataset.
type ClassifyRun struct {
	// Version names the version, e.g. "fp32" or "int8".
	Version string
	// Classes names the classes in the order of each row of Probs (the model's id2label).
	Classes []string
	// Probs has one row of class probabilities (softmaxed) per example, in dataset order.
	// The gate only reads it.
	Probs [][]float32
	// Elapsed is the wall time the version took over the whole dataset, for items per
	// second; zero when not timed.
	Elapsed time.Duration
}

// classifyOutput is a ClassifyRun checked against the dataset.
type classifyOutput struct {
	ClassifyRun
	// column maps a class name to its column in Probs.
	column map[string]int
	// pred is the predicted column per example: the argmax, the first on a tie; -1 for a
	// row that is not all numbers.
	pred []int
	// nonFinite is the rows holding a NaN or an infinity.
	nonFinite nonFinite
}

// notANumber is the class a row holding a NaN or an infinity predicts, in the confusion
// matrix and the worst examples: parenthesized, so that no dataset label is likely to share
// it.
const notANumber = "(NaN/Inf)"

// prob is the probability the version gave class on example i; 0 for a class it lacks.
// Example i must be finite.
func (c *classifyOutput) prob(i int, class string) float64 {
	j, ok := c.column[class]
	if !ok {
		return 0
	}
	return float64(c.Probs[i][j])
}

// predicted is the class the version predicted on example i.
func (c *classifyOutput) predicted(i int) string {
	if c.pred[i] < 0 {
		return notANumber
	}
	return c.Classes[c.pred[i]]
}

// Classify compares a candidate classifier with the baseline on ds and judges it against b.
// Both runs must cover ds in order, and every dataset label must be one of each version's
// classes. b.MaxDrop must be set. The baseline's probabilities must all be numbers; a
// candidate's example that holds a NaN or an infinity counts as wrong, and fails the verdict
// (the "finite" check). The report's Model is left for the caller.
func Classify(ds *Dataset, base, cand ClassifyRun, b Budget, o Options) (*Report, error) {
	o, err := o.resolve()
	if err != nil {
		return nil, err
	}
	if err := b.check(TaskClassify); err != nil {
		return nil, err
	}
	labels, err := labeled(ds, "a classifier gate")
	if err != nil {
		return nil, err
	}
	bo, err := readClassify("baseline", base, ds, labels)
	if err != nil {
		return nil, err
	}
	if err := baselineFinite(base.Version, bo.nonFinite); err != nil {
		return nil, err
	}
	co, err := readClassify("candidate", cand, ds, labels)
	if err != nil {
		return nil, err
	}

	// The axes of the confusion matrices: the dataset's labels, then any class a version
	// predicted that no example has, so that no prediction goes uncounted.
	axes := slices.Clone(labels)
	axis := make(map[string]int)
	for i, l := range axes {
		axis[l] = i
	}
	for _, out := range []*classifyOutput{bo, co} {
		for i := range out.pred {
			if c := out.predicted(i); !hasKey(axis, c) {
				axis[c] = len(axes)
				axes = append(axes, c)
			}
		}
	}
	n := len(ds.Examples)
	truth := make([]int, n)
	for i, e := range ds.Examples {
		truth[i] = axis[e.Label]
	}

	r := &Report{
		Schema:  Schema,
		Task:    TaskClassify,
		Dataset: summarize(ds, labels),
		Budget:  b,
	}
	var right [2][]bool
	for k, out := range []*classifyOutput{bo, co} {
		pred := make([]int, n)
		for i := range pred {
			pred[i] = axis[out.predicted(i)]
		}
		m := classMetrics(axes, truth, pred)
		m.Version = versionName([]string{"baseline", "candidate"}[k], out.Version)
		m.timing(out.Elapsed, n)
		right[k] = make([]bool, n)
		for i := range pred {
			right[k][i] = pred[i] == truth[i]
		}
		if k == 0 {
			r.Baseline = m
		} else {
			r.Candidate = m
		}
	}
	r.compareClassify(ds, bo, co, right[0], right[1])
	r.Comparison.Drop = newDrop(MetricAccuracy, right[0], right[1], o)
	r.speed()

	r.checkFinite(co.nonFinite)
	r.checkDrop("accuracy")
	if b.MinAgreement > 0 {
		a := r.Comparison.Agreement
		dec := report.Decimals(100*a.Fraction, 100*b.MinAgreement, 1)
		pass := a.Fraction >= b.MinAgreement-slack
		verb := "meets"
		if !pass {
			verb = "is below"
		}
		r.Verdict.add("agreement", pass, fmt.Sprintf("agreement %s (%d of %d predictions changed) %s the %s minimum",
			report.Percent(a.Fraction, dec), a.Changed, n, verb, report.Percent(b.MinAgreement, dec)))
	}
	r.Verdict.decide()
	r.classifyNotes(ds, labels, bo, co)
	return r, nil
}

func hasKey[K comparable, V any](m map[K]V, k K) bool {
	_, ok := m[k]
	return ok
}

// labeled checks that ds has examples and labels and returns the labels in order. what
// names the gate that needs them.
func labeled(ds *Dataset, what string) ([]string, error) {
	if ds == nil || len(ds.Examples) == 0 {
		return nil, fmt.Errorf("gate: the dataset has no examples: %s needs labeled examples", what)
	}
	for i, e := range ds.Examples {
		if e.Label == "" {
			return nil, fmt.Errorf("gate: example %d of %s has no label: %s needs every example labeled (--label-column names the column)", i, orName(ds.Source), what)
		}
	}
	return labelOrder(ds), nil
}

// readClassify checks a run against the dataset and finds its predictions. which is
// "baseline" or "candidate".
func readClassify(which string, run ClassifyRun, ds *Dataset, labels []string) (*classifyOutput, error) {
	who := role(which, run.Version)
	n := len(ds.Examples)
	if len(run.Classes) == 0 {
		return nil, fmt.Errorf("gate: %s has no class names: give its classes in the order of its output (the model's id2label)", who)
	}
	out := &classifyOutput{ClassifyRun: run, column: make(map[string]int), pred: make([]int, len(run.Probs))}
	for j, c := range run.Classes {
		if c == "" {
			return nil, fmt.Errorf("gate: %s has an empty class name at position %d: name every class", who, j)
		}
		if hasKey(out.column, c) {
			return nil, fmt.Errorf("gate: %s names class %q twice: each output column needs its own name", who, c)
		}
		out.column[c] = j
	}
	for _, l := range labels {
		if !hasKey(out.column, l) {
			return nil, fmt.Errorf("gate: dataset label %q is not a class of %s: the dataset's labels are %s and the model's classes are %s: map the labels to classes with --label-map, e.g. --label-map %s",
				l, who, listSome(labels), listSome(run.Classes), labelMapExample(labels, run.Classes))
		}
	}
	if len(run.Probs) != n {
		return nil, fmt.Errorf("gate: %s has %d probability rows for %d examples: run it on the whole dataset, in order", who, len(run.Probs), n)
	}
	for i, row := range run.Probs {
		if len(row) != len(run.Classes) {
			return nil, fmt.Errorf("gate: %s has %d probabilities for example %d but %d classes: give one probability per class", who, len(row), i, len(run.Classes))
		}
	}
	out.nonFinite = scanFinite(run.Probs)
	for i, row := range run.Probs {
		if out.nonFinite.at(i) {
			out.pred[i] = -1
			continue
		}
		best := 0
		for j, p := range row {
			if p > row[best] {
				best = j
			}
		}
		out.pred[i] = best
	}
	return out, nil
}

// labelMapExample suggests a label map pairing the dataset's labels, in numeric order when
// they are numbers, with the classes in output order. It is only a shape to edit: the
// pairing is right when the labels are class indices, and the chance note catches it when
// not.
func labelMapExample(labels, classes []string) string {
	sorted := slices.Clone(labels)
	slices.SortFunc(sorted, func(a, b string) int {
		x, errA := strconv.Atoi(a)
		y, errB := strconv.Atoi(b)
		if errA == nil && errB == nil {
			return cmp.Compare(x, y)
		}
		return strings.Compare(a, b)
	})
	var pairs []string
	for i, l := range sorted[:min(len(sorted), len(classes), 4)] {
		pairs = append(pairs, l+"="+classes[i])
	}
	s := strings.Join(pairs, ",")
	if len(sorted) > len(pairs) {
		s += ",…"
	}
	return s
}

// classMetrics computes accuracy, macro-F1, per-class scores and the confusion matrix of
// predictions against the truth, both given as indices into axes.
func classMetrics(axes []string, truth, pred []int) VersionMetrics {
	k := len(axes)
	conf := make([][]int, k)
	for i := range conf {
		conf[i] = make([]int, k)
	}
	correct := 0
	for i := range truth {
		conf[truth[i]][pred[i]]++
		if truth[i] == pred[i] {
			correct++
		}
	}
	m := VersionMetrics{
		Accuracy:  fraction(correct, len(truth)),
		Confusion: &Confusion{Labels: slices.Clone(axes), Counts: conf},
	}
	sumF1, counted := 0.0, 0
	for c, label := range axes {
		cm := ClassMetrics{Label: label}
		tp := conf[c][c]
		for j := range k {
			cm.Support += conf[c][j]
			cm.Predicted += conf[j][c]
		}
		cm.Precision = ratio(tp, cm.Predicted)
		cm.Recall = ratio(tp, cm.Support)
		if cm.Precision+cm.Recall > 0 {
			cm.F1 = 2 * cm.Precision * cm.Recall / (cm.Precision + cm.Recall)
		}
		// A class neither present nor predicted says nothing about this version; one
		// predicted but absent counts, with F1 0, as scikit-learn counts it.
		if cm.Support > 0 || cm.Predicted > 0 {
			sumF1 += cm.F1
			counted++
		}
		m.Classes = append(m.Classes, cm)
	}
	macro := sumF1 / float64(counted)
	m.MacroF1 = &macro
	return m
}

// ratio is a/b, or 0 when b is 0.
func ratio(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// compareClassify fills in agreement, probability deltas and the worst examples.
func (r *Report) compareClassify(ds *Dataset, bo, co *classifyOutput, baseOK, candOK []bool) {
	n := len(ds.Examples)
	classes := slices.Clone(bo.Classes)
	for _, c := range co.Classes {
		if !hasKey(bo.column, c) {
			classes = append(classes, c)
		}
	}
	a := &Agreement{}
	deltas := make([]float64, n)
	for i := range n {
		if bo.predicted(i) != co.predicted(i) {
			a.Changed++
			switch {
			case baseOK[i]:
				a.RightToWrong++
			case candOK[i]:
				a.WrongToRight++
			default:
				a.WrongToWrong++
			}
		}
		if co.nonFinite.at(i) {
			deltas[i] = 1 // no probability at all: as far as a probability can move
			continue
		}
		for _, c := range classes {
			deltas[i] = max(deltas[i], math.Abs(bo.prob(i, c)-co.prob(i, c)))
		}
	}
	a.Fraction = float64(n-a.Changed) / float64(n)
	d := distribution(deltas)
	r.Comparison.Agreement, r.Comparison.ProbDelta = a, &d

	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(i, j int) int { return cmp.Compare(deltas[j], deltas[i]) })
	for _, i := range order[:min(n, worstShown)] {
		if deltas[i] == 0 {
			break
		}
		delta := deltas[i]
		r.Comparison.Worst = append(r.Comparison.Worst, ExampleDiff{
			Index: i, Label: ds.Examples[i].Label, Text: snippet(ds.Examples[i].Text),
			Baseline: bo.predicted(i), Candidate: co.predicted(i), ProbDelta: &delta,
		})
	}
}

// worstShown is how many of the most changed examples a report lists.
const worstShown = 5

// classifyNotes adds the findings that change how to read a classifier gate.
func (r *Report) classifyNotes(ds *Dataset, labels []string, bo, co *classifyOutput) {
	if len(labels) == 1 {
		r.Notes = append(r.Notes, fmt.Sprintf("The dataset has one label only (%q): accuracy shows only how often the versions predict it; a gate needs examples of every class.", labels[0]))
	} else {
		// Guessing with the label frequencies is right with probability Σ p². A baseline no
		// better than that usually means the labels are mapped to the wrong classes, and
		// then two broken versions agree and the gate passes without meaning anything.
		chance := 0.0
		for _, lc := range r.Dataset.Labels {
			p := float64(lc.Count) / float64(r.Dataset.N)
			chance += p * p
		}
		if acc := *r.Baseline.Accuracy; acc <= chance {
			r.Notes = append(r.Notes, fmt.Sprintf("The baseline's accuracy, %s, is no better than guessing with the label frequencies (%s): the dataset's labels probably do not match the model's classes, so check --label-map; a gate against a broken baseline proves nothing.",
				report.Percent(acc, 1), report.Percent(chance, 1)))
		}
	}
	for _, out := range []*classifyOutput{bo, co} {
		if i, sum, ok := notProbabilities(out.Probs, out.nonFinite); !ok {
			r.Notes = append(r.Notes, fmt.Sprintf("The rows of %s are not probabilities (example %d sums to %.3g): the deltas compare raw scores; pass softmaxed outputs.",
				role([]string{"baseline", "candidate"}[b2i(out == co)], out.Version), i, sum))
		}
	}
	if !slices.Equal(sortedCopy(bo.Classes), sortedCopy(co.Classes)) {
		r.Notes = append(r.Notes, fmt.Sprintf("The versions have different classes (%s against %s): check that both are exports of the same model.",
			listSome(bo.Classes), listSome(co.Classes)))
	}
	r.sameVersionNotes(bo.Version, co.Version, slices.EqualFunc(bo.Probs, co.Probs, sameBits) && slices.Equal(bo.Classes, co.Classes))
}

// notProbabilities finds a row with a value outside [0, 1] or a sum off 1 by more than
// half-precision rounding allows, among the rows that are all numbers (skip has the others).
func notProbabilities(rows [][]float32, skip nonFinite) (row int, sum float64, ok bool) {
	for i, r := range rows {
		if skip.at(i) {
			continue
		}
		s := 0.0
		for _, p := range r {
			if p < -1e-3 || p > 1+1e-3 {
				return i, sumOf(r), false
			}
			s += float64(p)
		}
		if math.Abs(s-1) > 0.01 {
			return i, s, false
		}
	}
	return 0, 0, true
}

func sumOf(row []float32) float64 {
	s := 0.0
	for _, p := range row {
		s += float64(p)
	}
	return s
}

// sameBits reports whether two rows are bit for bit the same.
func sameBits(a, b []float32) bool {
	return slices.EqualFunc(a, b, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) })
}

func sortedCopy(ss []string) []string {
	s := slices.Clone(ss)
	slices.Sort(s)
	return s
}

// sameVersionNotes warns when the "two" versions may be one: the same name, or outputs
// identical to the last bit, which a quantized model does not produce.
func (r *Report) sameVersionNotes(base, cand string, identical bool) {
	if base != "" && base == cand {
		r.Notes = append(r.Notes, fmt.Sprintf("The baseline and the candidate are both named %q: compare two different versions.", base))
	}
	if identical {
		r.Notes = append(r.Notes, "The candidate's outputs are identical to the baseline's, to the last bit: check that the candidate really ran (a wrong path or a shared cache looks like this).")
	}
}
