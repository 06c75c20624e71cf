package fsm

import (
	"errors"
	"io"
)

// Stats counts the messages of every target of a partition.
type Stats struct {
	Targets []TargetStats // sorted: the queue (or subscriptions by name), each main target before its DLQ
	Bytes   int64         // everything counted toward MaxSizeBytes
}

// TargetStats counts the messages of one target.
type TargetStats struct {
	Target      Target
	Active      int64 // available or locked
	Locked      int64
	Scheduled   int64
	Deferred    int64
	Bytes       int64
	Sessions    int64
	OldestSeq   int64
	NewestSeq   int64
	ActiveBytes int64
}

// FSM is the state of one entity partition. See api.go.
type FSM struct {
	cfg Config
	now int64
}

var errTODO = errors.New("fsm: not implemented yet")

// New returns an empty FSM for cfg.
func New(cfg Config) *FSM { return &FSM{cfg: cfg} }

// Apply applies e and returns one Result per command.
func (f *FSM) Apply(e *Entry) []Result {
	if e.Now > f.now {
		f.now = e.Now
	}
	res := make([]Result, len(e.Cmds))
	for i := range res {
		res[i].Err = errTODO
	}
	return res
}

// Now returns the fsm clock.
func (f *FSM) Now() int64 { return f.now }

// NextDeadline returns the earliest pending deadline.
func (f *FSM) NextDeadline() int64 { return NeverMs }

// Config returns the configuration.
func (f *FSM) Config() Config { return f.cfg }

// Peek browses messages.
func (f *FSM) Peek(t Target, fromSeq int64, max int) []*Message { return nil }

// SessionState returns a session's state.
func (f *FSM) SessionState(t Target, sessionID string) []byte { return nil }

// ListSessions lists sessions.
func (f *FSM) ListSessions(t Target) []string { return nil }

// Stats returns counts.
func (f *FSM) Stats() Stats { return Stats{} }

// Snapshot writes the state.
func (f *FSM) Snapshot(w io.Writer) error { return errTODO }

// Restore replaces the state.
func (f *FSM) Restore(r io.Reader) error { return errTODO }

// Digest is the SHA-256 of Snapshot.
func (f *FSM) Digest() [32]byte { return [32]byte{} }

// AppendEntry encodes e.
func AppendEntry(dst []byte, e *Entry) []byte { return dst }

// DecodeEntry decodes an entry.
func DecodeEntry(b []byte) (*Entry, error) { return nil, ErrBadCommand }
