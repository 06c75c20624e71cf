package charttest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// cluster.rebalanceMoves reaches the node as --rebalance-moves, which its loader takes;
// a negative value is refused by the schema.
func TestRebalanceMovesValue(t *testing.T) {
	for name, want := range map[string]float64{"three": 2, "zone-from-node": 4} {
		o := decode(t, render(t, readValues(t, name)))
		c := brokerContainer(t, o)
		if !slices.Contains(c.Args, fmt.Sprintf("--rebalance-moves=%d", int(want))) {
			t.Errorf("%s: args %q lack --rebalance-moves=%d", name, c.Args, int(want))
		}
		if cfg := checkConfig(t, c, podOf(o, 0, "10.1.0.10", "zone-a")); cfg["rebalance-moves"] != want {
			t.Errorf("%s: the node starts with rebalance-moves %v, want %v", name, cfg["rebalance-moves"], want)
		}
	}
	vals := readValues(t, "three")
	vals["cluster"] = map[string]any{"rebalanceMoves": -1}
	if _, err := renderErr(vals); err == nil || !strings.Contains(err.Error(), "rebalanceMoves") {
		t.Fatalf("rebalanceMoves -1: %v", err)
	}
}

// cluster.zoneFromNode: a ClusterRole allowing get on nodes and nothing else, bound to
// the pods' ServiceAccount in the release's namespace; the node gets the Kubernetes
// node's name and its token (in its container only, the pod's automount stays off).
// Without it, no RBAC object; with a fixed cluster.zone, the zone as a value. Values
// that cannot work are refused naming the fix.
func TestZoneFromNodeValues(t *testing.T) {
	o := decode(t, render(t, readValues(t, "zone-from-node")))
	if len(o.roles) != 1 || len(o.bindings) != 1 {
		t.Fatalf("ClusterRoles %v, ClusterRoleBindings %v: want one of each", sortedKeys(o.roles), sortedKeys(o.bindings))
	}
	var role *rbacv1.ClusterRole
	for _, r := range o.roles {
		role = r
	}
	want := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get"}}}
	if fmt.Sprint(role.Rules) != fmt.Sprint(want) {
		t.Errorf("ClusterRole %s rules %+v, want get on nodes only", role.Name, role.Rules)
	}
	if !strings.Contains(role.Name, namespace) {
		t.Errorf("ClusterRole %q: cluster-scoped, its name must carry the namespace (two releases of the same name)", role.Name)
	}
	for _, b := range o.bindings {
		if b.RoleRef.Kind != "ClusterRole" || b.RoleRef.Name != role.Name || len(b.Subjects) != 1 ||
			b.Subjects[0].Kind != "ServiceAccount" || b.Subjects[0].Name != o.account.Name || b.Subjects[0].Namespace != namespace {
			t.Errorf("ClusterRoleBinding %s: roleRef %+v subjects %+v, want %s bound to ServiceAccount %s/%s", b.Name, b.RoleRef, b.Subjects, role.Name, namespace, o.account.Name)
		}
	}
	spec := o.sts.Spec.Template.Spec
	if spec.ServiceAccountName != o.account.Name || spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Errorf("pods: serviceAccountName %q automount %v", spec.ServiceAccountName, spec.AutomountServiceAccountToken)
	}
	var vol *corev1.Volume
	for i := range spec.Volumes {
		if spec.Volumes[i].Name == "kube-api" {
			vol = &spec.Volumes[i]
		}
	}
	if vol == nil || vol.Projected == nil || len(vol.Projected.Sources) != 3 || vol.Projected.Sources[0].ServiceAccountToken == nil ||
		vol.Projected.Sources[1].ConfigMap == nil || vol.Projected.Sources[1].ConfigMap.Name != "kube-root-ca.crt" {
		t.Fatalf("kube-api volume %+v: want the token, the cluster CA and the namespace", vol)
	}
	for _, c := range spec.Containers[1:] {
		for _, m := range c.VolumeMounts {
			if m.Name == "kube-api" {
				t.Errorf("container %s mounts the token too", c.Name)
			}
		}
	}

	d := decode(t, render(t, readValues(t, "three")))
	if len(d.roles) != 0 || len(d.bindings) != 0 {
		t.Errorf("without zoneFromNode: ClusterRoles %v ClusterRoleBindings %v", sortedKeys(d.roles), sortedKeys(d.bindings))
	}

	vals := readValues(t, "three")
	vals["cluster"] = map[string]any{"zone": "dc-1"}
	s := decode(t, render(t, vals))
	if len(s.roles) != 0 {
		t.Errorf("a fixed zone renders a ClusterRole")
	}
	if cfg := checkConfig(t, brokerContainer(t, s), podOf(s, 0, "10.1.0.10", "zone-a")); cfg["zone"] != "dc-1" || cfg["zone-from-node"] != "" {
		t.Errorf("cluster.zone dc-1: the node starts with zone %v, zone-from-node %v", cfg["zone"], cfg["zone-from-node"])
	}

	for _, tc := range []struct {
		name string
		vals map[string]any
		want string
	}{
		{"no ServiceAccount", map[string]any{"cluster": map[string]any{"zoneFromNode": true}}, "serviceAccount.create=true"},
		{"both", map[string]any{"cluster": map[string]any{"zoneFromNode": true, "zone": "dc-1"},
			"serviceAccount": map[string]any{"create": true}}, "set one"},
	} {
		vals := readValues(t, "three")
		for k, v := range tc.vals {
			vals[k] = v
		}
		if _, err := renderErr(vals); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %q", tc.name, err, tc.want)
		}
	}
	// A ServiceAccount of the user's, named: bound, not created.
	vals = readValues(t, "three")
	vals["cluster"] = map[string]any{"zoneFromNode": true}
	vals["serviceAccount"] = map[string]any{"name": "brokers"}
	n := decode(t, render(t, vals))
	for _, b := range n.bindings {
		if n.account != nil || b.Subjects[0].Name != "brokers" || n.sts.Spec.Template.Spec.ServiceAccountName != "brokers" {
			t.Errorf("serviceAccount.name brokers: created %v, bound %+v", n.account != nil, b.Subjects)
		}
	}
}

// backup: a CronJob whose pod runs the chart's qbctl `backup create` against the client
// Service's admin port with the namespace key (and the node's certificate with TLS),
// into the PVC, one run at a time; its pods are clients (the NetworkPolicy lets them
// in) and never count as broker pods. Its rotate step, run here with sh, names the
// archive by its UTC time and keeps the newest backup.keep.
func TestBackupCronJob(t *testing.T) {
	vals := readValues(t, "backup")
	o := decode(t, render(t, vals))
	cj := o.cronJobs[releaseName+"-backup"]
	if cj == nil {
		t.Fatalf("no CronJob among %v", sortedKeys(o.cronJobs))
	}
	if cj.Spec.Schedule != "30 2 * * *" || cj.Spec.TimeZone == nil || *cj.Spec.TimeZone != "Europe/Paris" || cj.Spec.ConcurrencyPolicy != "Forbid" {
		t.Errorf("CronJob schedule %q timeZone %v concurrency %q", cj.Spec.Schedule, cj.Spec.TimeZone, cj.Spec.ConcurrencyPolicy)
	}
	pvc := o.claims[releaseName+"-backups"]
	if pvc == nil || pvc.Spec.Resources.Requests.Storage().String() != "50Gi" || pvc.Spec.StorageClassName == nil ||
		*pvc.Spec.StorageClassName != "fast" || pvc.Annotations["helm.sh/resource-policy"] != "keep" {
		t.Fatalf("backup PVC %+v", pvc)
	}
	pod := cj.Spec.JobTemplate.Spec.Template
	spec := pod.Spec
	checkRestricted(t, "backup CronJob", spec)
	if spec.RestartPolicy != corev1.RestartPolicyNever || spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Errorf("backup pod: restartPolicy %q automount %v", spec.RestartPolicy, spec.AutomountServiceAccountToken)
	}
	if len(spec.Volumes) == 0 || spec.Volumes[0].PersistentVolumeClaim == nil || spec.Volumes[0].PersistentVolumeClaim.ClaimName != pvc.Name {
		t.Errorf("backup volumes %+v, want the PVC %s", spec.Volumes, pvc.Name)
	}
	if len(spec.InitContainers) != 1 || len(spec.Containers) != 1 {
		t.Fatalf("backup pod: init containers %d, containers %d", len(spec.InitContainers), len(spec.Containers))
	}
	b := spec.InitContainers[0]
	if b.Image != brokerContainer(t, o).Image || !slices.Equal(b.Command, []string{"/usr/local/bin/qbctl"}) {
		t.Errorf("backup container: image %q command %q, want the chart's image and its qbctl", b.Image, b.Command)
	}
	wantArgs := []string{"--admin-addr=" + releaseName + "." + namespace + ".svc.cluster.local:5300", "backup", "create", "/backups/.incoming-$(POD_UID).qbb"}
	if !slices.Equal(b.Args, wantArgs) {
		t.Errorf("backup args %q, want %q", b.Args, wantArgs)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range b.Env {
		env[e.Name] = e
	}
	if k := env["SAS_KEY"].ValueFrom; k == nil || k.SecretKeyRef == nil || k.SecretKeyRef.Name != releaseName || k.SecretKeyRef.Key != "sas-key" {
		t.Errorf("backup: SAS_KEY %+v, want the chart's Secret", env["SAS_KEY"])
	}
	if !strings.Contains(env["QUORUMBUS_CONNECTION_STRING"].Value, "SharedAccessKey=$(SAS_KEY)") || env["QUORUMBUS_TLS_CERT"].Value != "/etc/quorumbus/tls/tls.crt" {
		t.Errorf("backup: connection string %q, TLS cert %q", env["QUORUMBUS_CONNECTION_STRING"].Value, env["QUORUMBUS_TLS_CERT"].Value)
	}
	var tlsMount bool
	for _, m := range b.VolumeMounts {
		tlsMount = tlsMount || m.Name == "tls" && m.MountPath == "/etc/quorumbus/tls"
	}
	if !tlsMount {
		t.Errorf("backup: the node's certificate is not mounted: %+v", b.VolumeMounts)
	}
	if pod.Labels[releaseName+"-client"] != "true" || pod.Labels["app.kubernetes.io/component"] != "backup" {
		t.Errorf("backup pod labels %v: want the client label (NetworkPolicy) and its own component", pod.Labels)
	}
	if selects(t, o.pdb.Spec.Selector, pod.Labels) {
		t.Error("the PodDisruptionBudget selects the backup pods")
	}
	for _, s := range o.services {
		if len(s.Spec.Selector) > 0 && labelsMatch(s.Spec.Selector, pod.Labels) {
			t.Errorf("Service %s selects the backup pods", s.Name)
		}
	}

	// The rotate step, with this machine's sh in place of the tools image's.
	script := spec.Containers[0].Args[0]
	if !slices.Equal(spec.Containers[0].Command, []string{"sh", "-c"}) || !strings.Contains(script, "tail -n +11") {
		t.Fatalf("rotate: command %q script:\n%s", spec.Containers[0].Command, script)
	}
	dir := t.TempDir()
	var old []string
	for i := 0; i < 12; i++ {
		name := fmt.Sprintf("quorumbus-202611%02dT020000Z.qbb", i+1)
		old = append(old, name)
		if err := os.WriteFile(filepath.Join(dir, name), []byte("archive"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{".incoming-this-pod.qbb", ".incoming-failed-run.qbb", "notes.txt"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(f), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("sh", "-c", strings.ReplaceAll(script, "/backups", dir))
	cmd.Env = []string{"POD_UID=this-pod", "PATH=" + os.Getenv("PATH")}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("rotate: %v\n%s", err, out)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	var fresh string
	for _, e := range entries {
		left = append(left, e.Name())
		if !slices.Contains(old, e.Name()) && strings.HasPrefix(e.Name(), "quorumbus-") {
			fresh = e.Name()
		}
	}
	sort.Strings(left)
	// The 12 old ones and the new one: the 10 newest stay (the new one and 9 old).
	want := append(append([]string{"notes.txt"}, old[3:]...), fresh)
	sort.Strings(want)
	if fresh == "" || !slices.Equal(left, want) {
		t.Fatalf("after rotate: %q, want %q\n%s", left, want, out)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, fresh)); string(b) != ".incoming-this-pod.qbb" {
		t.Errorf("%s holds %q, not the archive this pod wrote", fresh, b)
	}

	// An existing claim: used, none created. Disabled (the default): nothing.
	vals["backup"].(map[string]any)["pvc"] = map[string]any{"existingClaim": "nfs-backups"}
	e := decode(t, render(t, vals))
	if len(e.claims) != 0 || e.cronJobs[releaseName+"-backup"].Spec.JobTemplate.Spec.Template.Spec.Volumes[0].PersistentVolumeClaim.ClaimName != "nfs-backups" {
		t.Errorf("existingClaim: claims %v", sortedKeys(e.claims))
	}
	if d := decode(t, render(t, readValues(t, "three"))); len(d.cronJobs) != 0 || len(d.claims) != 0 {
		t.Errorf("backups off: CronJobs %v claims %v", sortedKeys(d.cronJobs), sortedKeys(d.claims))
	}
}

func labelsMatch(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}
