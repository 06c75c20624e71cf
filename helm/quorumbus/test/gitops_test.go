package charttest

import (
	"reflect"
	"strings"
	"testing"
)

// Rendered without the cluster (helm template, as Argo CD does; a client-side dry
// run), the chart's lookup of its generated Secret answers nothing: the chart refuses,
// naming auth.existingSecret, rather than render new random keys on every sync. With
// auth.existingSecret set it renders, and every render is the same (a GitOps tool sees
// no drift).
func TestOfflineRenderNeedsAnExistingSecret(t *testing.T) {
	var refused, rendered int
	for _, name := range cases(t) {
		t.Run(name, func(t *testing.T) {
			vals := readValues(t, name)
			generated := merged(t, vals)["auth"].(map[string]any)["existingSecret"] == ""
			out, err := renderOffline(vals)
			if generated {
				if err == nil {
					t.Fatal("rendered a generated Secret without access to the cluster: its keys would change on every render")
				}
				for _, want := range []string{"auth.existingSecret", "helm template", "GitOps"} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("the refusal does not mention %q: %v", want, err)
					}
				}
				refused++
				return
			}
			if err != nil {
				t.Fatalf("auth.existingSecret is set, yet the offline render fails: %v", err)
			}
			again, err := renderOffline(vals)
			if err != nil || again != out {
				t.Fatalf("two offline renders differ (err %v): a GitOps tool would see drift on every sync", err)
			}
			if o := decode(t, out); len(o.secrets) != 0 {
				t.Errorf("offline render with auth.existingSecret renders Secrets %v", sortedKeys(o.secrets))
			}
			rendered++
		})
	}
	if refused == 0 || rendered == 0 {
		t.Fatalf("%d values files refused, %d rendered: both paths need a values file", refused, rendered)
	}
}

// With the cluster (helm install, then helm upgrade), the first install generates the
// Secret and every upgrade renders the keys it finds in the cluster, unchanged.
func TestUpgradeKeepsTheInstalledSecret(t *testing.T) {
	api := newAPIServer()
	defer api.Close()
	vals := readValues(t, "three")
	manifest, _, err := renderAgainst(vals, api)
	if err != nil {
		t.Fatal(err)
	}
	installed := decode(t, manifest).secrets[releaseName]
	if installed == nil || len(installed.Data["sas-key"]) < 40 || len(installed.Data["cluster-secret"]) < 40 {
		t.Fatalf("install rendered no generated Secret: %+v", installed)
	}
	api.put(*installed)
	for i := 0; i < 2; i++ {
		manifest, _, err := renderAgainst(vals, api)
		if err != nil {
			t.Fatal(err)
		}
		upgraded := decode(t, manifest).secrets[releaseName]
		if upgraded == nil || !reflect.DeepEqual(upgraded.Data, installed.Data) {
			t.Fatalf("upgrade %d changed the Secret's keys: %v, installed %v", i+1, upgraded, installed.Data)
		}
	}
}
