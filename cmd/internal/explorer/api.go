package explorer

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/quorumbus/quorumbus/cmd/internal/batchdelete"
	"github.com/quorumbus/quorumbus/cmd/internal/msgstate"
	"github.com/quorumbus/quorumbus/cmd/internal/redrive"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	goamqp "github.com/Azure/go-amqp"
)

// The JSON API of the page (every request is a POST with a JSON body and the SAS token
// in Authorization):
//
//	POST /$ui/api/peek                  PeekRequest    -> {"messages": [Message...]}
//	POST /$ui/api/send                  SendRequest    -> {"sent": 1, "sequenceNumber": N (scheduled only)}
//	POST /$ui/api/deadletter/resubmit   RedriveRequest -> NDJSON Progress lines
//	POST /$ui/api/deadletter/purge      RedriveRequest -> NDJSON Progress lines
//	POST /$ui/api/purge                 PurgeRequest   -> NDJSON Progress lines
//	POST /$ui/api/sessions              SessionsRequest -> {"sessions": [Session...], "total": N}
//	POST /$ui/api/scheduled/cancel      CancelRequest  -> {"cancelled": N}
//	POST /$ui/api/stats                 (no body)      -> StatsResponse
//
// Errors are {"code": HTTP status, "message": "..."}. A redrive streams one Progress
// line per message moved (at most every 100 ms) and a last one with "finished": true and,
// on failure, "error"; its status is 200 once streaming has started.

// Target names a queue, or a subscription of a topic (Subscription set).
type Target struct {
	Entity       string `json:"entity"`
	Subscription string `json:"subscription,omitempty"`
}

func (t Target) String() string {
	if t.Subscription != "" {
		return t.Entity + "/Subscriptions/" + t.Subscription
	}
	return t.Entity
}

func (t Target) check() error {
	if strings.TrimSpace(t.Entity) == "" {
		return errorf(http.StatusBadRequest, `"entity" is required: a queue or topic name`)
	}
	return nil
}

// PeekRequest asks for messages without locking them.
type PeekRequest struct {
	Target
	// DeadLetter peeks the dead-letter sub-queue.
	DeadLetter bool `json:"deadLetter,omitempty"`
	// FromSequenceNumber is the first sequence number (0: from the start).
	FromSequenceNumber int64 `json:"fromSequenceNumber,omitempty"`
	// Count is how many messages at most (1..maxPeek; 0 means 50).
	Count int `json:"count,omitempty"`
	// SessionID peeks one session of an entity that requires sessions. AMQP lets a
	// client peek such an entity only through a session it holds, so this takes the
	// session's lock for the duration of the peek, and fails with 409 while a consumer
	// holds it.
	SessionID string `json:"sessionId,omitempty"`
}

const maxPeek = 500

// Message is a peeked message as the page shows it.
type Message struct {
	SequenceNumber             int64          `json:"sequenceNumber"`
	MessageID                  string         `json:"messageId"`
	State                      string         `json:"state"` // Active, Deferred or Scheduled
	EnqueuedTime               *time.Time     `json:"enqueuedTime,omitempty"`
	ScheduledEnqueueTime       *time.Time     `json:"scheduledEnqueueTime,omitempty"`
	ExpiresAt                  *time.Time     `json:"expiresAt,omitempty"`
	DeliveryCount              uint32         `json:"deliveryCount"`
	Subject                    string         `json:"subject,omitempty"`
	ContentType                string         `json:"contentType,omitempty"`
	CorrelationID              string         `json:"correlationId,omitempty"`
	SessionID                  string         `json:"sessionId,omitempty"`
	PartitionKey               string         `json:"partitionKey,omitempty"`
	To                         string         `json:"to,omitempty"`
	ReplyTo                    string         `json:"replyTo,omitempty"`
	TimeToLive                 string         `json:"timeToLive,omitempty"`
	DeadLetterReason           string         `json:"deadLetterReason,omitempty"`
	DeadLetterErrorDescription string         `json:"deadLetterErrorDescription,omitempty"`
	DeadLetterSource           string         `json:"deadLetterSource,omitempty"`
	ApplicationProperties      map[string]any `json:"applicationProperties,omitempty"`
	// Body is the message body (base64 in JSON): the data sections joined, or an AMQP
	// value body in its text form (BodyType says which).
	Body     []byte `json:"body"`
	BodyType string `json:"bodyType"` // data, value or sequence
}

// SendRequest is a test message.
type SendRequest struct {
	Target
	Body                  string            `json:"body"`
	ContentType           string            `json:"contentType,omitempty"`
	Subject               string            `json:"subject,omitempty"`
	MessageID             string            `json:"messageId,omitempty"`
	CorrelationID         string            `json:"correlationId,omitempty"`
	SessionID             string            `json:"sessionId,omitempty"`
	ApplicationProperties map[string]string `json:"applicationProperties,omitempty"`
	// ScheduledEnqueueTime (RFC 3339) schedules the message instead of sending it now.
	ScheduledEnqueueTime string `json:"scheduledEnqueueTime,omitempty"`
}

// RedriveRequest resubmits or purges dead-lettered messages.
type RedriveRequest struct {
	Target
	// To is where resubmitted messages go: "" means the source (the queue, or the
	// subscription's topic, which fans them out again by the subscriptions' rules).
	To string `json:"to,omitempty"`
	// Limit is how many messages at most. 0 means what the dead-letter queue holds when
	// the redrive starts: messages that are dead-lettered again meanwhile (a resubmitted
	// copy that fails again) are not chased round in a loop.
	Limit int `json:"limit,omitempty"`
}

// PurgeRequest purges a queue or subscription as the SDKs' purgeMessages does: batch
// deletes (S-DEL-1..4) of the entity's messages enqueued before the purge started, then
// of its dead-letter queue's. Locked messages and messages scheduled for later stay.
type PurgeRequest struct {
	Target
}

// Progress is one line of a redrive's or a purge's NDJSON answer.
type Progress struct {
	Done int `json:"done"`
	// Total is how many messages the redrive means to move: Limit, or the dead-letter
	// count when it started; for an entity's purge, the messages the entity and its
	// dead-letter queue held when it started less the scheduled ones (locked ones among
	// them stay, so Done may end below it); 0 when unknown.
	Total int `json:"total,omitempty"`
	// DeadLettered, on the last line of an entity's purge, is how many of Done came from
	// its dead-letter queue.
	DeadLettered int    `json:"deadLettered,omitempty"`
	Finished     bool   `json:"finished,omitempty"`
	Error        string `json:"error,omitempty"`
}

func (h *Handler) api(w http.ResponseWriter, r *http.Request) {
	if err := h.apiRequest(w, r); err != nil {
		h.writeError(w, r, err)
	}
}

func (h *Handler) apiRequest(w http.ResponseWriter, r *http.Request) error {
	op := strings.TrimPrefix(r.URL.Path, apiPrefix)
	switch op {
	case "peek", "send", "deadletter/resubmit", "deadletter/purge", "purge", "sessions", "scheduled/cancel", "stats":
	default:
		return errorf(http.StatusNotFound, "unknown explorer API path %s", r.URL.Path)
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		return errorf(http.StatusMethodNotAllowed, "%s needs POST", r.URL.Path)
	}
	if err := h.cfg.Authorize(r); err != nil {
		return &httpError{code: http.StatusUnauthorized, msg: err.Error()}
	}
	switch op {
	case "stats":
		return h.stats(w, r)
	case "peek":
		var req PeekRequest
		if err := h.decode(w, r, &req); err != nil {
			return err
		}
		msgs, err := h.peek(r, req)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, map[string]any{"messages": msgs})
		return nil
	case "sessions":
		var req SessionsRequest
		if err := h.decode(w, r, &req); err != nil {
			return err
		}
		return h.sessions(w, r, req)
	case "scheduled/cancel":
		var req CancelRequest
		if err := h.decode(w, r, &req); err != nil {
			return err
		}
		return h.cancelScheduled(w, r, req)
	case "send":
		var req SendRequest
		if err := h.decode(w, r, &req); err != nil {
			return err
		}
		return h.send(w, r, req)
	case "purge":
		var req PurgeRequest
		if err := h.decode(w, r, &req); err != nil {
			return err
		}
		return h.purge(w, r, req)
	default:
		var req RedriveRequest
		if err := h.decode(w, r, &req); err != nil {
			return err
		}
		if req.Limit < 0 {
			return errorf(http.StatusBadRequest, `"limit" %d is negative`, req.Limit)
		}
		if op == "deadletter/purge" {
			return h.purgeDeadLetters(w, r, req)
		}
		return h.redrive(w, r, req)
	}
}

func (h *Handler) decode(w http.ResponseWriter, r *http.Request, v interface{ check() error }) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, h.cfg.MaxBodyBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return errorf(http.StatusRequestEntityTooLarge, "the request body is larger than %d bytes", h.cfg.MaxBodyBytes)
		}
		return errorf(http.StatusBadRequest, "the request body is not the JSON this endpoint takes: %v", err)
	}
	return v.check()
}

// client is an SDK client to the node's own AMQP listener that presents the caller's
// token, so that the broker applies the caller's rights.
func (h *Handler) client(r *http.Request) (*azservicebus.Client, error) {
	token := strings.TrimSpace(r.Header.Get("Authorization"))
	opts := &azservicebus.ClientOptions{
		RetryOptions: azservicebus.RetryOptions{MaxRetries: 1, RetryDelay: 100 * time.Millisecond},
	}
	addr := h.cfg.AMQPAddr
	if h.cfg.Dial != nil {
		// The SDK speaks AMQP over whatever connection this returns (its WebSocket
		// hook), with no TLS of its own: here, a pipe into the node's AMQP server.
		opts.NewWebSocketConn = func(ctx context.Context, _ azservicebus.NewWebSocketConnArgs) (net.Conn, error) {
			return h.cfg.Dial(ctx)
		}
		if addr == "" {
			addr = "localhost"
		}
	}
	cs := "Endpoint=sb://" + addr + ";SharedAccessSignature=" + token + ";UseDevelopmentEmulator=true"
	c, err := azservicebus.NewClientFromConnectionString(cs, opts)
	if err != nil {
		return nil, errorf(http.StatusBadRequest, "the token cannot be used for AMQP: %v", err)
	}
	return c, nil
}

func receiver(c *azservicebus.Client, t Target, opts *azservicebus.ReceiverOptions) (*azservicebus.Receiver, error) {
	if t.Subscription != "" {
		return c.NewReceiverForSubscription(t.Entity, t.Subscription, opts)
	}
	return c.NewReceiverForQueue(t.Entity, opts)
}

func (h *Handler) peek(r *http.Request, req PeekRequest) ([]Message, error) {
	switch {
	case req.Count == 0:
		req.Count = 50
	case req.Count < 0 || req.Count > maxPeek:
		return nil, errorf(http.StatusBadRequest, `"count" %d is outside 1..%d`, req.Count, maxPeek)
	}
	ctx := r.Context()
	c, err := h.client(r)
	if err != nil {
		return nil, err
	}
	defer c.Close(context.WithoutCancel(ctx))
	var rcv interface {
		PeekMessages(context.Context, int, *azservicebus.PeekMessagesOptions) ([]*azservicebus.ReceivedMessage, error)
		Close(context.Context) error
	}
	switch {
	case req.SessionID != "" && req.DeadLetter:
		return nil, errorf(http.StatusBadRequest, "a dead-letter queue has no sessions: peek it without a session id")
	case req.SessionID != "":
		var sr *azservicebus.SessionReceiver
		if req.Subscription != "" {
			sr, err = c.AcceptSessionForSubscription(ctx, req.Entity, req.Subscription, req.SessionID, nil)
		} else {
			sr, err = c.AcceptSessionForQueue(ctx, req.Entity, req.SessionID, nil)
		}
		rcv = sr
	default:
		var opts *azservicebus.ReceiverOptions
		if req.DeadLetter {
			opts = &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter}
		}
		rcv, err = receiver(c, req.Target, opts)
	}
	if err != nil {
		return nil, err
	}
	defer rcv.Close(context.WithoutCancel(ctx))
	var popts *azservicebus.PeekMessagesOptions
	if req.FromSequenceNumber > 0 {
		popts = &azservicebus.PeekMessagesOptions{FromSequenceNumber: &req.FromSequenceNumber}
	}
	out := []Message{}
	for len(out) < req.Count {
		msgs, err := rcv.PeekMessages(ctx, min(req.Count-len(out), 100), popts)
		if err != nil {
			return nil, err
		}
		if len(msgs) == 0 {
			break
		}
		for _, m := range msgs {
			out = append(out, messageOf(m))
		}
		popts = nil // the receiver continues after the last peeked sequence number
	}
	return out, nil
}

func messageOf(m *azservicebus.ReceivedMessage) Message {
	s := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	out := Message{
		MessageID: m.MessageID, State: msgstate.Name(m.State), EnqueuedTime: m.EnqueuedTime,
		ScheduledEnqueueTime: m.ScheduledEnqueueTime, ExpiresAt: m.ExpiresAt, DeliveryCount: m.DeliveryCount,
		Subject: s(m.Subject), ContentType: s(m.ContentType), CorrelationID: s(m.CorrelationID),
		SessionID: s(m.SessionID), PartitionKey: s(m.PartitionKey), To: s(m.To), ReplyTo: s(m.ReplyTo),
		DeadLetterReason: s(m.DeadLetterReason), DeadLetterErrorDescription: s(m.DeadLetterErrorDescription),
		DeadLetterSource: s(m.DeadLetterSource), Body: m.Body, BodyType: "data",
	}
	if m.SequenceNumber != nil {
		out.SequenceNumber = *m.SequenceNumber
	}
	// Without a time to live of its own a message lives as long as its entity's default;
	// the SDK then reports 0 and an expiry equal to the enqueued time, which would read
	// as "already expired".
	if m.TimeToLive != nil && *m.TimeToLive > 0 {
		out.TimeToLive = m.TimeToLive.String()
	} else {
		out.ExpiresAt = nil
	}
	if len(m.ApplicationProperties) > 0 {
		out.ApplicationProperties = make(map[string]any, len(m.ApplicationProperties))
		for k, v := range m.ApplicationProperties {
			out.ApplicationProperties[k] = jsonValue(v)
		}
	}
	if raw := m.RawAMQPMessage; raw != nil && raw.Body.Data == nil {
		switch {
		case raw.Body.Value != nil:
			out.BodyType = "value"
			if b, ok := raw.Body.Value.([]byte); ok {
				out.Body = b
			} else {
				out.Body = []byte(fmt.Sprint(raw.Body.Value))
			}
		case raw.Body.Sequence != nil:
			out.BodyType = "sequence"
			out.Body = []byte(fmt.Sprint(raw.Body.Sequence))
		}
	}
	return out
}

// jsonValue keeps an application property's JSON types (strings, numbers, booleans,
// times) and writes any other AMQP type in its text form.
func jsonValue(v any) any {
	switch x := v.(type) {
	case nil, string, bool, int8, int16, int32, int64, int, uint8, uint16, uint32, uint64, float32, float64, time.Time:
		return x
	case []byte:
		return fmt.Sprintf("%x", x)
	}
	return fmt.Sprint(v)
}

func (h *Handler) send(w http.ResponseWriter, r *http.Request, req SendRequest) error {
	if req.Subscription != "" {
		return errorf(http.StatusBadRequest, "send to the topic %q, not to one of its subscriptions", req.Entity)
	}
	opt := func(s string) *string {
		if s == "" {
			return nil
		}
		return &s
	}
	m := &azservicebus.Message{Body: []byte(req.Body), ContentType: opt(req.ContentType), Subject: opt(req.Subject),
		MessageID: opt(req.MessageID), CorrelationID: opt(req.CorrelationID), SessionID: opt(req.SessionID)}
	if len(req.ApplicationProperties) > 0 {
		m.ApplicationProperties = make(map[string]any, len(req.ApplicationProperties))
		for k, v := range req.ApplicationProperties {
			m.ApplicationProperties[k] = v
		}
	}
	var at time.Time
	if req.ScheduledEnqueueTime != "" {
		t, err := time.Parse(time.RFC3339, req.ScheduledEnqueueTime)
		if err != nil {
			return errorf(http.StatusBadRequest, `"scheduledEnqueueTime" %q is not an RFC 3339 time`, req.ScheduledEnqueueTime)
		}
		at = t
	}
	ctx := r.Context()
	c, err := h.client(r)
	if err != nil {
		return err
	}
	defer c.Close(context.WithoutCancel(ctx))
	s, err := c.NewSender(req.Entity, nil)
	if err != nil {
		return err
	}
	defer s.Close(context.WithoutCancel(ctx))
	if !at.IsZero() {
		seqs, err := s.ScheduleMessages(ctx, []*azservicebus.Message{m}, at, nil)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, map[string]any{"sent": 1, "sequenceNumber": seqs[0]})
		return nil
	}
	if err := s.SendMessage(ctx, m, nil); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"sent": 1})
	return nil
}

// redrive resubmits dead-lettered messages, streaming progress. A
// resubmitted message is sent as a copy first and only then completed, so a failure
// part-way leaves it in both places rather than in neither (at least once). It stops
// after Limit messages (by default the dead-letter count when it starts), after a
// receive round that gets nothing, or when the client goes away.
func (h *Handler) redrive(w http.ResponseWriter, r *http.Request, req RedriveRequest) error {
	ctx := r.Context()
	c, err := h.client(r)
	if err != nil {
		return err
	}
	defer c.Close(context.WithoutCancel(ctx))
	rcv, err := receiver(c, req.Target, &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	if err != nil {
		return err
	}
	defer rcv.Close(context.WithoutCancel(ctx))
	to := req.To
	if to == "" {
		to = req.Entity // the queue, or the subscription's topic
	}
	if err := h.exists(r, to); err != nil {
		return err
	}
	snd, err := c.NewSender(to, nil)
	if err != nil {
		return err
	}
	defer snd.Close(context.WithoutCancel(ctx))

	if req.Limit == 0 {
		dl, err := h.counts(r, req.Target, "DeadLetterMessageCount")
		if err != nil {
			return err
		}
		n := dl[0]
		if n == 0 {
			n = -1 // nothing to move: no round at all
		}
		req.Limit = n
	}
	total := max(req.Limit, 0)

	// The first round is received before answering, so that a missing entity or a
	// refused token is an HTTP error rather than a line of the stream.
	msgs, err := h.round(ctx, rcv, req.Limit, 0)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	flusher, _ := w.(http.Flusher)
	emit := func(p Progress) {
		_ = enc.Encode(p)
		if flusher != nil {
			flusher.Flush()
		}
	}
	done := 0
	lastEmit := time.Time{}
	for len(msgs) > 0 && err == nil {
		for _, m := range msgs {
			if err = snd.SendAMQPAnnotatedMessage(ctx, redrive.Copy(m), nil); err != nil {
				err = fmt.Errorf("resubmit sequence number %d: %w", seq(m), err)
				// The rest of the round stays dead-lettered, locked until its lock
				// expires; exists above keeps the commonest cause (a target that
				// does not exist) from getting this far.
				break
			}
			if err = rcv.CompleteMessage(ctx, m, nil); err != nil {
				err = fmt.Errorf("complete sequence number %d after resubmitting it: %w", seq(m), err)
				break
			}
			done++
			if time.Since(lastEmit) >= 100*time.Millisecond {
				emit(Progress{Done: done, Total: total})
				lastEmit = time.Now()
			}
		}
		if err == nil {
			msgs, err = h.round(ctx, rcv, req.Limit, done)
		}
	}
	p := Progress{Done: done, Total: total, Finished: true}
	if err != nil {
		p.Error = err.Error()
		h.log.Warn("explorer: dead-letter redrive stopped", "entity", req.Target.String(), "done", done, "err", err)
	}
	h.log.Info("explorer: dead-letter redrive", "entity", req.Target.String(), "to", req.To, "messages", done)
	emit(p)
	return nil
}

// purgeDeadLetters deletes dead-lettered messages with com.microsoft:batch-delete-messages
// (cmd/internal/batchdelete, the operation qbctl's dlq purge uses too), streaming
// progress as redrive does: at most Limit messages (by default the dead-letter count
// when it starts), those enqueued before it started; locked ones stay (S-DEL-3).
func (h *Handler) purgeDeadLetters(w http.ResponseWriter, r *http.Request, req RedriveRequest) error {
	before := time.Now()
	if req.Limit == 0 {
		n, err := h.counts(r, req.Target, "DeadLetterMessageCount")
		if err != nil {
			return err
		}
		req.Limit = n[0]
		if req.Limit == 0 {
			req.Limit = -1 // nothing to delete: no request at all
		}
	}
	_, err := h.batchPurge(w, r, "dead-letter purge", req.Target, []string{"/$DeadLetterQueue"}, before, req.Limit, max(req.Limit, 0), nil)
	return err
}

// purge purges a queue or subscription as the SDKs' purgeMessages does, and as qbctl's
// queue and subscription purge do: the entity's messages and then its dead-letter
// queue's, those enqueued before it started, with com.microsoft:batch-delete-messages.
// Locked messages and messages scheduled for later stay (S-DEL-3); the admin API's
// POST .../$purge is the reset that removes them too.
func (h *Handler) purge(w http.ResponseWriter, r *http.Request, req PurgeRequest) error {
	before := time.Now()
	n, err := h.counts(r, req.Target, "MessageCount", "ScheduledMessageCount")
	if err != nil {
		return err
	}
	_, err = h.batchPurge(w, r, "purge", req.Target, []string{"", "/$DeadLetterQueue"}, before, 0, max(n[0]-n[1], 0),
		func(p *Progress, per []int) { p.DeadLettered = per[1] })
	return err
}

// batchPurge deletes with com.microsoft:batch-delete-messages (cmd/internal/batchdelete)
// the messages enqueued before before of each of t's sub-queues in turn (suffixes of
// t's path: "" for the entity itself, "/$DeadLetterQueue"), at most limit in all (0: no
// limit; below 0: none, without a request), streaming NDJSON Progress lines of total
// (at most every 100 ms) and a last one that last (when not nil) may add to, given how
// many each sub-queue gave. The answer starts with the first batch, so a missing entity
// or a refused token is an HTTP error (returned), not a line of the stream; an error
// after that ends the stream in the last line's "error".
func (h *Handler) batchPurge(w http.ResponseWriter, r *http.Request, what string, t Target, parts []string,
	before time.Time, limit, total int, last func(p *Progress, per []int)) ([]int, error) {
	ctx := r.Context()
	per := make([]int, len(parts))
	done := 0
	var err error
	answered := false
	var enc *json.Encoder
	flusher, _ := w.(http.Flusher)
	emit := func(p Progress) {
		if !answered {
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.Header().Set("Cache-Control", "no-cache")
			w.WriteHeader(http.StatusOK)
			enc, answered = json.NewEncoder(w), true
		}
		_ = enc.Encode(p)
		if flusher != nil {
			flusher.Flush()
		}
	}
	if limit >= 0 {
		var bc *batchdelete.Conn
		if bc, err = h.batchConn(r); err != nil {
			return per, err
		}
		defer bc.Close()
		lastEmit := time.Time{}
		for i, part := range parts {
			want := 0
			if limit > 0 {
				if want = limit - done; want <= 0 {
					break
				}
			}
			per[i], err = bc.Purge(ctx, t.String()+part, before, want, func(n int) {
				if time.Since(lastEmit) >= 100*time.Millisecond {
					emit(Progress{Done: done + n, Total: total})
					lastEmit = time.Now()
				}
			})
			done += per[i]
			if err != nil {
				break
			}
		}
		if err != nil && !answered {
			if errors.Is(err, batchdelete.ErrRefused) {
				return per, errorf(http.StatusBadGateway, "the node refused the purge: %v", err)
			}
			return per, err
		}
	}
	p := Progress{Done: done, Total: total, Finished: true}
	if last != nil {
		last(&p, per)
	}
	if err != nil {
		p.Error = err.Error()
		h.log.Warn("explorer: "+what+" stopped", "entity", t.String(), "done", done, "err", err)
	}
	h.log.Info("explorer: "+what, "entity", t.String(), "messages", done)
	emit(p)
	return per, nil
}

// batchConn opens a batch-delete connection to the node as h.client does for the SDK:
// through Config.Dial when set, else to AMQPAddr, authorized with the caller's token.
func (h *Handler) batchConn(r *http.Request) (*batchdelete.Conn, error) {
	token := strings.TrimSpace(r.Header.Get("Authorization"))
	host := "localhost"
	var nc net.Conn
	var err error
	if h.cfg.Dial != nil {
		nc, err = h.cfg.Dial(r.Context())
	} else {
		host, _, _ = net.SplitHostPort(h.cfg.AMQPAddr)
		var d net.Dialer
		nc, err = d.DialContext(r.Context(), "tcp", h.cfg.AMQPAddr)
	}
	if err != nil {
		return nil, errorf(http.StatusBadGateway, "cannot reach the node's AMQP server: %v", err)
	}
	return batchdelete.Open(r.Context(), nc, host, token)
}

// adminGet serves GET path through the admin API (Config.Next) with the caller's token,
// and returns the status and body of its answer.
func (h *Handler) adminGet(r *http.Request, path string) (int, []byte) {
	req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, path+"?api-version=2021-05", nil)
	if err != nil {
		return http.StatusBadRequest, []byte(err.Error())
	}
	req.Header.Set("Authorization", r.Header.Get("Authorization"))
	req.Host = r.Host
	w := &recorder{header: http.Header{}, code: http.StatusOK}
	h.cfg.Next.ServeHTTP(w, req)
	return w.code, w.body.Bytes()
}

// exists fails with 404 when the admin API says entity does not exist, so that a
// redrive to a mistyped target refuses before it locks any dead letter. Any other
// answer lets the redrive go on: the first send then reports the problem.
func (h *Handler) exists(r *http.Request, entity string) error {
	if code, _ := h.adminGet(r, "/"+url.PathEscape(entity)); code == http.StatusNotFound {
		return errorf(http.StatusNotFound, "there is no queue or topic %q to resubmit to", entity)
	}
	return nil
}

// counts reads counts of a queue or subscription (the elements named, such as
// "DeadLetterMessageCount" or "MessageCount") from the admin API's description of it.
func (h *Handler) counts(r *http.Request, t Target, names ...string) ([]int, error) {
	path := "/" + url.PathEscape(t.Entity)
	if t.Subscription != "" {
		path += "/Subscriptions/" + url.PathEscape(t.Subscription)
	}
	code, body := h.adminGet(r, path)
	switch {
	case code == http.StatusNotFound:
		return nil, errorf(http.StatusNotFound, "there is no queue or subscription %q", t.String())
	case code != http.StatusOK:
		return nil, errorf(http.StatusServiceUnavailable, "the message counts of %q are unavailable (%d)", t.String(), code)
	}
	out := make([]int, len(names))
	found := make([]bool, len(names))
	left := len(names)
	dec := xml.NewDecoder(bytes.NewReader(body))
	for left > 0 {
		tok, err := dec.Token()
		if err != nil {
			missing := ""
			for i, name := range names {
				if !found[i] {
					missing = name
					break
				}
			}
			return nil, errorf(http.StatusBadGateway, "the admin API's description of %q has no %s", t.String(), missing)
		}
		se, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		for i, name := range names {
			if se.Name.Local == name && !found[i] {
				if err := dec.DecodeElement(&out[i], &se); err != nil {
					return nil, errorf(http.StatusBadGateway, "the %s of %q: %v", name, t.String(), err)
				}
				found[i], left = true, left-1
				break
			}
		}
	}
	return out, nil
}

// recorder keeps the status and body of a response.
type recorder struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (s *recorder) Header() http.Header         { return s.header }
func (s *recorder) Write(b []byte) (int, error) { return s.body.Write(b) }
func (s *recorder) WriteHeader(code int)        { s.code = code }

// round receives the next round of up to 100 messages (fewer near limit); none when
// limit is reached or nothing arrives within ReceiveRoundTimeout.
func (h *Handler) round(ctx context.Context, rcv *azservicebus.Receiver, limit, done int) ([]*azservicebus.ReceivedMessage, error) {
	want := min(100, limit-done)
	if want <= 0 {
		return nil, nil
	}
	rctx, cancel := context.WithTimeout(ctx, h.cfg.ReceiveRoundTimeout)
	defer cancel()
	msgs, err := rcv.ReceiveMessages(rctx, want, nil)
	if err != nil && errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		err = nil
	}
	return msgs, err
}

func seq(m *azservicebus.ReceivedMessage) int64 {
	if m.SequenceNumber == nil {
		return 0
	}
	return *m.SequenceNumber
}

// CancelRequest cancels scheduled messages of a queue or topic by sequence number.
type CancelRequest struct {
	Target
	SequenceNumbers []int64 `json:"sequenceNumbers"`
}

func (h *Handler) cancelScheduled(w http.ResponseWriter, r *http.Request, req CancelRequest) error {
	switch {
	case req.Subscription != "":
		return errorf(http.StatusBadRequest, "scheduled messages belong to the topic %q, not to one of its subscriptions", req.Entity)
	case len(req.SequenceNumbers) == 0:
		return errorf(http.StatusBadRequest, `"sequenceNumbers" is empty`)
	}
	ctx := r.Context()
	c, err := h.client(r)
	if err != nil {
		return err
	}
	defer c.Close(context.WithoutCancel(ctx))
	s, err := c.NewSender(req.Entity, nil)
	if err != nil {
		return err
	}
	defer s.Close(context.WithoutCancel(ctx))
	if err := s.CancelScheduledMessages(ctx, req.SequenceNumbers, nil); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"cancelled": len(req.SequenceNumbers)})
	return nil
}

// SessionsRequest asks for a page of a queue's or subscription's sessions.
type SessionsRequest struct {
	Target
	Skip int `json:"skip,omitempty"`
	// Top is how many at most (1..maxSessions; 0 means 100).
	Top int `json:"top,omitempty"`
}

const maxSessions = 1000

// Session is one session with its state (base64 in JSON; absent when none).
type Session struct {
	SessionID string `json:"sessionId"`
	State     []byte `json:"state,omitempty"`
}

func (h *Handler) sessions(w http.ResponseWriter, r *http.Request, req SessionsRequest) error {
	switch {
	case h.cfg.Sessions == nil:
		return errorf(http.StatusNotImplemented, "this node does not list sessions")
	case req.Skip < 0:
		return errorf(http.StatusBadRequest, `"skip" %d is negative`, req.Skip)
	case req.Top == 0:
		req.Top = 100
	case req.Top < 0 || req.Top > maxSessions:
		return errorf(http.StatusBadRequest, `"top" %d is outside 1..%d`, req.Top, maxSessions)
	}
	ids, err := h.cfg.Sessions.ListSessions(r.Context(), req.Target)
	if err != nil {
		return err
	}
	total := len(ids)
	ids = ids[min(req.Skip, len(ids)):]
	ids = ids[:min(req.Top, len(ids))]
	out := make([]Session, 0, len(ids))
	for _, id := range ids {
		st, err := h.cfg.Sessions.SessionState(r.Context(), req.Target, id)
		if err != nil {
			return fmt.Errorf("the state of session %q: %w", id, err)
		}
		out = append(out, Session{SessionID: id, State: st})
	}
	writeJSON(w, http.StatusOK, map[string]any{"sessions": out, "total": total})
	return nil
}

// statusOf maps an error to its HTTP status: the explorer's own, or an SDK error by
// its code (a missing entity, a refused token).
func statusOf(err error) int {
	var he *httpError
	var se *azservicebus.Error
	var ae *goamqp.Error
	switch {
	case errors.As(err, &he):
		return he.code
	case errors.Is(err, ErrNotFound):
		return http.StatusNotFound
	case errors.As(err, &ae) && ae.Condition == "com.microsoft:session-cannot-be-locked":
		return http.StatusConflict // a consumer holds the session
	case errors.As(err, &ae) && ae.Condition == goamqp.ErrCondNotAllowed:
		return http.StatusBadRequest // e.g. a non-session peek of an entity that requires sessions
	case errors.As(err, &se):
		switch se.Code {
		case azservicebus.CodeNotFound:
			return http.StatusNotFound
		case azservicebus.CodeUnauthorizedAccess:
			return http.StatusForbidden
		case azservicebus.CodeTimeout, azservicebus.CodeConnectionLost:
			return http.StatusServiceUnavailable
		}
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable
	case errors.Is(err, context.Canceled):
		return 499 // client went away; nobody reads the answer
	}
	return http.StatusBadGateway
}
