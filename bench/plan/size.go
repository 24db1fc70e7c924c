package plan

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// SizeOptions are the plan's margins.
type SizeOptions struct {
	// Headroom divides the best rate at the SLO into the rate a replica is planned for:
	// room for the autoscaler's delay and the measurement's noise. The bench report's plan
	// uses 1.3.
	Headroom float64
	// Room is maxReplicas as a multiple of the replicas at the peak: how far past the
	// expected peak the autoscaler may go.
	Room float64
	// Floor is the least minReplicas: 2, so that one pod's restart is not an outage.
	Floor int
}

// DefaultSizeOptions are the margins `server bench --plan-helm` uses: 1.3 headroom (as the
// report's plan), room for a 3× burst over the target, at least 2 replicas.
func DefaultSizeOptions() SizeOptions { return SizeOptions{Headroom: 1.3, Room: 3, Floor: 2} }

// Sizing is a deployment sized from a measured operating point.
type Sizing struct {
	Version  string  `json:"version"`
	Best     float64 `json:"best_rps"` // one replica's rate at the SLO, measured
	SLOMs    float64 `json:"slo_p95_ms"`
	Headroom float64 `json:"headroom"`
	Room     float64 `json:"room"`
	Floor    int     `json:"floor"`
	// PerPod is the rate each replica is planned for: Best / Headroom.
	PerPod float64 `json:"per_pod_rps"`
	Peak   float64 `json:"peak_rps"` // the rate sized for
	// PeakIs names Peak in the Helm values' comments: "peak" (of a trace), or "target"
	// (the SLO's rps).
	PeakIs string  `json:"-"`
	Trough float64 `json:"trough_rps"` // the lowest rate expected; 0: unknown
	// Replicas is ceil(Peak / PerPod): the bench report's plan for its target rate.
	Replicas    int `json:"replicas"`
	MinReplicas int `json:"min_replicas"` // max(Floor, ceil(Trough / PerPod))
	MaxReplicas int `json:"max_replicas"` // ceil(Room × Peak / PerPod)
	// TargetInFlight is Little's Law at PerPod: the requests a replica holds on average at
	// that rate, PerPod × the mean time a request spends in the server there (InServerMs,
	// interpolated between steps: the server's x-total-time, or without timing headers the
	// whole latency, which counts the network too). It is the HPA's target for
	// ortserve_requests_in_flight.
	TargetInFlight float64 `json:"target_in_flight"`
	InServerMs     float64 `json:"in_server_ms"`
	ServerMeasured bool    `json:"server_measured"`
	// TargetQueue is the same for the requests waiting (ortserve_queue_requests): PerPod ×
	// the server's measured queue time there. Without timing headers there is no queue
	// time; it is then half of TargetInFlight, a guess, and QueueMeasured is false.
	TargetQueue   float64 `json:"target_queue"`
	QueueMs       float64 `json:"queue_ms"`
	QueueMeasured bool    `json:"queue_measured"`
}

// Size sizes a deployment of p's version for traffic from trough to peak requests/s: the
// plan's arithmetic, from the measured numbers alone. Both `server plan` and
// `server bench --plan-helm` use it.
func Size(p Point, peak, trough float64, o SizeOptions) (Sizing, error) {
	if err := checkPoint(p); err != nil {
		return Sizing{}, err
	}
	if !(peak > 0) || math.IsInf(peak, 0) {
		return Sizing{}, fmt.Errorf("plan: peak rate %v: want a positive number of requests/s", peak)
	}
	if !(o.Headroom >= 1) || !(o.Room >= 1) || o.Floor < 1 {
		return Sizing{}, fmt.Errorf("plan: headroom %v, room %v, floor %d: want headroom and room of 1 or more and a floor of 1 or more", o.Headroom, o.Room, o.Floor)
	}
	s := Sizing{
		Version: p.Version, Best: p.Best, SLOMs: float64(p.SLO.Microseconds()) / 1e3,
		Headroom: o.Headroom, Room: o.Room, Floor: o.Floor,
		PerPod: p.Best / o.Headroom, Peak: peak, PeakIs: "peak", Trough: max(trough, 0),
	}
	// ceil(peak × headroom / best), written as the bench report's plan writes it so that the
	// two give the same count to the last bit.
	s.Replicas = max(1, int(math.Ceil(peak*o.Headroom/p.Best)))
	s.MinReplicas = max(o.Floor, int(math.Ceil(s.Trough*o.Headroom/p.Best)))
	s.MaxReplicas = max(int(math.Ceil(o.Room*peak*o.Headroom/p.Best)), s.Replicas, s.MinReplicas)
	// Timing headers on every step used, or the server's time is not known throughout.
	headers := p.interpolate(s.PerPod, func(x Sample) float64 { return b2f(x.Headers) }) == 1
	s.ServerMeasured, s.QueueMeasured = headers, headers
	s.InServerMs = p.interpolate(s.PerPod, func(x Sample) float64 { return x.MeanMs })
	if headers {
		s.InServerMs = p.interpolate(s.PerPod, func(x Sample) float64 { return x.ServerMs })
	}
	s.TargetInFlight = round2(s.PerPod * s.InServerMs / 1e3)
	if s.QueueMeasured {
		s.QueueMs = p.interpolate(s.PerPod, func(x Sample) float64 { return x.QueueMs })
		s.TargetQueue = round2(s.PerPod * s.QueueMs / 1e3)
	} else {
		s.TargetQueue = round2(s.TargetInFlight / 2)
	}
	return s, nil
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// round2 rounds to two decimals, never to zero: an HPA target of 0 scales without end.
func round2(v float64) float64 { return max(math.Round(v*100)/100, 0.01) }

// WriteHelm writes the sizing as values for the Helm chart in deploy/, a comment on every
// value saying where it came from.
func WriteHelm(w io.Writer, s Sizing) error {
	num := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	ms := func(v float64) string { return msText(v) }
	rps := func(v float64) string { return shortNum(v) + " rps" }
	queueWhy := fmt.Sprintf("%s per pod × %s mean queue time measured there (x-queue-time)", rps(s.PerPod), ms(s.QueueMs))
	if !s.QueueMeasured {
		queueWhy = "half the in-flight target, a guess: the server sent no timing headers, so no queue time was measured"
	}
	inServer := ms(s.InServerMs) + " mean time in the server measured there (x-total-time)"
	if !s.ServerMeasured {
		inServer = ms(s.InServerMs) + " mean latency measured there (no timing headers: the network's share counts too)"
	}
	minWhy := fmt.Sprintf("at least %d, so that one pod's restart is not an outage", s.Floor)
	if t := int(math.Ceil(s.Trough * s.Headroom / s.Best)); s.Trough > 0 && t > s.Floor {
		minWhy = fmt.Sprintf("ceil(%s trough × %s headroom / %s per replica at the SLO)", rps(s.Trough), num(s.Headroom), rps(s.Best))
	}
	lines := [][2]string{
		{"replicaCount: " + strconv.Itoa(s.Replicas),
			fmt.Sprintf("ceil(%s %s × %s headroom / %s per replica at p95 ≤ %s, measured)", rps(s.Peak), s.PeakIs, num(s.Headroom), rps(s.Best), ms(s.SLOMs))},
		{"autoscaling:", ""},
		{"  enabled: true", ""},
		{"  minReplicas: " + strconv.Itoa(s.MinReplicas), minWhy},
		{"  maxReplicas: " + strconv.Itoa(s.MaxReplicas),
			fmt.Sprintf("room for %s× the %s: ceil(%s × %s × %s / %s)", num(s.Room), s.PeakIs, num(s.Room), rps(s.Peak), num(s.Headroom), rps(s.Best))},
		{"  metric: inflight", "scale on ortserve_requests_in_flight per pod (queue depth), not CPU"},
		{"  targetInFlightPerPod: " + num(s.TargetInFlight),
			fmt.Sprintf("Little's Law: %s per pod (%s at the SLO / %s) × %s", rps(s.PerPod), rps(s.Best), num(s.Headroom), inServer)},
		{"  targetQueuePerPod: " + num(s.TargetQueue), queueWhy},
	}
	width := 0
	for _, l := range lines {
		width = max(width, len(l[0]))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Helm values for deploy/ from %s: p95 ≤ %s up to %s per replica (server bench)\n", s.Version, ms(s.SLOMs), rps(s.Best))
	for _, l := range lines {
		if l[1] == "" {
			b.WriteString(l[0] + "\n")
			continue
		}
		fmt.Fprintf(&b, "%-*s  # %s\n", width, l[0], l[1])
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// msText prints milliseconds to three significant digits: "0.42 ms", "38.2 ms", "412 ms".
func msText(v float64) string { return shortNum(v) + " ms" }

// shortNum prints v to three significant digits, without an exponent or trailing zeros.
func shortNum(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "–"
	}
	if v == 0 {
		return "0"
	}
	d := max(0, min(6, 2-int(math.Floor(math.Log10(math.Abs(v))))))
	s := strconv.FormatFloat(v, 'f', d, 64)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}
