package main

// `server inspect MODEL_OR_FILE` reports what an ONNX file holds (size, format, signature,
// operators, quantized and fp16 content) and where ONNX Runtime places its nodes, from ONNX
// Runtime's own profile of one run on dummy inputs. serve logs the same one-line summary per
// version at load (runtime/engine). Here the files are found, read and placed; package
// runtime/inspect lays out the report and the log lines.

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/ortserve/ortserve/cmd/server/internal/config"
	"github.com/ortserve/ortserve/runtime/engine"
	"github.com/ortserve/ortserve/runtime/inspect"
	"github.com/ortserve/ortserve/runtime/onnx"
	"github.com/ortserve/ortserve/runtime/ort"
)

func runInspect(ctx context.Context, args []string, stdout io.Writer) error {
	c, err := config.ParseInspect(args, os.Getenv, os.Stderr)
	if err != nil {
		return err
	}
	env, err := ort.Open(c.Serve.ORTLib)
	if err != nil {
		return err
	}
	defer env.Close()
	return inspectFiles(ctx, c, env, stdout)
}

// inspectFiles reports on every target, on an ONNX Runtime environment the caller owns. A file
// that cannot be read or placed is reported as far as it goes, and the command fails at the
// end.
func inspectFiles(ctx context.Context, c *config.Inspect, env *ort.Env, stdout io.Writer) error {
	r := inspect.Report{ORTVersion: env.Version(), Device: c.Serve.Device}
	sc := c.Serve
	if sc.Device == string(ort.DeviceCUDA) {
		sc.Device = string(ort.DeviceAuto) // inspect says where nodes would go; without CUDA, that is CPU
	}
	e, err := engine.New(env, engineConfig(sc))
	if err != nil {
		return err
	}
	provider := e.Provider()
	r.Provider, r.FallbackReason = string(provider), e.FallbackReason()
	if !c.JSON {
		if err := inspect.WriteHeader(stdout, r); err != nil {
			return err
		}
	}
	var failed []string
	for _, t := range c.Targets {
		if err := ctx.Err(); err != nil {
			return err
		}
		f := inspect.File{Model: t.Model, Version: t.Version, Devices: t.Devices}
		start := time.Now()
		m, err := onnx.ReadModel(t.Path)
		if err != nil {
			return err
		}
		f.File = m
		if f.Place, err = e.Place(m); err != nil {
			f.PlaceError = err.Error()
			failed = append(failed, cmp.Or(t.Version, t.Path))
		}
		f.Took = time.Since(start).Round(time.Millisecond).String()
		f.Summary = inspect.KVLine(inspect.Summary(m, f.Place, string(provider)))
		r.Files = append(r.Files, f)
		if !c.JSON {
			if err := inspect.WriteFile(stdout, f); err != nil {
				return err
			}
		}
	}
	if c.JSON {
		if err := inspect.WriteJSON(stdout, r); err != nil {
			return err
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("could not see the placement of %s: the report says why", strings.Join(failed, ", "))
	}
	return nil
}
