// Package ops holds the operator-facing end-to-end tests: a real quorumbus process
// (test/harness) loading the official emulator's Config.json, surviving kill -9, serving
// runtime counts through the admin API, and driven by the qbctl binary. Each test names
// the rule or the issue requirement it checks.
package ops
