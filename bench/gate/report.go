package gate

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/ortserve/ortserve/bench/report"
)

// Schema identifies the layout of a Report's JSON; it changes when a field's meaning does.
const Schema = "ortserve.gate/v1"

// The tasks a Report can be of.
const (
	TaskClassify = "classify"
	TaskEmbed    = "embed"
)

// The metrics an accuracy drop can be measured in (Drop.Metric).
const (
	// MetricAccuracy is a classifier's accuracy against the dataset labels.
	MetricAccuracy = "accuracy"
	// MetricCentroidAccuracy is the leave-one-out nearest-centroid accuracy of embeddings:
	// each example is given the label whose centroid, computed without it, is nearest by
	// cosine.
	MetricCentroidAccuracy = "loo_centroid_accuracy"
)

// Budget is how much worse than the baseline a candidate may be. A zero field sets no budget
// for its metric, except MaxDrop, which Classify requires.
type Budget struct {
	// MaxDrop is how many percentage points the candidate's accuracy (classify) or
	// nearest-centroid accuracy (embed) may fall below the baseline's. It is held against
	// the drop's confidence interval: within budget when the whole interval is (shown);
	// over budget when the point estimate is; in between the data cannot tell
	// (inconclusive), which passes unless Strict.
	MaxDrop float64 `json:"max_drop_points,omitempty"`
	// Strict fails an inconclusive drop: only a drop shown to be within budget passes.
	Strict bool `json:"strict,omitempty"`
	// MinAgreement is the least fraction of examples on which both versions must predict
	// the same class (classify only).
	MinAgreement float64 `json:"min_agreement,omitempty"`
	// MinCosineMean is the least mean cosine between the versions' embeddings of the same
	// example (embed only).
	MinCosineMean float64 `json:"min_cosine_mean,omitempty"`
	// MinCosineP1 is the least 1st percentile of those cosines (embed only): it catches a
	// candidate that is fine on average and broken on a few inputs.
	MinCosineP1 float64 `json:"min_cosine_p1,omitempty"`
}

// check validates b for task.
func (b Budget) check(task string) error {
	for _, f := range []struct {
		v            float64
		name, lo, hi string
		max          float64
	}{
		{b.MaxDrop, "accuracy drop budget", "0", "100 points", 100},
		{b.MinAgreement, "minimum agreement", "0", "1 (0.99 for 99%)", 1},
		{b.MinCosineMean, "minimum mean cosine", "0", "1", 1},
		{b.MinCosineP1, "minimum 1st-percentile cosine", "0", "1", 1},
	} {
		if math.IsNaN(f.v) || f.v < 0 || f.v > f.max {
			return fmt.Errorf("gate: the %s %g is out of range: give a number from %s to %s", f.name, f.v, f.lo, f.hi)
		}
	}
	switch task {
	case TaskClassify:
		if b.MaxDrop == 0 {
			return fmt.Errorf("gate: a classifier gate needs an accuracy budget: set the largest acceptable drop in points with --max-drop, e.g. --max-drop 1")
		}
		if b.MinCosineMean != 0 || b.MinCosineP1 != 0 {
			return fmt.Errorf("gate: cosine budgets apply to embedding models, not classifiers: drop --min-cosine-mean and --min-cosine-p1")
		}
	case TaskEmbed:
		if b.MaxDrop == 0 && b.MinCosineMean == 0 && b.MinCosineP1 == 0 {
			return fmt.Errorf("gate: an embedding gate needs a budget: set --min-cosine-mean, --min-cosine-p1 or --max-drop (nearest-centroid accuracy, in points)")
		}
		if b.MinAgreement != 0 {
			return fmt.Errorf("gate: the agreement budget applies to classifiers, not embedding models: drop --min-agreement")
		}
	}
	return nil
}

// Report is the outcome of a gate: both versions' metrics, how they compare, and the verdict.
// It is data first; WriteText, WriteMarkdown and WriteJSON lay it out.
type Report struct {
	// Schema is always the package's Schema.
	Schema string `json:"schema"`
	// Model names the model whose versions were compared; the caller sets it.
	Model string `json:"model,omitempty"`
	// Task is TaskClassify or TaskEmbed.
	Task    string         `json:"task"`
	Dataset DatasetSummary `json:"dataset"`
	// Baseline and Candidate are each version's own metrics.
	Baseline   VersionMetrics `json:"baseline"`
	Candidate  VersionMetrics `json:"candidate"`
	Comparison Comparison     `json:"comparison"`
	Budget     Budget         `json:"budget"`
	// Served is the served-path variability of both versions (AddServed); nil when not
	// measured.
	Served  *Served `json:"served,omitempty"`
	Verdict Verdict `json:"verdict"`
	// Notes are findings that do not decide the verdict but change how to read it.
	Notes []string `json:"notes,omitempty"`
}

// Pass reports whether the candidate met every budget.
func (r *Report) Pass() bool { return r != nil && r.Verdict.Pass }

// DatasetSummary says what the versions were run on.
type DatasetSummary struct {
	Source string `json:"source"`
	// N is the number of examples.
	N int `json:"n"`
	// Labels counts the examples of each label, in the dataset's label order.
	Labels []LabelCount `json:"labels,omitempty"`
}

// LabelCount is how many examples have a label.
type LabelCount struct {
	Label string `json:"label"`
	Count int    `json:"count"`
}

// VersionMetrics is one version's results on the dataset.
type VersionMetrics struct {
	Version string `json:"version"`
	// Accuracy is the fraction of examples the version got right: a classifier's accuracy,
	// or an embedding's nearest-centroid accuracy (see MetricCentroidAccuracy). It is nil
	// when not measured.
	Accuracy *float64 `json:"accuracy,omitempty"`
	// MacroF1 is the unweighted mean of the per-class F1 scores over the classes that occur
	// in the dataset or the predictions (classify).
	MacroF1 *float64 `json:"macro_f1,omitempty"`
	// Classes has precision, recall and F1 per class, in Confusion.Labels order (classify).
	Classes   []ClassMetrics `json:"classes,omitempty"`
	Confusion *Confusion     `json:"confusion,omitempty"`
	// Dim is the embedding dimension (embed).
	Dim int `json:"dim,omitempty"`
	// NonFinite counts the examples whose output held a NaN or an infinity (the candidate
	// only: a baseline with any is an error). Each counts as wrong, and any fails the
	// verdict.
	NonFinite int `json:"non_finite,omitempty"`
	// ElapsedSeconds is the wall time the version took over the whole dataset, and
	// ItemsPerSecond the rate that makes; both are absent when the caller did not time it.
	ElapsedSeconds float64 `json:"elapsed_s,omitempty"`
	ItemsPerSecond float64 `json:"items_per_s,omitempty"`
}

// ClassMetrics is a classifier's precision, recall and F1 on one class. A ratio whose
// denominator is zero (no predictions of the class, or no examples of it) is 0.
type ClassMetrics struct {
	Label string `json:"label"`
	// Support is how many examples truly have the label; Predicted how many the version
	// gave it.
	Support   int     `json:"support"`
	Predicted int     `json:"predicted"`
	Precision float64 `json:"precision"`
	Recall    float64 `json:"recall"`
	F1        float64 `json:"f1"`
}

// Confusion counts examples by true label (rows) and predicted class (columns). Labels are
// the dataset's labels in order, followed by any class a version predicted that no example
// has.
type Confusion struct {
	Labels []string `json:"labels"`
	Counts [][]int  `json:"counts"`
}

// Comparison is how the candidate differs from the baseline.
type Comparison struct {
	// Drop is the accuracy drop with its interval; nil when the dataset cannot measure it
	// (an embedding gate without labels).
	Drop *Drop `json:"drop,omitempty"`
	// Agreement counts the examples whose predicted class changed (classify).
	Agreement *Agreement `json:"agreement,omitempty"`
	// ProbDelta is the distribution over examples of the largest change in any class's
	// probability, max over classes of |p_baseline - p_candidate| (classify).
	ProbDelta *Distribution `json:"prob_delta,omitempty"`
	// Cosine is the distribution over examples of the cosine between the two versions'
	// embeddings of the same text (embed).
	Cosine *Distribution `json:"cosine,omitempty"`
	// SpeedRatio is the candidate's items per second over the baseline's, when both were
	// timed: 2 means twice as fast.
	SpeedRatio float64 `json:"speed_ratio,omitempty"`
	// Worst lists the examples that changed most, for a look at what broke.
	Worst []ExampleDiff `json:"worst,omitempty"`
}

// Drop is how far the candidate's accuracy fell below the baseline's, in percentage points
// (negative when it rose), with a paired bootstrap confidence interval.
type Drop struct {
	// Metric is MetricAccuracy or MetricCentroidAccuracy.
	Metric string `json:"metric"`
	// N is how many examples the metric scores.
	N int `json:"n"`
	// Points is the point estimate, baseline minus candidate.
	Points float64 `json:"points"`
	// Low and High bound the interval.
	Low  float64 `json:"ci_low"`
	High float64 `json:"ci_high"`
	// Outcome is the drop against the budget: "within" (the whole interval is), "over"
	// (the point estimate is), or "inconclusive" (the point estimate is within budget but
	// the interval reaches past it: the data cannot show the drop is within budget).
	Outcome    string  `json:"outcome,omitempty"`
	Confidence float64 `json:"confidence"`
	Resamples  int     `json:"resamples"`
	Seed       uint64  `json:"seed"`
}

// Agreement is how often the versions predict the same class.
type Agreement struct {
	// Fraction is the share of examples with the same prediction.
	Fraction float64 `json:"fraction"`
	// Changed is how many predictions differ: right to wrong, wrong to right, and wrong to
	// another wrong class.
	Changed      int `json:"changed"`
	RightToWrong int `json:"right_to_wrong"`
	WrongToRight int `json:"wrong_to_right"`
	WrongToWrong int `json:"wrong_to_wrong"`
}

// ExampleDiff is one example on which the versions differ.
type ExampleDiff struct {
	// Index is the example's position in the dataset, from 0.
	Index int    `json:"index"`
	Label string `json:"label,omitempty"`
	// Text is the start of the example's text.
	Text string `json:"text"`
	// Baseline and Candidate are the predicted classes (classify).
	Baseline  string `json:"baseline,omitempty"`
	Candidate string `json:"candidate,omitempty"`
	// ProbDelta is the largest change in a class probability (classify).
	ProbDelta *float64 `json:"prob_delta,omitempty"`
	// Cosine is the cosine between the two embeddings (embed).
	Cosine *float64 `json:"cosine,omitempty"`
}

// Verdict says whether the candidate passed, and why.
type Verdict struct {
	Pass bool `json:"pass"`
	// Reasons are the failed checks, one sentence each with the numbers.
	Reasons []string `json:"reasons,omitempty"`
	// Checks are all the budgets the candidate was held to, passed or not.
	Checks []Check `json:"checks"`
}

// Check is one budget held against the candidate.
type Check struct {
	// Rule is "finite" (present only when the candidate gave a NaN or an infinity),
	// "accuracy_drop", "agreement", "cosine_mean", "cosine_p1" or "batch_invariance".
	Rule   string `json:"rule"`
	Pass   bool   `json:"pass"`
	Detail string `json:"detail"`
}

// slack absorbs floating-point error when a measured value equals its limit.
const slack = 1e-9

// add records a check, failing the verdict when it did not pass.
func (v *Verdict) add(rule string, pass bool, detail string) {
	v.Checks = append(v.Checks, Check{Rule: rule, Pass: pass, Detail: detail})
	if !pass {
		v.Reasons = append(v.Reasons, detail)
	}
}

// decide sets Pass from the checks.
func (v *Verdict) decide() {
	v.Pass = len(v.Checks) > 0 && len(v.Reasons) == 0
}

// checkDrop holds the drop's interval against the budget. Within budget when the whole
// interval is; over budget when the point estimate is (and confidently so when the whole
// interval is); in between the data cannot tell either way: inconclusive, a pass with a
// note, or a failure when the budget is strict.
func (r *Report) checkDrop(what string) {
	d, limit := r.Comparison.Drop, r.Budget.MaxDrop
	dec := report.Decimals(d.High, limit, 1)
	budget := strconv.FormatFloat(limit, 'f', dec, 64)
	interval := fmt.Sprintf("%s%% CI %s … %s", confText(d.Confidence), report.Signed(d.Low, dec), report.Signed(d.High, dec))
	var pass bool
	var detail string
	switch {
	case d.High <= limit+slack:
		d.Outcome, pass = "within", true
		detail = fmt.Sprintf("%s drop %s points (%s): the whole interval is within the %s-point budget", what, report.Signed(d.Points, dec), interval, budget)
	case d.Points > limit+slack:
		d.Outcome = "over"
		detail = fmt.Sprintf("%s drop %s points (%s) exceeds the %s-point budget", what, report.Signed(d.Points, dec), interval, budget)
		if d.Low > limit+slack {
			detail += ", beyond noise"
		}
	default:
		d.Outcome, pass = "inconclusive", !r.Budget.Strict
		detail = fmt.Sprintf("%s drop %s points is within the %s-point budget, but its interval (%s) reaches past it: inconclusive", what, report.Signed(d.Points, dec), budget, interval)
		if r.Budget.Strict {
			detail += ", and the budget is strict"
		}
		note := fmt.Sprintf("The data cannot show the %s drop is within the %s-point budget: its %s%% interval reaches %s points. More examples (or a larger budget) would settle it; --strict fails such a candidate",
			what, budget, confText(d.Confidence), report.Signed(d.High, dec))
		if step := 100 / float64(d.N); step > limit {
			note += fmt.Sprintf(" (with %d examples one changed answer moves the %s by %s points)", d.N, what, strconv.FormatFloat(step, 'f', 1, 64))
		}
		r.Notes = append(r.Notes, note+".")
	}
	r.Verdict.add("accuracy_drop", pass, detail)
}

// newDrop makes the Drop of per-example correctness, with its paired bootstrap interval.
func newDrop(metric string, baseOK, candOK []bool, o Options) *Drop {
	diff := make([]int8, len(baseOK))
	nb, nc := 0, 0
	for i := range baseOK {
		b, c := b2i(baseOK[i]), b2i(candOK[i])
		nb, nc = nb+b, nc+c
		diff[i] = int8(b - c)
	}
	low, high := pairedBootstrap(diff, o)
	return &Drop{
		Metric:     metric,
		N:          len(diff),
		Points:     100 * float64(nb-nc) / float64(len(diff)),
		Low:        low,
		High:       high,
		Confidence: o.Confidence,
		Resamples:  o.Resamples,
		Seed:       o.Seed,
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// fraction is k/n as a pointer, for metrics that may be absent.
func fraction(k, n int) *float64 {
	f := float64(k) / float64(n)
	return &f
}

// timing fills in a version's speed.
func (m *VersionMetrics) timing(elapsed time.Duration, n int) {
	if elapsed <= 0 {
		return
	}
	m.ElapsedSeconds = elapsed.Seconds()
	m.ItemsPerSecond = float64(n) / elapsed.Seconds()
}

// speed fills in the speed ratio when both versions were timed.
func (r *Report) speed() {
	b, c := r.Baseline.ItemsPerSecond, r.Candidate.ItemsPerSecond
	if b > 0 && c > 0 {
		r.Comparison.SpeedRatio = c / b
	}
}

// summarize fills in the dataset summary.
func summarize(ds *Dataset, labels []string) DatasetSummary {
	s := DatasetSummary{Source: ds.Source, N: len(ds.Examples)}
	count := make(map[string]int)
	for _, e := range ds.Examples {
		count[e.Label]++
	}
	for _, l := range labels {
		s.Labels = append(s.Labels, LabelCount{Label: l, Count: count[l]})
	}
	return s
}

// labelOrder is the dataset's labels: ds.Labels, then any label of an example missing from
// them, for a Dataset built by hand.
func labelOrder(ds *Dataset) []string {
	var labels []string
	seen := make(map[string]bool)
	add := func(l string) {
		if l != "" && !seen[l] {
			seen[l] = true
			labels = append(labels, l)
		}
	}
	for _, l := range ds.Labels {
		add(l)
	}
	for _, e := range ds.Examples {
		add(e.Label)
	}
	return labels
}

// role names a version in messages: `candidate "int8"`.
func role(which, version string) string {
	if version == "" {
		return which
	}
	return fmt.Sprintf("%s %q", which, version)
}

// versionName is a version's name for tables, its role when it has none.
func versionName(which, version string) string {
	if version == "" {
		return which
	}
	return version
}

// listSome lists up to ten strings, quoted, saying how many more there are.
func listSome(ss []string) string {
	const most = 10
	q := quoteAll(ss[:min(len(ss), most)])
	s := strings.Join(q, ", ")
	if len(ss) > most {
		s += fmt.Sprintf(" and %d more", len(ss)-most)
	}
	return s
}

// snippet is the start of an example's text, for ExampleDiff.
func snippet(s string) string {
	const most = 80
	r := []rune(s)
	if len(r) <= most {
		return s
	}
	return string(r[:most-1]) + "…"
}

// confText is a confidence as a percentage: 0.95 → "95".
func confText(c float64) string {
	return strconv.FormatFloat(math.Round(c*1e6)/1e4, 'f', -1, 64)
}
