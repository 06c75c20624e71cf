// Package certs loads TLS certificates from files and keeps them current, and
// creates the self-signed development certificate (--tls-self-signed).
//
// Owns: the certificate a listener presents (Reloader, used through
// tls.Config.GetCertificate / GetClientCertificate, so a certificate replaced
// on disk, e.g. by a Kubernetes Secret mount swapping its ..data symlink, is
// served from the next handshake on without a restart) and the development CA
// and server certificate kept in the data directory.
//
// Must not import: anything outside the standard library, so that both the
// amqp side (through cmd) and cluster can use it.
//
// Goroutine model: no goroutines. A Reloader is safe for concurrent use; each
// handshake stats the two files (cheap) and reloads them under a mutex only
// when their identity, size or modification time changed.
package certs
