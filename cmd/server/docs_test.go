package main

import (
	"flag"
	"fmt"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/ortserve/ortserve/cmd/server/internal/config"
	"github.com/ortserve/ortserve/cmd/server/internal/doccheck"
)

// The docs are tested like code: every `server` command they show names a real command and
// real flags, and every relative link and #anchor resolves. TestDocsQuickStart (with the
// integration tests) sends the README's quick start to a real server.

const repoRoot = "../.."

// readDocs reads the docs held to these tests: README.md and docs/*.md.
func readDocs(t *testing.T) []*doccheck.Doc {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	rels := []string{"README.md"}
	for _, f := range files {
		rels = append(rels, filepath.ToSlash(strings.TrimPrefix(f, repoRoot+string(filepath.Separator))))
	}
	var docs []*doccheck.Doc
	for _, rel := range rels {
		d, err := doccheck.Read(repoRoot, rel)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, d)
	}
	return docs
}

// subcommand is what the docs test knows of a command's parser besides its flags.
type subcommand struct {
	flags func() *flag.FlagSet // nil: no flags
	args  int                  // the arguments it takes: DIR, A.json B.json
	// anywhere says flags may come after the arguments, as inspect and models init read
	// them; Go's flag package stops at the first argument.
	anywhere bool
}

// subcommands are the commands a doc may show, by their words after `server`: main's
// dispatch (commands()), and bench's and models' own.
func subcommands() map[string]subcommand {
	own := func(name string) func() *flag.FlagSet {
		return func() *flag.FlagSet { return config.FlagSet(name) }
	}
	return map[string]subcommand{
		"serve":         {flags: own("serve")},
		"bench":         {flags: own("bench")},
		"bench compare": {args: 2},
		"bench report":  {flags: func() *flag.FlagSet { return reportFlags(new(config.Bench)) }, args: 1},
		"gate":          {flags: own("gate")},
		"inspect":       {flags: own("inspect"), args: 1, anywhere: true},
		"models init":   {flags: func() *flag.FlagSet { return modelsInitFlags(new(string)) }, args: 1, anywhere: true},
		"plan":          {flags: own("plan")},
		"tune":          {flags: own("tune")},
		"version":       {},
	}
}

var commandName = regexp.MustCompile(`^[a-z][a-z-]*$`)

// serverWords finds a `server` command in a doc's command: the first word that is the
// program (server, ./bin/server, /usr/local/bin/server) and has a command's name after it,
// so that `taskset -c 1 server serve` counts and `go build -o bin/server ./cmd/server`
// does not. It returns the words after the program.
func serverWords(args []string) ([]string, bool) {
	for i, a := range args[:max(len(args)-1, 0)] {
		if (a == "server" || strings.HasSuffix(a, "bin/server")) && commandName.MatchString(args[i+1]) {
			return args[i+1:], true
		}
	}
	return nil, false
}

// checkCommand checks the words after `server` against the real dispatch and flag sets: the
// command exists, each flag is one of its flags, a flag that is not a bool has a value, and
// it gets as many arguments as it takes. A mention in prose (inline) may leave out a value
// or arguments. A word in brackets that is not a flag, as [flags], is a placeholder; a
// bracketed flag, as [--packing off], is checked.
func checkCommand(words []string, inline bool) error {
	dispatch := commands()
	if _, ok := dispatch[words[0]]; !ok {
		return fmt.Errorf("server has no command %q: it has %s", words[0], strings.Join(slices.Sorted(maps.Keys(dispatch)), ", "))
	}
	all := subcommands()
	name, rest := words[0], words[1:]
	if len(rest) > 0 {
		if _, ok := all[name+" "+rest[0]]; ok {
			name, rest = name+" "+rest[0], rest[1:]
		}
	}
	sc, ok := all[name]
	if !ok {
		var subs []string
		for _, k := range slices.Sorted(maps.Keys(all)) {
			if s, ok := strings.CutPrefix(k, name+" "); ok {
				subs = append(subs, s)
			}
		}
		return fmt.Errorf("server %s has no command %q: it has %s", name, strings.Join(rest[:min(1, len(rest))], ""), strings.Join(subs, ", "))
	}
	var fs *flag.FlagSet
	if sc.flags != nil {
		fs = sc.flags()
	}
	var args []string
	for i := 0; i < len(rest); i++ {
		w := strings.TrimSuffix(strings.TrimPrefix(rest[i], "["), "]")
		switch {
		case rest[i] != w && !strings.HasPrefix(w, "-") && strings.HasSuffix(rest[i], "]"):
			continue // [flags]
		case w == "--":
			args = append(args, rest[i+1:]...)
			i = len(rest)
			continue
		case !strings.HasPrefix(w, "-") || w == "-":
			args = append(args, w)
			continue
		case len(args) > 0 && !sc.anywhere:
			return fmt.Errorf("%s comes after the argument %s, and server %s reads no flags after its arguments: put the flags first", w, args[0], name)
		}
		dashes := w[:len(w)-len(strings.TrimLeft(w, "-"))]
		fname, _, hasValue := strings.Cut(strings.TrimLeft(w, "-"), "=")
		if fname == "h" || fname == "help" {
			continue // every command prints its usage
		}
		var f *flag.Flag
		if fs != nil {
			f = fs.Lookup(fname)
		}
		switch {
		case f == nil:
			return fmt.Errorf("server %s has no flag %s%s", name, dashes, fname)
		case hasValue || isBoolFlag(f):
		case i+1 < len(rest):
			i++ // its value, whatever it looks like, as the flag package reads it
		case !inline:
			return fmt.Errorf("%s%s needs a value", dashes, fname)
		}
	}
	if len(args) > sc.args || !inline && len(args) < sc.args {
		return fmt.Errorf("server %s takes %d arguments, here %d: %q", name, sc.args, len(args), args)
	}
	return nil
}

func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// TestDocsCommands checks every `server` command line in README.md and docs/*.md, in shell
// blocks and in code spans, against the real dispatch and flag sets (checkCommand), and
// that the docs show each command at least once in a block.
func TestDocsCommands(t *testing.T) {
	shown := map[string]bool{}
	for _, d := range readDocs(t) {
		for _, c := range d.Commands() {
			words, ok := serverWords(c.Args)
			if !ok {
				continue
			}
			if err := checkCommand(words, c.Inline); err != nil {
				t.Errorf("%s:%d: %s: %v", d.Path, c.Line, c.Text, err)
			}
			if !c.Inline {
				shown[words[0]] = true
				if len(words) > 1 {
					shown[words[0]+" "+words[1]] = true
				}
			}
		}
	}
	for name := range subcommands() {
		if !shown[name] {
			t.Errorf("no doc shows `server %s` in a shell block: show it in README.md", name)
		}
	}
	for name := range commands() {
		if !slices.ContainsFunc(slices.Collect(maps.Keys(subcommands())), func(k string) bool { return k == name || strings.HasPrefix(k, name+" ") }) {
			t.Errorf("server %s is not in the docs test's subcommands: add it, with what its parser takes", name)
		}
	}
}

// checkCommand's rules, a row each, through the real flag sets.
func TestDocsCheckCommand(t *testing.T) {
	tests := []struct {
		line   string
		inline bool
		want   string // in the error; "" for none
	}{
		{"serve --max-batch 8 --auto-truncate=false --strict-placement", false, ""},
		{"serve [flags]", false, ""},
		{"serve --model m [--packing off]", false, ""},
		{"serve -h", false, ""},
		{"serve --max-batchs 8", false, "server serve has no flag --max-batchs"},
		{"serve -addr", false, "-addr needs a value"},
		{"serve --config", true, ""},
		{"serve extra", false, "server serve takes 0 arguments, here 1"},
		{"quantize --model m", false, `server has no command "quantize"`},
		{"bench compare A.json B.json", false, ""},
		{"bench compare A.json", false, "server bench compare takes 2 arguments, here 1"},
		{"bench compare", true, ""},
		{"bench report --html F bench.json", false, ""},
		{"bench report bench.json --html F", false, "--html comes after the argument bench.json"},
		{"bench report --plan-helm bench.json", false, ""},
		{"bench --self --versions fp32,int8 --slo p95=100ms", false, ""},
		{"bench --plan-helm", true, ""},
		{"inspect minilm --version int8 --json", false, ""},
		{"inspect", false, "server inspect takes 1 arguments, here 0"},
		{"models init --output onnx::Shape_422 DIR", false, ""},
		{"models init DIR --output x", false, ""},
		{"models init", false, "takes 1 arguments"},
		{"models list", false, `server models has no command "list": it has init`},
		{"gate --model m --json", true, ""},
		{"gate --model m --json", false, "--json needs a value"},
		{"plan --report r.json --trace burst --ramp 2m", false, ""},
		{"tune --model m --slo p95=100ms --gate g.json --gate h.json", false, ""},
		{"version", false, ""},
		{"version --short", false, "server version has no flag --short"},
	}
	for _, tt := range tests {
		err := checkCommand(strings.Fields(tt.line), tt.inline)
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("server %s (inline %v): %v, want %q", tt.line, tt.inline, err, tt.want)
		}
	}
}

func TestDocsServerWords(t *testing.T) {
	tests := []struct {
		args string
		want string // the words after the program; "-" for none
	}{
		{"server serve --addr :1", "serve --addr :1"},
		{"./bin/server bench compare a b", "bench compare a b"},
		{"/usr/local/bin/server version", "version"},
		{"taskset -c 1 server serve", "serve"},
		{"go build -o bin/server ./cmd/server", "-"},
		{"go test ./cmd/server -run X", "-"},
		{"server", "-"},
		{"server --help", "-"},
	}
	for _, tt := range tests {
		words, ok := serverWords(strings.Fields(tt.args))
		if got := strings.Join(words, " "); !ok && tt.want != "-" || ok && got != tt.want {
			t.Errorf("serverWords(%s) = %q, %v, want %q", tt.args, got, ok, tt.want)
		}
	}
}

// TestDocsLinks checks every relative link and #anchor in README.md and docs/*.md: the
// file or folder exists, and the anchor is a heading's, by GitHub's rules.
func TestDocsLinks(t *testing.T) {
	for _, d := range readDocs(t) {
		for _, bad := range doccheck.CheckLinks(repoRoot, d) {
			t.Error(bad)
		}
	}
}
