package apivalidate

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	podutil "k8s.io/kubernetes/pkg/api/pod"
	"k8s.io/kubernetes/pkg/apis/apps"
	_ "k8s.io/kubernetes/pkg/apis/apps/install"
	appsvalidation "k8s.io/kubernetes/pkg/apis/apps/validation"
	"k8s.io/kubernetes/pkg/apis/batch"
	_ "k8s.io/kubernetes/pkg/apis/batch/install"
	"k8s.io/kubernetes/pkg/apis/core"
	_ "k8s.io/kubernetes/pkg/apis/core/install"
	corevalidation "k8s.io/kubernetes/pkg/apis/core/validation"
	"k8s.io/kubernetes/pkg/apis/networking"
	_ "k8s.io/kubernetes/pkg/apis/networking/install"
	netvalidation "k8s.io/kubernetes/pkg/apis/networking/validation"
	"k8s.io/kubernetes/pkg/apis/policy"
	_ "k8s.io/kubernetes/pkg/apis/policy/install"
	policyvalidation "k8s.io/kubernetes/pkg/apis/policy/validation"
	"k8s.io/kubernetes/pkg/apis/rbac"
	_ "k8s.io/kubernetes/pkg/apis/rbac/install"
	rbacvalidation "k8s.io/kubernetes/pkg/apis/rbac/validation"
	cronjobregistry "k8s.io/kubernetes/pkg/registry/batch/cronjob"
	jobregistry "k8s.io/kubernetes/pkg/registry/batch/job"
	pvcregistry "k8s.io/kubernetes/pkg/registry/core/persistentvolumeclaim"
	psaapi "k8s.io/pod-security-admission/api"
	psapolicy "k8s.io/pod-security-admission/policy"
)

var (
	scheme  = legacyscheme.Scheme
	decoder = serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
	psa     = mustEvaluator()
)

func mustEvaluator() psapolicy.Evaluator {
	e, err := psapolicy.NewEvaluator(psapolicy.DefaultChecks(), nil)
	if err != nil {
		panic(err)
	}
	return e
}

// toInternal decodes one YAML document strictly, applies the API server's defaults and
// converts it to the internal type its validation takes. It also returns the defaulted
// versioned object.
func toInternal(doc []byte) (versioned, internal runtime.Object, gvk *schema.GroupVersionKind, err error) {
	jsonDoc, err := utilyaml.ToJSON(doc)
	if err != nil {
		return nil, nil, nil, err
	}
	versioned, gvk, err = decoder.Decode(jsonDoc, nil, nil)
	if err != nil {
		return nil, nil, gvk, err
	}
	scheme.Default(versioned)
	internal, err = scheme.ConvertToVersion(versioned, schema.GroupVersion{Group: gvk.Group, Version: runtime.APIVersionInternal})
	return versioned, internal, gvk, err
}

// validate is what the API server checks on create for each kind the chart renders.
func validate(obj runtime.Object) (field.ErrorList, bool) {
	switch o := obj.(type) {
	case *apps.StatefulSet:
		return appsvalidation.ValidateStatefulSet(o, appsvalidation.StatefulSetValidationOptions{},
			podutil.GetValidationOptionsFromPodTemplate(&o.Spec.Template, nil)), true
	case *core.Service:
		// The Service storage's normalizeClusterIPs runs before validation on create: a
		// singular clusterIP (None for a headless Service) initialises the plural field.
		if o.Spec.ClusterIP != "" && len(o.Spec.ClusterIPs) == 0 {
			o.Spec.ClusterIPs = []string{o.Spec.ClusterIP}
		}
		// Its beginCreate allocates the ports the object leaves to it, also before
		// validation: a LoadBalancer with externalTrafficPolicy Local gets its
		// healthCheckNodePort (any free node port; 30000 stands for it here).
		if o.Spec.Type == core.ServiceTypeLoadBalancer && o.Spec.ExternalTrafficPolicy == core.ServiceExternalTrafficPolicyLocal && o.Spec.HealthCheckNodePort == 0 {
			o.Spec.HealthCheckNodePort = 30000
		}
		return corevalidation.ValidateServiceCreate(o), true
	case *core.Secret:
		return corevalidation.ValidateSecret(o), true
	case *core.ConfigMap:
		return corevalidation.ValidateConfigMap(o), true
	case *core.Pod:
		return corevalidation.ValidatePodCreate(o, podutil.GetValidationOptionsFromPodSpecAndMeta(&o.Spec, nil, &o.ObjectMeta, nil)), true
	case *policy.PodDisruptionBudget:
		return policyvalidation.ValidatePodDisruptionBudget(o, policyvalidation.PodDisruptionBudgetValidationOptions{}), true
	case *networking.NetworkPolicy:
		return netvalidation.ValidateNetworkPolicy(o, netvalidation.NetworkPolicyValidationOptions{}), true
	case *batch.Job:
		// The Job storage's PrepareForCreate generates the selector and its pod labels from
		// the UID the API server assigned, before validation.
		o.UID = "0f5e3c2a-6b1d-4e8f-9a70-3c2b1d0e9f87"
		// Its Validate is ValidateJobCreate with the options the API server uses.
		jobregistry.Strategy.PrepareForCreate(context.Background(), o)
		return jobregistry.Strategy.Validate(context.Background(), o), true
	case *batch.CronJob:
		// backup.enabled: the CronJob storage's create path, as for the Job above.
		cronjobregistry.Strategy.PrepareForCreate(context.Background(), o)
		return cronjobregistry.Strategy.Validate(context.Background(), o), true
	case *core.PersistentVolumeClaim:
		pvcregistry.Strategy.PrepareForCreate(context.Background(), o)
		return pvcregistry.Strategy.Validate(context.Background(), o), true
	case *rbac.ClusterRole:
		return rbacvalidation.ValidateClusterRole(o, rbacvalidation.ClusterRoleValidationOptions{}), true
	case *rbac.ClusterRoleBinding:
		return rbacvalidation.ValidateClusterRoleBinding(o), true
	case *networking.Ingress:
		return netvalidation.ValidateIngressCreate(o), true
	case *core.ServiceAccount:
		return corevalidation.ValidateServiceAccount(o), true
	}
	return nil, false
}

// restricted reports the restricted Pod Security Standard's objections to a pod.
func restricted(meta *metav1.ObjectMeta, spec *corev1.PodSpec) []string {
	var out []string
	for _, r := range psa.EvaluatePod(psaapi.LevelVersion{Level: psaapi.LevelRestricted, Version: psaapi.LatestVersion()}, meta, spec) {
		if !r.Allowed {
			out = append(out, r.ForbiddenReason+": "+r.ForbiddenDetail)
		}
	}
	return out
}

func documents(t *testing.T, path string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var docs [][]byte
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	for {
		doc, err := r.Read()
		if err == io.EOF {
			return docs
		}
		if err != nil {
			t.Fatal(err)
		}
		var content bool
		for _, l := range strings.Split(string(doc), "\n") {
			if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
				content = true
			}
		}
		if content {
			docs = append(docs, doc)
		}
	}
}

// Every object of every golden rendering passes the API server's validation, and every
// pod meets the restricted Pod Security Standard.
func TestGoldenRenderingsPassAPIServerValidation(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "testdata", "golden", "*.yaml"))
	if err != nil || len(files) < 8 {
		t.Fatalf("golden renderings: %v %v (run the chart tests with -update first)", files, err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".yaml"), func(t *testing.T) {
			var checked int
			for _, doc := range documents(t, f) {
				versioned, internal, gvk, err := toInternal(doc)
				if err != nil {
					if gvk != nil && (gvk.Group == "monitoring.coreos.com" || gvk.Group == "gateway.networking.k8s.io") {
						continue // a CRD: not a built-in type, nothing here validates it
					}
					t.Fatalf("decode: %v\n%s", err, doc)
				}
				errs, ok := validate(internal)
				if !ok {
					t.Fatalf("no validation for %v", gvk)
				}
				name := fmt.Sprintf("%s %s", gvk.Kind, internal.(metav1.Object).GetName())
				for _, e := range errs {
					t.Errorf("%s: %v", name, e)
				}
				switch v := versioned.(type) {
				case *corev1.Pod:
					for _, r := range restricted(&v.ObjectMeta, &v.Spec) {
						t.Errorf("%s: restricted: %s", name, r)
					}
				default:
					if tmpl := podTemplate(versioned); tmpl != nil {
						for _, r := range restricted(&tmpl.ObjectMeta, &tmpl.Spec) {
							t.Errorf("%s: restricted: %s", name, r)
						}
					}
				}
				checked++
			}
			if checked < 5 {
				t.Fatalf("only %d objects checked", checked)
			}
		})
	}
}

func podTemplate(obj runtime.Object) *corev1.PodTemplateSpec {
	switch o := obj.(type) {
	case *appsv1.StatefulSet:
		return &o.Spec.Template
	case *batchv1.Job:
		return &o.Spec.Template
	case *batchv1.CronJob:
		return &o.Spec.JobTemplate.Spec.Template
	}
	return nil
}

// The checks above can fail: the validation rejects what schemas let through, and the
// strict decode rejects unknown fields.
func TestValidationCatchesWhatSchemasMiss(t *testing.T) {
	var sts []byte
	for _, doc := range documents(t, filepath.Join("..", "testdata", "golden", "three.yaml")) {
		if bytes.Contains(doc, []byte("kind: StatefulSet")) {
			sts = doc
		}
	}
	if sts == nil {
		t.Fatal("no StatefulSet in three.yaml")
	}
	for _, tc := range []struct{ name, old, new, want string }{
		{"pod management policy", "podManagementPolicy: Parallel", "podManagementPolicy: Sometimes", "podManagementPolicy"},
		{"port out of range", "containerPort: 5672", "containerPort: 99999", "containerPort"},
		{"selector misses the template", "    matchLabels:\n      app.kubernetes.io/name: quorumbus\n",
			"    matchLabels:\n      app.kubernetes.io/name: other\n", "selector"},
		{"unknown field", "podManagementPolicy: Parallel", "podManagementPolicy: Parallel\n  podManagmentPolicy: Parallel", "unknown field"},
		{"privileged container", "allowPrivilegeEscalation: false", "allowPrivilegeEscalation: true", "restricted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := []byte(strings.Replace(string(sts), tc.old, tc.new, 1))
			if bytes.Equal(doc, sts) {
				t.Fatal("mutation did not apply")
			}
			var found []string
			versioned, internal, _, err := toInternal(doc)
			if err != nil {
				found = append(found, err.Error())
			} else {
				errs, _ := validate(internal)
				for _, e := range errs {
					found = append(found, e.Error())
				}
				if tmpl := podTemplate(versioned); tmpl != nil {
					for _, r := range restricted(&tmpl.ObjectMeta, &tmpl.Spec) {
						found = append(found, "restricted: "+r)
					}
				}
			}
			if !strings.Contains(strings.Join(found, "; "), tc.want) {
				t.Fatalf("want an error mentioning %q, got %q", tc.want, found)
			}
		})
	}
}
