package plan

import "math"

// The autoscaler follows Kubernetes' HPA controller (pkg/controller/podautoscaler): the
// replica calculator's rule for one sync, then the behaviour's stabilization windows and
// rate limits, then min and max.

// recommend is the replica calculator: the replicas for current ones whose started pods
// report metrics and whose missing ones (still starting) report nothing. The ratio is the
// metric's mean over the reporting pods to the target; within the tolerance nothing
// changes. Missing pods damp the change: on the way up they count as idle, on the way
// down as at the target, or (CPU, where a not-ready pod is left out) not at all; if that
// brings the ratio within the tolerance or flips its direction, nothing changes.
func recommend(current int, metrics []float64, missing int, target, tolerance float64, metric Metric) int {
	if len(metrics) == 0 || target <= 0 {
		return current
	}
	sum := 0.0
	for _, v := range metrics {
		sum += v
	}
	ratio := sum / (float64(len(metrics)) * target)
	if missing <= 0 || (metric == CPU && ratio < 1) {
		if math.Abs(ratio-1) <= tolerance {
			return current
		}
		return int(math.Ceil(ratio * float64(len(metrics))))
	}
	n := float64(len(metrics) + missing)
	newRatio := ratio
	switch {
	case ratio > 1:
		newRatio = sum / (n * target)
	case ratio < 1:
		newRatio = (sum + float64(missing)*target) / (n * target)
	}
	if math.Abs(newRatio-1) <= tolerance || (ratio < 1) != (newRatio < 1) {
		return current
	}
	want := int(math.Ceil(newRatio * n))
	if (newRatio < 1 && want > current) || (newRatio > 1 && want < current) {
		return current
	}
	return want
}

// controller is one HPA's state across syncs: its recent recommendations and scalings.
type controller struct {
	a        Autoscaler
	up, down float64 // stabilization windows, seconds of simulated time
	upPeriod float64 // rate limits' periods
	dnPeriod float64
	history  []recommendation
	events   []recommendation // replicas added (> 0) or removed (< 0) at t
}

type recommendation struct {
	t        float64
	replicas int
}

// newController scales the stabilization windows and the scale-down period by the time
// compression k: they follow the traffic's time scale (Sim).
func newController(a Autoscaler, k float64) *controller {
	return &controller{a: a, up: a.UpWindow.Seconds() / k, down: a.DownWindow.Seconds() / k,
		upPeriod: a.UpPeriod.Seconds(), dnPeriod: a.DownPeriod.Seconds() / k}
}

// decide is one sync at t: the replicas to run, from current ones and the reporting pods'
// metrics.
func (c *controller) decide(t float64, current int, metrics []float64, missing int, p Policy) int {
	raw := recommend(current, metrics, missing, p.Target, c.a.Tolerance, p.Metric)

	// Stabilization: scale up to the least recommended within the up window, down to the
	// most recommended within the down window; the current recommendation counts.
	upRec, downRec := raw, raw
	keep := c.history[:0]
	for _, r := range c.history {
		if r.t > t-c.up {
			upRec = min(upRec, r.replicas)
		}
		if r.t > t-c.down {
			downRec = max(downRec, r.replicas)
		}
		if r.t > t-max(c.up, c.down) {
			keep = append(keep, r)
		}
	}
	c.history = append(keep, recommendation{t, raw})
	want := current
	want = max(want, upRec)
	want = min(want, downRec)

	// Rate limits: from the replicas at the start of each policy's period (now, less what
	// was added, plus what was removed within it), the larger scale-up of the two up
	// policies, and the scale-down of the down one.
	start := func(period float64) int {
		n := current
		for _, e := range c.events {
			if e.t > t-period {
				n -= e.replicas
			}
		}
		return n
	}
	if want > current {
		from := start(c.upPeriod)
		limit := max(from+c.a.UpPods, int(math.Ceil(float64(from)*(1+c.a.UpPercent/100))), current)
		want = min(want, limit)
	}
	if want < current {
		limit := min(int(float64(start(c.dnPeriod))*(1-c.a.DownPercent/100)), current)
		want = max(want, limit)
	}
	want = min(max(want, c.a.Min), c.a.Max)
	if want != current {
		keep := c.events[:0]
		for _, e := range c.events {
			if e.t > t-max(c.upPeriod, c.dnPeriod) {
				keep = append(keep, e)
			}
		}
		c.events = append(keep, recommendation{t, want - current})
	}
	return want
}
