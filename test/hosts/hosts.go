package hosts

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/test/lazyfsctl"
)

// Config describes the hosts of a test. The zero value of every field but N has a
// default.
type Config struct {
	// N is the number of hosts (1 to 200).
	N int
	// Spare is how many of them (the last ones) StartQuorumbus leaves down: the others
	// form a cluster of N-Spare, and a spare's node joins it when launched later.
	Spare int
	// Prefix names every namespace, veth, nftables table and lock file; at most 8
	// characters, default "qbc". Two suites that may run at once need two prefixes
	// and two subnets.
	Prefix string
	// Subnet is the first three octets of the /24 the hosts live in, default
	// "10.77.0": host i is Subnet.(i+1), the root namespace Subnet.254.
	Subnet string
	// Name is host i's name, default "qb-<i>".
	Name func(i int) string
	// Aliases are more names of host i in every hosts file (e.g. FQDNs).
	Aliases func(i int) []string
	// Proxy puts a userspace TCP proxy (a Link) between every ordered pair of hosts
	// for connections to the peer's name on ProxyPort.
	Proxy bool
	// ProxyPort is the port proxied (quorumbus's cluster port), default 5400.
	ProxyPort int
	// Dir holds one directory per host (data and log), default t.TempDir().
	Dir string
	// LazyFS mounts each host's data directory through test/lazyfs (its backing
	// directory is data.disk beside it), so that PowerLoss can drop what the host's
	// process did not fsync. Needs /dev/fuse.
	LazyFS bool
}

func (c *Config) defaults(t testing.TB) error {
	if c.N < 1 || c.N > 200 {
		return fmt.Errorf("hosts: N = %d, want 1..200", c.N)
	}
	if c.Spare < 0 || c.Spare >= c.N {
		return fmt.Errorf("hosts: Spare = %d of %d hosts, want 0..N-1", c.Spare, c.N)
	}
	if c.Prefix == "" {
		c.Prefix = "qbc"
	}
	if len(c.Prefix) > 8 {
		return fmt.Errorf("hosts: prefix %q longer than 8 characters (interface names are at most 15)", c.Prefix)
	}
	if c.Subnet == "" {
		c.Subnet = "10.77.0"
	}
	if c.Name == nil {
		c.Name = func(i int) string { return fmt.Sprintf("qb-%d", i) }
	}
	if c.ProxyPort == 0 {
		c.ProxyPort = 5400
	}
	if c.Dir == "" {
		c.Dir = t.TempDir()
	}
	return nil
}

// Net is a set of test hosts on one bridge.
type Net struct {
	cfg   Config
	t     testing.TB
	hosts []*Host
	links map[[2]int]*Link // from, to
	lock  *os.File
}

// Host is one network namespace with its own address, names, directory and process.
type Host struct {
	Index int
	Name  string // the name every host resolves to IP
	NS    string // network namespace, PREFIX-<index>
	IP    string
	Dir   string // the host's own directory; DataDir and LogPath are inside
	net   *Net

	lazy *lazyfsctl.FS // the data directory's file system with Config.LazyFS

	mu   sync.Mutex
	proc *process // the current process, nil before Launch; owner: mu
	last []string // the last command line, for Restart; owner: mu
	env  []string
}

// DataDir is the data directory to give the host's process (wiped by Wipe).
func (h *Host) DataDir() string { return filepath.Join(h.Dir, "data") }

// LogPath is the file the host's processes write to, appended across restarts.
func (h *Host) LogPath() string { return filepath.Join(h.Dir, "node.log") }

// Available reports why hosts cannot be used here (not root, no ip or nft), or nil.
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("hosts: needs root (network namespaces)")
	}
	for _, tool := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("hosts: %s not installed (apt-get install iproute2 nftables)", tool)
		}
	}
	return nil
}

// New creates cfg.N hosts on a bridge; see the package comment. It fails the test if
// that cannot be done, and removes everything at cleanup.
func New(t testing.TB, cfg Config) *Net {
	t.Helper()
	if err := Available(); err != nil {
		t.Fatal(err)
	}
	if err := cfg.defaults(t); err != nil {
		t.Fatal(err)
	}
	n := &Net{cfg: cfg, t: t, links: map[[2]int]*Link{}}
	lock, err := os.OpenFile("/run/"+cfg.Prefix+"-hosts.lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		t.Fatalf("hosts: prefix %q is in use by another test process (flock /run/%s-hosts.lock): %v", cfg.Prefix, cfg.Prefix, err)
	}
	n.lock = lock
	Sweep(cfg.Prefix)
	t.Cleanup(n.close)
	if err := n.setup(); err != nil {
		t.Fatalf("hosts: %v", err)
	}
	return n
}

// Sweep removes every namespace, root-namespace veth, /etc/netns entry and lazyfs
// mount named after prefix: what a killed test process left behind. New calls it under
// its lock.
func Sweep(prefix string) {
	out, _ := exec.Command("ip", "netns", "list").Output()
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && strings.HasPrefix(f[0], prefix+"-") {
			killNamespace(f[0])
			exec.Command("ip", "netns", "del", f[0]).Run()
		}
	}
	exec.Command("ip", "link", "del", prefix+"-rt").Run()
	entries, _ := os.ReadDir("/etc/netns")
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix+"-") {
			os.RemoveAll(filepath.Join("/etc/netns", e.Name()))
		}
	}
	lazyfsctl.Sweep(prefix + "-")
}

// killNamespace kills every process still inside namespace ns.
func killNamespace(ns string) {
	out, _ := exec.Command("ip", "netns", "pids", ns).Output()
	for _, p := range strings.Fields(string(out)) {
		var pid int
		if _, err := fmt.Sscan(p, &pid); err == nil && pid > 1 {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

func run(args ...string) error {
	var out bytes.Buffer
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}

func (n *Net) setup() error {
	p, c := n.cfg.Prefix, n.cfg
	br := p + "-br"
	steps := [][]string{
		{"ip", "netns", "add", br},
		{"ip", "-n", br, "link", "add", "br0", "type", "bridge"},
		{"ip", "-n", br, "link", "set", "br0", "up"},
		{"ip", "-n", br, "link", "set", "lo", "up"},
		{"ip", "link", "add", p + "-rt", "type", "veth", "peer", "name", p + "-rtb"},
		{"ip", "link", "set", p + "-rtb", "netns", br},
		{"ip", "-n", br, "link", "set", p + "-rtb", "master", "br0", "up"},
		{"ip", "addr", "add", c.Subnet + ".254/24", "dev", p + "-rt"},
		{"ip", "link", "set", p + "-rt", "up"},
	}
	for i := 0; i < c.N; i++ {
		h := &Host{Index: i, Name: c.Name(i), NS: fmt.Sprintf("%s-%d", p, i), IP: fmt.Sprintf("%s.%d", c.Subnet, i+1),
			Dir: filepath.Join(c.Dir, c.Name(i)), net: n}
		n.hosts = append(n.hosts, h)
		if err := os.MkdirAll(h.DataDir(), 0o750); err != nil {
			return err
		}
		if c.LazyFS {
			disk := filepath.Join(h.Dir, "data.disk")
			if err := os.MkdirAll(disk, 0o750); err != nil {
				return err
			}
			l, err := lazyfsctl.Mount(h.DataDir(), disk, h.NS)
			if err != nil {
				return err
			}
			h.lazy = l
		}
		hv, bv := fmt.Sprintf("%s-%dh", p, i), fmt.Sprintf("%s-%db", p, i)
		steps = append(steps,
			[]string{"ip", "netns", "add", h.NS},
			[]string{"ip", "-n", h.NS, "link", "set", "lo", "up"},
			[]string{"ip", "link", "add", hv, "type", "veth", "peer", "name", bv},
			[]string{"ip", "link", "set", hv, "netns", h.NS},
			[]string{"ip", "link", "set", bv, "netns", br},
			[]string{"ip", "-n", br, "link", "set", bv, "master", "br0", "up"},
			[]string{"ip", "-n", h.NS, "link", "set", hv, "name", "eth0"},
			[]string{"ip", "-n", h.NS, "addr", "add", h.IP + "/24", "dev", "eth0"},
			[]string{"ip", "-n", h.NS, "link", "set", "eth0", "up"},
		)
	}
	for _, s := range steps {
		if err := run(s...); err != nil {
			return err
		}
	}
	for _, h := range n.hosts {
		if err := n.writeHosts(h); err != nil {
			return err
		}
		if err := h.nft(nftBase(p)); err != nil {
			return err
		}
	}
	if c.Proxy {
		for _, from := range n.hosts {
			for _, to := range n.hosts {
				if from == to {
					continue
				}
				l, err := newLink(from, to, c.ProxyPort)
				if err != nil {
					return err
				}
				n.links[[2]int{from.Index, to.Index}] = l
			}
		}
	}
	return nil
}

// proxyIP is where host from finds the proxy to host to.
func proxyIP(to int) string { return fmt.Sprintf("127.0.1.%d", to+1) }

func (n *Net) writeHosts(h *Host) error {
	var b strings.Builder
	b.WriteString("127.0.0.1 localhost\n")
	for _, o := range n.hosts {
		ip := o.IP
		if n.cfg.Proxy && o != h {
			ip = proxyIP(o.Index)
		}
		names := []string{o.Name}
		if n.cfg.Aliases != nil {
			names = append(names, n.cfg.Aliases(o.Index)...)
		}
		fmt.Fprintf(&b, "%s %s\n", ip, strings.Join(names, " "))
	}
	dir := filepath.Join("/etc/netns", h.NS)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "hosts"), []byte(b.String()), 0o644)
}

// Hosts returns the hosts in index order, in a slice of the caller's own: appending to
// it or removing from it leaves the Net's list (which close walks) as it is.
func (n *Net) Hosts() []*Host { return slices.Clone(n.hosts) }

// Host returns host i.
func (n *Net) Host(i int) *Host { return n.hosts[i] }

// Link returns the proxy from host from to host to (nil without Config.Proxy).
func (n *Net) Link(from, to int) *Link { return n.links[[2]int{from, to}] }

// HealAll removes every network fault (nftables rules of every host and every Link's
// delay and black hole) and puts every host's clock back on the machine's.
func (n *Net) HealAll() error {
	var errs []error
	for _, h := range n.hosts {
		errs = append(errs, h.Heal(), h.JumpClock(0))
	}
	for _, l := range n.links {
		l.Set(LinkState{})
	}
	return errors.Join(errs...)
}

func (n *Net) close() {
	for _, h := range n.hosts {
		h.Kill()
	}
	for _, l := range n.links {
		l.Close()
	}
	for _, h := range n.hosts {
		if h.lazy != nil {
			if err := h.lazy.Unmount(); err != nil {
				n.t.Logf("hosts: unmount %s: %v", h.DataDir(), err)
			}
		}
	}
	Sweep(n.cfg.Prefix)
	if n.lock != nil {
		n.lock.Close()
	}
}

// Command is cmd to run inside the host's namespace (with its hosts file).
func (h *Host) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", h.NS, name}, args...)...)
}

// process is one run of the host's command.
type process struct {
	cmd  *exec.Cmd
	log  *os.File
	done chan struct{} // closed when the process has exited
	err  error         // exit status; written before done is closed
}

// Launch starts name args inside the host (its own process group, killed if the test
// process dies) with env added to the test's environment, output appended to
// LogPath. A process still running is killed first.
func (h *Host) Launch(env []string, name string, args ...string) error {
	h.Kill()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.last, h.env = append([]string{name}, args...), env
	return h.launchLocked()
}

func (h *Host) launchLocked() error {
	f, err := os.OpenFile(h.LogPath(), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(f, "==== %s start %s\n", time.Now().UTC().Format(time.RFC3339Nano), strings.Join(h.last, " "))
	cmd := h.Command(h.last[0], h.last[1:]...)
	cmd.Env = append(os.Environ(), h.env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := spawn(cmd); err != nil {
		f.Close()
		return fmt.Errorf("hosts: start on %s: %v", h.Name, err)
	}
	p := &process{cmd: cmd, log: f, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	h.proc = p
	return nil
}

// Restart starts the last command again (Kill first if it runs).
func (h *Host) Restart() error {
	h.Kill()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.last == nil {
		return fmt.Errorf("hosts: Restart of %s before Launch", h.Name)
	}
	return h.launchLocked()
}

// Running reports whether the host's process has not exited.
func (h *Host) Running() bool {
	h.mu.Lock()
	p := h.proc
	h.mu.Unlock()
	if p == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// ExitErr is how the current process ended (nil while it runs, or for exit status 0).
func (h *Host) ExitErr() error {
	h.mu.Lock()
	p := h.proc
	h.mu.Unlock()
	if p == nil {
		return nil
	}
	select {
	case <-p.done:
		return p.err
	default:
		return nil
	}
}

// Done is closed when the current process exits (nil before Launch).
func (h *Host) Done() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.proc == nil {
		return nil
	}
	return h.proc.done
}

// spawner starts every process from one goroutine locked to its OS thread for the
// life of the test process: Pdeathsig fires when the *thread* that forked a child
// exits, and the Go runtime may end other threads, which would kill nodes at random.
var spawner = make(chan spawnReq)

type spawnReq struct {
	cmd  *exec.Cmd
	errc chan error
}

var spawnerOnce sync.Once

func spawn(cmd *exec.Cmd) error {
	spawnerOnce.Do(func() {
		go func() {
			runtime.LockOSThread() // never unlocked: this thread is every child's parent
			for r := range spawner {
				r.errc <- r.cmd.Start()
			}
		}()
	})
	errc := make(chan error, 1)
	spawner <- spawnReq{cmd, errc}
	return <-errc
}

// signal sends sig to the process group of the current process, if it still runs
// (never to a group that has exited: its ID may belong to someone else by now).
func (h *Host) signal(sig syscall.Signal) error {
	h.mu.Lock()
	p := h.proc
	h.mu.Unlock()
	if p == nil {
		return fmt.Errorf("hosts: %s runs nothing", h.Name)
	}
	select {
	case <-p.done:
		return fmt.Errorf("hosts: %s is not running (exited: %v)", h.Name, p.err)
	default:
	}
	return syscall.Kill(-p.cmd.Process.Pid, sig)
}

// Kill sends SIGKILL to the process group and waits for the process to exit.
func (h *Host) Kill() {
	h.mu.Lock()
	p := h.proc
	h.mu.Unlock()
	if p == nil {
		return
	}
	h.signal(syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
	}
}

// Stop sends SIGTERM (and SIGCONT, in case it is paused) and waits up to timeout
// before killing it.
func (h *Host) Stop(timeout time.Duration) {
	h.mu.Lock()
	p := h.proc
	h.mu.Unlock()
	if p == nil {
		return
	}
	h.signal(syscall.SIGTERM)
	h.signal(syscall.SIGCONT)
	select {
	case <-p.done:
	case <-time.After(timeout):
		h.Kill()
	}
}

// Pause freezes the process group (SIGSTOP): sockets stay open, nothing answers.
func (h *Host) Pause() error { return h.signal(syscall.SIGSTOP) }

// Resume continues a paused process group (SIGCONT).
func (h *Host) Resume() error { return h.signal(syscall.SIGCONT) }

// Wipe kills the process and empties its data directory (the log stays).
func (h *Host) Wipe() error {
	h.Kill()
	entries, err := os.ReadDir(h.DataDir()) // a lazyfs mount point itself stays
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(h.DataDir(), e.Name())); err != nil {
			return err
		}
	}
	if h.lazy != nil {
		if _, err := h.lazy.Crash(); err != nil { // nothing unsynced of the removed files lingers
			return err
		}
	}
	return nil
}

// PowerLoss kills the process (SIGKILL) and then throws away every write to its data
// directory that was not fsynced, as a power cut would: what a Restart finds is what
// the node had made durable. It returns the bytes dropped per file (paths relative to
// DataDir). Needs Config.LazyFS.
func (h *Host) PowerLoss() (map[string]int64, error) {
	if h.lazy == nil {
		return nil, fmt.Errorf("hosts: PowerLoss of %s without Config.LazyFS", h.Name)
	}
	h.Kill()
	return h.lazy.Crash()
}
