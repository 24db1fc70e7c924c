package server

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ortserve/ortserve/models"
	"github.com/ortserve/ortserve/runtime"
)

// Metrics are ortserve's Prometheus metrics, on a registry the caller owns. Names follow
// Prometheus conventions; docs/metrics.md maps them to Triton's and TEI's.
type Metrics struct {
	provider    *prometheus.GaugeVec
	requests    *prometheus.CounterVec
	inFlight    prometheus.Gauge
	tokenize    *prometheus.HistogramVec
	queue       *prometheus.HistogramVec
	inference   *prometheus.HistogramVec
	postprocess *prometheus.HistogramVec
	total       *prometheus.HistogramVec
	truncated   *prometheus.CounterVec
	expired     *prometheus.CounterVec
	batchSize   *prometheus.HistogramVec
	batchTokens *prometheus.HistogramVec
	queueDepth  *prometheus.GaugeVec
	running     *prometheus.GaugeVec
	cacheHits   *prometheus.CounterVec
	cacheMisses *prometheus.CounterVec
	refused     *prometheus.CounterVec
	sched       *schedCollector
}

// latencyBuckets resolve 50 µs to 20 s; native histograms are exported as well.
var latencyBuckets = prometheus.ExponentialBucketsRange(50e-6, 20, 28)

// NewMetrics registers the metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	mv := []string{"model", "version"}
	hist := func(name, help string, buckets []float64) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: name, Help: help, Buckets: buckets,
			NativeHistogramBucketFactor: 1.1, NativeHistogramMaxBucketNumber: 160,
		}, mv)
	}
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, mv)
	}
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, mv)
	}
	m := &Metrics{
		provider: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ortserve_execution_provider_info",
			Help: "Execution provider each model version runs on (value is always 1).",
		}, []string{"model", "version", "provider"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ortserve_requests_total", Help: "Requests answered, by model, version, route and HTTP status code.",
		}, []string{"model", "version", "route", "code"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ortserve_requests_in_flight", Help: "Inference requests being served now.",
		}),
		tokenize:    hist("ortserve_tokenize_duration_seconds", "Time tokenizing a request's inputs.", latencyBuckets),
		queue:       hist("ortserve_queue_duration_seconds", "Time a request's inputs waited to be batched and for a free session.", latencyBuckets),
		inference:   hist("ortserve_inference_duration_seconds", "Time from a request's last batch dispatch to its result (ONNX Runtime run).", latencyBuckets),
		postprocess: hist("ortserve_postprocess_duration_seconds", "Time pooling, normalizing or applying softmax.", latencyBuckets),
		total:       hist("ortserve_request_duration_seconds", "Time from request to response, for successful inference requests.", latencyBuckets),
		truncated:   counter("ortserve_truncated_inputs_total", "Inputs cut to the model's max length."),
		expired:     counter("ortserve_expired_requests_total", "Requests dropped from the queue because their deadline passed or their client left."),
		batchSize:   hist("ortserve_batch_size", "Rows per inference batch.", prometheus.ExponentialBuckets(1, 2, 10)),
		batchTokens: hist("ortserve_batch_tokens", "Padded tokens (rows × longest) per inference batch.", prometheus.ExponentialBuckets(8, 2, 14)),
		queueDepth:  gauge("ortserve_queue_requests", "Requests waiting in a version's queue."),
		running:     gauge("ortserve_batches_in_flight", "Batches running on a version's sessions now."),
		cacheHits:   counter("ortserve_cache_hits_total", "Inputs of successful requests answered from the version's response cache."),
		cacheMisses: counter("ortserve_cache_misses_total", "Inputs of successful requests that the version's response cache did not hold, so were computed."),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ortserve_admission_refused_total",
			Help: "Requests a version's batcher refused with 429, by reason: queue_full (its bounds), slo (the latency predicted would pass the SLO controller's budget) or deadline (… the request's own deadline).",
		}, []string{"model", "version", "reason"}),
		sched: &schedCollector{},
	}
	reg.MustRegister(m.provider, m.requests, m.inFlight, m.tokenize, m.queue, m.inference, m.postprocess,
		m.total, m.truncated, m.expired, m.batchSize, m.batchTokens, m.queueDepth, m.running, m.cacheHits, m.cacheMisses,
		m.refused, m.sched)
	return m
}

// describeFrom makes the scheduling metrics (cost curves, SLO controllers) read the models
// from describe at every scrape, so that they follow hot reloads.
func (m *Metrics) describeFrom(describe func() []ModelInfo) { m.sched.describe.Store(&describe) }

var (
	costDesc = prometheus.NewDesc("ortserve_batch_cost_seconds",
		"Predicted run time of one batch of `rows` texts padded to `tokens`, from the version's learned cost model.",
		[]string{"model", "version", "rows", "tokens"}, nil)
	costObsDesc = prometheus.NewDesc("ortserve_batch_cost_observations",
		"Runs the version's cost model has learned from (calibration and served batches).",
		[]string{"model", "version"}, nil)
	sloTargetDesc = prometheus.NewDesc("ortserve_slo_target_seconds",
		"The p95 latency the version's SLO controller holds it to.", []string{"model", "version"}, nil)
	sloObservedDesc = prometheus.NewDesc("ortserve_slo_observed_p95_seconds",
		"p95 latency over the SLO controller's last decision window.", []string{"model", "version"}, nil)
	sloBudgetDesc = prometheus.NewDesc("ortserve_slo_admission_budget_seconds",
		"Latency, from arrival, predicted for a request above which the version refuses it with 429.", []string{"model", "version"}, nil)
	sloBatchDesc = prometheus.NewDesc("ortserve_slo_batch_budget_seconds",
		"Longest predicted run of one batch the version forms under its SLO.", []string{"model", "version"}, nil)
	sloDecisionsDesc = prometheus.NewDesc("ortserve_slo_decisions_total",
		"Times the version's SLO controller changed its budgets.", []string{"model", "version"}, nil)
	// The check of the batches against batch 1, by class of batch shape: `rows` and `tokens`
	// are bands (runtime.ClassCheck), so the series are bounded.
	classLabels  = []string{"model", "version", "rows", "tokens"}
	realisedDesc = prometheus.NewDesc("ortserve_batch_realised_cost_per_text_seconds",
		"Measured run time per text of the version's batches of the class (rows: texts a batch; tokens: its longest text, padded, or its mean, packed), per text of the band's upper bound; rows 1 is batch 1.",
		classLabels, nil)
	predictedDesc = prometheus.NewDesc("ortserve_batch_predicted_cost_per_text_seconds",
		"What the cost model predicted per text for the version's batches of the class, per text of the band's upper bound.", classLabels, nil)
	vsBatch1Desc = prometheus.NewDesc("ortserve_batch_vs_batch1_ratio",
		"Measured run time of the version's batches of the class over what their texts took in batches of one row: above 1, batching the class loses.", classLabels, nil)
	allowedDesc = prometheus.NewDesc("ortserve_batch_allowed",
		"1 while the version's batcher forms batches of the class, 0 once it has stopped for measuring them dearer than batch 1.", classLabels, nil)
	fallbacksDesc = prometheus.NewDesc("ortserve_batch_fallbacks_total",
		"Times the version's batcher stopped forming a class of batch for measuring it dearer per text than batch 1.", []string{"model", "version"}, nil)
)

// schedCollector reads each version's scheduler state at scrape time.
type schedCollector struct {
	describe atomic.Pointer[func() []ModelInfo]
}

func (c *schedCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{costDesc, costObsDesc, sloTargetDesc, sloObservedDesc, sloBudgetDesc, sloBatchDesc, sloDecisionsDesc,
		realisedDesc, predictedDesc, vsBatch1Desc, allowedDesc, fallbacksDesc} {
		ch <- d
	}
}

func (c *schedCollector) Collect(ch chan<- prometheus.Metric) {
	f := c.describe.Load()
	if f == nil {
		return
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, mi := range (*f)() {
		for version, st := range mi.Scheduling {
			for _, p := range st.Cost.Curve {
				gauge(costDesc, p.Ms/1e3, mi.Name, version, strconv.Itoa(p.Rows), strconv.Itoa(p.Tokens))
			}
			gauge(costObsDesc, float64(st.Cost.Observations), mi.Name, version)
			for _, c := range st.Check.Classes {
				gauge(realisedDesc, c.RealisedMs/1e3, mi.Name, version, c.Rows, c.Tokens)
				gauge(predictedDesc, c.PredictedMs/1e3, mi.Name, version, c.Rows, c.Tokens)
				gauge(vsBatch1Desc, c.VsBatch1, mi.Name, version, c.Rows, c.Tokens)
				allowed := 0.0
				if c.Allowed {
					allowed = 1
				}
				gauge(allowedDesc, allowed, mi.Name, version, c.Rows, c.Tokens)
			}
			ch <- prometheus.MustNewConstMetric(fallbacksDesc, prometheus.CounterValue, float64(st.Check.Fallbacks), mi.Name, version)
			if s := st.SLO; s != nil {
				gauge(sloTargetDesc, s.TargetP95Ms/1e3, mi.Name, version)
				gauge(sloObservedDesc, s.ObservedP95Ms/1e3, mi.Name, version)
				gauge(sloBudgetDesc, s.BudgetMs/1e3, mi.Name, version)
				gauge(sloBatchDesc, s.BatchBudgetMs/1e3, mi.Name, version)
				ch <- prometheus.MustNewConstMetric(sloDecisionsDesc, prometheus.CounterValue, float64(s.Decisions), mi.Name, version)
			}
		}
	}
}

// SetProviders records the provider of every version of every model, forgetting versions
// that are gone (call it again after a reload).
func (m *Metrics) SetProviders(provider string, infos []ModelInfo) {
	m.provider.Reset()
	for _, mi := range infos {
		for _, v := range mi.Versions {
			m.provider.WithLabelValues(mi.Name, v, provider).Set(1)
		}
	}
}

// observe records one answered request.
func (m *Metrics) observe(route, model, version string, code int, st models.Stats, total time.Duration) {
	m.requests.WithLabelValues(model, version, route, strconv.Itoa(code)).Inc()
	if code != 200 || model == "" {
		return
	}
	m.tokenize.WithLabelValues(model, version).Observe(st.Tokenize.Seconds())
	m.queue.WithLabelValues(model, version).Observe(st.Queue.Seconds())
	m.inference.WithLabelValues(model, version).Observe(st.Inference.Seconds())
	m.postprocess.WithLabelValues(model, version).Observe(st.Finish.Seconds())
	m.total.WithLabelValues(model, version).Observe(total.Seconds())
	if st.Truncated > 0 {
		m.truncated.WithLabelValues(model, version).Add(float64(st.Truncated))
	}
	// Only versions with a cache count; both series start together, so a hit ratio has
	// a denominator from the first request.
	if st.CacheHits+st.CacheMisses > 0 {
		m.cacheHits.WithLabelValues(model, version).Add(float64(st.CacheHits))
		m.cacheMisses.WithLabelValues(model, version).Add(float64(st.CacheMisses))
	}
}

// Observer returns what a version's batcher reports to.
func (m *Metrics) Observer(model, version string) runtime.Observer {
	return batchObserver{
		refused: m.refused.MustCurryWith(prometheus.Labels{"model": model, "version": version}),
		size:    m.batchSize.WithLabelValues(model, version),
		tokens:  m.batchTokens.WithLabelValues(model, version),
		depth:   m.queueDepth.WithLabelValues(model, version),
		running: m.running.WithLabelValues(model, version),
		expired: m.expired.WithLabelValues(model, version),
	}
}

type batchObserver struct {
	refused        *prometheus.CounterVec
	size, tokens   prometheus.Observer
	depth, running prometheus.Gauge
	expired        prometheus.Counter
}

func (o batchObserver) Batch(rows, padded, _ int) {
	o.size.Observe(float64(rows))
	o.tokens.Observe(float64(padded))
}

func (o batchObserver) Queue(requests, running int) {
	o.depth.Set(float64(requests))
	o.running.Set(float64(running))
}

func (o batchObserver) Expired() { o.expired.Inc() }

func (o batchObserver) Refused(reason string) { o.refused.WithLabelValues(reason).Inc() }

// Control is for logs; the controller's state reaches the metrics at scrape time.
func (batchObserver) Control(runtime.SchedulerState, bool) {}

// Trace traces nothing: the metrics count batches in Batch; tracing wraps this observer.
func (batchObserver) Trace(runtime.Dispatch) func(error) { return nil }
