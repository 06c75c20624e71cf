package charttest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/test/hosts"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/release"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// helmRun is a helm command running in the background while the test plays the
// controllers and kubelet it waits for.
type helmRun struct {
	what string
	done chan struct{}
	rel  *release.Release // written before done is closed
	err  error            // written before done is closed
}

// goHelm runs fn (helm install, upgrade or test) in the background; the test's end
// cancels it.
func goHelm(t *testing.T, what string, fn func(context.Context) (*release.Release, error)) *helmRun {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	r := &helmRun{what: what, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.rel, r.err = fn(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		// helm test takes no context: it ends when the API server, stopped by a later
		// cleanup, stops answering.
		select {
		case <-r.done:
		case <-time.After(10 * time.Second):
			t.Logf("%s still running at the end of the test", what)
		}
	})
	return r
}

// running fails the test if the command has already ended: it was to wait for what
// the test does next.
func (r *helmRun) running(t *testing.T) {
	t.Helper()
	select {
	case <-r.done:
		t.Fatalf("%s ended before its hook ran: %v", r.what, r.err)
	default:
	}
}

// wait returns the command's release once it ends, within timeout.
func (r *helmRun) wait(t *testing.T, timeout time.Duration) *release.Release {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(timeout):
		t.Fatalf("%s: not done within %v", r.what, timeout)
	}
	if r.err != nil {
		t.Fatalf("%s: %v", r.what, r.err)
	}
	return r.rel
}

// The chart through a real kube-apiserver on a real etcd, as an operator installs it:
// helm install creates every object through the API server's admission, defaulting and
// validation (the namespace enforces the restricted Pod Security Standard), and the
// StatefulSet's pods, admitted as its controller creates them, run in the booted-pods
// harness from the objects the API server holds. The post-install Job and the helm test
// pod run there too, and the test reports their success to the API server as the Job
// controller and the kubelet would. helm upgrade keeps the generated Secret (its lookup
// reads the API server) and its Job updates the running cluster. Upgrades the API
// server must refuse (a StatefulSet's volumeClaimTemplates, a PodDisruptionBudget over
// 100%) fail with its error, and leave the objects and the cluster as they were.
func TestHelmThroughARealAPIServer(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: chroot and the image's user, as a container runtime does")
	}
	if testing.Short() {
		t.Skip("builds kube-apiserver and boots a 3-node cluster")
	}
	k := startKubeAPI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cs := k.cs

	// The namespace, as an administrator creates it for the release, enforcing the
	// restricted Pod Security Standard; and its default ServiceAccount, which the
	// controller-manager would create.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace, Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted",
		"pod-security.kubernetes.io/warn":    "restricted",
		"pod-security.kubernetes.io/audit":   "restricted",
	}}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	vals := readValues(t, "config-json")
	onHosts := hosts.Available() == nil
	if !onHosts {
		vals["listenAddress"] = "$(POD_IP)" // pods on loopback: each binds its own 127.0.0.x
	}
	chrt, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	helmLog := &syncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("helm log:\n%s", tail(helmLog.String(), 4000))
		}
	})
	cfg := k.helm(t, helmLog)
	jobName := releaseName + "-apply-config"

	// helm install: it creates the objects, then the post-install hook Job, and waits
	// for the Job to complete.
	install := goHelm(t, "helm install", func(ctx context.Context) (*release.Release, error) {
		in := action.NewInstall(cfg)
		in.ReleaseName, in.Namespace, in.Timeout = releaseName, namespace, 8*time.Minute
		return in.RunWithContext(ctx, chrt, vals)
	})
	installJob := awaitJob(t, k, install, "")
	o := k.served(t)
	checkServed(t, k, o)

	// The StatefulSet's pods, as its controller creates them: admitted under the
	// restricted standard, given the namespace's ServiceAccount and the default
	// tolerations. A pod that asks for privilege escalation is refused: the standard is
	// enforced.
	pods := k.admitPods(t, o)
	for _, p := range pods {
		if p.Spec.ServiceAccountName != "default" || !tolerates(p, "node.kubernetes.io/not-ready") {
			t.Errorf("pod %s as admitted: service account %q, tolerations %v", p.Name, p.Spec.ServiceAccountName, p.Spec.Tolerations)
		}
	}
	escalating := statefulSetPod(o, 0)
	escalating.Spec.Containers[0].SecurityContext.AllowPrivilegeEscalation = ptr.To(true)
	_, err = cs.CoreV1().Pods(namespace).Create(ctx, escalating, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "violates PodSecurity") {
		t.Fatalf("a pod allowing privilege escalation: %v, want refused by PodSecurity", err)
	}

	// The pods run from the StatefulSet the API server holds: one test host each, or
	// 127.0.0.x where test hosts are not available.
	var nw bootNet
	if onHosts {
		nw = hostsNet(t, o.sts, "qbkube", "10.79.0", 0) // the other boot test uses 10.78.0
	} else {
		nw = loopbackNet(o.sts, 31, 0)
	}
	b := bootPods(t, o, nw)
	b.checkMembers(b.pods[0], b.pods)
	roundTrip(t, b.client(b.pods[0], vals), b.client(b.pods[2], vals), "queue.1", "installed through the API server")

	// The post-install Job, as the API server holds it, run to completion; then its
	// success reported as the Job controller would, and helm install returns.
	if out := b.runJob(o, "install"); !strings.Contains(out, "0 change(s) applied") {
		t.Errorf("install: the nodes loaded Config.json at start-up, yet the Job changed something:\n%s", out)
	}
	completeJob(t, k, installJob)
	rel := install.wait(t, 5*time.Minute)
	if rel.Info.Status != release.StatusDeployed || rel.Version != 1 {
		t.Fatalf("helm install: release %s version %d", rel.Info.Status, rel.Version)
	}
	// hook-succeeded: Helm deleted the Job once it completed.
	if _, err := cs.BatchV1().Jobs(namespace).Get(ctx, jobName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the completed post-install Job is still there (hook-delete-policy hook-succeeded): %v", err)
	}

	// helm test: the test pod is created through admission (a Pod under the restricted
	// standard), runs in the harness, and its success is reported as the kubelet would.
	test := goHelm(t, "helm test", func(ctx context.Context) (*release.Release, error) {
		rt := action.NewReleaseTesting(cfg)
		rt.Namespace, rt.Timeout = namespace, 5*time.Minute
		return rt.Run(releaseName)
	})
	testPod := awaitPod(t, k, test, releaseName+"-test")
	b.runTestPod(o, testPod)
	testPod.Status.Phase = corev1.PodSucceeded
	if _, err := cs.CoreV1().Pods(namespace).UpdateStatus(ctx, testPod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	test.wait(t, 2*time.Minute)

	// helm upgrade with an edited Config.json: the Secret's keys stay (its lookup reads
	// the API server), the StatefulSet's pod template stays as it was (no broker
	// restarts: the Job applies the edit), the PDB and the StatefulSet stay the same
	// objects, and the post-upgrade Job updates the running queue.
	edited := merged(t, vals)
	setMaxDeliveryCount(edited, 7)
	upgrade := goHelm(t, "helm upgrade", func(ctx context.Context) (*release.Release, error) {
		up := action.NewUpgrade(cfg)
		up.Namespace, up.Timeout = namespace, 8*time.Minute
		return up.RunWithContext(ctx, releaseName, chrt, edited)
	})
	upgradeJob := awaitJob(t, k, upgrade, installJob.UID)
	o2 := k.served(t)
	if !sameSecretData(o2, o) {
		t.Errorf("helm upgrade changed the generated Secret's keys")
	}
	if o2.sts.Generation != o.sts.Generation || !reflect.DeepEqual(o2.sts.Spec.Template, o.sts.Spec.Template) {
		t.Errorf("StatefulSet after an upgrade that only edits Config.json: generation %d (was %d), pod template changed %v: every broker would restart",
			o2.sts.Generation, o.sts.Generation, !reflect.DeepEqual(o2.sts.Spec.Template, o.sts.Spec.Template))
	}
	if o2.pdb.UID != o.pdb.UID || o2.sts.UID != o.sts.UID {
		t.Errorf("the upgrade replaced the PDB or the StatefulSet instead of updating them")
	}
	if out := b.runJob(o2, "upgrade"); !strings.Contains(out, "update queue queue.1") {
		t.Errorf("upgrade: the Job did not update queue.1:\n%s", out)
	}
	completeJob(t, k, upgradeJob)
	if rel := upgrade.wait(t, 5*time.Minute); rel.Info.Status != release.StatusDeployed || rel.Version != 2 {
		t.Fatalf("helm upgrade: release %s version %d", rel.Info.Status, rel.Version)
	}
	if n := b.maxDeliveryCount(b.pods[1], "queue.1"); n != 7 {
		t.Fatalf("queue.1 MaxDeliveryCount %v after the upgrade, want 7", n)
	}
	if w := k.warnings.all(); len(w) != 0 {
		t.Errorf("the API server warned: %q", w)
	}

	// Upgrades the API server refuses, which the chart's schema cannot see: a new
	// volume size (a StatefulSet's volumeClaimTemplates are immutable) and a
	// PodDisruptionBudget allowing more than 100% of the pods to be unavailable.
	for _, bad := range []struct {
		what, key string
		value     any
		want      []string
	}{
		{"a new volume size", "persistence", map[string]any{"size": "20Gi"}, []string{"StatefulSet", "spec.volumeClaimTemplates", "immutable"}},
		{"a PDB over 100%", "podDisruptionBudget", map[string]any{"maxUnavailable": "150%"}, []string{"PodDisruptionBudget", "maxUnavailable", "100%"}},
	} {
		v := merged(t, edited)
		for k, x := range bad.value.(map[string]any) {
			v[bad.key].(map[string]any)[k] = x
		}
		up := action.NewUpgrade(cfg)
		up.Namespace, up.Timeout = namespace, 2*time.Minute
		_, err := up.RunWithContext(ctx, releaseName, chrt, v)
		if err == nil {
			t.Fatalf("helm upgrade with %s: the API server accepted it", bad.what)
		}
		for _, want := range bad.want {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("helm upgrade with %s: error does not name %q: %v", bad.what, want, err)
			}
		}
		t.Logf("helm upgrade with %s: %v", bad.what, err)
	}
	o3 := k.served(t)
	if !reflect.DeepEqual(o3.sts.Spec, o2.sts.Spec) || !reflect.DeepEqual(o3.pdb.Spec, o2.pdb.Spec) {
		t.Errorf("a refused upgrade changed the StatefulSet or the PDB")
	}
	hist, err := action.NewHistory(cfg).Run(releaseName)
	if err != nil {
		t.Fatal(err)
	}
	var statuses []string
	for _, r := range hist {
		statuses = append(statuses, fmt.Sprintf("%d:%s", r.Version, r.Info.Status))
	}
	if got, want := strings.Join(statuses, " "), "1:superseded 2:deployed 3:failed 4:failed"; got != want {
		t.Errorf("helm history: %s, want %s", got, want)
	}
	roundTrip(t, b.client(b.pods[2], vals), b.client(b.pods[1], vals), "queue.1", "after the refused upgrades")
}

// checkServed checks what the API server made of the installed objects: each one is
// there, defaulted as the API server defaults it, with the addresses and selectors it
// assigns, and no warning.
func checkServed(t *testing.T, k *kubeAPI, o *objects) {
	t.Helper()
	sts := o.sts
	if sts.Spec.RevisionHistoryLimit == nil || *sts.Spec.RevisionHistoryLimit != 10 {
		t.Errorf("StatefulSet not defaulted: revisionHistoryLimit %v", sts.Spec.RevisionHistoryLimit)
	}
	spec := sts.Spec.Template.Spec
	if spec.DNSPolicy != corev1.DNSClusterFirst || spec.SchedulerName != "default-scheduler" || spec.RestartPolicy != corev1.RestartPolicyAlways {
		t.Errorf("pod template not defaulted: dnsPolicy %q, schedulerName %q, restartPolicy %q", spec.DNSPolicy, spec.SchedulerName, spec.RestartPolicy)
	}
	for _, c := range spec.Containers {
		if c.TerminationMessagePath != corev1.TerminationMessagePathDefault || c.ImagePullPolicy == "" {
			t.Errorf("container %s not defaulted: terminationMessagePath %q, imagePullPolicy %q", c.Name, c.TerminationMessagePath, c.ImagePullPolicy)
		}
	}
	var headless, client bool
	for name, s := range o.services {
		switch {
		case s.Spec.ClusterIP == corev1.ClusterIPNone:
			headless = name == sts.Spec.ServiceName
		case strings.HasPrefix(s.Spec.ClusterIP, "10.96."):
			client = true
		default:
			t.Errorf("Service %s: cluster IP %q, not from the service range", name, s.Spec.ClusterIP)
		}
	}
	if !headless || !client {
		t.Errorf("Services %v: want the headless %s and a client Service with a cluster IP", sortedKeys(o.services), sts.Spec.ServiceName)
	}
	if sec := o.secrets[releaseName]; sec == nil || len(sec.Data["sas-key"]) < 40 {
		t.Errorf("no generated Secret with a key among %v", sortedKeys(o.secrets))
	}
	if len(o.configMaps) == 0 {
		t.Error("no ConfigMap")
	}
	for _, cm := range o.configMaps {
		if cm.Data["Config.json"] == "" {
			t.Errorf("ConfigMap %s has no Config.json", cm.Name)
		}
	}
	if o.pdb == nil || o.pdb.Spec.MaxUnavailable == nil || o.pdb.Spec.MaxUnavailable.IntValue() != 1 {
		t.Errorf("PodDisruptionBudget: %+v", o.pdb)
	}
	job := o.jobs[releaseName+"-apply-config"]
	if job == nil {
		t.Fatalf("no post-install Job among %v", sortedKeys(o.jobs))
	}
	// The Job's selector is the API server's: its own UID.
	if job.Spec.Selector == nil || job.Spec.Selector.MatchLabels["batch.kubernetes.io/controller-uid"] != string(job.UID) {
		t.Errorf("Job selector %v, want one generated from its UID %s", job.Spec.Selector, job.UID)
	}
	if job.Annotations["helm.sh/hook"] != "post-install,post-upgrade" {
		t.Errorf("Job annotations %v", job.Annotations)
	}
	if w := k.warnings.all(); len(w) != 0 {
		t.Errorf("the API server warned: %q", w)
	}
}

func sameSecretData(a, b *objects) bool {
	if len(a.secrets) != len(b.secrets) {
		return false
	}
	for name, s := range a.secrets {
		if b.secrets[name] == nil || !reflect.DeepEqual(s.Data, b.secrets[name].Data) {
			return false
		}
	}
	return true
}

func tolerates(p *corev1.Pod, key string) bool {
	for _, tol := range p.Spec.Tolerations {
		if tol.Key == key {
			return true
		}
	}
	return false
}

// awaitJob waits for the release's apply-config hook Job to exist in the API server,
// other than the one with UID previous, while the helm command r waits for it.
func awaitJob(t *testing.T, k *kubeAPI, r *helmRun, previous types.UID) *batchv1.Job {
	t.Helper()
	var job *batchv1.Job
	waitFor(t, 4*time.Minute, r.what+": its hook Job", func() error {
		r.running(t)
		k.apiProc.check(t)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		j, err := k.cs.BatchV1().Jobs(namespace).Get(ctx, releaseName+"-apply-config", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if j.UID == previous {
			return errors.New("still the previous Job")
		}
		job = j
		return nil
	})
	return job
}

// awaitPod waits for the named pod to exist in the API server while r waits for it.
func awaitPod(t *testing.T, k *kubeAPI, r *helmRun, name string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	waitFor(t, 2*time.Minute, r.what+": pod "+name, func() error {
		r.running(t)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p, err := k.cs.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		pod = p
		return nil
	})
	return pod
}

// completeJob reports job's success as the Job controller does once its pod has
// succeeded: started, one pod succeeded, SuccessCriteriaMet then Complete.
func completeJob(t *testing.T, k *kubeAPI, job *batchv1.Job) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	j, err := k.cs.BatchV1().Jobs(namespace).Get(ctx, job.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	j.Status.StartTime, j.Status.CompletionTime = &now, &now
	j.Status.Succeeded, j.Status.Ready, j.Status.Terminating = 1, ptr.To[int32](0), ptr.To[int32](0)
	j.Status.Conditions = []batchv1.JobCondition{
		{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastProbeTime: now, LastTransitionTime: now, Reason: "CompletionsReached"},
		{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastProbeTime: now, LastTransitionTime: now, Reason: "CompletionsReached"},
	}
	if _, err := k.cs.BatchV1().Jobs(namespace).UpdateStatus(ctx, j, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("Job %s: status: %v", job.Name, err)
	}
}
