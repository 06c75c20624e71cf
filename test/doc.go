// Package test holds the repository-wide checks: the dependency direction between
// packages (deps_test.go), that every rule, principle and section cited in code and docs
// is defined in docs/ (refs_test.go), that tests built only without -race still run
// in CI (norace_test.go), and that cmd/quorumbus's functions stay short (funclen_test.go). Its subdirectories hold the end-to-end (e2e), multi-node
// (cluster), operations (ops) and benchmark (bench) suites that drive real quorumbus
// nodes with the official Service Bus SDK, the harness that starts them, and the helpers
// the tests of several packages share (testutil, backendtest). Nothing in production
// imports it or them (deps_test.go).
package test
