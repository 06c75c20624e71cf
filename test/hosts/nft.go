package hosts

import (
	"bytes"
	"fmt"
	"os/exec"
	"strings"
)

// Network faults are nftables rules in the host's own namespace: table inet PREFIX with
// an input and an output chain. Loopback is never filtered (the host's processes and
// its proxies talk over it); everything else is, including the test process's clients
// from the root namespace, as a real partition would cut them too.

func nftBase(prefix string) string {
	return fmt.Sprintf(`table inet %[1]s {
	chain in { type filter hook input priority 0; policy accept; }
	chain out { type filter hook output priority 0; policy accept; }
}
`, prefix)
}

func (h *Host) nft(script string) error {
	cmd := exec.Command("ip", "netns", "exec", h.NS, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("hosts: nft on %s: %v: %s\n%s", h.Name, err, strings.TrimSpace(out.String()), script)
	}
	return nil
}

func (h *Host) rules(in, out []string) error {
	t := h.net.cfg.Prefix
	var b strings.Builder
	for _, r := range in {
		fmt.Fprintf(&b, "add rule inet %s in %s\n", t, r)
	}
	for _, r := range out {
		fmt.Fprintf(&b, "add rule inet %s out %s\n", t, r)
	}
	return h.nft(b.String())
}

// Direction says which traffic of a host a rule drops.
type Direction int

const (
	// Both drops what the host sends to the peer and what it receives from it.
	Both Direction = iota
	// Inbound drops only what the host receives.
	Inbound
	// Outbound drops only what the host sends.
	Outbound
)

func (d Direction) String() string {
	return [...]string{"both", "inbound", "outbound"}[d]
}

// Isolate drops everything the host sends or receives except on loopback: peers and
// clients alike.
func (h *Host) Isolate() error {
	return h.rules([]string{`iifname != "lo" drop`}, []string{`oifname != "lo" drop`})
}

// Drop drops the host's traffic with peer in direction d (rules on this host only; a
// one-way partition is Drop(peer, Inbound) or Drop(peer, Outbound)).
func (h *Host) Drop(peer *Host, d Direction) error {
	var in, out []string
	if d != Outbound {
		in = append(in, "ip saddr "+peer.IP+" drop")
	}
	if d != Inbound {
		out = append(out, "ip daddr "+peer.IP+" drop")
	}
	return h.rules(in, out)
}

// Loss drops each packet the host sends or receives off loopback with probability
// percent/100 (nftables numgen random).
func (h *Host) Loss(percent int, d Direction) error {
	r := fmt.Sprintf(`numgen random mod 100 < %d drop`, percent)
	var in, out []string
	if d != Outbound {
		in = append(in, `iifname != "lo" `+r)
	}
	if d != Inbound {
		out = append(out, `oifname != "lo" `+r)
	}
	return h.rules(in, out)
}

// Heal removes every nftables rule of the host.
func (h *Host) Heal() error {
	t := h.net.cfg.Prefix
	return h.nft(fmt.Sprintf("flush chain inet %s in\nflush chain inet %s out\n", t, t))
}
