// Package cluster holds the multi-node end-to-end tests: n real quorumbus processes on
// 127.0.0.1, started by test/harness.StartCluster, that form one cluster and are driven
// through qbctl and the unmodified azservicebus SDK.
//
// Each test is bounded: it fails with the last observed state rather than hang when the
// cluster does not form, and every node it starts is stopped when it ends (a node that
// does not stop within 60 s is dumped with SIGQUIT and killed; test/harness).
package cluster
