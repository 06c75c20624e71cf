package fsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"github.com/quorumbus/quorumbus/fsm/rule"
)

// seedEntries are entries covering every command; they seed FuzzDecodeEntry and the
// corpus under testdata/fuzz (regenerate with -update-corpus).
func seedEntries() []*Entry {
	tok := LockToken{0, 0, 0, 7, 1, 2, 3, 4, 0, 0, 0, 0, 0, 0, 0, 1}
	props := []rule.Property{{Key: "k", Value: rule.Value{Kind: rule.KindString, S: "v"}},
		{Key: "n", Value: rule.Value{Kind: rule.KindLong, N: 1<<64 - 1}}}
	full := &Message{Properties: rule.Properties{MessageID: "m", CorrelationID: "c", To: "t", ReplyTo: "r",
		Subject: "s", SessionID: "sess", ReplyToSessionID: "rs", ContentType: "ct", PartitionKey: "pk",
		TimeToLive: 1000, ScheduledEnqueueTime: t0 + 5, SequenceNumber: 3, EnqueuedTime: t0, Size: 10, App: props},
		Payload: []byte("payload"), ExpiresAt: NeverMs, DeliveryCount: 2, State: StateDeferred, LockToken: tok,
		LockedUntil: t0 + 9, DeadLetter: &DeadLetterInfo{Reason: "r", Description: "d", Source: "s"}, Modified: true}
	tc := topicCfg("a", "b")
	tc.Subscriptions[1].Rules = append(tc.Subscriptions[1].Rules, rule.Spec{Name: "sql",
		Filter: rule.FilterSpec{Kind: rule.FilterSQL, SQL: "color = 'red'", Parameters: props},
		Action: rule.ActionSpec{SQL: "SET x = 1", Parameters: props}},
		rule.Spec{Name: "corr", Filter: rule.FilterSpec{Kind: rule.FilterCorrelation,
			Correlation: rule.Correlation{CorrelationID: "c", Subject: "s", Properties: props}}})
	return []*Entry{
		{Now: t0, Cmds: []Command{&Enqueue{Messages: []*Message{msgOf("a"), full}}}},
		{Now: t0 + 1, Cmds: []Command{&Receive{Target: Target{Sub: "x", DLQ: true}, Mode: ReceiveAndDelete, Max: 5,
			SessionID: "s", Owner: "o", Salt: 9}, &ReceiveDeferred{Target: q, SeqNos: []int64{1, 2}, Salt: 3}}},
		{Now: t0 + 2, Cmds: []Command{&Settle{Target: q, Tokens: []LockToken{tok, tok}, Disposition: DeadLetter,
			Properties: props, Reason: "why", Description: "because", SessionID: "s", Owner: "o"},
			&RenewLock{Target: q, Tokens: []LockToken{tok}}}},
		{Now: t0 + 3, Cmds: []Command{&AcceptSession{Target: q, SessionID: "s", Owner: "o"},
			&ReleaseSession{Target: q, SessionID: "s", Owner: "o"}, &RenewSession{Target: q, SessionID: "s", Owner: "o"},
			&SetSessionState{Target: q, SessionID: "s", State: []byte{1, 2}}}},
		{Now: t0 + 4, Cmds: []Command{&Schedule{Messages: []*Message{full}}, &CancelScheduled{SeqNos: []int64{4}},
			&Tick{}, &Purge{Target: dlq}, &Touch{Target: q}}},
		{Now: t0 + 5, Cmds: []Command{&UpdateEntity{Config: tc}}},
		{Now: t0 + 6, Cmds: []Command{&Txn{Cmds: []Command{&Enqueue{Messages: []*Message{msgOf("t")}},
			&Settle{Target: q, Tokens: []LockToken{tok}, Disposition: Complete}, &Schedule{Messages: []*Message{full}}}}, &Txn{}}},
		{Now: -1},
		{Now: t0 + 7, Cmds: []Command{&TxnPrepare{ID: "p", Coordinator: 3, Deadline: t0 + 60_000, Cmds: []Command{
			&Enqueue{Messages: []*Message{msgOf("u")}}, &Settle{Target: q, Tokens: []LockToken{tok}, Disposition: Abandon}}},
			&TxnDecide{ID: "p", Commit: true, Deadline: t0 + 60_000, Participants: []uint32{3, 8}},
			&TxnCommit{ID: "p"}, &TxnAbort{ID: "q"}, &TxnForget{ID: "p"}}},
		{Now: t0 + 8, Cmds: []Command{&BodyChunk{Upload: "u", Index: 1, Deadline: t0 + 120_000, Data: []byte("lo")},
			&BodyChunk{Upload: "u", Index: 0, Deadline: t0 + 120_000, Data: []byte("hel")},
			&EnqueueUploaded{Schedule: true, Messages: []*Message{full, msgOf("i")},
				Bodies: []UploadRef{{Upload: "u", Chunks: 2}, {}}}}},
		{Now: t0 + 9, Cmds: []Command{&DeleteMessages{Target: dlq, Max: 4000, Before: t0 + 9, SessionID: "s", From: 7},
			&DeleteMessages{Target: q, Max: 1, Before: NeverMs}}},
	}
}

func FuzzDecodeEntry(f *testing.F) {
	for _, e := range seedEntries() {
		f.Add(AppendEntry(nil, e))
	}
	f.Add([]byte{})
	f.Add([]byte{entryVersion, 0, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := DecodeEntry(b)
		// DecodeEntryPacked (what a partition applies) decodes exactly the same entries.
		var s Slab
		p, perr := DecodeEntryPacked(b, &s)
		if (err == nil) != (perr == nil) || (err == nil && !bytes.Equal(AppendEntry(nil, e), AppendEntry(nil, p))) {
			t.Fatalf("DecodeEntry: %v; DecodeEntryPacked: %v, or a different entry", err, perr)
		}
		if err != nil {
			if !errors.Is(err, ErrBadCommand) {
				t.Fatalf("error %v does not wrap ErrBadCommand", err)
			}
			return
		}
		// What decodes re-encodes canonically (varints may be overlong in b) to bytes that
		// decode to the same entry, and it applies without panicking.
		again := AppendEntry(nil, e)
		e2, err := DecodeEntry(again)
		if err != nil {
			t.Fatalf("re-encoding does not decode: %v", err)
		}
		if third := AppendEntry(nil, e2); !bytes.Equal(third, again) {
			t.Fatalf("re-encoding is not stable:\n%x\n%x", again, third)
		}
		for _, cfg := range []Config{sessCfg(), topicCfg("a"), queueCfg()} {
			fs := busyFSM(cfg)
			fs.Apply(e)
			fs.Apply(&Entry{Now: fs.Now() + 1_000_000, Cmds: []Command{&Tick{}}})
		}
	})
}

// busyFSM has messages in every state: locked, session-locked, deferred, scheduled,
// dead-lettered, with session state and duplicate history.
func busyFSM(cfg Config) *FSM {
	cfg.RequiresDuplicateDetection = true
	f := New(cfg)
	t := Target{}
	if cfg.Kind == KindTopic {
		t.Sub = cfg.Subscriptions[0].Name
	}
	f.Apply(&Entry{Now: t0, Cmds: []Command{&Enqueue{Messages: []*Message{
		msgOf("a", withSession("s1"), withID("m")), msgOf("b", withSession("s2"), withSched(t0+100)),
		msgOf("c", withSession("s1"), withTTL(10)), msgOf("d", withSession("s3"))}}}})
	r := f.Apply(&Entry{Now: t0 + 1, Cmds: []Command{&AcceptSession{Target: t, SessionID: "s1", Owner: "o"},
		&Receive{Target: t, Max: 2, Salt: 1}, &Receive{Target: t, Max: 2, Salt: 2, SessionID: "s1", Owner: "o"},
		&SetSessionState{Target: t, SessionID: "s2", State: []byte("x")}}})
	for _, res := range r[1:3] {
		for i, m := range res.Messages {
			d := []Disposition{Defer, DeadLetter}[i%2]
			f.Apply(&Entry{Now: t0 + 2, Cmds: []Command{&Settle{Target: t, Tokens: []LockToken{m.LockToken}, Disposition: d}}})
		}
	}
	f.Apply(&Entry{Now: t0 + 3, Cmds: []Command{&Receive{Target: t, Max: 1, Salt: 3, SessionID: "s1", Owner: "o"},
		&Receive{Target: Target{Sub: t.Sub, DLQ: true}, Max: 1, Salt: 4}}})
	return f
}

func seedSnapshots(t testing.TB) [][]byte {
	var out [][]byte
	for _, cfg := range []Config{queueCfg(), sessCfg(), topicCfg("a", "b")} {
		f := New(cfg)
		f.Apply(&Entry{Now: t0, Cmds: []Command{&Enqueue{Messages: []*Message{
			msgOf("a", withSession("s1"), withID("i")), msgOf("b", withSession("s2"), withSched(t0+100), withTTL(50)),
			msgOf("c", withSession("s1"), withProp("k", rule.Value{Kind: rule.KindDouble, N: 42}))}}}})
		f.Apply(&Entry{Now: t0 + 1, Cmds: []Command{&AcceptSession{Target: q, SessionID: "s1", Owner: "o"},
			&Receive{Target: q, Max: 1, Salt: 1}, &Receive{Target: q, Max: 1, Salt: 2, SessionID: "s1", Owner: "o"},
			&SetSessionState{Target: q, SessionID: "s2", State: []byte("x")}}})
		var buf bytes.Buffer
		if err := f.Snapshot(&buf); err != nil {
			t.Fatal(err)
		}
		out = append(out, buf.Bytes())
	}
	// Version 3: a prepared transaction holding a message and a send, and a decision.
	f := New(queueCfg())
	f.Apply(&Entry{Now: t0, Cmds: []Command{&Enqueue{Messages: []*Message{msgOf("a"), msgOf("b")}}}})
	res := f.Apply(&Entry{Now: t0 + 1, Cmds: []Command{&Receive{Target: q, Max: 1, Salt: 1}}})
	f.Apply(&Entry{Now: t0 + 2, Cmds: []Command{
		&TxnPrepare{ID: "t1", Coordinator: 4, Deadline: t0 + 30_000, Cmds: []Command{
			&Enqueue{Messages: []*Message{msgOf("c", withID("m"))}},
			&Settle{Target: q, Tokens: []LockToken{res[0].Messages[0].LockToken}, Disposition: Complete}}},
		&TxnDecide{ID: "t0", Commit: true, Deadline: t0 + 30_000, Participants: []uint32{4, 9}}}})
	var buf bytes.Buffer
	if err := f.Snapshot(&buf); err != nil {
		t.Fatal(err)
	}
	out = append(out, bytes.Clone(buf.Bytes()))
	// Version 4: pending chunked bodies, one with a hole, beside the transaction above
	// (a version 3 record that is not empty), and alone (an empty one).
	for _, withTxn := range []bool{true, false} {
		g := f
		if !withTxn {
			g = New(queueCfg())
		}
		g.Apply(&Entry{Now: t0 + 3, Cmds: []Command{
			&BodyChunk{Upload: "u1", Index: 0, Deadline: t0 + 120_000, Data: []byte("first")},
			&BodyChunk{Upload: "u2", Index: 2, Deadline: t0 + 60_000, Data: []byte("third")}}})
		buf.Reset()
		if err := g.Snapshot(&buf); err != nil {
			t.Fatal(err)
		}
		out = append(out, bytes.Clone(buf.Bytes()))
	}
	return out
}

func FuzzRestore(f *testing.F) {
	for _, s := range seedSnapshots(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fs := New(queueCfg())
		before := fs.Digest()
		if err := fs.Restore(bytes.NewReader(b)); err != nil {
			if !errors.Is(err, ErrCorruptSnapshot) {
				t.Fatalf("error %v does not wrap ErrCorruptSnapshot", err)
			}
			if fs.Digest() != before {
				t.Fatal("a failed restore changed the state")
			}
			return
		}
		// A snapshot that restores writes itself back identically (an older version
		// is rewritten in the current one) and keeps working.
		var again bytes.Buffer
		if err := fs.Snapshot(&again); err != nil {
			t.Fatal(err)
		}
		if b[4] >= snapVersionNoTxn && !bytes.Equal(again.Bytes(), b) {
			t.Fatal("restored state snapshots differently")
		}
		fs.Apply(&Entry{Now: fs.Now() + 1_000_000, Cmds: []Command{&Tick{},
			&Receive{Target: q, Max: 10}, &AcceptSession{Target: q, Owner: "z"}}})
	})
}

// TestRestoreRejectsCorruption flips every byte of a snapshot in turn.
func TestRestoreRejectsCorruption(t *testing.T) {
	s := seedSnapshots(t)[1]
	for i := range s {
		b := bytes.Clone(s)
		b[i] ^= 0x41
		if err := New(queueCfg()).Restore(bytes.NewReader(b)); err == nil {
			t.Fatalf("corruption at byte %d not detected", i)
		}
	}
	for _, n := range []int{0, 3, len(s) / 2, len(s) - 1} {
		if err := New(queueCfg()).Restore(bytes.NewReader(s[:n])); err == nil {
			t.Fatalf("truncation to %d bytes not detected", n)
		}
	}
}

// TestDecodeEntryTruncated checks every prefix of every seed entry.
func TestDecodeEntryTruncated(t *testing.T) {
	for _, e := range seedEntries() {
		b := AppendEntry(nil, e)
		for n := 0; n < len(b); n++ {
			if _, err := DecodeEntry(b[:n]); !errors.Is(err, ErrBadCommand) {
				t.Fatalf("prefix %d of %d: %v", n, len(b), err)
			}
		}
		if _, err := DecodeEntry(append(bytes.Clone(b), 0)); err == nil {
			t.Fatal("trailing byte accepted")
		}
	}
}

// TestSeedCorpusCommitted keeps testdata/fuzz in step with the seeds; run with
// QB_UPDATE_CORPUS=1 to rewrite it.
func TestSeedCorpusCommitted(t *testing.T) {
	write := os.Getenv("QB_UPDATE_CORPUS") != ""
	var entries, snaps [][]byte
	for _, e := range seedEntries() {
		entries = append(entries, AppendEntry(nil, e))
	}
	snaps = seedSnapshots(t)
	for name, seeds := range map[string][][]byte{"FuzzDecodeEntry": entries, "FuzzRestore": snaps} {
		dir := filepath.Join("testdata", "fuzz", name)
		for i, s := range seeds {
			path := filepath.Join(dir, "seed"+string(rune('a'+i)))
			content := []byte("go test fuzz v1\n[]byte(" + quoteBytes(s) + ")\n")
			if write {
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, content, 0o644); err != nil {
					t.Fatal(err)
				}
				continue
			}
			got, err := os.ReadFile(path)
			if err != nil || !bytes.Equal(got, content) {
				t.Errorf("%s is missing or stale (QB_UPDATE_CORPUS=1 go test -run SeedCorpus ./fsm/): %v", path, err)
			}
		}
	}
}

func quoteBytes(b []byte) string {
	const hex = "0123456789abcdef"
	out := []byte{'"'}
	for _, c := range b {
		out = append(out, '\\', 'x', hex[c>>4], hex[c&15])
	}
	return string(append(out, '"'))
}

// TestDecodeEntryAllocationBound: decoding allocates at most a constant factor of the
// input (decoded structs are larger than their encodings: a rule spec is 256 bytes in
// memory and 15 on the wire), whatever counts the input claims.
func TestDecodeEntryAllocationBound(t *testing.T) {
	const n = 10_000
	specs := make([]rule.Spec, n)
	props := make([]rule.Property, n)
	msgs := make([]*Message, n)
	for i := range msgs {
		msgs[i] = &Message{}
	}
	cfg := topicCfg("s")
	cfg.Subscriptions[0].Rules = specs
	for name, e := range map[string]*Entry{
		"specs":    {Cmds: []Command{&UpdateEntity{Config: cfg}}},
		"props":    {Cmds: []Command{&Settle{Target: q, Disposition: Abandon, Properties: props}}},
		"messages": {Cmds: []Command{&Enqueue{Messages: msgs}}},
		"seqs":     {Cmds: []Command{&CancelScheduled{SeqNos: make([]int64, n)}}},
		"ticks":    {Cmds: slices.Repeat([]Command{&Tick{}}, n)},
	} {
		b := AppendEntry(nil, e)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		if _, err := DecodeEntry(b); err != nil {
			t.Fatal(err)
		}
		runtime.ReadMemStats(&after)
		ratio := float64(after.TotalAlloc-before.TotalAlloc) / float64(len(b))
		t.Logf("%s: %d input bytes, %.1f bytes allocated per input byte", name, len(b), ratio)
		if ratio > 24 {
			t.Errorf("%s: %.1f bytes allocated per input byte", name, ratio)
		}
		// A lying count costs nothing: the same prefix with the count inflated.
		if _, err := DecodeEntry(append([]byte{entryVersion, 0}, 0xff, 0xff, 0xff, 0xff, 0x0f)); err == nil {
			t.Fatal("inflated count accepted")
		}
	}
}

// FuzzRestoreStructure fuzzes the snapshot decoder behind the checksum: the input is a
// snapshot without its trailer, and the fuzzer's mutation gets a valid CRC-32C, so the
// record structure and the cross-checks are what is exercised.
func FuzzRestoreStructure(f *testing.F) {
	for _, s := range seedSnapshots(f) {
		f.Add(s[:len(s)-4])
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		b := binary.BigEndian.AppendUint32(bytes.Clone(body), crc32.Checksum(body, castagnoli))
		fs := New(queueCfg())
		if err := fs.Restore(bytes.NewReader(b)); err != nil {
			if !errors.Is(err, ErrCorruptSnapshot) {
				t.Fatalf("error %v does not wrap ErrCorruptSnapshot", err)
			}
			return
		}
		// What restores must keep working and snapshot to something that restores alike.
		fs.Apply(&Entry{Now: fs.Now() + 1_000_000, Cmds: []Command{&Tick{},
			&Receive{Target: q, Max: 10}, &AcceptSession{Target: q, Owner: "z"}}})
		var again bytes.Buffer
		if err := fs.Snapshot(&again); err != nil {
			t.Fatal(err)
		}
		g := New(queueCfg())
		if err := g.Restore(&again); err != nil {
			t.Fatalf("a restored state's snapshot does not restore: %v", err)
		}
		if g.Digest() != fs.Digest() {
			t.Fatal("digest changed through snapshot and restore")
		}
	})
}

// TestFreezeIsPointInTime: a frozen copy writes the bytes Snapshot wrote at the time of
// Freeze, however the FSM changes afterwards.
func TestFreezeIsPointInTime(t *testing.T) {
	x := newTF(t, sessCfg())
	x.send(msgOf("a", withSession("s"), withProp("k", rule.Value{Kind: rule.KindInt, N: 1})), msgOf("b", withSession("s")))
	x.accept("s", "o")
	ms := x.recvSess(q, "s", "o", 1)
	x.one(&SetSessionState{Target: q, SessionID: "s", State: []byte("one")})
	var want bytes.Buffer
	if err := x.f.Snapshot(&want); err != nil {
		t.Fatal(err)
	}
	z := x.f.Freeze()
	x.one(&Settle{Target: q, Tokens: []LockToken{ms[0].LockToken}, Disposition: Abandon,
		Properties: []rule.Property{{Key: "k", Value: rule.Value{Kind: rule.KindInt, N: 2}}}})
	x.one(&SetSessionState{Target: q, SessionID: "s", State: []byte("two")})
	x.send(msgOf("c", withSession("t")))
	x.advance(120_000)
	x.tick()
	var got bytes.Buffer
	n, err := z.WriteTo(&got)
	if err != nil || n != int64(got.Len()) {
		t.Fatalf("WriteTo: %d, %v", n, err)
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatal("the frozen copy changed with the FSM")
	}
}
