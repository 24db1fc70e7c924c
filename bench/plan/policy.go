package plan

import "time"

// Policy is what the autoscaler scales on.
type Policy struct {
	Name   string  `json:"name"`   // "queue", "cpu" or "fixed"
	Metric Metric  `json:"metric"` // the per-pod metric
	Target float64 `json:"target"` // its target average per pod
	// Window is how far back the metric the HPA reads is averaged, in whole sync periods
	// (0: one): the metrics pipeline's own lag. The chart's prometheus-adapter rules average
	// in flight over 1 minute; metrics-server reports CPU over about 15 s.
	Window time.Duration `json:"-"`
}

// Metric is a per-pod autoscaling metric.
type Metric string

// The metrics: requests in the pod (served and queued, ortserve_requests_in_flight), the busy
// fraction of its servers (CPU utilization), or none (a fixed number of replicas).
const (
	InFlight Metric = "inflight"
	CPU      Metric = "cpu"
	Fixed    Metric = "fixed"
)

// Autoscaler holds the Horizontal Pod Autoscaler's settings (autoscaling/v2); see
// DefaultAutoscaler.
type Autoscaler struct {
	Min, Max  int
	Sync      time.Duration // --horizontal-pod-autoscaler-sync-period
	Tolerance float64       // no change while |metric/target − 1| is within it
	// UpWindow and DownWindow are the stabilization windows: a scale-up goes to the least,
	// a scale-down to the most replicas recommended within them.
	UpWindow, DownWindow time.Duration
	// The behaviour's rate limits: a scale-up adds at most the larger of UpPods and
	// UpPercent of the replicas per UpPeriod; a scale-down removes at most DownPercent per
	// DownPeriod.
	UpPods      int
	UpPercent   float64
	UpPeriod    time.Duration
	DownPercent float64
	DownPeriod  time.Duration
	// Startup is from a replica's creation to its first request: scheduling, image, model
	// load, readiness probe.
	Startup time.Duration
}

// DefaultAutoscaler is the HPA the Helm chart in deploy/ renders: a 15 s sync and 10%
// tolerance (Kubernetes' defaults); scale up at once by 4 pods or 100% per 15 s, whichever
// is more (the defaults); scale down after a 5-minute window by at most 50% per minute (the
// chart's, gentler than the default 100% per 15 s). Start-up 30 s.
func DefaultAutoscaler() Autoscaler {
	return Autoscaler{
		Min: 1, Max: 100, Sync: 15 * time.Second, Tolerance: 0.1,
		DownWindow: 5 * time.Minute,
		UpPods:     4, UpPercent: 100, UpPeriod: 15 * time.Second,
		DownPercent: 50, DownPeriod: time.Minute,
		Startup: 30 * time.Second,
	}
}
