package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/quorumbus/quorumbus/test/harness"
	"github.com/quorumbus/quorumbus/test/hosts"
)

// The suite's knobs, from the environment (make chaos and make chaos-long set them).
//
//	QUORUMBUS_CHAOS=1          run at all
//	CHAOS_SEEDS=1,random       seeds, one run each ("random" picks and prints one)
//	CHAOS_DURATION=30m         mixed faults for this long instead of the standard plan
//	CHAOS_RESULTS=dir          where failing runs keep their history and logs
//	CHAOS_STATS=file           a JSON line of figures per run is appended there
//	CHAOS_NODES=3              hosts per run
//	CHAOS_PREFIX=qbc           names of the namespaces (two suites at once need two)
//	CHAOS_SUBNET=10.77.0       the hosts' /24 (two suites at once need two)
//	CHAOS_LAZYFS=0             data directories on the real disk, without power-loss
//	                           (to tell whether a finding needs test/lazyfs)
//	CHAOS_MEMBERSHIP=0         no spare host: the add-remove fault only says so
//	CHAOS_LOG_LEVEL=info       the nodes' --log-level (debug shows every group's raft)
func env(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func TestChaos(t *testing.T) {
	if os.Getenv("QUORUMBUS_CHAOS") != "1" {
		t.Skip("set QUORUMBUS_CHAOS=1 (make chaos) to run the fault suite: it needs root, iproute2 and nftables")
	}
	if err := hosts.Available(); err != nil {
		t.Fatal(err)
	}
	harness.Binary(t)
	var dur time.Duration
	if d := os.Getenv("CHAOS_DURATION"); d != "" {
		var err error
		if dur, err = time.ParseDuration(d); err != nil {
			t.Fatalf("CHAOS_DURATION: %v", err)
		}
	}
	for _, s := range strings.Split(env("CHAOS_SEEDS", "1,random"), ",") {
		var seed uint64
		if s == "random" {
			seed = rand.Uint64() % 1_000_000
		} else {
			v, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				t.Fatalf("CHAOS_SEEDS: %q", s)
			}
			seed = v
		}
		if dur > 0 {
			fmt.Printf("chaos: seed %d (rerun: make chaos-long CHAOS_SEEDS=%d DURATION=%v)\n", seed, seed, dur)
		} else {
			fmt.Printf("chaos: seed %d (rerun: make chaos CHAOS_SEEDS=%d)\n", seed, seed)
		}
		t.Run("seed="+strconv.FormatUint(seed, 10), func(t *testing.T) { runChaos(t, seed, dur) })
	}
	fmt.Print(table(runs))
}

// runs are the summaries of this process's runs, for the closing table.
var runs []summary

// table is the figures of docs/guarantees.md as Markdown: one row per fault (or "mixed"
// for every combination), the operations started while it was active.
func table(runs []summary) string {
	type row struct {
		Stats
		runs, converged int
	}
	rows := map[string]*row{}
	for _, r := range runs {
		seen := map[string]bool{}
		for f, s := range r.ByFault {
			if strings.Contains(f, "+") {
				f = "mixed (two at once)"
			}
			if rows[f] == nil {
				rows[f] = &row{}
			}
			rows[f].add(*s)
			if !seen[f] {
				seen[f] = true
				rows[f].runs++
				if r.Converged {
					rows[f].converged++
				}
			}
		}
	}
	var names []string
	for f := range rows {
		names = append(names, f)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("| fault | runs | acknowledged | lost | redeliveries (explained) | unexplained duplicates | enqueued twice | converged |\n|---|---|---|---|---|---|---|---|\n")
	for _, f := range names {
		r := rows[f]
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | %d | %d of %d |\n", f, r.runs, r.Acked, r.Lost, r.DupOK, r.DupBad, r.Enqueued2, r.converged, r.runs)
	}
	conv := 0
	for _, r := range runs {
		if r.Converged {
			conv++
		}
	}
	fmt.Fprintf(&b, "\nreplicas converged (one digest per group, metadata leader agreed) in %d of %d runs\n", conv, len(runs))
	return b.String()
}

// segment is one step of the nemesis's plan: faults applied together, held, healed.
type segment []fault

// plan is the standard run: every fault alone once, in a seeded order, then mixed pairs;
// with a duration, mixed segments (one or two faults) until it has passed.
func plan(rng *rand.Rand, mixed int) []segment {
	var out []segment
	for _, i := range rng.Perm(len(faults)) {
		out = append(out, segment{faults[i]})
	}
	for len(out) < len(faults)+mixed {
		out = append(out, mixedSegment(rng))
	}
	return out
}

func mixedSegment(rng *rand.Rand) segment {
	for {
		a, b := faults[rng.IntN(len(faults))], faults[rng.IntN(len(faults))]
		if a.exclusive || b.exclusive || a.name == b.name {
			if a.exclusive && rng.IntN(3) == 0 {
				return segment{a}
			}
			continue
		}
		return segment{a, b}
	}
}

func (s segment) String() string {
	var n []string
	for _, f := range s {
		n = append(n, f.name)
	}
	return strings.Join(n, "+")
}

func runChaos(t *testing.T, seed uint64, dur time.Duration) {
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	nodes, _ := strconv.Atoi(env("CHAOS_NODES", "3"))
	hist := &History{}
	spare := 0
	if env("CHAOS_MEMBERSHIP", "1") != "0" {
		spare = 1 // a host for the node the add-remove fault adds
	}
	net := hosts.New(t, hosts.Config{N: nodes + spare, Spare: spare, Proxy: true, LazyFS: env("CHAOS_LAZYFS", "1") != "0",
		Prefix: env("CHAOS_PREFIX", "qbc"), Subnet: env("CHAOS_SUBNET", "10.77.0")})
	cs := &clients{}
	c := &cluster{net: net, bin: harness.Binary(t), lazy: env("CHAOS_LAZYFS", "1") != "0", hist: hist, cs: cs,
		members: net.Hosts()[:nodes], spares: net.Hosts()[nodes:], base: nodes, extra: []string{"--log-level", env("CHAOS_LOG_LEVEL", "info")}}
	start := time.Now()
	failed := true
	defer func() {
		if failed || t.Failed() {
			keepResults(t, seed, hist, net)
		}
	}()
	if err := net.StartQuorumbus(120*time.Second, c.extra...); err != nil {
		t.Fatal(err)
	}
	for _, h := range c.members {
		e, err := h.Endpoints()
		if err != nil {
			t.Fatal(err)
		}
		cs.add(e.ConnectionString, h.Name)
	}
	createEntities(t, net)
	harness.WaitFor(t, 60*time.Second, func() error {
		var ps []partition
		if err := c.qbctl(net.Host(0), &ps, "cluster", "partitions"); err != nil {
			return err
		}
		for _, p := range ps {
			if p.Leader == "" {
				return fmt.Errorf("%s/%d has no leader", p.Entity, p.Partition)
			}
		}
		if len(ps) < 2 {
			return fmt.Errorf("%d partition groups", len(ps))
		}
		return nil
	})
	t.Logf("seed %d: %d nodes formed and entities placed in %v", seed, nodes, time.Since(start).Round(time.Second))

	wl := &workload{h: hist, cs: cs, seed: seed}
	wl.start(2, 3, 3, 4)
	running := true
	defer func() {
		if running { // a t.Fatal below: stop the clients before the hosts go
			wl.finish()
		}
	}()
	time.Sleep(3 * time.Second) // a fault-free warm-up, part of the workload

	var segs []segment
	if dur == 0 {
		segs = plan(rng, 3)
	}
	deadline := time.Now().Add(dur)
	for i := 0; dur == 0 && i < len(segs) || dur > 0 && time.Now().Before(deadline); i++ {
		var seg segment
		if dur == 0 {
			seg = segs[i]
		} else if rng.IntN(3) == 0 {
			seg = segment{faults[rng.IntN(len(faults))]}
		} else {
			seg = mixedSegment(rng)
		}
		var did []string
		hist.SetFault(seg.String())
		for _, f := range seg {
			what, err := f.apply(c, rng)
			if err != nil {
				t.Fatalf("fault %s: %v", f.name, err)
			}
			did = append(did, what)
		}
		hist.Add(Op{T: time.Now(), Worker: "nemesis", Kind: "fault", Value: strings.Join(did, "; ")})
		t.Logf("%s: %s", seg, strings.Join(did, "; "))
		// The fault's hold time: longer than an election timeout (1 s) and than the
		// gossip's suspicion of a silent member.
		time.Sleep(time.Duration(2500+rng.IntN(2500)) * time.Millisecond)
		ht := time.Now()
		if err := c.heal(90*time.Second, hist); err != nil {
			t.Fatalf("heal after %s: %v", seg, err)
		}
		if strings.Contains(seg.String(), "wipe") {
			// The documented rule for lost disks: one at a time, the next only once
			// the last is rebuilt.
			hist.SetFault("wipe (catching up)")
			if err := waitFor(90*time.Second, func() error { return c.caughtUp(rng) }); err != nil {
				t.Errorf("a wiped node did not catch up within 90 s: %v", err)
			}
		}
		hist.SetFault("")
		hist.Add(Op{T: ht, Worker: "nemesis", Kind: "heal", Value: seg.String()})
		time.Sleep(1500 * time.Millisecond) // recovery before the next fault, part of the plan
	}
	wl.finish()
	running = false
	t.Logf("faults done after %v; draining", time.Since(start).Round(time.Second))
	drain(t, wl, max(3*time.Minute, dur/2))

	res := Check(hist.Ops())
	convErr := waitConverged(c, rng, 90*time.Second)
	report(t, seed, res, convErr, time.Since(start))
	if len(res.Violations) > 0 || convErr != nil {
		for _, v := range res.Violations {
			t.Errorf("seed %d: %s", seed, v)
		}
		if convErr != nil {
			t.Errorf("seed %d: replicas did not converge: %v", seed, convErr)
		}
		return
	}
	failed = false
}

// drain completes everything left in q, its dead-letter queue and every session of
// qs, with fresh clients, until nothing has come for three lock durations.
func drain(t *testing.T, wl *workload, limit time.Duration) {
	wl.stop = make(chan struct{})
	wl.last.Store(time.Now().UnixNano())
	// Idle: nothing delivered for 3 lock durations, and every lock delivered so far has
	// run out (with a clock jump a lock outlasts the first).
	idle := func() bool {
		return time.Since(time.Unix(0, wl.last.Load())) > 3*lockDuration &&
			time.Since(time.Unix(0, wl.lockedUntil.Load())) > 2*lockDuration
	}
	deadline := time.Now().Add(limit)
	done := func() bool { return idle() || time.Now().After(deadline) }
	for i := 0; i < 3; i++ {
		wl.goFunc(func() {
			w := &conn{cs: wl.cs, rng: wl.rng(uint64(1010 + i))}
			defer w.close()
			wl.receive(fmt.Sprintf("drain-q%d", i), w, wl.rng(uint64(1020+i)), false, false, done)
		})
	}
	wl.goFunc(func() {
		w := &conn{cs: wl.cs, rng: wl.rng(1001)}
		defer w.close()
		wl.receive("drain-dlq", w, wl.rng(1002), false, true, done)
	})
	for i := 0; i < 4; i++ {
		wl.goFunc(func() {
			w := &conn{cs: wl.cs, rng: wl.rng(uint64(1030 + i))}
			defer w.close()
			wl.sessionLoop(fmt.Sprintf("drain-qs%d", i), w, false, func() bool { return time.Now().After(deadline) })
		})
	}
	wl.wg.Wait()
	if time.Now().After(deadline) {
		t.Errorf("the drain did not finish within %v", limit)
	}
}

func waitConverged(c *cluster, rng *rand.Rand, timeout time.Duration) error {
	return waitFor(timeout, func() error { return c.converged(rng) })
}

// rewrite sends the admin client's https requests to a node's plain-HTTP admin port.
type rewrite struct{ addr string }

func (r rewrite) Do(req *http.Request) (*http.Response, error) {
	req.URL.Scheme, req.URL.Host, req.Host = "http", r.addr, r.addr
	return http.DefaultClient.Do(req)
}

func createEntities(t *testing.T, net *hosts.Net) {
	t.Helper()
	lock := "PT" + strconv.Itoa(int(lockDuration/time.Second)) + "S"
	for _, q := range []struct {
		name    string
		session bool
	}{{queue, false}, {sessionQueue, true}} {
		createQueue(t, net.Host(0), q.name, &admin.QueueProperties{
			LockDuration: to.Ptr(lock), MaxDeliveryCount: to.Ptr(int32(maxDelivery)), RequiresSession: to.Ptr(q.session),
		})
	}
}

// createQueue creates a queue through h's admin API, trying until it exists (a 409
// counts: an earlier try's create went through).
func createQueue(t *testing.T, h *hosts.Host, name string, props *admin.QueueProperties) {
	t.Helper()
	e, err := h.Endpoints()
	if err != nil {
		t.Fatal(err)
	}
	ac, err := admin.NewClientFromConnectionString(e.ConnectionString, &admin.ClientOptions{
		ClientOptions: azcore.ClientOptions{Transport: rewrite{e.Admin}, Retry: policy.RetryOptions{MaxRetries: -1}},
	})
	if err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, 60*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := ac.CreateQueue(ctx, name, &admin.CreateQueueOptions{Properties: props})
		var re *azcore.ResponseError
		if errors.As(err, &re) && re.StatusCode == http.StatusConflict {
			return nil
		}
		return err
	})
}

// summary is the line appended to CHAOS_STATS per run: the figures of docs/guarantees.md.
type summary struct {
	Seed       uint64            `json:"seed"`
	Seconds    int               `json:"seconds"`
	Total      Stats             `json:"total"`
	ByFault    map[string]*Stats `json:"by_fault"`
	Violations int               `json:"violations"`
	Converged  bool              `json:"converged"`
}

func report(t *testing.T, seed uint64, res *Result, convErr error, took time.Duration) {
	t.Logf("seed %d: %d acknowledged, %d maybe, %d deliveries, lost %d, unexpected %d, redeliveries explained %d, unexplained %d, enqueued twice %d, session deliveries behind SDK releases %d, converged %v, %d violations, %v",
		seed, res.Acked, res.Maybe, res.Delivered, res.Lost, res.Unexpected, res.DupOK, res.DupBad, res.Enqueued2, res.Reordered, convErr == nil, len(res.Violations), took.Round(time.Second))
	var fs []string
	for f := range res.ByFault {
		fs = append(fs, f)
	}
	sort.Strings(fs)
	for _, f := range fs {
		s := res.ByFault[f]
		t.Logf("  %-24s acked %5d maybe %3d lost %d redeliveries %d (unexplained %d) enqueued twice %d", f, s.Acked, s.Maybe, s.Lost, s.DupOK+s.DupBad, s.DupBad, s.Enqueued2)
	}
	sum := summary{Seed: seed, Seconds: int(took.Seconds()), Total: res.Stats, ByFault: res.ByFault,
		Violations: len(res.Violations), Converged: convErr == nil}
	runs = append(runs, sum)
	if p := os.Getenv("CHAOS_STATS"); p != "" {
		b, _ := json.Marshal(sum)
		f, err := os.OpenFile(p, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err == nil {
			f.Write(append(b, '\n'))
			f.Close()
		}
	}
}

// keepResults copies the history, every node's log and the cluster's view into
// CHAOS_RESULTS/seed-N-TIME.
func keepResults(t *testing.T, seed uint64, hist *History, net *hosts.Net) {
	root := env("CHAOS_RESULTS", filepath.Join(os.TempDir(), "quorumbus-chaos"))
	dir := filepath.Join(root, fmt.Sprintf("seed-%d-%s", seed, time.Now().UTC().Format("20060102T150405")))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Logf("results: %v", err)
		return
	}
	if err := hist.WriteFile(filepath.Join(dir, "history.jsonl")); err != nil {
		t.Logf("results: %v", err)
	}
	for _, h := range net.Hosts() {
		if b, err := os.ReadFile(h.LogPath()); err == nil {
			os.WriteFile(filepath.Join(dir, h.Name+".log"), b, 0o644)
		}
	}
	os.WriteFile(filepath.Join(dir, "seed"), []byte(strconv.FormatUint(seed, 10)+"\n"), 0o644)
	t.Logf("seed %d failed: history and node logs kept in %s", seed, dir)
	fmt.Printf("chaos: seed %d failed: results in %s\n", seed, dir)
}

// TestChaosTable prints the table of every run recorded in CHAOS_STATS (make
// chaos-table): the figures for docs/guarantees.md, from real runs only.
func TestChaosTable(t *testing.T) {
	p := os.Getenv("CHAOS_STATS")
	if os.Getenv("QUORUMBUS_CHAOS_TABLE") != "1" || p == "" {
		t.Skip("make chaos-table prints the table of the runs in CHAOS_STATS")
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var all []summary
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var s summary
		if err := json.Unmarshal([]byte(line), &s); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		all = append(all, s)
	}
	fmt.Print(table(all))
}
