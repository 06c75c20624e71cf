package charttest

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/release"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// Day 2 through a real kube-apiserver on etcd (no kubelet or controllers, so nothing
// runs; what the API server admits, defaults, validates and authorizes is real):
//   - cluster.zoneFromNode: the ClusterRole and its binding are accepted, and the
//     pods' ServiceAccount, with a token the API server issues, reads a node's zone
//     label where the namespace's default account is refused; the pods, with the
//     projected token volume, pass the restricted Pod Security Standard. An upgrade
//     that turns it off removes both objects.
//   - backup.enabled: the CronJob and its PVC are accepted, and the Job the CronJob
//     controller would create from it, and that Job's pod, pass admission.
//   - helm upgrade --set replicaCount=5, then back to 3: the StatefulSet takes the new
//     count with its pod template unchanged (no pod restarts; the new pods join
//     through the same bootstrap nodes), every pod up to the count is admitted, and the
//     PodDisruptionBudget and headless Service stay the same objects selecting every
//     node pod.
func TestHelmDay2ThroughARealAPIServer(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts kube-apiserver")
	}
	k := startKubeAPI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cs := k.cs
	check := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace, Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted",
		"pod-security.kubernetes.io/warn":    "restricted",
	}}}
	_, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
	check(err)
	_, err = cs.CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	check(err)
	// Two Kubernetes nodes, as the kubelets would register them: one labelled with its zone.
	for name, labels := range map[string]map[string]string{
		"node-a": {"kubernetes.io/hostname": "node-a", "topology.kubernetes.io/zone": "zone-a"},
		"node-b": {"kubernetes.io/hostname": "node-b"},
	} {
		_, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{})
		check(err)
	}

	vals := readValues(t, "zone-from-node")
	vals["backup"] = map[string]any{"enabled": true, "keep": 3}
	chrt, err := loader.Load(chartDir)
	check(err)
	helmLog := &syncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("helm log:\n%s", tail(helmLog.String(), 4000))
		}
	})
	cfg := k.helm(t, helmLog)
	in := action.NewInstall(cfg)
	in.ReleaseName, in.Namespace, in.Timeout = releaseName, namespace, 2*time.Minute
	rel, err := in.RunWithContext(ctx, chrt, vals)
	if err != nil {
		t.Fatalf("helm install: %v", err)
	}
	if rel.Info.Status != release.StatusDeployed {
		t.Fatalf("helm install: %s", rel.Info.Status)
	}

	// zoneFromNode: the RBAC objects as the API server holds them.
	sel := metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + releaseName}
	roles, err := cs.RbacV1().ClusterRoles().List(ctx, sel)
	check(err)
	bindings, err := cs.RbacV1().ClusterRoleBindings().List(ctx, sel)
	check(err)
	if len(roles.Items) != 1 || len(bindings.Items) != 1 {
		t.Fatalf("ClusterRoles %d, ClusterRoleBindings %d: want one of each", len(roles.Items), len(bindings.Items))
	}
	account := "system:serviceaccount:" + namespace + ":" + releaseName
	for _, tc := range []struct {
		user      string
		verb, res string
		name      string
		allowed   bool
	}{
		{account, "get", "nodes", "node-a", true},
		{account, "list", "nodes", "", false},
		{account, "update", "nodes", "node-a", false},
		{account, "get", "secrets", releaseName, false},
		{"system:serviceaccount:" + namespace + ":default", "get", "nodes", "node-a", false},
	} {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: tc.user,
			Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: tc.verb, Resource: tc.res, Name: tc.name, Namespace: map[bool]string{true: namespace}[tc.res == "secrets"]}}}
		got, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		check(err)
		if got.Status.Allowed != tc.allowed {
			t.Errorf("%s %s %s/%s: allowed %v, want %v (%s)", tc.user, tc.verb, tc.res, tc.name, got.Status.Allowed, tc.allowed, got.Status.Reason)
		}
	}
	// What the node does at start, with a token the API server issues for the account
	// (as the kubelet's projected volume holds): GET /api/v1/nodes/NAME.
	zone := func(sa, node string) (string, error) {
		tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, sa,
			&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3607)}}, metav1.CreateOptions{})
		if err != nil {
			return "", err
		}
		rc, err := k.getter.ToRESTConfig()
		if err != nil {
			return "", err
		}
		rc.BearerToken, rc.BearerTokenFile = tr.Status.Token, ""
		pc, err := kubernetes.NewForConfig(rc)
		if err != nil {
			return "", err
		}
		n, err := pc.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		return n.Labels["topology.kubernetes.io/zone"], nil
	}
	if z, err := zone(releaseName, "node-a"); err != nil || z != "zone-a" {
		t.Errorf("the pods' ServiceAccount reads node-a's zone: %q, %v", z, err)
	}
	if z, err := zone(releaseName, "node-b"); err != nil || z != "" {
		t.Errorf("node-b has no zone label: %q, %v", z, err)
	}
	if _, err := zone("default", "node-a"); !apierrors.IsForbidden(err) {
		t.Errorf("the namespace's default ServiceAccount reads nodes: %v, want forbidden", err)
	}

	o := k.served(t)
	if *o.sts.Spec.Replicas != 3 {
		t.Fatalf("StatefulSet replicas %d", *o.sts.Spec.Replicas)
	}
	pods := k.admitPods(t, o) // restricted standard, with the projected token volume
	for _, p := range pods {
		if p.Spec.ServiceAccountName != releaseName {
			t.Errorf("pod %s runs as %q", p.Name, p.Spec.ServiceAccountName)
		}
		for _, v := range p.Spec.Volumes {
			if strings.HasPrefix(v.Name, "kube-api-access-") {
				t.Errorf("pod %s: the API server mounted the token into every container (%s)", p.Name, v.Name)
			}
		}
	}

	// backup: the CronJob and its PVC, and what the CronJob controller would create.
	cj, err := cs.BatchV1().CronJobs(namespace).Get(ctx, releaseName+"-backup", metav1.GetOptions{})
	check(err)
	if _, err := cs.CoreV1().PersistentVolumeClaims(namespace).Get(ctx, releaseName+"-backups", metav1.GetOptions{}); err != nil {
		t.Fatalf("backup PVC: %v", err)
	}
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: cj.Name + "-29000000", Namespace: namespace, Labels: cj.Spec.JobTemplate.Labels,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "CronJob", Name: cj.Name, UID: cj.UID, Controller: ptr.To(true)}}},
		Spec: *cj.Spec.JobTemplate.Spec.DeepCopy()}
	job, err = cs.BatchV1().Jobs(namespace).Create(ctx, job, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the backup Job, as the CronJob controller creates it: %v", err)
	}
	tmpl := job.Spec.Template
	bp := &corev1.Pod{ObjectMeta: *tmpl.ObjectMeta.DeepCopy(), Spec: *tmpl.Spec.DeepCopy()}
	bp.Name, bp.Namespace = job.Name+"-x7k2p", namespace
	if _, err := cs.CoreV1().Pods(namespace).Create(ctx, bp, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatalf("the backup Job's pod: %v", err)
	}
	check(cs.BatchV1().Jobs(namespace).Delete(ctx, job.Name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}))

	// Scale out to 5, then back in to 3.
	upgrade := func(what string, v map[string]any) *objects {
		t.Helper()
		up := action.NewUpgrade(cfg)
		up.Namespace, up.Timeout = namespace, 2*time.Minute
		rel, err := up.RunWithContext(ctx, releaseName, chrt, v)
		if err != nil {
			t.Fatalf("helm upgrade %s: %v", what, err)
		}
		if rel.Info.Status != release.StatusDeployed {
			t.Fatalf("helm upgrade %s: %s", what, rel.Info.Status)
		}
		return k.served(t)
	}
	prev := o
	for _, n := range []int{5, 3} {
		v := merged(t, vals)
		v["replicaCount"] = n
		what := fmt.Sprintf("replicaCount=%d", n)
		s := upgrade(what, v)
		if got := int(*s.sts.Spec.Replicas); got != n {
			t.Fatalf("%s: StatefulSet replicas %d", what, got)
		}
		if !reflect.DeepEqual(s.sts.Spec.Template, o.sts.Spec.Template) {
			t.Errorf("%s changed the pod template: every pod would restart", what)
		}
		if s.sts.UID != o.sts.UID || s.pdb.UID != o.pdb.UID || s.services[o.sts.Spec.ServiceName] == nil ||
			s.services[o.sts.Spec.ServiceName].UID != o.services[o.sts.Spec.ServiceName].UID {
			t.Errorf("%s replaced the StatefulSet, the PDB or the headless Service", what)
		}
		if !reflect.DeepEqual(s.pdb.Spec, prev.pdb.Spec) || s.pdb.Spec.MaxUnavailable.IntValue() != 1 {
			t.Errorf("%s: PDB spec %+v (was %+v)", what, s.pdb.Spec, prev.pdb.Spec)
		}
		for _, p := range k.admitPods(t, s) {
			if !selects(t, s.pdb.Spec.Selector, p.Labels) || !labelsMatch(s.services[s.sts.Spec.ServiceName].Spec.Selector, p.Labels) ||
				!labelsMatch(s.services[s.sts.Name].Spec.Selector, p.Labels) {
				t.Errorf("%s: pod %s is not selected by the PDB, the headless or the client Service", what, p.Name)
			}
		}
		prev = s
	}

	// Turning zoneFromNode and backups off: the RBAC objects and the CronJob go, the
	// PVC holding the backups stays.
	v := merged(t, vals)
	v["cluster"].(map[string]any)["zoneFromNode"] = false
	v["backup"].(map[string]any)["enabled"] = false
	upgrade("zoneFromNode=false backup.enabled=false", v)
	roles, err = cs.RbacV1().ClusterRoles().List(ctx, sel)
	check(err)
	bindings, err = cs.RbacV1().ClusterRoleBindings().List(ctx, sel)
	check(err)
	if len(roles.Items) != 0 || len(bindings.Items) != 0 {
		t.Errorf("zoneFromNode off: ClusterRoles %d, ClusterRoleBindings %d left", len(roles.Items), len(bindings.Items))
	}
	if _, err := cs.BatchV1().CronJobs(namespace).Get(ctx, releaseName+"-backup", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("backup off: the CronJob is still there: %v", err)
	}
	if _, err := cs.CoreV1().PersistentVolumeClaims(namespace).Get(ctx, releaseName+"-backups", metav1.GetOptions{}); err != nil {
		t.Errorf("backup off: the PVC holding the backups is gone: %v", err)
	}
	if _, err := zone(releaseName, "node-a"); !apierrors.IsForbidden(err) {
		t.Errorf("zoneFromNode off: the pods' ServiceAccount still reads nodes: %v", err)
	}
	if w := k.warnings.all(); len(w) != 0 {
		t.Errorf("the API server warned: %q", w)
	}
}
