package charttest

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite testdata/golden from the current chart")

const (
	chartDir    = ".."
	releaseName = "quorumbus"
	namespace   = "messaging"
	kubeVersion = "v1.37.0"
)

// cases are the values files of the matrix: testdata/values/NAME.yaml.
func cases(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "values", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no values files: %v", err)
	}
	var names []string
	for _, f := range files {
		names = append(names, strings.TrimSuffix(filepath.Base(f), ".yaml"))
	}
	return names
}

func readValues(t *testing.T, name string) map[string]any {
	t.Helper()
	v, err := chartutil.ReadValuesFile(filepath.Join("testdata", "values", name+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return v.AsMap()
}

// merged is vals over the chart's values.yaml, as the templates see them.
func merged(t *testing.T, vals map[string]any) map[string]any {
	t.Helper()
	chrt, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	// CoalesceValues may modify its argument: work on a copy (a YAML round trip).
	b, err := yaml.Marshal(vals)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := chartutil.ReadValues(b)
	if err != nil {
		t.Fatal(err)
	}
	v, err := chartutil.CoalesceValues(chrt, cp)
	if err != nil {
		t.Fatal(err)
	}
	return v.AsMap()
}

// render is `helm template --kube-version 1.37.0 --namespace messaging quorumbus
// helm/quorumbus -f VALUES`, tests (hooks) included: the manifests, in file order.
func render(t *testing.T, vals map[string]any) string {
	t.Helper()
	out, err := renderErr(vals)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func renderErr(vals map[string]any) (string, error) {
	manifest, _, err := renderRelease(vals)
	return manifest, err
}

// renderRelease renders the manifests and NOTES.txt as a first `helm install` does: its
// lookups reach a cluster (an empty namespace).
func renderRelease(vals map[string]any) (manifest, notes string, err error) {
	api := newAPIServer()
	defer api.Close()
	return renderAgainst(vals, api)
}

// renderOffline is `helm template`: lookups reach no cluster and answer nothing.
func renderOffline(vals map[string]any) (string, error) {
	manifest, _, err := renderAgainst(vals, nil)
	return manifest, err
}

// renderAgainst renders with the chart's lookups answered by api (nil: no cluster).
func renderAgainst(vals map[string]any, api *apiServer) (manifest, notes string, err error) {
	chrt, err := loader.Load(chartDir)
	if err != nil {
		return "", "", err
	}
	kv, err := chartutil.ParseKubeVersion(kubeVersion)
	if err != nil {
		return "", "", err
	}
	cfg := &action.Configuration{Log: func(string, ...any) {}}
	install := action.NewInstall(cfg)
	install.DryRun, install.ClientOnly, install.Replace = true, true, true
	if api != nil {
		// --dry-run=server: Helm renders with lookups through the API server; the
		// capabilities stay the fixed ones of ClientOnly.
		cfg.RESTClientGetter = api
		install.DryRunOption = "server"
	}
	install.ReleaseName, install.Namespace = releaseName, namespace
	install.KubeVersion = kv
	install.APIVersions = chartutil.VersionSet{"monitoring.coreos.com/v1"}
	rel, err := install.Run(chrt, vals)
	if err != nil {
		return "", "", err
	}
	var b strings.Builder
	b.WriteString(rel.Manifest)
	for _, h := range rel.Hooks {
		fmt.Fprintf(&b, "---\n# Source: %s\n%s\n", h.Path, h.Manifest)
	}
	return b.String(), rel.Info.Notes, nil
}

// generatedKey is a random key or cluster secret of a generated Secret, replaced in
// golden files by base64("GENERATED"), which still decodes as Secret data.
var generatedKey = regexp.MustCompile(`(?m)^(  (?:sas-key|cluster-secret[-._a-zA-Z0-9]*): )[A-Za-z0-9+/=]{40,}$`)

// Each values file renders exactly as its golden file says (run with -update after a
// chart change and review the diff).
func TestGolden(t *testing.T) {
	for _, name := range cases(t) {
		t.Run(name, func(t *testing.T) {
			got := generatedKey.ReplaceAllString(render(t, readValues(t, name)), "${1}R0VORVJBVEVE")
			path := filepath.Join("testdata", "golden", name+".yaml")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update)", err)
			}
			if got != string(want) {
				t.Fatalf("rendering differs from %s; run go test -run TestGolden -update and review the diff", path)
			}
		})
	}
}

// `helm lint --strict`, through the SDK, over every values file.
func TestLintStrict(t *testing.T) {
	kv, err := chartutil.ParseKubeVersion(kubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range cases(t) {
		t.Run(name, func(t *testing.T) {
			l := action.NewLint()
			l.Strict, l.Namespace, l.KubeVersion = true, namespace, kv
			res := l.Run([]string{chartDir}, readValues(t, name))
			for _, m := range res.Messages {
				t.Logf("lint: %s", m)
			}
			if len(res.Errors) > 0 {
				t.Fatalf("helm lint --strict: %v", errors.Join(res.Errors...))
			}
		})
	}
}

// objects are the rendered objects of one values file, decoded strictly.
type objects struct {
	sts        *appsv1.StatefulSet
	services   map[string]*corev1.Service
	secrets    map[string]*corev1.Secret
	configMaps map[string]*corev1.ConfigMap
	pods       map[string]*corev1.Pod  // helm test pods
	jobs       map[string]*batchv1.Job // hook Jobs (configApply)
	cronJobs   map[string]*batchv1.CronJob
	claims     map[string]*corev1.PersistentVolumeClaim
	roles      map[string]*rbacv1.ClusterRole
	bindings   map[string]*rbacv1.ClusterRoleBinding
	pdb        *policyv1.PodDisruptionBudget
	netpol     *networkingv1.NetworkPolicy
	monitor    *unstructured.Unstructured
	rule       *unstructured.Unstructured
	account    *corev1.ServiceAccount
	ingress    *networkingv1.Ingress
	route      *unstructured.Unstructured
	backendTLS *unstructured.Unstructured // Gateway API BackendTLSPolicy (httpRoute with TLS)
	count      int
}

// decode splits a rendering into documents and decodes each into its k8s.io/api type,
// failing on unknown fields, unknown kinds and duplicates.
func decode(t *testing.T, manifest string) *objects {
	t.Helper()
	o := &objects{services: map[string]*corev1.Service{}, secrets: map[string]*corev1.Secret{},
		configMaps: map[string]*corev1.ConfigMap{}, pods: map[string]*corev1.Pod{}, jobs: map[string]*batchv1.Job{},
		cronJobs: map[string]*batchv1.CronJob{}, claims: map[string]*corev1.PersistentVolumeClaim{},
		roles: map[string]*rbacv1.ClusterRole{}, bindings: map[string]*rbacv1.ClusterRoleBinding{}}
	r := utilyaml.NewYAMLReader(bufioReader(manifest))
	for {
		doc, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		var meta struct{ APIVersion, Kind string }
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			t.Fatalf("%v\n%s", err, doc)
		}
		strict := func(v any) {
			t.Helper()
			if err := yaml.UnmarshalStrict(doc, v); err != nil {
				t.Fatalf("%s %s: strict decode: %v\n%s", meta.APIVersion, meta.Kind, err, doc)
			}
		}
		o.count++
		switch meta.APIVersion + " " + meta.Kind {
		case "apps/v1 StatefulSet":
			if o.sts != nil {
				t.Fatal("two StatefulSets")
			}
			o.sts = &appsv1.StatefulSet{}
			strict(o.sts)
		case "v1 Service":
			s := &corev1.Service{}
			strict(s)
			o.services[s.Name] = s
		case "v1 Secret":
			s := &corev1.Secret{}
			strict(s)
			o.secrets[s.Name] = s
		case "v1 ConfigMap":
			c := &corev1.ConfigMap{}
			strict(c)
			o.configMaps[c.Name] = c
		case "v1 Pod":
			p := &corev1.Pod{}
			strict(p)
			o.pods[p.Name] = p
		case "policy/v1 PodDisruptionBudget":
			o.pdb = &policyv1.PodDisruptionBudget{}
			strict(o.pdb)
		case "networking.k8s.io/v1 NetworkPolicy":
			o.netpol = &networkingv1.NetworkPolicy{}
			strict(o.netpol)
		case "monitoring.coreos.com/v1 PrometheusRule":
			// Not in k8s.io/api either: chart_test checks its groups against the rule file.
			o.rule = &unstructured.Unstructured{}
			if err := yaml.Unmarshal(doc, &o.rule.Object); err != nil {
				t.Fatal(err)
			}
		case "batch/v1 Job":
			j := &batchv1.Job{}
			strict(j)
			o.jobs[j.Name] = j
		case "batch/v1 CronJob":
			j := &batchv1.CronJob{}
			strict(j)
			o.cronJobs[j.Name] = j
		case "v1 PersistentVolumeClaim":
			c := &corev1.PersistentVolumeClaim{}
			strict(c)
			o.claims[c.Name] = c
		case "rbac.authorization.k8s.io/v1 ClusterRole":
			r := &rbacv1.ClusterRole{}
			strict(r)
			o.roles[r.Name] = r
		case "rbac.authorization.k8s.io/v1 ClusterRoleBinding":
			b := &rbacv1.ClusterRoleBinding{}
			strict(b)
			o.bindings[b.Name] = b
		case "v1 ServiceAccount":
			o.account = &corev1.ServiceAccount{}
			strict(o.account)
		case "networking.k8s.io/v1 Ingress":
			o.ingress = &networkingv1.Ingress{}
			strict(o.ingress)
		case "gateway.networking.k8s.io/v1 HTTPRoute":
			// Not in k8s.io/api: a CRD of the Gateway API; checked by hand.
			o.route = &unstructured.Unstructured{}
			if err := yaml.Unmarshal(doc, &o.route.Object); err != nil {
				t.Fatal(err)
			}
		case "gateway.networking.k8s.io/v1 BackendTLSPolicy":
			// A Gateway API object too; checked by hand.
			o.backendTLS = &unstructured.Unstructured{}
			if err := yaml.Unmarshal(doc, &o.backendTLS.Object); err != nil {
				t.Fatal(err)
			}
		case "monitoring.coreos.com/v1 ServiceMonitor":
			// Not in k8s.io/api: the fields the Prometheus Operator reads are checked by hand.
			o.monitor = &unstructured.Unstructured{}
			if err := yaml.Unmarshal(doc, &o.monitor.Object); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("unexpected object %s %s", meta.APIVersion, meta.Kind)
		}
	}
	if o.sts == nil {
		t.Fatal("no StatefulSet rendered")
	}
	return o
}

func stripComments(doc []byte) []byte {
	var out [][]byte
	for _, l := range bytes.Split(doc, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(l), []byte("#")) {
			out = append(out, l)
		}
	}
	return bytes.Join(out, []byte("\n"))
}

func bufioReader(s string) *bufio.Reader { return bufio.NewReader(strings.NewReader(s)) }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
