package runtime

import (
	"math"
	"sync"
)

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
	// Check is what the batcher has measured of its batches against batch 1, by class of
	// batch shape, and which classes it has stopped forming for losing.
	Check BatchCheck `json:"batch_check"`
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
	s.Check = b.check.state()
	if b.ctl != nil {
		st := b.ctl.snapshot()
		s.SLO = &st
	}
	return s
}

// BatchCheck is what a batcher has measured of its batches against batch 1, for /info.
type BatchCheck struct {
	// Fallbacks counts the times a class was stopped for measuring dearer per text than
	// batch 1.
	Fallbacks int `json:"fallbacks"`
	// Classes are the classes measured, by length band, then rows.
	Classes []ClassCheck `json:"classes"`
}

// ClassCheck is one class of batch shape. Its costs are in milliseconds per text of
// RefTokens tokens, each text weighed by the cost model's batch-of-one time of its length
// over that of RefTokens, so that batches of mixed lengths compare with batch 1 (regret.go).
type ClassCheck struct {
	Rows         string  `json:"rows"`   // texts in a batch: "1", "2", "3-4", "5-8", "9-16" or "17+"
	Tokens       string  `json:"tokens"` // padded: the longest text; packed: the mean
	RefTokens    int     `json:"ref_tokens"`
	Observations int     `json:"observations"`
	PredictedMs  float64 `json:"predicted_ms_per_text"` // the cost model's, at dispatch
	RealisedMs   float64 `json:"realised_ms_per_text"`
	// Batch1Ms is what the class's texts would have taken one by one, from what batches of
	// one row took.
	Batch1Ms float64 `json:"batch1_ms_per_text"`
	// VsBatch1 is the class's measured time over its texts' one by one (faded); 0 until a
	// batch of one row has run.
	VsBatch1 float64 `json:"vs_batch1"`
	// Allowed is whether the planner forms batches of the class, tries aside.
	Allowed bool `json:"allowed"`
}

// checkView is the loop's regret as the loop last published it, for State.
type checkView struct {
	mu sync.Mutex
	g  regret
}

func (v *checkView) publish(g *regret) {
	v.mu.Lock()
	v.g = *g
	v.mu.Unlock()
}

func (v *checkView) state() BatchCheck {
	v.mu.Lock()
	g := v.g
	v.mu.Unlock()
	out := BatchCheck{Fallbacks: g.fallbacks}
	for b := range nLenBands {
		standing := g.standing(b)
		for r := range nRowBands {
			s := g.stats[r][b]
			if s.realised.n == 0 {
				continue
			}
			out.Classes = append(out.Classes, ClassCheck{
				Rows: bandName(rowBandTop[:], r), Tokens: bandName(lenBandTop[:], b), RefTokens: lenBandRef[b],
				Observations: s.realised.n,
				PredictedMs:  round3(s.predicted.v * 1e3), RealisedMs: round3(s.realised.v * 1e3),
				Batch1Ms: round3(s.batch1.v * 1e3), VsBatch1: round3(s.ratio.v),
				Allowed: standing&(1<<r) == 0,
			})
		}
	}
	return out
}
