// Package chaos is a Jepsen-style fault suite for a quorumbus cluster.
//
// Each node runs on a host of package test/hosts (its own network namespace, address,
// hosts file and data directory, joining by name through a userspace proxy per link).
// Clients of the official azservicebus SDK, in the test process, connect to nodes chosen
// at random and reconnect to another at random after any error, as users would:
//
//   - senders send (and schedule) messages with unique MessageIds to queue q, one
//     attempt per ID (the SDK's own retries are off, so an ID is never sent twice);
//   - peek-lock receivers complete most messages, abandon some and let the lock of
//     others expire;
//   - a session sender sends numbered messages to a few sessions of queue qs, and
//     session receivers accept the next session, read and set its state, and complete
//     in order.
//
// Every client operation is one line of the history, with its result. A nemesis injects
// faults (faults.go) while the clients run, among them a power loss of one node (every
// node's data directory is a test/lazyfs mount, which drops what was not fsynced); then everything is healed, every queue is
// drained, and the checker (checker.go) requires: nothing acknowledged lost, nothing
// unexpected, every redelivery explained by a lock the client saw end (abandon, expiry,
// a failed settlement, a dropped receiver), no successful complete while another
// receiver held the message, delivery counts increasing, nothing dead-lettered, per-session
// FIFO, session state never going back, scheduled messages not early, every replica of
// every partition group at the same state digest, and every member's metadata state at
// one digest and applied index. A failing run keeps the history and
// every node's log in a results directory named after its seed.
//
// The tests run only with QUORUMBUS_CHAOS=1 (make chaos, make chaos-long), as root.
package chaos
