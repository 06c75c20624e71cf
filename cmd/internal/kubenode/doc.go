// Package kubenode reads a label of a Kubernetes node from inside a pod: what the
// quorumbus node does at start with --zone-from-node, to take its zone from the
// topology.kubernetes.io/zone label of the node its pod runs on (the Helm chart's
// cluster.zoneFromNode). Nodes carry that label; pods get it only where the cluster
// runs the PodTopologyLabelsAdmission plugin.
//
// One GET of /api/v1/nodes/NAME with net/http, authenticated with the pod's service
// account token and checked against the cluster's CA, both from the files Kubernetes
// mounts at /var/run/secrets/kubernetes.io/serviceaccount; the API server's address
// from KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT, which the kubelet sets in
// every container. The account needs get on nodes (a ClusterRole: nodes are
// cluster-scoped). No client-go: a label is all it reads.
//
// Imports: the standard library only (test/deps_test.go): a label is not worth a
// Kubernetes client. Goroutines: none; a call blocks its caller.
package kubenode
