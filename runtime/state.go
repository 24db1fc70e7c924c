package runtime

import "math"

// SchedulerState is what a version's batcher has learned and decided, for /info.
type SchedulerState struct {
	Sessions int    `json:"sessions"`
	Policy   string `json:"policy"` // "work-conserving" or "window 5ms"
	MaxBatch int    `json:"max_batch"`
	Order    Order  `json:"order"` // the order queued rows are served in
	// Packed is true when batches run packed (tokenize.PackRows); the curve is then the cost
	// of rows texts of tokens each, end to end in the rows the batcher would lay them out in.
	Packed bool `json:"packed"`
	// Cost is the learned cost model: its observations, coefficients (milliseconds; c in
	// units of 64 tokens) and the curve it predicts.
	Cost struct {
		Observations int         `json:"observations"`
		Coefficients [4]float64  `json:"coefficients_ms"` // k0 + k1·r + k2·r·c + k3·r·c²
		Curve        []CostPoint `json:"curve"`
		Discount     float64     `json:"discount"` // measured / predicted time of served batches
	} `json:"cost"`
	SLO *ControlState `json:"slo,omitempty"`
}

// State reports what the batcher has learned and decided. It is safe to call at any time.
func (b *Batcher) State() SchedulerState {
	var s SchedulerState
	s.Sessions = b.pool.Size()
	s.Policy = "work-conserving"
	if b.cfg.MaxQueueDelay > 0 {
		s.Policy = "window " + b.cfg.MaxQueueDelay.String()
	}
	s.MaxBatch = b.cfg.MaxBatchSize
	s.Order = b.cfg.Order
	s.Packed = b.pack
	s.Cost.Observations = b.cost.Observations()
	s.Cost.Coefficients = b.cost.Coefficients()
	for i, k := range s.Cost.Coefficients {
		s.Cost.Coefficients[i] = math.Round(k*1e6) / 1e6
	}
	s.Cost.Curve = b.cost.Curve(curveRows(b.cfg.MaxBatchSize), CurveTokens, b.pack)
	s.Cost.Discount = round3(math.Float64frombits(b.gauges.discount.Load()))
	if b.ctl != nil {
		st := b.ctl.snapshot()
		s.SLO = &st
	}
	return s
}
