// Package apivalidate runs the Kubernetes API server's own validation over the chart's
// golden renderings (../testdata/golden, which the chart tests keep equal to what the
// chart renders): each object is decoded strictly, defaulted and converted to the
// internal types as the API server does on create, then checked with the validation
// functions of k8s.io/kubernetes/pkg/apis/*/validation, and every pod template is
// checked against the restricted Pod Security Standard as the admission plugin does.
// That catches what schemas miss: an invalid podManagementPolicy, port 99999, a
// selector that does not match its template, a bad topology spread.
//
// It is a module of its own because k8s.io/kubernetes is meant to be built from its own
// repository: its staging modules are pinned by the replace directives in go.mod. Its
// tool directives pin etcd and kube-apiserver at the versions k8s.io/kubernetes
// requires: `make kube-bin` builds them for the chart tests' run through a real API
// server (../kubeapi_test.go).
package apivalidate
