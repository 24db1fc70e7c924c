package plan

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Sim is one simulated deployment: traffic, replicas of Model behind a load balancer, and
// an autoscaler with one policy.
//
// Time compression: a long trace is run Compress times faster (a day at 24× in an hour),
// with the same rates, so that the requests simulated stay in the millions. The server's
// own time scales are not compressed (service times, the sync period, the pod start-up
// delay, the scale-up rate limit), so the traffic changes Compress× faster relative to them
// than in the trace: a harder test of the autoscaler than the real day, and a pessimistic
// count of requests over the SLO. The stabilization windows and the scale-down rate limit,
// which follow the traffic's own time scale, are compressed with the trace; replica-hours
// are counted in trace time.
type Sim struct {
	Trace    *Trace
	Compress float64 // ≥ 1; 0 means 1
	Model    Model
	Policy   Policy
	Scaler   Autoscaler
	// Initial is the replicas running, ready, at the start; it is kept within Min and Max.
	Initial int
	SLO     time.Duration
	Random  bool    // balance at random (kube-proxy's iptables mode), not round robin
	Seed    uint64  // arrivals and service times; the same seed gives the same run
	Warmup  float64 // seconds of simulated time whose arrivals are not counted
	Window  time.Duration
}

type podState uint8

const (
	starting podState = iota
	ready
	draining
	gone
)

// pod is one replica in the simulation.
type pod struct {
	state   podState
	readyAt float64
	busy    int       // servers serving
	n       int       // requests in the pod: served and queued
	queue   []float64 // arrival times of the queued requests, from head
	head    int
	// last is when the integrals were last brought up to date; accN and accBusy integrate
	// n and busy since the last sync (or since the pod became ready).
	last, since   float64
	accN, accBusy float64
	// recent are the integrals of the last syncs, for a metric averaged over more than one.
	recent []interval
}

// interval is one sync period of a pod's metric: its integral and its length.
type interval struct{ acc, dt float64 }

func (p *pod) touch(t float64) {
	dt := t - p.last
	p.accN += float64(p.n) * dt
	p.accBusy += float64(p.busy) * dt
	p.last = t
}

func (p *pod) push(a float64) { p.queue = append(p.queue, a) }

func (p *pod) pop() (float64, bool) {
	if p.head == len(p.queue) {
		return 0, false
	}
	a := p.queue[p.head]
	p.head++
	if p.head == len(p.queue) {
		p.queue, p.head = p.queue[:0], 0
	} else if p.head > 1024 && p.head > len(p.queue)/2 {
		p.queue = append(p.queue[:0], p.queue[p.head:]...)
		p.head = 0
	}
	return a, true
}

// completion is a request finishing service.
type completion struct {
	done, arrived float64
	pod           int32
}

// events is a binary min-heap of completions by time; written out for speed, as
// container/heap would box every element.
type events []completion

func (h *events) push(c completion) {
	*h = append(*h, c)
	s := *h
	i := len(s) - 1
	for i > 0 {
		p := (i - 1) / 2
		if s[p].done <= s[i].done {
			break
		}
		s[p], s[i] = s[i], s[p]
		i = p
	}
}

func (h *events) pop() completion {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s = s[:last]
	i := 0
	for {
		l := 2*i + 1
		if l >= len(s) {
			break
		}
		m := l
		if r := l + 1; r < len(s) && s[r].done < s[l].done {
			m = r
		}
		if s[i].done <= s[m].done {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}

// arrivals draws a non-homogeneous Poisson process from the trace by thinning, a segment
// at a time: candidates at the segment's highest rate, each kept with probability
// rate/highest. Restarting at each segment's end is exact, the process being memoryless.
type arrivals struct {
	tr  *Trace
	k   float64 // compression
	seg int
	t   float64 // simulated seconds
	rng *rand.Rand
}

func (a *arrivals) next() float64 {
	for a.seg < len(a.tr.T)-1 {
		t0, t1 := a.tr.T[a.seg]/a.k, a.tr.T[a.seg+1]/a.k
		r0, r1 := a.tr.RPS[a.seg], a.tr.RPS[a.seg+1]
		hi := max(r0, r1)
		if t1 <= t0 || hi <= 0 {
			a.seg++
			a.t = t1
			continue
		}
		a.t = max(a.t, t0) + a.rng.ExpFloat64()/hi
		if a.t >= t1 {
			a.seg++
			a.t = t1
			continue
		}
		rate := r0 + (r1-r0)*(a.t-t0)/(t1-t0)
		if a.rng.Float64()*hi < rate {
			return a.t
		}
	}
	return math.Inf(1)
}

// window accumulates one window of the timeline.
type window struct {
	arrived, n, over, rejected int64
	syncs                      int
	replicas, ready            float64
}

// Run simulates the deployment over the trace.
func (s Sim) Run(ctx context.Context) (*Outcome, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	k := max(s.Compress, 1)
	end := s.Trace.T[len(s.Trace.T)-1] / k
	win := s.Window.Seconds()
	if win <= 0 {
		win = 60
	}
	sync := s.Scaler.Sync.Seconds()
	avgOver := 1 // sync periods the metric is averaged over
	if s.Policy.Window > s.Scaler.Sync && s.Scaler.Sync > 0 {
		avgOver = int(math.Round(float64(s.Policy.Window) / float64(s.Scaler.Sync)))
	}
	startup := s.Scaler.Startup.Seconds()
	slo := s.SLO.Seconds()
	m := s.Model
	c := m.Servers

	arrRNG := rand.New(rand.NewPCG(s.Seed, 0x9e3779b97f4a7c15))
	svcRNG := rand.New(rand.NewPCG(s.Seed, 0xbf58476d1ce4e5b9))
	lbRNG := rand.New(rand.NewPCG(s.Seed, 0x94d049bb133111eb))
	arr := &arrivals{tr: s.Trace, k: k, rng: arrRNG}

	hist := hdrhistogram.New(1, int64(time.Hour/time.Microsecond), 2)
	out := &Outcome{Policy: s.Policy, MetricWindowS: float64(avgOver) * sync, Replicas: Replicas{Min: math.MaxInt}}
	wins := make([]window, int(math.Ceil(end/win))+1)
	winOf := func(t float64) int { return min(int(t/win), len(wins)-1) }

	var (
		pods     []pod
		lb       []int32 // the ready pods, in creation order
		rr       int
		ev       events
		billed   int // pods that cost: starting, ready, draining
		billedAt float64
		podSecs  float64
		spec     int // the HPA's replica count: starting and ready
		specAt   float64
		specSecs float64
		waitSum  float64
		waited   int64
		hpa      = newController(s.Scaler, k)
	)
	bill := func(t float64, d int) {
		t = min(t, end)
		podSecs += float64(billed) * (t - billedAt)
		billed, billedAt = billed+d, t
	}
	setSpec := func(t float64, n int) {
		t = min(t, end)
		specSecs += float64(spec) * (t - specAt)
		spec, specAt = n, t
		out.Replicas.Min = min(out.Replicas.Min, n)
		out.Replicas.Max = max(out.Replicas.Max, n)
	}
	rebuildLB := func() {
		lb = lb[:0]
		for i := range pods {
			if pods[i].state == ready {
				lb = append(lb, int32(i))
			}
		}
	}
	addPods := func(t float64, n int, readyNow bool) {
		for range n {
			p := pod{state: starting, readyAt: t + startup, last: t, since: t}
			if readyNow {
				p.state, p.readyAt = ready, t
			}
			pods = append(pods, p)
		}
		bill(t, n)
	}
	// removePods takes n replicas out, as a ReplicaSet picks them: those still starting
	// first, then the newest. A started one leaves the balancer at once and drains.
	removePods := func(t float64, n int) {
		for pass := 0; pass < 2 && n > 0; pass++ {
			for i := len(pods) - 1; i >= 0 && n > 0; i-- {
				p := &pods[i]
				switch {
				case pass == 0 && p.state == starting:
					p.state = gone
					bill(t, -1)
					n--
				case pass == 1 && p.state == ready:
					p.touch(t)
					p.state = draining
					if p.n == 0 {
						p.state = gone
						bill(t, -1)
					}
					n--
				}
			}
		}
		rebuildLB()
	}

	initial := min(max(s.Initial, s.Scaler.Min), s.Scaler.Max)
	addPods(0, initial, true)
	setSpec(0, initial)
	rebuildLB()

	nextArr := arr.next()
	nextSync := sync
	if s.Policy.Metric == Fixed {
		nextSync = math.Inf(1)
	}
	var pendingReady []int32 // starting pods by ready time (the start-up delay is constant)
	steps := 0
	for {
		if steps++; steps&(1<<20-1) == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		nextDone := math.Inf(1)
		if len(ev) > 0 {
			nextDone = ev[0].done
		}
		nextReady := math.Inf(1)
		for len(pendingReady) > 0 && pods[pendingReady[0]].state != starting {
			pendingReady = pendingReady[1:] // removed before it started
		}
		if len(pendingReady) > 0 {
			nextReady = pods[pendingReady[0]].readyAt
		}
		control := min(nextSync, nextReady)
		if control > end {
			control = math.Inf(1)
		}
		t := min(nextArr, nextDone, control)
		if math.IsInf(t, 1) {
			break
		}
		switch {
		case control == t && nextReady == t:
			i := pendingReady[0]
			pendingReady = pendingReady[1:]
			p := &pods[i]
			p.state, p.last, p.since = ready, t, t
			rebuildLB()

		case control == t:
			nextSync += sync
			metrics := make([]float64, 0, len(lb))
			for _, i := range lb {
				p := &pods[i]
				p.touch(t)
				if dt := t - p.since; dt > 0 {
					acc := p.accN
					if s.Policy.Metric == CPU {
						acc = p.accBusy / float64(c)
					}
					p.recent = append(p.recent, interval{acc, dt})
					if len(p.recent) > avgOver {
						p.recent = p.recent[1:]
					}
					var sum, span float64
					for _, iv := range p.recent {
						sum, span = sum+iv.acc, span+iv.dt
					}
					metrics = append(metrics, sum/span)
				}
				p.accN, p.accBusy, p.since = 0, 0, t
			}
			want := hpa.decide(t, spec, metrics, spec-len(metrics), s.Policy)
			w := &wins[winOf(t)]
			w.syncs++
			w.replicas += float64(spec)
			w.ready += float64(len(lb))
			if want == spec {
				break
			}
			out.Scalings++
			if want > spec {
				first := len(pods)
				addPods(t, want-spec, false)
				for i := first; i < len(pods); i++ {
					pendingReady = append(pendingReady, int32(i))
				}
			} else {
				removePods(t, spec-want)
			}
			setSpec(t, want)

		case nextDone == t:
			e := ev.pop()
			p := &pods[e.pod]
			p.touch(t)
			p.n--
			if a, ok := p.pop(); ok {
				ev.push(completion{done: t + m.Service.Sample(svcRNG), arrived: a, pod: e.pod})
				if a >= s.Warmup {
					waitSum += t - a
					waited++
				}
			} else {
				p.busy--
			}
			if p.state == draining && p.n == 0 {
				p.state = gone
				bill(t, -1)
			}
			if e.arrived >= s.Warmup {
				out.Answered++
				lat := t - e.arrived + m.Overhead
				_ = hist.RecordValue(min(int64(lat*1e6), hist.HighestTrackableValue()))
				w := &wins[winOf(e.arrived)]
				w.n++
				if lat > slo {
					w.over++
					out.OverSLO++
				}
			}

		default: // an arrival
			a := t
			nextArr = arr.next()
			counted := a >= s.Warmup
			w := &wins[winOf(a)]
			w.arrived++
			if counted {
				out.Requests++
			}
			if len(lb) == 0 {
				panic("plan: no ready replica") // the fleet never scales below one started replica
			}
			var i int32
			if s.Random {
				i = lb[lbRNG.IntN(len(lb))]
			} else {
				rr = (rr + 1) % len(lb)
				i = lb[rr]
			}
			p := &pods[i]
			if m.MaxInFlight > 0 && p.n >= m.MaxInFlight {
				if counted {
					out.Rejected++
					out.OverSLO++
					w.n++
					w.over++
					w.rejected++
				}
				continue
			}
			p.touch(a)
			p.n++
			if p.busy < c {
				p.busy++
				ev.push(completion{done: a + m.Service.Sample(svcRNG), arrived: a, pod: i})
				if counted {
					waited++
				}
			} else {
				p.push(a)
			}
		}
	}
	bill(end, 0)
	setSpec(end, spec)

	out.Replicas.Mean = specSecs / end
	out.ReplicaHours = podSecs * k / 3600
	if waited > 0 {
		out.MeanWait = waitSum / float64(waited) * 1e3
	}
	if hist.TotalCount() > 0 {
		q := func(p float64) float64 { return float64(hist.ValueAtQuantile(p)) / 1e3 }
		out.Latency = Quantile{Mean: hist.Mean() / 1e3, P50: q(50), P95: q(95), P99: q(99), Max: float64(hist.Max()) / 1e3}
	}
	run := 0
	for i, w := range wins {
		if w.arrived == 0 && w.n == 0 && w.syncs == 0 {
			continue
		}
		span := min(win, end-float64(i)*win)
		tk := Tick{T: float64(i) * win * k, Requests: w.n, OverSLO: w.over, Rejected: w.rejected}
		if span > 0 {
			tk.Offered = float64(w.arrived) / span
		}
		if w.syncs > 0 {
			tk.Replicas, tk.Ready = w.replicas/float64(w.syncs), w.ready/float64(w.syncs)
		}
		out.Timeline = append(out.Timeline, tk)
		if w.n > 0 {
			out.Windows++
			if float64(w.over) > 0.05*float64(w.n) {
				out.Breached++
				run++
				out.LongestBreach = max(out.LongestBreach, run)
			} else {
				run = 0
			}
		}
	}
	return out, nil
}

func (s Sim) check() error {
	switch {
	case s.Trace == nil || len(s.Trace.T) < 2:
		return errors.New("plan: the simulation needs a trace")
	case s.Scaler.Min < 1 || s.Scaler.Max < s.Scaler.Min:
		return fmt.Errorf("plan: replicas from %d to %d: want 1 ≤ min ≤ max", s.Scaler.Min, s.Scaler.Max)
	case s.Policy.Metric != Fixed && (s.Scaler.Sync <= 0 || !(s.Policy.Target > 0)):
		return errors.New("plan: an autoscaler needs a sync period and a positive target")
	case s.Policy.Metric != Fixed && (s.Scaler.UpPods < 0 || s.Scaler.UpPercent < 0 || s.Scaler.DownPercent < 0 || s.Scaler.DownPercent > 100 ||
		s.Scaler.UpPeriod <= 0 || s.Scaler.DownPeriod <= 0 || (s.Scaler.UpPods == 0 && s.Scaler.UpPercent == 0)):
		return errors.New("plan: the autoscaler's rate limits need positive periods, a way up and at most 100% down")
	case s.Policy.Metric == CPU && s.Policy.Target > 1:
		return fmt.Errorf("plan: CPU target %v: want a fraction of the pod's servers, at most 1", s.Policy.Target)
	case s.SLO <= 0:
		return errors.New("plan: the simulation needs an SLO latency")
	}
	return s.Model.validate()
}
