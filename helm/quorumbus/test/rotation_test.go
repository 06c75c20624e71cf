package charttest

import (
	"encoding/base64"
	"reflect"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/fake"
	"sigs.k8s.io/yaml"
)

// rotationSteps are the values of the three rolling updates that change the cluster
// secret from the key cluster-secret to cluster-secret-2 (docs/security.md, "Rotation").
func rotationSteps() []struct {
	name     string
	current  string
	accepted []string
} {
	return []struct {
		name     string
		current  string
		accepted []string
	}{
		{"before", "cluster-secret", nil},
		{"accept the new", "cluster-secret", []string{"cluster-secret-2"}},
		{"use the new", "cluster-secret-2", []string{"cluster-secret"}},
		{"drop the old", "cluster-secret-2", []string{}}, // as --set-json '...=[]' gives
	}
}

func rotationValues(t *testing.T, current string, accepted []string) map[string]any {
	t.Helper()
	vals := readValues(t, "three")
	ca, _ := vals["clusterAuth"].(map[string]any)
	if ca == nil {
		ca = map[string]any{}
		vals["clusterAuth"] = ca
	}
	ca["secretKey"] = current
	if accepted != nil {
		list := make([]any, len(accepted))
		for i, a := range accepted {
			list[i] = a
		}
		ca["acceptedSecretKeys"] = list
	}
	return vals
}

// Each step of a cluster secret rotation with the chart: the pods read the current
// secret from its key, and each accepted key as a file of a read-only volume named in
// QUORUMBUS_CLUSTER_SECRET_ACCEPTED, which the node's own loader accepts; the generated
// Secret has every key a pod reads; and every step changes the pod template, so that
// `helm upgrade` rolls the pods one at a time.
func TestClusterSecretRotationSteps(t *testing.T) {
	var prev *corev1.PodTemplateSpec
	for _, step := range rotationSteps() {
		o := decode(t, render(t, rotationValues(t, step.current, step.accepted)))
		c := brokerContainer(t, o)
		env := map[string]corev1.EnvVar{}
		for _, e := range c.Env {
			env[e.Name] = e
		}
		cs := env["QUORUMBUS_CLUSTER_SECRET"]
		if cs.ValueFrom == nil || cs.ValueFrom.SecretKeyRef == nil || cs.ValueFrom.SecretKeyRef.Key != step.current {
			t.Fatalf("%s: QUORUMBUS_CLUSTER_SECRET %+v, want key %s", step.name, cs, step.current)
		}
		secretName := cs.ValueFrom.SecretKeyRef.Name
		var wantFiles []string
		for _, k := range step.accepted {
			wantFiles = append(wantFiles, "@/etc/quorumbus/cluster-secret-accepted/"+k)
		}
		acc, ok := env["QUORUMBUS_CLUSTER_SECRET_ACCEPTED"]
		if (len(step.accepted) > 0) != ok || acc.Value != strings.Join(wantFiles, ",") {
			t.Fatalf("%s: QUORUMBUS_CLUSTER_SECRET_ACCEPTED %+v (set %v), want %q", step.name, acc, ok, wantFiles)
		}
		var vol *corev1.Volume
		for i := range o.sts.Spec.Template.Spec.Volumes {
			if v := &o.sts.Spec.Template.Spec.Volumes[i]; v.Name == "cluster-secret-accepted" {
				vol = v
			}
		}
		var mount *corev1.VolumeMount
		for i := range c.VolumeMounts {
			if m := &c.VolumeMounts[i]; m.Name == "cluster-secret-accepted" {
				mount = m
			}
		}
		if len(step.accepted) == 0 {
			if vol != nil || mount != nil {
				t.Fatalf("%s: accepted-secret volume %+v mount %+v without accepted keys", step.name, vol, mount)
			}
		} else {
			if vol == nil || vol.Secret == nil || vol.Secret.SecretName != secretName || mount == nil ||
				mount.MountPath != "/etc/quorumbus/cluster-secret-accepted" || !mount.ReadOnly {
				t.Fatalf("%s: accepted-secret volume %+v mount %+v", step.name, vol, mount)
			}
			var items []string
			for _, it := range vol.Secret.Items {
				if it.Key != it.Path {
					t.Errorf("%s: item %+v: file not named after its key", step.name, it)
				}
				items = append(items, it.Key)
			}
			if !slices.Equal(items, step.accepted) {
				t.Fatalf("%s: volume items %v, want only the accepted keys %v", step.name, items, step.accepted)
			}
		}
		s := o.secrets[secretName]
		if s == nil {
			t.Fatalf("%s: no Secret %s rendered", step.name, secretName)
		}
		for _, k := range append([]string{step.current}, step.accepted...) {
			if len(s.Data[k]) < 40 {
				t.Errorf("%s: the generated Secret has no secret under %s: %v", step.name, k, s.Data)
			}
		}
		for i := 0; i < int(*o.sts.Spec.Replicas); i++ {
			cfg := checkConfig(t, c, podOf(o, i, "10.1.0.10", "zone-a"))
			got, _ := cfg["cluster-secret-accepted"].([]any)
			if len(got) != len(wantFiles) {
				t.Fatalf("%s: the node would accept %v, want %v", step.name, got, wantFiles)
			}
			for j := range got {
				if got[j] != wantFiles[j] {
					t.Fatalf("%s: the node would accept %v, want %v", step.name, got, wantFiles)
				}
			}
		}
		tmpl := o.sts.Spec.Template
		if prev != nil && reflect.DeepEqual(*prev, tmpl) {
			t.Errorf("%s: the pod template is the step before's: helm upgrade would not roll the pods", step.name)
		}
		prev = &tmpl
	}
}

// secretProvider answers the chart's lookup of its Secret with the one an earlier
// release left.
type secretProvider struct{ objects []runtime.Object }

func (p secretProvider) GetClientFor(apiVersion, kind string) (dynamic.NamespaceableResourceInterface, bool, error) {
	gvr := schema.GroupVersionResource{Version: "v1", Resource: strings.ToLower(kind) + "s"}
	return fake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{gvr: kind + "List"},
		p.objects...).Resource(gvr), true, nil
}

// Upgrading through the rotation steps, the chart's generated Secret keeps the value of
// every key it already has (a pod that still reads the old secret while the last roll
// proceeds finds it), and gives a new accepted key a random secret once.
func TestGeneratedSecretKeepsKeysThroughARotation(t *testing.T) {
	chrt, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	var data map[string]any // the live Secret's data, base64
	for _, step := range rotationSteps() {
		vals := rotationValues(t, step.current, step.accepted)
		var objs []runtime.Object
		if data != nil {
			objs = append(objs, &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "v1", "kind": "Secret",
				"metadata": map[string]any{"name": releaseName, "namespace": namespace},
				"data":     data,
			}})
		}
		rv, err := chartutil.ToRenderValues(chrt, vals, chartutil.ReleaseOptions{Name: releaseName, Namespace: namespace, IsUpgrade: data != nil}, nil)
		if err != nil {
			t.Fatal(err)
		}
		out, err := engine.RenderWithClientProvider(chrt, rv, secretProvider{objs})
		if err != nil {
			t.Fatal(err)
		}
		var s corev1.Secret
		if err := yaml.Unmarshal([]byte(out["quorumbus/templates/secret.yaml"]), &s); err != nil {
			t.Fatalf("%s: %v\n%s", step.name, err, out["quorumbus/templates/secret.yaml"])
		}
		for k, v := range data {
			b, _ := base64.StdEncoding.DecodeString(v.(string))
			if string(s.Data[k]) != string(b) {
				t.Errorf("%s: key %s changed or went away: %q, was %q", step.name, k, s.Data[k], b)
			}
		}
		for _, k := range append([]string{"sas-key", step.current}, step.accepted...) {
			if len(s.Data[k]) < 40 {
				t.Errorf("%s: no secret under %s: %v", step.name, k, s.Data)
			}
		}
		data = map[string]any{}
		for k, v := range s.Data {
			data[k] = base64.StdEncoding.EncodeToString(v)
		}
	}
	if len(data) != 3 {
		t.Errorf("after the rotation the Secret holds %d keys, want sas-key and both cluster secrets (the old one is deleted by hand): %v", len(data), data)
	}
}

// `--set 'clusterAuth.acceptedSecretKeys={}'` gives a list holding one empty key, which
// no Secret has: refused at render time, naming the value, rather than a pod that cannot
// mount its volume.
func TestEmptyAcceptedSecretKeyIsRefused(t *testing.T) {
	_, err := renderErr(map[string]any{"clusterAuth": map[string]any{"acceptedSecretKeys": []any{""}}, "image": map[string]any{"repository": "quorumbus"}})
	if err == nil || !strings.Contains(err.Error(), "acceptedSecretKeys") {
		t.Fatalf("err = %v, want mention of acceptedSecretKeys", err)
	}
}
