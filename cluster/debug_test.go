package cluster

import (
	"log/slog"
	"os"
	"time"
)

// debugLogger is the nodes' logger in tests: nil (the default logger) unless QB_DEBUG is
// set, then every line down to Debug (the router's retried calls among them) to stderr.
func debugLogger() *slog.Logger {
	if os.Getenv("QB_DEBUG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// debugDump logs every replica's raft state every 3 s until stop is closed, when
// QB_DEBUG is set.
func debugDump(nodes []*Node, stop chan struct{}) {
	log := debugLogger()
	if log == nil {
		return
	}
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(3 * time.Second):
			}
			for _, nd := range nodes {
				nd.mu.RLock()
				for id, r := range nd.parts {
					l, _ := r.p.Leader()
					sv, _ := r.p.Servers()
					log.Debug("replica", "node", nd.cfg.NodeID, "group", id, "leader", l, "isLeader", r.p.IsLeader(),
						"last", r.p.LastIndex(), "applied", r.p.AppliedIndex(), "servers", sv)
				}
				nd.mu.RUnlock()
			}
		}
	}()
}
