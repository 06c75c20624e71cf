package transport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
)

// Coalesced heartbeats. hashicorp/raft's leader sends each follower of each group a
// heartbeat every HeartbeatTimeout/10 to 2·HeartbeatTimeout/10 (100 to 200 ms), and
// steps down when a quorum has not answered one within LeaderLeaseTimeout; a follower
// that hears nothing for HeartbeatTimeout starts an election. With a thousand groups
// that is thousands of RPCs a second between two nodes that have nothing to say.
//
// Between two nodes with Groups, the heartbeats of all groups one node leads and the
// other follows travel as one beat frame every beatInterval: for each group the term
// and leader its latest heartbeat named, included only while the group's raft on the
// sending node is still leader at that term (GroupTransport.SetLeaderState). The
// receiving node hands each to its group's heartbeat handler, exactly as if that
// heartbeat had arrived, and answers all of them in one frame. On the leader, raft's
// heartbeat calls are then answered from the latest answer the follower gave for that
// group and term, if it is at most beatFresh old; otherwise the heartbeat goes out as
// an RPC of its own, as before. So a follower hears from a live leader every
// beatInterval, a leader's lease rests on answers at most beatFresh older than raft
// thinks, and a group whose leader node dies or stops leading it hears nothing more,
// and elects, as with raft's own heartbeats. Nothing else changes: appends, votes,
// snapshots and timeouts are RPCs of their own, and a heartbeat that finds no fresh
// answer is one too.
//
// Beat frame (kindBeat, from the node that dialled): uint32 count, then per group
// uint32 group, uint64 term, byte protocol version, and the leader's ID and address
// as a byte length and bytes each. Answer (kindBeatAck, same sequence): uint32 count,
// then per group uint32 group, uint64 the term beaten, uint64 the follower's term,
// uint64 its last log index, and a flags byte (1 known, 2 success, 4 no retry backoff).

const (
	kindBeat    byte = 4
	kindBeatAck byte = 5

	beatInterval = 100 * time.Millisecond
	// beatFresh is how old a follower's answer may be and still answer a heartbeat:
	// beatInterval, plus the round trip and scheduling delays of a busy node.
	beatFresh = 300 * time.Millisecond
	// beatKeep is how long a group keeps being beaten after raft last asked for a
	// heartbeat to that peer (the leader-state check stops it sooner).
	beatKeep = time.Second
)

const (
	ackKnown   = 1
	ackSuccess = 2
	ackNoRetry = 4
)

// beat is one group's heartbeat to one peer.
type beat struct {
	req    raft.AppendEntriesRequest // the latest heartbeat raft asked for
	wanted time.Time                 // when it asked
	acked  time.Time                 // when the peer last answered one at req.Term
	resp   raft.AppendEntriesResponse
}

// SetLeaderState gives the transport a way to ask whether the group's raft leads it,
// and at which term: a coalesced heartbeat goes out only while it does. Without it the
// group's heartbeats are RPCs of their own.
func (t *GroupTransport) SetLeaderState(f func() (term uint64, leader bool)) {
	t.mu.Lock()
	t.leaderState = f
	t.mu.Unlock()
}

// leading reports whether the group's raft leads it at term.
func (t *GroupTransport) leading(term uint64) bool {
	t.mu.Lock()
	f := t.leaderState
	t.mu.Unlock()
	if f == nil {
		return false
	}
	cur, ok := f()
	return ok && cur == term
}

// cachedHeartbeat answers a heartbeat of group from the peer's latest answer to a
// beat, if fresh, and records it to be beaten.
func (c *conn) cachedHeartbeat(t *GroupTransport, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) bool {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.beats == nil {
		return false // an accepted connection: not ours to beat over
	}
	b := c.beats[t.id]
	if b == nil {
		b = &beat{}
		c.beats[t.id] = b
		c.beaters[t.id] = t
	}
	if b.req.Term != args.Term {
		b.acked = time.Time{}
	}
	b.req, b.wanted = *args, now
	if b.acked.IsZero() || now.Sub(b.acked) > beatFresh {
		return false
	}
	*resp = b.resp
	return true
}

// heartbeatAnswered records the answer to a heartbeat sent as an RPC of its own.
func (c *conn) heartbeatAnswered(group uint32, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if b := c.beats[group]; b != nil && b.req.Term == args.Term {
		b.acked, b.resp = time.Now(), *resp
	}
}

// beatLoop sends a beat frame every beatInterval while there are groups to beat.
func (c *conn) beatLoop() {
	tick := time.NewTicker(beatInterval)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
		case <-c.dead:
			return
		}
		if f := c.beatFrame(); f != nil {
			if !c.send(f, true) {
				return
			}
			c.g.stats.beatFrames.Add(1)
		}
	}
}

// beatFrame builds the next beat frame, nil when no group needs one; it forgets the
// groups raft stopped asking for.
func (c *conn) beatFrame() []byte {
	type entry struct {
		t   *GroupTransport
		req raft.AppendEntriesRequest
	}
	now := time.Now()
	var due []entry
	c.mu.Lock()
	for id, b := range c.beats {
		if now.Sub(b.wanted) > beatKeep {
			delete(c.beats, id)
			delete(c.beaters, id)
			continue
		}
		due = append(due, entry{c.beaters[id], b.req})
	}
	c.seq++
	seq := c.seq
	c.mu.Unlock()
	body := make([]byte, 4, 4+len(due)*48)
	n := 0
	for _, e := range due {
		if !e.t.leading(e.req.Term) {
			continue
		}
		n++
		body = binary.BigEndian.AppendUint32(body, e.t.id)
		body = binary.BigEndian.AppendUint64(body, e.req.Term)
		body = append(body, byte(e.req.RPCHeader.ProtocolVersion))
		body = appendShort(body, e.req.RPCHeader.ID)
		body = appendShort(body, e.req.RPCHeader.Addr)
	}
	if n == 0 {
		return nil
	}
	binary.BigEndian.PutUint32(body, uint32(n))
	return frame(kindBeat, seq, 0, 0, body)
}

func appendShort(b, s []byte) []byte {
	if len(s) > 255 {
		s = s[:255]
	}
	return append(append(b, byte(len(s))), s...)
}

// beatAcked records the answers of a beat-ack frame.
func (c *conn) beatAcked(body []byte) error {
	if len(body) < 4 {
		return errBadBeat
	}
	n := int(binary.BigEndian.Uint32(body))
	body = body[4:]
	if len(body) != n*29 {
		return errBadBeat
	}
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := 0; i < n; i++ {
		e := body[i*29:]
		group, beaten := binary.BigEndian.Uint32(e), binary.BigEndian.Uint64(e[4:])
		flags := e[28]
		b := c.beats[group]
		if b == nil || b.req.Term != beaten || flags&ackKnown == 0 {
			continue
		}
		b.acked = now
		b.resp = raft.AppendEntriesResponse{
			Term: binary.BigEndian.Uint64(e[12:]), LastLog: binary.BigEndian.Uint64(e[20:]),
			Success: flags&ackSuccess != 0, NoRetryBackoff: flags&ackNoRetry != 0,
		}
	}
	return nil
}

var errBadBeat = errors.New("transport: malformed beat frame")

// serveBeat hands every heartbeat of a beat frame to its group and frames the answers.
func (g *Groups) serveBeat(seq uint64, body []byte) ([]byte, error) {
	if len(body) < 4 {
		return nil, errBadBeat
	}
	n := int(binary.BigEndian.Uint32(body))
	p := body[4:]
	out := make([]byte, 4, 4+n*29)
	binary.BigEndian.PutUint32(out, uint32(n))
	short := func() ([]byte, error) {
		if len(p) < 1 || len(p) < 1+int(p[0]) {
			return nil, errBadBeat
		}
		s := p[1 : 1+int(p[0])]
		p = p[1+int(p[0]):]
		return s, nil
	}
	for i := 0; i < n; i++ {
		if len(p) < 13 {
			return nil, errBadBeat
		}
		group, term, pv := binary.BigEndian.Uint32(p), binary.BigEndian.Uint64(p[4:]), p[12]
		p = p[13:]
		id, err := short()
		if err != nil {
			return nil, err
		}
		addr, err := short()
		if err != nil {
			return nil, err
		}
		var resp raft.AppendEntriesResponse
		var flags byte
		if t := g.group(group); t != nil {
			if fn := t.heartbeatFn(); fn != nil {
				g.stats.beatsServed.Add(1)
				respCh := make(chan raft.RPCResponse, 1)
				req := &raft.AppendEntriesRequest{
					RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersion(pv), ID: id, Addr: addr},
					Term:      term,
				}
				//lint:ignore SA1019 raft's own heartbeat sets it too, for older peers
				req.Leader = addr
				fn(raft.RPC{
					Command:  req,
					RespChan: respCh,
				})
				select {
				case r := <-respCh:
					if ar, ok := r.Response.(*raft.AppendEntriesResponse); ok && r.Error == nil {
						resp, flags = *ar, ackKnown
					}
				default: // raft answers a heartbeat before it returns; none: shut down
				}
			}
		}
		if resp.Success {
			flags |= ackSuccess
		}
		if resp.NoRetryBackoff {
			flags |= ackNoRetry
		}
		out = binary.BigEndian.AppendUint32(out, group)
		out = binary.BigEndian.AppendUint64(out, term)
		out = binary.BigEndian.AppendUint64(out, resp.Term)
		out = binary.BigEndian.AppendUint64(out, resp.LastLog)
		out = append(out, flags)
	}
	if len(p) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", errBadBeat, len(p))
	}
	return frame(kindBeatAck, seq, 0, 0, out), nil
}
