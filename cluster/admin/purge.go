package admin

import (
	"context"
	"fmt"
	"net/http"

	"github.com/quorumbus/quorumbus/cluster/meta"
)

// purge serves POST .../$purge: every message of a queue (its dead-letter sub-queue
// included), of a subscription, of every subscription of a topic, or (POST /$purge) of
// the whole namespace. Entities, rules and session state stay. Service Bus has no such
// operation; the official emulator's users ask for it to reset state between tests.
func (h *Handler) purge(ctx context.Context, w http.ResponseWriter, rt route) error {
	p, ok := h.cfg.Store.(Purger)
	if !ok {
		return errorf(http.StatusNotImplemented, "this node cannot purge")
	}
	var targets []Entity
	var kind meta.EntityKind
	if err := h.cfg.Store.Read(ctx, func(s *meta.State) {
		if rt.entity == "" {
			for _, q := range s.Queues() {
				targets = append(targets, Entity{Name: q.Name})
			}
			for _, t := range s.Topics() {
				targets = append(targets, Entity{Name: t.Name})
			}
			return
		}
		kind = s.Kind(rt.entity)
		if rt.sub != "" {
			if _, ok := s.Subscription(rt.entity, rt.sub); !ok {
				kind = meta.KindNone
			}
		}
		targets = []Entity{{Name: rt.entity, Subscription: rt.sub}}
	}); err != nil {
		return err
	}
	if rt.entity != "" && kind == meta.KindNone {
		return notFoundErr(fmt.Sprintf("the messaging entity %q", rt.entity))
	}
	var n int64
	for _, e := range targets {
		c, err := p.Purge(ctx, e)
		n += c
		if err != nil {
			return err
		}
	}
	h.log.Info("admin: purged", "entity", rt.entity, "subscription", rt.sub, "messages", n)
	writeJSON(w, http.StatusOK, map[string]int64{"purged": n})
	return nil
}
