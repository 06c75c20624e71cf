package cluster

import (
	"fmt"
	"os"
	"time"
)

func debugDump(nodes []*Node, stop chan struct{}) {
	if os.Getenv("QB_DEBUG") == "" {
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
					fmt.Printf("DBG %s group %d leader=%s isLeader=%v last=%d applied=%d servers=%v\n", nd.cfg.NodeID, id, l, r.p.IsLeader(), r.p.LastIndex(), r.p.AppliedIndex(), sv)
				}
				nd.mu.RUnlock()
			}
		}
	}()
}
