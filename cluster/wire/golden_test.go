package wire

import (
	"encoding/hex"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/fsm"
	"github.com/quorumbus/quorumbus/fsm/rule"
)

var update = flag.Bool("update", false, "rewrite ../testdata/wire/v2 from the current codec")

// Version 2's golden files: one per message, its bytes in hex. A release must read what
// the previous one wrote (and, within a version, write the same bytes): a change to an
// encoding fails here. A new version of the wire gets a directory of its own.
const goldenDir = "../testdata/wire/v2"

// testErrors is an ErrorCodec for tests: the message and bits travel, the error
// decodes to a *testError holding its wire form.
type testErrors struct{}

type testError struct{ w Error }

func (e *testError) Error() string { return e.w.Msg }

func (testErrors) ToWire(err error) *Error {
	if err == nil {
		return nil
	}
	var te *testError
	if errors.As(err, &te) {
		w := te.w
		return &w
	}
	return &Error{Msg: err.Error()}
}

func (testErrors) FromWire(w *Error) error { return &testError{w: *w} }

func sampleMsg(i int) *fsm.Message {
	m := &fsm.Message{Payload: []byte("payload-" + strings.Repeat("x", i)), ExpiresAt: 1_700_000_100_000,
		DeliveryCount: 2, State: fsm.MessageState(1), LockedUntil: 1_700_000_060_000, Modified: true,
		DeadLetter: &fsm.DeadLetterInfo{Reason: "r", Description: "d", Source: "q"}}
	m.MessageID, m.CorrelationID, m.SessionID, m.PartitionKey = "mid", "cid", "sid", "sid"
	m.To, m.ReplyTo, m.Subject, m.ReplyToSessionID, m.ContentType = "to", "reply", "subj", "rsid", "text/plain"
	m.TimeToLive, m.ScheduledEnqueueTime, m.SequenceNumber, m.EnqueuedTime, m.Size = 60_000, 1_700_000_000_500, 42, 1_700_000_000_000, 11
	m.App = []rule.Property{{Key: "k", Value: rule.Value{Kind: rule.KindLong, N: 7}}}
	m.LockToken = fsm.LockToken{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	return m
}

var (
	tgt   = fsm.Target{Sub: "sub", DLQ: true}
	toks  = []fsm.LockToken{{1, 2, 3}, {4, 5, 6}}
	sref  = SessionRef{Target: tgt, Session: "s1", Owner: "conn-1"}
	settl = fsm.Settle{Target: tgt, Tokens: toks, Disposition: fsm.Disposition(2), Reason: "why", Description: "what",
		SessionID: "s1", Owner: "conn-1", Properties: []rule.Property{{Key: "p", Value: rule.Value{Kind: rule.KindString, S: "v"}}}}
	werr = &testError{w: Error{Msg: "not leader", Kinds: 1<<11 | 1<<13, HasLeader: true, LeaderID: "n2",
		LeaderAddr: "127.0.0.1:5400", Unknown: true, HasInvalid: true, Field: "f", Reason: "bad"}}
)

// sampleRequests has one request of every operation, every field set.
func sampleRequests() []Request {
	return []Request{
		&Enqueue{Msgs: []*fsm.Message{sampleMsg(1), sampleMsg(2)}},
		&Schedule{Msgs: []*fsm.Message{sampleMsg(3)}},
		&Cancel{Seqs: []int64{1, -2, 1 << 50}},
		&Receive{Req: fsm.Receive{Target: tgt, Mode: fsm.ReceiveAndDelete, Max: 100, SessionID: "s1", Owner: "conn-1", Salt: 99}, Wait: 5 * time.Second},
		&ReceiveDeferred{Req: fsm.ReceiveDeferred{Target: tgt, Mode: fsm.PeekLock, SeqNos: []int64{3, 4}, SessionID: "s1", Owner: "o", Salt: 7}},
		&Settle{Req: settl},
		&RenewLock{Target: tgt, Tokens: toks},
		&AcceptSession{Req: fsm.AcceptSession{Target: tgt, SessionID: "s1", Owner: "conn-1"}, Wait: time.Second},
		&ReleaseSession{SessionRef: sref},
		&RenewSession{SessionRef: sref},
		&SetState{Req: fsm.SetSessionState{Target: tgt, SessionID: "s1", Owner: "conn-1", State: []byte("state")}},
		&GetState{SessionRef: sref},
		&ListSessions{Target: tgt},
		&Peek{Target: tgt, From: 17, Max: 32},
		&Stats{},
		&Purge{Target: tgt},
		&SyncConfig{MetaIndex: 12345},
		&LockedWithSalt{Target: tgt, Salt: 0xdeadbeef},
		&SessionsUpdatedSince{Target: tgt, From: 1_700_000_000_000},
		&Txn{Msgs: []*fsm.Message{sampleMsg(4)}, Settles: []fsm.Settle{settl}},
		&TxnPrepare{ID: "txn-1", Coordinator: 9, Deadline: 1_700_000_009_000, Msgs: []*fsm.Message{sampleMsg(5)}, Settles: []fsm.Settle{settl}},
		&TxnDecide{ID: "txn-1", Commit: true, Deadline: 1_700_000_009_000, Participants: []uint32{9, 10}},
		&TxnComplete{ID: "txn-1", Commit: true},
		&TxnForget{ID: "txn-1"},
		&DeleteMessages{Req: fsm.DeleteMessages{Target: tgt, Max: 4000, Before: 1_700_000_000_000, SessionID: "s1", From: 17}},
	}
}

func sampleStats() *fsm.Stats {
	return &fsm.Stats{Targets: []fsm.TargetStats{{Target: tgt, LastReceive: 1, Active: 2, Locked: 3, Scheduled: 4,
		Deferred: 5, Bytes: 6, Oldest: 7, Counters: fsm.Counters{Incoming: 8, Outgoing: 9, Completed: 10, Abandoned: 11,
			DeadLettered: 12, Expired: 13}}}, Bytes: 14, LastSeq: 15, LastSend: 16, Locks: 17, Sessions: 18}
}

type sample struct {
	name string
	msg  Message
}

// samples has every message: a Call of each operation, a Reply with every result field,
// and each other call and reply.
func samples() []sample {
	var out []sample
	for i, r := range sampleRequests() {
		out = append(out, sample{"call-" + strings.ToLower(r.Op().String()),
			&Call{Group: uint32(100 + i), Timeout: 1500 * time.Millisecond, ID: 1 << 40, Req: r}})
	}
	full := Reply{Err: werr, Result: Result{Seqs: []int64{1, 2}, Msgs: []*fsm.Message{sampleMsg(6)},
		TokenErrs: []error{nil, &testError{w: Error{Msg: "lock lost", Kinds: 1}}}, Until: 1_700_000_060_000,
		Untils: []int64{5, 6}, Session: "s1", State: []byte("st"), Sessions: []string{"a", "b"}, Stats: sampleStats(),
		Count: 3, Tokens: toks, Committed: true}}
	out = append(out,
		sample{"reply-full", &full},
		sample{"reply-empty", &Reply{}},
		sample{"multi", &Multi{Calls: []Call{{Group: 1, Req: &Enqueue{Msgs: []*fsm.Message{sampleMsg(7)}}}, {Group: 2, Timeout: time.Second, Req: &Stats{}}}}},
		sample{"multi-reply", &MultiReply{Replies: []Reply{{Result: Result{Seqs: []int64{8}}}, {Err: &testError{w: Error{Msg: "quota", Kinds: 1 << 4}}}}}},
		sample{"wait", &Wait{Group: 7, Receive: fsm.Receive{Target: tgt, Max: 10, SessionID: "s", Owner: "o"}, Accept: true, Timeout: 5 * time.Second}},
		sample{"meta-apply", &MetaApply{Entry: []byte{1, 2, 3}, Timeout: time.Second}},
		sample{"meta-applied", &MetaApplied{Err: &testError{w: Error{Msg: "exists", Kinds: 1 << 15}}, Index: 77}},
		sample{"group-ids", &GroupIDs{IDs: []uint32{1, 2, 3}}},
		sample{"group-status", &GroupStatus{Groups: []GroupInfo{{Group: 1, Leader: "n1", IsLeader: true, LastIndex: 10, Applied: 9,
			Servers: []Server{{ID: "n1", Voter: true}, {ID: "n2"}}}}}},
		sample{"transfer", &Transfer{Group: 4, To: "n3", Timeout: 2 * time.Second}},
		sample{"done", &Done{Err: werr}},
		sample{"digests", &Digests{ByGroup: map[uint32]string{2: "bb", 1: "aa"}}},
		sample{"meta-digest", &MetaDigest{Digest: "cafe", Applied: 99}},
		sample{"cancel", &CancelCall{ID: 1<<63 | 5}},
		sample{"cancelled", &Cancelled{OK: true}},
	)
	return out
}

// fresh returns an empty value of m's type to decode into.
func fresh(m Message) Message {
	if _, ok := m.(Empty); ok {
		return Empty{}
	}
	return reflect.New(reflect.TypeOf(m).Elem()).Interface().(Message)
}

// TestGolden: every message encodes to its golden bytes, and the golden bytes decode to
// the message.
func TestGolden(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range samples() {
		t.Run(s.name, func(t *testing.T) {
			path := filepath.Join(goldenDir, s.name+".hex")
			seen[filepath.Base(path)] = true
			got := Encode(s.msg, testErrors{})
			if *update {
				if err := os.WriteFile(path, []byte(hex.EncodeToString(got)+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			h, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (create it with -update)", err)
			}
			want, err := hex.DecodeString(strings.TrimSpace(string(h)))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(want) {
				t.Errorf("encoding changed:\n got %x\nwant %x\n(a released version must not change; a new one needs a new version)", got, want)
			}
			dec := fresh(s.msg)
			if err := Decode(want, dec, testErrors{}); err != nil {
				t.Fatalf("golden bytes do not decode: %v", err)
			}
			if !reflect.DeepEqual(dec, s.msg) {
				t.Errorf("golden bytes decode to\n%#v\nwant\n%#v", dec, s.msg)
			}
		})
	}
	files, _ := filepath.Glob(filepath.Join(goldenDir, "*.hex"))
	for _, f := range files {
		if !seen[filepath.Base(f)] {
			t.Errorf("%s has no sample: a message was dropped (a released message must stay readable)", f)
		}
	}
}

// Every operation has a golden call: adding one without a sample fails.
func TestEveryOpHasASample(t *testing.T) {
	have := map[Op]bool{}
	for _, r := range sampleRequests() {
		have[r.Op()] = true
	}
	for o := Op(1); o < opEnd; o++ {
		if NewRequest(o) == nil {
			t.Errorf("NewRequest(%v) is nil", o)
		}
		if !have[o] {
			t.Errorf("operation %v has no sample request", o)
		}
		if o.String() == "" || strings.HasPrefix(o.String(), "Op(") {
			t.Errorf("operation %d has no name", o)
		}
	}
	if NewRequest(opEnd) != nil || NewRequest(0) != nil {
		t.Error("NewRequest accepts an unknown operation")
	}
}

// Truncated, extended or corrupted input is an error, never a panic.
func TestDecodeBadInput(t *testing.T) {
	for _, s := range samples() {
		b := Encode(s.msg, testErrors{})
		for n := 0; n < len(b); n++ {
			if _, ok := s.msg.(Empty); ok {
				break
			}
			err := Decode(b[:n], fresh(s.msg), testErrors{})
			if n < len(b) && err == nil && !emptyPrefixOK(s.msg, n) {
				t.Errorf("%s: %d of %d bytes decode without error", s.name, n, len(b))
			}
			if err != nil && !errors.Is(err, ErrBadMessage) {
				t.Errorf("%s: %d bytes: error %v does not wrap ErrBadMessage", s.name, n, err)
			}
		}
		if err := Decode(append(b, 0), fresh(s.msg), testErrors{}); !errors.Is(err, ErrBadMessage) {
			t.Errorf("%s: a trailing byte decodes: %v", s.name, err)
		}
	}
	d := NewDecoder([]byte{byte(opEnd)})
	if DecodeRequest(d); !errors.Is(d.Err(), ErrBadMessage) {
		t.Errorf("unknown operation: %v", d.Err())
	}
	d = NewDecoder([]byte{0xff, 0xff, 0xff, 0xff, 0x0f}) // a result mask with unknown bits
	if DecodeResult(d, testErrors{}); !errors.Is(d.Err(), ErrBadMessage) {
		t.Errorf("unknown result fields: %v", d.Err())
	}
}

// emptyPrefixOK: a message whose only field is a zero-length body (none today).
func emptyPrefixOK(Message, int) bool { return false }

func FuzzDecode(f *testing.F) {
	for i, s := range samples() {
		f.Add(uint8(i), Encode(s.msg, testErrors{}))
	}
	all := samples()
	f.Fuzz(func(t *testing.T, which uint8, b []byte) {
		m := fresh(all[int(which)%len(all)].msg)
		if err := Decode(b, m, testErrors{}); err != nil {
			return
		}
		// What decodes re-encodes to something that decodes to the same value.
		again := fresh(m)
		if err := Decode(Encode(m, testErrors{}), again, testErrors{}); err != nil {
			t.Fatalf("re-encoding of a decoded %T does not decode: %v", m, err)
		}
	})
}

// Empty and nil collections keep their difference across the wire (a receive that
// found nothing answers an empty list).
func TestEmptyCollectionsRoundTrip(t *testing.T) {
	for _, m := range []Message{
		&Reply{Result: Result{Msgs: []*fsm.Message{}, Seqs: []int64{}, Sessions: []string{}, Untils: []int64{},
			Tokens: []fsm.LockToken{}, TokenErrs: []error{}, State: []byte{}}},
		&Reply{},
		&Call{Req: &Enqueue{Msgs: []*fsm.Message{}}},
		&Call{Req: &Txn{}},
		&Call{Req: &TxnPrepare{ID: "x"}}, // no settlements: nil (an empty list is the same to Run)
		&Digests{ByGroup: map[uint32]string{}},
		&GroupStatus{Groups: []GroupInfo{}},
		&Multi{Calls: []Call{}},
	} {
		got := fresh(m)
		if err := Decode(Encode(m, testErrors{}), got, testErrors{}); err != nil {
			t.Fatalf("%#v: %v", m, err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Errorf("round trip of %#v gave %#v", m, got)
		}
	}
}
