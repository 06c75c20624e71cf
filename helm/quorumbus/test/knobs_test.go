package charttest

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The knobs of values/operator-knobs.yaml each land where Kubernetes reads them.
func TestOperatorKnobs(t *testing.T) {
	o := decode(t, render(t, readValues(t, "operator-knobs")))
	sts := o.sts
	spec := sts.Spec.Template.Spec
	c := brokerContainer(t, o)

	// global.imageRegistry and image.digest: pulled by digest from the mirror.
	want := "registry.example.com/mirror/quorumbus@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	if c.Image != want {
		t.Errorf("image %q, want %q", c.Image, want)
	}
	for _, p := range o.pods {
		for _, pc := range append(p.Spec.InitContainers, p.Spec.Containers...) {
			if pc.Image != want {
				t.Errorf("test pod container %s: image %q, want %q", pc.Name, pc.Image, want)
			}
		}
	}

	// commonLabels and commonAnnotations on every object; the pods get the labels.
	metas := []metav1.ObjectMeta{sts.ObjectMeta, o.pdb.ObjectMeta, o.netpol.ObjectMeta, o.account.ObjectMeta, o.ingress.ObjectMeta}
	for _, s := range o.services {
		metas = append(metas, s.ObjectMeta)
	}
	for _, s := range o.secrets {
		metas = append(metas, s.ObjectMeta)
	}
	for _, p := range o.pods {
		metas = append(metas, p.ObjectMeta)
	}
	for _, m := range metas {
		if m.Labels["team"] != "messaging" || m.Annotations["owner"] != "platform@example.com" {
			t.Errorf("%s: labels %v annotations %v lack commonLabels/commonAnnotations", m.Name, m.Labels, m.Annotations)
		}
		if m.Labels["app.kubernetes.io/name"] != "quorumbus" {
			t.Errorf("%s: the chart's labels are gone: %v", m.Name, m.Labels)
		}
	}
	if o.route.GetLabels()["team"] != "messaging" || o.route.GetAnnotations()["owner"] != "platform@example.com" {
		t.Errorf("HTTPRoute: labels %v annotations %v", o.route.GetLabels(), o.route.GetAnnotations())
	}
	if sts.Spec.Template.Labels["team"] != "messaging" {
		t.Errorf("pod labels %v lack commonLabels", sts.Spec.Template.Labels)
	}
	for _, s := range o.secrets {
		if s.Annotations["helm.sh/resource-policy"] != "keep" {
			t.Errorf("Secret %s lost its keep policy next to commonAnnotations: %v", s.Name, s.Annotations)
		}
	}
	for _, p := range o.pods {
		if p.Annotations["helm.sh/hook"] != "test" {
			t.Errorf("test pod %s lost its hook annotation: %v", p.Name, p.Annotations)
		}
	}

	// serviceAccount: created, annotated, used; the token still not mounted.
	if o.account == nil || o.account.Name != sts.Name || o.account.Annotations["azure.workload.identity/client-id"] == "" {
		t.Fatalf("ServiceAccount: %+v", o.account)
	}
	if spec.ServiceAccountName != o.account.Name {
		t.Errorf("serviceAccountName %q, want %q", spec.ServiceAccountName, o.account.Name)
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Error("the service account token is mounted")
	}

	// Security contexts: the overrides added, the chart's restricted settings kept.
	if psc := spec.SecurityContext; len(psc.SupplementalGroups) != 1 || psc.SupplementalGroups[0] != 2000 {
		t.Errorf("pod securityContext %+v lacks supplementalGroups", psc)
	}
	if sc := c.SecurityContext; sc.SELinuxOptions == nil || sc.SELinuxOptions.Level != "s0:c123,c456" {
		t.Errorf("container securityContext %+v lacks seLinuxOptions", sc)
	}
	checkRestricted(t, "StatefulSet", spec)

	// updateStrategy, priorityClassName.
	if u := sts.Spec.UpdateStrategy; u.Type != "RollingUpdate" || u.RollingUpdate == nil || u.RollingUpdate.Partition == nil || *u.RollingUpdate.Partition != 1 {
		t.Errorf("updateStrategy %+v", u)
	}
	if spec.PriorityClassName != "messaging-critical" {
		t.Errorf("priorityClassName %q", spec.PriorityClassName)
	}

	// extraEnvFrom, extraVolumes and mounts, initContainers, sidecars.
	if len(c.EnvFrom) != 1 || c.EnvFrom[0].SecretRef == nil || c.EnvFrom[0].SecretRef.Name != "quorumbus-settings" {
		t.Errorf("envFrom %+v", c.EnvFrom)
	}
	var vol bool
	for _, v := range spec.Volumes {
		vol = vol || (v.Name == "scratch" && v.EmptyDir != nil)
	}
	var mount bool
	for _, m := range c.VolumeMounts {
		mount = mount || (m.Name == "scratch" && m.MountPath == "/scratch")
	}
	if !vol || !mount {
		t.Errorf("extra volume %v, mount %v", vol, mount)
	}
	if len(spec.InitContainers) != 1 || spec.InitContainers[0].Name != "wait" {
		t.Errorf("initContainers %+v", spec.InitContainers)
	}
	if len(spec.Containers) != 2 || spec.Containers[1].Name != "log-shipper" {
		t.Errorf("containers %d, want the node and the sidecar", len(spec.Containers))
	}

	// The client Service: LoadBalancer with its settings and a fixed node port.
	svc := o.services[sts.Name]
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || svc.Spec.ExternalTrafficPolicy != "Local" ||
		svc.Spec.LoadBalancerClass == nil || *svc.Spec.LoadBalancerClass != "example.com/lb" ||
		len(svc.Spec.LoadBalancerSourceRanges) != 1 || svc.Labels["exposure"] != "internal" ||
		svc.Annotations["service.beta.kubernetes.io/azure-load-balancer-internal"] != "true" {
		t.Errorf("client Service %+v", svc)
	}
	for _, p := range svc.Spec.Ports {
		if (p.Name == "amqp") != (p.NodePort == 30672) {
			t.Errorf("port %s: nodePort %d", p.Name, p.NodePort)
		}
	}

	// The explorer through an Ingress and an HTTPRoute, both to the admin port.
	ing := o.ingress
	if ing == nil || ing.Spec.IngressClassName == nil || *ing.Spec.IngressClassName != "nginx" || len(ing.Spec.Rules) != 1 ||
		ing.Spec.Rules[0].Host != "quorumbus.example.com" || len(ing.Spec.TLS) != 1 {
		t.Fatalf("Ingress %+v", ing)
	}
	backend := ing.Spec.Rules[0].HTTP.Paths[0].Backend.Service
	if backend.Name != sts.Name || backend.Port.Name != "admin" || containerPort(t, c, "admin").ContainerPort != 5300 {
		t.Errorf("Ingress backend %+v", backend)
	}
	refs, _, _ := unstructuredSlice(o.route.Object, "spec", "rules")
	if len(refs) < 1 || !strings.Contains(strings.ReplaceAll(yamlOf(t, refs[0]), " ", ""), "name:"+sts.Name+"\nport:5300") {
		t.Errorf("HTTPRoute rules %s", yamlOf(t, refs))
	}
	parents, _, _ := unstructuredSlice(o.route.Object, "spec", "parentRefs")
	if len(parents) != 1 {
		t.Errorf("HTTPRoute parentRefs %v", parents)
	}

	// NetworkPolicy egress: the peers on 5400, DNS, and the extra rule.
	np := o.netpol
	if len(np.Spec.PolicyTypes) != 2 || np.Spec.PolicyTypes[1] != "Egress" || len(np.Spec.Egress) != 3 {
		t.Fatalf("NetworkPolicy egress: types %v rules %+v", np.Spec.PolicyTypes, np.Spec.Egress)
	}
	if !selects(t, np.Spec.Egress[0].To[0].PodSelector, sts.Spec.Template.Labels) || np.Spec.Egress[0].Ports[0].Port.IntValue() != 5400 {
		t.Errorf("egress to peers %+v", np.Spec.Egress[0])
	}
	if np.Spec.Egress[1].Ports[0].Port.IntValue() != 53 || np.Spec.Egress[2].To[0].IPBlock == nil {
		t.Errorf("egress DNS %+v, extra %+v", np.Spec.Egress[1], np.Spec.Egress[2])
	}

	// Without the knobs none of these objects is rendered.
	d := decode(t, render(t, readValues(t, "three")))
	if d.account != nil || d.ingress != nil || d.route != nil || d.sts.Spec.Template.Spec.ServiceAccountName != "" {
		t.Errorf("defaults render ServiceAccount %v Ingress %v HTTPRoute %v", d.account, d.ingress, d.route)
	}
}

// Two nodes tolerate no failure: NOTES.txt says so (and nothing of the kind for 1, 3 or 5).
func TestNotesWarnOfTwoNodes(t *testing.T) {
	for n, warn := range map[int]bool{1: false, 2: true, 3: false, 5: false} {
		_, notes, err := renderRelease(map[string]any{"replicaCount": n, "cluster": map[string]any{"bootstrapExpect": 1}, "image": map[string]any{"repository": "quorumbus"}})
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(notes, "WARNING: replicaCount=2 tolerates no failure"); got != warn {
			t.Errorf("replicaCount %d: warning %v, want %v:\n%s", n, got, warn, notes)
		}
	}
}
