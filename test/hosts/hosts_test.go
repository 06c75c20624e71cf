package hosts_test

import (
	"net"
	"os"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/test/harness"
	"github.com/quorumbus/quorumbus/test/hosts"
)

// needHosts skips unless QUORUMBUS_HOSTS=1 (make chaos sets it): the test needs root,
// iproute2 and nftables, and changes the machine's namespaces while it runs.
func needHosts(t *testing.T) {
	t.Helper()
	if os.Getenv("QUORUMBUS_HOSTS") != "1" {
		t.Skip("set QUORUMBUS_HOSTS=1 (make chaos) to run tests on network namespaces")
	}
	if err := hosts.Available(); err != nil {
		t.Skip(err)
	}
}

// Three nodes on three hosts form a cluster by name through the proxies, their admin API
// answers the root namespace, and an isolated host is unreachable until healed.
func TestHostsFormAClusterByName(t *testing.T) {
	needHosts(t)
	n := hosts.New(t, hosts.Config{N: 3, Prefix: "qbt", Subnet: "10.77.1", Proxy: true})
	if err := n.StartQuorumbus(90*time.Second, "--log-level", "info"); err != nil {
		t.Fatal(err)
	}
	// Slow every link from host 0 a little: the cluster still works.
	for j := 1; j < 3; j++ {
		n.Link(0, j).Set(hosts.LinkState{Delay: 20 * time.Millisecond, Jitter: 20 * time.Millisecond})
	}
	if err := n.Host(2).Isolate(); err != nil {
		t.Fatal(err)
	}
	if conn, err := net.DialTimeout("tcp", n.Host(2).IP+":5300", time.Second); err == nil {
		conn.Close()
		t.Fatal("an isolated host accepted a connection from the root namespace")
	}
	if err := n.HealAll(); err != nil {
		t.Fatal(err)
	}
	if conn, err := net.DialTimeout("tcp", n.Host(2).IP+":5300", 2*time.Second); err != nil {
		t.Fatalf("healed host unreachable: %v", err)
	} else {
		conn.Close()
	}
	n.Host(0).Kill()
	if err := n.Host(0).Restart(); err != nil {
		t.Fatal(err)
	}
	if err := n.Host(0).AwaitReady(60 * time.Second); err != nil {
		t.Fatal(err)
	}
}

// With LazyFS, a process in the host's namespace writes to its data directory through
// the lazy file system: PowerLoss keeps what it fsynced and drops the rest.
func TestHostsPowerLossDropsUnsynced(t *testing.T) {
	needHosts(t)
	n := hosts.New(t, hosts.Config{N: 1, Prefix: "qbl", Subnet: "10.77.2", LazyFS: true})
	h := n.Host(0)
	d := h.DataDir()
	script := "printf kept > " + d + "/synced && sync " + d + "/synced && printf lost > " + d + "/unsynced && touch " + d + "/written && exec sleep 600"
	if err := h.Launch(nil, "sh", "-c", script); err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, 10*time.Second, func() error {
		_, err := os.Stat(d + "/written")
		return err
	})
	if b, _ := os.ReadFile(d + "/unsynced"); string(b) != "lost" {
		t.Fatalf("before the power loss: %q", b)
	}
	dropped, err := h.PowerLoss()
	if err != nil {
		t.Fatal(err)
	}
	if h.Running() || dropped["unsynced"] == 0 || dropped["synced"] != 0 {
		t.Fatalf("after PowerLoss: running %v, dropped %v, want a page of unsynced only", h.Running(), dropped)
	}
	for name, want := range map[string]string{"synced": "kept", "unsynced": ""} {
		if b, err := os.ReadFile(d + "/" + name); err != nil || string(b) != want {
			t.Errorf("%s after the power loss: %q, %v; want %q", name, b, err, want)
		}
	}
}
