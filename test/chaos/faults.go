package chaos

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/quorumbus/quorumbus/test/harness"
	"github.com/quorumbus/quorumbus/test/hosts"
)

// A fault is applied by apply, which returns what it did; the nemesis heals every fault
// the same way (heal), so faults combine freely.
type fault struct {
	name string
	// exclusive faults never run together with another: a wiped node next to a
	// crashed one can lose acknowledged writes by Raft's own rules (two of three
	// replicas without their data), which is not what the suite tests.
	exclusive bool
	apply     func(c *cluster, rng *rand.Rand) (string, error)
}

// cluster is the hosts of one run with the nemesis's view of them.
type cluster struct {
	net   *hosts.Net
	bin   string   // directory of quorumbus and qbctl
	lazy  bool     // data directories on test/lazyfs: power-loss drops unsynced writes
	hist  *History // where faults that the checker must know of are recorded
	cs    *clients // the workload's nodes: an added node joins them
	extra []string // the nodes' flags beyond QuorumbusArgs

	// members are the hosts whose nodes are in the cluster (faults pick among them);
	// spares are down and out of it, for the add-remove fault, which brings the
	// members back to base, their number at the start.
	members, spares []*hosts.Host
	base            int
}

func (c *cluster) n() int { return len(c.members) }

func (c *cluster) pick(rng *rand.Rand) *hosts.Host { return c.members[rng.IntN(c.n())] }

// others returns every member but h, in a seeded order.
func (c *cluster) others(rng *rand.Rand, h *hosts.Host) []*hosts.Host {
	var out []*hosts.Host
	for _, o := range c.members {
		if o != h {
			out = append(out, o)
		}
	}
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

var faults = []fault{
	{name: "kill", apply: func(c *cluster, rng *rand.Rand) (string, error) {
		h := c.pick(rng)
		h.Kill()
		return "kill -9 " + h.Name, nil
	}},
	{name: "kill-leader", apply: func(c *cluster, rng *rand.Rand) (string, error) {
		h, why := c.busiestLeader(rng)
		h.Kill()
		return "kill -9 " + h.Name + " (" + why + ")", nil
	}},
	{name: "pause", apply: func(c *cluster, rng *rand.Rand) (string, error) {
		h := c.pick(rng)
		if !h.Running() { // killed by the other fault of a mixed segment
			return "SIGSTOP " + h.Name + " skipped: not running", nil
		}
		return "SIGSTOP " + h.Name, h.Pause()
	}},
	{name: "isolate", apply: func(c *cluster, rng *rand.Rand) (string, error) {
		h := c.pick(rng)
		return "isolate " + h.Name + " (peers and clients)", h.Isolate()
	}},
	{name: "split", apply: func(c *cluster, rng *rand.Rand) (string, error) {
		all := c.others(rng, nil)
		minority, majority := all[:(len(all)-1)/2], all[(len(all)-1)/2:]
		if len(minority) == 0 {
			minority, majority = all[:1], all[1:]
		}
		for _, a := range minority {
			for _, b := range majority {
				if err := a.Drop(b, hosts.Both); err != nil {
					return "", err
				}
			}
		}
		return fmt.Sprintf("split %s | %s (clients reach both sides)", names(minority), names(majority)), nil
	}},
	{name: "bridge", apply: func(c *cluster, rng *rand.Rand) (string, error) {
		a := c.pick(rng)
		rest := c.others(rng, a)
		left, right := rest[:len(rest)/2], rest[len(rest)/2:]
		for _, b := range left {
			for _, d := range right {
				if err := b.Drop(d, hosts.Both); err != nil {
					return "", err
				}
				if err := d.Drop(b, hosts.Both); err != nil {
					return "", err
				}
			}
		}
		return fmt.Sprintf("bridge: %s sees all, %s and %s do not see each other", a.Name, names(left), names(right)), nil
	}},
	{name: "one-way", apply: func(c *cluster, rng *rand.Rand) (string, error) {
		a := c.pick(rng)
		for _, b := range c.others(rng, a) {
			if err := a.Drop(b, hosts.Outbound); err != nil {
				return "", err
			}
		}
		return a.Name + " hears its peers, they do not hear it", nil
	}},
	{name: "loss", apply: func(c *cluster, rng *rand.Rand) (string, error) {
		p := 10 + rng.IntN(15)
		for _, h := range c.members {
			if err := h.Loss(p, hosts.Both); err != nil {
				return "", err
			}
		}
		return fmt.Sprintf("%d %% packet loss each way on every host", p), nil
	}},
	{name: "delay", apply: func(c *cluster, rng *rand.Rand) (string, error) {
		d, j := time.Duration(20+rng.IntN(60))*time.Millisecond, time.Duration(50+rng.IntN(150))*time.Millisecond
		for _, a := range c.members {
			for _, b := range c.members {
				if l := c.net.Link(a.Index, b.Index); l != nil {
					l.Set(hosts.LinkState{Delay: d, Jitter: j})
				}
			}
		}
		return fmt.Sprintf("proxy delay %v + [0,%v) per connection on every link (reordering across connections)", d, j), nil
	}},
	{name: "blackhole", apply: func(c *cluster, rng *rand.Rand) (string, error) {
		a := c.pick(rng)
		for _, b := range c.others(rng, a) {
			c.net.Link(a.Index, b.Index).Set(hosts.LinkState{Blackhole: true})
			c.net.Link(b.Index, a.Index).Set(hosts.LinkState{Blackhole: true})
		}
		return "proxy black hole to and from " + a.Name + " (connections held open; gossip still flows)", nil
	}},
	{name: "power-loss", apply: func(c *cluster, rng *rand.Rand) (string, error) {
		// One node of three (a minority): kill -9, then every write it had not
		// fsynced is gone (test/lazyfs); it restarts at heal on what it made durable.
		h := c.pick(rng)
		if !c.lazy {
			h.Kill()
			return "kill -9 " + h.Name + " (CHAOS_LAZYFS=0: no power loss)", nil
		}
		dropped, err := h.PowerLoss()
		var files []string
		for f, n := range dropped {
			files = append(files, fmt.Sprintf("%s %d KiB", f, n/1024))
		}
		sort.Strings(files)
		if len(files) == 0 {
			files = []string{"nothing"}
		}
		return fmt.Sprintf("power loss of %s: kill -9, unsynced pages dropped: %s", h.Name, strings.Join(files, ", ")), err
	}},
	{name: "clock-jump", apply: func(c *cluster, rng *rand.Rand) (string, error) {
		// The busiest partition's leader: a leader's clock stamps the entries that
		// lock expiries, schedules and TTLs are computed from. Forward now, back to
		// the machine's clock at heal (a backward jump of the same size). Kept well
		// under the drain's patience: after the heal, stamps stay at the jumped time
		// until real time catches up, so locks taken then last that much longer.
		h, why := c.busiestLeader(rng)
		d := time.Duration(5+rng.IntN(26)) * time.Second
		c.hist.Add(Op{T: time.Now(), Worker: "nemesis", Kind: "clock-jump", Node: h.Name, Value: d.String()})
		return fmt.Sprintf("clock of %s (%s) jumped %v forward", h.Name, why, d), h.JumpClock(d)
	}},
	{name: "add-remove", apply: func(c *cluster, rng *rand.Rand) (string, error) { return c.addRemove(rng) }},
	{name: "wipe", exclusive: true, apply: func(c *cluster, rng *rand.Rand) (string, error) {
		h := c.pick(rng)
		if err := h.Wipe(); err != nil {
			return "", err
		}
		return "kill -9 " + h.Name + ", wipe its data directory, restart it (rebuilt from peers)", h.Restart()
	}},
}

func names(hs []*hosts.Host) string {
	var s []string
	for _, h := range hs {
		s = append(s, h.Name)
	}
	return "{" + strings.Join(s, ",") + "}"
}

// heal undoes every fault: network rules and proxies back to normal, paused nodes
// resumed, dead nodes restarted; then it waits for every node to be ready.
func (c *cluster) heal(timeout time.Duration, hist *History) error {
	err := c.net.HealAll()
	for _, h := range c.members {
		if h.Running() {
			h.Resume()
			continue
		}
		hist.Add(Op{T: time.Now(), Worker: "nemesis", Kind: "restart", Node: h.Name, Value: fmt.Sprint("exited: ", h.ExitErr())})
		if e := h.Restart(); e != nil && err == nil {
			err = e
		}
	}
	if err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	for _, h := range c.members {
		if err := h.AwaitReady(time.Until(deadline)); err != nil {
			return err
		}
	}
	return nil
}

// maxCatchUpLag is how far behind its leader a replica may be and count as caught up:
// under load a follower is rarely at lag 0, and the entries it misses are newer than
// the wipe, so they are on a majority anyway.
const maxCatchUpLag = 50

// caughtUp reports nil once every partition group has a leader and every replica is
// within maxCatchUpLag of it: after a wiped node is rebuilt. Until then its groups count it as a voter with
// part of the log, and wiping another of their replicas would wipe a majority, which
// docs/operations.md forbids (and which loses acknowledged messages, as Raft must).
func (c *cluster) caughtUp(rng *rand.Rand) error {
	var ps []partition
	h := c.pick(rng)
	if err := c.qbctl(h, &ps, "cluster", "partitions"); err != nil {
		return err
	}
	for _, p := range ps {
		if p.Leader == "" {
			return fmt.Errorf("group %d (%s/%d) has no leader", p.Group, p.Entity, p.Partition)
		}
		for _, r := range p.Replicas {
			if r.Lag > maxCatchUpLag || r.LastIndex == 0 {
				return fmt.Errorf("group %d (%s/%d): %s at index %d, lag %d", p.Group, p.Entity, p.Partition, r.Node, r.LastIndex, r.Lag)
			}
		}
	}
	return nil
}

// partition is one row of `qbctl cluster partitions -o json`.
type partition = harness.PartitionRow

// status is `qbctl cluster status -o json`.
type status struct {
	Node           string `json:"NodeID"`
	MetadataLeader string `json:"MetadataLeader"`
	Members        []struct {
		ID       string `json:"ID"`
		State    string `json:"State"`
		Metadata string `json:"MetadataRole"`
		// with --digests: the member's metadata state digest and applied index
		Digest  string `json:"MetadataDigest"`
		Applied uint64 `json:"MetadataApplied"`
	} `json:"Members"`
}

// qbctl runs qbctl against host h's admin API and decodes its JSON output into out.
func (c *cluster) qbctl(h *hosts.Host, out any, args ...string) error {
	e, err := h.Endpoints()
	if err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(c.bin, "qbctl"), append([]string{"--admin-addr", e.Admin, "--data", h.DataDir()}, append(args, "-o", "json")...)...)
	cmd.Env = append(cmd.Environ(), "QUORUMBUS_CONNECTION_STRING=")
	timeout := 20 * time.Second
	if len(args) > 1 && args[0] == "node" && (args[1] == "drain" || args[1] == "remove") {
		// They move replicas: a remove answers only once no group counts the node (at
		// most 40 s, then 503). Cut short, it goes on in the cluster all the same, and
		// the nemesis would keep a node the cluster removed as a member.
		timeout = 90 * time.Second
	}
	b, err := runTimeout(cmd, timeout)
	if err != nil {
		return fmt.Errorf("qbctl %v on %s: %v: %s", args, h.Name, err, b)
	}
	return json.Unmarshal(b, out)
}

func runTimeout(cmd *exec.Cmd, d time.Duration) ([]byte, error) {
	done := make(chan struct{})
	var out []byte
	var err error
	go func() { out, err = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
		return out, err
	case <-time.After(d):
		if cmd.Process != nil {
			cmd.Process.Kill()
		}
		<-done
		return out, fmt.Errorf("timed out after %v", d)
	}
}

// busiestLeader is the leader of the partition group with the longest log, asked of a
// random node; a random node when none answers.
func (c *cluster) busiestLeader(rng *rand.Rand) (*hosts.Host, string) {
	for _, h := range c.others(rng, nil) {
		var ps []partition
		if err := c.qbctl(h, &ps, "cluster", "partitions"); err != nil {
			continue
		}
		var best *partition
		var bestIdx uint64
		for i := range ps {
			for _, r := range ps[i].Replicas {
				if r.Node == ps[i].Leader && r.LastIndex >= bestIdx && ps[i].Leader != "" {
					best, bestIdx = &ps[i], r.LastIndex
				}
			}
		}
		if best == nil {
			continue
		}
		for _, o := range c.members {
			if o.Name == best.Leader {
				return o, fmt.Sprintf("leader of %s/%d, index %d", best.Entity, best.Partition, bestIdx)
			}
		}
	}
	return c.pick(rng), "no leader known: a random node"
}

// converged reports nil once every replica of every partition group has the same
// digest with no lag, every node sees every member alive and one metadata leader, and
// every member's metadata state has the same digest at the same applied index.
func (c *cluster) converged(rng *rand.Rand) error {
	var ps []partition
	h := c.pick(rng)
	if err := c.qbctl(h, &ps, "cluster", "partitions", "--digests"); err != nil {
		return err
	}
	if len(ps) == 0 {
		return fmt.Errorf("%s lists no partition groups", h.Name)
	}
	for _, p := range ps {
		if p.Leader == "" {
			return fmt.Errorf("group %d (%s/%d) has no leader", p.Group, p.Entity, p.Partition)
		}
		var first string
		for _, r := range p.Replicas {
			if r.Digest == "" {
				return fmt.Errorf("group %d (%s/%d): no digest from %s", p.Group, p.Entity, p.Partition, r.Node)
			}
			if first == "" {
				first = r.Digest
			}
			if r.Digest != first || r.Lag != 0 {
				return fmt.Errorf("group %d (%s/%d) not converged: %+v", p.Group, p.Entity, p.Partition, p.Replicas)
			}
		}
	}
	leaders := map[string]bool{}
	for i, h := range c.members {
		var st status
		args := []string{"cluster", "status"}
		if i == 0 {
			args = append(args, "--digests")
		}
		if err := c.qbctl(h, &st, args...); err != nil {
			return err
		}
		if i == 0 {
			if err := metaConverged(st, c.n()); err != nil {
				return fmt.Errorf("metadata replicas (asked of %s): %v", h.Name, err)
			}
		}
		alive := 0
		for _, m := range st.Members {
			// A member drained by an add-remove whose removal then failed stays
			// "draining": up, gossiping, just not given replicas.
			if m.State == "alive" || m.State == "draining" {
				alive++
			}
		}
		if alive != c.n() || st.MetadataLeader == "" {
			return fmt.Errorf("%s sees %d of %d members alive, metadata leader %q", h.Name, alive, c.n(), st.MetadataLeader)
		}
		leaders[st.MetadataLeader] = true
	}
	if len(leaders) != 1 {
		return fmt.Errorf("nodes disagree on the metadata leader: %v", leaders)
	}
	return nil
}

// metaConverged reports nil when n members report one metadata digest at one applied
// index.
func metaConverged(st status, n int) error {
	seen := map[string][]string{} // "applied/digest" -> members
	for _, m := range st.Members {
		if m.Digest == "" {
			return fmt.Errorf("no metadata digest from %s", m.ID)
		}
		k := fmt.Sprintf("applied %d digest %.12s", m.Applied, m.Digest)
		seen[k] = append(seen[k], m.ID)
	}
	if len(seen) != 1 || len(st.Members) != n {
		return fmt.Errorf("%d members, want %d, not at one state: %v", len(st.Members), n, seen)
	}
	return nil
}

// addRemove is a membership change while faults run, as an operator replacing a node
// does: a spare host's node (on an empty data directory) joins the cluster, then a
// member is drained, removed (its replicas are placed on the others, the new node
// among them) and stopped, and its host becomes the spare. Each step is retried for a
// while, since another fault may be in force; a step that cannot be done is reported
// and the rest skipped, so a node is never stopped unless its removal was accepted.
// The cluster is then one member above its base size, and the next add-remove only
// removes.
func (c *cluster) addRemove(rng *rand.Rand) (string, error) {
	var s *hosts.Host // the node added, if any
	var what []string
	if len(c.members) <= c.base {
		if len(c.spares) == 0 {
			return "add-remove skipped: no spare host (CHAOS_MEMBERSHIP=0)", nil
		}
		s = c.spares[0]
		if err := s.Wipe(); err != nil { // a node that was removed before comes back new
			return "", err
		}
		if err := s.LaunchQuorumbus(c.extra...); err != nil {
			return "", err
		}
		c.spares = c.spares[1:]
		c.members = append(c.members, s)
		what = append(what, "add "+s.Name)
		if err := s.AwaitReady(60 * time.Second); err != nil {
			return fmt.Sprintf("add %s (not ready within 60 s, left to join: %.200s); no removal", s.Name, err), nil
		}
		if e, err := s.Endpoints(); err == nil {
			c.cs.add(e.ConnectionString, s.Name)
		}
		// Remove only once the cluster sees the new node alive: a replica is placed
		// only on a node the metadata leader knows.
		if err := waitFor(30*time.Second, func() error { return c.seesAlive(rng, s.Name) }); err != nil {
			return fmt.Sprintf("add %s; no removal: %v", s.Name, err), nil
		}
	} // else a removal failed before: this time only remove, back to the base size
	m := c.others(rng, s)[0]
	var out any
	for _, verb := range []string{"drain", "remove"} {
		err := waitFor(2*time.Minute, func() error {
			via := c.others(rng, m)
			return c.qbctl(via[0], &out, "node", verb, m.Name)
		})
		if err != nil {
			what = append(what, fmt.Sprintf("%s %s failed, it stays (the next add-remove only removes): %v", verb, m.Name, err))
			return strings.Join(what, "; "), nil
		}
		what = append(what, verb+" "+m.Name)
	}
	m.Stop(30 * time.Second)
	for i, h := range c.members {
		if h == m {
			c.members = append(c.members[:i], c.members[i+1:]...)
			break
		}
	}
	c.spares = append(c.spares, m)
	what = append(what, "stop "+m.Name+" (its host is the spare now)")
	return strings.Join(what, "; "), nil
}

// seesAlive reports nil once a random member's cluster status has node alive.
func (c *cluster) seesAlive(rng *rand.Rand, node string) error {
	var st status
	if err := c.qbctl(c.pick(rng), &st, "cluster", "status"); err != nil {
		return err
	}
	for _, m := range st.Members {
		if m.ID == node && m.State == "alive" {
			return nil
		}
	}
	return fmt.Errorf("%s not alive in the cluster status yet", node)
}

// waitFor polls cond every second until it returns nil or timeout passes, and returns
// its last error.
func waitFor(timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(time.Second) // polling other processes
	}
}
