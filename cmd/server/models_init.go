package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/ortserve/ortserve/models"
)

// runModels is `server models`: what ortserve makes of model folders. Its one subcommand,
// init, prints the model.yaml inferred for a Hugging Face model folder that has none, each
// value's reason in a comment, for a user to check and pin.
func runModels(_ context.Context, args []string, stdout io.Writer) error {
	output := new(string)
	fs := modelsInitFlags(output)
	if len(args) == 0 || args[0] != "init" {
		fs.SetOutput(os.Stderr)
		fs.Usage()
		return usagef("models: the subcommand is init")
	}
	args = args[1:]
	// Flags may come before or after DIR.
	var dirs []string
	for {
		if err := fs.Parse(args); err != nil {
			return fmt.Errorf("%w: %w", errUsage, err)
		}
		if fs.NArg() == 0 {
			break
		}
		dirs, args = append(dirs, fs.Arg(0)), fs.Args()[1:]
	}
	if len(dirs) != 1 {
		return usagef("models init: name one model folder (got %d)", len(dirs))
	}
	dir := dirs[0]
	if fi, err := os.Stat(dir); err != nil {
		return fmt.Errorf("models init: %s: %w", dir, errors.Unwrap(err))
	} else if !fi.IsDir() {
		return fmt.Errorf("models init: %s is not a folder: name a model folder", dir)
	}
	inf, err := models.InferConfig(dir, models.InferOptions{Output: *output})
	if err != nil {
		return err
	}
	out := inf.YAML()
	// `init DIR > DIR/model.yaml` has already made an empty one: only a real one is worth a
	// word.
	if fi, err := os.Stat(filepath.Join(dir, models.ConfigFile)); err == nil && fi.Size() > 0 {
		out = append([]byte(fmt.Sprintf("# Note: %s already has a model.yaml, which serve reads instead of this.\n", dir)), out...)
	}
	_, err = stdout.Write(out)
	return err
}

// modelsInitFlags is `server models init`'s flag set, --output bound to output.
func modelsInitFlags(output *string) *flag.FlagSet {
	fs := flag.NewFlagSet("models init", flag.ContinueOnError)
	fs.StringVar(output, "output", "", "the graph output to read, when several could be the one (the error says which)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: server models init [--output NAME] DIR

Prints the model.yaml that serve infers for DIR, a Hugging Face model folder without one
(config.json, tokenizer.json and .onnx files at its root or in onnx/; a hub cache folder
models--org--name too), with where each value came from. Save it as DIR/model.yaml to pin
it: a model.yaml always wins. docs/models.md lists the rules.

`)
		fs.PrintDefaults()
	}
	return fs
}
