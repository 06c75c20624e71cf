// Package test holds the repository-wide checks: the dependency direction between
// packages (deps_test.go) and that every rule, principle and section cited in code and
// docs is defined in docs/ (refs_test.go). Its subdirectories hold the end-to-end (e2e),
// operations (ops) and benchmark (bench) suites that drive a real quorumbus node with
// the official Service Bus SDK, and the harness that starts one. Nothing in production
// imports it.
package test
