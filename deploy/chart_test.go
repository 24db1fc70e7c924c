package deploy

// The Helm chart is linted and rendered with Helm's own library (what `helm lint` and
// `helm template` run) for every values file in deploy/helm/ortserve/ci, and each rendered
// object is decoded strictly into its Kubernetes API type: a misspelt or misplaced field fails.

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

func TestChartLint(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(chartDir, "ci", "*-values.yaml"))
	if len(files) < 8 {
		t.Fatalf("%d values files in ci/", len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			l := lint.All(chartDir, readValues(t, f), namespace, false)
			for _, m := range l.Messages {
				if m.Severity >= support.WarningSev {
					t.Errorf("helm lint: %s", m)
				}
			}
		})
	}
}

// TestChart renders every ci/ values file and checks what each one is for, and what must hold
// for all: probes, the shutdown timing, serve's config, the selectors.
func TestChart(t *testing.T) {
	ch := loadChart(t)
	known := serveKeys(t)
	checks := map[string]func(t *testing.T, r *rendered){
		"default-values.yaml": func(t *testing.T, r *rendered) {
			d := stable(t, r)
			if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 || len(r.hpas)+len(r.scaled)+len(r.monitors) != 0 {
				t.Errorf("defaults: want 2 replicas and no HPA, ScaledObject or ServiceMonitor")
			}
			if img := d.Spec.Template.Spec.Containers[0].Image; img != "ortserve:0.1.0" {
				t.Errorf("image %s", img)
			}
			// serve sizes its sessions from GOMAXPROCS, which follows the CPU limit.
			if c := serveConfig(t, r, "demo-ortserve"); c["device"] != "cpu" || c["sessions"] != nil {
				t.Errorf("CPU pods: want device cpu and no sessions (serve follows the CPU limit), got %v", c)
			}
			if len(d.Spec.Template.Spec.InitContainers) != 0 || hasVolume(d, "models") {
				t.Error("baked models: no init container and no models volume")
			}
			if len(r.pdbs) != 1 || r.pdbs[0].Spec.MaxUnavailable.IntValue() != 1 {
				t.Error("want a PodDisruptionBudget with maxUnavailable 1")
			}
		},
		"hpa-values.yaml": func(t *testing.T, r *rendered) {
			if stable(t, r).Spec.Replicas != nil {
				t.Error("with the HPA, the Deployment must leave replicas to it")
			}
			h := onlyHPA(t, r)
			checkHPA(t, h, "ortserve_requests_in_flight", "8", 2, 10, 0, 300)
			if len(r.monitors) != 1 || r.monitors[0].Metadata.Labels["release"] != "kube-prometheus-stack" || r.monitors[0].Spec.Endpoints[0].Path != "/metrics" ||
				!slices.Equal(r.monitors[0].Spec.PodTargetLabels, []string{"ortserve.dev/track"}) {
				t.Errorf("ServiceMonitor: %+v", r.monitors)
			}
			if c := serveConfig(t, r, "demo-ortserve"); c["slo"] != "p95=100ms" {
				t.Errorf("config.slo not rendered: %v", c)
			}
		},
		"hpa-queue-values.yaml": func(t *testing.T, r *rendered) {
			checkHPA(t, onlyHPA(t, r), "ortserve_queue_requests", "2500m", 3, 20, 30, 600)
		},
		"keda-values.yaml": func(t *testing.T, r *rendered) {
			if len(r.hpas) != 0 || len(r.scaled) != 1 {
				t.Fatalf("KEDA: want a ScaledObject and no HPA, got %d and %d", len(r.scaled), len(r.hpas))
			}
			s := r.scaled[0].Spec
			tr := s.Triggers
			if s.ScaleTargetRef.Name != "demo-ortserve" || *s.MinReplicaCount != 2 || *s.MaxReplicaCount != 12 || len(tr) != 1 ||
				tr[0].Type != "prometheus" || tr[0].MetricType != autoscalingv2.AverageValueMetricType ||
				tr[0].Metadata["threshold"] != "6" || tr[0].Metadata["serverAddress"] != "http://prometheus-operated.monitoring:9090" ||
				!strings.Contains(tr[0].Metadata["query"], "ortserve_requests_in_flight{") {
				t.Errorf("ScaledObject: %+v", s)
			}
			if b := s.Advanced.HorizontalPodAutoscalerConfig.Behavior; b == nil || *b.ScaleDown.StabilizationWindowSeconds != 300 {
				t.Errorf("ScaledObject behavior: %+v", b)
			}
			if stable(t, r).Spec.Replicas != nil {
				t.Error("with KEDA, the Deployment must leave replicas to it")
			}
		},
		"gpu-values.yaml": func(t *testing.T, r *rendered) {
			p := stable(t, r).Spec.Template.Spec
			c := p.Containers[0]
			if q := c.Resources.Limits["nvidia.com/gpu"]; q.Value() != 1 {
				t.Errorf("nvidia.com/gpu limit %v", q)
			}
			if c.Image != "ortserve:0.1.0-cuda" || p.NodeSelector["nvidia.com/gpu.present"] != "true" ||
				!slices.ContainsFunc(p.Tolerations, func(t corev1.Toleration) bool { return t.Key == "nvidia.com/gpu" }) {
				t.Errorf("GPU pod: image %s, nodeSelector %v, tolerations %v", c.Image, p.NodeSelector, p.Tolerations)
			}
			if cfg := serveConfig(t, r, "demo-ortserve"); cfg["device"] != "cuda" || cfg["sessions"] != nil || cfg["batching.max_batch_size"] != float64(64) {
				t.Errorf("GPU config: %v", cfg)
			}
		},
		"models-pvc-values.yaml": func(t *testing.T, r *rendered) {
			d := stable(t, r)
			v := volume(t, d, "models")
			if v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != "ortserve-models" || !v.PersistentVolumeClaim.ReadOnly {
				t.Errorf("models volume %+v", v)
			}
			m := mount(t, d.Spec.Template.Spec.Containers[0], "models")
			if m.MountPath != "/models" || m.SubPath != "repository" || !m.ReadOnly {
				t.Errorf("models mount %+v", m)
			}
		},
		"models-image-values.yaml": func(t *testing.T, r *rendered) {
			d := stable(t, r)
			ic := d.Spec.Template.Spec.InitContainers
			if len(ic) != 1 || ic[0].Image != "registry.example.com/ortserve-models:2026-12-01" ||
				!slices.Equal(ic[0].Command, []string{"cp", "-R", "/models/.", "/models-out/"}) || mount(t, ic[0], "models").MountPath != "/models-out" {
				t.Errorf("init container %+v", ic)
			}
			if v := volume(t, d, "models"); v.EmptyDir == nil || v.EmptyDir.SizeLimit.String() != "2Gi" {
				t.Errorf("models volume %+v", v)
			}
		},
		"models-download-values.yaml": func(t *testing.T, r *rendered) {
			d := stable(t, r)
			ic := d.Spec.Template.Spec.InitContainers
			if len(ic) != 1 || ic[0].Image != "curlimages/curl:8.11.1" || len(ic[0].Env) != 1 || mount(t, ic[0], "models").MountPath != "/models" {
				t.Errorf("init container %+v", ic)
			}
		},
		"canary-values.yaml": func(t *testing.T, r *rendered) {
			c, ok := r.deployments["demo-ortserve-canary"]
			if !ok || len(r.deployments) != 2 {
				t.Fatalf("want a stable and a canary Deployment, got %v", sortedKeys(r.deployments))
			}
			if *c.Spec.Replicas != 1 || *stable(t, r).Spec.Replicas != 4 || c.Spec.Template.Spec.Containers[0].Image != "ortserve:0.2.0-rc.1" {
				t.Errorf("canary: %d replicas of %s", *c.Spec.Replicas, c.Spec.Template.Spec.Containers[0].Image)
			}
			if cfg := serveConfig(t, r, "demo-ortserve-canary"); cfg["batching.max_batch_size"] != float64(16) || cfg["batching.max_queue_requests"] != float64(1024) {
				t.Errorf("canary config: %v", cfg)
			}
			if cfg := serveConfig(t, r, "demo-ortserve"); cfg["batching.max_batch_size"] != nil || cfg["auth.api_key_file"] != "/etc/ortserve/auth/api-keys" || cfg["auth.exempt"] != "health,metrics" {
				t.Errorf("stable config: %v", cfg)
			}
			if v := volume(t, c, "auth"); v.Secret == nil || v.Secret.SecretName != "ortserve-api-keys" || v.Secret.Items[0].Path != "api-keys" {
				t.Errorf("auth volume %+v", v)
			}
			if m := mount(t, c.Spec.Template.Spec.Containers[0], "auth"); m.MountPath+"/api-keys" != "/etc/ortserve/auth/api-keys" {
				t.Errorf("auth mount %+v: serve reads /etc/ortserve/auth/api-keys", m)
			}
		},
	}
	files, _ := filepath.Glob(filepath.Join(chartDir, "ci", "*-values.yaml"))
	for _, f := range files {
		name := filepath.Base(f)
		t.Run(name, func(t *testing.T) {
			check, ok := checks[name]
			if !ok {
				t.Fatalf("no checks for %s: add them to TestChart", name)
			}
			r := decode(t, ch, readValues(t, f))
			checkCommon(t, r, known)
			check(t, r)
		})
	}
}

// checkCommon is what every rendering must satisfy.
func checkCommon(t *testing.T, r *rendered, known map[string]bool) {
	t.Helper()
	if len(r.services) != 1 {
		t.Fatalf("%d Services", len(r.services))
	}
	svc := r.services[0]
	for name, d := range r.deployments {
		for _, n := range []string{d.Name, svc.Name} {
			if errs := validation.IsDNS1123Subdomain(n); len(errs) > 0 {
				t.Errorf("name %s: %v", n, errs)
			}
		}
		for k, v := range d.Spec.Template.Labels {
			if errs := append(validation.IsQualifiedName(k), validation.IsValidLabelValue(v)...); len(errs) > 0 {
				t.Errorf("%s: label %s=%s: %v", name, k, v, errs)
			}
		}
		pod := labels.Set(d.Spec.Template.Labels)
		sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
		if err != nil || !sel.Matches(pod) {
			t.Errorf("%s: selector %v does not match its pods' labels %v", name, d.Spec.Selector, pod)
		}
		if !labels.SelectorFromSet(svc.Spec.Selector).Matches(pod) {
			t.Errorf("Service selector %v misses %s's pods", svc.Spec.Selector, name)
		}
		for _, pdb := range r.pdbs {
			if s, _ := metav1.LabelSelectorAsSelector(pdb.Spec.Selector); !s.Matches(pod) {
				t.Errorf("PodDisruptionBudget misses %s's pods", name)
			}
		}

		spec := d.Spec.Template.Spec
		c := spec.Containers[0]
		if spec.SecurityContext == nil || spec.SecurityContext.RunAsNonRoot == nil || !*spec.SecurityContext.RunAsNonRoot ||
			spec.SecurityContext.RunAsUser == nil || *spec.SecurityContext.RunAsUser != 65532 {
			t.Errorf("%s: pods must run as the images' uid 65532, non-root", name)
		}
		if !slices.Equal(c.Args, []string{"--config", "/etc/ortserve/config/serve.yaml"}) || mount(t, c, "config").MountPath != "/etc/ortserve/config" {
			t.Errorf("%s: args %v: serve must read the mounted config", name, c.Args)
		}
		if len(c.Ports) != 1 || c.Ports[0].Name != "http" || len(c.Env) == 0 || c.Env[0].Name != "ORTSERVE_ADDR" ||
			c.Env[0].Value != fmt.Sprintf("0.0.0.0:%d", c.Ports[0].ContainerPort) || svc.Spec.Ports[0].TargetPort.StrVal != "http" {
			t.Errorf("%s: port %v, env %v, Service port %v", name, c.Ports, c.Env, svc.Spec.Ports)
		}
		for probe, want := range map[*corev1.Probe]string{c.StartupProbe: "/v2/health/live", c.LivenessProbe: "/v2/health/live", c.ReadinessProbe: "/health"} {
			if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != want || probe.HTTPGet.Port.StrVal != "http" {
				t.Errorf("%s: probe %+v, want GET %s on port http", name, probe, want)
			}
		}
		// Shutdown: serve's grace ends a second before the kubelet's SIGKILL; the drain delay
		// outlasts the readiness probe's detection of the 503.
		cfg := serveConfig(t, r, spec.Volumes[0].ConfigMap.Name)
		grace, drain := seconds(t, cfg["shutdown_grace"]), seconds(t, cfg["shutdown_drain_delay"])
		tgps := int(*spec.TerminationGracePeriodSeconds)
		rp := c.ReadinessProbe
		if grace != tgps-1 || drain >= grace || drain <= int(rp.PeriodSeconds*rp.FailureThreshold) || c.Lifecycle != nil && c.Lifecycle.PreStop != nil {
			t.Errorf("%s: terminationGracePeriodSeconds %d, shutdown_grace %ds, drain delay %ds, readiness %d×%d", name, tgps, grace, drain, rp.PeriodSeconds, rp.FailureThreshold)
		}
		if cfg["models"] != "/models" {
			t.Errorf("%s: config models %v", name, cfg["models"])
		}
		for k := range cfg {
			if !known[k] {
				t.Errorf("%s: config key %s is not one of serve's (docs/config.md): serve would refuse to start", name, k)
			}
		}
		if want := d.Spec.Template.Annotations["checksum/config"]; len(want) != 64 {
			t.Errorf("%s: no checksum/config annotation: a config change would not roll the pods", name)
		}
	}
}

func stable(t *testing.T, r *rendered) *appsv1.Deployment {
	t.Helper()
	d, ok := r.deployments["demo-ortserve"]
	if !ok {
		t.Fatalf("no Deployment demo-ortserve in %v", sortedKeys(r.deployments))
	}
	return d
}

func onlyHPA(t *testing.T, r *rendered) *autoscalingv2.HorizontalPodAutoscaler {
	t.Helper()
	if len(r.hpas) != 1 || len(r.scaled) != 0 {
		t.Fatalf("want one HPA and no ScaledObject, got %d and %d", len(r.hpas), len(r.scaled))
	}
	return r.hpas[0]
}

func checkHPA(t *testing.T, h *autoscalingv2.HorizontalPodAutoscaler, metric, target string, lo, hi, up, down int32) {
	t.Helper()
	s := h.Spec
	if s.ScaleTargetRef.Kind != "Deployment" || s.ScaleTargetRef.Name != "demo-ortserve" || *s.MinReplicas != lo || s.MaxReplicas != hi {
		t.Errorf("HPA target %+v, %d-%d replicas", s.ScaleTargetRef, *s.MinReplicas, s.MaxReplicas)
	}
	if len(s.Metrics) != 1 || s.Metrics[0].Type != autoscalingv2.PodsMetricSourceType || s.Metrics[0].Pods.Metric.Name != metric ||
		s.Metrics[0].Pods.Target.Type != autoscalingv2.AverageValueMetricType || s.Metrics[0].Pods.Target.AverageValue.String() != target {
		t.Errorf("HPA metrics %+v, want Pods %s averaging %s", s.Metrics, metric, target)
	}
	if b := s.Behavior; b == nil || *b.ScaleUp.StabilizationWindowSeconds != up || *b.ScaleDown.StabilizationWindowSeconds != down {
		t.Errorf("HPA behavior %+v", b)
	}
}

// serveConfig is the serve.yaml of ConfigMap name, flattened to docs/config.md's keys.
func serveConfig(t *testing.T, r *rendered, name string) map[string]any {
	t.Helper()
	cm, ok := r.configMaps[name]
	if !ok {
		t.Fatalf("no ConfigMap %s", name)
	}
	var c map[string]any
	if err := yaml.Unmarshal([]byte(cm.Data["serve.yaml"]), &c); err != nil {
		t.Fatal(err)
	}
	flat := map[string]any{}
	flatten("", c, flat)
	return flat
}

func hasVolume(d *appsv1.Deployment, name string) bool {
	return slices.ContainsFunc(d.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == name })
}

func volume(t *testing.T, d *appsv1.Deployment, name string) corev1.Volume {
	t.Helper()
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Name == name {
			return v
		}
	}
	t.Fatalf("%s: no volume %s", d.Name, name)
	return corev1.Volume{}
}

func mount(t *testing.T, c corev1.Container, name string) corev1.VolumeMount {
	t.Helper()
	for _, m := range c.VolumeMounts {
		if m.Name == name {
			return m
		}
	}
	t.Fatalf("container %s: no mount of %s", c.Name, name)
	return corev1.VolumeMount{}
}

// Values that cannot work are refused at `helm install`, with a line saying what to do.
func TestChartRefuses(t *testing.T) {
	ch := loadChart(t)
	tests := []struct {
		name string
		set  string // YAML over values.yaml
		want string
	}{
		{"drain delay past the grace", "shutdown: {terminationGracePeriodSeconds: 20, drainDelaySeconds: 19}", "must be under the grace"},
		{"drain delay within readiness detection", "shutdown: {terminationGracePeriodSeconds: 40, drainDelaySeconds: 10}", "must be longer than probes.readiness"},
		{"listen set in config", "config: {listen: ':9000'}", "config.listen is set by the chart: use containerPort"},
		{"grace set in config", "config: {shutdown_grace: 10s}", "use shutdown.terminationGracePeriodSeconds"},
		{"unknown metric", "autoscaling: {metric: cpu}", "value must be one of 'inflight', 'queue'"},
		{"misspelt key", "autoscaling: {targetInflightPerPod: 8}", "targetInflightPerPod"},
		{"unknown top-level key", "replicas: 3", "replicas"},
		{"pvc without a claim", "models: {source: pvc}", "needs models.pvc.claimName"},
		{"image without a repository", "models: {source: image}", "needs models.image.repository"},
		{"download without a command", "models: {source: download, download: {image: busybox}}", "needs models.download.image and models.download.command"},
		{"canary without a tag", "canary: {enabled: true}", "needs canary.image.tag"},
		{"min over max", "autoscaling: {enabled: true, minReplicas: 5, maxReplicas: 3}", "minReplicas 5 is over maxReplicas 3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var vals map[string]any
			if err := yaml.Unmarshal([]byte(tt.set), &vals); err != nil {
				t.Fatal(err)
			}
			_, err := renderChart(ch, "demo", vals)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// docs/deploy.md shows what `helm template deploy/helm/ortserve --set autoscaling.enabled=true`
// prints for the HPA: it must stay what the chart renders.
func TestDocsHPA(t *testing.T) {
	files, err := renderChart(loadChart(t), "release-name", map[string]any{"autoscaling": map[string]any{"enabled": true}})
	if err != nil {
		t.Fatal(err)
	}
	const src = "ortserve/templates/hpa.yaml"
	want := fmt.Sprintf("---\n# Source: %s\n%s\n", src, strings.TrimSpace(files[src]))
	doc, err := os.ReadFile(filepath.Join(repoRoot, "docs", "deploy.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(doc, []byte(want)) {
		t.Errorf("docs/deploy.md lacks the HPA as rendered now; put this there:\n%s", want)
	}
}

// The chart's HPA averages what prometheus-adapter serves: the metric names must agree.
func TestAdapterServesHPAMetrics(t *testing.T) {
	served := map[string]bool{}
	for _, r := range adapterRules(t) {
		served[r.Name.As] = true
	}
	ch := loadChart(t)
	for _, metric := range []string{"inflight", "queue"} {
		files, err := renderChart(ch, "demo", map[string]any{"autoscaling": map[string]any{"enabled": true, "metric": metric}})
		if err != nil {
			t.Fatal(err)
		}
		var h autoscalingv2.HorizontalPodAutoscaler
		if err := yaml.UnmarshalStrict([]byte(files["ortserve/templates/hpa.yaml"]), &h); err != nil {
			t.Fatal(err)
		}
		if name := h.Spec.Metrics[0].Pods.Metric.Name; !served[name] {
			t.Errorf("metric %s: the HPA reads %s, which deploy/prometheus-adapter/values.yaml does not serve (%v)", metric, name, served)
		}
	}
}
