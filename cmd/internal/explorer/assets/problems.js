// The overview's Problems list, apart from the page so that a test can run it with
// Node.js (cmd/internal/explorer/problems_test.go): what an operator should look at,
// grouped by cause. One dead node is one line for the node and one per kind of harm
// it does, each naming the node and how many partition groups it affects, not a line
// per group (a node leading or holding 18 groups made 37 lines).
'use strict';

const Problems = (() => {
  const LAG_ENTRIES = 1000; // a replica this far behind is lagging (as /readyz counts it)
  const SHOWN = 3; // group names listed in a line before "and N more"

  function some(names) {
    return names.length <= SHOWN ? names.join(', ') : `${names.slice(0, SHOWN).join(', ')} and ${names.length - SHOWN} more`;
  }

  function groups(n) { return n === 1 ? '1 partition group' : `${n} partition groups`; }

  // add appends name to the list under key in m.
  function add(m, key, name) {
    if (!m.has(key)) m.set(key, []);
    m.get(key).push(name);
  }

  // problems lists dead nodes, an uneven spread of partition leadership, replicas that
  // are unreachable or lagging (one line per node), partitions short of a leader or of
  // reachable voters (one line per cause) and growing dead-letter queues. st is the cluster status, parts the partitions, stats
  // the node and entity counters (nodes and ents are Maps). Each item is {kind, text}.
  function problems(st, parts, stats) {
    const out = [];
    for (const m of (st && st.members) || []) {
      if (m.state === 'dead' || m.state === 'suspect' || m.state === 'left') out.push({ kind: 'dead-node', text: `Node ${m.id} is ${m.state}` });
      else if (m.state === 'removed') out.push({ kind: 'dead-node', text: `Node ${m.id} was removed from the cluster but still runs: stop it` });
    }
    // Partition leadership spread over the live nodes that hold replicas, with the
    // bounds the metadata leader's balancing keeps (20 % of an even share, at least one
    // group): past them for longer than a restart takes, something keeps it uneven.
    const live = ((st && st.members) || []).filter((m) => m.state === 'alive' && m.replicas > 0);
    const total = live.reduce((a, m) => a + (m.leading || 0), 0);
    if (live.length > 1 && total > 0) {
      const even = total / live.length;
      const slack = Math.max(1, 0.2 * even);
      if (live.some((m) => (m.leading || 0) > even + slack || (m.leading || 0) < even - slack)) {
        out.push({ kind: 'leader-skew', text: `Partition leadership is uneven: ${live.map((m) => `${m.id} leads ${m.leading || 0}`).join(', ')} of ${total} groups (even share ${even.toFixed(1)})` });
      }
    }
    if (stats) {
      for (const n of stats.nodes.values()) {
        if (n.error && !out.some((p) => p.text.startsWith(`Node ${n.node} `))) out.push({ kind: 'dead-node', text: `Node ${n.node} does not answer: ${n.error}` });
      }
    }
    const unreachable = new Map(); // node -> group names
    const lagging = new Map(); // node -> group names
    const maxLag = new Map(); // node -> its largest lag
    const noLeader = [];
    const short = new Map(); // the unreachable nodes, joined -> group names
    const fewer = new Map(); // "have of want" -> group names
    for (const p of parts || []) {
      const name = `${p.entity} ${p.index}`;
      const gone = [];
      let reachable = 0;
      for (const r of p.replicas) {
        if (r.unreachable) {
          add(unreachable, r.node, name);
          gone.push(r.node);
        } else if (p.leader && r.node !== p.leader && r.lag >= LAG_ENTRIES) {
          add(lagging, r.node, name);
          maxLag.set(r.node, Math.max(maxLag.get(r.node) || 0, r.lag));
        }
        if (r.voter && !r.unreachable) reachable++;
      }
      if (!p.leader) noLeader.push(name);
      else if (reachable < p.replicas.length) add(short, gone.sort().join(', ') || 'a non-voter', name);
      else if (p.underReplicated) add(fewer, `${p.replicas.length} replicas, want ${p.wantReplicas}`, name);
    }
    for (const [node, names] of unreachable) {
      out.push({ kind: 'unreachable-replica', text: `Replicas on ${node} are unreachable in ${groups(names.length)} (${some(names)})` });
    }
    for (const [node, names] of lagging) {
      out.push({ kind: 'lagging-replica', text: `Replicas on ${node} lag up to ${maxLag.get(node)} entries in ${groups(names.length)} (${some(names)})` });
    }
    if (noLeader.length) out.push({ kind: 'under-replicated', text: `${groups(noLeader.length)} ${noLeader.length === 1 ? 'has' : 'have'} no leader (${some(noLeader)})` });
    for (const [nodes, names] of short) {
      out.push({ kind: 'under-replicated', text: `${groups(names.length)} ${names.length === 1 ? 'is' : 'are'} under-replicated, a replica on ${nodes} unreachable (${some(names)})` });
    }
    for (const [why, names] of fewer) {
      out.push({ kind: 'under-replicated', text: `${groups(names.length)} ${names.length === 1 ? 'is' : 'are'} under-replicated: ${why} (${some(names)})` });
    }
    if (stats) {
      for (const e of stats.ents.values()) {
        if (e.dlqGrowing) out.push({ kind: 'dlq-growing', text: `Dead-letter queue of ${e.subscription ? e.entity + '/' + e.subscription : e.entity} is growing (${e.deadLetter})` });
      }
    }
    return out;
  }

  // rebalance summarizes GET /$cluster/rebalance for the cluster view: its state
  // ('balanced', 'moving', 'uneven' or 'off'), a sentence saying it, the nodes away
  // from the even share, and the moves under way, one line per group ("orders#2
  // (group 7): n4 catching up, n1 leaving"). rb null (a node of an earlier release,
  // which has no such endpoint) gives null.
  function rebalance(rb) {
    if (!rb) return null;
    const moves = rb.moves || [];
    const share = (x) => (Math.round(x * 10) / 10).toString();
    const even = `an even share is ${share(rb.evenReplicas)} replicas and ${share(rb.evenLeading)} leaderships per node`;
    const uneven = (rb.nodes || []).filter((n) => n.state === 'up' && (!n.replicasEven || !n.leadingEven))
      .map((n) => `${n.id} holds ${n.replicas} replicas, leads ${n.leading}`);
    const draining = (rb.nodes || []).filter((n) => n.state === 'draining').map((n) => n.id);
    let state;
    let text;
    if (moves.length) {
      state = 'moving';
      text = `Moving replicas of ${groups(moves.length)} (at most ${rb.maxMoves} at once); ${even}.`;
    } else if (rb.done) {
      state = 'balanced';
      text = `Balanced: every node holds replicas and leads groups within 20 % of an even share (${share(rb.evenReplicas)} replicas, ${share(rb.evenLeading)} leaderships); no move under way.`;
    } else if (rb.maxMoves === 0) {
      state = 'off';
      text = `Not balanced, and automatic moves are off (--rebalance-moves 0); ${even}.`;
    } else {
      state = 'uneven';
      text = `Not balanced yet; ${even}.`;
    }
    if (draining.length) text += ` Draining: ${draining.join(', ')}.`;
    const lines = moves.map((m) => {
      const parts = [];
      for (const n of m.joining || []) parts.push(`${n} joining`);
      for (const n of m.catchingUp || []) parts.push(`${n} catching up`);
      for (const n of m.leaving || []) parts.push(`${n} leaving`);
      return { entity: m.entity, index: m.index, groupId: m.groupId, text: `${m.entity}#${m.index} (group ${m.groupId}): ${parts.join(', ')}` };
    });
    return { state, text, uneven, moves: lines };
  }

  return { problems, rebalance, LAG_ENTRIES };
})();

if (typeof module === 'object') module.exports = Problems; // Node.js, for the test
