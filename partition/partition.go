package partition

import (
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// Partition is one replica of one entity partition: a hashicorp/raft group whose state
// machine is an fsm.FSM, with a log/stable store (Config.LogStore: bolt's raft.db or
// raft-wal's wal/, behind a LogCache) and a file snapshot store. Its methods are safe
// for concurrent use.
type Partition struct {
	cfg    Config
	clock  Clock
	logger hclog.Logger

	m     *machine
	raft  *raft.Raft
	trans Transport
	store logStore // raft log and stable store (logstore.go)

	propCh     chan *proposal // callers -> proposer
	sem        chan struct{}  // in-flight entry slots (cap MaxInflight)
	inflightCh chan inflight  // proposer -> completer, in log order
	// The proposer and the completer run only while they have work: an idle group has
	// no goroutine of its own (proposer.go, kickProposer; leadership.go).
	propRunning atomic.Bool
	compRunning atomic.Bool
	startMu     sync.Mutex     // orders a caller's start of the proposer before Close's wait
	stopped     bool           // Close began: no proposer starts (owner: startMu)
	lastNow     atomic.Int64   // the last time stamp the proposer put on an entry
	ls          leaderState    // leadership and the deadline timer (leadership.go)
	hub         *LeadershipHub // Config.Leadership, or one of the replica's own
	observer    *raft.Observer // raft's state changes, to hub

	ctr   counters    // for Metrics
	avail signal      // woken after entries that may make messages or sessions available
	ready atomic.Bool // leader, and a Barrier in this term has completed (reads allowed)

	parkMu    sync.Mutex   // guards parked (lock order: a leaf)
	parked    []*parked    // receives waiting for messages (parked.go)
	hasParked atomic.Bool  // len(parked) > 0, read by the proposer without parkMu
	armed     atomic.Int64 // deadline the leader timer is armed for; -1 when none (written under ls.mu)

	closing   chan struct{} // closed by Close
	closeOnce sync.Once
	closeErr  error
	wg        sync.WaitGroup // proposer, completer, barrier waits, timer firings, first campaign
}

// Transport is a raft.Transport the replica closes when it stops.
type Transport interface {
	raft.Transport
	raft.WithClose
}

// Open starts a replica: it opens or creates the group's files under cfg.Dir(),
// bootstraps the group with cfg.Peers when there is no state on disk, and starts raft,
// which restores the latest snapshot and replays the log after it.
func Open(cfg *Config) (*Partition, error) {
	if cfg == nil {
		return nil, fmt.Errorf("partition: nil Config")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &Partition{
		cfg:        *cfg,
		clock:      cfg.Clock,
		logger:     cfg.Logger,
		propCh:     make(chan *proposal, cfg.QueueLen),
		sem:        make(chan struct{}, cfg.MaxInflight),
		inflightCh: make(chan inflight, cfg.MaxInflight),
		closing:    make(chan struct{}),
	}
	if p.clock == nil {
		p.clock = realClock{}
	}
	if p.logger == nil {
		p.logger = hclog.New(&hclog.LoggerOptions{Name: "partition", Level: hclog.Warn})
	}
	p.logger = p.logger.With("entity", cfg.Entity, "partition", cfg.Index, "group", cfg.FSM.GroupID)
	p.armed.Store(-1)

	dir := cfg.Dir()
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("partition: %w", err)
	}
	store, err := openLogStore(dir, cfg.LogStore, cfg.Engine, cfg.NoSync, p.logger)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*Partition, error) {
		store.Close()
		return nil, err
	}
	logs, err := raft.NewLogCache(cfg.LogCache, store)
	if err != nil {
		return fail(fmt.Errorf("partition: %w", err))
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, cfg.SnapshotRetain, p.logger.Named("snapshots"))
	if err != nil {
		return fail(fmt.Errorf("partition: %w", err))
	}
	hasState, err := raft.HasExistingState(logs, store, snaps)
	if err != nil {
		return fail(fmt.Errorf("partition: %w", err))
	}
	base, err := baseConfig(dir, cfg.FSM)
	if err != nil {
		return fail(err)
	}
	p.cfg.FSM = base
	p.store = store
	p.trans = cfg.Transport
	if p.trans == nil {
		p.trans = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
			Stream:                cfg.Stream,
			ServerAddressProvider: cfg.AddressProvider,
			MaxPool:               cfg.NetMaxPool,
			Timeout:               cfg.NetTimeout,
			Logger:                p.logger.Named("net"),
			// Pipelining (raft.NetworkTransportConfig: under 2 turns it off). hashicorp/raft
			// v1.7.3 left a pipeline whose decoder stopped blocking its sender for good;
			// raft patch 1 closes it (docs/raft-patches.md).
			MaxRPCsInFlight: max(cfg.Pipeline, 1),
		})
	}
	p.m = newMachine(base, p.applied)
	p.m.ctr, p.m.clock = &p.ctr, p.clock
	p.m.useBodies(cfg.Bodies)
	r, err := raft.NewRaft(cfg.raftConfig(p.logger.Named("raft")), p.m, logs, store, snaps, p.trans)
	if err != nil {
		p.trans.Close()
		return fail(fmt.Errorf("partition: %w", err))
	}
	p.raft = r
	if ls, ok := p.trans.(interface {
		SetLeaderState(func() (uint64, bool))
	}); ok {
		// The transport coalesces the heartbeats of groups led here only while this
		// raft leads at the heartbeat's term (transport.Groups, beats.go).
		ls.SetLeaderState(func() (uint64, bool) { return r.CurrentTerm(), r.State() == raft.Leader })
	}
	if pd, ok := p.trans.(peerDowner); ok {
		pd.SetPeerDown(func(addr raft.ServerAddress) { p.leaderGone(pd, addr) })
	}
	if !hasState && len(cfg.Peers) > 0 {
		if err := r.BootstrapCluster(raft.Configuration{Servers: cfg.Peers}).Error(); err != nil {
			r.Shutdown().Error()
			p.trans.Close()
			return fail(fmt.Errorf("partition: bootstrap: %w", err))
		}
		if pd, ok := p.trans.(peerDowner); ok && cfg.Peers[0].ID == cfg.NodeID && len(cfg.Peers) > 1 {
			p.wg.Go(func() { p.firstCampaign(pd) })
		}
	}
	p.hub = cfg.Leadership
	if p.hub == nil {
		p.hub = NewLeadershipHub() // its goroutine ends in Close (unwatchLeadership)
	}
	p.watchLeadership()
	return p, nil
}

// Close stops the replica without handing leadership over (cluster code calls
// LeadershipTransfer first for a graceful stop). Every pending call is answered first:
// entries already given to raft resolve (committed, or failed when leadership is lost),
// then raft, the transport (and its stream layer) and the store are shut down. Every
// acknowledged write is already fsynced, so Close is no safer than a crash.
func (p *Partition) Close() error {
	p.closeOnce.Do(func() {
		p.startMu.Lock()
		p.stopped = true
		p.startMu.Unlock()
		close(p.closing)
		p.wg.Wait()
		p.failQueued() // what was queued when no proposer ran any more
		err := p.raft.Shutdown().Error()
		p.unwatchLeadership()
		p.ls.mu.Lock()
		p.disarmLocked()
		p.ls.mu.Unlock()
		if e := p.trans.Close(); err == nil {
			err = e
		}
		if e := p.store.Close(); err == nil {
			err = e
		}
		p.m.closeBodies()
		p.closeErr = err
	})
	return p.closeErr
}

// applied runs on raft's FSM goroutine after every batch.
func (p *Partition) applied(wake bool) {
	if wake {
		p.avail.broadcast()
	}
	if p.m.next.Load() != p.armed.Load() {
		p.deadlineMoved()
	}
}

// signal is a broadcast: wait returns a channel that the next broadcast closes.
type signal struct {
	mu sync.Mutex
	ch chan struct{} // nil when nobody waits; owner: mu
}

func (s *signal) wait() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

func (s *signal) broadcast() {
	s.mu.Lock()
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
	s.mu.Unlock()
}

// peerDowner is a transport that says when a peer's process is gone
// (transport.GroupTransport).
type peerDowner interface {
	SetPeerDown(func(raft.ServerAddress))
	CampaignNow() error
}

// firstCampaign lets a new group's first peer (the preferred leader) campaign at once
// instead of after a heartbeat timeout, once every other peer has granted it a pre-vote
// (which changes nothing on the peer) for term 2 over the bootstrap entry alone: no peer
// knows a leader or holds an entry past the bootstrap one, so no entry was ever
// committed after it, whatever a vote cast earlier in term 2 elected. The check
// matters because a campaign started this way skips raft's own pre-vote, and a node that
// starts on an empty data directory bootstraps again the groups it was a first voter of
// (the metadata records the voter set, not which disk took part): a peer that voted for
// this node's earlier self in that term would grant the vote again (hashicorp/raft
// repeats a vote to the same candidate), and a leader with an empty log would overwrite
// the group's history on some replicas and not others. Peers that have not opened the
// group yet are asked again a few times; then the heartbeat timeouts elect.
func (p *Partition) firstCampaign(pd peerDowner) {
	pv, ok := p.trans.(raft.WithPreVote)
	if !ok {
		return
	}
	const tries, gap = 8, 50 * time.Millisecond
	for try := 0; try < tries; try++ {
		if try > 0 {
			t := time.NewTimer(gap)
			select {
			case <-p.closing:
				t.Stop()
				return
			case <-t.C:
			}
		}
		if p.raft.CurrentTerm() != 1 || p.raft.LastIndex() != 1 || p.raft.State() != raft.Follower {
			return // an election or the group's leader came first
		}
		if leader, _ := p.raft.LeaderWithID(); leader != "" {
			return
		}
		if p.peersAtBootstrap(pv) {
			if err := pd.CampaignNow(); err != nil {
				p.logger.Debug("first campaign", "err", err)
			}
			return
		}
	}
}

// peersAtBootstrap reports whether every other bootstrap peer grants a pre-vote for term
// 2 over a log of the bootstrap entry alone (a peer at a later term, with a leader, or
// with a longer log refuses it).
func (p *Partition) peersAtBootstrap(pv raft.WithPreVote) bool {
	for _, s := range p.cfg.Peers {
		if s.ID == p.cfg.NodeID {
			continue
		}
		req := &raft.RequestPreVoteRequest{
			RPCHeader:    raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(p.cfg.NodeID), Addr: p.trans.EncodePeer(p.cfg.NodeID, p.trans.LocalAddr())},
			Term:         2,
			LastLogIndex: 1,
			LastLogTerm:  1,
		}
		var resp raft.RequestPreVoteResponse
		if err := pv.RequestPreVote(s.ID, s.Address, req, &resp); err != nil || !resp.Granted {
			return false
		}
		select {
		case <-p.closing:
			return false
		default:
		}
	}
	return true
}

// leaderGone runs when the transport finds that nothing listens at addr any more. If
// that was this group's leader, the surviving voters campaign at once instead of
// waiting for their heartbeat timeouts, one after the other in the order of their IDs
// (the same order on every node, so that they do not split the vote): the first at
// once, the k-th after k·campaignStagger if no leader has appeared by then. A survivor
// whose log is behind another's loses its campaign (the one with the longer log refuses
// its vote), and the next one in the order, perhaps the one with the longer log, tries.
//
// A leader that goes right after its election may go before its first AppendEntries
// reached this node, which then knows no leader: it counts as this group's leader when
// this node voted for it in the current term (it was a candidate then, and may have
// won).
//
// Both cases left a group without a leader until its heartbeat timeout
// (TestGroupsElectWithoutWaitingForTimeouts failed so beside busy loops, 4 runs in 40:
// the first survivor's log was one entry behind the second's, or it had not heard
// from the new leader yet).
func (p *Partition) leaderGone(pd peerDowner, addr raft.ServerAddress) {
	if !p.followsGone(addr) {
		return
	}
	f := p.raft.GetConfiguration()
	if f.Error() != nil {
		return
	}
	var survivors []raft.ServerID
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter && s.Address != addr {
			survivors = append(survivors, s.ID)
		}
	}
	slices.Sort(survivors)
	rank := slices.Index(survivors, p.cfg.NodeID)
	switch {
	case rank < 0:
		return // not a voter
	case rank == 0:
		p.campaignNow(pd, addr)
		return
	}
	p.goTracked(func() {
		t := time.NewTimer(time.Duration(rank) * campaignStagger)
		defer t.Stop()
		select {
		case <-p.closing:
			return
		case <-t.C:
		}
		// Still no leader: the survivors before this one lost or did not campaign. A
		// candidate this node voted for meanwhile may have won without this node
		// hearing of it yet; it is left to win.
		if p.stillLeaderless(addr) {
			p.campaignNow(pd, addr)
		}
	})
}

// campaignStagger is how long the k-th survivor of a gone leader waits for the k-1
// before it to have elected one (an election is a round trip to each voter and an
// fsync of the vote on each, a few milliseconds; this leaves room for a busy machine).
const campaignStagger = 500 * time.Millisecond

// followsGone reports whether this node is a follower whose leader is addr, or which
// knows no leader and voted for addr in the current term.
func (p *Partition) followsGone(addr raft.ServerAddress) bool {
	return p.followerOf(addr, false)
}

// stillLeaderless reports whether this node, which followed addr, is a follower that
// knows no other leader and has voted for no other candidate in its current term.
func (p *Partition) stillLeaderless(addr raft.ServerAddress) bool {
	return p.followerOf(addr, true)
}

// followerOf reports whether this node is a follower whose leader is addr, or which
// knows no leader and voted for addr in its current term (or, with unvoted, did not
// vote in it at all).
func (p *Partition) followerOf(addr raft.ServerAddress, unvoted bool) bool {
	if p.raft.State() != raft.Follower {
		return false
	}
	leader, _ := p.raft.LeaderWithID()
	if leader == addr {
		return true
	}
	cand, voted := p.currentVote()
	return leader == "" && ((voted && cand == addr) || (unvoted && !voted))
}

func (p *Partition) campaignNow(pd peerDowner, addr raft.ServerAddress) {
	p.logger.Info("leader's node is gone: campaigning now", "leader", addr)
	if err := pd.CampaignNow(); err != nil {
		p.logger.Debug("campaign", "err", err)
	}
}

// The keys under which hashicorp/raft records its vote in the stable store (raft.go,
// persistVote): the term, and the candidate's address as its transport encodes it.
var (
	keyLastVoteTerm = []byte("LastVoteTerm")
	keyLastVoteCand = []byte("LastVoteCand")
)

// currentVote returns the candidate this node voted for in its current term, if it
// voted in it.
func (p *Partition) currentVote() (raft.ServerAddress, bool) {
	term, err := p.store.GetUint64(keyLastVoteTerm)
	if err != nil || term == 0 || term != p.raft.CurrentTerm() {
		return "", false
	}
	cand, err := p.store.Get(keyLastVoteCand)
	if err != nil {
		return "", false
	}
	return p.trans.DecodePeer(cand), true
}
