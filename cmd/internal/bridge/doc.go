// Package bridge adapts the cluster's data plane to the protocol layer: it implements
// amqp.Backend over a *cluster.Node's Router (and its Store for rules). It owns the translations between the two
// vocabularies: amqp messages and typed property values to fsm messages and rule values
// and back, AMQP addresses to cluster addresses, and the cluster's errors (fsm,
// partition, cluster sentinels) to amqp's sentinel errors, which amqp maps to wire
// conditions in one table.
//
// It exists because amqp must not import the broker's packages and cluster must not
// import amqp (see test/deps_test.go); cmd wires the two together through it. It starts
// no goroutines and keeps no state: a session lock's holder is the AMQP connection
// (amqp.ConnectionID), recorded in the partition's replicated state, so any node can
// check it.
package bridge
