// Package hosts runs each node of a test on a host of its own: a Linux network
// namespace with its own address, name resolution, data directory and process, wired
// to the other hosts through a bridge, so that a test can cut, slow and kill the
// network and the processes of single nodes, as Jepsen does with real machines.
//
// # Topology
//
// New(t, Config{N: 3}) creates, all named after Config.Prefix (default "qbc"):
//
//   - a namespace PREFIX-br holding the bridge br0 (a namespace of its own, so that no
//     bridge ever appears in the machine's root namespace);
//   - for host i a namespace PREFIX-i with loopback up and eth0 = Subnet.(i+1)/24, the
//     other end of its veth plugged into br0;
//   - a veth PREFIX-rt in the root namespace with Subnet.254/24, plugged into br0 too:
//     the test process reaches every host directly (SDK clients, admin API) with no
//     forwarder in between. The only route it adds to the root namespace is the
//     on-link Subnet/24, which exists nowhere but on this bridge;
//   - /etc/netns/PREFIX-i/hosts, which `ip netns exec` bind-mounts over /etc/hosts for
//     the processes of host i: every host's name (qb-0, qb-1, ... by default, as a
//     StatefulSet's pods are named, plus Config.Aliases such as headless-service
//     FQDNs) resolves to its address, so nodes advertise and join by name.
//
// With Config.Proxy, host i resolves each peer's name to 127.0.1.(j+1), where a
// userspace TCP proxy (Link) listens inside host i's namespace and forwards to peer
// j's real address, dialling from host i's namespace (so nftables rules still apply).
// A Link can delay, reorder (a different delay per connection) and black-hole traffic
// while keeping the connections open. Only TCP to a peer's name goes through it:
// quorumbus's Raft, RPC and forwarding; its gossip UDP uses addresses, not names.
//
// Network faults (Isolate, Drop, Loss, Heal) are nftables rules in one host's
// namespace (table inet PREFIX); process faults (Kill, Pause, Resume, Stop, Wipe,
// Restart) act on the host's process group.
//
// With Config.LazyFS, each host's data directory is a test/lazyfs mount (a lazyfs
// process per host, run through test/lazyfsctl, backed by data.disk beside it), and
// PowerLoss kills the process and drops every write to it that was not fsynced.
//
// # Cleanup
//
// Everything is removed by t.Cleanup, also when the test fails: processes, namespaces,
// veths, /etc/netns entries, lazyfs mounts. New first sweeps leftovers with the same prefix (a test
// process killed by a timeout cannot clean up), under an flock on
// /run/PREFIX-hosts.lock so that two suites never share (or sweep) one prefix. Nothing
// is sent anywhere but inside these namespaces and loopback.
//
// Requirements: root, iproute2, nftables (Loss, Isolate, Drop). Tests that use the
// package should call Available first and skip when it reports an error.
package hosts
