// Package bench measures the whole broker the way users drive it: the unmodified
// azservicebus SDK against a real quorumbus process on loopback (test/harness), fsync
// on. Run: go test -run '^$' -bench . -benchtime 20000x ./test/bench/
// Figures and how they were taken are in docs/benchmarks.md.
package bench
