package charttest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// imageEnv is what the image's config sets (deploy/Dockerfile, deploy/image); a pod's
// own env overrides it, as with any container runtime.
var imageEnv = []string{
	"QUORUMBUS_DATA=/var/lib/quorumbus",
	"QUORUMBUS_AMQP_ADDR=0.0.0.0:5672",
	"QUORUMBUS_ADMIN_ADDR=0.0.0.0:5300",
}

// podFacts is what the kubelet knows about one pod of the StatefulSet and fills in for
// the downward API and secret references.
type podFacts struct {
	name, ip, uid string
	node          string // the Kubernetes node it runs on
	labels        map[string]string
	secrets       map[string]map[string]string // Secret name -> key -> value
}

// podOf returns the facts of pod ordinal i of the rendered StatefulSet.
func podOf(o *objects, i int, ip string, zone string) podFacts {
	labels := map[string]string{}
	for k, v := range o.sts.Spec.Template.Labels {
		labels[k] = v
	}
	labels["topology.kubernetes.io/zone"] = zone
	labels["statefulset.kubernetes.io/pod-name"] = fmt.Sprintf("%s-%d", o.sts.Name, i)
	secrets := map[string]map[string]string{}
	for name, s := range o.secrets {
		secrets[name] = map[string]string{}
		for k, v := range s.Data {
			secrets[name][k] = string(v)
		}
	}
	// A Secret the user manages (auth.existingSecret, clusterAuth.existingSecret) holds
	// each key the pod reads from it.
	for _, c := range o.sts.Spec.Template.Spec.Containers {
		for _, e := range c.Env {
			if r := e.ValueFrom; r != nil && r.SecretKeyRef != nil && o.secrets[r.SecretKeyRef.Name] == nil {
				if secrets[r.SecretKeyRef.Name] == nil {
					secrets[r.SecretKeyRef.Name] = map[string]string{}
				}
				secrets[r.SecretKeyRef.Name][r.SecretKeyRef.Key] = "user-managed-key-0123456789"
			}
		}
	}
	return podFacts{name: fmt.Sprintf("%s-%d", o.sts.Name, i), ip: ip, uid: fmt.Sprintf("00000000-0000-0000-0000-%012d", i), node: fmt.Sprintf("node-%d", i),
		labels: labels, secrets: secrets}
}

// containerEnv resolves a container's environment as the kubelet does: the image's
// variables, then the pod's in order, each value expanding $(VAR) of those before it.
func containerEnv(t *testing.T, c corev1.Container, p podFacts) (env []string, lookup map[string]string) {
	t.Helper()
	lookup = map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := lookup[k]; !ok {
			order = append(order, k)
		}
		lookup[k] = v
	}
	for _, kv := range imageEnv {
		k, v, _ := strings.Cut(kv, "=")
		set(k, v)
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			set(e.Name, expand(e.Value, lookup))
		case e.ValueFrom.FieldRef != nil:
			set(e.Name, p.field(t, e.ValueFrom.FieldRef.FieldPath))
		case e.ValueFrom.SecretKeyRef != nil:
			r := e.ValueFrom.SecretKeyRef
			v, ok := p.secrets[r.Name][r.Key]
			if !ok {
				t.Fatalf("env %s: Secret %s has no key %s", e.Name, r.Name, r.Key)
			}
			set(e.Name, v)
		default:
			t.Fatalf("env %s: unsupported source %+v", e.Name, e.ValueFrom)
		}
	}
	for _, k := range order {
		env = append(env, k+"="+lookup[k])
	}
	return env, lookup
}

func (p podFacts) field(t *testing.T, path string) string {
	t.Helper()
	switch {
	case path == "metadata.name":
		return p.name
	case path == "status.podIP":
		return p.ip
	case path == "metadata.uid":
		return p.uid
	case path == "spec.nodeName":
		return p.node
	case strings.HasPrefix(path, "metadata.labels['") && strings.HasSuffix(path, "']"):
		return p.labels[strings.TrimSuffix(strings.TrimPrefix(path, "metadata.labels['"), "']")]
	}
	t.Fatalf("fieldRef %q: not supported by this test", path)
	return ""
}

// expand does the kubelet's $(VAR) expansion: a defined VAR is replaced, $$ is a
// literal $, anything else is left as written.
func expand(s string, vars map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
			continue
		case '(':
			if end := strings.IndexByte(s[i+2:], ')'); end >= 0 {
				name := s[i+2 : i+2+end]
				if v, ok := vars[name]; ok {
					b.WriteString(v)
					i += 2 + end
					continue
				}
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func expandAll(args []string, vars map[string]string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = expand(a, vars)
	}
	return out
}

var (
	staticOnce sync.Once
	staticDir  string
	staticErr  error
)

// staticBinaries builds quorumbus and qbctl from this checkout as the image has them:
// static (CGO_ENABLED=0), so that they run in a root holding nothing else.
func staticBinaries(t *testing.T) string {
	t.Helper()
	staticOnce.Do(func() {
		staticDir, staticErr = os.MkdirTemp("", "quorumbus-chart-bin-")
		if staticErr != nil {
			return
		}
		root, err := filepath.Abs(filepath.Join("..", "..", ".."))
		if err != nil {
			staticErr = err
			return
		}
		cmd := exec.Command("go", "build", "-trimpath", "-o", staticDir+"/", "./cmd/quorumbus", "./cmd/qbctl")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			staticErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if staticErr != nil {
		t.Fatal(staticErr)
	}
	return staticDir
}

// checkConfig runs `quorumbus --check-config` with a container's args and environment:
// quorumbus's own loader decides whether the pod would start, and with what.
func checkConfig(t *testing.T, c corev1.Container, p podFacts) map[string]any {
	t.Helper()
	env, vars := containerEnv(t, c, p)
	if len(c.Command) != 0 {
		t.Fatalf("container %s overrides the image's entrypoint: %q", c.Name, c.Command)
	}
	args := append([]string{"--check-config"}, expandAll(c.Args, vars)...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(staticBinaries(t), "quorumbus"), args...)
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pod %s: quorumbus rejects its args/env: %v\n%s\nargs %q\nenv %q", p.name, err, stderr.String(), args, env)
	}
	var cfg map[string]any
	if err := json.Unmarshal(out, &cfg); err != nil {
		t.Fatalf("--check-config output: %v\n%s", err, out)
	}
	return cfg
}

// port returns the port number of a HOST:PORT setting.
func port(t *testing.T, hostPort any) int32 {
	t.Helper()
	s, _ := hostPort.(string)
	i := strings.LastIndexByte(s, ':')
	n, err := strconv.Atoi(s[i+1:])
	if i < 0 || err != nil {
		t.Fatalf("%q is not HOST:PORT", s)
	}
	return int32(n)
}
