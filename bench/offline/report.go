package offline

import (
	"fmt"
	"io"
	goruntime "runtime"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ortserve/ortserve/bench"
)

// Result is what a bench that measures only the offline limit found: `server bench --offline`
// with no load, no server started or contacted.
type Result struct {
	Started  time.Time
	Setup    string // the sessions and threads measured, in words
	Workload bench.WorkloadSummary
	Targets  []bench.Target
	Points   map[string][]bench.OfflinePoint // by the targets' names
}

// Report is res as a bench report by tool ("ortserve <version>") on this host: one run whose
// versions carry the offline points and no steps, no load, no SLO, and a note per version.
func (res Result) Report(tool string) *bench.Report {
	r := &bench.Report{
		Schema: bench.Schema, Tool: tool, Started: res.Started.UTC(),
		Host:     bench.Host{CPUs: goruntime.NumCPU(), OS: goruntime.GOOS, Arch: goruntime.GOARCH},
		Target:   "ONNX Runtime offline, in this process (no server)",
		Workload: res.Workload,
		Notes:    []string{fmt.Sprintf("offline only: raw session throughput with %s, the texts tokenized beforehand, no HTTP and no batcher; no load was applied", res.Setup)},
	}
	var vs []bench.VersionResult
	for _, t := range res.Targets {
		pts := res.Points[t.Name()]
		vs = append(vs, bench.VersionResult{Name: t.Name(), Model: t.Model, Version: t.Version, Offline: pts})
		var each []string
		for _, p := range pts {
			each = append(each, fmt.Sprintf("batch %d: %.1f texts/s, p50 %.2f ms", p.Batch, p.ItemsPerS, p.P50))
		}
		r.Notes = append(r.Notes, t.Name()+": "+strings.Join(each, "; "))
	}
	r.Runs = []bench.Run{{Versions: vs}}
	return r
}

// WriteText writes res as the table bench prints: this host's CPUs, the sessions, the
// workload, and each version's points.
func (res Result) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "Raw ONNX Runtime limit (offline: no server, no HTTP, no batcher)\n\n")
	fmt.Fprintf(tw, "CPUs\t%d (this process's)\n", goruntime.NumCPU())
	fmt.Fprintf(tw, "Sessions\t%s\n", res.Setup)
	fmt.Fprintf(tw, "Workload\t%s: %d texts\n", res.Workload.Source, res.Workload.Texts)
	fmt.Fprintf(tw, "\n  version\tbatch\ttexts/s\tp50 ms (one batch)\n")
	for _, t := range res.Targets {
		for _, p := range res.Points[t.Name()] {
			fmt.Fprintf(tw, "  %s\t%d\t%.1f\t%.2f\n", t.Name(), p.Batch, p.ItemsPerS, p.P50)
		}
	}
	return tw.Flush()
}
