package config

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/ortserve/ortserve/models"
	"github.com/ortserve/ortserve/runtime"
)

// The flag.Values of the settings that the flag package has no type for. Each is also a
// flag.Getter, whose Get gives the value's string, so that a problem's line quotes it.

// listFlag is a comma-separated list of values; each layer that sets it (file, environment,
// flag) replaces the list, as for any other setting. Blanks are dropped.
type listFlag struct{ p *[]string }

func (f listFlag) String() string {
	if f.p == nil {
		return ""
	}
	return strings.Join(*f.p, ",")
}

func (f listFlag) Set(s string) error {
	*f.p = nil
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			*f.p = append(*f.p, v)
		}
	}
	return nil
}

func (f listFlag) Get() any { return f.String() }

// modelFlag is --model: model folders served on their own, each DIR or NAME=DIR. On the
// command line it may be given more than once, and a value may list several, comma-separated,
// as the file and the environment do. Like any setting, each layer that sets it replaces the
// list of the one before (loader.set resets it first).
type modelFlag struct{ p *[]string }

func (f modelFlag) String() string {
	if f.p == nil {
		return ""
	}
	return strings.Join(*f.p, ",")
}

func (f modelFlag) Set(s string) error {
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v == "" {
			continue
		}
		if _, err := parseModelDir(v); err != nil {
			return err
		}
		*f.p = append(*f.p, v)
	}
	return nil
}

func (f modelFlag) Get() any { return f.String() }

// Reset empties the list, for the next layer to set it anew.
func (f modelFlag) Reset() { *f.p = nil }

// parseModelDir reads one --model value: DIR, or NAME=DIR to serve the folder's model under
// NAME. A value whose part before "=" holds a path separator is a folder.
func parseModelDir(s string) (models.ModelDir, error) {
	name, dir, ok := strings.Cut(s, "=")
	if !ok || strings.ContainsAny(name, `/\`) {
		return models.ModelDir{Dir: s}, nil
	}
	switch {
	case name == "":
		return models.ModelDir{}, fmt.Errorf("%q: put the model's name before =, or leave the = out", s)
	case dir == "":
		return models.ModelDir{}, fmt.Errorf("%q: name the model folder after =", s)
	case strings.Trim(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != "":
		return models.ModelDir{}, fmt.Errorf("model name %q: use letters, digits, '.', '_' and '-'", name)
	}
	return models.ModelDir{Name: name, Dir: dir}, nil
}

// relModelDirs takes --model's relative folders from base, the config file's folder.
func relModelDirs(value, base string) string {
	items := strings.Split(value, ",")
	for i, v := range items {
		v = strings.TrimSpace(v)
		md, err := parseModelDir(v)
		if err != nil || v == "" || filepath.IsAbs(md.Dir) {
			items[i] = v
			continue
		}
		items[i] = filepath.Join(base, md.Dir)
		if md.Name != "" {
			items[i] = md.Name + "=" + items[i]
		}
	}
	return strings.Join(items, ",")
}

// sloFlag is --slo: a latency objective as p95=50ms (runtime.ParseSLO), empty for none.
type sloFlag struct{ d *time.Duration }

func (f sloFlag) String() string {
	if f.d == nil {
		return ""
	}
	return runtime.FormatSLO(*f.d)
}

func (f sloFlag) Set(s string) error {
	d, err := runtime.ParseSLO(s)
	if err != nil {
		return err
	}
	*f.d = d
	return nil
}

func (f sloFlag) Get() any { return f.String() }

// orderFlag is --batch-order: shortest or arrival.
type orderFlag struct{ o *runtime.Order }

func (f orderFlag) String() string {
	if f.o == nil {
		return ""
	}
	return string(*f.o)
}

func (f orderFlag) Set(s string) error {
	switch o := runtime.Order(s); o {
	case runtime.OrderShortest, runtime.OrderArrival:
		*f.o = o
		return nil
	}
	return fmt.Errorf("want %s or %s", runtime.OrderShortest, runtime.OrderArrival)
}

func (f orderFlag) Get() any { return f.String() }
