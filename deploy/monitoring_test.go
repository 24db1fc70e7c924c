package deploy

// The Grafana dashboard, the Prometheus rules, the prometheus-adapter rules and the chart's
// KEDA queries: each must be what its consumer accepts, every query must parse as PromQL, and
// the metric names they use, together, must be deploy/metrics.txt, which cmd/server's
// TestDeployMetricsServed checks against a live server's /metrics.

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"
)

// dsRef is a panel's or target's datasource.
type dsRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// dashboard is what Grafana's dashboard JSON model (schemaVersion 39) has, of what this one
// uses; decoded strictly, so a misplaced field fails.
type dashboard struct {
	UID           string `json:"uid"`
	Title         string `json:"title"`
	Description   string `json:"description"`
	Tags          []string
	SchemaVersion int    `json:"schemaVersion"`
	Version       int    `json:"version"`
	Editable      bool   `json:"editable"`
	GraphTooltip  int    `json:"graphTooltip"`
	Refresh       string `json:"refresh"`
	Time          struct {
		From string `json:"from"`
		To   string `json:"to"`
	} `json:"time"`
	Timezone    string `json:"timezone"`
	Annotations struct {
		List []json.RawMessage `json:"list"`
	} `json:"annotations"`
	Links      []json.RawMessage `json:"links"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Label      string `json:"label"`
			Type       string `json:"type"`
			Datasource *dsRef `json:"datasource"`
			Query      any    `json:"query"` // a string (datasource) or {query, refId}
			Definition string `json:"definition"`
			IncludeAll bool   `json:"includeAll"`
			Multi      bool   `json:"multi"`
			AllValue   string `json:"allValue"`
			Current    map[string]any
			Hide       int `json:"hide"`
			Refresh    int `json:"refresh"`
			Sort       int `json:"sort"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		ID          int    `json:"id"`
		Type        string `json:"type"`
		Title       string `json:"title"`
		Description string `json:"description"`
		Datasource  *dsRef `json:"datasource"`
		GridPos     struct {
			H int `json:"h"`
			W int `json:"w"`
			X int `json:"x"`
			Y int `json:"y"`
		} `json:"gridPos"`
		Targets []struct {
			RefID        string `json:"refId"`
			Datasource   *dsRef `json:"datasource"`
			Expr         string `json:"expr"`
			LegendFormat string `json:"legendFormat"`
			Range        bool   `json:"range"`
			Instant      bool   `json:"instant"`
			Format       string `json:"format"`
		} `json:"targets"`
		FieldConfig struct {
			Defaults  map[string]any `json:"defaults"`
			Overrides []any          `json:"overrides"`
		} `json:"fieldConfig"`
		Options map[string]any `json:"options"`
	} `json:"panels"`
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	data, err := os.ReadFile("grafana/ortserve.json")
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var d dashboard
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("grafana/ortserve.json: %v", err)
	}
	return d
}

var promql = parser.NewParser(parser.Options{})

// metricNames parses expr as PromQL and returns the metric names it selects.
func metricNames(t *testing.T, where, expr string) []string {
	t.Helper()
	e, err := promql.ParseExpr(expr)
	if err != nil {
		t.Errorf("%s: %q does not parse as PromQL: %v", where, expr, err)
		return nil
	}
	var names []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			if vs.Name == "" {
				t.Errorf("%s: a selector without a metric name: %s", where, vs)
			}
			names = append(names, vs.Name)
		}
		return nil
	})
	if len(names) == 0 {
		t.Errorf("%s: %q selects no metric", where, expr)
	}
	return names
}

// grafanaVars stands Grafana's variables in for values, so that a query parses as PromQL.
var grafanaVars = strings.NewReplacer("$__rate_interval", "1m", "$__interval", "1m", "$__range", "1h")

var varRE = regexp.MustCompile(`\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?`)

// dashboardMetrics checks the dashboard's model and returns the metric names its queries use.
func dashboardMetrics(t *testing.T) []string {
	d := readDashboard(t)
	if d.UID == "" || len(d.UID) > 40 || d.Title == "" || d.SchemaVersion < 36 {
		t.Errorf("dashboard uid %q, title %q, schemaVersion %d", d.UID, d.Title, d.SchemaVersion)
	}
	vars := map[string]bool{}
	var names []string
	for _, v := range d.Templating.List {
		vars[v.Name] = true
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(map[string]any)
		query, _ := q["query"].(string)
		m := regexp.MustCompile(`^label_values\((.+), *([a-z_]+)\)$`).FindStringSubmatch(query)
		if m == nil || query != v.Definition {
			t.Errorf("variable %s: query %q: want label_values(SELECTOR, LABEL), the same as its definition", v.Name, query)
			continue
		}
		names = append(names, metricNames(t, "variable "+v.Name, varRE.ReplaceAllString(m[1], "x"))...)
	}
	if !vars["datasource"] {
		t.Error("no datasource variable: panels name ${datasource}")
	}
	ids := map[int]bool{}
	type rect struct{ x, y, w, h int }
	var rects []rect
	for _, p := range d.Panels {
		where := "panel " + p.Title
		if p.ID <= 0 || ids[p.ID] {
			t.Errorf("%s: id %d is not positive and unique", where, p.ID)
		}
		ids[p.ID] = true
		if !slices.Contains([]string{"timeseries", "stat", "table", "gauge", "bargauge"}, p.Type) {
			t.Errorf("%s: panel type %q", where, p.Type)
		}
		g := p.GridPos
		if g.W < 1 || g.H < 1 || g.X < 0 || g.Y < 0 || g.X+g.W > 24 {
			t.Errorf("%s: gridPos %+v is off Grafana's 24-column grid", where, g)
		}
		for _, r := range rects {
			if g.X < r.x+r.w && r.x < g.X+g.W && g.Y < r.y+r.h && r.y < g.Y+g.H {
				t.Errorf("%s: gridPos %+v overlaps another panel's %+v", where, g, r)
			}
		}
		rects = append(rects, rect{g.X, g.Y, g.W, g.H})
		if p.Datasource == nil || p.Datasource.Type != "prometheus" || p.Datasource.UID != "${datasource}" {
			t.Errorf("%s: datasource %+v", where, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("%s: no queries", where)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			if tg.RefID == "" || refs[tg.RefID] {
				t.Errorf("%s: refId %q is not unique", where, tg.RefID)
			}
			refs[tg.RefID] = true
			for _, m := range varRE.FindAllStringSubmatch(tg.Expr, -1) {
				if !vars[m[1]] && !strings.HasPrefix(m[1], "__") {
					t.Errorf("%s: query uses $%s, which the dashboard does not define", where, m[1])
				}
			}
			expr := varRE.ReplaceAllString(grafanaVars.Replace(tg.Expr), "x")
			names = append(names, metricNames(t, where+" "+tg.RefID, expr)...)
		}
	}
	if len(d.Panels) < 8 {
		t.Errorf("%d panels", len(d.Panels))
	}
	return names
}

// rulesMetrics checks deploy/prometheus/rules.yaml as Prometheus loads it, and returns the
// metric names its rules read, less those its recording rules write.
func rulesMetrics(t *testing.T) []string {
	data, err := os.ReadFile("prometheus/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	groups, errs := rulefmt.Parse(data, false, model.LegacyValidation, promql, slog.New(slog.DiscardHandler))
	for _, err := range errs {
		t.Errorf("prometheus/rules.yaml: %v", err)
	}
	if groups == nil {
		return nil
	}
	recorded := map[string]bool{}
	var used []string
	alerts := 0
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				recorded[r.Record] = true
			}
			if r.Alert != "" {
				alerts++
				if r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
					t.Errorf("alert %s: want a severity label, a summary and a description", r.Alert)
				}
			}
			used = append(used, metricNames(t, "rule "+r.Record+r.Alert, r.Expr)...)
		}
	}
	for _, want := range []string{"OrtserveErrorBudgetBurnFast", "OrtserveErrorBudgetBurnSlow", "OrtserveLatencyOverSLO", "OrtserveSustainedQueueing"} {
		if !slices.ContainsFunc(groups.Groups, func(g rulefmt.RuleGroup) bool {
			return slices.ContainsFunc(g.Rules, func(r rulefmt.Rule) bool { return r.Alert == want })
		}) {
			t.Errorf("no alert %s", want)
		}
	}
	var out []string
	for _, n := range used {
		if !recorded[n] {
			out = append(out, n)
		} else if !strings.HasPrefix(n, "ortserve:") {
			t.Errorf("recorded series %s: name it level:metric:operations (ortserve:...)", n)
		}
	}
	return out
}

// adapterRule is one of prometheus-adapter's custom rules.
type adapterRule struct {
	SeriesQuery string `json:"seriesQuery"`
	Resources   struct {
		Overrides map[string]struct {
			Resource string `json:"resource"`
		} `json:"overrides"`
	} `json:"resources"`
	Name struct {
		Matches string `json:"matches"`
		As      string `json:"as"`
	} `json:"name"`
	MetricsQuery string `json:"metricsQuery"`
}

func adapterRules(t *testing.T) []adapterRule {
	t.Helper()
	data, err := os.ReadFile("prometheus-adapter/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Prometheus struct {
			URL  string `json:"url"`
			Port int    `json:"port"`
		} `json:"prometheus"`
		Rules struct {
			Default bool          `json:"default"`
			Custom  []adapterRule `json:"custom"`
		} `json:"rules"`
	}
	if err := yaml.UnmarshalStrict(data, &v); err != nil {
		t.Fatalf("prometheus-adapter/values.yaml: %v", err)
	}
	if len(v.Rules.Custom) == 0 {
		t.Fatal("prometheus-adapter/values.yaml: no rules.custom")
	}
	return v.Rules.Custom
}

// adapterMetrics checks the adapter's rules and returns the metric names their queries use.
// A metricsQuery is a Go template; it is filled as the adapter fills it for an HPA.
func adapterMetrics(t *testing.T) []string {
	var names []string
	for _, r := range adapterRules(t) {
		where := "adapter rule " + r.Name.As
		m, err := promql.ParseMetricSelector(r.SeriesQuery)
		if err != nil {
			t.Errorf("%s: seriesQuery %q: %v", where, r.SeriesQuery, err)
			continue
		}
		series := ""
		for _, l := range m {
			if l.Name == model.MetricNameLabel {
				series = l.Value
			}
		}
		if !regexp.MustCompile(r.Name.Matches).MatchString(series) || r.Name.As != series {
			t.Errorf("%s: serves %s as %q (matches %q)", where, series, r.Name.As, r.Name.Matches)
		}
		for _, l := range []string{"namespace", "pod"} {
			if r.Resources.Overrides[l].Resource != l {
				t.Errorf("%s: label %s must map to the %s resource, for a Pods metric", where, l, l)
			}
		}
		q := strings.NewReplacer("<<.Series>>", series, "<<.LabelMatchers>>", `namespace="serving",pod=~"demo-ortserve-abc-1|demo-ortserve-abc-2"`, "<<.GroupBy>>", "pod").Replace(r.MetricsQuery)
		if strings.Contains(q, "<<") {
			t.Errorf("%s: metricsQuery %q uses a template field this test does not fill", where, r.MetricsQuery)
		}
		names = append(names, series)
		names = append(names, metricNames(t, where, q)...)
	}
	return names
}

// kedaMetrics renders the chart's ScaledObject for each metric and returns the metric names
// its Prometheus queries use.
func kedaMetrics(t *testing.T) []string {
	ch := loadChart(t)
	var names []string
	for _, metric := range []string{"inflight", "queue"} {
		files, err := renderChart(ch, "demo", map[string]any{"keda": map[string]any{"enabled": true}, "autoscaling": map[string]any{"metric": metric}})
		if err != nil {
			t.Fatal(err)
		}
		var so scaledObject
		if err := yaml.UnmarshalStrict([]byte(files["ortserve/templates/scaledobject.yaml"]), &so); err != nil {
			t.Fatal(err)
		}
		for _, tr := range so.Spec.Triggers {
			names = append(names, metricNames(t, "KEDA "+metric, tr.Metadata["query"])...)
		}
	}
	return names
}

func TestMonitoringMetrics(t *testing.T) {
	used := map[string][]string{} // metric → who uses it
	for who, names := range map[string][]string{
		"dashboard": dashboardMetrics(t),
		"rules":     rulesMetrics(t),
		"adapter":   adapterMetrics(t),
		"keda":      kedaMetrics(t),
	} {
		for _, n := range names {
			if !slices.Contains(used[n], who) {
				used[n] = append(used[n], who)
			}
		}
	}
	got := sortedKeys(used)
	data, err := os.ReadFile("metrics.txt")
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Fields(string(data))
	if !sort.StringsAreSorted(want) || len(slices.Compact(slices.Clone(want))) != len(want) {
		t.Error("metrics.txt: keep it sorted, one name a line, no repeats")
	}
	if !slices.Equal(got, want) {
		var b strings.Builder
		for _, n := range got {
			b.WriteString(n + "\n")
		}
		t.Errorf("deploy/metrics.txt is not the names the dashboard, rules, adapter and KEDA use; they use:\n%s", b.String())
	}
	// Each is one of the server's metrics, as docs/metrics.md lists them.
	doc, err := os.ReadFile(filepath.Join(repoRoot, "docs/metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range got {
		base := regexp.MustCompile(`_(bucket|sum|count)$`).ReplaceAllString(n, "")
		if !bytes.Contains(doc, []byte("| `"+n+"` |")) && !bytes.Contains(doc, []byte("| `"+base+"` | histogram |")) {
			t.Errorf("%s (used by %v) is not a metric in docs/metrics.md", n, used[n])
		}
	}
}
