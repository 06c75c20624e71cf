package frames

import (
	"bytes"
	"encoding/hex"
	"errors"
	"io"
	"reflect"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/amqp/internal/encoding"
)

func u32(v uint32) *uint32 { return &v }
func u16(v uint16) *uint16 { return &v }
func u8(v uint8) *uint8    { return &v }

func allBodies() []Body {
	return []Body{
		&Open{ContainerID: "c", Hostname: "h:1", MaxFrameSize: 65536, ChannelMax: 65535, IdleTimeout: 30 * time.Second,
			Properties: encoding.Map{{Key: encoding.Symbol("product"), Value: "x"}}},
		&Begin{RemoteChannel: u16(3), NextOutgoingID: 1, IncomingWindow: 5000, OutgoingWindow: 5000, HandleMax: 100},
		&Attach{Name: "l", Handle: 1, Role: RoleReceiver, SndSettleMode: u8(2), RcvSettleMode: u8(0),
			Source: &Source{Address: "q", Filter: encoding.Map{{Key: encoding.Symbol("com.microsoft:session-filter"),
				Value: &encoding.Described{Descriptor: uint64(0x00000137000000C), Value: "s1"}}}},
			Target: &Target{Address: "t"}, InitialDeliveryCount: u32(0), MaxMessageSize: 262144,
			Properties: encoding.Map{{Key: encoding.Symbol("com.microsoft:timeout"), Value: uint32(4978)}}},
		&Attach{Name: "null-source", Handle: 2, Role: RoleSender},
		&Flow{NextIncomingID: u32(1), IncomingWindow: 5000, NextOutgoingID: 9, OutgoingWindow: 10, Handle: u32(0),
			DeliveryCount: u32(2), LinkCredit: u32(1000), Drain: true, Echo: true},
		&Transfer{Handle: 1, DeliveryID: u32(7), DeliveryTag: []byte{1, 2}, MessageFormat: u32(0x80013700),
			Settled: true, SettledSet: true, More: true, RcvSettleMode: u8(1), State: Accepted{}, Aborted: true, Payload: []byte{}},
		&Disposition{Role: RoleReceiver, First: 1, Last: u32(5), Settled: true, State: &Modified{UndeliverableHere: true,
			MessageAnnotations: encoding.Map{{Key: "k", Value: "v"}}}},
		&Disposition{Role: RoleSender, First: 1, State: &Rejected{Error: &Error{Condition: "com.microsoft:dead-letter",
			Info: encoding.Map{{Key: "DeadLetterReason", Value: "r"}}}}},
		&Disposition{Role: RoleSender, First: 1, State: Released{}},
		&Disposition{Role: RoleSender, First: 1, State: &Received{SectionNumber: 1, SectionOffset: 2}},
		// Transactions (part 4): a coordinator target, declared, transactional-state.
		&Attach{Name: "coord", Handle: 3, Role: RoleSender, Source: &Source{},
			Target: &Target{Coordinator: true, Capabilities: []encoding.Symbol{"amqp:local-transactions"}}},
		&Disposition{Role: RoleReceiver, First: 2, Settled: true, State: &Declared{TxnID: []byte{1, 2, 3}}},
		&Disposition{Role: RoleReceiver, First: 3, State: &TransactionalState{TxnID: []byte{4}, Outcome: Accepted{}}},
		&Transfer{Handle: 1, DeliveryID: u32(8), DeliveryTag: []byte{3}, State: &TransactionalState{TxnID: []byte{4}}, Payload: []byte{}},
		&Detach{Handle: 1, Closed: true, Error: &Error{Condition: "amqp:not-found", Description: "d"}},
		&End{}, &End{Error: &Error{Condition: "amqp:internal-error"}},
		&Close{Error: &Error{Condition: "amqp:connection:framing-error", Description: "x"}},
		&SASLMechanisms{Mechanisms: []encoding.Symbol{"MSSBCBS", "ANONYMOUS", "PLAIN"}},
		&SASLInit{Mechanism: "PLAIN", InitialResponse: []byte("\x00u\x00p"), Hostname: "h"},
		&SASLChallenge{Challenge: []byte{1}}, &SASLResponse{Response: []byte{2}},
		&SASLOutcome{Code: SASLOK},
	}
}

// TestRoundTrip encodes every performative and decodes it back unchanged.
func TestRoundTrip(t *testing.T) {
	for _, b := range allBodies() {
		typ := TypeAMQP
		if _, ok := b.(interface{ sasl() }); ok {
			typ = TypeSASL
		}
		frame := AppendFrame(nil, typ, 3, b, nil)
		r := NewReader(bytes.NewReader(frame), 1<<20)
		f, err := r.ReadFrame()
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if f.Channel != 3 {
			t.Fatalf("channel %d", f.Channel)
		}
		got, err := Parse(f.Body)
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if tr, ok := got.(*Transfer); ok && tr.Payload == nil {
			tr.Payload = []byte{}
		}
		if !reflect.DeepEqual(got, b) {
			t.Fatalf("round trip:\n got %#v\nwant %#v", got, b)
		}
	}
}

// TestGoldenFrames pins the exact bytes of a heartbeat, a flow and a close.
func TestGoldenFrames(t *testing.T) {
	cases := []struct {
		b    []byte
		want string
	}{
		{AppendFrame(nil, TypeAMQP, 0, nil, nil), "0000000802000000"},
		{AppendFrame(nil, TypeAMQP, 1, &Close{}, nil), "0000000c020000010053184" + "5"},
		{AppendFrame(nil, TypeAMQP, 0, &Flow{IncomingWindow: 1, NextOutgoingID: 2, OutgoingWindow: 3}, nil),
			"00000015020000000053" + "13c008044052015202" + "5203"},
	}
	for _, c := range cases {
		if got := hex.EncodeToString(c.b); got != c.want {
			t.Errorf("got %s want %s", got, c.want)
		}
	}
}

func TestReaderLimits(t *testing.T) {
	big := AppendFrame(nil, TypeAMQP, 0, &Transfer{Handle: 0}, make([]byte, 1000))
	_, err := NewReader(bytes.NewReader(big), 512).ReadFrame()
	if !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("want ErrFrameTooLarge, got %v", err)
	}
	bad := []byte{0, 0, 0, 8, 1, 0, 0, 0} // doff 1 < 2
	if _, err := NewReader(bytes.NewReader(bad), 512).ReadFrame(); !errors.Is(err, ErrMalformed) {
		t.Fatalf("want ErrMalformed, got %v", err)
	}
	trunc := AppendFrame(nil, TypeAMQP, 0, &Close{}, nil)
	if _, err := NewReader(bytes.NewReader(trunc[:10]), 512).ReadFrame(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("want unexpected EOF, got %v", err)
	}
	if _, err := Parse([]byte{0x00, 0x53, 0x99, 0x45}); !errors.Is(err, ErrUnknown) {
		t.Fatalf("unknown performative: %v", err)
	}
	if _, err := Parse([]byte{0x00, 0x53, 0x12, 0x45}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("attach without mandatory fields: %v", err)
	}
}
