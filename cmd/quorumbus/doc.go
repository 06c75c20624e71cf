// Command quorumbus runs one Quorumbus node: the AMQP 1.0 listener that Service Bus SDKs
// connect to, the admin HTTP API, and the node's share of the cluster (the metadata Raft
// group and the Raft groups of the entity partitions it hosts).
//
// With no arguments it starts a single node on 127.0.0.1 with its data in ./data, creates
// the default RootManageSharedAccessKey, and (at a terminal, or with --print-connection-string)
// prints the connection string to use; it never writes the key into its logs.
// Every flag is also an environment variable (--amqp-addr is QUORUMBUS_AMQP_ADDR) and a
// key of the optional JSON file named by --config; flags win over the environment, which
// wins over the file.
//
// This package is wiring only: configuration, logging, the real clock, listeners and
// signals, and the admin port's operator endpoints (metrics.go: /metrics from the node's
// registry plus a collector over amqp.Server.Stats, /debug/pprof/ with --pprof;
// /readyz from cluster.Node.CaughtUp). It imports amqp and cluster and is imported by
// nothing.
//
// run.go starts a node in steps, each returning its closer: listen (client TLS and
// listeners), startNode (Config.json, cluster.Start), startAMQP, startHTTP (admin API,
// explorer, WebSockets) and announce (endpoints.json, banner); run then waits for a
// signal and stops clients first, then the node. Defaults come from the packages that
// own them (cluster, admin and amqp DefaultConfig). test/funclen_test.go keeps every
// function here under 80 lines.
package main
