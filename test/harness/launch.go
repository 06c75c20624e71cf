package harness

import (
	"strconv"
	"strings"
	"testing"
)

// LaunchNode starts one more process as AddNode would (ID n<k+1>, fixed ports, --join
// every node, the same --bootstrap-expect and WithArgs flags, then extra) but returns
// as soon as it runs, without waiting for it to serve, and does not add it to c.Nodes:
// for a process expected not to get in, e.g. one with credentials the cluster refuses.
// Its Log shows what it did; it dies with the test.
func (c *Cluster) LaunchNode(t testing.TB, extra ...string) *Node {
	t.Helper()
	addrs, err := freeAddrs(3)
	if err != nil {
		t.Fatalf("LaunchNode: picking ports: %v", err)
	}
	nd := &Node{ID: "n" + strconv.Itoa(len(c.Nodes)+1), Dir: t.TempDir(), t: t,
		fixed: &ports{amqp: addrs[0], admin: addrs[1], cluster: addrs[2]}}
	var join []string
	for _, other := range c.Nodes {
		join = append(join, other.fixed.cluster)
	}
	nd.Args = append([]string{"--node-id", nd.ID, "--advertise-addr", nd.fixed.cluster,
		"--bootstrap-expect", strconv.Itoa(c.size)}, c.opts.args...)
	nd.Args = append(nd.Args, extra...)
	if len(join) > 0 {
		nd.Args = append(nd.Args, "--join", strings.Join(join, ","))
	}
	t.Cleanup(func() { nd.Kill() })
	if err := nd.launch(); err != nil {
		t.Fatal(err)
	}
	return nd
}
