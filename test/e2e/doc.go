// Package e2e holds the end-to-end tests: the unmodified azservicebus SDK (and its admin
// client) against real quorumbus processes on 127.0.0.1, started by test/harness. Each
// test names the behaviour rule (S-...) it checks.
package e2e
