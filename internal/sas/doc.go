// Package sas parses and checks Shared Access Signature tokens, the one
// implementation both the AMQP layer ($cbs put-token, amqp/cbs.go) and the
// admin API (cluster/admin/auth.go) use (protocol.md §3).
//
// A token is "SharedAccessSignature sr=<uri>&sig=<sig>&se=<unix>&skn=<rule>"
// with the fields in any order. sig is the base64 HMAC-SHA256 of the raw sr, a
// newline and the raw se, keyed by the rule key's UTF-8 bytes (the key is not
// base64-decoded). Audiences follow Service Bus: scheme, host and query of the
// resource URI are ignored (sb://, amqps://, amqp:// and the admin client's
// https:// all name the same paths), the URI may be URL-encoded, paths compare
// case-insensitively, and a token for a path covers every path below it on a
// segment boundary ("q1" covers "q1/$management" but not "q10").
//
// The package is pure: no clock (callers pass now), no I/O, and no goroutines.
//
// Imports: the standard library, without os or net/http. Never amqp, cluster, fsm or
// partition (test/deps_test.go): it imports nothing of the module, so amqp and
// cluster/admin may both use it.
package sas
