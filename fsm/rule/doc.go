// Package rule owns subscription rules: the typed property values a message carries, the
// view of a message that filters read and actions change (Properties), and the four
// filter kinds of Service Bus (true, false, correlation, SQL) with SQL rule actions.
//
// It runs inside the replicated state machine (fsm), so it is pure: no clock, no I/O,
// no randomness, no map-order dependence, and evaluation is deterministic. It imports
// only the standard library. It starts no goroutines.
package rule
