// Package binenc is the field encoding the project's hand-written binary codecs share:
// the fsm's commands and snapshots (fsm/codec.go, fsm/snapshot.go) and the node-to-node
// protocol (cluster/wire). Unsigned integers are uvarints, signed ones zig-zag varints
// (encoding/binary), strings and byte slices a uvarint length then the bytes, booleans
// one byte (0 or 1), and fixed-width integers big-endian.
//
// A Decoder consumes its input field by field. The first error sticks and wraps the
// sentinel its caller gave (fsm.ErrBadCommand, wire.ErrBadMessage), so each codec keeps
// its own error class; later reads return zero values, so callers check Err once. It
// never panics on any input and never allocates more than the input can hold: a count
// is refused when the rest of the input cannot hold that many elements.
//
// These bytes are what replicas apply and what nodes exchange (style P3): a change here
// changes the golden files under fsm/testdata and cluster/wire/testdata.
//
// Imports: the standard library only (test/deps_test.go), so that fsm, which is pure,
// may use it. No goroutines, no state beyond a Decoder's.
package binenc
