package meta

import (
	"bytes"
	"io"
	"strconv"
	"testing"

	"github.com/quorumbus/quorumbus/fsm/rule"
)

// BenchmarkApplyCreateQueue measures decoding and applying one CreateQueue entry, the
// metadata group's hot path.
func BenchmarkApplyCreateQueue(b *testing.B) {
	s := New()
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		enc, err := EncodeEntry(&Entry{Now: int64(i), Cmd: &CreateQueue{Name: "q" + strconv.Itoa(i), Properties: DefaultQueueProperties()}})
		if err != nil {
			b.Fatal(err)
		}
		e, err := DecodeEntry(enc)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Apply(e); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkSnapshot1000 snapshots a namespace of 500 queues and 500 topics with two
// subscriptions each.
func BenchmarkSnapshot1000(b *testing.B) {
	s := New()
	for i := range 500 {
		_ = s.Apply(&Entry{Cmd: &CreateQueue{Name: "q" + strconv.Itoa(i), Properties: DefaultQueueProperties()}})
		t := "t" + strconv.Itoa(i)
		_ = s.Apply(&Entry{Cmd: &CreateTopic{Name: t, Properties: DefaultTopicProperties()}})
		for _, sub := range []string{"a", "b"} {
			_ = s.Apply(&Entry{Cmd: &CreateSubscription{Topic: t, Name: sub, Properties: DefaultSubscriptionProperties(),
				Rules: []rule.Spec{{Name: "r", Filter: rule.FilterSpec{Kind: rule.FilterCorrelation, Correlation: rule.Correlation{Subject: sub}}}}}})
		}
	}
	var buf bytes.Buffer
	_ = s.Snapshot(&buf)
	b.SetBytes(int64(buf.Len()))
	b.ReportAllocs()
	for b.Loop() {
		if err := s.Snapshot(io.Discard); err != nil {
			b.Fatal(err)
		}
	}
}
