package amqp

import (
	"context"
	"fmt"
	"slices"

	"github.com/quorumbus/quorumbus/amqp/internal/frames"
)

// ---- dispositions from client receivers ----

func (s *session) handleDisposition(d *frames.Disposition) {
	if d.Role != frames.RoleReceiver {
		return // the client settling its own deliveries to us: nothing to do
	}
	c := s.c
	last := d.First
	if d.Last != nil {
		last = *d.Last
	}
	ts, _ := d.State.(*frames.TransactionalState)
	state := d.State
	if ts != nil {
		state = ts.Outcome
		if state == nil { // no outcome yet: nothing to do
			return
		}
	}
	settlement, ok := settlementFor(state)
	if !ok && d.State != nil {
		return // a non-terminal state (received): nothing to do yet
	}
	span := last - d.First // wraps like delivery numbers do
	type item struct {
		id uint32
		od *outDelivery
	}
	var items []item
	if int64(span) < int64(len(s.unsettled)) {
		for i := uint32(0); ; i++ {
			id := d.First + i
			if od := s.unsettled[id]; od != nil {
				items = append(items, item{id, od})
				s.removeUnsettled(id, od)
			}
			if i == span {
				break
			}
		}
	} else {
		for id, od := range s.unsettled {
			if id-d.First <= span {
				items = append(items, item{id, od})
				s.removeUnsettled(id, od)
			}
		}
	}
	if len(items) == 0 {
		if ts != nil { // the transaction cannot include this settlement: it must not commit
			if tx := c.txns[string(ts.TxnID)]; tx != nil && tx.failed == nil {
				tx.failed = s.errorFor(nil, condLockLost, "A settlement in the transaction named no unsettled delivery.")
			}
		}
		if !d.Settled {
			e := s.errorFor(nil, condLockLost, "The lock supplied is invalid. Either the lock expired, or the message has already been removed from the queue.")
			s.c.refused("amqp: rejecting a settlement", e)
			s.c.send(s.localChannel, &frames.Disposition{Role: frames.RoleSender, First: d.First, Last: d.Last, Settled: true,
				State: &frames.Rejected{Error: e}}, nil)
		}
		return
	}
	if !ok { // settled without an outcome: release it
		settlement = Settlement{Disposition: Release}
	}
	batch := make([]Settlement, len(items))
	var local []error // per item; non-nil entries are answered without the Backend
	for i, it := range items {
		batch[i] = settlement
		batch[i].Address, batch[i].SessionID, batch[i].LockToken = it.od.addr, it.od.sessionID, it.od.token
		if it.od.sessionID != "" && !c.sessionLockHeld(it.od.l) {
			if local == nil {
				local = make([]error, len(items))
			}
			local[i] = ErrSessionLockLost
		}
		if ts != nil && it.od.l.owner != "" && (local == nil || local[i] == nil) {
			// A transaction commits under this connection's identity, which does not
			// hold the session of a link resumed from another connection (resume.go).
			if local == nil {
				local = make([]error, len(items))
			}
			local[i] = fmt.Errorf("%w: a session receiver resumed from another connection settles outside transactions", ErrSessionLockLost)
		}
	}
	if local != nil { // keep only the settlements the Backend should see
		kept := batch[:0:0]
		for i := range batch {
			if local[i] == nil {
				kept = append(kept, batch[i])
			}
		}
		batch = kept
	}
	// The link receives again only once these are applied: a session's messages
	// come in order (S-SES-3), and a message released or abandoned on any link comes
	// first on its next receive, before the ones behind it (S-RCV-2).
	var hold []*link
	requeue := settlement.Disposition == Release || settlement.Disposition == Abandon
	if ts == nil {
		for i, it := range items {
			l := it.od.l
			if (it.od.sessionID == "" && !requeue) || (local != nil && local[i] != nil) || slices.Contains(hold, l) {
				continue
			}
			hold = append(hold, l)
			l.settling++
			if requeue {
				l.requeued++
			}
		}
	}
	for i, it := range items { // room freed: resume receiving
		if i == 0 || it.od.l != items[i-1].od.l {
			s.pump(it.od.l)
		}
	}
	if ts != nil {
		s.txnSettle(ts, batch, local, d)
		return
	}
	job := settleJob{batch: batch, local: local, hold: hold}
	for _, it := range items { // a resumed session link settles for its lock's holder (resume.go)
		if it.od.l.owner == "" {
			continue
		}
		job.owners = make([]string, 0, len(batch))
		for i, it := range items {
			if local == nil || local[i] == nil {
				job.owners = append(job.owners, it.od.l.owner)
			}
		}
		break
	}
	if !d.Settled {
		job.reply = func(errs []error) {
			allOK := len(items) == int(span)+1
			for _, err := range errs {
				allOK = allOK && err == nil
			}
			if allOK {
				s.c.send(s.localChannel, &frames.Disposition{Role: frames.RoleSender, First: d.First, Last: d.Last, Settled: true, State: frames.Accepted{}}, nil)
				return
			}
			// A failed settlement on a session link detaches that link instead of
			// being rejected (session-lock-lost, as Service Bus detaches a session
			// link whose lock expired). A settled rejection would end the delivery at
			// the client: go-amqp records it as settled, and the SDK, which retries
			// lock lost on a session receiver (with a new link or connection), then
			// re-sends nothing and reports the complete as done. Detached, the
			// delivery stays unsettled, and the SDK's retry goes through $management,
			// whose 410 it reports.
			var lost []*link // in order of first failure
			var lostErr []error
			for i, it := range items {
				var st frames.DeliveryState = frames.Accepted{}
				if errs[i] != nil {
					if it.od.sessionID != "" {
						// No answer: the link is detached below, which leaves the
						// delivery unsettled at the client.
						if !slices.Contains(lost, it.od.l) {
							lost = append(lost, it.od.l)
							lostErr = append(lostErr, errs[i])
						}
						continue
					}
					e := amqpError(errs[i], s.tracker(it.od.l), c.now())
					c.refused("amqp: rejecting a settlement", e, "link", it.od.l.name)
					st = &frames.Rejected{Error: e}
				}
				s.c.send(s.localChannel, &frames.Disposition{Role: frames.RoleSender, First: it.id, Settled: true, State: st}, nil)
			}
			for i, l := range lost {
				s.detachLink(l, amqpError(lostErr[i], s.tracker(l), c.now()))
			}
		}
	}
	c.settleQueue = append(c.settleQueue, job)
}

// settleJob is one disposition's settlements; reply (nil when the client
// settled first) runs on the owner with one error per settlement.
type settleJob struct {
	batch []Settlement
	local []error // when set, one entry per item: non-nil items never reached the Backend
	reply func(errs []error)
	// owners, when set, has one entry per batch item: the ConnectionID to settle it
	// under ("" for this connection), for a session link resumed from another one.
	owners []string
	// hold are the links whose settling count this job holds up: S-SES-3 (a session's
	// messages in order) and S-RCV-2 (an abandoned or released message comes first on
	// the link's next receive) need the settlements applied before that receive starts.
	hold []*link
}

// unhold ends j's hold on its links, resuming their receiving.
func (j settleJob) unhold() {
	for _, l := range j.hold {
		l.settling--
		if l.settling == 0 {
			if f := l.afterSettle; f != nil {
				l.afterSettle = nil
				f()
				continue
			}
			l.s.pump(l)
		}
	}
}

// results merges the Backend's errors for batch with the local ones.
func (j settleJob) results(backend []error) []error {
	if j.local == nil {
		return backend
	}
	out := make([]error, len(j.local))
	k := 0
	for i := range out {
		if j.local[i] != nil {
			out[i] = j.local[i]
		} else {
			out[i] = backend[k]
			k++
		}
	}
	return out
}

// flushSettles hands every disposition read in one reader batch to the
// Backend as a single Settle call, so the broker can group the writes.
func (c *conn) flushSettles() {
	if len(c.settleQueue) == 0 {
		return
	}
	jobs := c.settleQueue
	c.settleQueue = nil
	c.goFunc(func() {
		var all []Settlement
		if len(jobs) == 1 {
			all = jobs[0].batch
		} else {
			for _, j := range jobs {
				all = append(all, j.batch...)
			}
		}
		// No per-call timeout: the Backend bounds its own calls, and a timer
		// per disposition is measurable at 100k msgs/s. Not cancelled with the
		// connection either: a settlement the client sent before it closed
		// (or lost) the connection is applied all the same.
		var errs []error
		if len(all) > 0 {
			errs = c.settleAs(context.WithoutCancel(c.ctx), jobs, all)
		}
		if len(errs) != len(all) {
			errs = make([]error, len(all))
			for i := range errs {
				errs[i] = fmt.Errorf("%w: backend returned a wrong number of results", ErrServerBusy)
			}
		}
		answer := false
		for _, j := range jobs {
			answer = answer || j.reply != nil || len(j.hold) > 0
		}
		if !answer {
			return
		}
		c.post(func() {
			off := 0
			for _, j := range jobs {
				if j.reply != nil {
					j.reply(j.results(errs[off : off+len(j.batch)]))
				}
				j.unhold()
				off += len(j.batch)
			}
		})
	})
}

// settleAs settles all (the jobs' batches in order) in one Backend call, or, when a
// job settles for a resumed session link's lock holder, in one call per holder.
func (c *conn) settleAs(ctx context.Context, jobs []settleJob, all []Settlement) []error {
	if !slices.ContainsFunc(jobs, func(j settleJob) bool { return j.owners != nil }) {
		return c.b.Settle(ctx, all)
	}
	owners := make([]string, 0, len(all))
	for _, j := range jobs {
		if j.owners != nil {
			owners = append(owners, j.owners...)
		} else {
			owners = append(owners, make([]string, len(j.batch))...)
		}
	}
	errs := make([]error, len(all))
	done := make([]bool, len(all))
	for i := range all {
		if done[i] {
			continue
		}
		var idx []int
		var group []Settlement
		for k := i; k < len(all); k++ {
			if !done[k] && owners[k] == owners[i] {
				idx, group, done[k] = append(idx, k), append(group, all[k]), true
			}
		}
		gctx := ctx
		if owners[i] != "" {
			gctx = WithConnectionID(ctx, owners[i])
		}
		ge := c.b.Settle(gctx, group)
		for n, k := range idx {
			if n < len(ge) {
				errs[k] = ge[n]
			} else {
				errs[k] = fmt.Errorf("%w: backend returned a wrong number of results", ErrServerBusy)
			}
		}
	}
	return errs
}

// settlementFor maps an outcome to a settlement (protocol.md §6.4).
func settlementFor(st frames.DeliveryState) (Settlement, bool) {
	switch x := st.(type) {
	case frames.Accepted:
		return Settlement{Disposition: Complete}, true
	case frames.Released:
		return Settlement{Disposition: Release}, true
	case *frames.Modified:
		if x.UndeliverableHere {
			return Settlement{Disposition: Defer, PropertiesToModify: propertiesFromMap(x.MessageAnnotations)}, true
		}
		return Settlement{Disposition: Abandon, PropertiesToModify: propertiesFromMap(x.MessageAnnotations)}, true
	case *frames.Rejected:
		out := Settlement{Disposition: DeadLetter}
		if x.Error != nil {
			for _, e := range x.Error.Info {
				var k string
				switch kk := e.Key.(type) {
				case string:
					k = kk
				case Symbol:
					k = string(kk)
				default:
					continue
				}
				switch k {
				case "DeadLetterReason":
					out.DeadLetterReason, _ = e.Value.(string)
				case "DeadLetterErrorDescription":
					out.DeadLetterDescription, _ = e.Value.(string)
				default:
					out.PropertiesToModify = append(out.PropertiesToModify, Property{Key: k, Value: e.Value})
				}
			}
		}
		return out, true
	}
	return Settlement{}, false
}

// sessionLockHeld reports whether l's session lock has not yet expired.
func (c *conn) sessionLockHeld(l *link) bool {
	return l.sessionID == "" || c.now().Before(l.sessionLockedUntil)
}

// windowLeft is window minus inFlight, or 0 when more is in flight.
func windowLeft(window, inFlight uint32) uint32 {
	if inFlight > window {
		return 0
	}
	return window - inFlight
}

func toInt64(v any) (int64, bool) {
	switch x := v.(type) {
	case uint8:
		return int64(x), true
	case uint16:
		return int64(x), true
	case uint32:
		return int64(x), true
	case uint64:
		return int64(x), x <= 1<<62
	case int8:
		return int64(x), true
	case int16:
		return int64(x), true
	case int32:
		return int64(x), true
	case int64:
		return x, true
	}
	return 0, false
}
