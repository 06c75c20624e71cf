package main

import (
	"net"
	"testing"
)

func TestParseBytes(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
	}{{"", 0}, {"0", 0}, {"1073741824", 1 << 30}, {"2GiB", 2 << 30}, {"512 MiB", 512 << 20},
		{"1500MB", 1500e6}, {"64KiB", 64 << 10}, {"10B", 10}} {
		got, err := parseBytes(c.in)
		if err != nil || got != c.want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{"lots", "-1GiB", "1.5GiB", "GiB", "99999999999TiB"} {
		if _, err := parseBytes(in); err == nil {
			t.Errorf("parseBytes(%q): no error", in)
		}
	}
}

func TestMemoryFlagsValidated(t *testing.T) {
	for _, args := range [][]string{{"--memory-limit", "lots"}, {"--gc-headroom", "-1"}, {"--gc-headroom", "101"},
		{"--body-memory-budget-mb", "-1"}, {"--body-disk-budget-mb", "-5", "--body-memory-budget-mb", "1"},
		{"--body-disk-budget-mb", "100"}} {
		cfg, err := loadConfig(args, func(string) string { return "" }, nopWriter{})
		if err == nil {
			err = cfg.Validate()
		}
		if err == nil {
			t.Errorf("%v: accepted", args)
		}
	}
}

// The body budgets reach cluster.Config in bytes, from flags and from the environment.
func TestBodyBudgetsReachCluster(t *testing.T) {
	env := map[string]string{"QUORUMBUS_BODY_DISK_BUDGET_MB": "2048"}
	cfg, err := loadConfig([]string{"--body-memory-budget-mb", "256"}, func(k string) string { return env[k] }, nopWriter{})
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	cc := clusterConfig(cfg, &net.TCPAddr{}, &net.TCPAddr{})
	if cc.BodyMemoryBudget != 256<<20 || cc.BodyDiskBudget != 2048<<20 {
		t.Fatalf("budgets %d, %d; want 256 MiB and 2 GiB", cc.BodyMemoryBudget, cc.BodyDiskBudget)
	}
}

type nopWriter struct{}

func (nopWriter) Write(p []byte) (int, error) { return len(p), nil }

func TestGCPercent(t *testing.T) {
	for _, c := range []struct {
		live uint64
		pct  int
		want int
	}{
		{0, 5, 100},
		{4 << 20, 5, 100},   // small heap: the 8 MiB floor is more than doubling it
		{16 << 20, 5, 50},   // floor: 8 MiB over 16 MiB live
		{1 << 30, 5, 5},     // 1 GiB live: 5 %
		{1 << 30, 100, 100}, // never later than the runtime's default
		{1 << 40, 5, 5},     // no overflow
		{100 << 30, 0, 1},   // at least 1
	} {
		if got := gcPercent(c.live, c.pct); got != c.want {
			t.Errorf("gcPercent(%d, %d) = %d, want %d", c.live, c.pct, got, c.want)
		}
	}
}
