package charttest

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// composeFile is the part of deploy/compose.yaml this test reads.
type composeFile struct {
	Services map[string]struct {
		Image       string            `json:"image"`
		Hostname    string            `json:"hostname"`
		User        string            `json:"user"`
		ReadOnly    bool              `json:"read_only"`
		Command     []string          `json:"command"`
		Environment map[string]string `json:"environment"`
		Volumes     []string          `json:"volumes"`
	} `json:"services"`
}

// interpolation is compose's ${VAR:?message}.
var interpolation = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*):\?[^}]*\}`)

// deploy/compose.yaml starts its three nodes with the settings the chart gives its
// pods: each node's environment, through quorumbus --check-config, yields the same
// configuration as the matching pod's, apart from the names.
func TestComposeUsesTheChartSettings(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "deploy", "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	b = interpolation.ReplaceAll(b, []byte("test-key-${1}"))
	var cf composeFile
	if err := yaml.Unmarshal(b, &cf); err != nil {
		t.Fatal(err)
	}
	o := decode(t, render(t, readValues(t, "three")))
	c := brokerContainer(t, o)
	if len(cf.Services) != int(*o.sts.Spec.Replicas) {
		t.Fatalf("compose has %d nodes, the chart's default %d", len(cf.Services), *o.sts.Spec.Replicas)
	}
	names := sortedKeys(cf.Services)
	sort.Strings(names)
	for i, name := range names {
		svc := cf.Services[name]
		if svc.User != "65532:65532" || !svc.ReadOnly || len(svc.Command) != 0 || len(svc.Volumes) != 1 ||
			!strings.HasSuffix(svc.Volumes[0], ":"+dataPath) || svc.Hostname != name {
			t.Errorf("compose service %s: %+v", name, svc)
		}
		// The node's settings through the same loader, as a container with no args.
		node := corev1.Container{}
		for _, k := range sortedKeys(svc.Environment) {
			node.Env = append(node.Env, corev1.EnvVar{Name: k, Value: svc.Environment[k]})
		}
		got := checkConfig(t, node, podFacts{name: name})
		want := checkConfig(t, c, podOf(o, i, "10.1.0.1", ""))
		// The body budgets follow the pod's memory limit and volume (values.yaml,
		// "bodies"); compose sets no memory limit, and its nodes keep bodies in memory.
		for _, k := range []string{"node-id", "advertise-addr", "join", "zone", "body-memory-budget-mb", "body-disk-budget-mb"} {
			delete(got, k)
			delete(want, k)
		}
		if gj, wj := yamlOf(t, got), yamlOf(t, want); gj != wj {
			t.Errorf("compose node %s differs from chart pod %d:\ncompose:\n%s\nchart:\n%s", name, i, gj, wj)
		}
	}
	first := cf.Services[names[0]].Environment
	if first["QUORUMBUS_NODE_ID"] != names[0] || first["QUORUMBUS_ADVERTISE_ADDR"] != names[0]+":5400" ||
		strings.Count(first["QUORUMBUS_JOIN"], ":5400") != len(names) {
		t.Errorf("compose node %s identity: %v", names[0], first)
	}
}

func yamlOf(t *testing.T, v any) string {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
