package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/ortserve/ortserve/bench"
	"github.com/ortserve/ortserve/bench/plan"
)

// PlanFlags is everything `server plan` takes.
type PlanFlags struct {
	Report, Version, Trace, SLO, Policies, Balance string
	Peak, Trough, Burst, Headroom, Room, CPUTarget float64
	Price, Tolerance, MaxRequests, DownPercent     float64
	BurstFor, Ramp, Duration, Startup, Sync        time.Duration
	UpWindow, DownWindow, DownPeriod               time.Duration
	QueueWindow, CPUWindow                         time.Duration
	Servers, MaxInFlight, Min, Max                 int
	Seed                                           uint64
	JSON, Markdown                                 string
}

func planFlagSet(f *PlanFlags) *flag.FlagSet {
	fs := flag.NewFlagSet("plan", flag.ContinueOnError)
	a := plan.DefaultAutoscaler()
	fs.StringVar(&f.Report, "report", "", "the `server bench --json` report to plan from; required")
	fs.StringVar(&f.Version, "version", "", "the report's version to deploy, as int8 or sentiment/int8; default: the one with the highest rate at the SLO")
	fs.StringVar(&f.Trace, "trace", "diurnal", "traffic: diurnal, burst, constant, or a CSV file of seconds,rps rows")
	fs.Float64Var(&f.Peak, "peak-rps", 0, "the traffic's peak in requests/s (a CSV trace is scaled to it); 0: 100× what one replica served at the SLO, or a CSV trace's own")
	fs.Float64Var(&f.Trough, "trough", 0.25, "diurnal: the night's rate as a fraction of the peak")
	fs.Float64Var(&f.Burst, "burst", 3, "burst: the step as a multiple of the base rate")
	fs.DurationVar(&f.BurstFor, "burst-for", 10*time.Minute, "burst: how long the burst lasts, from a third of the way in")
	fs.DurationVar(&f.Ramp, "ramp", 0, "burst: the time it takes to rise to its peak; 0: a step")
	fs.DurationVar(&f.Duration, "duration", 0, "a built-in shape's length; 0: 24h for diurnal, 30m for burst, 1h for constant")
	fs.StringVar(&f.SLO, "slo", "", "judge the report's steps against this SLO instead of its own, as p95=100ms")
	fs.IntVar(&f.Servers, "servers", 0, "requests one replica serves at once; 0: fitted to the report")
	fs.IntVar(&f.MaxInFlight, "max-in-flight", 512, "a replica answers 429 past this many requests (serve's limits.max_in_flight); 0: no limit")
	fs.IntVar(&f.Min, "min", 0, "the autoscaler's minReplicas; 0: sized from the trace's trough")
	fs.IntVar(&f.Max, "max", 0, "the autoscaler's maxReplicas; 0: --room × the replicas at the peak")
	fs.DurationVar(&f.Startup, "startup", a.Startup, "from a new pod to its first request: scheduling, image, model load, readiness")
	fs.DurationVar(&f.Sync, "sync", a.Sync, "the HPA's sync period")
	fs.Float64Var(&f.Tolerance, "tolerance", a.Tolerance, "the HPA's tolerance: no change while metric/target is within 1 ± it")
	fs.DurationVar(&f.UpWindow, "scale-up-window", a.UpWindow, "the HPA's scale-up stabilization window")
	fs.DurationVar(&f.DownWindow, "scale-down-window", a.DownWindow, "the HPA's scale-down stabilization window")
	fs.Float64Var(&f.DownPercent, "scale-down-percent", a.DownPercent, "the HPA's scale-down policy: at most this % of the replicas per --scale-down-period (the chart's; Kubernetes' default is 100 per 15s)")
	fs.DurationVar(&f.DownPeriod, "scale-down-period", a.DownPeriod, "the scale-down policy's period")
	fs.StringVar(&f.Policies, "policies", "queue,cpu", "what to scale on, compared side by side: queue (requests in flight per pod), cpu, or both")
	fs.Float64Var(&f.CPUTarget, "cpu-target", 0.7, "the cpu policy's target utilization, as a fraction")
	fs.DurationVar(&f.QueueWindow, "queue-window", time.Minute, "in flight as the HPA reads it is averaged over this (the chart's prometheus-adapter rule: 1m)")
	fs.DurationVar(&f.CPUWindow, "cpu-window", 15*time.Second, "CPU as the HPA reads it is averaged over this (metrics-server: 15s)")
	fs.Float64Var(&f.Headroom, "headroom", 1.3, "one replica is planned for its best rate at the SLO divided by this")
	fs.Float64Var(&f.Room, "room", 2, "maxReplicas as a multiple of the replicas at the peak")
	fs.StringVar(&f.Balance, "balance", "round-robin", "the load balancer: round-robin, or random (kube-proxy's iptables mode)")
	fs.Float64Var(&f.Price, "price-per-hour", 0, "price of one replica per hour; 0: the report's")
	fs.Float64Var(&f.MaxRequests, "max-requests", plan.DefaultMaxRequests, "the most requests one policy simulates; a longer trace runs time-compressed")
	fs.Uint64Var(&f.Seed, "seed", 1, "seed of the simulated arrivals and service times")
	fs.StringVar(&f.JSON, "json", "", "write the plan as JSON, timelines included")
	fs.StringVar(&f.Markdown, "md", "", "write the plan as Markdown")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: server plan --report BENCH.json [flags]

Sizes a deployment from a bench report and simulates it: replicas of the measured server
behind a load balancer, scaled by the Kubernetes HPA on queue depth and on CPU, under a
traffic shape or trace; prints replicas, requests over the SLO, replica-hours and cost, and
the Helm values to deploy with (docs/plan.md).
Examples:
  server plan --report docs/bench/sentiment.json --trace diurnal
  server plan --report bench.json --trace burst --ramp 2m --peak-rps 5000 --startup 45s
  server plan --report bench.json --trace traffic.csv --peak-rps 20000 --md plan.md

`)
		fs.PrintDefaults()
	}
	return fs
}

// Plan is a `server plan` invocation, checked: the options of plan.Run, with the report and
// the trace read.
type Plan struct {
	Options  plan.Options
	JSON     string
	Markdown string
}

// ParsePlan reads `server plan`'s flags, the bench report and the trace. Every error is a
// usage error.
func ParsePlan(args []string, stderr io.Writer) (*Plan, error) {
	var f PlanFlags
	fs := planFlagSet(&f)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUsage, err)
	}
	if fs.NArg() > 0 {
		return nil, usagef("unexpected arguments %v: server plan takes flags, as --report bench.json --trace diurnal", fs.Args())
	}
	o, err := f.options()
	if err != nil {
		return nil, fmt.Errorf("%w (%w)", err, ErrUsage)
	}
	return &Plan{Options: o, JSON: f.JSON, Markdown: f.Markdown}, nil
}

// options checks the flags and reads the report and the trace; errors are one line each.
func (f *PlanFlags) options() (plan.Options, error) {
	var o plan.Options
	if f.Report == "" {
		return o, errors.New("--report is required: the `server bench --json` report to plan from")
	}
	var slo time.Duration
	if f.SLO != "" {
		s, err := bench.ParseSLO(f.SLO)
		if err != nil {
			return o, err
		}
		slo = s.P95
	}
	r, err := bench.ReadReport(f.Report)
	if err != nil {
		return o, err
	}
	if o.Point, err = plan.FromReport(r, f.Version, slo); err != nil {
		return o, err
	}
	if o.Trace, err = f.trace(o.Point.Best); err != nil {
		return o, err
	}
	switch f.Balance {
	case "round-robin":
	case "random":
		o.Random = true
	default:
		return o, fmt.Errorf("--balance %q: use round-robin or random", f.Balance)
	}
	for _, p := range strings.Split(f.Policies, ",") {
		if p = strings.TrimSpace(p); p != "" {
			o.Policies = append(o.Policies, p)
		}
	}
	switch {
	case f.Servers < 0 || f.MaxInFlight < 0 || f.Min < 0 || f.Max < 0:
		return o, errors.New("--servers, --max-in-flight, --min and --max take 0 or more")
	case f.Max > 0 && f.Min > f.Max:
		return o, fmt.Errorf("--min %d is above --max %d", f.Min, f.Max)
	case f.Startup < 0 || f.Sync <= 0 || f.UpWindow < 0 || f.DownWindow < 0 || f.Tolerance < 0:
		return o, errors.New("--sync must be positive; --startup, the windows and --tolerance 0 or more")
	case f.QueueWindow < 0 || f.CPUWindow < 0:
		return o, errors.New("--queue-window and --cpu-window take 0 or more")
	case f.DownPercent < 0 || f.DownPercent > 100 || f.DownPeriod <= 0:
		return o, errors.New("--scale-down-percent takes 0 to 100 and --scale-down-period a positive duration")
	}
	a := plan.DefaultAutoscaler()
	a.Min, a.Max = f.Min, f.Max
	a.Startup, a.Sync, a.Tolerance, a.UpWindow, a.DownWindow = f.Startup, f.Sync, f.Tolerance, f.UpWindow, f.DownWindow
	a.DownPercent, a.DownPeriod = f.DownPercent, f.DownPeriod
	o.Scaler = a
	o.Size = plan.SizeOptions{Headroom: f.Headroom, Room: f.Room, Floor: 2}
	o.Servers, o.MaxInFlight, o.CPUTarget = f.Servers, f.MaxInFlight, f.CPUTarget
	o.QueueWindow, o.CPUWindow = f.QueueWindow, f.CPUWindow
	o.Price, o.MaxRequests, o.Seed = f.Price, f.MaxRequests, f.Seed
	return o, nil
}

// trace is the traffic asked for: a built-in shape peaking at --peak-rps (100× one
// replica's best rate by default, the "100× the traffic" question), or a CSV trace, scaled to
// --peak-rps when given.
func (f *PlanFlags) trace(best float64) (*plan.Trace, error) {
	if f.Peak < 0 {
		return nil, fmt.Errorf("--peak-rps %v: want a positive rate, or 0 for the default", f.Peak)
	}
	for _, name := range plan.Shapes {
		if f.Trace != name {
			continue
		}
		peak := f.Peak
		if peak == 0 {
			peak = 100 * best
		}
		return plan.BuiltIn(name, plan.Shape{Peak: peak, Duration: f.Duration, Trough: f.Trough, Burst: f.Burst, BurstFor: f.BurstFor, Ramp: f.Ramp})
	}
	if _, err := os.Stat(f.Trace); err != nil {
		return nil, fmt.Errorf("--trace %q is neither a built-in shape (%s) nor a file: %w", f.Trace, strings.Join(plan.Shapes, ", "), errors.Unwrap(err))
	}
	if f.Duration != 0 {
		return nil, errors.New("--duration sets a built-in shape's length; a trace file runs as long as it is")
	}
	tr, err := plan.ReadTrace(f.Trace)
	if err != nil {
		return nil, err
	}
	if f.Peak > 0 {
		pk := tr.Peak()
		if pk == 0 {
			return nil, fmt.Errorf("--peak-rps: the trace %s has no traffic to scale", f.Trace)
		}
		for i := range tr.RPS {
			tr.RPS[i] *= f.Peak / pk
		}
	}
	if tr.Peak() == 0 {
		return nil, fmt.Errorf("--trace %s has no traffic: every rate is 0", f.Trace)
	}
	return tr, nil
}
