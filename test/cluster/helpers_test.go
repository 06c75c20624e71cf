package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/test/harness"
)

// status is `qbctl cluster status -o json`.
type status struct {
	Node           string `json:"NodeID"`
	MetadataLeader string `json:"MetadataLeader"`
	Members        []struct {
		ID          string `json:"ID"`
		State       string `json:"State"`
		Metadata    string `json:"MetadataRole"`
		ClusterAddr string `json:"ClusterAddr"`
		AMQPAddr    string `json:"AMQPAddr"`
	} `json:"Members"`
}

// partition is one row of `qbctl cluster partitions -o json`.
type partition = harness.PartitionRow

// qbctlJSON runs qbctl ARGS -o json on node n and decodes its output into out. A node
// without a cluster API is a permanent error: waiting cannot give it one.
func qbctlJSON(t *testing.T, n *harness.Node, out any, args ...string) error {
	t.Helper()
	stdout, err := n.Qbctl(t, append(args, "-o", "json")...)
	if err != nil {
		if strings.Contains(err.Error(), "runs without a cluster") {
			return harness.Permanent(fmt.Errorf("%s has no cluster API (the admin API was given no admin.Cluster, cluster.Ops): %v", n.ID, err))
		}
		return fmt.Errorf("%s: %v", n.ID, err)
	}
	if err := json.Unmarshal([]byte(stdout), out); err != nil {
		return fmt.Errorf("%s: qbctl %v printed something that is not JSON: %v\n%s", n.ID, args, err, stdout)
	}
	return nil
}

// formed reports nil once every node sees all n members alive and the same single
// metadata leader.
func formed(t *testing.T, c *harness.Cluster) error {
	t.Helper()
	leaders := map[string][]string{} // leader -> nodes that see it
	for _, n := range c.Nodes {
		var st status
		if err := qbctlJSON(t, n, &st, "cluster", "status"); err != nil {
			return err
		}
		var alive, roleLeaders []string
		for _, m := range st.Members {
			if m.State == "alive" {
				alive = append(alive, m.ID)
			}
			if m.Metadata == "leader" {
				roleLeaders = append(roleLeaders, m.ID)
			}
		}
		sort.Strings(alive)
		if len(alive) != len(c.Nodes) {
			return fmt.Errorf("%s sees %d alive members %v of %d (%d listed)", n.ID, len(alive), alive, len(c.Nodes), len(st.Members))
		}
		if st.MetadataLeader == "" || len(roleLeaders) != 1 || roleLeaders[0] != st.MetadataLeader {
			return fmt.Errorf("%s: metadata leader %q, members with the leader role %v; want exactly one, the same", n.ID, st.MetadataLeader, roleLeaders)
		}
		leaders[st.MetadataLeader] = append(leaders[st.MetadataLeader], n.ID)
	}
	if len(leaders) != 1 {
		return fmt.Errorf("the nodes disagree on the metadata leader: %v", leaders)
	}
	return nil
}

// ctxT is a context bounded for one step of a test.
func ctxT(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
