package harness

import (
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/test/testutil"
)

// Cluster is n quorumbus processes on 127.0.0.1 that form one cluster.
type Cluster struct {
	Nodes []*Node // n1..nN, in order (then any AddNode ones)
	t     testing.TB
	opts  clusterOptions
	size  int // the n of StartCluster: every node's --bootstrap-expect
}

// ClusterOption changes how StartCluster starts the nodes.
type ClusterOption func(*clusterOptions)

type clusterOptions struct {
	args     []string
	nodeArgs func(i int) []string
	timeout  time.Duration
	binDir   string
	dirs     []string
}

// WithBinary starts every node with the quorumbus build in dir instead of this
// checkout's (Node.BinDir): an older release, for an upgrade test.
func WithBinary(dir string) ClusterOption {
	return func(o *clusterOptions) { o.binDir = dir }
}

// WithDirs gives the nodes these data directories, in order (e.g. test/lazyfs mounts),
// instead of a new temporary directory each.
func WithDirs(dirs ...string) ClusterOption {
	return func(o *clusterOptions) { o.dirs = dirs }
}

// WithArgs adds flags to every node's command line, e.g. WithArgs("--replicas", "2").
func WithArgs(extra ...string) ClusterOption {
	return func(o *clusterOptions) { o.args = append(o.args, extra...) }
}

// WithNodeArgs adds flags to the command line of each node of StartCluster, after
// WithArgs': f(i) for the node n<i+1>, e.g. a --zone each.
func WithNodeArgs(f func(i int) []string) ClusterOption {
	return func(o *clusterOptions) { o.nodeArgs = f }
}

// WithStartTimeout bounds how long the nodes may take to serve (default 90 s).
func WithStartTimeout(d time.Duration) ClusterOption {
	return func(o *clusterOptions) { o.timeout = d }
}

// StartCluster starts n nodes with IDs n1..nN, each with its own data directory and
// fixed 127.0.0.1 ports (kept across Restart), every node joining all the others with
// --bootstrap-expect n. The processes start together, since a node of a forming cluster
// only serves once enough peers are up; StartCluster returns when every node has written
// endpoints.json and answers /readyz. Every node dies with the test.
func StartCluster(t testing.TB, n int, opts ...ClusterOption) *Cluster {
	t.Helper()
	if n < 1 {
		t.Fatalf("StartCluster: n = %d", n)
	}
	o := clusterOptions{timeout: 90 * time.Second}
	for _, opt := range opts {
		opt(&o)
	}
	Binary(t) // build before the clock starts
	addrs, err := freeAddrs(3 * n)
	if err != nil {
		t.Fatalf("StartCluster: picking ports: %v", err)
	}
	c := &Cluster{t: t, opts: o, size: n}
	for i := 0; i < n; i++ {
		p := &ports{amqp: addrs[3*i], admin: addrs[3*i+1], cluster: addrs[3*i+2]}
		dir := ""
		if i < len(o.dirs) {
			dir = o.dirs[i]
		} else {
			dir = t.TempDir()
		}
		c.Nodes = append(c.Nodes, &Node{ID: "n" + strconv.Itoa(i+1), Dir: dir, t: t, fixed: p, BinDir: o.binDir})
	}
	for i, nd := range c.Nodes {
		var join []string
		for _, other := range c.Nodes {
			if other != nd {
				join = append(join, other.fixed.cluster)
			}
		}
		nd.Args = append([]string{"--node-id", nd.ID, "--advertise-addr", nd.fixed.cluster,
			"--bootstrap-expect", strconv.Itoa(n)}, o.args...)
		if o.nodeArgs != nil {
			nd.Args = append(nd.Args, o.nodeArgs(i)...)
		}
		if len(join) > 0 {
			nd.Args = append(nd.Args, "--join", strings.Join(join, ","))
		}
	}
	for _, nd := range c.Nodes {
		t.Cleanup(func() { nd.Kill() })
		if err := nd.launch(); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(o.timeout)
	var errs []error
	for _, nd := range c.Nodes {
		if err := nd.awaitServing(deadline); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		t.Fatalf("StartCluster(%d): %v", n, errors.Join(errs...))
	}
	return c
}

// RestartAll starts every node of the cluster again at once, once all have exited (Kill
// or Stop each first): a node of a cluster that is down as a whole serves only once a
// quorum of its peers is up, so one at a time (Restart) would wait for ever.
func (c *Cluster) RestartAll(t testing.TB) {
	t.Helper()
	for _, nd := range c.Nodes {
		if nd.Running() {
			t.Fatalf("RestartAll while %s runs: Kill or Stop it first", nd.name())
		}
		if err := nd.launch(); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(c.opts.timeout)
	var errs []error
	for _, nd := range c.Nodes {
		if err := nd.awaitServing(deadline); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		t.Fatalf("RestartAll: %v", errors.Join(errs...))
	}
}

// AddNode starts one more node, n<k+1>, that joins the running cluster (--join every
// node so far, the same --bootstrap-expect and WithArgs flags as the others, then extra),
// and returns once it serves. Like the others it has fixed ports, its own data directory
// and dies with the test.
func (c *Cluster) AddNode(t testing.TB, extra ...string) *Node {
	t.Helper()
	nd := c.LaunchNode(t, extra...)
	if err := nd.awaitServing(time.Now().Add(c.opts.timeout)); err != nil {
		t.Fatalf("AddNode: %v", err)
	}
	c.Nodes = append(c.Nodes, nd)
	return nd
}

// freeAddrs returns k distinct free 127.0.0.1:PORT addresses: each is bound to port 0
// and released, all at once so that no port is handed out twice. Another process could
// take one before the node binds it; on a test machine that is rare.
func freeAddrs(k int) ([]string, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	out := make([]string, 0, k)
	for i := 0; i < k; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		out = append(out, ln.Addr().String())
	}
	return out, nil
}

// Node returns the node with ID id (n1, n2, ...), failing the test if there is none.
func (c *Cluster) Node(id string) *Node {
	for _, n := range c.Nodes {
		if n.ID == id {
			return n
		}
	}
	var ids []string
	for _, n := range c.Nodes {
		ids = append(ids, n.ID)
	}
	c.t.Helper()
	c.t.Fatalf("harness: no node %q in the cluster (%s)", id, strings.Join(ids, ", "))
	return nil
}

// Permanent marks an error of a WaitFor condition as final: waiting longer cannot help,
// so WaitFor fails at once (testutil.Permanent).
func Permanent(err error) error { return testutil.Permanent(err) }

// WaitFor calls cond until it returns nil, and fails the test with cond's last error if
// that does not happen within timeout (or at once for a Permanent one): testutil.WaitFor.
func (c *Cluster) WaitFor(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	testutil.WaitFor(t, timeout, cond)
}

// WaitFor is Cluster.WaitFor for tests without a cluster.
func WaitFor(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	testutil.WaitFor(t, timeout, cond)
}

// PartitionRow is one row of `qbctl cluster partitions -o json` (with --digests, each
// replica's state digest), as the multi-node tests read it.
type PartitionRow struct {
	Entity    string `json:"Entity"`
	Partition int    `json:"Partition"`
	Group     uint32 `json:"GroupID"`
	Leader    string `json:"Leader"`
	Replicas  []struct {
		Node        string `json:"Node"`
		Voter       bool   `json:"Voter"`
		LastIndex   uint64 `json:"LastIndex"`
		Lag         uint64 `json:"Lag"`
		Digest      string `json:"Digest"`      // with --digests; "" when the node did not answer
		Unreachable bool   `json:"Unreachable"` // the node did not answer: LastIndex and Lag say nothing
	} `json:"Replicas"`
	UnderReplicated bool `json:"UnderReplicated"` // fewer live voters than it should have
}
