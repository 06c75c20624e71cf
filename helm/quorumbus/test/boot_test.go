package charttest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/quorumbus/quorumbus/test/hosts"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// pod is one pod of the rendered chart run as a process: a root directory laid out as
// the container sees its filesystem (the image's two binaries, the volumes at their
// mount paths, /etc/hosts as cluster DNS would answer), entered with chroot as the
// image's user, with the container's args and environment resolved as the kubelet
// resolves them. It runs on a test host of its own (test/hosts: a network namespace
// with its own address, shared with the chaos suite), or, where those are not
// available, on loopback with its own 127.0.0.x.
type pod struct {
	facts podFacts
	root  string
	env   []string
	vars  map[string]string
	// host is the test host (network namespace) the pod runs on; nil: loopback.
	host *hosts.Host

	mu   sync.Mutex
	log  bytes.Buffer
	cmd  *exec.Cmd
	done chan struct{}
	err  error // the exit status; written before done is closed
}

func (p *pod) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.Write(b)
}

func (p *pod) Log() string {
	if p.host != nil {
		b, _ := os.ReadFile(p.host.LogPath())
		return string(b)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// exited reports whether the broker process has exited, and how.
func (p *pod) exited() (bool, error) {
	if p.host != nil {
		return !p.host.Running(), p.host.ExitErr()
	}
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// inContainer is argv as the container runs it on a test host: in the host's network
// namespace, with exactly env, chrooted into the pod's root as the image's user.
func (p *pod) inContainer(env, argv []string) []string {
	out := append([]string{"-i"}, env...)
	out = append(out, "/usr/sbin/chroot", fmt.Sprintf("--userspec=%d:%d", uid, uid), p.root)
	return append(out, argv...)
}

// newPodRoot lays out a container root: binaries, passwd, hosts, and the pod's volumes.
func newPodRoot(t *testing.T, o *objects, spec corev1.PodSpec, c corev1.Container, hosts string) string {
	t.Helper()
	root := t.TempDir()
	if err := os.Chmod(root, 0o755); err != nil { // a container's / is world-readable
		t.Fatal(err)
	}
	bin := staticBinaries(t)
	for _, dir := range []string{"usr/local/bin", "etc", "var/lib"} {
		if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range []string{"quorumbus", "qbctl"} {
		data, err := os.ReadFile(filepath.Join(bin, b))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "usr/local/bin", b), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(path, content string, mode os.FileMode) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(root, "etc/passwd"), "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532::/var/lib/quorumbus:/sbin/nologin\n", 0o644)
	write(filepath.Join(root, "etc/hosts"), hosts, 0o644)
	// The image's data directory, which the PersistentVolumeClaim is mounted over.
	if err := os.MkdirAll(filepath.Join(root, dataPath), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(root, dataPath), uid, uid); err != nil {
		t.Fatal(err)
	}
	vols := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		vols[v.Name] = v
	}
	for _, m := range c.VolumeMounts {
		v, ok := vols[m.Name]
		switch {
		case m.Name == "data":
			continue // the volumeClaimTemplate: a fresh directory, above
		case !ok:
			t.Fatalf("volume mount %s has no volume", m.Name)
		case v.ConfigMap != nil:
			cm := o.configMaps[v.ConfigMap.Name]
			if cm == nil {
				t.Fatalf("volume %s: no ConfigMap %s rendered", m.Name, v.ConfigMap.Name)
			}
			for k, data := range cm.Data {
				write(filepath.Join(root, m.MountPath, k), data, 0o644)
			}
		default:
			t.Fatalf("volume %s: this test mounts data volumes and ConfigMaps only", m.Name)
		}
	}
	return root
}

// exec runs a container process in the pod's root as the image's user.
func (p *pod) command(ctx context.Context, argv []string, env []string) *exec.Cmd {
	if p.host != nil {
		// hosts.Host.Command, with a context: ip netns exec NS env -i ... chroot ...
		return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", p.host.NS, "env"}, p.inContainer(env, argv)...)...)
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Chroot:     p.root,
		Credential: &syscall.Credential{Uid: uid, Gid: uid},
		Setpgid:    true,
		Pdeathsig:  syscall.SIGKILL,
	}
	return cmd
}

// start runs the broker container: the image's entrypoint with the rendered args.
func (p *pod) start(t *testing.T, c corev1.Container) {
	t.Helper()
	argv := append([]string{"/usr/local/bin/quorumbus"}, expandAll(c.Args, p.vars)...)
	if p.host != nil {
		if err := p.host.Launch(nil, "env", p.inContainer(p.env, argv)...); err != nil {
			t.Fatal(err)
		}
		return // hosts.New's cleanup kills it
	}
	p.cmd = p.command(context.Background(), argv, p.env)
	p.cmd.Dir = dataPath // the image's WorkingDir
	p.cmd.Stdout, p.cmd.Stderr = p, p
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.done = make(chan struct{})
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	})
}

// get asks the pod's IP for path on port, as the kubelet's HTTP probes do.
func (p *pod) get(port int32, path string) (int, string, error) {
	hc := &http.Client{Timeout: 2 * time.Second}
	resp, err := hc.Get(fmt.Sprintf("http://%s:%d%s", p.facts.ip, port, path))
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	return resp.StatusCode, string(b), nil
}

// run runs a command in the pod's root with the container's environment (kubectl exec,
// a lifecycle hook) and returns its output.
func (p *pod) run(t *testing.T, timeout time.Duration, argv ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := p.command(ctx, argv, p.env)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// waitFor polls cond until it returns nil or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, timeout, err)
		}
		time.Sleep(100 * time.Millisecond) // polling other processes
	}
}

// The rendered StatefulSet, booted for real: three processes with exactly the rendered
// args and environment form a cluster through the headless-service names; the probes
// pass; the Config.json ConfigMap's entities exist; the SDK sends through one pod and
// receives through another with the key from the rendered Secret; the helm test pod's
// two containers succeed; the preStop hook drains a pod, which then stops within its
// grace period while the others keep serving, and serves again once restarted on its
// volume; scaling to four nodes restarts no pod and the new one joins and serves.
func TestBootTheRenderedStatefulSet(t *testing.T) {
	if err := hosts.Available(); err != nil {
		t.Skipf("%v (TestBootTheRenderedStatefulSetOnLoopback runs without test hosts)", err)
	}
	if testing.Short() {
		t.Skip("boots a 3-node cluster")
	}
	// The default values: every pod binds 0.0.0.0 on a network of its own.
	vals := readValues(t, "config-json")
	o := decode(t, render(t, vals))
	// One host more than pods, for scaling up; the chaos suite uses 10.77.0.
	bootStatefulSet(t, vals, o, hostsNet(t, o.sts, "qbhelm", "10.78.0", 1))
}

// On one loopback interface, where test hosts are not available: each pod's IP is its
// own 127.0.0.x, and the chart binds its listeners to it (listenAddress "$(POD_IP)").
func TestBootTheRenderedStatefulSetOnLoopback(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: chroot and the image's user, as a container runtime does")
	}
	if testing.Short() {
		t.Skip("boots a 3-node cluster")
	}
	vals := readValues(t, "config-json")
	vals["listenAddress"] = "$(POD_IP)"
	o := decode(t, render(t, vals))
	bootStatefulSet(t, vals, o, loopbackNet(o.sts, 11, 1))
}

// bootNet is where the pods of a booted StatefulSet run.
type bootNet struct {
	ip    func(i int) string      // pod i's IP
	hosts func(i int) string      // pod i's /etc/hosts
	host  func(i int) *hosts.Host // pod i's test host; nil: chrooted on loopback
}

// hostsNet runs pod i of sts on test host i (test/hosts: a network namespace with its
// own address) named as cluster DNS names it, with spare hosts beyond the replicas for
// scaling up. Two tests that may run at once need two prefixes and subnets.
func hostsNet(t *testing.T, sts *appsv1.StatefulSet, prefix, subnet string, spare int) bootNet {
	t.Helper()
	n := hosts.New(t, hosts.Config{
		N:      int(*sts.Spec.Replicas) + spare,
		Prefix: prefix,
		Subnet: subnet,
		Name:   func(i int) string { return fmt.Sprintf("%s-%d", sts.Name, i) },
		Aliases: func(i int) []string {
			names := []string{fmt.Sprintf("%s-%d.%s.%s.svc.cluster.local", sts.Name, i, sts.Spec.ServiceName, sts.Namespace)}
			if i == 1 { // the client Service's name, which kube-proxy would balance
				names = append(names, fmt.Sprintf("%s.%s.svc.cluster.local", sts.Name, sts.Namespace))
			}
			return names
		},
	})
	hostsFile := func(i int) string {
		// ip netns exec mounts it over /etc/hosts; the pod's root has its own copy.
		b, err := os.ReadFile(filepath.Join("/etc/netns", n.Host(i).NS, "hosts"))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	return bootNet{ip: func(i int) string { return n.Host(i).IP }, hosts: hostsFile, host: n.Host}
}

// loopbackNet gives pod i of sts the address 127.0.0.(first+i), and cluster DNS as an
// /etc/hosts: each pod's headless-service name (spare more pods than the StatefulSet
// has, for scaling up), and the client Service's name (which kube-proxy would balance;
// here it names pod 1).
func loopbackNet(sts *appsv1.StatefulSet, first, spare int) bootNet {
	ip := func(i int) string { return fmt.Sprintf("127.0.0.%d", first+i) }
	var b strings.Builder
	b.WriteString("127.0.0.1 localhost\n")
	for i := 0; i < int(*sts.Spec.Replicas)+spare; i++ {
		fmt.Fprintf(&b, "%s %s-%d.%s.%s.svc.cluster.local\n", ip(i), sts.Name, i, sts.Spec.ServiceName, sts.Namespace)
	}
	fmt.Fprintf(&b, "%s %s.%s.svc.cluster.local\n", ip(1), sts.Name, sts.Namespace)
	return bootNet{ip: ip, hosts: func(int) string { return b.String() }, host: func(int) *hosts.Host { return nil }}
}

// booted is a StatefulSet's pods run as processes, as a kubelet would run them: from
// o, a rendering or the objects an API server holds.
type booted struct {
	t    *testing.T
	o    *objects
	c    corev1.Container // the broker container
	nw   bootNet
	pods []*pod
}

// bootPods starts the StatefulSet's replicas all at once (Parallel pod management) and
// waits for each pod's probes. Pod logs go to the test log if the test fails.
func bootPods(t *testing.T, o *objects, nw bootNet) *booted {
	t.Helper()
	b := &booted{t: t, o: o, c: brokerContainer(t, o), nw: nw}
	for i := 0; i < int(*o.sts.Spec.Replicas); i++ {
		b.pods = append(b.pods, b.newPod(i))
	}
	for _, p := range b.pods {
		p.start(t, b.c)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range b.pods {
				t.Logf("pod %s log:\n%s", p.facts.name, tail(p.Log(), 3000))
			}
		}
	})
	for _, p := range b.pods {
		b.awaitProbes(p)
	}
	return b
}

// newPod lays out pod ordinal i (not started).
func (b *booted) newPod(i int) *pod {
	p := &pod{facts: podOf(b.o, i, b.nw.ip(i), "zone-"+string(rune('a'+i%3))), host: b.nw.host(i)}
	p.root = newPodRoot(b.t, b.o, b.o.sts.Spec.Template.Spec, b.c, b.nw.hosts(i))
	p.env, p.vars = containerEnv(b.t, b.c, p.facts)
	return p
}

// awaitProbes waits for the startup (/healthz), then the readiness (/readyz) and
// liveness probes of p to pass, within the startup probe's budget.
func (b *booted) awaitProbes(p *pod) {
	t, c := b.t, b.c
	t.Helper()
	budget := time.Duration(c.StartupProbe.PeriodSeconds*c.StartupProbe.FailureThreshold) * time.Second
	for _, probe := range []*corev1.Probe{c.StartupProbe, c.ReadinessProbe, c.LivenessProbe} {
		waitFor(t, budget, p.facts.name+" "+probe.HTTPGet.Path, func() error {
			if gone, err := p.exited(); gone {
				t.Fatalf("pod %s exited: %v", p.facts.name, err)
			}
			code, body, err := p.get(containerPort(t, c, probe.HTTPGet.Port.String()).ContainerPort, probe.HTTPGet.Path)
			if err == nil && code != http.StatusOK {
				err = fmt.Errorf("%d %s", code, body)
			}
			return err
		})
	}
}

// checkMembers is kubectl exec FROM -- qbctl cluster status (what NOTES.txt tells
// users): every pod of pods is a member, alive, under its pod name and zone.
func (b *booted) checkMembers(from *pod, pods []*pod) {
	t := b.t
	t.Helper()
	out, err := from.run(t, time.Minute, "/usr/local/bin/qbctl", "cluster", "status", "-o", "json")
	if err != nil {
		t.Fatalf("qbctl cluster status in %s: %v\n%s", from.facts.name, err, out)
	}
	var st struct {
		Node    string `json:"NodeID"`
		Members []struct {
			ID, State, Zone string
		} `json:"Members"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if st.Node != from.facts.name || len(st.Members) != len(pods) {
		t.Fatalf("cluster status: %s", out)
	}
	for i, m := range st.Members {
		if m.ID != pods[i].facts.name || m.State != "alive" || m.Zone != pods[i].facts.labels["topology.kubernetes.io/zone"] {
			t.Errorf("member %d: %+v, want %s alive in its zone", i, m, pods[i].facts.name)
		}
	}
}

// client is the SDK connected to pod p with the key the pods read from their Secret
// and the key name of vals.
func (b *booted) client(p *pod, vals map[string]any) *azservicebus.Client {
	t := b.t
	t.Helper()
	key := p.vars["QUORUMBUS_SAS_KEY"]
	keyName := merged(t, vals)["auth"].(map[string]any)["keyName"]
	cs := fmt.Sprintf("Endpoint=sb://%s:5672;SharedAccessKeyName=%s;SharedAccessKey=%s;UseDevelopmentEmulator=true", p.facts.ip, keyName, key)
	cl, err := azservicebus.NewClientFromConnectionString(cs, &azservicebus.ClientOptions{
		RetryOptions: azservicebus.RetryOptions{MaxRetries: 5, RetryDelay: 200 * time.Millisecond, MaxRetryDelay: 2 * time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close(context.Background()) })
	return cl
}

// maxDeliveryCount is queue's MaxDeliveryCount as kubectl exec POD -- qbctl queue show
// reports it.
func (b *booted) maxDeliveryCount(p *pod, queue string) float64 {
	t := b.t
	t.Helper()
	out, err := p.run(t, time.Minute, "/usr/local/bin/qbctl", "queue", "show", queue, "-o", "json")
	if err != nil {
		t.Fatalf("qbctl queue show: %v\n%s", err, out)
	}
	var q map[string]any
	if err := json.Unmarshal([]byte(out), &q); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	n, _ := q["MaxDeliveryCount"].(float64)
	return n
}

// runJob runs the container of o's configApply hook Job to completion, as a pod of the
// Job on a node beside the StatefulSet's, and returns its output.
func (b *booted) runJob(o *objects, what string) string {
	t := b.t
	t.Helper()
	job := o.jobs[o.sts.Name+"-apply-config"]
	if job == nil {
		t.Fatalf("%s: no apply Job among %v", what, sortedKeys(o.jobs))
	}
	c := job.Spec.Template.Spec.Containers[0]
	jp := &pod{facts: podOf(o, 8, "127.0.0.21", "")}
	jp.facts.uid = "5d2e8f0a-1b3c-4d5e-8f90-applyjob0001"
	jp.root = newPodRoot(t, o, job.Spec.Template.Spec, c, b.nw.hosts(0))
	env, vars := containerEnv(t, c, jp.facts)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	out, err := jp.command(ctx, append(append([]string{}, c.Command...), expandAll(c.Args, vars)...), env).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: apply Job container: %v\n%s", what, err, out)
	}
	t.Logf("%s: apply Job:\n%s", what, out)
	return string(out)
}

// runTestPod runs the helm test pod's init containers, then its containers, each to
// success, as the kubelet runs a pod with restartPolicy Never.
func (b *booted) runTestPod(o *objects, test *corev1.Pod) {
	t := b.t
	t.Helper()
	tp := &pod{facts: podOf(o, 9, "127.0.0.20", "")}
	tp.facts.uid = "3f0c1c1e-7a5e-4c55-9d2b-helmtest0001"
	tp.root = newPodRoot(t, o, test.Spec, corev1.Container{}, b.nw.hosts(0))
	for _, tc := range append(append([]corev1.Container{}, test.Spec.InitContainers...), test.Spec.Containers...) {
		env, vars := containerEnv(t, tc, tp.facts)
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		cmd := tp.command(ctx, append(append([]string{}, tc.Command...), expandAll(tc.Args, vars)...), env)
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("helm test container %s: %v\n%s", tc.Name, err, out)
		}
		t.Logf("helm test container %s:\n%s", tc.Name, out)
	}
}

func bootStatefulSet(t *testing.T, vals map[string]any, o *objects, nw bootNet) {
	sts := o.sts
	spec := sts.Spec.Template.Spec
	if replicas := int(*sts.Spec.Replicas); replicas != 3 {
		t.Fatalf("replicas %d", replicas)
	}
	b := bootPods(t, o, nw)
	pods, c := b.pods, b.c
	b.checkMembers(pods[0], pods)

	// The SDK, with the key from the rendered Secret: send through pod 0 to the queue
	// Config.json declares, receive through pod 2.
	roundTrip(t, b.client(pods[0], vals), b.client(pods[2], vals), "queue.1", "through the cluster")

	// kubectl port-forward connects to localhost inside the pod's network namespace
	// (IPv4 or IPv6): the listeners must take the loopback addresses too, as the
	// default listenAddress does. (On loopback, where pods share one network, each
	// binds its own address instead.)
	if pods[0].host != nil {
		for _, local := range []string{"127.0.0.1", "[::1]"} {
			for _, port := range []string{"5300", "5672"} {
				out, err := pods[0].run(t, 30*time.Second, "/usr/local/bin/qbctl", "--admin-addr="+local+":"+port, "cluster", "status")
				if err != nil || !strings.Contains(out, pods[1].facts.name) {
					t.Errorf("port-forward to %s:%s in pod 0: qbctl cluster status: %v\n%s", local, port, err, out)
				}
			}
		}
	}

	// helm test: the test pod's init container, then its container, each to success.
	b.runTestPod(o, o.pods[sts.Name+"-test"])

	// The configApply hook Job (post-install): its container brings the cluster to the
	// values' Config.json. An upgrade with an edited Config.json runs the new Job, which
	// updates the running cluster (here queue.1's MaxDeliveryCount, 3 -> 7).
	if out := b.runJob(o, "install"); !strings.Contains(out, "0 change(s) applied") {
		t.Errorf("install: the nodes loaded Config.json at start-up, yet the Job changed something:\n%s", out)
	}
	if n := b.maxDeliveryCount(pods[1], "queue.1"); n != 3 {
		t.Fatalf("queue.1 MaxDeliveryCount %v after install, want 3", n)
	}
	edited := merged(t, vals)
	setMaxDeliveryCount(edited, 7)
	// helm upgrade renders with the cluster: its lookup finds the installed Secret.
	var installed []corev1.Secret
	for _, sec := range o.secrets {
		installed = append(installed, *sec)
	}
	api := newAPIServer(installed...)
	defer api.Close()
	upgraded, _, err := renderAgainst(edited, api)
	if err != nil {
		t.Fatal(err)
	}
	if out := b.runJob(decode(t, upgraded), "upgrade"); !strings.Contains(out, "update queue queue.1") {
		t.Errorf("upgrade: the Job did not update queue.1:\n%s", out)
	}
	if n := b.maxDeliveryCount(pods[1], "queue.1"); n != 7 {
		t.Fatalf("queue.1 MaxDeliveryCount %v after the upgrade's apply, want 7", n)
	}

	// Stopping pod 2 as the kubelet does: the preStop hook within the drain budget,
	// then SIGTERM, then exit within what remains of the grace period.
	grace := time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
	stopStart := time.Now()
	pre := c.Lifecycle.PreStop.Exec.Command
	if out, err := pods[2].run(t, grace, pre...); err != nil {
		t.Fatalf("preStop %q: %v\n%s", pre, err, out)
	}
	if h := pods[2].host; h != nil {
		h.Stop(grace - time.Since(stopStart)) // SIGTERM, then SIGKILL at the deadline
	} else if err := syscall.Kill(pods[2].cmd.Process.Pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitFor(t, grace-time.Since(stopStart), "pod 2 stops after SIGTERM", func() error {
		if gone, _ := pods[2].exited(); !gone {
			return errors.New("still running")
		}
		return nil
	})
	if _, err := pods[2].exited(); err != nil {
		t.Errorf("pod 2 exited with %v after SIGTERM (killed at the end of the grace period?)", err)
	}
	t.Logf("pod 2 drained and stopped in %v (grace period %v)", time.Since(stopStart).Round(time.Millisecond), grace)

	// Two of three nodes keep serving: every partition still has a majority.
	roundTrip(t, b.client(pods[1], vals), b.client(pods[0], vals), "queue.1", "with one pod stopped")

	// The StatefulSet starts pod 2 again on its volume: same ID, serving again although
	// it was drained, with what it missed.
	if h := pods[2].host; h != nil {
		if err := h.Restart(); err != nil {
			t.Fatal(err)
		}
	} else {
		pods[2].start(t, c)
	}
	b.awaitProbes(pods[2])
	roundTrip(t, b.client(pods[0], vals), b.client(pods[2], vals), "queue.1", "after the restart")

	// Scaling to 4 changes no pod template, so no pod restarts; the new pod joins.
	scaled := vals
	scaled["replicaCount"] = 4
	o4 := decode(t, render(t, scaled))
	if !reflect.DeepEqual(o4.sts.Spec.Template, sts.Spec.Template) || *o4.sts.Spec.Replicas != 4 {
		t.Fatal("scaling to 4 changes the pod template")
	}
	b.pods = append(b.pods, b.newPod(3))
	pods = b.pods
	pods[3].start(t, c)
	b.awaitProbes(pods[3])
	waitFor(t, time.Minute, "four members", func() error {
		out, err := pods[3].run(t, time.Minute, "/usr/local/bin/qbctl", "cluster", "status", "-o", "json")
		if err != nil || strings.Count(out, `"alive"`) != 4 {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})
	b.checkMembers(pods[3], pods)
	roundTrip(t, b.client(pods[3], vals), b.client(pods[1], vals), "queue.1", "through the new pod")
}

// setMaxDeliveryCount edits the first queue of the first namespace of merged values'
// emulatorConfig (Config.json).
func setMaxDeliveryCount(merged map[string]any, n int) {
	merged["emulatorConfig"].(map[string]any)["UserConfig"].(map[string]any)["Namespaces"].([]any)[0].(map[string]any)["Queues"].([]any)[0].(map[string]any)["Properties"].(map[string]any)["MaxDeliveryCount"] = n
}

func roundTrip(t *testing.T, from, to *azservicebus.Client, queue, body string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	s, err := from.NewSender(queue, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	if err := s.SendMessage(ctx, &azservicebus.Message{Body: []byte(body)}, nil); err != nil {
		t.Fatalf("send %q: %v", body, err)
	}
	r, err := to.NewReceiverForQueue(queue, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	for {
		msgs, err := r.ReceiveMessages(ctx, 1, nil)
		if err != nil {
			t.Fatalf("receive %q: %v", body, err)
		}
		for _, m := range msgs {
			if err := r.CompleteMessage(ctx, m, nil); err != nil {
				t.Fatal(err)
			}
			if string(m.Body) == body {
				return
			}
		}
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}
