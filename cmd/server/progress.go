package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/ortserve/ortserve/bench"
)

// progress draws a one-line bar on a terminal, and nothing otherwise.
type progress struct {
	mu  sync.Mutex
	w   io.Writer
	on  bool
	any bool
}

func newProgress(f *os.File, quiet bool) *progress {
	on := false
	if st, err := f.Stat(); err == nil && !quiet {
		on = st.Mode()&os.ModeCharDevice != 0
	}
	return &progress{w: f, on: on}
}

func (p *progress) update(pr bench.Progress) {
	if !p.on {
		return
	}
	load := fmt.Sprintf("%g rps", pr.Rate)
	if pr.Concurrency > 0 {
		load = fmt.Sprintf("%d clients", pr.Concurrency)
	}
	run := ""
	if pr.Runs > 1 {
		run = fmt.Sprintf(" run %d/%d", pr.Run, pr.Runs)
	}
	p.Draw(pr.Step, pr.Steps, fmt.Sprintf("step %d/~%d%s %s @ %s  %s", pr.Step, pr.Steps, run, pr.Target, load, pr.Elapsed.Round(time.Second)))
}

// Draw redraws the line as a bar filled step/steps of the way, then text.
func (p *progress) Draw(step, steps int, text string) {
	if !p.on {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	const width = 24
	fill := min(width, width*step/max(1, steps))
	fmt.Fprintf(p.w, "\r\033[K[%s%s] %s", strings.Repeat("=", fill), strings.Repeat(" ", width-fill), text)
	p.any = true
}

// Done clears the line, if anything was drawn.
func (p *progress) Done() {
	if p.on && p.any {
		fmt.Fprint(p.w, "\r\033[K")
	}
}
