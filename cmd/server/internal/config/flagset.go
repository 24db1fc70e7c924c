package config

import (
	"flag"

	"github.com/ortserve/ortserve/bench"
)

// FlagSet returns the flag set that command parses (serve, bench, gate, inspect, plan or
// tune), its flags bound to values nothing reads; nil for another name. It is for checking a
// command line's flag names without running the command, which reads files and opens
// libraries: cmd/server's docs test checks every command the docs show against it.
func FlagSet(command string) *flag.FlagSet {
	switch command {
	case "serve":
		c := Default()
		return flags(&c)
	case "bench":
		return benchFlags(&Bench{Opts: bench.DefaultOptions()})
	case "gate":
		return gateFlagSet(new(GateFlags))
	case "inspect":
		var models, device, config string
		return inspectFlags(new(Inspect), &models, &device, &config)
	case "plan":
		return planFlagSet(new(PlanFlags))
	case "tune":
		return tuneFlagSet(new(TuneFlags))
	}
	return nil
}
