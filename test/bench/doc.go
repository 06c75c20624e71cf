// Package bench measures the whole broker the way users drive it: the unmodified
// azservicebus SDK against a real quorumbus process on loopback (test/harness), fsync
// on. Run: go test -run '^$' -bench . -benchtime 20000x ./test/bench/
//
// cluster_test.go does the same against a 3-node cluster of real processes (send,
// receive, latency at a fixed rate, forwarding from a node without a replica, 1/16/64
// partition groups per node). Those benchmarks start their own clusters and are sized by
// -cluster.* flags, not b.N, so they run once: make bench-cluster.
// compare/ (make bench-compare) is the side-by-side harness: one load tool against a
// 3-node Quorumbus, RabbitMQ quorum queues and NATS JetStream, started one at a time.
// Figures and how they were taken are in docs/benchmarks.md.
package bench
