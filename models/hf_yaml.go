package models

import (
	"bytes"
	"cmp"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The model.yaml that `server models init` prints for an inferred config.

// YAML writes the inferred config as a model.yaml, the reason for each value in a comment
// beside it, the files not served and the guesses at the end. Saved as Dir/model.yaml, it
// serves the same.
func (inf *Inference) YAML() []byte {
	c := inf.Config
	type line struct{ text, why string }
	var lines []line
	add := func(key string, value any) {
		lines = append(lines, line{key + ": " + flow(value), inf.Why[key]})
	}
	add("name", c.Name)
	add("task", string(c.Task))
	add("tokenizer", c.Tokenizer)
	add("max_length", c.MaxLength)
	add("output", c.Output)
	if c.Task == TaskEmbed {
		add("pooling", string(c.Pooling))
		if len(c.Dense) > 0 {
			add("dense", c.Dense)
		}
		add("normalize", c.Normalize)
		if len(c.Prompts) > 0 {
			add("prompts", c.Prompts)
		}
		if c.DefaultPrompt != "" {
			add("default_prompt", c.DefaultPrompt)
		}
	}
	if c.Task == TaskSparse {
		add("pooling", string(c.Pooling))
	}
	if len(c.Labels) > 0 {
		add("labels", c.Labels)
	}
	add("default_version", c.DefaultVersion)
	lines = append(lines, line{"versions:", ""})
	names := slices.Sorted(maps.Keys(c.Versions))
	slices.SortStableFunc(names, func(a, b string) int { // the default first
		return cmp.Compare(boolInt(a != c.DefaultVersion), boolInt(b != c.DefaultVersion))
	})
	for _, name := range names {
		lines = append(lines, line{"  " + flow(name) + ": " + flow(map[string]string{"file": c.Versions[name].File}), inf.Why["versions."+name]})
	}
	width := 0
	for _, l := range lines {
		if l.why != "" {
			width = max(width, min(len(l.text), 44))
		}
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Inferred by `server models init` from %s, which has no model.yaml.\n", inf.Dir)
	fmt.Fprintf(&b, "# Each comment says where a value came from. Edit what is wrong and save this as\n# %s to pin it: a model.yaml always wins over inference (docs/models.md).\n", filepath.Join(inf.Dir, ConfigFile))
	for _, l := range lines {
		if l.why == "" {
			fmt.Fprintln(&b, l.text)
			continue
		}
		fmt.Fprintf(&b, "%-*s  # %s\n", width, l.text, l.why)
	}
	for _, s := range inf.Skipped {
		fmt.Fprintf(&b, "# not served: %s\n", s)
	}
	for _, w := range inf.Warnings {
		fmt.Fprintf(&b, "# check: %s\n", w)
	}
	return b.Bytes()
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// flow encodes a value as one line of YAML.
func flow(v any) string {
	var n yaml.Node
	if err := n.Encode(v); err != nil {
		panic(err) // strings, ints, bools, string slices and maps always encode
	}
	n.Style |= yaml.FlowStyle
	out, err := yaml.Marshal(&n)
	if err != nil {
		panic(err)
	}
	return strings.TrimSuffix(string(out), "\n")
}
