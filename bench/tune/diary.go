package tune

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ortserve/ortserve/bench"
	"github.com/ortserve/ortserve/bench/report"
)

// The files a tuning run writes in its output folder, besides one bench report per
// experiment (exp-NN.json) and the winning serve config.
const (
	DiaryJSONL = "diary.jsonl"
	DiaryMD    = "diary.md"
	PlotFile   = "plot.svg"
)

// WriteJSONL writes the diary, one entry per line.
func WriteJSONL(w io.Writer, o *Outcome) error {
	enc := json.NewEncoder(w)
	for _, e := range o.Entries {
		if err := enc.Encode(e); err != nil {
			return err
		}
	}
	return nil
}

// WriteMarkdown writes the diary as a Markdown page: what was asked, what was found, a
// table of every experiment, and the notes (profile, levers not tried, why it stopped).
func WriteMarkdown(w io.Writer, o *Outcome) error {
	p := report.NewPrinter(w)
	p.Printf("# `server tune`: %s\n\n", report.Escape(o.Model))
	p.Printf("- **SLO:** %s\n", sloText(o.SLO))
	p.Printf("- **Budget:** %v, used %v\n", time.Duration(o.BudgetS*float64(time.Second)), time.Duration(o.ElapsedS*float64(time.Second)).Round(time.Second))
	wl := o.Workload
	p.Printf("- **Workload:** %s, %d texts, %d distinct (its own repeat ratio %.0f%%)\n", report.Escape(wl.Source), wl.Texts, wl.Distinct, 100*wl.Repeat)
	if o.Load != "" {
		p.Printf("- **Load per experiment:** %s\n", report.Escape(o.Load))
	}
	p.Printf("- **Noise:** run-to-run SD of the best rate %.1f%%; a change is kept only when it gains over %.1f%% = max(2 × SD, floor), "+
		"in its trial and again on repeat against the current best measured again\n", 100*o.SD, 100*o.Threshold)
	p.Printf("- **Result:** baseline %.1f rps (mean of %d runs) → tuned %.1f rps (mean of %d runs), %+.0f%%\n", o.BaselineRate, o.BaselineRuns, o.BestRate, o.BestRuns, 100*gainOf(o))
	for _, e := range o.Kept() {
		p.Printf("  - kept #%d: %s %s → %s\n", e.N, report.Escape(string(e.Lever)), report.Escape(e.From), report.Escape(e.Value))
	}
	if o.Price > 0 && o.BestRate > 0 {
		p.Printf("- **Cost:** $%.4f per million requests at the tuned rate (baseline $%.4f), at $%g per server-hour\n",
			o.Price/(o.BestRate*3600)*1e6, o.Price/(max(o.BaselineRate, 1e-9)*3600)*1e6, o.Price)
	}
	p.Printf("- **Stopped:** %s\n\n", report.Escape(o.Stopped))
	p.Printf("Rates are the highest offered rate meeting the SLO; latency and throughput are at that rate.\n\n")
	t := report.Table{Head: []string{"#", "kind", "lever", "value", "best rps", "p50 ms", "p95 ms", "p99 ms", "throughput rps", "$/1M req", "dominant", "decision", "why"}}
	for _, e := range o.Entries {
		if e.N == 0 {
			continue
		}
		value := e.Value
		if e.From != "" && e.From != e.Value {
			value = e.From + " → " + e.Value
		}
		t.Rows = append(t.Rows, []string{strconv.Itoa(e.N), e.Kind, report.OrDash(string(e.Lever)), report.OrDash(value), report.Fixed(e.Best, 1),
			report.FixedOrDash(e.P50, 1), report.FixedOrDash(e.P95, 1), report.FixedOrDash(e.P99, 1), report.FixedOrDash(e.Achieved, 1),
			report.FixedOrDash(e.CostPerMillion, 4), report.OrDash(e.Dominant), report.OrDash(e.Decision), report.OrDash(e.Why)})
	}
	p.Markdown(t)
	p.Printf("\n## Notes\n\n")
	for _, e := range o.Entries {
		if e.N == 0 {
			p.Printf("- %s\n", report.Escape(e.Why))
		}
	}
	return p.Err()
}

func gainOf(o *Outcome) float64 {
	if o.BaselineRate <= 0 {
		return 0
	}
	return o.BestRate/o.BaselineRate - 1
}

func sloText(s bench.SLO) string {
	t := fmt.Sprintf("p95 ≤ %v", s.P95)
	if s.RPS > 0 {
		t += fmt.Sprintf(" at %.0f rps", s.RPS)
	}
	return t
}

// PlotSVG draws p95 against achieved throughput: every step of every experiment, each
// experiment's operating point by its decision, the SLO's p95 as a line, and the operating
// points of the chosen config's measurements ringed.
func PlotSVG(o *Outcome) string {
	type series struct {
		name, colour string
		x, y         []float64
	}
	steps := series{name: "every step", colour: "#c7c7c7"}
	by := map[string]*series{
		Baseline: {name: "baseline", colour: "#1f77b4"},
		Kept:     {name: "kept", colour: "#2ca02c"},
		Reverted: {name: "reverted", colour: "#ff7f0e"},
		Repeat:   {name: "repeat", colour: "#9467bd"},
	}
	chosen := series{name: "chosen config", colour: "#000000"}
	for _, e := range o.Entries {
		for _, p := range e.Steps {
			steps.x, steps.y = append(steps.x, p.Achieved), append(steps.y, p.P95)
		}
		if e.N == 0 || e.Best == 0 {
			continue
		}
		if s := by[e.Decision]; s != nil {
			s.x, s.y = append(s.x, e.Achieved), append(s.y, e.P95)
		}
		if e.Cfg != nil && *e.Cfg == o.Best {
			chosen.x, chosen.y = append(chosen.x, e.Achieved), append(chosen.y, e.P95)
		}
	}
	out := []report.Series{{Name: steps.name, Colour: steps.colour, X: steps.x, Y: steps.y}}
	for _, k := range []string{Baseline, Repeat, Reverted, Kept} {
		s := by[k]
		out = append(out, report.Series{Name: s.name, Colour: s.colour, X: s.x, Y: s.y})
	}
	out = append(out, report.Series{Name: chosen.name, Colour: chosen.colour, X: chosen.x, Y: chosen.y, Ring: true})
	slo := float64(o.SLO.P95) / float64(time.Millisecond)
	return report.Scatter(fmt.Sprintf("server tune %s: p95 against throughput, every experiment", o.Model),
		"achieved throughput (requests/s)", "p95 latency (ms)", out, slo, fmt.Sprintf("SLO p95 %g ms", slo))
}

// WriteSummary prints what a run found, for the terminal.
func WriteSummary(w io.Writer, o *Outcome) error {
	var b strings.Builder
	fmt.Fprintf(&b, "tune %s against %s: %d experiments in %v (%s)\n", o.Model, sloText(o.SLO), experiments(o),
		time.Duration(o.ElapsedS*float64(time.Second)).Round(time.Second), o.Stopped)
	fmt.Fprintf(&b, "  baseline  %7.1f rps at SLO (mean of %d runs)\n", o.BaselineRate, o.BaselineRuns)
	fmt.Fprintf(&b, "  tuned     %7.1f rps at SLO (mean of %d runs), %+.0f%%\n", o.BestRate, o.BestRuns, 100*gainOf(o))
	fmt.Fprintf(&b, "  noise     SD %.1f%%, threshold %.1f%%\n", 100*o.SD, 100*o.Threshold)
	kept := o.Kept()
	if len(kept) == 0 {
		b.WriteString("  kept      nothing: the baseline config stays\n")
	}
	for _, e := range kept {
		fmt.Fprintf(&b, "  kept      %s %s → %s (#%d)\n", e.Lever, e.From, e.Value, e.N)
	}
	if o.SLO.RPS > 0 && o.BestRate > 0 && o.BestRate < o.SLO.RPS {
		fmt.Fprintf(&b, "  short of the %.0f rps target: %d servers at this rate, with 30%% headroom\n", o.SLO.RPS, int(math.Ceil(o.SLO.RPS*1.3/o.BestRate)))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func experiments(o *Outcome) int {
	n := 0
	for _, e := range o.Entries {
		n = max(n, e.N)
	}
	return n
}

// Output writes a run's files into a folder as the run goes: the diary (JSON lines and
// Markdown) after every change, each experiment's bench report as it is measured, and the
// plot. Files are replaced whole (written aside, then renamed), so an interrupted run leaves
// a readable diary.
type Output struct {
	Dir string
	Err error // the first write that failed; later ones are skipped
}

// Record writes the diary and, for a new measurement, its bench report; it is meant for
// Settings.Record.
func (w *Output) Record(o *Outcome, r *Result) {
	if w.Err != nil {
		return
	}
	if r != nil && r.Report != nil && len(o.Entries) > 0 {
		if name := o.Entries[len(o.Entries)-1].Report; name != "" {
			w.write(name, func(f io.Writer) error { return bench.WriteJSON(f, r.Report) })
		}
	}
	w.write(DiaryJSONL, func(f io.Writer) error { return WriteJSONL(f, o) })
	w.write(DiaryMD, func(f io.Writer) error { return WriteMarkdown(f, o) })
}

// Plot writes plot.svg.
func (w *Output) Plot(o *Outcome) {
	w.write(PlotFile, func(f io.Writer) error { _, err := io.WriteString(f, PlotSVG(o)); return err })
}

func (w *Output) write(name string, f func(io.Writer) error) {
	if w.Err != nil {
		return
	}
	var b bytes.Buffer
	if err := f(&b); err != nil {
		w.Err = err
		return
	}
	path := filepath.Join(w.Dir, name)
	if err := os.WriteFile(path+".tmp", b.Bytes(), 0o644); err != nil {
		w.Err = err
		return
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		w.Err = err
	}
}
