// Command server is ortserve: a single-binary inference server for text classifiers and
// sentence embedders on ONNX Runtime. Each subcommand is a flag.FlagSet and a
// func(ctx, args, stdout) error; main only dispatches and turns errors into exit codes.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"

	"github.com/ortserve/ortserve/cmd/server/internal/config"
)

// version is stamped at build time with -ldflags "-X main.version=...".
var version = "dev"

// errUsage marks errors that are the user's invocation, not the work: exit code 2. It is the
// config package's, whose errors are usage errors too (a config.Error is one).
var errUsage = config.ErrUsage

// usagef is a usage or data error: exit code 2.
func usagef(format string, args ...any) error {
	return fmt.Errorf("%w (%w)", fmt.Errorf(format, args...), errUsage)
}

type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout io.Writer) error
}

func commands() map[string]command {
	return map[string]command{
		"serve":   {"serve models over HTTP", runServe},
		"bench":   {"find the latency/throughput operating point, fp32 vs int8 against an SLO", runBench},
		"gate":    {"accuracy gate: a quantized version's accuracy against the baseline's, within a budget", runGate},
		"inspect": {"show a model's inputs, outputs, operators and node placement", runInspect},
		"models":  {"models init DIR: print the model.yaml inferred for a Hugging Face model folder, with its reasons", runModels},
		"plan":    {"size a deployment from a bench report and simulate its autoscaling under traffic: replicas, SLO, cost", runPlan},
		"tune":    {"the tuning loop: one lever at a time against an SLO, a diary of experiments and the winning config", runTune},
		"version": {"print the version", func(_ context.Context, _ []string, w io.Writer) error {
			_, err := fmt.Fprintln(w, "ortserve", version)
			return err
		}},
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: server <command> [flags]   (server <command> -h for its flags)")
	cmds := commands()
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-8s %s\n", n, cmds[n].summary)
	}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches a subcommand and returns the process's exit code: 0 ok, 1 failure,
// 2 usage.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		return 2
	}
	cmd, ok := commands()[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "server: unknown command %q\n", args[0])
		usage(stderr)
		return 2
	}
	// First Ctrl-C or SIGTERM cancels ctx and the command shuts down gracefully; once ctx
	// is done the default handling is back, so a second one exits at once.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() { <-ctx.Done(); stop() }()
	err := cmd.run(ctx, args[1:], stdout)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errUsage):
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stderr, "server:", err)
		}
		return 2
	default:
		fmt.Fprintln(stderr, "server:", err)
		return 1
	}
}
