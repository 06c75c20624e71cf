// Package admin serves the Azure Service Bus management API (ATOM/XML over HTTP) that the
// unmodified azservicebus/admin client speaks: queues, topics, subscriptions and rules
// (create, get, update, delete, list), runtime properties, namespace properties
// (protocol.md §10), plus /healthz, /readyz, the emulator's /health, /metrics and (with
// --pprof) /debug/pprof/ for operators (unauthenticated GETs; handlers given in Config,
// docs/observability.md), and the JSON cluster API under /$cluster/ (clusterapi.go)
// over the Cluster interface the node implements, with backup and restore (backup.go:
// the archive format, its writer and its verifier, over the optional Backups interface).
//
// The handler owns no state. It reads and changes the metadata through the small Store
// interface defined here (P9: the consumer owns it), which package cluster implements
// with the metadata Raft group and the partitions, and which tests implement with a
// cluster/meta State under a mutex. Every request is authenticated with a Service Bus SAS
// token (Authorization header) signed by a key with the Manage right.
//
// Imports: the standard library, cluster/meta, fsm/rule and internal/sas. Never amqp,
// partition or hashicorp/* (test/deps_test.go): it reaches the node only through its
// Store and Cluster interfaces, which package cluster implements.
//
// Goroutines: none of its own; net/http calls ServeHTTP concurrently, and the handler
// only reads its immutable Config, so it is safe for concurrent use as long as the Store
// is.
package admin
