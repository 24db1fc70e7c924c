package deploy

// The container images are checked without a Docker engine: both Dockerfiles are parsed with
// BuildKit's own parser (the one `docker build` uses), and what they copy, run and declare is
// checked against the repository, the Makefile and .dockerignore.

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/linter"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
)

// repoRoot is the main module's root, the build context of both Dockerfiles.
const repoRoot = ".."

var dockerfiles = []string{"Dockerfile", "Dockerfile.cuda"}

type dockerfile struct {
	name     string
	stages   []instructions.Stage
	args     map[string]string // global ARGs (before the first FROM) and their defaults
	warnings []string          // BuildKit's build checks
}

func parseDockerfile(t *testing.T, name string) dockerfile {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, name))
	if err != nil {
		t.Fatal(err)
	}
	res, err := parser.Parse(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	d := dockerfile{name: name, args: map[string]string{}}
	for _, w := range res.Warnings {
		d.warnings = append(d.warnings, w.Short)
	}
	lint := linter.New(&linter.Config{Warn: func(rule, desc, url, msg string, loc []parser.Range) {
		d.warnings = append(d.warnings, rule+": "+msg)
	}})
	stages, metaArgs, err := instructions.Parse(res.AST, lint)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	d.stages = stages
	for _, a := range metaArgs {
		for _, kv := range a.Args {
			d.args[kv.Key] = kv.ValueString()
		}
	}
	return d
}

// stage is the stage called name, or nil.
func (d dockerfile) stage(name string) *instructions.Stage {
	for i := range d.stages {
		if d.stages[i].Name == name {
			return &d.stages[i]
		}
	}
	return nil
}

// runs is the shell text of every RUN of a stage.
func runs(s *instructions.Stage) []string {
	var out []string
	for _, c := range s.Commands {
		if r, ok := c.(*instructions.RunCommand); ok {
			out = append(out, strings.Join(r.CmdLine, " "))
		}
	}
	return out
}

func commands[T instructions.Command](s *instructions.Stage) []T {
	var out []T
	for _, c := range s.Commands {
		if v, ok := c.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

// makefile is what the tests need of the Makefile: variables (NAME := value) and each target's
// prerequisites and recipe.
type makefile struct {
	vars    map[string]string
	prereqs map[string][]string
	recipes map[string][]string
}

func readMakefile(t *testing.T) makefile {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := makefile{vars: map[string]string{}, prereqs: map[string][]string{}, recipes: map[string][]string{}}
	varRE := regexp.MustCompile(`^([A-Z_]+)\s*[:?]?=\s*(.*)$`)
	ruleRE := regexp.MustCompile(`^([a-z][a-z-]*):([^=].*)?$`)
	target := ""
	for _, line := range strings.Split(string(data), "\n") {
		switch {
		case strings.HasPrefix(line, "\t") && target != "":
			m.recipes[target] = append(m.recipes[target], strings.TrimSpace(line))
		case varRE.MatchString(line):
			g := varRE.FindStringSubmatch(line)
			m.vars[g[1]] = strings.TrimSpace(g[2])
			target = ""
		case ruleRE.MatchString(line):
			g := ruleRE.FindStringSubmatch(line)
			target = g[1]
			deps, _, _ := strings.Cut(g[2], "##")
			m.prereqs[target] = strings.Fields(deps)
			m.recipes[target] = nil
		default:
			target = ""
		}
	}
	return m
}

// targetPaths is every repository path the recipes of target and its prerequisites name:
// scripts/... and ./... words.
func (m makefile) targetPaths(t *testing.T, target string, seen map[string]bool) []string {
	t.Helper()
	if seen[target] {
		return nil
	}
	seen[target] = true
	if _, ok := m.recipes[target]; !ok {
		t.Errorf("make %s: no such target in the Makefile", target)
		return nil
	}
	var out []string
	for _, p := range m.prereqs[target] {
		out = append(out, m.targetPaths(t, p, seen)...)
	}
	for _, line := range m.recipes[target] {
		out = append(out, pathWords(line)...)
	}
	return out
}

var pathWordRE = regexp.MustCompile(`^(\./)?[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)+/?$`)

// pathWords is the words of a shell or recipe line that are relative paths: scripts/x.sh,
// ./cmd/server. Words with variables, options and absolute paths are left out.
func pathWords(line string) []string {
	var out []string
	for _, w := range strings.Fields(line) {
		w = strings.TrimPrefix(strings.Trim(w, `"'`), "@")
		if pathWordRE.MatchString(w) {
			out = append(out, w)
		}
	}
	return out
}

// dockerignore is the build context's exclusion patterns.
func dockerignore(t *testing.T) *patternmatcher.PatternMatcher {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	patterns, err := ignorefile.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		t.Fatal(err)
	}
	return pm
}

// inContext fails unless path exists in the repository and .dockerignore keeps it in the
// build context.
func inContext(t *testing.T, pm *patternmatcher.PatternMatcher, where, path string) {
	t.Helper()
	clean := filepath.Clean(path)
	if _, err := os.Stat(filepath.Join(repoRoot, clean)); err != nil {
		t.Errorf("%s: %s is not in the repository", where, path)
		return
	}
	if ignored, err := pm.MatchesOrParentMatches(clean); err != nil || ignored {
		t.Errorf("%s: %s is excluded from the build context by .dockerignore (%v)", where, path, err)
	}
}

func TestDockerfiles(t *testing.T) {
	mk := readMakefile(t)
	pm := dockerignore(t)
	// What the Makefile builds rather than finds: BIN (bin/server).
	outputs := map[string]bool{mk.vars["BIN"]: true}
	if !outputs["bin/server"] {
		t.Fatalf("Makefile BIN is %q; the Dockerfiles copy bin/server", mk.vars["BIN"])
	}
	for _, name := range dockerfiles {
		t.Run(name, func(t *testing.T) {
			d := parseDockerfile(t, name)
			for _, w := range d.warnings {
				t.Errorf("BuildKit check: %s", w)
			}
			if got, want := d.args["ORT_VERSION"], mk.vars["ORT_VERSION"]; got != want {
				t.Errorf("ARG ORT_VERSION=%s, the Makefile's ORT_VERSION is %s", got, want)
			}
			for _, arg := range []string{"RUST_IMAGE", "GO_IMAGE"} {
				if img := d.args[arg]; !regexp.MustCompile(`^[a-z0-9./-]+:[0-9][A-Za-z0-9._-]*$`).MatchString(img) {
					t.Errorf("ARG %s=%q: pin a versioned tag", arg, img)
				}
			}
			for _, v := range []string{"none", "built"} {
				if d.stage("models-"+v) == nil {
					t.Errorf("no stage models-%s for --build-arg MODELS=%s", v, v)
				}
			}
			if def := d.args["MODELS"]; d.stage("models-"+def) == nil {
				t.Errorf("ARG MODELS=%q: no stage models-%s", def, def)
			}

			defined := map[string]bool{}
			for i := range d.stages {
				s := &d.stages[i]
				where := name + " stage " + cmpOr(s.Name, "final")
				for _, c := range commands[*instructions.CopyCommand](s) {
					if c.From == "" {
						for _, src := range c.SourcePaths {
							inContext(t, pm, where+" COPY", src)
						}
						continue
					}
					from := d.stage(c.From)
					if !defined[c.From] || from == nil {
						t.Errorf("%s: COPY --from=%s: no earlier stage of that name", where, c.From)
						continue
					}
					if len(runs(from)) == 0 {
						continue // an image, such as the Go toolchain's
					}
					// The source must be written by the stage (or the stages it builds on).
					written := strings.Join(stageRuns(d, from), " ")
					for _, src := range c.SourcePaths {
						word := regexp.MustCompile(`(^|[\s"'])` + regexp.QuoteMeta(strings.TrimSuffix(src, "/")) + `([\s"'/]|$)`)
						if !word.MatchString(written) {
							t.Errorf("%s: COPY --from=%s %s: no RUN of that stage writes it", where, c.From, src)
						}
					}
				}
				for _, r := range runs(s) {
					for _, target := range makeTargets(r) {
						for _, p := range mk.targetPaths(t, target, map[string]bool{}) {
							inContext(t, pm, where+" make "+target, p)
						}
					}
					dir := "."
					for _, seg := range strings.Split(r, "&&") {
						f := strings.Fields(seg)
						if len(f) == 2 && f[0] == "cd" {
							dir = filepath.Join(dir, f[1])
							inContext(t, pm, where+" RUN cd", dir)
							continue
						}
						in := dir // `go -C DIR` runs in DIR
						for i := 1; i+1 < len(f); i++ {
							if f[i] == "-C" && f[i-1] == "go" {
								in = filepath.Join(dir, f[i+1])
								inContext(t, pm, where+" RUN go -C", in)
							}
						}
						for _, p := range pathWords(seg) {
							if full := filepath.Join(in, p); !outputs[full] {
								inContext(t, pm, where+" RUN", full)
							}
						}
					}
				}
				if s.Name != "" {
					defined[s.Name] = true
				}
			}

			final := &d.stages[len(d.stages)-1]
			users := commands[*instructions.UserCommand](final)
			if len(users) == 0 {
				t.Fatal("final stage: no USER: the server would run as root")
			}
			user := users[len(users)-1].User
			if uid, _, _ := strings.Cut(user, ":"); uid == "root" || uid == "0" || !regexp.MustCompile(`^[1-9][0-9]*$`).MatchString(uid) {
				t.Errorf("final stage: USER %s: want a numeric non-root uid (Kubernetes' runAsNonRoot checks it)", user)
			}
			hc := commands[*instructions.HealthCheckCommand](final)
			if len(hc) != 1 || !slices.Equal(hc[0].Health.Test, []string{"CMD", "healthcheck"}) {
				t.Errorf("final stage: want HEALTHCHECK ... CMD [\"healthcheck\"], got %+v", hc)
			}
			if ss := commands[*instructions.StopSignalCommand](final); len(ss) != 1 || ss[0].Signal != "SIGTERM" {
				t.Errorf("final stage: want STOPSIGNAL SIGTERM (serve drains on it), got %+v", ss)
			}
			if ex := commands[*instructions.ExposeCommand](final); len(ex) != 1 || !slices.Equal(ex[0].Ports, []string{"8080"}) {
				t.Errorf("final stage: want EXPOSE 8080, got %+v", ex)
			}
			if ep := commands[*instructions.EntrypointCommand](final); len(ep) != 1 || ep[0].PrependShell || !slices.Equal(ep[0].CmdLine, []string{"server", "serve"}) {
				t.Errorf("final stage: want ENTRYPOINT [\"server\", \"serve\"] in exec form (signals reach serve), got %+v", ep)
			}
			if cmd := commands[*instructions.CmdCommand](final); len(cmd) != 1 || !slices.Equal(cmd[0].CmdLine, []string{"--models", "/models"}) {
				t.Errorf("final stage: want CMD [\"--models\", \"/models\"], got %+v", cmd)
			}
			var copied []string
			for _, c := range commands[*instructions.CopyCommand](final) {
				for _, src := range c.SourcePaths {
					copied = append(copied, c.From+":"+src+"->"+c.DestPath)
				}
			}
			for _, want := range []string{"build:/out/server->/usr/local/bin/", "build:/out/healthcheck->/usr/local/bin/", "models:/out/models/->/models/", "build:/out/ort/->/opt/ort/"} {
				if !slices.Contains(copied, want) {
					t.Errorf("final stage copies %v; want %s", copied, want)
				}
			}
		})
	}
}

// The two images are one build on two bases: what a deployment relies on must match.
func TestDockerfilesInStep(t *testing.T) {
	cpu, cuda := parseDockerfile(t, "Dockerfile"), parseDockerfile(t, "Dockerfile.cuda")
	for _, arg := range []string{"RUST_IMAGE", "GO_IMAGE", "MODELS", "ORT_VERSION"} {
		if cpu.args[arg] != cuda.args[arg] {
			t.Errorf("ARG %s: %q in Dockerfile, %q in Dockerfile.cuda", arg, cpu.args[arg], cuda.args[arg])
		}
	}
	summary := func(d dockerfile) []string {
		var out []string
		for _, c := range d.stages[len(d.stages)-1].Commands {
			switch c := c.(type) {
			case *instructions.UserCommand, *instructions.ExposeCommand, *instructions.StopSignalCommand,
				*instructions.HealthCheckCommand, *instructions.EntrypointCommand, *instructions.CmdCommand,
				*instructions.EnvCommand:
				out = append(out, strings.Join(strings.Fields(c.(fmt.Stringer).String()), " "))
			}
		}
		return out
	}
	if a, b := summary(cpu), summary(cuda); !slices.Equal(a, b) {
		t.Errorf("final stages differ:\nDockerfile:      %q\nDockerfile.cuda: %q", a, b)
	}
	// The CUDA build is the CPU build plus the CUDA providers.
	want := strings.Replace(runs(cpu.stage("build"))[0], "make ort build", "make ort ort-cuda build", 1)
	want = strings.Replace(want, `cp -L "/cache/ort/${ORT_VERSION}/libonnxruntime.so.1" /out/ort/`, `cp -a "/cache/ort/${ORT_VERSION}/." /out/ort/`, 1)
	if got := runs(cuda.stage("build"))[0]; got != want {
		t.Errorf("build stages differ beyond the CUDA providers:\nDockerfile.cuda: %s\nwant:            %s", got, want)
	}
	if a, b := runs(cpu.stage("models-built")), runs(cuda.stage("models-built")); !slices.Equal(a, b) {
		t.Errorf("models-built stages differ:\n%q\n%q", a, b)
	}
}

// .dockerignore keeps out what must not reach the build, and nothing the build needs.
func TestDockerignore(t *testing.T) {
	pm := dockerignore(t)
	for _, p := range []string{".git", "bin/server", "bench-out/x.json", "cmd/server/server.test"} {
		if ignored, _ := pm.MatchesOrParentMatches(p); !ignored {
			t.Errorf(".dockerignore lets %s into the build context", p)
		}
	}
	need := []string{"Makefile", "go.mod", "go.sum", "deploy/go.mod"}
	err := filepath.WalkDir(repoRoot, func(path string, e os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, path)
		if e.IsDir() && (rel == ".git" || rel == "bin" || rel == "bench-out" || rel == "tune-out" || e.Name() == "__pycache__") {
			return filepath.SkipDir
		}
		if !e.IsDir() && (strings.HasPrefix(rel, "scripts/") || strings.HasSuffix(rel, ".go") && !strings.HasSuffix(rel, "_test.go")) {
			need = append(need, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(need) < 50 {
		t.Fatalf("found only %d files the build needs: is the walk wrong?", len(need))
	}
	for _, p := range need {
		inContext(t, pm, "the build", p)
	}
}

// stageRuns is the RUNs of s and of the stages it is built FROM.
func stageRuns(d dockerfile, s *instructions.Stage) []string {
	out := runs(s)
	if base := d.stage(s.BaseName); base != nil && base != s {
		out = append(out, stageRuns(d, base)...)
	}
	return out
}

// makeTargets is the targets of the `make` commands in a RUN.
func makeTargets(run string) []string {
	var out []string
	for _, seg := range strings.Split(run, "&&") {
		f := strings.Fields(seg)
		for i, w := range f {
			if w != "make" {
				continue
			}
			for _, a := range f[i+1:] {
				if strings.Contains(a, "=") || strings.HasPrefix(a, "-") {
					continue
				}
				out = append(out, a)
			}
			break
		}
	}
	return out
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
