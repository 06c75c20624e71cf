package charttest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/test/harness"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

const (
	dataPath = "/var/lib/quorumbus"
	uid      = 65532
)

// brokerContainer is the StatefulSet's first container, the node (sidecars follow it).
func brokerContainer(t *testing.T, o *objects) corev1.Container {
	t.Helper()
	cs := o.sts.Spec.Template.Spec.Containers
	if len(cs) == 0 || cs[0].Name != "quorumbus" {
		t.Fatalf("containers: %+v", cs)
	}
	return cs[0]
}

func containerPort(t *testing.T, c corev1.Container, name string) corev1.ContainerPort {
	t.Helper()
	for _, p := range c.Ports {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("container %s has no port named %q", c.Name, name)
	return corev1.ContainerPort{}
}

func selects(t *testing.T, sel *metav1.LabelSelector, podLabels map[string]string) bool {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Fatal(err)
	}
	return !s.Empty() && s.Matches(labels.Set(podLabels))
}

// Every values file: what the chart promises, checked on the decoded objects, and each
// pod's args and environment run through quorumbus's own config loader.
func TestRenderedObjects(t *testing.T) {
	for _, name := range cases(t) {
		t.Run(name, func(t *testing.T) {
			o := decode(t, render(t, readValues(t, name)))
			vals := merged(t, readValues(t, name))
			sts := o.sts
			spec := sts.Spec.Template.Spec
			podLabels := sts.Spec.Template.Labels
			c := brokerContainer(t, o)
			replicas := int(*sts.Spec.Replicas)

			// StatefulSet: Parallel, stable names through the headless Service, a volume per pod.
			if sts.Spec.PodManagementPolicy != "Parallel" {
				t.Errorf("podManagementPolicy %q", sts.Spec.PodManagementPolicy)
			}
			if !selects(t, sts.Spec.Selector, podLabels) {
				t.Errorf("selector %v does not select the pod labels %v", sts.Spec.Selector, podLabels)
			}
			headless := o.services[sts.Spec.ServiceName]
			if headless == nil || headless.Spec.ClusterIP != "None" || !headless.Spec.PublishNotReadyAddresses ||
				!labels.SelectorFromSet(headless.Spec.Selector).Matches(labels.Set(podLabels)) {
				t.Fatalf("serviceName %q: not a headless Service publishing not-ready pods: %+v", sts.Spec.ServiceName, headless)
			}
			if len(sts.Spec.VolumeClaimTemplates) != 1 || sts.Spec.VolumeClaimTemplates[0].Name != "data" {
				t.Fatalf("volumeClaimTemplates: %+v", sts.Spec.VolumeClaimTemplates)
			}
			mounts := map[string]corev1.VolumeMount{}
			for _, m := range c.VolumeMounts {
				mounts[m.Name] = m
			}
			if mounts["data"].MountPath != dataPath {
				t.Errorf("the data volume is mounted at %q, want %s", mounts["data"].MountPath, dataPath)
			}
			if r := sts.Spec.PersistentVolumeClaimRetentionPolicy; r == nil || r.WhenScaled != "Retain" || r.WhenDeleted != "Retain" {
				t.Errorf("PVC retention: %+v", r)
			}

			// Security: the restricted Pod Security Standard, read-only root, no API token.
			checkRestricted(t, "StatefulSet", spec)
			if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
				t.Error("the service account token is mounted; the node needs no API access")
			}
			if spec.EnableServiceLinks == nil || *spec.EnableServiceLinks {
				t.Error("service links would add QUORUMBUS_* variables to the node's environment")
			}
			if c.Resources.Requests.Cpu().IsZero() || c.Resources.Limits.Memory().IsZero() {
				t.Errorf("resources: %+v", c.Resources)
			}

			// Probes: HTTP only (never exec), on the admin port, with distinct jobs.
			for kind, p := range map[string]*corev1.Probe{"startup": c.StartupProbe, "readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
				if p == nil || p.HTTPGet == nil || p.Exec != nil || p.HTTPGet.Port.String() != "admin" {
					t.Errorf("%s probe: %+v", kind, p)
				}
			}
			if c.ReadinessProbe.HTTPGet.Path != "/readyz" || c.LivenessProbe.HTTPGet.Path != "/healthz" || c.StartupProbe.HTTPGet.Path != "/healthz" {
				t.Errorf("probe paths: startup %s readiness %s liveness %s", c.StartupProbe.HTTPGet.Path, c.ReadinessProbe.HTTPGet.Path, c.LivenessProbe.HTTPGet.Path)
			}
			if budget := c.StartupProbe.PeriodSeconds * c.StartupProbe.FailureThreshold; budget < 120 {
				t.Errorf("startup probe gives a forming node only %ds (the node itself waits up to 120s to form)", budget)
			}

			// Stopping: preStop drains (exec of the image's qbctl, which needs no shell),
			// and the grace period covers the drain plus the node's own shutdown timeout.
			pre := c.Lifecycle.PreStop
			if pre == nil || pre.Exec == nil || !slices.Equal(pre.Exec.Command, []string{"/usr/local/bin/qbctl", "node", "drain", "--self"}) {
				t.Fatalf("preStop: %+v", pre)
			}

			// The node's own loader accepts each pod's args and env, and what it would
			// start with matches the manifest.
			for i := 0; i < replicas; i++ {
				p := podOf(o, i, fmt.Sprintf("10.1.0.%d", i+10), "zone-"+string(rune('a'+i%3)))
				cfg := checkConfig(t, c, p)
				checkNodeConfig(t, o, c, p, cfg, i)
				shutdown, err := time.ParseDuration(cfg["shutdown-timeout"].(string))
				if err != nil {
					t.Fatal(err)
				}
				drain := int64(vals["shutdown"].(map[string]any)["drainSeconds"].(float64))
				if grace := *spec.TerminationGracePeriodSeconds; grace != drain+int64(shutdown.Seconds())+5 {
					t.Errorf("terminationGracePeriodSeconds %d is not drain %ds + the node's shutdown-timeout %v + 5s", grace, drain, shutdown)
				}
				// What the preStop hook runs with: the container env, no args expanded.
				env, _ := containerEnv(t, c, p)
				if !slices.Contains(env, "QUORUMBUS_DATA="+dataPath) {
					t.Errorf("qbctl in the preStop hook cannot find the node's connection string: env %q", env)
				}
			}

			// Ports: the Services target ports the container declares, with the right protocol.
			for _, svc := range o.services {
				if unrouted(o, svc) {
					continue
				}
				for _, sp := range svc.Spec.Ports {
					cp := containerPort(t, c, sp.TargetPort.String())
					if cp.ContainerPort != sp.Port || cp.Protocol != protocolOrTCP(sp.Protocol) {
						t.Errorf("Service %s port %s %d/%s targets %d/%s", svc.Name, sp.Name, sp.Port, sp.Protocol, cp.ContainerPort, cp.Protocol)
					}
				}
			}
			client := o.services[sts.Name]
			if client == nil {
				t.Fatal("no client Service")
			}
			var clientPorts []int32
			for _, sp := range client.Spec.Ports {
				clientPorts = append(clientPorts, sp.Port)
			}
			tls := vals["tls"].(map[string]any)["enabled"] == true
			plain := !tls || vals["tls"].(map[string]any)["plainAMQP"] == true
			want := []int32{5672, 5300}
			switch {
			case tls && plain:
				want = []int32{5672, 5671, 5300}
			case tls:
				want = []int32{5671, 5300}
			}
			if !slices.Equal(clientPorts, want) {
				t.Errorf("client Service ports %v, want %v", clientPorts, want)
			}

			// PDB: one node at a time.
			if o.pdb == nil || o.pdb.Spec.MaxUnavailable == nil || o.pdb.Spec.MaxUnavailable.IntValue() != 1 || !selects(t, o.pdb.Spec.Selector, podLabels) {
				t.Errorf("PodDisruptionBudget: %+v", o.pdb)
			}

			// Spread over hosts and zones, counting this release's pods.
			keys := map[string]bool{}
			for _, tsc := range spec.TopologySpreadConstraints {
				if tsc.MaxSkew != 1 || !selects(t, tsc.LabelSelector, podLabels) {
					t.Errorf("spread constraint %+v", tsc)
				}
				keys[tsc.TopologyKey] = true
			}
			if !keys["kubernetes.io/hostname"] || !keys["topology.kubernetes.io/zone"] {
				t.Errorf("spread constraints over %v, want hosts and zones", keys)
			}

			// TLS: mounted from the existing Secret when on, absent when off.
			var tlsVol *corev1.Volume
			for i := range spec.Volumes {
				if spec.Volumes[i].Name == "tls" {
					tlsVol = &spec.Volumes[i]
				}
			}
			if tls != (tlsVol != nil) || (tls && (tlsVol.Secret == nil || tlsVol.Secret.SecretName != "quorumbus-tls" ||
				mounts["tls"].MountPath != "/etc/quorumbus/tls" || !mounts["tls"].ReadOnly)) {
				t.Errorf("TLS %v: volume %+v mount %+v", tls, tlsVol, mounts["tls"])
			}

			// Cluster traffic: the secret from a Secret (never a plain value) when on; the
			// nodes' certificates mounted from clusterAuth.tlsSecret when set.
			ca := vals["clusterAuth"].(map[string]any)
			env := map[string]corev1.EnvVar{}
			for _, e := range c.Env {
				env[e.Name] = e
			}
			if cs, ok := env["QUORUMBUS_CLUSTER_SECRET"]; ca["enabled"] == true {
				if !ok || cs.ValueFrom == nil || cs.ValueFrom.SecretKeyRef == nil || cs.ValueFrom.SecretKeyRef.Key != ca["secretKey"] {
					t.Errorf("QUORUMBUS_CLUSTER_SECRET is not taken from a Secret: %+v", cs)
				}
				if ca["existingSecret"] == "" && vals["auth"].(map[string]any)["existingSecret"] == "" {
					if s := o.secrets[sts.Name]; s == nil || len(s.Data[ca["secretKey"].(string)]) < 40 {
						t.Errorf("generated Secret has no cluster secret: %+v", s)
					}
				}
				if ts, _ := ca["tlsSecret"].(string); ts != "" {
					if env["QUORUMBUS_CLUSTER_TLS_CERT"].Value == "" || mounts["cluster-tls"].MountPath != "/etc/quorumbus/cluster-tls" {
						t.Errorf("clusterAuth.tlsSecret %s: env %+v mount %+v", ts, env["QUORUMBUS_CLUSTER_TLS_CERT"], mounts["cluster-tls"])
					}
				}
			} else if ok {
				t.Error("QUORUMBUS_CLUSTER_SECRET set while clusterAuth is off")
			}
			if tls {
				for kind, p := range map[string]*corev1.Probe{"startup": c.StartupProbe, "readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
					if p.HTTPGet.Scheme != corev1.URISchemeHTTPS {
						t.Errorf("%s probe scheme %q, want HTTPS: with TLS the admin port serves HTTPS", kind, p.HTTPGet.Scheme)
					}
				}
			}

			// The key: a generated Secret, or the user's; never a plain value.
			existing := vals["auth"].(map[string]any)["existingSecret"].(string)
			for _, e := range c.Env {
				if e.Name == "QUORUMBUS_SAS_KEY" && (e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil) {
					t.Error("QUORUMBUS_SAS_KEY is not taken from a Secret")
				}
			}
			if existing == "" {
				s := o.secrets[sts.Name]
				if s == nil || len(s.Data["sas-key"]) < 40 || s.Annotations["helm.sh/resource-policy"] != "keep" {
					t.Errorf("generated Secret: %+v", s)
				}
			} else if len(o.secrets) != 0 {
				t.Errorf("auth.existingSecret set, yet the chart renders Secrets %v", sortedKeys(o.secrets))
			}

			// Config.json: a ConfigMap holding exactly the values, mounted where --config-json points.
			if ec, _ := vals["emulatorConfig"].(map[string]any); len(ec) > 0 {
				cm := o.configMaps[sts.Name+"-config"]
				if cm == nil {
					t.Fatal("no Config.json ConfigMap")
				}
				var got map[string]any
				if err := json.Unmarshal([]byte(cm.Data["Config.json"]), &got); err != nil || !reflect.DeepEqual(got, ec) {
					t.Errorf("Config.json: %v\n%s", err, cm.Data["Config.json"])
				}
			} else if len(o.configMaps) != 0 {
				t.Errorf("ConfigMaps without emulatorConfig: %v", sortedKeys(o.configMaps))
			}

			// NetworkPolicy: peers reach the cluster port; the test pod reaches the clients' ports.
			if np, _ := vals["networkPolicy"].(map[string]any); np["enabled"] == true {
				checkNetworkPolicy(t, o, podLabels)
			} else if o.netpol != nil {
				t.Error("NetworkPolicy rendered while disabled")
			}

			// ServiceMonitor: scrapes the admin port of the client Service.
			if sm, _ := vals["serviceMonitor"].(map[string]any); sm["enabled"] == true {
				if o.monitor == nil {
					t.Fatal("no ServiceMonitor")
				}
				eps, _, _ := unstructuredSlice(o.monitor.Object, "spec", "endpoints")
				if len(eps) != 1 || eps[0].(map[string]any)["port"] != "admin" {
					t.Errorf("ServiceMonitor endpoints %v", eps)
				}
			} else if o.monitor != nil {
				t.Error("ServiceMonitor rendered while disabled")
			}

			// PrometheusRule: the groups of deploy/prometheus/alerts.yaml, unchanged.
			if pr, _ := vals["prometheusRule"].(map[string]any); pr["enabled"] == true {
				if o.rule == nil {
					t.Fatal("no PrometheusRule")
				}
				b, err := os.ReadFile(filepath.Join("..", "..", "..", "deploy", "prometheus", "alerts.yaml"))
				if err != nil {
					t.Fatal(err)
				}
				var want map[string]any
				if err := yaml.Unmarshal(b, &want); err != nil {
					t.Fatal(err)
				}
				if got := o.rule.Object["spec"]; !reflect.DeepEqual(got, want) {
					t.Errorf("PrometheusRule spec is not deploy/prometheus/alerts.yaml:\n%v", got)
				}
			} else if o.rule != nil {
				t.Error("PrometheusRule rendered while disabled")
			}

			// The helm test pod: restricted too, and it runs qbctl against the client Service.
			test := o.pods[sts.Name+"-test"]
			if test == nil || test.Annotations["helm.sh/hook"] != "test" {
				t.Fatalf("helm test pod: %+v", test)
			}
			checkRestricted(t, "test pod", test.Spec)
		})
	}
}

func protocolOrTCP(p corev1.Protocol) corev1.Protocol {
	if p == "" {
		return corev1.ProtocolTCP
	}
	return p
}

func unstructuredSlice(obj map[string]any, path ...string) ([]any, bool, error) {
	var cur any = obj
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false, nil
		}
		cur = m[p]
	}
	s, ok := cur.([]any)
	return s, ok, nil
}

// checkRestricted checks the restricted Pod Security Standard's rules on a pod spec.
func checkRestricted(t *testing.T, what string, spec corev1.PodSpec) {
	t.Helper()
	psc := spec.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil || psc.SeccompProfile.Type != "RuntimeDefault" ||
		psc.RunAsUser == nil || *psc.RunAsUser != uid || psc.FSGroup == nil || *psc.FSGroup != uid {
		t.Errorf("%s: pod securityContext %+v", what, psc)
	}
	for _, c := range append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...) {
		sc := c.SecurityContext
		if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.ReadOnlyRootFilesystem == nil ||
			!*sc.ReadOnlyRootFilesystem || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) ||
			len(sc.Capabilities.Add) != 0 || sc.Privileged != nil && *sc.Privileged {
			t.Errorf("%s: container %s securityContext %+v", what, c.Name, sc)
		}
		if c.Resources.Limits.Memory().IsZero() {
			t.Errorf("%s: container %s has no memory limit", what, c.Name)
		}
	}
}

// checkNodeConfig compares what quorumbus would start with (--check-config) to the
// manifest: identity, addresses, ports, volumes, key.
func checkNodeConfig(t *testing.T, o *objects, c corev1.Container, p podFacts, cfg map[string]any, i int) {
	t.Helper()
	sts := o.sts
	host := func(j int) string {
		return fmt.Sprintf("%s-%d.%s.%s.svc.cluster.local", sts.Name, j, sts.Spec.ServiceName, namespace)
	}
	if cfg["node-id"] != p.name {
		t.Errorf("pod %s: node-id %v; the ID must be the stable pod name", p.name, cfg["node-id"])
	}
	if cfg["advertise-addr"] != host(i)+":5400" {
		t.Errorf("pod %s: advertise-addr %v, want its headless-service name %s:5400", p.name, cfg["advertise-addr"], host(i))
	}
	expect := int(cfg["bootstrap-expect"].(float64))
	join, _ := cfg["join"].([]any)
	if expect < 1 || expect > int(*sts.Spec.Replicas) || len(join) != expect {
		t.Errorf("pod %s: bootstrap-expect %d with %d replicas, join %v", p.name, expect, *sts.Spec.Replicas, join)
	}
	for j, addr := range join {
		if addr != host(j)+":5400" {
			t.Errorf("pod %s: join entry %d is %v, want %s:5400", p.name, j, addr, host(j))
		}
	}
	if cfg["data"] != dataPath {
		t.Errorf("pod %s: data %v is not the volume at %s", p.name, cfg["data"], dataPath)
	}
	listeners := map[string]string{"admin-addr": "admin", "cluster-addr": "cluster"}
	if cfg["amqp-addr"] != "" { // "" when TLS is on and plain AMQP off
		listeners["amqp-addr"] = "amqp"
	}
	if cfg["tls-cert"] != "" { // AMQPS listens only with TLS
		listeners["amqps-addr"] = "amqps"
	}
	for setting, portName := range listeners {
		if got, want := port(t, cfg[setting]), containerPort(t, c, portName).ContainerPort; got != want {
			t.Errorf("pod %s: %s listens on port %d, the manifest declares %s=%d", p.name, setting, got, portName, want)
		}
	}
	if g := containerPort(t, c, "gossip"); g.Protocol != corev1.ProtocolUDP || g.ContainerPort != port(t, cfg["cluster-addr"]) {
		t.Errorf("gossip port %+v: memberlist uses UDP on the cluster port", g)
	}
	if port(t, cfg["advertise-addr"]) != port(t, cfg["cluster-addr"]) {
		t.Errorf("advertise-addr %v and cluster-addr %v differ in port; the headless Service maps 5400 to 5400", cfg["advertise-addr"], cfg["cluster-addr"])
	}
	if cfg["sas-key"] != "REDACTED" {
		t.Errorf("pod %s: no SAS key reaches the node (sas-key %v)", p.name, cfg["sas-key"])
	}
	// The zone: from the pod's zone label, or (cluster.zoneFromNode) the name of the
	// Kubernetes node whose label the node reads at start, with its token mounted.
	if from, _ := cfg["zone-from-node"].(string); from != "" {
		if from != p.node || cfg["zone"] != "" {
			t.Errorf("pod %s: zone-from-node %q zone %v, want the pod's node %s", p.name, from, cfg["zone"], p.node)
		}
		var token bool
		for _, m := range c.VolumeMounts {
			token = token || (m.Name == "kube-api" && m.MountPath == "/var/run/secrets/kubernetes.io/serviceaccount" && m.ReadOnly)
		}
		if !token {
			t.Errorf("pod %s: zone-from-node without the service account token at /var/run/secrets/kubernetes.io/serviceaccount: %+v", p.name, c.VolumeMounts)
		}
	} else if cfg["zone"] != p.labels["topology.kubernetes.io/zone"] {
		t.Errorf("pod %s: zone %v, want the pod's zone label %q", p.name, cfg["zone"], p.labels["topology.kubernetes.io/zone"])
	}
	if path, _ := cfg["config-json"].(string); path != "" {
		var ok bool
		for _, m := range c.VolumeMounts {
			if m.Name == "config" && path == m.MountPath+"/Config.json" {
				ok = true
			}
		}
		if !ok {
			t.Errorf("pod %s: --config-json %s is not in the Config.json ConfigMap's mount", p.name, path)
		}
	}
}

func checkNetworkPolicy(t *testing.T, o *objects, podLabels map[string]string) {
	t.Helper()
	np := o.netpol
	if np == nil || !selects(t, &np.Spec.PodSelector, podLabels) {
		t.Fatalf("NetworkPolicy: %+v", np)
	}
	test := o.pods[o.sts.Name+"-test"]
	var peersCluster, testClients bool
	for _, rule := range np.Spec.Ingress {
		ports := map[string]bool{}
		for _, p := range rule.Ports {
			ports[fmt.Sprintf("%s/%s", p.Port.String(), *p.Protocol)] = true
		}
		if len(rule.From) == 0 && ports["5672/TCP"] && ports["5300/TCP"] {
			testClients = true // from anyone
		}
		for _, from := range rule.From {
			if from.PodSelector == nil || from.NamespaceSelector != nil {
				continue
			}
			if selects(t, from.PodSelector, podLabels) && ports["5400/TCP"] && ports["5400/UDP"] {
				peersCluster = true
			}
			if test != nil && selects(t, from.PodSelector, test.Labels) && ports["5672/TCP"] && ports["5300/TCP"] {
				testClients = true
			}
		}
	}
	if !peersCluster || !testClients {
		t.Errorf("NetworkPolicy: peers reach 5400 tcp+udp %v, the test pod reaches 5672 and 5300 %v", peersCluster, testClients)
	}
}

// The probes ask a real node for paths it serves: a node answers each with 200 once it
// serves, and /readyz (readiness) is not /healthz (liveness).
func TestProbesHitPathsTheNodeServes(t *testing.T) {
	o := decode(t, render(t, readValues(t, "three")))
	c := brokerContainer(t, o)
	n := harness.Start(t)
	for kind, p := range map[string]*corev1.Probe{"startup": c.StartupProbe, "readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		resp, err := http.Get("http://" + n.Admin + p.HTTPGet.Path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s probe GET %s: %d %s", kind, p.HTTPGet.Path, resp.StatusCode, body)
		}
	}
	// A path the node does not serve is not mistaken for one (the check above means something).
	resp, err := http.Get("http://" + n.Admin + "/livez")
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatal("GET /livez answered 200; the probe check cannot tell paths apart")
		}
	}
}

// Pods roll when what they start with changes (the checksum annotations follow the key
// and TLS settings, and Config.json when no Job applies it), and not when nothing did;
// scaling from 3 to 5 nodes leaves the pod template alone, so it restarts no pod.
func TestPodsRollOnlyWhenTheirConfigChanges(t *testing.T) {
	template := func(vals map[string]any) corev1.PodTemplateSpec {
		t.Helper()
		return decode(t, render(t, vals)).sts.Spec.Template
	}
	base := template(readValues(t, "three"))
	if again := template(readValues(t, "three")); !reflect.DeepEqual(base, again) {
		t.Fatal("rendering the same values twice changed the pod template: pods would roll on every upgrade")
	}
	if five := template(readValues(t, "five")); !reflect.DeepEqual(base, five) {
		t.Error("scaling from 3 to 5 nodes changes the pod template, restarting every pod")
	}
	// Editing Config.json restarts no broker: the configApply Job applies it to the
	// running cluster (TestConfigApplyJob and the booted StatefulSet check that it does),
	// and a node that restarts later loads the new file, which only creates what is
	// missing. Only with configApply off, when the pods' start-up load is all that
	// applies it, do they roll.
	cfg := readValues(t, "config-json")
	rename := func(vals map[string]any) {
		q := vals["emulatorConfig"].(map[string]any)["UserConfig"].(map[string]any)["Namespaces"].([]any)[0].(map[string]any)["Queues"].([]any)[0].(map[string]any)
		q["Name"] = "queue.renamed"
	}
	withConfig := decode(t, render(t, cfg))
	rename(cfg)
	edited := decode(t, render(t, cfg))
	if !reflect.DeepEqual(withConfig.sts.Spec.Template, edited.sts.Spec.Template) {
		t.Error("editing Config.json changes the pod template: every broker restarts, although the configApply Job applies it")
	}
	jobChecksum := func(o *objects) string {
		for _, j := range o.jobs {
			return j.Spec.Template.Annotations["checksum/config"]
		}
		t.Fatal("no configApply Job rendered")
		return ""
	}
	if jobChecksum(withConfig) == jobChecksum(edited) {
		t.Error("editing Config.json leaves the configApply Job's checksum/config unchanged")
	}
	noApply := readValues(t, "config-json")
	noApply["configApply"] = map[string]any{"enabled": false}
	before := template(noApply)
	if before.Annotations["checksum/config"] == "" {
		t.Error("with configApply off, the pods carry no checksum/config: editing Config.json would never reach them")
	}
	rename(noApply)
	if template(noApply).Annotations["checksum/config"] == before.Annotations["checksum/config"] {
		t.Error("configApply off: editing Config.json leaves checksum/config unchanged: pods would keep the old entities")
	}
	for _, tc := range []struct {
		name, annotation string
		vals             map[string]any
	}{
		{"existing secret", "checksum/auth", readValues(t, "existing-secret")},
		{"TLS", "checksum/tls", readValues(t, "tls")},
		{"TLS only", "checksum/tls", readValues(t, "tls-only")},
		{"cluster auth off", "checksum/cluster-auth", readValues(t, "cluster-auth-off")},
		{"cluster TLS from a Secret", "checksum/cluster-auth", readValues(t, "tls-only")},
	} {
		if template(tc.vals).Annotations[tc.annotation] == base.Annotations[tc.annotation] {
			t.Errorf("%s: %s unchanged", tc.name, tc.annotation)
		}
	}
}

// Values that cannot work are refused at render time, naming the problem.
func TestBadValuesAreRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		vals map[string]any
		want string
	}{
		{"no nodes", map[string]any{"replicaCount": 0}, "replicaCount"},
		{"typo", map[string]any{"replicaCuont": 3}, "replicaCuont"},
		{"bootstrap beyond replicas", map[string]any{"replicaCount": 2, "cluster": map[string]any{"bootstrapExpect": 3}}, "never form"},
		{"TLS without a Secret", map[string]any{"tls": map[string]any{"enabled": true}}, "tls.existingSecret"},
		{"bad duration", map[string]any{"cluster": map[string]any{"deadNodeGrace": "ten minutes"}}, "deadNodeGrace"},
		{"bad log level", map[string]any{"logLevel": "loud"}, "logLevel"},
		// Pulled from docker.io/library/quorumbus, which nobody publishes.
		{"no image repository", map[string]any{"image": map[string]any{"repository": ""}}, "image.repository is required"},
		// "fd00::1:5672" is no address: an IPv6 listen address needs brackets.
		{"IPv6 without brackets", map[string]any{"listenAddress": "fd00::1"}, "listenAddress"},
		// The admin port speaks HTTPS only: a Gateway must know whom to trust.
		{"HTTPRoute to TLS without a CA", map[string]any{"tls": map[string]any{"enabled": true, "existingSecret": "quorumbus-tls"},
			"httpRoute": map[string]any{"enabled": true, "parentRefs": []any{map[string]any{"name": "gateway"}}}}, "httpRoute.backendTLS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vals := tc.vals
			if _, ok := vals["image"]; !ok {
				vals["image"] = map[string]any{"repository": "quorumbus"}
			}
			_, err := renderErr(vals)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want mention of %q", err, tc.want)
			}
		})
	}
}

// NOTES.txt tells the user how to build the connection string from the Secret the pods
// really read, says how to connect over TLS, and says plainly when cluster traffic is
// not authenticated and what the ServiceMonitor scrapes.
func TestNotesTellHowToConnect(t *testing.T) {
	for _, tc := range []struct {
		values string
		want   []string
	}{
		{"three", []string{"get secret quorumbus -o jsonpath='{.data.sas-key}'",
			"Endpoint=sb://quorumbus.messaging.svc.cluster.local:5672;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=$KEY;UseDevelopmentEmulator=true",
			"port-forward svc/quorumbus 5672 5300", "exec quorumbus-0 -- qbctl cluster status", "helm test quorumbus"}},
		{"existing-secret", []string{"get secret my-sas-key -o jsonpath='{.data.primary}'", "SharedAccessKeyName=AppKey;"}},
		{"tls", []string{"AMQPS on port 5671 and HTTPS on 5300",
			"Endpoint=sb://quorumbus.messaging.svc.cluster.local:5671/;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=$KEY"}},
		{"three", []string{"Cluster traffic between the nodes is authenticated and encrypted"}},
		{"cluster-auth-off", []string{"WARNING: clusterAuth.enabled=false"}},
		{"service-monitor", []string{"Prometheus scrapes /metrics on port 5300", "deploy/grafana/quorumbus.json"}},
	} {
		_, notes, err := renderRelease(readValues(t, tc.values))
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range tc.want {
			if !strings.Contains(notes, w) {
				t.Errorf("%s: NOTES.txt lacks %q:\n%s", tc.values, w, notes)
			}
		}
	}
}

// unrouted reports whether svc is the Service an Ingress sends /metrics to: no selector
// (no endpoints), not a way to the nodes.
func unrouted(o *objects, svc *corev1.Service) bool {
	return svc.Name == o.sts.Name+"-unrouted" && len(svc.Spec.Selector) == 0
}
