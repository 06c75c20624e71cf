// Package meta owns the namespace metadata of a Quorumbus node: the namespace itself,
// its queues, topics, subscriptions and rules with every Service Bus property (S-ENT-1,
// S-ENT-2), the SAS keys that authenticate clients, and the placement of each entity's
// partitions on Raft groups and nodes.
//
// State is the state machine of the metadata Raft group. It is pure and deterministic
// (P1): it reads no clock, disk, network or randomness and never depends on map order.
// Time enters only as Entry.Now, stamped by the proposer. Commands and snapshots are a
// versioned wire format (P3): EncodeEntry/DecodeEntry and Snapshot/Restore.
//
// Properties (props.go) is the one table of entity properties: name, type, default,
// bounds, entity kinds and the surfaces that carry each (ATOM, Config.json, qbctl). The
// defaults, Validate, the fixed-at-creation check and the Config.json loader iterate it
// here; cluster/admin's ATOM reader and writer and cmd/qbctl's flags and JSON iterate it
// there; tests hold the properties structs, the SDK's structs and the docs to it.
//
// The package also converts an entity partition into the fsm.Config its partition group
// runs with (PartitionConfig), parses and formats the ISO 8601 durations Service Bus uses,
// and loads the official emulator's Config.json (LoadEmulatorConfig).
//
// Imports: the standard library but os and net, the value types of fsm and fsm/rule,
// and internal/sas. Never amqp, partition or hashicorp/* (test/deps_test.go): the Raft
// group wrapping State is cluster/metagroup's.
//
// Goroutines: none. State is not safe for concurrent use; its owner (the Raft apply loop)
// serialises Apply and reads, or readers hold the owner's lock.
package meta
