package charttest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
	"sigs.k8s.io/yaml"
)

// kubeBinEnv names a directory holding etcd and kube-apiserver, built by `make
// helm-test` from the apivalidate module (its go.mod's tool directives pin both to the
// versions k8s.io/kubernetes requires). Unset, the test builds them itself.
const kubeBinEnv = "QUORUMBUS_KUBE_BIN"

var (
	kubeBinOnce sync.Once
	kubeBinDir  string
	kubeBinErr  error
	// builtKubeBinDir is kubeBinDir when the test built the binaries there (TestMain
	// removes it).
	builtKubeBinDir string
)

// kubeBinaries returns the directory holding the etcd and kube-apiserver binaries.
func kubeBinaries(t *testing.T) string {
	t.Helper()
	kubeBinOnce.Do(func() {
		if dir := os.Getenv(kubeBinEnv); dir != "" {
			kubeBinDir = dir
			return
		}
		kubeBinDir, kubeBinErr = os.MkdirTemp("", "quorumbus-kube-bin-")
		if kubeBinErr != nil {
			return
		}
		builtKubeBinDir = kubeBinDir
		// The first build of kube-apiserver takes minutes on 2 cores; the build cache
		// makes the next ones a link. Versioned as a release build is: Helm checks the
		// chart's kubeVersion against it.
		list := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "k8s.io/kubernetes")
		list.Dir = "apivalidate"
		v, err := list.Output()
		if err != nil {
			kubeBinErr = fmt.Errorf("go list -m k8s.io/kubernetes: %v", err)
			return
		}
		for _, b := range []struct{ name, pkg, ldflags string }{
			{"etcd", "go.etcd.io/etcd/server/v3", ""},
			{"kube-apiserver", "k8s.io/kubernetes/cmd/kube-apiserver", kubeLdflags(strings.TrimSpace(string(v)))},
		} {
			cmd := exec.Command("go", "build", "-ldflags", b.ldflags, "-o", filepath.Join(kubeBinDir, b.name), b.pkg)
			cmd.Dir = "apivalidate"
			if out, err := cmd.CombinedOutput(); err != nil {
				kubeBinErr = fmt.Errorf("go build %s: %v\n%s", b.pkg, err, out)
				return
			}
		}
	})
	if kubeBinErr != nil {
		t.Fatal(kubeBinErr)
	}
	for _, b := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(kubeBinDir, b)); err != nil {
			t.Fatalf("%s: %v", kubeBinEnv, err)
		}
	}
	return kubeBinDir
}

// kubeLdflags stamps version (v1.37.2) into kube-apiserver as the Kubernetes release
// build does (Makefile, kube-bin, does the same).
func kubeLdflags(version string) string {
	major, rest, _ := strings.Cut(strings.TrimPrefix(version, "v"), ".")
	minor, _, _ := strings.Cut(rest, ".")
	const pkg = "k8s.io/component-base/version"
	return fmt.Sprintf("-X %s.gitVersion=%s -X %s.gitMajor=%s -X %s.gitMinor=%s", pkg, version, pkg, major, pkg, minor)
}

// process is a server the test runs (etcd, kube-apiserver): killed, with its process
// group, when the test ends or the test binary dies; its output is logged if the test
// fails.
type process struct {
	name string
	cmd  *exec.Cmd
	log  *syncBuffer
	done chan struct{}
	err  error // the exit status; written before done is closed
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func startProcess(t *testing.T, name string, argv ...string) *process {
	t.Helper()
	p := &process{name: name, cmd: exec.Command(argv[0], argv[1:]...), log: &syncBuffer{}, done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
		if t.Failed() {
			t.Logf("%s log:\n%s", name, tail(p.log.String(), 4000))
		}
	})
	return p
}

// check fails the test if the process has exited.
func (p *process) check(t *testing.T) {
	t.Helper()
	select {
	case <-p.done:
		t.Fatalf("%s exited: %v\n%s", p.name, p.err, tail(p.log.String(), 4000))
	default:
	}
}

// freePort is a port of 127.0.0.1 free right now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// warnings collects the warnings the API server sends with its responses (a Pod
// Security Standard that a pod template violates, a deprecated API).
type warnings struct {
	mu   sync.Mutex
	list []string
}

func (w *warnings) HandleWarningHeader(code int, agent, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

func (w *warnings) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.list...)
}

// kubeAPI is a real kube-apiserver on a real etcd, both on 127.0.0.1, and what a user
// reaches it with: a kubeconfig (Helm's RESTClientGetter) and a clientset.
type kubeAPI struct {
	getter   genericclioptions.RESTClientGetter
	cs       kubernetes.Interface
	warnings *warnings
	apiProc  *process
}

// startKubeAPI starts etcd and kube-apiserver with data and certificates in temporary
// directories: serving certificate and service-account key generated here, a token
// of the system:masters group (an administrator), RBAC, and the default admission
// plugins. There is no controller-manager, scheduler or kubelet: objects are stored,
// defaulted, admitted and validated, and nothing acts on them.
func startKubeAPI(t *testing.T) *kubeAPI {
	t.Helper()
	bin := kubeBinaries(t)
	dir := t.TempDir()

	clientPort, peerPort := freePort(t), freePort(t)
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", clientPort)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	etcd := startProcess(t, "etcd", filepath.Join(bin, "etcd"),
		"--name=test", "--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=test="+peerURL,
		"--unsafe-no-fsync", // a test's data: no need to survive a power loss
		"--log-level=warn")
	waitFor(t, time.Minute, "etcd healthy", func() error {
		etcd.check(t)
		resp, err := http.Get(etcdURL + "/health")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("etcd /health: %s", resp.Status)
		}
		return nil
	})

	// The serving certificate (self-signed, with its CA in the chain a client trusts),
	// the service-account signing key, and an administrator's token.
	certPEM, keyPEM, err := cert.GenerateSelfSignedCertKey("127.0.0.1", []net.IP{net.ParseIP("127.0.0.1")}, []string{"localhost"})
	if err != nil {
		t.Fatal(err)
	}
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	saPEM, err := keyutil.MarshalPrivateKeyToPEM(saKey)
	if err != nil {
		t.Fatal(err)
	}
	tok := make([]byte, 16)
	if _, err := rand.Read(tok); err != nil {
		t.Fatal(err)
	}
	token := hex.EncodeToString(tok)
	files := map[string][]byte{
		"serving.crt": certPEM, "serving.key": keyPEM, "sa.key": saPEM,
		"tokens.csv": []byte(token + ",admin,admin,system:masters\n"),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	port := freePort(t)
	api := startProcess(t, "kube-apiserver", filepath.Join(bin, "kube-apiserver"),
		"--etcd-servers="+etcdURL,
		"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", port),
		"--advertise-address=127.0.0.1",
		// The kubernetes Service's Endpoints would name 127.0.0.1, which is invalid.
		"--endpoint-reconciler-type=none",
		"--cert-dir="+filepath.Join(dir, "certs"),
		"--tls-cert-file="+filepath.Join(dir, "serving.crt"), "--tls-private-key-file="+filepath.Join(dir, "serving.key"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+filepath.Join(dir, "sa.key"),
		"--service-account-signing-key-file="+filepath.Join(dir, "sa.key"),
		"--token-auth-file="+filepath.Join(dir, "tokens.csv"),
		"--authorization-mode=RBAC",
		"--service-cluster-ip-range=10.96.0.0/16",
		"--profiling=false")

	kubeconfig := filepath.Join(dir, "kubeconfig")
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: fmt.Sprintf("https://127.0.0.1:%d", port), CertificateAuthorityData: certPEM}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "admin", Namespace: namespace}
	kc.CurrentContext = "test"
	if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
		t.Fatal(err)
	}
	w := &warnings{}
	flags := genericclioptions.NewConfigFlags(false)
	ns, cacheDir := namespace, filepath.Join(dir, "cache")
	flags.KubeConfig, flags.Namespace, flags.CacheDir = &kubeconfig, &ns, &cacheDir
	flags.WrapConfigFn = func(c *rest.Config) *rest.Config {
		c.WarningHandler = w
		return c
	}
	cfg, err := flags.ToRESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Ready: every post-start hook has run (the bootstrap RBAC roles, the priority
	// classes, the default namespaces).
	waitFor(t, 3*time.Minute, "kube-apiserver /readyz", func() error {
		api.check(t)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		b, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			return fmt.Errorf("%v: %s", err, b)
		}
		return nil
	})
	return &kubeAPI{getter: flags, cs: cs, warnings: w, apiProc: api}
}

// helm is Helm's action configuration for namespace of k: what `helm --kubeconfig`
// uses, with releases stored as Secrets (Helm's default).
func (k *kubeAPI) helm(t *testing.T, log *syncBuffer) *action.Configuration {
	t.Helper()
	cfg := &action.Configuration{}
	if err := cfg.Init(k.getter, namespace, "secret", func(format string, v ...any) { fmt.Fprintf(log, format+"\n", v...) }); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// served reads back the objects of the release as the API server holds them (stored,
// defaulted, admitted), into the same types a rendering decodes into.
func (k *kubeAPI) served(t *testing.T) *objects {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opts := metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + releaseName}
	var docs []string
	add := func(gv, kind string, obj runtime.Object) {
		t.Helper()
		b, err := yaml.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		m["apiVersion"], m["kind"] = gv, kind
		if b, err = yaml.Marshal(m); err != nil {
			t.Fatal(err)
		}
		docs = append(docs, string(b))
	}
	check := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	stss, err := k.cs.AppsV1().StatefulSets(namespace).List(ctx, opts)
	check(err)
	for i := range stss.Items {
		add("apps/v1", "StatefulSet", &stss.Items[i])
	}
	svcs, err := k.cs.CoreV1().Services(namespace).List(ctx, opts)
	check(err)
	for i := range svcs.Items {
		add("v1", "Service", &svcs.Items[i])
	}
	secrets, err := k.cs.CoreV1().Secrets(namespace).List(ctx, opts)
	check(err)
	for i := range secrets.Items {
		add("v1", "Secret", &secrets.Items[i])
	}
	cms, err := k.cs.CoreV1().ConfigMaps(namespace).List(ctx, opts)
	check(err)
	for i := range cms.Items {
		add("v1", "ConfigMap", &cms.Items[i])
	}
	pdbs, err := k.cs.PolicyV1().PodDisruptionBudgets(namespace).List(ctx, opts)
	check(err)
	for i := range pdbs.Items {
		add("policy/v1", "PodDisruptionBudget", &pdbs.Items[i])
	}
	jobs, err := k.cs.BatchV1().Jobs(namespace).List(ctx, opts)
	check(err)
	for i := range jobs.Items {
		add("batch/v1", "Job", &jobs.Items[i])
	}
	pods, err := k.cs.CoreV1().Pods(namespace).List(ctx, opts)
	check(err)
	for i := range pods.Items {
		add("v1", "Pod", &pods.Items[i])
	}
	return decode(t, strings.Join(docs, "---\n"))
}

// admitPods creates the StatefulSet's pods as its controller would, as a dry run: the
// API server runs its admission plugins (the namespace's Pod Security Standard, the
// service account, default tolerations), defaulting and validation on each and
// returns it as it would store it.
func (k *kubeAPI) admitPods(t *testing.T, o *objects) []*corev1.Pod {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out []*corev1.Pod
	for i := 0; i < int(*o.sts.Spec.Replicas); i++ {
		p, err := k.cs.CoreV1().Pods(namespace).Create(ctx, statefulSetPod(o, i), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			t.Fatalf("pod %d of the StatefulSet: %v", i, err)
		}
		out = append(out, p)
	}
	return out
}

// statefulSetPod is pod ordinal i of o's StatefulSet as the StatefulSet controller
// makes it: the template, named and labelled by ordinal, with its stable host name in
// the headless Service's domain and its volume claim.
func statefulSetPod(o *objects, i int) *corev1.Pod {
	sts := o.sts
	tmpl := sts.Spec.Template.DeepCopy()
	name := fmt.Sprintf("%s-%d", sts.Name, i)
	p := &corev1.Pod{ObjectMeta: tmpl.ObjectMeta, Spec: tmpl.Spec}
	p.Name, p.Namespace = name, sts.Namespace
	if p.Labels == nil {
		p.Labels = map[string]string{}
	}
	p.Labels["statefulset.kubernetes.io/pod-name"] = name
	p.Labels["apps.kubernetes.io/pod-index"] = fmt.Sprint(i)
	p.Spec.Hostname, p.Spec.Subdomain = name, sts.Spec.ServiceName
	for _, c := range sts.Spec.VolumeClaimTemplates {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: c.Name, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c.Name + "-" + name}}})
	}
	return p
}
