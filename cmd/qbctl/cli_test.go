package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/cmd/internal/redrive"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
)

func TestISODurationIsWhatTheAdminAPICarries(t *testing.T) {
	for d, want := range map[time.Duration]string{
		30 * time.Second:                      "PT30S",
		5 * time.Minute:                       "PT5M",
		90 * time.Minute:                      "PT1H30M",
		14 * 24 * time.Hour:                   "P14D",
		24*time.Hour + 2*time.Second:          "P1DT2S",
		1500 * time.Millisecond:               "PT1.5S",
		0:                                     "PT0S",
		10*time.Minute + 500*time.Millisecond: "PT10M0.5S",
	} {
		if got := isoDuration(d); got != want {
			t.Errorf("isoDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestParseEntity(t *testing.T) {
	e, err := parseEntity("orders")
	if err != nil || e.queue != "orders" || e.sendTarget() != "orders" {
		t.Fatalf("queue: %+v %v", e, err)
	}
	e, err = parseEntity("events/subscriptions/audit")
	if err != nil || e.topic != "events" || e.sub != "audit" || e.sendTarget() != "events" ||
		e.String() != "events/Subscriptions/audit" {
		t.Fatalf("subscription: %+v %v", e, err)
	}
	for _, bad := range []string{"", "a/b", "a/Rules/b", "a//b"} {
		if _, err := parseEntity(bad); err == nil {
			t.Errorf("parseEntity(%q) accepted", bad)
		}
	}
}

func TestTypedCorrelationValues(t *testing.T) {
	if v := typedValue("42"); v != int64(42) {
		t.Errorf("42 -> %T %v", v, v)
	}
	if v := typedValue("2.5"); v != 2.5 {
		t.Errorf("2.5 -> %T %v", v, v)
	}
	if v := typedValue("true"); v != true {
		t.Errorf("true -> %T %v", v, v)
	}
	if v := typedValue("red"); v != "red" {
		t.Errorf("red -> %T %v", v, v)
	}
}

func TestResubmitCopyDropsBrokerState(t *testing.T) {
	subject := "s"
	m := &azservicebus.ReceivedMessage{RawAMQPMessage: &azservicebus.AMQPAnnotatedMessage{
		Body:       azservicebus.AMQPAnnotatedMessageBody{Data: [][]byte{[]byte("hello")}},
		Properties: &azservicebus.AMQPAnnotatedMessageProperties{Subject: &subject},
		Header:     &azservicebus.AMQPAnnotatedMessageHeader{DeliveryCount: 10, TTL: time.Minute},
		ApplicationProperties: map[string]any{"DeadLetterReason": "MaxDeliveryCountExceeded",
			"DeadLetterErrorDescription": "x", "keep": int64(1)},
		MessageAnnotations: map[any]any{"x-opt-sequence-number": int64(7), "x-opt-partition-key": "pk",
			"x-opt-locked-until": time.Now()},
	}}
	out := redrive.Copy(m)
	if out.Header != nil {
		t.Errorf("header kept: %+v (its TTL is the effective one, its delivery count the broker's)", out.Header)
	}
	if _, ok := out.ApplicationProperties["DeadLetterReason"]; ok {
		t.Error("DeadLetterReason kept")
	}
	if out.ApplicationProperties["keep"] != int64(1) {
		t.Error("user property lost")
	}
	if len(out.MessageAnnotations) != 1 || out.MessageAnnotations["x-opt-partition-key"] != "pk" {
		t.Errorf("annotations: %v", out.MessageAnnotations)
	}
	if _, ok := m.RawAMQPMessage.ApplicationProperties["DeadLetterReason"]; !ok {
		t.Error("the received message was modified")
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		nil, {"frobnicate"}, {"queue"}, {"queue", "show"}, {"--output", "yaml", "status"},
		{"rule", "create", "t", "s", "r", "--sql", "1=1", "--true"}, {"peek"}, {"dlq", "inspect"},
	} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), args, &out, &errOut)
		if !errors.Is(err, errUsage) {
			t.Errorf("run(%q) = %v, want a usage error", args, err)
		}
	}
}

func TestMissingConnectionStringSaysWhereToGetOne(t *testing.T) {
	t.Setenv("QUORUMBUS_CONNECTION_STRING", "")
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"--data", t.TempDir(), "queue", "list"}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "--connection-string") {
		t.Fatalf("err = %v", err)
	}
}

func TestProgressBar(t *testing.T) {
	var b bytes.Buffer
	p := newProgress(&b, 1000)
	for i := 1; i <= 1000; i++ {
		p.set(i)
	}
	p.finish()
	if !strings.Contains(b.String(), "[##############################] 1000/1000\n") {
		t.Fatalf("bar ends %q", b.String()[max(0, b.Len()-60):])
	}
	if strings.Count(b.String(), "\r") > 31 {
		t.Errorf("bar redrawn %d times for 30 steps", strings.Count(b.String(), "\r"))
	}
}

// Every pointer field the admin client returns prints as its value (a table once showed
// Status as a pointer address).
func TestCellsShowValuesNotPointers(t *testing.T) {
	status := admin.EntityStatusActive
	name, n32, n64, yes := "q", int32(3), int64(4), true
	for _, c := range []struct {
		in   any
		want string
	}{{&status, "Active"}, {&name, "q"}, {&n32, "3"}, {&n64, "4"}, {&yes, "true"},
		{(*admin.EntityStatus)(nil), "-"}, {(*string)(nil), "-"}} {
		if got := cellString(c.in); got != c.want {
			t.Errorf("cellString(%T) = %q, want %q", c.in, got, c.want)
		}
	}
}
