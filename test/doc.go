// Package test holds the repository-wide checks (dependency direction) and, in its
// subdirectories, the end-to-end, chaos and benchmark suites that drive a real
// quorumbus node with the official Service Bus SDK. Nothing in production imports it.
package test
