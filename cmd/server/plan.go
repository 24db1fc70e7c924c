package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/ortserve/ortserve/bench"
	"github.com/ortserve/ortserve/bench/plan"
	"github.com/ortserve/ortserve/cmd/server/internal/config"
)

func runPlan(ctx context.Context, args []string, stdout io.Writer) error {
	f, err := config.ParsePlan(args, os.Stderr)
	if err != nil {
		return err
	}
	r, err := plan.Run(ctx, f.Options)
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return err
		}
		return fmt.Errorf("%w (%w)", err, errUsage)
	}
	if err := plan.WriteText(stdout, r); err != nil {
		return err
	}
	for _, out := range []struct {
		path  string
		write func(io.Writer, *plan.Result) error
	}{{f.JSON, plan.WriteJSON}, {f.Markdown, plan.WriteMarkdown}} {
		if out.path == "" {
			continue
		}
		if err := writeFile(out.path, func(w io.Writer) error { return out.write(w, r) }); err != nil {
			return err
		}
		fmt.Fprintln(stdout, "wrote", out.path)
	}
	return nil
}

// writeFile creates path and writes it with write, reporting the first error.
func writeFile(path string, write func(io.Writer) error) error {
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(out); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// writePlanHelm prints, after a bench report, the Helm values for its best version sized for
// the SLO's throughput target (server bench --plan-helm): plan.Size, the same arithmetic
// `server plan` uses.
func writePlanHelm(w io.Writer, r *bench.Report) error {
	if r.SLO == nil || r.SLO.RPS <= 0 {
		return errors.New("--plan-helm sizes replicas for the SLO's throughput target, and the report has none: measure with --slo p95=100ms,rps=300")
	}
	p, err := plan.FromReport(r, "", 0)
	if err != nil {
		return err
	}
	s, err := plan.Size(p, r.SLO.RPS, 0, plan.DefaultSizeOptions())
	if err != nil {
		return err
	}
	s.PeakIs = "target"
	fmt.Fprintln(w)
	return plan.WriteHelm(w, s)
}
