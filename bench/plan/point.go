// Package plan sizes a deployment from a `server bench` report and simulates it under
// traffic: replicas of the measured server behind a load balancer, scaled by a model of the
// Kubernetes Horizontal Pod Autoscaler on queue depth (requests in flight per pod) or on CPU
// (the busy fraction of a pod's servers). It reports what each would have done: replicas,
// requests over the SLO, replica-hours and their price.
//
// The simulation is a discrete-event one, seeded and deterministic. One replica is c servers
// with a FIFO queue, and service times drawn from a lognormal fitted to the report (Fit);
// the queueing is checked against the closed form of M/M/c (ErlangC). Size is the plan's
// arithmetic from the measured operating point alone, shared with `server bench --plan-helm`.
package plan

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ortserve/ortserve/bench"
)

// Point is one model version's measured operating point: what a single replica did under
// open-loop load, as a bench report holds it.
type Point struct {
	Version   string        // "sentiment/int8"
	SLO       time.Duration // the p95 target the steps were judged against
	TargetRPS float64       // the SLO's throughput target; 0: none
	// Best is the highest offered rate (requests/s) at which one replica met the SLO.
	Best  float64
	Price float64 // per replica-hour; 0: unknown
	// Steps are the measured load levels with answers, by offered rate.
	Steps []Sample
}

// Sample is one measured step of a Point.
type Sample struct {
	Offered  float64 // requests/s
	Achieved float64
	MeanMs   float64
	P50Ms    float64
	P95Ms    float64
	// ServerMs is the server's mean time on a request (x-total-time), QueueMs its part
	// queued (x-queue-time), OverheadMs the time outside the server (the client's lag and
	// the network); all 0 without timing headers.
	ServerMs   float64
	QueueMs    float64
	OverheadMs float64
	Headers    bool
	Pass       bool
}

// ErrNoPoint is a version with no rate that met the SLO: there is nothing to plan from.
var ErrNoPoint = errors.New("plan: no measured rate met the SLO")

// FromReport reads a version's operating point from a bench report. version "" picks the
// version with the highest rate at the SLO; slo 0 keeps the report's SLO, and any other
// judges the steps again against p95 ≤ slo (with the report's rule: at most 1% failed and
// at least 90% of the arrivals answered).
func FromReport(r *bench.Report, version string, slo time.Duration) (Point, error) {
	if r == nil || len(r.Runs) == 0 || len(r.Runs[0].Versions) == 0 {
		return Point{}, errors.New("plan: the report has no measured versions")
	}
	if r.Load.Mode == "closed" {
		return Point{}, errors.New("plan: the report is closed-loop (--concurrency): plan needs rates, so rerun server bench with --slo or --rate")
	}
	if slo == 0 && (r.SLO == nil || r.SLO.P95 <= 0) {
		return Point{}, errors.New("plan: the report has no SLO: give one with --slo p95=100ms")
	}
	var points []Point
	var names []string
	for _, vr := range r.Runs[0].Versions {
		p := point(r, vr, slo)
		points = append(points, p)
		names = append(names, p.Version)
	}
	if version != "" {
		i := slices.IndexFunc(points, func(p Point) bool { return p.Version == version || shortName(p.Version) == version })
		if i < 0 {
			return Point{}, fmt.Errorf("plan: the report has no version %q: it has %v", version, names)
		}
		return points[i], checkPoint(points[i])
	}
	best := slices.MaxFunc(points, func(a, b Point) int { return cmp.Compare(a.Best, b.Best) })
	return best, checkPoint(best)
}

func checkPoint(p Point) error {
	if p.Best <= 0 {
		return fmt.Errorf("%w: %s met p95 ≤ %v at no measured rate; rerun server bench with a looser --slo or a lower --search-start", ErrNoPoint, p.Version, p.SLO)
	}
	return nil
}

// shortName is the version part of "model/version".
func shortName(name string) string {
	return name[strings.LastIndex(name, "/")+1:]
}

func point(r *bench.Report, vr bench.VersionResult, slo time.Duration) Point {
	p := Point{Version: vr.Name, Price: r.Price}
	if p.Version == "" {
		p.Version = vr.Model + "/" + vr.Version
	}
	if r.SLO != nil {
		p.SLO, p.TargetRPS = r.SLO.P95, r.SLO.RPS
	}
	rejudge := slo > 0 && slo != p.SLO
	if slo > 0 {
		p.SLO = slo
	}
	sloMs := float64(p.SLO) / float64(time.Millisecond)
	for _, st := range vr.Steps {
		if st.Offered <= 0 || st.OK == 0 {
			continue
		}
		s := Sample{
			Offered: st.Offered, Achieved: st.Achieved,
			MeanMs: st.Latency.Mean, P50Ms: st.Latency.P50, P95Ms: st.Latency.P95,
			Headers: st.Phases.Headers,
			Pass:    st.Pass != nil && *st.Pass,
		}
		if st.Phases.Headers {
			s.ServerMs, s.QueueMs = st.Phases.Server, st.Phases.Queue
			s.OverheadMs = st.Phases.Client + st.Phases.Network
		}
		if rejudge {
			bad := st.Rejected + st.Errors + st.Timeouts
			arrived := float64(st.Sent) / max(st.DurationS, 1e-9)
			s.Pass = st.Latency.P95 <= sloMs && float64(bad) <= 0.01*float64(st.Sent) && st.Achieved >= 0.9*arrived
		}
		p.Steps = append(p.Steps, s)
	}
	slices.SortStableFunc(p.Steps, func(a, b Sample) int { return cmp.Compare(a.Offered, b.Offered) })
	for _, s := range p.Steps {
		if s.Pass {
			p.Best = max(p.Best, s.Offered)
		}
	}
	return p
}

// at is the step measured at exactly rate, the best one when called with Best.
func (p Point) at(rate float64) (Sample, bool) {
	for _, s := range p.Steps {
		if s.Offered == rate {
			return s, true
		}
	}
	return Sample{}, false
}

// interpolate is f of the measured steps at rate, linear between the passing steps at or
// under Best and held flat beyond them: the curve a replica runs on below its SLO point.
func (p Point) interpolate(rate float64, f func(Sample) float64) float64 {
	var xs, ys []float64
	for _, s := range p.Steps {
		if s.Pass && s.Offered <= p.Best {
			xs, ys = append(xs, s.Offered), append(ys, f(s))
		}
	}
	switch {
	case len(xs) == 0:
		return 0
	case rate <= xs[0]:
		return ys[0]
	case rate >= xs[len(xs)-1]:
		return ys[len(ys)-1]
	}
	i := 1
	for xs[i] < rate {
		i++
	}
	w := (rate - xs[i-1]) / (xs[i] - xs[i-1])
	return ys[i-1] + w*(ys[i]-ys[i-1])
}
