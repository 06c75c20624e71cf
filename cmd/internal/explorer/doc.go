// Package explorer serves Quorumbus's web UI on the admin port: a single page at "/"
// with its assets under /$ui/ (plain HTML, CSS and JavaScript embedded in the binary
// with embed, so it works offline and the build needs no node), and the small JSON API
// under /$ui/api/ that the page uses for what the admin API does not offer: peeking
// messages with their properties and body, sending a test message, cancelling a
// scheduled one, resubmitting or purging dead-lettered messages with progress, purging
// a queue or subscription with progress, and the session list with each session's
// state. Everything else (entities, runtime counts, the cluster view) the page reads
// from the admin API itself: the ATOM management API and the JSON cluster API under
// /$cluster/. docs/explorer.md describes the pages and the API.
//
// "$" cannot start an entity name, so /$ui/ never hides a queue or topic, as /$cluster/
// does not. Every /$ui/api/ request carries the same SAS token the admin API accepts
// (Config.Authorize: a key with the Manage right); the page signs it in the browser
// from the key the operator logs in with, and the key never leaves the browser.
//
// Message operations go through the official Go SDK (azservicebus) to the node's own
// AMQP listener, authenticated with the caller's token: the broker then applies its
// usual rights, settlement and routing, and the UI shares qbctl's semantics (peek,
// resubmit as a copy without the dead-letter properties, then complete); a dead-letter
// purge, and a queue's or subscription's purge (the entity, then its dead-letter queue),
// send com.microsoft:batch-delete-messages (cmd/internal/batchdelete), as qbctl's dlq
// and queue purge and the SDKs' purgeMessages do, over a go-amqp connection of its own
// with the same token: locked messages and messages scheduled for later stay. The session
// list reads through Config.Sessions, which cmd implements over the node: AMQP offers
// no way to read a session's state without taking its lock from a consumer.
//
// Imports: the standard library, azservicebus and go-amqp (for error conditions),
// Prometheus's metric types (client_model) for the rates view, which Config.Metrics
// gathers, its siblings cmd/internal/batchdelete, msgstate and redrive, and, in
// NodeSessions alone (the Config.Sessions cmd hands it), cluster's Router, with
// cluster/meta and fsm for their errors. Never amqp (test/deps_test.go): it is a client
// of the broker, and cmd wires it.
//
// Goroutines: none of its own. net/http calls ServeHTTP concurrently; a long redrive
// or purge runs on its request's goroutine and streams its progress as NDJSON. It stops
// when the client goes away (the request context), or at shutdown when the node closes
// its AMQP listener after http.Server.Shutdown has waited --shutdown-timeout for it.
package explorer
