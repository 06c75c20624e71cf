package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/quorumbus/quorumbus/cluster/meta"
)

// purge serves POST .../$purge: every message of a queue (its dead-letter sub-queue
// included), of a subscription, of every subscription of a topic, or (POST /$purge) of
// the whole namespace, or (POST /$purge?prefix=P) of every queue and topic whose name
// starts with P. Entities, rules and session state stay. Service Bus has no such
// operation; the official emulator's users ask for it to reset state between tests.
func (h *Handler) purge(ctx context.Context, w http.ResponseWriter, r *http.Request, rt route) error {
	p, ok := h.cfg.Store.(Purger)
	if !ok {
		return errorf(http.StatusNotImplemented, "this node cannot purge")
	}
	prefix, scoped, err := prefixParam(r)
	if err != nil {
		return err
	}
	if scoped && rt.entity != "" {
		return errorf(http.StatusBadRequest, "prefix applies to POST /$purge only, not to %s", r.URL.Path)
	}
	var targets []Entity
	var kind meta.EntityKind
	if err := h.cfg.Store.Read(ctx, func(s *meta.State) {
		if rt.entity == "" {
			for _, e := range prefixed(s, prefix) {
				targets = append(targets, Entity{Name: e})
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
	h.log.Info("admin: purged", "entity", rt.entity, "subscription", rt.sub, "prefix", prefix, "messages", n)
	writeJSON(w, http.StatusOK, map[string]int64{"purged": n})
	return nil
}

// prefixParam reads the prefix query parameter: scoped is false without one; an empty
// prefix is refused (it would name every entity: say so by leaving it out).
func prefixParam(r *http.Request) (prefix string, scoped bool, err error) {
	q := r.URL.Query()
	if !q.Has("prefix") {
		return "", false, nil
	}
	prefix = q.Get("prefix")
	if prefix == "" {
		return "", false, errorf(http.StatusBadRequest, "prefix is empty: give the entity name prefix, or leave the parameter out")
	}
	return prefix, true, nil
}

// prefixed lists the queues and topics whose names start with prefix (compared
// case-insensitively, as entity names are), every one when prefix is "".
func prefixed(s *meta.State, prefix string) []string {
	var out []string
	has := func(name string) bool {
		return len(name) >= len(prefix) && strings.EqualFold(name[:len(prefix)], prefix)
	}
	for _, q := range s.Queues() {
		if has(q.Name) {
			out = append(out, q.Name)
		}
	}
	for _, t := range s.Topics() {
		if has(t.Name) {
			out = append(out, t.Name)
		}
	}
	return out
}

// deletePrefixed serves DELETE /$entities?prefix=P: delete every queue and topic (with
// its subscriptions) whose name starts with P, so that a test suite that names its
// entities with a prefix of its own removes exactly them, in one call, while other
// suites go on (docs/compatibility.md, "Isolating test suites"). The prefix is
// required. It answers {"deleted": [names]}; an entity deleted meanwhile by someone
// else is skipped.
func (h *Handler) deletePrefixed(ctx context.Context, w http.ResponseWriter, r *http.Request) error {
	prefix, scoped, err := prefixParam(r)
	if err != nil {
		return err
	}
	if !scoped {
		return errorf(http.StatusBadRequest, "DELETE /$entities needs ?prefix=P (the entity name prefix)")
	}
	type victim struct {
		name string
		cmd  meta.Command
	}
	var victims []victim
	if err := h.cfg.Store.Read(ctx, func(s *meta.State) {
		for _, name := range prefixed(s, prefix) {
			if s.Kind(name) == meta.KindQueue {
				victims = append(victims, victim{name, &meta.DeleteQueue{Name: name}})
			} else {
				victims = append(victims, victim{name, &meta.DeleteTopic{Name: name}})
			}
		}
	}); err != nil {
		return err
	}
	deleted := []string{}
	for _, v := range victims {
		if err := h.cfg.Store.Apply(ctx, v.cmd); err != nil {
			if errors.Is(err, meta.ErrNotFound) {
				continue
			}
			return err
		}
		deleted = append(deleted, v.name)
	}
	h.log.Info("admin: deleted entities by prefix", "prefix", prefix, "entities", len(deleted))
	writeJSON(w, http.StatusOK, map[string][]string{"deleted": deleted})
	return nil
}
