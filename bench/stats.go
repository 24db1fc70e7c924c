package bench

import (
	"math"
	"slices"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// LittleTolerance is how far measured in-flight may stray from throughput × latency before
// the step is flagged.
const LittleTolerance = 0.10

// summarize turns a step's samples into its statistics. The measured requests are those
// meant to be sent in the window [from, to); requests of the warm-up only count in the
// time-averaged in-flight, as they do occupy the server then.
func summarize(all []sample, s StepSpec, from, to time.Duration) Step {
	window := (to - from).Seconds()
	st := Step{Offered: s.Rate, Concurrency: s.Concurrency, DurationS: window}
	h := hdrhistogram.New(1, int64(time.Hour/time.Microsecond), 3)
	var lat []float64 // ms, successful
	var ph Phases
	var withHeaders, tokens int
	var tokenSum float64
	var delivered int // successes completed inside the window, whenever they were sent
	for _, x := range all {
		if x.status == 200 && x.done >= from && x.done < to {
			delivered++
		}
		if x.intended < from || x.intended >= to {
			continue
		}
		st.Sent++
		switch {
		case x.status == 200:
			st.OK++
		case rejected(x.status):
			st.Rejected++
		case x.timeout:
			st.Timeouts++
		default:
			st.Errors++
		}
		if x.status != 200 {
			if st.ErrorSample == "" {
				st.ErrorSample = x.err
			}
			continue
		}
		d := x.done - x.intended
		_ = h.RecordValue(max(1, d.Microseconds())) // fails only past an hour, the histogram's range, far beyond any step
		lat = append(lat, ms(d))
		ph.Client += ms(x.sent - x.intended)
		if x.server.ok {
			withHeaders++
			ph.Network += ms(x.done-x.sent) - x.server.total
			ph.Tokenize += x.server.tokenize
			ph.Queue += x.server.queue
			ph.Inference += x.server.inference
			ph.Server += x.server.total
		} else {
			ph.Network += ms(x.done - x.sent)
		}
		if x.server.tokens > 0 {
			tokens++
			tokenSum += float64(x.server.tokens)
			st.tokens = append(st.tokens, float64(x.server.tokens))
		}
	}
	if st.OK > 0 {
		n := float64(st.OK)
		st.Achieved = float64(delivered) / window
		st.ItemsPerS = st.Achieved * float64(s.Inputs)
		if tokens > 0 {
			st.TokensPerS = tokenSum / float64(tokens) * st.Achieved
		}
		st.Latency = Latency{
			Mean: h.Mean() / 1e3,
			P50:  q(h, 50), P90: q(h, 90), P95: q(h, 95), P99: q(h, 99), P999: q(h, 99.9),
			Max: float64(h.Max()) / 1e3,
		}
		ph.Client /= n
		ph.Network /= n
		if withHeaders > 0 {
			k := float64(withHeaders)
			ph.Tokenize, ph.Queue, ph.Inference, ph.Server = ph.Tokenize/k, ph.Queue/k, ph.Inference/k, ph.Server/k
			ph.Headers = true
		}
		ph.Network = max(0, ph.Network)
		st.Phases = ph
		st.Dominant = dominant(ph)
		st.Histogram = bins(lat, 40)
		st.Bimodal = modes(st.Histogram)
	}
	st.Little = little(all, from, to)
	return st
}

func q(h *hdrhistogram.Histogram, p float64) float64 { return float64(h.ValueAtQuantile(p)) / 1e3 }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// dominant names the phase with the largest mean.
func dominant(p Phases) string {
	other := p.Server - p.Tokenize - p.Queue - p.Inference
	parts := []struct {
		name string
		v    float64
	}{
		{"client", p.Client}, {"network", p.Network}, {"tokenize", p.Tokenize},
		{"queue", p.Queue}, {"inference", p.Inference}, {"server other", other},
	}
	best := parts[0]
	for _, x := range parts[1:] {
		if x.v > best.v {
			best = x
		}
	}
	return best.name
}

// little checks Little's Law over the window: L, the time-averaged number of requests on
// the wire (got a connection, not yet answered), against λW, the completion rate times the
// mean latency from the intended send of the requests completed in the window. Requests that
// never got a connection (refused, say) are failures, not a queue, and count in neither.
func little(all []sample, from, to time.Duration) Little {
	var area time.Duration
	var n int
	var w time.Duration
	for _, x := range all {
		lo, hi := max(x.sent, from), min(x.done, to)
		if hi > lo {
			area += hi - lo
		}
		if x.wire && x.done >= from && x.done < to {
			n++
			w += x.done - x.intended
		}
	}
	window := (to - from).Seconds()
	if window <= 0 {
		return Little{}
	}
	l := Little{InFlight: area.Seconds() / window}
	if n == 0 {
		return l // nothing completed: no λW to hold it against
	}
	l.Expected = float64(n) / window * (w.Seconds() / float64(n))
	if l.Expected > 0 {
		l.Deviation = (l.Expected - l.InFlight) / l.Expected
		l.Flag = math.Abs(l.Deviation) > LittleTolerance
	}
	switch {
	case l.Flag && l.Deviation > 0:
		l.Cause = "hidden queue: requests waited before they were on the wire (the generator's --max-in-flight, a connection pool)"
	case l.Flag:
		l.Cause = "not a steady state: requests piled up through the step, the load is past what the server sustains"
	}
	return l
}

// bins spreads latencies (ms) over n log-spaced bins from the smallest to the largest.
func bins(lat []float64, n int) []Bin {
	if len(lat) == 0 {
		return nil
	}
	lo, hi := slices.Min(lat), slices.Max(lat)
	lo = max(lo, 0.001)
	if hi <= lo*1.0001 {
		return []Bin{{UpTo: hi, Count: int64(len(lat))}}
	}
	ratio := math.Log(hi / lo)
	out := make([]Bin, n)
	for i := range out {
		out[i].UpTo = lo * math.Exp(ratio*float64(i+1)/float64(n))
	}
	out[n-1].UpTo = hi
	for _, v := range lat {
		i := int(math.Log(max(v, lo)/lo) / ratio * float64(n))
		out[min(max(i, 0), n-1)].Count++
	}
	return out
}

// modes finds two separate peaks in a log-binned histogram: two local maxima (after a
// five-bin smoothing, so sampling noise in a thin tail is no peak) at least a factor 2 apart
// in latency, a valley between them under half the smaller peak, and at least 10% of the
// requests on each side of the valley. It returns nil for one peak.
func modes(h []Bin) *Modes {
	if len(h) < 5 {
		return nil
	}
	var total float64
	s := make([]float64, len(h))
	for i := range h {
		total += float64(h[i].Count)
		var sum, k float64
		for j := max(0, i-2); j <= min(len(h)-1, i+2); j++ {
			sum += float64(h[j].Count)
			k++
		}
		s[i] = sum / k
	}
	var peaks []int
	for i := range s {
		left := i == 0 || s[i] > s[i-1]
		right := i == len(s)-1 || s[i] >= s[i+1]
		if left && right && s[i] > 0 {
			peaks = append(peaks, i)
		}
	}
	for a := 0; a < len(peaks); a++ {
		for b := a + 1; b < len(peaks); b++ {
			i, j := peaks[a], peaks[b]
			valley := i + 1
			for k := i + 1; k < j; k++ {
				if s[k] < s[valley] {
					valley = k
				}
			}
			if valley >= j || s[valley] > 0.5*min(s[i], s[j]) || h[j].UpTo < 2*h[i].UpTo {
				continue
			}
			var low float64
			for k := 0; k <= valley; k++ {
				low += float64(h[k].Count)
			}
			if share := low / total; share >= 0.1 && share <= 0.9 {
				return &Modes{Low: h[i].UpTo, High: h[j].UpTo, LowShare: share}
			}
		}
	}
	return nil
}
