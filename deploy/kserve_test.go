package deploy

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// servingRuntime is the part of KServe's ServingRuntime (serving.kserve.io/v1alpha1) used here;
// its containers are Kubernetes containers, decoded strictly as such.
type servingRuntime struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata"`
	Spec            struct {
		Annotations           map[string]string `json:"annotations"`
		SupportedModelFormats []struct {
			Name       string `json:"name"`
			Version    string `json:"version"`
			AutoSelect *bool  `json:"autoSelect"`
			Priority   *int32 `json:"priority"`
		} `json:"supportedModelFormats"`
		ProtocolVersions []string           `json:"protocolVersions"`
		Containers       []corev1.Container `json:"containers"`
	} `json:"spec"`
}

// inferenceService is the part of KServe's InferenceService (serving.kserve.io/v1beta1) used here.
type inferenceService struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata"`
	Spec            struct {
		Predictor struct {
			MinReplicas                   *int32 `json:"minReplicas"`
			MaxReplicas                   int32  `json:"maxReplicas"`
			TerminationGracePeriodSeconds *int64 `json:"terminationGracePeriodSeconds"`
			Model                         struct {
				ModelFormat struct {
					Name string `json:"name"`
				} `json:"modelFormat"`
				Runtime         string                      `json:"runtime"`
				ProtocolVersion string                      `json:"protocolVersion"`
				StorageURI      string                      `json:"storageUri"`
				Resources       corev1.ResourceRequirements `json:"resources"`
			} `json:"model"`
		} `json:"predictor"`
	} `json:"spec"`
}

func readStrict(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func TestKServe(t *testing.T) {
	var rt servingRuntime
	readStrict(t, "kserve/servingruntime.yaml", &rt)
	if rt.APIVersion != "serving.kserve.io/v1alpha1" || rt.Kind != "ServingRuntime" || rt.Metadata.Name != "ortserve" {
		t.Errorf("ServingRuntime: %s %s %s", rt.APIVersion, rt.Kind, rt.Metadata.Name)
	}
	if !slices.Equal(rt.Spec.ProtocolVersions, []string{"v2"}) {
		t.Errorf("protocolVersions %v: ortserve speaks KServe v2", rt.Spec.ProtocolVersions)
	}
	if len(rt.Spec.Containers) != 1 || rt.Spec.Containers[0].Name != "kserve-container" {
		t.Fatalf("want one container named kserve-container, got %+v", rt.Spec.Containers)
	}
	c := rt.Spec.Containers[0]
	args := strings.Join(c.Args, " ")
	if !strings.Contains(args, "--model {{.Name}}=/mnt/models") {
		t.Errorf("args %q: serve the storage initializer's /mnt/models under the InferenceService's name", args)
	}
	// Every flag given is one of serve's (docs/config.md's table).
	doc, err := os.ReadFile(repoRoot + "/docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range c.Args {
		if strings.HasPrefix(a, "--") && !strings.Contains(string(doc), "| `"+a+"` |") {
			t.Errorf("arg %s is not a flag of server serve (docs/config.md)", a)
		}
	}
	if len(c.Ports) != 1 || c.Ports[0].ContainerPort != 8080 || c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet.Path != "/v2/health/ready" {
		t.Errorf("ports %v, readiness %+v: want 8080 and KServe's /v2/health/ready", c.Ports, c.ReadinessProbe)
	}
	if rt.Spec.Annotations["prometheus.kserve.io/path"] != "/metrics" {
		t.Errorf("annotations %v", rt.Spec.Annotations)
	}

	var isvc inferenceService
	readStrict(t, "kserve/inferenceservice.yaml", &isvc)
	m := isvc.Spec.Predictor.Model
	if isvc.APIVersion != "serving.kserve.io/v1beta1" || isvc.Kind != "InferenceService" || m.Runtime != rt.Metadata.Name || m.ProtocolVersion != "v2" {
		t.Errorf("InferenceService: %s %s, runtime %s, protocol %s", isvc.APIVersion, isvc.Kind, m.Runtime, m.ProtocolVersion)
	}
	if !slices.ContainsFunc(rt.Spec.SupportedModelFormats, func(f struct {
		Name       string `json:"name"`
		Version    string `json:"version"`
		AutoSelect *bool  `json:"autoSelect"`
		Priority   *int32 `json:"priority"`
	}) bool {
		return f.Name == m.ModelFormat.Name
	}) {
		t.Errorf("model format %s is not one the runtime supports", m.ModelFormat.Name)
	}
	if !regexp.MustCompile(`^(pvc|s3|gs|https?)://`).MatchString(m.StorageURI) {
		t.Errorf("storageUri %q", m.StorageURI)
	}
}
