package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/quorumbus/quorumbus/cmd/internal/kubenode"
)

// zoneFromNode returns the zone of the Kubernetes node named node: its
// topology.kubernetes.io/zone label, "" when it has none (the node then spreads its
// replicas over nodes only, as without --zone). An API server that cannot be reached
// or answers 429 or 5xx is retried with back-off for up to wait; a refusal (no RBAC,
// no such node) fails at once, so the pod's log says why it does not start.
func zoneFromNode(ctx context.Context, kc kubenode.Config, node string, wait time.Duration, log *slog.Logger) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	delay := 250 * time.Millisecond
	for {
		zone, ok, err := kubenode.Label(ctx, kc, node, kubenode.ZoneLabel)
		switch {
		case err == nil && ok:
			log.Info("zone from the Kubernetes node", "node", node, "zone", zone)
			return zone, nil
		case err == nil:
			log.Warn("the Kubernetes node has no zone label: replicas are spread over nodes only", "node", node, "label", kubenode.ZoneLabel)
			return "", nil
		case !errors.Is(err, kubenode.ErrRetryable):
			return "", fmt.Errorf("--zone-from-node: %w", err)
		}
		log.Warn("reading the zone of the Kubernetes node; retrying", "node", node, "err", err)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return "", fmt.Errorf("--zone-from-node: no answer within %v: %w", wait, err)
		case <-t.C:
		}
		delay = min(2*delay, 5*time.Second)
	}
}
