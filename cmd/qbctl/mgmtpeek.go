package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/go-amqp"
)

// The Go SDK peeks only through a receiver, whose receive link a session-enabled entity
// refuses without a session (not-allowed: "It is not possible for an entity that
// requires sessions to create a non-sessionful message receiver"). Service Bus itself
// answers com.microsoft:peek-message on the entity's $management node without a
// session, over every session and without taking a session lock (the .NET SDK's
// ServiceBusReceiver.PeekMessagesAsync and Service Bus Explorer peek that way; here
// S-SES-1, "peek works as usual"). mgmtPeeker sends that request itself, over a go-amqp
// connection of its own authorized as the SDKs are (the token on $cbs), as `dlq purge`
// does for batch deletes (cmd/internal/batchdelete).

// mgmtPeeker peeks one entity through its $management node. Not safe for concurrent use.
type mgmtPeeker struct {
	conn  *amqp.Conn
	sess  *amqp.Session
	snd   *amqp.Sender   // to ENTITY/$management
	rcv   *amqp.Receiver // its answers, addressed to reply
	reply string
	n     int // requests sent, for message IDs
}

// openMgmtPeeker connects to the node of the connection string (dialNode) and opens a
// request-response pair of links on entity's $management node, authorized with a
// namespace token on $cbs.
func (g *globals) openMgmtPeeker(ctx context.Context, entity string) (*mgmtPeeker, error) {
	nc, host, token, err := g.dialNode(ctx)
	if err != nil {
		return nil, err
	}
	conn, err := amqp.NewConn(ctx, nc, &amqp.ConnOptions{SASLType: amqp.SASLTypeAnonymous(), HostName: host})
	if err != nil {
		nc.Close()
		return nil, err
	}
	p := &mgmtPeeker{conn: conn}
	if err := p.open(ctx, host, token, entity); err != nil {
		conn.Close()
		return nil, err
	}
	return p, nil
}

func (p *mgmtPeeker) open(ctx context.Context, host, token, entity string) error {
	var err error
	if p.sess, err = p.conn.NewSession(ctx, nil); err != nil {
		return err
	}
	// put-token on $cbs, as every SDK does before it attaches to an entity.
	if err := p.link(ctx, "$cbs", "qbctl-cbs"); err != nil {
		return err
	}
	st, desc, _, err := p.call(ctx, map[string]any{"operation": "put-token",
		"type": "servicebus.windows.net:sastoken", "name": "sb://" + host + "/" + entity}, token)
	if err != nil {
		return err
	}
	if st != 200 && st != 202 {
		return refusal(st, desc)
	}
	p.close(ctx)
	return p.link(ctx, entity+"/$management", "qbctl-mgmt")
}

// link attaches the sender and the answer receiver to node.
func (p *mgmtPeeker) link(ctx context.Context, node, reply string) error {
	var err error
	if p.snd, err = p.sess.NewSender(ctx, node, nil); err != nil {
		return err
	}
	p.reply = reply
	p.rcv, err = p.sess.NewReceiver(ctx, node, &amqp.ReceiverOptions{TargetAddress: reply, Credit: 1})
	return err
}

func (p *mgmtPeeker) close(ctx context.Context) {
	if p.snd != nil {
		_ = p.snd.Close(ctx)
	}
	if p.rcv != nil {
		_ = p.rcv.Close(ctx)
	}
	p.snd, p.rcv = nil, nil
}

// Close closes the links and the connection.
func (p *mgmtPeeker) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	p.close(ctx)
	return p.conn.Close()
}

// call sends one request and returns the answer's status, description and body.
func (p *mgmtPeeker) call(ctx context.Context, props map[string]any, body any) (int32, string, any, error) {
	p.n++
	id := fmt.Sprint("qbctl-", p.n)
	reply := p.reply
	msg := &amqp.Message{Properties: &amqp.MessageProperties{MessageID: id, ReplyTo: &reply},
		ApplicationProperties: props, Value: body}
	if err := p.snd.Send(ctx, msg, nil); err != nil {
		return 0, "", nil, err
	}
	resp, err := p.rcv.Receive(ctx, nil)
	if err != nil {
		return 0, "", nil, err
	}
	_ = p.rcv.AcceptMessage(ctx, resp)
	status, _ := resp.ApplicationProperties["statusCode"].(int32)
	desc, _ := resp.ApplicationProperties["statusDescription"].(string)
	return status, desc, resp.Value, nil
}

// refusal turns an error status of a management answer into the AMQP error the SDKs
// raise for it, so that human() words it like any other refusal.
func refusal(status int32, desc string) error {
	cond := amqp.ErrCondInternalError
	switch status {
	case 401:
		cond = amqp.ErrCondUnauthorizedAccess
	case 404:
		cond = amqp.ErrCondNotFound
	case 400, 403, 405:
		cond = amqp.ErrCondNotAllowed
	}
	return &amqp.Error{Condition: cond, Description: fmt.Sprintf("%s (status %d)", desc, status)}
}

// peek returns up to n messages from sequence number from (com.microsoft:peek-message);
// none at the end.
func (p *mgmtPeeker) peek(ctx context.Context, n int, from int64) ([]*peekedMessage, error) {
	st, desc, body, err := p.call(ctx, map[string]any{"operation": "com.microsoft:peek-message"},
		map[string]any{"from-sequence-number": from, "message-count": int32(n)})
	switch {
	case err != nil:
		return nil, err
	case st == 204: // no messages
		return nil, nil
	case st != 200:
		return nil, refusal(st, desc)
	}
	list, ok := field(body, "messages").([]any)
	if !ok {
		return nil, errors.New("the node's peek answer has no message list")
	}
	out := make([]*peekedMessage, 0, len(list))
	for _, item := range list {
		raw, ok := field(item, "message").([]byte)
		if !ok {
			return nil, errors.New("the node's peek answer holds an entry that is not a message")
		}
		var m amqp.Message
		if err := m.UnmarshalBinary(raw); err != nil {
			return nil, fmt.Errorf("the node's peek answer holds a message that does not decode: %w", err)
		}
		out = append(out, peekedOf(&m))
	}
	return out, nil
}

// field is m[key] of a decoded AMQP map, whichever Go map type it decoded to.
func field(m any, key string) any {
	switch m := m.(type) {
	case map[string]any:
		return m[key]
	case map[any]any:
		if v, ok := m[key]; ok {
			return v
		}
		return m[amqp.Symbol(key)]
	}
	return nil
}

// peekedMessage is what peek shows of a message, from the SDK's ReceivedMessage or from
// a message qbctl decoded itself.
type peekedMessage struct {
	SequenceNumber int64
	MessageID      string
	EnqueuedTime   time.Time
	State          azservicebus.MessageState
	DeliveryCount  uint32
	Subject        *string // nil: none (null in JSON, as before)
	SessionID      string
	Body           []byte
	// DeadLetterReason and DeadLetterDescription: of a dead-lettered message.
	DeadLetterReason, DeadLetterDescription *string
}

// peekedOf reads a peeked AMQP message as the SDK's newReceivedMessage does.
func peekedOf(m *amqp.Message) *peekedMessage {
	pm := &peekedMessage{State: azservicebus.MessageStateActive}
	if m.Header != nil {
		pm.DeliveryCount = m.Header.DeliveryCount + 1
	}
	if p := m.Properties; p != nil {
		if id, ok := p.MessageID.(string); ok {
			pm.MessageID = id
		} else if p.MessageID != nil {
			pm.MessageID = fmt.Sprint(p.MessageID)
		}
		pm.Subject = p.Subject
		if p.GroupID != nil {
			pm.SessionID = *p.GroupID
		}
	}
	ann := func(k string) any {
		if v, ok := m.Annotations[k]; ok {
			return v
		}
		return m.Annotations[amqp.Symbol(k)]
	}
	if v, ok := ann("x-opt-sequence-number").(int64); ok {
		pm.SequenceNumber = v
	}
	if v, ok := ann("x-opt-enqueued-time").(time.Time); ok {
		pm.EnqueuedTime = v
	}
	switch v := ann("x-opt-message-state").(type) {
	case int32:
		pm.State = azservicebus.MessageState(v)
	case int64:
		pm.State = azservicebus.MessageState(v)
	}
	pm.Body = bytesJoin(m.Data)
	if len(m.Data) == 0 {
		if s, ok := m.Value.(string); ok {
			pm.Body = []byte(s)
		}
	}
	return pm
}

func bytesJoin(parts [][]byte) []byte {
	if len(parts) == 1 {
		return parts[0]
	}
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// peekedOfSDK is peekedMessage of a message the SDK peeked.
func peekedOfSDK(m *azservicebus.ReceivedMessage) *peekedMessage {
	pm := &peekedMessage{MessageID: m.MessageID, EnqueuedTime: derefTime(m.EnqueuedTime), State: m.State,
		DeliveryCount: m.DeliveryCount, Subject: m.Subject, Body: m.Body,
		DeadLetterReason: m.DeadLetterReason, DeadLetterDescription: m.DeadLetterErrorDescription}
	if m.SequenceNumber != nil {
		pm.SequenceNumber = *m.SequenceNumber
	}
	if m.SessionID != nil {
		pm.SessionID = *m.SessionID
	}
	return pm
}

// requiresSessions reports whether err is a session-enabled entity refusing a receiver
// without a session (S-SES-1), the error the SDK returns from the first operation of a
// Receiver on such an entity.
func requiresSessions(err error) bool {
	cond, desc := sdkCondition(err)
	return cond == string(amqp.ErrCondNotAllowed) && strings.Contains(desc, "requires sessions")
}
