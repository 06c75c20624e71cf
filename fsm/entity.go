package fsm

import (
	"cmp"
	"fmt"
	"slices"
)

// ---- Schedule, entity, purge ----

func (f *FSM) cancelScheduled(c *CancelScheduled, r *Result) {
	for _, seq := range c.SeqNos {
		found := false
		for _, e := range f.ents {
			if m := e.main.idx.Get(seq); m != nil && m.state == StateScheduled {
				f.remove(m)
				found = true
			}
		}
		if !found && r.Err == nil {
			r.Err = fmt.Errorf("%w: no scheduled message with sequence number %d", ErrNotFound, seq)
		}
	}
}

// updateEntity installs a new configuration and releases the locks of every queue or
// subscription whose properties changed (S-ENT-3): message locks return their messages
// without counting a delivery, and session locks end as if closed; the holders get
// lock-lost. Other subscriptions of a topic keep their locks.
func (f *FSM) updateEntity(c *UpdateEntity) {
	touched := f.touched(c.Config)
	var held []*session
	for _, e := range f.ents {
		if !touched[e] {
			continue
		}
		for _, id := range sortedKeys(e.sessions) {
			if s := e.sessions[id]; s.held {
				held = append(held, s)
			}
		}
	}
	for _, s := range held {
		f.endSession(s, false)
	}
	locked := make([]*msg, 0, len(f.locks))
	for _, m := range f.locks {
		if touched[m.st.ent] {
			locked = append(locked, m)
		}
	}
	slices.SortFunc(locked, func(a, b *msg) int {
		if a.st.ord != b.st.ord {
			return cmp.Compare(a.st.ord, b.st.ord)
		}
		return cmp.Compare(a.seq, b.seq)
	})
	for _, m := range locked {
		f.unlock(m)
		f.requeue(m, false)
	}
	f.setConfig(c.Config)
}

// touched returns the entities whose locks a new configuration releases (S-ENT-3): for a
// queue, any change of its configuration; for a topic, each subscription whose own
// properties changed. Adding or removing a subscription, changing its rules, or changing
// the topic's own properties leaves the other subscriptions' locks alone. (Map lookups
// only: the result is never iterated.)
func (f *FSM) touched(cfg Config) map[*entity]bool {
	out := map[*entity]bool{}
	same := func(e *entity, q QueueConfig) bool {
		q.RequiresSession = e.cfg.RequiresSession // fixed at creation; not a change
		return e.cfg == q
	}
	if f.cfg.Kind != KindTopic {
		old := f.cfg
		unchanged := old.RequiresDuplicateDetection == cfg.RequiresDuplicateDetection &&
			old.DuplicateWindowMs == cfg.DuplicateWindowMs && old.MaxSizeBytes == cfg.MaxSizeBytes &&
			old.MaxMessageSizeBytes == cfg.MaxMessageSizeBytes
		for _, e := range f.ents {
			if !unchanged || !same(e, cfg.Queue) {
				out[e] = true
			}
		}
		return out
	}
	for _, sc := range cfg.Subscriptions {
		if e := f.byName[sc.Name]; e != nil && !same(e, sc.Queue) {
			out[e] = true
		}
	}
	return out
}

func (f *FSM) purge(c *Purge, r *Result) {
	_, st, err := f.lookup(c.Target)
	if err != nil {
		r.Err = err
		return
	}
	all := make([]*msg, 0, st.idx.Len())
	st.idx.Ascend(0, func(m *msg) bool { all = append(all, m); return true })
	for _, m := range all {
		f.remove(m)
	}
	r.Count = len(all)
}
