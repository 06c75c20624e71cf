package meta

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckForwardLoop(t *testing.T) {
	s := New()
	q := func(name, fwd, fwdDLQ string) *CreateQueue {
		p := DefaultQueueProperties()
		p.ForwardTo, p.ForwardDeadLetteredMessagesTo = fwd, fwdDLQ
		return &CreateQueue{Name: name, Properties: p}
	}
	sub := func(topic, name, fwd string) *CreateSubscription {
		p := DefaultSubscriptionProperties()
		p.ForwardTo = fwd
		return &CreateSubscription{Topic: topic, Name: name, Properties: p}
	}
	apply(t, s, 1, q("Q3", "", ""))
	apply(t, s, 1, q("Q2", "q3", ""))
	apply(t, s, 1, q("Q1", "sb://ns.example/q2", ""))
	apply(t, s, 1, &CreateTopic{Name: "T", Properties: DefaultTopicProperties()})
	apply(t, s, 1, q("D", "", "t"))      // D's dead letters go to the topic
	apply(t, s, 1, sub("t", "ok", "Q1")) // t -> Q1 -> Q2 -> Q3: a chain, no loop

	upd := func(name, fwd, fwdDLQ string) *UpdateQueue {
		c := q(name, fwd, fwdDLQ)
		return &UpdateQueue{Name: c.Name, Properties: c.Properties}
	}
	for _, tc := range []struct {
		c     Command
		field string
		path  string // "" = accepted
	}{
		{upd("q3", "q1", ""), "ForwardTo", "Q3 -> Q1 -> Q2 -> Q3"},
		{upd("q3", "", "Q2"), "ForwardDeadLetteredMessagesTo", "Q3 -> Q2 -> Q3"},
		{upd("q3", "t", ""), "ForwardTo", "Q3 -> T -> Q1 -> Q2 -> Q3"},
		{upd("q3", "D", ""), "ForwardTo", "Q3 -> D -> T -> Q1 -> Q2 -> Q3"}, // through D's dead-letter edge
		{upd("q2", "q3", "D"), "ForwardDeadLetteredMessagesTo", "Q2 -> D -> T -> Q1 -> Q2"},
		{q("new", "q1", "d"), "", ""}, // a new entity feeding the graph: nothing reaches it
		{q("self", "SELF", ""), "ForwardTo", "self -> self"},
		{sub("t", "back", "t"), "ForwardTo", "T -> T"},
		{sub("t", "viaD", "d"), "ForwardTo", "T -> D -> T"},
		{sub("t", "other", "q3"), "", ""},
		{&UpdateSubscription{Topic: "t", Name: "ok", Properties: sub("t", "ok", "q3").Properties}, "", ""},
		{upd("q1", "", ""), "", ""},
	} {
		before := s.Digest()
		err := s.CheckForwardLoop(tc.c)
		if s.Digest() != before {
			t.Fatalf("%s: the check changed the state", tc.c.Op())
		}
		if tc.path == "" {
			if err != nil {
				t.Errorf("%s %+v: refused: %v", tc.c.Op(), tc.c, err)
			}
			continue
		}
		var ve *ValidationError
		if !errors.As(err, &ve) || !errors.Is(err, ErrInvalid) || ve.Field != tc.field {
			t.Errorf("%s %+v: got %v, want a ValidationError on %s", tc.c.Op(), tc.c, err, tc.field)
			continue
		}
		if !strings.Contains(err.Error(), "forwarding loop ("+tc.path+")") {
			t.Errorf("%s: %v, want the path %s", tc.c.Op(), err, tc.path)
		}
	}
}
