package charttest

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// Every ServiceMonitor selects exactly one of the rendered Services: the headless
// Service exposes the same pods and the same admin port, and a monitor matching both
// would scrape every pod twice (two jobs), doubling every sum in the alerts and the
// dashboard.
func TestServiceMonitorSelectsOneService(t *testing.T) {
	var monitors int
	for _, name := range cases(t) {
		t.Run(name, func(t *testing.T) {
			o := decode(t, render(t, readValues(t, name)))
			if o.monitor == nil {
				return
			}
			monitors++
			var spec struct {
				Selector          metav1.LabelSelector `json:"selector"`
				NamespaceSelector struct {
					MatchNames []string `json:"matchNames"`
				} `json:"namespaceSelector"`
			}
			b, err := yaml.Marshal(o.monitor.Object["spec"])
			if err != nil {
				t.Fatal(err)
			}
			if err := yaml.Unmarshal(b, &spec); err != nil {
				t.Fatalf("ServiceMonitor spec: %v\n%s", err, b)
			}
			var matched []string
			for _, svc := range o.services {
				if !selects(t, &spec.Selector, svc.Labels) {
					continue
				}
				for _, ns := range spec.NamespaceSelector.MatchNames {
					if ns == svc.Namespace {
						matched = append(matched, svc.Name)
					}
				}
			}
			if len(matched) != 1 || matched[0] != o.sts.Name {
				t.Fatalf("ServiceMonitor selects Services %v, want only the client Service %s", matched, o.sts.Name)
			}
		})
	}
	if monitors == 0 {
		t.Fatal("no values file renders a ServiceMonitor: nothing was checked")
	}
}

// The helm-test pod (and the configApply Job's pods) are outside every selector that
// counts the node pods: a
// PodDisruptionBudget counting an uncontrolled pod allows no disruption at all (and a
// failed test pod, left behind, blocks kubectl drain), a spread constraint would skew,
// and a Service would send clients to it. Every selector still selects the node pods.
// The StatefulSet's own selector is left out: it is immutable (changing it breaks every
// upgrade), and its controller only claims pods named after it.
func TestSelectorsSelectOnlyTheNodePods(t *testing.T) {
	for _, name := range cases(t) {
		t.Run(name, func(t *testing.T) {
			o := decode(t, render(t, readValues(t, name)))
			type selector struct {
				what string
				sel  *metav1.LabelSelector
			}
			var sels []selector
			if o.pdb != nil {
				sels = append(sels, selector{"PodDisruptionBudget", o.pdb.Spec.Selector})
			}
			for _, tsc := range o.sts.Spec.Template.Spec.TopologySpreadConstraints {
				sels = append(sels, selector{"spread over " + tsc.TopologyKey, tsc.LabelSelector})
			}
			for _, svc := range o.services {
				if unrouted(o, svc) {
					continue
				}
				sels = append(sels, selector{"Service " + svc.Name, metav1.SetAsLabelSelector(labels.Set(svc.Spec.Selector))})
			}
			if o.netpol != nil {
				sels = append(sels, selector{"NetworkPolicy", &o.netpol.Spec.PodSelector})
			}
			if len(sels) < 4 {
				t.Fatalf("only %d selectors rendered", len(sels))
			}
			if len(o.pods) == 0 {
				t.Fatal("no helm test pod rendered")
			}
			others := map[string]map[string]string{} // pods that are not nodes, by what they are
			for _, p := range o.pods {
				others["test pod "+p.Name] = p.Labels
			}
			for _, j := range o.jobs {
				others["pod of Job "+j.Name] = j.Spec.Template.Labels
			}
			for _, s := range sels {
				if !selects(t, s.sel, o.sts.Spec.Template.Labels) {
					t.Errorf("%s does not select the node pods (%v)", s.what, o.sts.Spec.Template.Labels)
				}
				for what, l := range others {
					if selects(t, s.sel, l) {
						t.Errorf("%s selects the %s (labels %v)", s.what, what, l)
					}
				}
			}
		})
	}
}
