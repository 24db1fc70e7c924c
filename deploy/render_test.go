package deploy

// What chart_test.go renders the chart with: Helm's own library, and a strict decoder of each
// rendered object into its Kubernetes API type.

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/releaseutil"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

const (
	chartDir  = "helm/ortserve"
	namespace = "serving"
)

// scaledObject is the part of KEDA's ScaledObject (keda.sh/v1alpha1) the chart writes.
type scaledObject struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata"`
	Spec            struct {
		ScaleTargetRef struct {
			Name string `json:"name"`
		} `json:"scaleTargetRef"`
		MinReplicaCount *int32 `json:"minReplicaCount"`
		MaxReplicaCount *int32 `json:"maxReplicaCount"`
		PollingInterval *int32 `json:"pollingInterval"`
		Advanced        struct {
			HorizontalPodAutoscalerConfig struct {
				Behavior *autoscalingv2.HorizontalPodAutoscalerBehavior `json:"behavior"`
			} `json:"horizontalPodAutoscalerConfig"`
		} `json:"advanced"`
		Triggers []struct {
			Type       string                         `json:"type"`
			MetricType autoscalingv2.MetricTargetType `json:"metricType"`
			Metadata   map[string]string              `json:"metadata"`
		} `json:"triggers"`
	} `json:"spec"`
}

// serviceMonitor is the part of prometheus-operator's ServiceMonitor (monitoring.coreos.com/v1)
// the chart writes.
type serviceMonitor struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata"`
	Spec            struct {
		Selector        metav1.LabelSelector `json:"selector"`
		PodTargetLabels []string             `json:"podTargetLabels"`
		Endpoints       []struct {
			Port     string `json:"port"`
			Path     string `json:"path"`
			Interval string `json:"interval"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// rendered is a release's objects, decoded.
type rendered struct {
	files       map[string]string // template path → rendered text
	configMaps  map[string]*corev1.ConfigMap
	deployments map[string]*appsv1.Deployment
	services    []*corev1.Service
	pdbs        []*policyv1.PodDisruptionBudget
	hpas        []*autoscalingv2.HorizontalPodAutoscaler
	scaled      []*scaledObject
	monitors    []*serviceMonitor
}

// apiVersions is the apiVersion each kind the chart writes must have.
var apiVersions = map[string]string{
	"ConfigMap": "v1", "Service": "v1", "Deployment": "apps/v1", "PodDisruptionBudget": "policy/v1",
	"HorizontalPodAutoscaler": "autoscaling/v2", "ScaledObject": "keda.sh/v1alpha1",
	"ServiceMonitor": "monitoring.coreos.com/v1",
}

func loadChart(t testing.TB) *chart.Chart {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// renderChart renders the chart as `helm template --namespace serving RELEASE` would, with vals
// over values.yaml (and checked against values.schema.json).
func renderChart(ch *chart.Chart, release string, vals map[string]any) (map[string]string, error) {
	opts := chartutil.ReleaseOptions{Name: release, Namespace: namespace, Revision: 1, IsInstall: true}
	rv, err := chartutil.ToRenderValues(ch, vals, opts, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, err
	}
	return engine.Render(ch, rv)
}

// decode renders the chart and decodes every object strictly.
func decode(t *testing.T, ch *chart.Chart, vals map[string]any) *rendered {
	t.Helper()
	files, err := renderChart(ch, "demo", vals)
	if err != nil {
		t.Fatal(err)
	}
	r := &rendered{files: files, configMaps: map[string]*corev1.ConfigMap{}, deployments: map[string]*appsv1.Deployment{}}
	names := sortedKeys(files)
	for _, name := range names {
		if !strings.HasSuffix(name, ".yaml") {
			continue // NOTES.txt, helpers
		}
		docs := releaseutil.SplitManifests(files[name])
		keys := sortedKeys(docs)
		for _, k := range keys {
			doc := docs[k]
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
				t.Fatalf("%s: %v\n%s", name, err, doc)
			}
			if want, ok := apiVersions[tm.Kind]; !ok || tm.APIVersion != want {
				t.Errorf("%s: %s %s: want one of %v", name, tm.APIVersion, tm.Kind, apiVersions)
				continue
			}
			var obj any
			switch tm.Kind {
			case "ConfigMap":
				o := &corev1.ConfigMap{}
				obj, r.configMaps[name+":"+k] = o, o
			case "Deployment":
				o := &appsv1.Deployment{}
				obj, r.deployments[name+":"+k] = o, o
			case "Service":
				o := &corev1.Service{}
				obj, r.services = o, append(r.services, o)
			case "PodDisruptionBudget":
				o := &policyv1.PodDisruptionBudget{}
				obj, r.pdbs = o, append(r.pdbs, o)
			case "HorizontalPodAutoscaler":
				o := &autoscalingv2.HorizontalPodAutoscaler{}
				obj, r.hpas = o, append(r.hpas, o)
			case "ScaledObject":
				o := &scaledObject{}
				obj, r.scaled = o, append(r.scaled, o)
			case "ServiceMonitor":
				o := &serviceMonitor{}
				obj, r.monitors = o, append(r.monitors, o)
			}
			if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
				t.Errorf("%s: %s does not decode strictly: %v", name, tm.Kind, err)
			}
		}
	}
	// Re-key by object name, now that they are decoded.
	cms, deps := map[string]*corev1.ConfigMap{}, map[string]*appsv1.Deployment{}
	for _, o := range r.configMaps {
		cms[o.Name] = o
	}
	for _, o := range r.deployments {
		deps[o.Name] = o
	}
	r.configMaps, r.deployments = cms, deps
	return r
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func readValues(t testing.TB, path string) map[string]any {
	t.Helper()
	v, err := chartutil.ReadValuesFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return v.AsMap()
}

// serveKeys is every key of serve's config file, from docs/config.md's table ("batching.max_batch_size").
func serveKeys(t *testing.T) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "docs/config.md"))
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z_.]+)` \\| `--").FindAllStringSubmatch(string(data), -1) {
		keys[m[1]] = true
	}
	if len(keys) < 30 || !keys["shutdown_grace"] || !keys["batching.max_batch_size"] {
		t.Fatalf("read %d keys from docs/config.md: has its table changed?", len(keys))
	}
	return keys
}

// flatten is a config file's keys as docs/config.md writes them, with their values.
func flatten(prefix string, m map[string]any, out map[string]any) {
	for k, v := range m {
		if sub, ok := v.(map[string]any); ok {
			flatten(prefix+k+".", sub, out)
		} else {
			out[prefix+k] = v
		}
	}
}

func seconds(t *testing.T, v any) int {
	t.Helper()
	d, err := time.ParseDuration(fmt.Sprint(v))
	if err != nil || d%time.Second != 0 {
		t.Fatalf("duration %v: %v", v, err)
	}
	return int(d / time.Second)
}
