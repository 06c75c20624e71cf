// Package charttest tests the Helm chart in helm/quorumbus offline, with no Kubernetes
// cluster and no registry: it renders the chart in-process with the Helm SDK over a
// matrix of values files (testdata/values), compares each rendering with its golden file
// (testdata/golden, regenerated with -update), runs `helm lint --strict` through the
// SDK, decodes every object strictly into k8s.io/api types, checks what the chart
// promises (probes on paths a node really serves, args and environment that quorumbus's
// own loader accepts, ports, PDB, spread, security context, rolling on config changes),
// and boots the rendered StatefulSet: three quorumbus processes with exactly the
// rendered args and environment, each in a root of its own laid out like the pod
// (image, volumes, /etc/hosts carrying the headless-service names) and on a test host
// of its own (test/hosts, the chaos suite's network namespaces), or on loopback where
// those are not available.
//
// TestHelmThroughARealAPIServer takes the chart through a real kube-apiserver on a real
// etcd, both on 127.0.0.1 (binaries from $QUORUMBUS_KUBE_BIN, which `make kube-bin`
// fills, else built from apivalidate's module): helm install, helm test and helm
// upgrade with the Helm SDK, so that admission (the restricted Pod Security Standard
// enforced), defaulting and the StatefulSet and PodDisruptionBudget update rules are
// the real ones. With no kubelet or controllers, the StatefulSet, hook Job and test pod
// read back from the API server run in the booted-pods harness, and the test reports
// the Job's and pod's success as the Job controller and kubelet would.
//
// The API server's own validation of the golden files is in apivalidate, a module of
// its own because it requires k8s.io/kubernetes. `make helm-test` runs both.
package charttest
