// Package bench measures inference servers over HTTP: open-loop load at a rate (constant or
// Poisson arrivals) or closed-loop load at a concurrency, latency from the intended send time
// (no coordinated omission) in HdrHistogram, the server's own phase breakdown from its timing
// headers, SLO verdicts, capacity plans, and reports (JSON first, then text, Markdown and
// HTML with SVG plots). It talks HTTP like any client, so it measures peers (any
// TEI-compatible server) with the same code; `server bench --self` wires it to an in-process
// server.
package bench

import (
	"encoding/json"
	"time"
)

// Schema names the JSON layout of a Report; it changes when a field changes meaning.
const Schema = "ortserve.bench/v1"

// Report is everything one `server bench` run measured. It is the data; Text, Markdown and
// HTML are views of it.
type Report struct {
	Schema   string          `json:"schema"`
	Tool     string          `json:"tool"` // "ortserve <version>"
	Started  time.Time       `json:"started"`
	Host     Host            `json:"host"`
	Target   string          `json:"target"` // base URL, or "ortserve --self [(<config>)]"
	Route    string          `json:"route"`  // "/predict", "/embed", "/v1/embeddings"
	Load     LoadSpec        `json:"load"`
	Workload WorkloadSummary `json:"workload"`
	SLO      *SLO            `json:"slo,omitempty"`
	Price    float64         `json:"price_per_hour,omitempty"` // for cost per million requests
	// Runs holds one entry per --repeat; most views show Runs[0] and the spread across runs.
	Runs []Run `json:"runs"`
	// Variance is the run-to-run spread per version; empty with one run.
	Variance []Variance `json:"variance,omitempty"`
	Notes    []string   `json:"notes,omitempty"` // warnings worth reading before the numbers
}

// Host is the machine the load generator ran on (with --self, the server too).
type Host struct {
	CPUs int    `json:"cpus"`
	OS   string `json:"os"`
	Arch string `json:"arch"`
	Name string `json:"name,omitempty"`
}

// LoadSpec is how load was applied, the same for every version.
type LoadSpec struct {
	Mode        string  `json:"mode"`    // "open" or "closed"
	Arrival     string  `json:"arrival"` // "constant" or "poisson" (open loop)
	Search      bool    `json:"search"`  // rates found by searching for the SLO, not swept
	Inputs      int     `json:"inputs"`  // texts per request
	WarmupS     float64 `json:"warmup_s"`
	StepS       float64 `json:"step_s"`
	MinRequests int     `json:"min_requests,omitempty"`   // open-loop steps last past step_s until they span this many
	Confirm     int     `json:"search_confirm,omitempty"` // windows more a failed search step got before its rate failed
	MaxInFlight int     `json:"max_in_flight"`            // the generator's own cap on requests outstanding
	TimeoutS    float64 `json:"timeout_s"`
	Seed        int64   `json:"seed"`
}

// WorkloadSummary describes the texts sent: where from and how long they are.
type WorkloadSummary struct {
	Source string       `json:"source"` // file path, or "built-in"
	Texts  int          `json:"texts"`
	Chars  Distribution `json:"chars"`
	Words  Distribution `json:"words"`
	// Tokens per request as the server counted them (x-compute-tokens), when it says.
	Tokens *Distribution `json:"tokens,omitempty"`
}

// Distribution summarises a length distribution.
type Distribution struct {
	Min  float64 `json:"min"`
	P50  float64 `json:"p50"`
	P95  float64 `json:"p95"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

// Run is one pass over every version.
type Run struct {
	Versions []VersionResult `json:"versions"`
}

// VersionResult is one model version's steps and what they add up to.
type VersionResult struct {
	Name    string `json:"name"` // "sentiment/int8"; "" model or version when the target has none
	Model   string `json:"model,omitempty"`
	Version string `json:"version,omitempty"`
	Steps   []Step `json:"steps"`
	// Offline is the raw session throughput of the same version (--offline); empty if not run.
	Offline []OfflinePoint `json:"offline,omitempty"`
	// Best is the highest offered rate (requests/s) that met the SLO's p95 with the load
	// kept up and no errors to speak of; 0 if none did, or no SLO was given.
	Best float64 `json:"best_rps"`
	// BestItems is Best in texts per second (Best × inputs per request).
	BestItems float64 `json:"best_items_per_s"`
	// Efficiency is BestItems over the best offline items/s; 0 without --offline.
	Efficiency float64  `json:"efficiency,omitempty"`
	Verdict    *Verdict `json:"verdict,omitempty"`
	Plan       *Plan    `json:"plan,omitempty"`
}

// Step is one measured load level of one version.
type Step struct {
	// Offered is the arrival rate in requests/s (open loop) or 0 (closed loop).
	Offered float64 `json:"offered_rps,omitempty"`
	// Concurrency is the number of clients (closed loop) or 0 (open loop).
	Concurrency int     `json:"concurrency,omitempty"`
	DurationS   float64 `json:"duration_s"` // measured window, warm-up excluded
	Sent        int     `json:"sent"`       // requests scheduled in the window
	OK          int     `json:"ok"`
	Rejected    int     `json:"rejected"`        // 429 and 503: the server shed load
	Errors      int     `json:"errors"`          // other statuses, transport errors
	Timeouts    int     `json:"timeouts"`        // no answer within the generator's timeout
	ErrorSample string  `json:"error,omitempty"` // one error, to say what went wrong
	// Achieved is successful requests per second delivered in the window: answers that
	// completed in it, whenever they were sent. Past capacity it is what the server can do,
	// however much is offered.
	Achieved    float64 `json:"achieved_rps"`
	ItemsPerS   float64 `json:"items_per_s"`
	TokensPerS  float64 `json:"tokens_per_s,omitempty"`
	Latency     Latency `json:"latency"` // of successful requests, from the intended send time
	Phases      Phases  `json:"phases"`
	Dominant    string  `json:"dominant"` // the phase with the largest mean share
	Little      Little  `json:"little"`
	Bimodal     *Modes  `json:"bimodal,omitempty"`
	Histogram   []Bin   `json:"histogram"`      // latency, log-spaced bins, for plots
	Pass        *bool   `json:"pass,omitempty"` // against the SLO, if one was given
	Why         string  `json:"why,omitempty"`  // why it did not pass
	Interrupted bool    `json:"interrupted,omitempty"`

	tokens []float64 // per successful request, from x-compute-tokens
}

// Latency is a latency distribution in milliseconds.
type Latency struct {
	Mean float64 `json:"mean_ms"`
	P50  float64 `json:"p50_ms"`
	P90  float64 `json:"p90_ms"`
	P95  float64 `json:"p95_ms"`
	P99  float64 `json:"p99_ms"`
	P999 float64 `json:"p999_ms"`
	Max  float64 `json:"max_ms"`
}

// Phases is where the mean request's time went, in milliseconds. Server phases come from
// the response's timing headers (x-tokenization-time, x-queue-time, x-inference-time,
// x-total-time, as TEI and ortserve send them); zero when the server sends none.
type Phases struct {
	Client    float64 `json:"client_ms"`    // intended send → on the wire: the generator's own lag
	Network   float64 `json:"network_ms"`   // on the wire, less the server's total: HTTP, JSON, loopback
	Tokenize  float64 `json:"tokenize_ms"`  // server: tokenization
	Queue     float64 `json:"queue_ms"`     // server: waiting to be batched and for a session
	Inference float64 `json:"inference_ms"` // server: the model run
	Server    float64 `json:"server_ms"`    // server: total in the handler
	Headers   bool    `json:"headers"`      // the server sent timing headers
}

// Little is the Little's Law check L = λW: the time-averaged number of requests on the wire,
// measured, against achieved throughput × mean latency. When they disagree by more than 10%,
// time is being spent somewhere the in-flight count does not see: a hidden queue (the
// generator's own, a connection pool), or a queue that grew through the step.
type Little struct {
	InFlight  float64 `json:"in_flight"` // measured L
	Expected  float64 `json:"expected"`  // λ × W
	Deviation float64 `json:"deviation"` // (expected − measured) / expected
	Flag      bool    `json:"flag"`
	Cause     string  `json:"cause,omitempty"` // what a flag most likely means
}

// Modes is a latency histogram with two separate peaks: often cache hits against cold
// requests, or requests that joined a batch against ones that waited for the next.
type Modes struct {
	Low      float64 `json:"low_ms"`
	High     float64 `json:"high_ms"`
	LowShare float64 `json:"low_share"` // fraction of requests under the valley
}

// Bin is one histogram bin: requests with latency in (previous bin's UpTo, UpTo] ms.
type Bin struct {
	UpTo  float64 `json:"up_to_ms"`
	Count int64   `json:"count"`
}

// OfflinePoint is raw session throughput at one batch size: pre-tokenized inputs, no HTTP,
// every session busy, the server's thread settings.
type OfflinePoint struct {
	Batch     int     `json:"batch"`
	ItemsPerS float64 `json:"items_per_s"`
	P50       float64 `json:"p50_ms"` // one batch's run
}

// SLO is the service level a version is judged against: the latency quantile target and
// the throughput it must sustain within it.
type SLO struct {
	P95 time.Duration
	RPS float64 // 0: no throughput target
}

// sloJSON is SLO in the report's units: milliseconds, like every other latency there.
type sloJSON struct {
	P95 float64 `json:"p95_ms"`
	RPS float64 `json:"rps,omitempty"`
}

// MarshalJSON writes the SLO with p95 in milliseconds.
func (s SLO) MarshalJSON() ([]byte, error) {
	return json.Marshal(sloJSON{P95: float64(s.P95) / float64(time.Millisecond), RPS: s.RPS})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (s *SLO) UnmarshalJSON(data []byte) error {
	var j sloJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return err
	}
	*s = SLO{P95: time.Duration(j.P95 * float64(time.Millisecond)), RPS: j.RPS}
	return nil
}

// Verdict is a version's standing against the SLO.
type Verdict struct {
	Meets bool   `json:"meets"`
	Why   string `json:"why"`
}

// Plan sizes a deployment for the SLO's throughput target from the measured operating point.
type Plan struct {
	TargetRPS float64 `json:"target_rps"`
	// Replicas of the measured server for TargetRPS with 30% headroom:
	// ceil(target × 1.3 / best rate at SLO).
	Replicas int `json:"replicas"`
	// InFlight is the concurrency to allow per replica by Little's Law at the operating
	// point: best rate × p95 latency, rounded up.
	InFlight int `json:"max_in_flight"`
	// CostPerMillion is the price of a million requests at the operating point, from
	// --price-per-hour; 0 if no price was given.
	CostPerMillion float64 `json:"cost_per_million,omitempty"`
}

// Variance is the spread of one version's results across --repeat runs.
type Variance struct {
	Name string `json:"name"`
	Best Spread `json:"best_rps"`
	// P50 and P95 at the highest offered rate every run measured, one that every run passed
	// if there is one.
	Rate float64 `json:"rate,omitempty"`
	P50  Spread  `json:"p50_ms"`
	P95  Spread  `json:"p95_ms"`
}

// Spread is mean, standard deviation and range over runs.
type Spread struct {
	Mean float64 `json:"mean"`
	SD   float64 `json:"sd"`
	Min  float64 `json:"min"`
	Max  float64 `json:"max"`
	CV   float64 `json:"cv"` // SD / Mean
}
