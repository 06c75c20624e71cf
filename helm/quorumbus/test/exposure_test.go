package charttest

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// ingressBackend is the backend an Ingress controller picks for path, by the Ingress
// API's rules: an Exact match wins over any Prefix, then the longest Prefix (matched by
// whole path elements). nil: no path matches.
func ingressBackend(ing *networkingv1.Ingress, path string) *networkingv1.IngressServiceBackend {
	var best *networkingv1.HTTPIngressPath
	bestLen := -1
	for _, r := range ing.Spec.Rules {
		for i := range r.HTTP.Paths {
			p := &r.HTTP.Paths[i]
			switch *p.PathType {
			case networkingv1.PathTypeExact:
				if p.Path == path {
					return p.Backend.Service
				}
			case networkingv1.PathTypePrefix:
				prefix := strings.TrimSuffix(p.Path, "/")
				if (path == prefix || strings.HasPrefix(path, prefix+"/")) && len(prefix) > bestLen {
					best, bestLen = p, len(prefix)
				}
			}
		}
	}
	if best == nil {
		return nil
	}
	return best.Backend.Service
}

// routeRule is an HTTPRoute rule: its path matches and backends.
type routeRule struct {
	Matches []struct {
		Path struct{ Type, Value string } `json:"path"`
	} `json:"matches"`
	BackendRefs []struct {
		Name string `json:"name"`
		Port int    `json:"port"`
	} `json:"backendRefs"`
}

// httpRouteRule is the HTTPRoute rule a Gateway picks for path, by the Gateway API's
// precedence: an Exact match, then the longest PathPrefix. ok is false when none matches.
func httpRouteRule(t *testing.T, o *objects, path string) (rule routeRule, ok bool) {
	t.Helper()
	var spec struct{ Rules []routeRule }
	b, err := yaml.Marshal(o.route.Object["spec"])
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &spec); err != nil {
		t.Fatalf("HTTPRoute spec: %v\n%s", err, b)
	}
	bestLen := -1
	for _, r := range spec.Rules {
		for _, m := range r.Matches {
			switch m.Path.Type {
			case "Exact":
				if m.Path.Value == path {
					return r, true
				}
			case "PathPrefix":
				prefix := strings.TrimSuffix(m.Path.Value, "/")
				if (path == prefix || strings.HasPrefix(path, prefix+"/")) && len(prefix) > bestLen {
					rule, ok, bestLen = r, true, len(prefix)
				}
			}
		}
	}
	return rule, ok
}

// The explorer's Ingress and HTTPRoute send the explorer and the management API to the
// admin port, speak HTTPS to it when TLS is on (it speaks nothing else then), and do not
// hand out /metrics and /debug/pprof/, which the node serves without a token, unless
// exposeMetrics says so.
func TestExplorerRoutes(t *testing.T) {
	// The explorer's page, its JSON API, the cluster API and a management API entity
	// path: what the explorer's page requests.
	served := []string{"/", "/$ui/app.js", "/$ui/api/stats", "/$cluster/status", "/orders", "/orders/Subscriptions/eu"}
	unauthenticated := []string{"/metrics", "/debug/pprof/", "/debug/pprof/heap"}
	for _, tc := range []struct {
		values string
		tls    bool
		expose bool
	}{
		{"operator-knobs", false, false},
		{"tls", true, false},
		{"tls", true, true},
	} {
		vals := readValues(t, tc.values)
		if tc.expose {
			vals["ingress"].(map[string]any)["exposeMetrics"] = true
			vals["httpRoute"].(map[string]any)["exposeMetrics"] = true
		}
		o := decode(t, render(t, vals))
		what := tc.values
		if tc.expose {
			what += " with exposeMetrics"
		}
		if o.ingress == nil || o.route == nil {
			t.Fatalf("%s: renders no Ingress or HTTPRoute", what)
		}
		client := o.services[o.sts.Name]

		// Ingress: which Service and port each path reaches.
		for _, p := range append(served, unauthenticated...) {
			b := ingressBackend(o.ingress, p)
			toNode := b != nil && b.Name == client.Name && b.Port.Name == "admin"
			want := tc.expose || !containsString(unauthenticated, p)
			if toNode != want {
				t.Errorf("%s: Ingress sends %s to %+v; to the admin port: %v, want %v", what, p, b, toNode, want)
			}
			if !toNode && b != nil {
				svc := o.services[b.Name]
				if svc == nil || !unrouted(o, svc) || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Name != b.Port.Name {
					t.Errorf("%s: Ingress sends %s to %+v, which is not a Service without endpoints: %+v", what, p, b, svc)
				}
			}
		}
		// HTTPRoute: which rule each path matches, and whether it has a backend.
		for _, p := range append(served, unauthenticated...) {
			r, ok := httpRouteRule(t, o, p)
			toNode := ok && len(r.BackendRefs) == 1 && r.BackendRefs[0].Name == client.Name && r.BackendRefs[0].Port == 5300
			want := tc.expose || !containsString(unauthenticated, p)
			if toNode != want {
				t.Errorf("%s: HTTPRoute sends %s to %+v; to the admin port: %v, want %v", what, p, r.BackendRefs, toNode, want)
			}
			if !toNode && (!ok || len(r.BackendRefs) != 0) {
				// A rule without backends: the Gateway answers 500 (conformance test
				// HTTPRouteNoBackendRefs). No rule at all would be a 404, also fine, but
				// the chart renders the rule.
				t.Errorf("%s: HTTPRoute %s matches no rule without backends: %+v", what, p, r)
			}
		}

		// HTTPS to the admin port when TLS is on: ingress-nginx's annotation, the Service
		// port's appProtocol, and a BackendTLSPolicy for the Gateway.
		var admin corev1.ServicePort
		for _, sp := range client.Spec.Ports {
			if sp.Name == "admin" {
				admin = sp
			}
		}
		gotProto := o.ingress.Annotations["nginx.ingress.kubernetes.io/backend-protocol"]
		gotApp := ""
		if admin.AppProtocol != nil {
			gotApp = *admin.AppProtocol
		}
		if tc.tls {
			if gotProto != "HTTPS" || gotApp != "https" {
				t.Errorf("%s: TLS on, yet the Ingress's backend-protocol is %q and the admin port's appProtocol %q: the controller would speak HTTP to an HTTPS port", what, gotProto, gotApp)
			}
			checkBackendTLSPolicy(t, o, what)
		} else {
			if gotProto != "" || gotApp != "" || o.backendTLS != nil {
				t.Errorf("%s: TLS off, yet the backend is told HTTPS (annotation %q, appProtocol %q, BackendTLSPolicy %v)", what, gotProto, gotApp, o.backendTLS != nil)
			}
		}
	}

	// An operator's own annotation wins over the chart's.
	vals := readValues(t, "tls")
	vals["ingress"].(map[string]any)["annotations"] = map[string]any{"nginx.ingress.kubernetes.io/backend-protocol": "GRPCS"}
	if got := decode(t, render(t, vals)).ingress.Annotations["nginx.ingress.kubernetes.io/backend-protocol"]; got != "GRPCS" {
		t.Errorf("ingress.annotations' backend-protocol replaced by the chart's: %q", got)
	}
}

// checkBackendTLSPolicy: the policy covers the client Service's admin port and checks the
// certificate for the Service's DNS name against the CA the values name.
func checkBackendTLSPolicy(t *testing.T, o *objects, what string) {
	t.Helper()
	if o.backendTLS == nil {
		t.Errorf("%s: TLS on, yet no BackendTLSPolicy: the Gateway would speak HTTP to an HTTPS port", what)
		return
	}
	var spec struct {
		TargetRefs []struct{ Group, Kind, Name, SectionName string } `json:"targetRefs"`
		Validation struct {
			Hostname          string `json:"hostname"`
			CACertificateRefs []struct {
				Group, Kind, Name string
			} `json:"caCertificateRefs"`
			WellKnownCACertificates string `json:"wellKnownCACertificates"`
		} `json:"validation"`
	}
	b, err := yaml.Marshal(o.backendTLS.Object["spec"])
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, &spec); err != nil {
		t.Fatalf("%s: BackendTLSPolicy spec: %v\n%s", what, err, b)
	}
	host := o.sts.Name + "." + namespace + ".svc.cluster.local"
	if len(spec.TargetRefs) != 1 || spec.TargetRefs[0].Group != "" || spec.TargetRefs[0].Kind != "Service" ||
		spec.TargetRefs[0].Name != o.sts.Name || spec.TargetRefs[0].SectionName != "admin" ||
		spec.Validation.Hostname != host || len(spec.Validation.CACertificateRefs) != 1 ||
		spec.Validation.CACertificateRefs[0].Kind != "ConfigMap" || spec.Validation.CACertificateRefs[0].Name != "quorumbus-ca" {
		t.Errorf("%s: BackendTLSPolicy %s", what, b)
	}
	if o.backendTLS.GetNamespace() != namespace {
		t.Errorf("%s: BackendTLSPolicy in namespace %q, not the Service's", what, o.backendTLS.GetNamespace())
	}
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// The default memory limit holds what the default bodies budget lets a node keep in
// memory while one queue of the default size (MaxSizeInMegabytes 1024, docs/semantics.md)
// is full of 1 KiB messages, and the budgets hold that queue; the volume holds the
// budgets and the Raft log and snapshots that hold every body too. The rule is the one
// values.yaml and docs/deploy-kubernetes.md give; the node really gets the budgets.
func TestDefaultSizingHoldsAFullQueue(t *testing.T) {
	const (
		queueMiB    = 1024        // a full queue at the default MaxSizeInMegabytes
		messages    = 1024 * 1024 // of 1 KiB messages
		metaBytes   = 300         // per queued message beyond its body (docs/operations.md)
		baseMiB     = 256         // the process with nothing queued, and headroom
		inMemFactor = 1.4         // bytes of memory per body byte with every body in memory
	)
	vals := merged(t, readValues(t, "three"))
	o := decode(t, render(t, readValues(t, "three")))
	c := brokerContainer(t, o)
	limit := c.Resources.Limits[corev1.ResourceMemory]
	if limit.IsZero() {
		t.Fatal("no default memory limit")
	}
	cfg := checkConfig(t, c, podOf(o, 0, "10.1.0.10", ""))
	memMiB, _ := cfg["body-memory-budget-mb"].(float64)
	diskMiB, _ := cfg["body-disk-budget-mb"].(float64)
	const mi = 1 << 20
	var need float64
	if memMiB == 0 {
		// Every body in memory, as the node does by default.
		need = inMemFactor*queueMiB*mi + metaBytes*messages + baseMiB*mi
	} else {
		need = 2*(memMiB*mi+metaBytes*messages) + baseMiB*mi
		if memMiB+diskMiB < queueMiB && diskMiB != 0 {
			t.Errorf("body budgets %v + %v MiB hold less than one full queue of %d MiB: sends are refused before it is full", memMiB, diskMiB, queueMiB)
		}
		size := resource.MustParse(vals["persistence"].(map[string]any)["size"].(string))
		if diskMiB == 0 || float64(size.Value()) < 3*(memMiB+diskMiB)*mi {
			t.Errorf("persistence.size %s is below 3 x the body budgets (%v + %v MiB): the Raft log and snapshots hold every body too", size.String(), memMiB, diskMiB)
		}
	}
	if float64(limit.Value()) < need {
		t.Errorf("memory limit %s is below the %.0f MiB a node needs while one default-size queue is full (body memory budget %v MiB)", limit.String(), need/mi, memMiB)
	}
	if req := c.Resources.Requests[corev1.ResourceMemory]; req.Cmp(limit) > 0 {
		t.Errorf("memory request %s above the limit %s", req.String(), limit.String())
	}
}

// Every listener binds a wildcard address by default, which Go listens on for IPv4 and
// IPv6 alike, loopback included (kubectl port-forward connects to localhost in the
// pod); peers reach the node by its stable DNS name, which survives new pod IPs.
func TestDefaultListenersTakeEveryAddress(t *testing.T) {
	o := decode(t, render(t, readValues(t, "tls")))
	c := brokerContainer(t, o)
	cfg := checkConfig(t, c, podOf(o, 0, "fd00::10", ""))
	for _, k := range []string{"amqp-addr", "amqps-addr", "admin-addr", "cluster-addr"} {
		s, _ := cfg[k].(string)
		if !strings.HasPrefix(s, "0.0.0.0:") && !strings.HasPrefix(s, "[::]:") {
			t.Errorf("%s = %q: not every address of the pod (port-forward and IPv6 clients need that)", k, s)
		}
	}
	adv, _ := cfg["advertise-addr"].(string)
	if want := o.sts.Name + "-0." + o.sts.Spec.ServiceName + "." + namespace + ".svc.cluster.local:5400"; adv != want {
		t.Errorf("advertise-addr = %q, want the pod's stable name %q", adv, want)
	}
}

// secretRecipe is a `kubectl create secret generic` command of the docs.
type secretRecipe struct {
	name string
	keys []string
}

// docSecretRecipes reads every `kubectl ... create secret generic NAME --from-literal=K=...`
// command of docs/deploy-kubernetes.md (continued lines joined) in section section.
func docSecretRecipes(t *testing.T, section string) []secretRecipe {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "deploy-kubernetes.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "\n### "+section+"\n")
	if start < 0 {
		t.Fatalf("docs/deploy-kubernetes.md has no section %q", section)
	}
	doc = doc[start+1:]
	if end := strings.Index(doc[4:], "\n#"); end >= 0 {
		doc = doc[:end+4]
	}
	doc = strings.ReplaceAll(doc, "\\\n", " ")
	create := regexp.MustCompile(`kubectl .*create secret generic ([a-z0-9.-]+)(.*)`)
	literal := regexp.MustCompile(`--from-literal=([A-Za-z0-9._-]+)=`)
	var out []secretRecipe
	for _, m := range create.FindAllStringSubmatch(doc, -1) {
		r := secretRecipe{name: m[1]}
		for _, l := range literal.FindAllStringSubmatch(m[2], -1) {
			r.keys = append(r.keys, l[1])
		}
		sort.Strings(r.keys)
		out = append(out, r)
	}
	if len(out) == 0 {
		t.Fatalf("section %q of docs/deploy-kubernetes.md creates no Secret", section)
	}
	return out
}

// The Secrets docs/deploy-kubernetes.md tells an operator to create hold every key the
// pods read from them (a missing one leaves the pods in CreateContainerConfigError), and
// an install with such a Secret already in the cluster renders; a Secret that lacks a
// key is refused at install, naming the key, rather than leaving pods that cannot start.
func TestDocumentedSecretsHoldWhatThePodsRead(t *testing.T) {
	for _, section := range []string{"The key", "GitOps (Argo CD, `helm template`)"} {
		for _, r := range docSecretRecipes(t, section) {
			what := section + ": Secret " + r.name
			data := map[string][]byte{}
			for _, k := range r.keys {
				data[k] = []byte("c2VjcmV0LXZhbHVlLWZvci10aGUtdGVzdA==")
			}
			secret := corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: r.name, Namespace: namespace}, Data: data}
			api := newAPIServer(secret)
			vals := map[string]any{"image": map[string]any{"repository": "quorumbus"}, "auth": map[string]any{"existingSecret": r.name}}
			manifest, _, err := renderAgainst(vals, api)
			api.Close()
			if err != nil {
				t.Errorf("%s (keys %v): helm install refuses: %v", what, r.keys, err)
				continue
			}
			o := decode(t, manifest)
			for key := range secretKeysRead(o, r.name) {
				if _, ok := data[key]; !ok {
					t.Errorf("%s holds keys %v, but the pods read %q from it: they cannot start", what, r.keys, key)
				}
			}
		}
	}

	// The same install with a Secret holding only the namespace key: refused, naming
	// the missing key and the docs.
	api := newAPIServer(corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "quorumbus-key", Namespace: namespace},
		Data: map[string][]byte{"sas-key": []byte("a2V5")}})
	defer api.Close()
	_, _, err := renderAgainst(map[string]any{"image": map[string]any{"repository": "quorumbus"},
		"auth": map[string]any{"existingSecret": "quorumbus-key"}}, api)
	if err == nil || !strings.Contains(err.Error(), `no key "cluster-secret"`) || !strings.Contains(err.Error(), "The key") {
		t.Errorf("an existing Secret without cluster-secret: err = %v, want a refusal naming the key and the docs", err)
	}
	// Not yet in the cluster (External Secrets may be about to create it), or rendered
	// without the cluster: not refused.
	if _, err := renderErr(map[string]any{"image": map[string]any{"repository": "quorumbus"},
		"auth": map[string]any{"existingSecret": "quorumbus-key"}}); err != nil {
		t.Errorf("a Secret not in the cluster yet is refused: %v", err)
	}
}

// secretKeysRead are the keys of Secret name that the rendered pods read (env and
// volumes of the StatefulSet's pods, the Jobs' and the test pods).
func secretKeysRead(o *objects, name string) map[string]bool {
	keys := map[string]bool{}
	specs := []corev1.PodSpec{o.sts.Spec.Template.Spec}
	for _, j := range o.jobs {
		specs = append(specs, j.Spec.Template.Spec)
	}
	for _, p := range o.pods {
		specs = append(specs, p.Spec)
	}
	for _, s := range specs {
		for _, c := range append(append([]corev1.Container{}, s.InitContainers...), s.Containers...) {
			for _, e := range c.Env {
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name == name &&
					(e.ValueFrom.SecretKeyRef.Optional == nil || !*e.ValueFrom.SecretKeyRef.Optional) {
					keys[e.ValueFrom.SecretKeyRef.Key] = true
				}
			}
		}
		for _, v := range s.Volumes {
			if v.Secret != nil && v.Secret.SecretName == name {
				for _, it := range v.Secret.Items {
					keys[it.Key] = true
				}
			}
		}
	}
	return keys
}
