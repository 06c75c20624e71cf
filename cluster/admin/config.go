package admin

import (
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/quorumbus/quorumbus/cluster/meta"
)

// ConfigResult is the answer of PUT /$config: what was changed, in order, and the
// file's warnings (unknown fields, fixed properties declared otherwise).
type ConfigResult struct {
	Applied  []string `json:"applied"`
	Warnings []string `json:"warnings"`
}

// applyConfig serves PUT /$config (Quorumbus's own): the body is an emulator
// Config.json, and the namespace is brought to it as meta.EmulatorConfig.Reconcile
// says: missing entities, subscriptions and rules created, differing ones updated, and
// with ?prune=true what the file does not declare deleted. The chart's apply hook and
// qbctl apply use it. The request is already authorized with the Manage right.
func (h *Handler) applyConfig(ctx context.Context, w http.ResponseWriter, r *http.Request) error {
	if r.Method != http.MethodPut {
		return errorf(http.StatusMethodNotAllowed, "%s needs PUT with a Config.json body", r.URL.Path)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 16*h.cfg.MaxBodyBytes))
	if err != nil {
		return errorf(http.StatusBadRequest, "reading the request body: %v", err)
	}
	cfg, warns, err := meta.LoadEmulatorConfig(body)
	if err != nil {
		return errorf(http.StatusBadRequest, "%v", err)
	}
	prune := r.URL.Query().Get("prune") == "true"
	var cmds []meta.Command
	if err := h.cfg.Store.Read(ctx, func(s *meta.State) {
		var more []string
		cmds, more = cfg.Reconcile(s, prune)
		warns = append(warns, more...)
	}); err != nil {
		return err
	}
	res := ConfigResult{Applied: []string{}, Warnings: warns}
	if res.Warnings == nil {
		res.Warnings = []string{}
	}
	for _, c := range cmds {
		what := describeCommand(c)
		if err := h.cfg.Store.Apply(ctx, c); err != nil {
			return fmt.Errorf("%s (after %d change(s)): %w", what, len(res.Applied), err)
		}
		res.Applied = append(res.Applied, what)
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

// describeCommand names a change for an operator: "update queue jobs".
func describeCommand(c meta.Command) string {
	sub := func(t, s string) string { return t + "/Subscriptions/" + s }
	switch x := c.(type) {
	case *meta.SetNamespace:
		return "set namespace " + x.Name
	case *meta.CreateQueue:
		return "create queue " + x.Name
	case *meta.UpdateQueue:
		return "update queue " + x.Name
	case *meta.DeleteQueue:
		return "delete queue " + x.Name
	case *meta.CreateTopic:
		return "create topic " + x.Name
	case *meta.UpdateTopic:
		return "update topic " + x.Name
	case *meta.DeleteTopic:
		return "delete topic " + x.Name
	case *meta.CreateSubscription:
		return "create subscription " + sub(x.Topic, x.Name)
	case *meta.UpdateSubscription:
		return "update subscription " + sub(x.Topic, x.Name)
	case *meta.DeleteSubscription:
		return "delete subscription " + sub(x.Topic, x.Name)
	case *meta.CreateRule:
		return "create rule " + sub(x.Topic, x.Subscription) + "/Rules/" + x.Rule.Name
	case *meta.UpdateRule:
		return "update rule " + sub(x.Topic, x.Subscription) + "/Rules/" + x.Rule.Name
	case *meta.DeleteRule:
		return "delete rule " + sub(x.Topic, x.Subscription) + "/Rules/" + x.Name
	}
	return fmt.Sprintf("%T", c)
}
