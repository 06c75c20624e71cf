// Package placement decides which nodes hold the replicas of each partition group. It
// is a pure choice over a View, the live nodes with what the metadata says of them
// (draining, replicas placed, groups preferring them as leader): no clock, no I/O, no
// randomness, no goroutine.
//
// The metadata leader (package cluster) gathers the View from gossip and the metadata
// state, calls Place for the partitions of a new entity, Add to raise a group placed
// on fewer nodes than --replicas and Spread to move a replica into a zone a group lacks,
// and proposes the result as a metadata command.
//
// The rules, in order: replicas on distinct nodes; nodes that are not draining first (a
// draining node is chosen only when the others are too few, so that an entity created
// during a rolling restart still gets its replication factor); distinct zones where the
// zones allow; then the least loaded node. A group's first replica, its preferred
// leader, is a node that is not draining when the group has one, the one preferred by
// the fewest groups, so that leaders spread evenly.
//
// Spread chooses the move that repairs a group placed in fewer zones than the live nodes
// allow (one replica of a zone holding two replaced by a node of a zone holding none);
// SwapVoters the metadata voter to promote and the one to demote so that the metadata
// voters spread over zones. Rebalance chooses a replica move from the most loaded node
// to the least loaded one while some node holds a share of the replicas more than 20 %
// (Slack) off even (Balanced), as when nodes join a running cluster. Package cluster
// applies them through its add-then-remove membership steps.
//
// Imports: the standard library only (test/deps_test.go).
package placement
