package plan

// Outcome is what one simulated policy did.
type Outcome struct {
	Policy Policy `json:"policy"`
	// MetricWindowS is the policy's metric window in seconds.
	MetricWindowS float64 `json:"metric_window_s"`
	Requests      int64   `json:"requests"` // arrived after the warm-up
	Answered      int64   `json:"answered"` // served: every request is answered or rejected
	Rejected      int64   `json:"rejected"` // answered 429: a replica at MaxInFlight
	// OverSLO counts the requests slower than the SLO's latency, or rejected.
	OverSLO int64 `json:"over_slo"`
	// Windows are the minutes of simulated time with arrivals, Breached those whose p95
	// (rejections counted as over) was over the SLO.
	Windows  int `json:"windows"`
	Breached int `json:"breached"`
	// LongestBreach is the longest run of breached minutes: how long users waited for the
	// autoscaler to catch up.
	LongestBreach int      `json:"longest_breach"`
	Latency       Quantile `json:"latency_ms"` // of answered requests
	MeanWait      float64  `json:"mean_wait_ms"`
	// Replicas is the HPA's count (started and starting) over time.
	Replicas     Replicas `json:"replicas"`
	ReplicaHours float64  `json:"replica_hours"` // billed: started, starting and draining, in trace time
	Cost         float64  `json:"cost,omitempty"`
	Scalings     int      `json:"scalings"` // changes of the replica count
	Timeline     []Tick   `json:"timeline"`
}

// Quantile is a latency distribution in milliseconds.
type Quantile struct {
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P95  float64 `json:"p95"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
}

// Replicas is a replica count's range and time-weighted mean.
type Replicas struct {
	Min  int     `json:"min"`
	Mean float64 `json:"mean"`
	Max  int     `json:"max"`
}

// Tick is one window of the timeline.
type Tick struct {
	T        float64 `json:"t_s"` // the window's start in trace time
	Offered  float64 `json:"offered_rps"`
	Replicas float64 `json:"replicas"` // mean over the window's syncs
	Ready    float64 `json:"ready"`
	Requests int64   `json:"requests"`
	OverSLO  int64   `json:"over_slo"`
	Rejected int64   `json:"rejected"`
}

// OverFraction is the fraction of requests over the SLO (rejections included).
func (o *Outcome) OverFraction() float64 {
	if o.Requests == 0 {
		return 0
	}
	return float64(o.OverSLO) / float64(o.Requests)
}
