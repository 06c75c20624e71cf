package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/quorumbus/quorumbus/amqp"
	"github.com/quorumbus/quorumbus/cluster"
	"github.com/quorumbus/quorumbus/cluster/meta"
	"github.com/quorumbus/quorumbus/cmd/internal/httplimit"
	"github.com/quorumbus/quorumbus/internal/durable"
)

// Config is everything a node is started with. Every field is a flag (--data), an
// environment variable (QUORUMBUS_DATA) and a key of the optional JSON config file
// ("data"); a flag beats the environment, which beats the file, which beats the default.
type Config struct {
	Data        string `json:"data"`
	AMQPAddr    string `json:"amqp-addr"`
	AdminAddr   string `json:"admin-addr"`
	ClusterAddr string `json:"cluster-addr"`
	NodeID      string `json:"node-id"`
	Namespace   string `json:"namespace"`
	ConfigJSON  string `json:"config-json"`
	KeyName     string `json:"sas-key-name"`
	Key         string `json:"sas-key"`
	LogLevel    string `json:"log-level"`
	LogFormat   string `json:"log-format"`
	// Pprof serves Go's profiler under /debug/pprof/ on the admin port.
	Pprof bool `json:"pprof"`
	// PrintConnectionString prints the start-up banner with the Manage connection
	// string (the root key) on standard output. Without it the banner appears only when
	// standard output is a terminal and the log format is text: a person running one
	// node by hand (`make run` sets it); never into a log collector's pipe.
	PrintConnectionString bool `json:"print-connection-string"`
	// ShutdownTimeout bounds a graceful stop (SIGTERM) before the node exits anyway.
	ShutdownTimeout time.Duration `json:"shutdown-timeout"`
	// MemoryLimit is Go's soft memory limit, e.g. "2GiB"; "" means 90 % of the cgroup's
	// limit when there is one, "0" none (memory.go).
	MemoryLimit string `json:"memory-limit"`
	// GCHeadroom is how far, in percent of the live heap, the heap may grow before the
	// next collection; 0 leaves GOGC to the runtime (memory.go).
	GCHeadroom int `json:"gc-headroom"`
	// BodyMemoryBudgetMB and BodyDiskBudgetMB bound the message bodies the node holds in
	// memory (past it they go to disk) and on disk (past it sends are refused);
	// cluster.Config.BodyMemoryBudget has the details. 0: no limit.
	BodyMemoryBudgetMB int `json:"body-memory-budget-mb"`
	BodyDiskBudgetMB   int `json:"body-disk-budget-mb"`
	// ClockOffsetFile names a file holding an offset for the node's clock (a Go
	// duration), re-read while it runs; "" means the machine's clock. For fault tests.
	ClockOffsetFile string `json:"clock-offset-file"`

	// Cluster settings (cluster.Config has the meaning of each).
	AdvertiseAddr   string   `json:"advertise-addr"`
	Join            []string `json:"join"`
	BootstrapExpect int      `json:"bootstrap-expect"`
	Zone            string   `json:"zone"`
	// ZoneFromNode names the Kubernetes node the pod runs on (the downward API's
	// spec.nodeName): at start the node takes its zone from that node's
	// topology.kubernetes.io/zone label, read from the API server with the pod's
	// service account (zone.go). Excludes Zone.
	ZoneFromNode   string        `json:"zone-from-node"`
	Replicas       int           `json:"replicas"`
	DeadNodeGrace  time.Duration `json:"dead-node-grace"`
	RebalanceMoves int           `json:"rebalance-moves"`
	// PartitionCount is how many partitions an entity created with EnablePartitioning
	// gets (Service Bus Standard: 16); its MaxSizeInMegabytes holds for each of them.
	PartitionCount int `json:"partition-count"`
	// RaftLogStore is the Raft log store of the partition groups this node creates:
	// "shared" (the node's one log engine), "bolt" or "wal" (partition.Config.LogStore).
	RaftLogStore string `json:"raft-log-store"`
	// RaftTransport is how the partition groups' Raft RPCs travel: "groups" (one
	// connection per peer for all groups) or "per-group" (cluster.BenchConfig.PerGroupTransport).
	RaftTransport string `json:"raft-transport"`
	// RaftPipeline is how many AppendEntries a partition group's leader keeps in flight
	// to each follower (cluster.RaftConfig.Pipeline); 1: one at a time.
	RaftPipeline int `json:"raft-pipeline"`
	// RaftQuiesceAfter is how long a partition group stays idle before it goes quiet
	// (cluster.RaftConfig.QuiesceAfter); 0: never.
	RaftQuiesceAfter time.Duration `json:"raft-quiesce-after"`

	// AMQP limits (amqp.Config has the meaning of each; docs/security.md, "Limits").
	AMQPLimits AMQPLimits `json:"-"`
	// HTTP limits of each port that speaks HTTP (httplimit.Config has the meaning of
	// each; docs/security.md, "Limits").
	HTTPLimits httplimit.Config `json:"-"`
	// TLS for clients (docs/security.md). AMQPAddr "" (or "off") turns
	// the plain listener off; AMQPSAddr listens only when TLS is configured.
	AMQPSAddr     string `json:"amqps-addr"`
	TLSCert       string `json:"tls-cert"`
	TLSKey        string `json:"tls-key"`
	TLSSelfSigned bool   `json:"tls-self-signed"`

	// Cluster credentials: mutual TLS on the cluster port and gossip encryption.
	// ClusterSecret is the value or @FILE; the certificate files are optional.
	ClusterSecret string `json:"cluster-secret"`
	// ClusterSecretAccepted are further secrets (each a value or @FILE) whose peers
	// this node accepts while it presents and encrypts with ClusterSecret: the secret
	// being introduced or retired during a rotation (docs/security.md § Rotation).
	ClusterSecretAccepted []string `json:"cluster-secret-accepted"`
	ClusterTLSCert        string   `json:"cluster-tls-cert"`
	ClusterTLSKey         string   `json:"cluster-tls-key"`
	ClusterTLSCA          string   `json:"cluster-tls-ca"`

	// nodeIDDefaulted: no source set --node-id, so the host name was taken and the ID
	// recorded in the data directory wins over it (resolveNodeID).
	nodeIDDefaulted bool
	// showVersion (--version): print the build's version and exit instead of starting.
	showVersion bool
	// checkOnly (--check-config): print the effective settings and exit instead of
	// starting. Deployment tests run the binary with exactly the args and environment a
	// manifest gives it; operators use it to see what a node would start with.
	checkOnly bool
}

// DefaultConfig is a single node on loopback with the official emulator's ports. The
// node ID is the host name, which a Kubernetes StatefulSet keeps stable per pod
// (quorumbus-0, quorumbus-1, ...). The cluster settings are cluster.DefaultConfig's,
// the partition count meta.DefaultPartitionCount and the AMQP limits amqp.DefaultConfig's,
// so each default lives in one place.
func DefaultConfig() Config {
	cc := cluster.DefaultConfig()
	return Config{
		Data:             "./data",
		AMQPAddr:         "127.0.0.1:5672",
		AdminAddr:        "127.0.0.1:5300",
		AMQPSAddr:        "127.0.0.1:5671",
		ClusterAddr:      cc.ClusterAddr,
		NodeID:           defaultNodeID(),
		Namespace:        "", // Config.json's namespace, else cluster.DefaultConfig's (startNode)
		KeyName:          cc.DefaultKeyName,
		LogLevel:         "info",
		LogFormat:        "text",
		ShutdownTimeout:  30 * time.Second,
		BootstrapExpect:  cc.BootstrapExpect,
		Replicas:         cc.Replicas,
		DeadNodeGrace:    cc.DeadNodeGrace,
		RebalanceMoves:   cc.RebalanceMoves,
		PartitionCount:   meta.DefaultPartitionCount,
		RaftLogStore:     cc.Storage.LogStore,
		RaftTransport:    "groups",
		RaftPipeline:     cc.Raft.Pipeline,
		RaftQuiesceAfter: cc.Raft.QuiesceAfter,
		AMQPLimits:       defaultAMQPLimits(),
		HTTPLimits:       httplimit.DefaultConfig(),
	}
}

// AMQPLimits are the amqp.Config limits an operator sets, each a flag
// (--amqp-max-connections), environment variable and config file key.
type AMQPLimits struct {
	MaxConnections          int
	MaxSessions             int
	MaxLinksPerSession      int
	MaxLinksPerConnection   int
	MaxUnauthenticatedLinks int
	MaxFrameSize            int
	UnauthenticatedTimeout  time.Duration
	ClaimRecheckInterval    time.Duration
	MaxAppPropertiesSize    int
	MaxAppProperties        int
	MaxAppPropertyDepth     int
	TxnTimeout              time.Duration
	TxnMaxOperations        int
	MaxConnBufferedMB       int
	MaxUnsettledPerLink     int
	MaxUnsettledPerConn     int
	MaxConnOutgoingMB       int
}

// defaultAMQPLimits are amqp.DefaultConfig's, so the defaults live in one place.
func defaultAMQPLimits() AMQPLimits {
	d := amqp.DefaultConfig()
	return AMQPLimits{
		MaxConnections:          d.MaxConnections,
		MaxSessions:             d.MaxSessions,
		MaxLinksPerSession:      d.MaxLinks,
		MaxLinksPerConnection:   d.MaxLinksPerConnection,
		MaxUnauthenticatedLinks: d.MaxUnauthenticatedLinks,
		MaxFrameSize:            int(d.MaxFrameSize),
		UnauthenticatedTimeout:  d.UnauthenticatedTimeout,
		ClaimRecheckInterval:    d.ClaimRecheckInterval,
		MaxAppPropertiesSize:    d.MaxAppPropertiesSize,
		MaxAppProperties:        d.MaxAppProperties,
		MaxAppPropertyDepth:     d.MaxAppPropertyDepth,
		TxnTimeout:              d.TxnTimeout,
		TxnMaxOperations:        d.TxnMaxOperations,
		MaxConnBufferedMB:       int(d.MaxConnBuffered >> 20),
		MaxUnsettledPerLink:     d.MaxUnsettledPerLink,
		MaxUnsettledPerConn:     d.MaxUnsettledPerConn,
		MaxConnOutgoingMB:       int(d.MaxConnOutgoing >> 20),
	}
}

// apply sets the limits on an amqp.Config. Sessions set channel-max too: the
// highest channel number is one less than the number of sessions.
func (l AMQPLimits) apply(ac *amqp.Config) {
	ac.MaxConnections = l.MaxConnections
	ac.MaxSessions = l.MaxSessions
	ac.ChannelMax = uint16(l.MaxSessions - 1)
	ac.MaxLinks = l.MaxLinksPerSession
	ac.MaxLinksPerConnection = l.MaxLinksPerConnection
	ac.MaxUnauthenticatedLinks = l.MaxUnauthenticatedLinks
	ac.MaxFrameSize = uint32(l.MaxFrameSize)
	ac.UnauthenticatedTimeout = l.UnauthenticatedTimeout
	ac.ClaimRecheckInterval = l.ClaimRecheckInterval
	ac.MaxAppPropertiesSize = l.MaxAppPropertiesSize
	ac.MaxAppProperties = l.MaxAppProperties
	ac.MaxAppPropertyDepth = l.MaxAppPropertyDepth
	ac.TxnTimeout = l.TxnTimeout
	ac.TxnMaxOperations = l.TxnMaxOperations
	ac.MaxConnBuffered = int64(l.MaxConnBufferedMB) << 20
	ac.MaxUnsettledPerLink = l.MaxUnsettledPerLink
	ac.MaxUnsettledPerConn = l.MaxUnsettledPerConn
	ac.MaxConnOutgoing = int64(l.MaxConnOutgoingMB) << 20
}

// validate names the first limit that cannot work.
func (l AMQPLimits) validate() error {
	for _, n := range []struct {
		name      string
		v, lo, hi int
	}{
		{"amqp-max-connections", l.MaxConnections, 1, 1 << 20},
		{"amqp-max-sessions", l.MaxSessions, 1, 65536},
		{"amqp-max-links-per-session", l.MaxLinksPerSession, 1, 1 << 20},
		{"amqp-max-links-per-connection", l.MaxLinksPerConnection, 1, 1 << 20},
		{"amqp-max-unauthenticated-links", l.MaxUnauthenticatedLinks, 2, 1 << 20},
		{"amqp-max-frame-size", l.MaxFrameSize, 512, 16 << 20},
		{"amqp-max-app-properties-size", l.MaxAppPropertiesSize, 1, 1 << 30},
		{"amqp-max-app-properties", l.MaxAppProperties, 1, 1 << 20},
		{"amqp-max-app-property-depth", l.MaxAppPropertyDepth, 0, 32},
		{"amqp-txn-max-operations", l.TxnMaxOperations, 1, 1 << 20},
		{"amqp-max-conn-buffered-mb", l.MaxConnBufferedMB, 1, 1 << 16},
		{"amqp-max-unsettled-per-link", l.MaxUnsettledPerLink, 1, 1 << 24},
		{"amqp-max-unsettled-per-conn", l.MaxUnsettledPerConn, 1, 1 << 24},
		{"amqp-max-conn-outgoing-mb", l.MaxConnOutgoingMB, 1, 1 << 16},
	} {
		if n.v < n.lo || n.v > n.hi {
			return fmt.Errorf("--%s %d: want %d..%d", n.name, n.v, n.lo, n.hi)
		}
	}
	switch {
	case l.UnauthenticatedTimeout <= 0:
		return fmt.Errorf("--amqp-unauthenticated-timeout %v: must be positive", l.UnauthenticatedTimeout)
	case l.ClaimRecheckInterval <= 0:
		return fmt.Errorf("--amqp-claim-recheck-interval %v: must be positive", l.ClaimRecheckInterval)
	case l.TxnTimeout <= 0:
		return fmt.Errorf("--amqp-txn-timeout %v: must be positive", l.TxnTimeout)
	}
	return nil
}

// defaultNodeID is the host name, or "node-1" when it cannot be read.
func defaultNodeID() string {
	if h, err := os.Hostname(); err == nil && h != "" {
		return h
	}
	return "node-1"
}

// Validate reports the first setting that cannot work, naming it.
func (c *Config) Validate() error {
	for _, a := range []struct{ name, v string }{
		{"amqp-addr", c.AMQPAddr}, {"admin-addr", c.AdminAddr}, {"cluster-addr", c.ClusterAddr},
		{"amqps-addr", c.AMQPSAddr},
	} {
		if a.name == "amqp-addr" && a.v == "" {
			continue // plain AMQP turned off
		}
		if _, _, err := net.SplitHostPort(a.v); err != nil {
			return fmt.Errorf("--%s %q: want HOST:PORT: %v", a.name, a.v, err)
		}
	}
	switch {
	case c.Data == "":
		return errors.New("--data: must not be empty")
	case c.NodeID == "":
		return errors.New("--node-id: must not be empty")
	case c.KeyName == "":
		return errors.New("--sas-key-name: must not be empty")
	case c.ShutdownTimeout <= 0:
		return errors.New("--shutdown-timeout: must be positive")
	case c.GCHeadroom < 0 || c.GCHeadroom > 100:
		return fmt.Errorf("--gc-headroom %d: want a percentage from 0 to 100", c.GCHeadroom)
	case c.BodyMemoryBudgetMB < 0 || c.BodyMemoryBudgetMB > 1<<30:
		return fmt.Errorf("--body-memory-budget-mb %d: want 0 (no limit) or a number of MiB", c.BodyMemoryBudgetMB)
	case c.BodyDiskBudgetMB < 0 || c.BodyDiskBudgetMB > 1<<30:
		return fmt.Errorf("--body-disk-budget-mb %d: want 0 (no limit) or a number of MiB", c.BodyDiskBudgetMB)
	case c.BodyDiskBudgetMB > 0 && c.BodyMemoryBudgetMB == 0:
		return errors.New("--body-disk-budget-mb: needs --body-memory-budget-mb (without it every body stays in memory)")
	}
	if _, err := parseBytes(c.MemoryLimit); err != nil {
		return fmt.Errorf("--memory-limit %w", err)
	}
	if err := c.validateCluster(); err != nil {
		return err
	}
	if err := c.AMQPLimits.validate(); err != nil {
		return err
	}
	switch h := c.HTTPLimits; {
	case h.MaxConnections < 1 || h.MaxConnections > 1<<20:
		return fmt.Errorf("--http-max-connections %d: want 1..%d", h.MaxConnections, 1<<20)
	case h.ReadTimeout <= 0:
		return fmt.Errorf("--http-read-timeout %v: must be positive", h.ReadTimeout)
	case h.WriteTimeout <= 0:
		return fmt.Errorf("--http-write-timeout %v: must be positive", h.WriteTimeout)
	case h.IdleTimeout <= 0:
		return fmt.Errorf("--http-idle-timeout %v: must be positive", h.IdleTimeout)
	}
	if err := c.validateTLS(); err != nil {
		return err
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("--log-level %q: want debug, info, warn or error", c.LogLevel)
	}
	switch c.LogFormat {
	case "text", "json":
	default:
		return fmt.Errorf("--log-format %q: want text or json", c.LogFormat)
	}
	return nil
}

// tlsEnabled reports whether client listeners use TLS.
func (c *Config) tlsEnabled() bool { return c.TLSSelfSigned || c.TLSCert != "" }

// validateTLS checks the client TLS settings.
func (c *Config) validateTLS() error {
	switch {
	case (c.TLSCert == "") != (c.TLSKey == ""):
		return errors.New("--tls-cert and --tls-key: set both (the certificate chain and its private key, PEM) or neither")
	case c.TLSSelfSigned && c.TLSCert != "":
		return errors.New("--tls-self-signed: cannot be combined with --tls-cert/--tls-key; choose one")
	case (c.ClusterTLSCert != "" || c.ClusterTLSKey != "" || c.ClusterTLSCA != "") &&
		(c.ClusterTLSCert == "" || c.ClusterTLSKey == "" || c.ClusterTLSCA == ""):
		return errors.New("--cluster-tls-cert, --cluster-tls-key and --cluster-tls-ca: set all three (this node's certificate, its key, the CA peers must chain to) or none")
	case len(c.ClusterSecretAccepted) > 0 && c.ClusterSecret == "":
		return errors.New("--cluster-secret-accepted needs --cluster-secret: a node presents and encrypts with its " +
			"current secret and only accepts peers of the listed ones too")
	case c.ClusterTLSCert != "" && c.ClusterSecret == "":
		return errors.New("--cluster-tls-cert needs --cluster-secret too: it keys gossip encryption, " +
			"since memberlist's UDP packets do not go through TLS")
	case slices.Contains(c.ClusterSecretAccepted, ""):
		return errors.New("--cluster-secret-accepted: an empty entry (a stray comma?); want SECRET or @FILE[,SECRET or @FILE...]")
	case c.AMQPAddr == "" && !c.tlsEnabled():
		return errors.New("--amqp-addr is off and TLS is not configured, so no AMQP listener would run: " +
			"set --tls-cert/--tls-key or --tls-self-signed (AMQPS on --amqps-addr), or give --amqp-addr HOST:PORT")
	}
	return nil
}

// validateCluster checks the multi-node settings.
func (c *Config) validateCluster() error {
	if c.AdvertiseAddr != "" {
		if err := dialable(c.AdvertiseAddr); err != nil {
			return fmt.Errorf("--advertise-addr %q: %v", c.AdvertiseAddr, err)
		}
	} else if host, _, _ := net.SplitHostPort(c.ClusterAddr); isWildcard(host) {
		return fmt.Errorf("--cluster-addr %q listens on every interface, which peers cannot dial: "+
			"set --advertise-addr to the HOST:PORT they should use (e.g. the pod's DNS name)", c.ClusterAddr)
	}
	for i, j := range c.Join {
		if err := dialable(j); err != nil {
			return fmt.Errorf("--join entry %d %q: %v", i+1, j, err)
		}
	}
	switch {
	case c.BootstrapExpect < 1:
		return fmt.Errorf("--bootstrap-expect %d: must be at least 1 (1 is a single node)", c.BootstrapExpect)
	case c.Replicas < 1:
		return fmt.Errorf("--replicas %d: must be at least 1", c.Replicas)
	case c.PartitionCount < 1 || c.PartitionCount > meta.MaxPartitionCount:
		return fmt.Errorf("--partition-count %d: want 1 to %d (Service Bus Standard uses 16)", c.PartitionCount, meta.MaxPartitionCount)
	case c.DeadNodeGrace <= 0:
		return fmt.Errorf("--dead-node-grace %v: must be positive", c.DeadNodeGrace)
	case c.Zone != "" && c.ZoneFromNode != "":
		return fmt.Errorf("--zone %q and --zone-from-node %q: set one (a fixed zone, or the Kubernetes node's)", c.Zone, c.ZoneFromNode)
	case c.RebalanceMoves < 0:
		return fmt.Errorf("--rebalance-moves %d: must be 0 (no automatic moves) or more", c.RebalanceMoves)
	case c.RaftLogStore != "shared" && c.RaftLogStore != "bolt" && c.RaftLogStore != "wal":
		return fmt.Errorf("--raft-log-store %q: want shared, bolt or wal", c.RaftLogStore)
	case c.RaftQuiesceAfter < 0:
		return fmt.Errorf("--raft-quiesce-after %v: must be 0 (never) or positive", c.RaftQuiesceAfter)
	case c.RaftPipeline < 1 || c.RaftPipeline > 256:
		return fmt.Errorf("--raft-pipeline %d: want 1 to 256", c.RaftPipeline)
	case c.RaftTransport != "groups" && c.RaftTransport != "per-group":
		return fmt.Errorf("--raft-transport %q: want groups or per-group", c.RaftTransport)
	}
	return nil
}

// dialable checks that a is a HOST:PORT another node can dial: a host that is not a
// wildcard and a port in 1..65535.
func dialable(a string) error {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return fmt.Errorf("want HOST:PORT: %v", err)
	}
	if host == "" || isWildcard(host) {
		return fmt.Errorf("host %q cannot be dialled: name this node's address or DNS name", host)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port %q: want a number in 1..65535", port)
	}
	return nil
}

// isWildcard reports whether host means "every interface".
func isWildcard(host string) bool {
	if host == "" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}

// setting binds one Config field to its flag, environment variable and file key.
type setting struct {
	name  string // flag name and JSON key
	usage string
	// Exactly one of these is set.
	str  *string
	dur  *time.Duration
	num  *int
	list *[]string // comma-separated in flags and the environment
	b    *bool     // true/false (also 1/0) in flags, the environment and the file
}

func (s setting) envName() string {
	return "QUORUMBUS_" + strings.ToUpper(strings.ReplaceAll(s.name, "-", "_"))
}

func (s setting) set(v string) error {
	switch {
	case s.str != nil:
		*s.str = v
	case s.num != nil:
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			return fmt.Errorf("%q is not a whole number", v)
		}
		*s.num = n
	case s.list != nil:
		*s.list = splitList(v)
	case s.b != nil:
		b, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			return fmt.Errorf("%q is not true or false", v)
		}
		*s.b = b
	default:
		d, err := time.ParseDuration(v)
		if err != nil {
			return err
		}
		*s.dur = d
	}
	return nil
}

// splitList splits a comma-separated list, trimming spaces. An empty element (a stray
// comma) is kept so that validation reports it.
func splitList(v string) []string {
	if strings.TrimSpace(v) == "" {
		return nil
	}
	parts := strings.Split(v, ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return parts
}

// copyTo copies the value s points at to the same field that o points at.
func (s setting) copyTo(o setting) {
	switch {
	case s.str != nil:
		*o.str = *s.str
	case s.num != nil:
		*o.num = *s.num
	case s.list != nil:
		*o.list = *s.list
	case s.b != nil:
		*o.b = *s.b
	default:
		*o.dur = *s.dur
	}
}

func settings(c *Config) []setting {
	return []setting{
		{name: "data", usage: "directory for all state (Raft logs, snapshots, metadata)", str: &c.Data},
		{name: "amqp-addr", usage: "plain AMQP 1.0 listener (emulator connection strings), HOST:PORT; \"\" or off turns it off (needs TLS)", str: &c.AMQPAddr},
		{name: "amqps-addr", usage: "AMQP 1.0 over TLS listener, HOST:PORT; listens only when TLS is configured", str: &c.AMQPSAddr},
		{name: "admin-addr", usage: "admin API listener (Service Bus ATOM API, /healthz, AMQP over WebSockets); HTTPS when TLS is configured, HOST:PORT", str: &c.AdminAddr},
		{name: "tls-cert", usage: "PEM certificate chain for AMQPS and HTTPS; reloaded when the file changes", str: &c.TLSCert},
		{name: "tls-key", usage: "PEM private key of --tls-cert; reloaded when the file changes", str: &c.TLSKey},
		{name: "tls-self-signed", usage: "serve TLS with a development CA and certificate kept in --data/tls (its ca.crt path is printed at start)", b: &c.TLSSelfSigned},
		{name: "cluster-secret", usage: "shared secret (>= 16 bytes, or @FILE) that authenticates and encrypts cluster traffic: mutual TLS from a CA derived from it, and gossip encryption; the same on every node", str: &c.ClusterSecret},
		{name: "cluster-secret-accepted", usage: "further cluster secrets (each >= 16 bytes, or @FILE; comma-separated) whose peers this node accepts, while it presents and encrypts with --cluster-secret: the secret being introduced or retired during a rotation (docs/security.md)", list: &c.ClusterSecretAccepted},
		{name: "cluster-tls-cert", usage: "PEM certificate of this node for mutual TLS on the cluster port, instead of one derived from --cluster-secret; reloaded on change", str: &c.ClusterTLSCert},
		{name: "cluster-tls-key", usage: "PEM private key of --cluster-tls-cert; reloaded on change", str: &c.ClusterTLSKey},
		{name: "cluster-tls-ca", usage: "PEM CA bundle peers' cluster certificates must chain to; reloaded on change", str: &c.ClusterTLSCA},
		{name: "cluster-addr", usage: "cluster traffic (all Raft groups), HOST:PORT", str: &c.ClusterAddr},
		{name: "node-id", usage: "this node's stable identity in the cluster; default: the ID recorded in --data, else the host name", str: &c.NodeID},
		{name: "namespace", usage: "the Service Bus namespace name this cluster serves (default: Config.json's, else quorumbus)", str: &c.Namespace},
		{name: "config-json", usage: "the official emulator's Config.json to load at start-up: a path, or the JSON itself", str: &c.ConfigJSON},
		{name: "sas-key-name", usage: "name of the default shared access key (Manage, Send, Listen)", str: &c.KeyName},
		{name: "sas-key", usage: "value of the default key; generated and kept in --data when empty", str: &c.Key},
		{name: "log-level", usage: "debug, info, warn or error", str: &c.LogLevel},
		{name: "log-format", usage: "text or json", str: &c.LogFormat},
		{name: "print-connection-string", usage: "print the start-up banner with the connection string (the root key) on standard output; by default only when standard output is a terminal and --log-format is text, so the key never lands in collected logs", b: &c.PrintConnectionString},
		{name: "pprof", usage: "serve Go's profiler under /debug/pprof/ on the admin port (off by default: it exposes internals to anyone who reaches the port)", b: &c.Pprof},
		{name: "shutdown-timeout", usage: "how long a graceful stop may take", dur: &c.ShutdownTimeout},
		{name: "memory-limit", usage: "soft limit on the node's memory (Go's GOMEMLIMIT), e.g. 2GiB; default 90% of the container's cgroup limit, 0 for none", str: &c.MemoryLimit},
		{name: "gc-headroom", usage: "how far the heap may grow past its live size before the next garbage collection, percent of it (at least 8 MiB): less memory per queued message, more CPU per message (docs/benchmarks.md); default 0 leaves GOGC to the runtime", num: &c.GCHeadroom},
		{name: "body-memory-budget-mb", usage: "MiB of message bodies the node keeps in memory; past it new bodies are written to scratch files under --data/bodies and read back on delivery, so a backlog can outgrow memory (docs/operations.md); default 0 keeps every body in memory", num: &c.BodyMemoryBudgetMB},
		{name: "body-disk-budget-mb", usage: "MiB of message bodies the node keeps on disk beyond --body-memory-budget-mb; with both full, sends are refused with a quota error until messages are received; default 0 for no limit", num: &c.BodyDiskBudgetMB},
		{name: "clock-offset-file", usage: "for fault tests only: a file holding an offset for this node's clock (a Go duration such as 90s or -2m), re-read every 100 ms, so one node's clock can jump without moving the machine's; every time the node stamps (locks, TTLs, schedules, idle deletion) moves with it", str: &c.ClockOffsetFile},
		{name: "advertise-addr", usage: "HOST:PORT peers dial to reach --cluster-addr (required when it is a wildcard such as 0.0.0.0:5400)", str: &c.AdvertiseAddr},
		{name: "join", usage: "cluster addresses of nodes to join, HOST:PORT[,HOST:PORT...]; names are re-resolved on every try", list: &c.Join},
		{name: "bootstrap-expect", usage: "how many nodes form a new cluster; 1 (the default) is a single node", num: &c.BootstrapExpect},
		{name: "zone", usage: "failure domain of this node; replicas are spread over zones", str: &c.Zone},
		{name: "zone-from-node", usage: "in a Kubernetes pod: the name of the node it runs on (spec.nodeName), whose topology.kubernetes.io/zone label becomes --zone, read from the API server at start with the pod's service account token (needs get on nodes)", str: &c.ZoneFromNode},
		{name: "replicas", usage: "replicas of each partition, fewer only while fewer nodes are alive (default 3)", num: &c.Replicas},
		{name: "partition-count", usage: "partitions of an entity created with EnablePartitioning, each holding MaxSizeInMegabytes (default 16, as Service Bus Standard)", num: &c.PartitionCount},
		{name: "dead-node-grace", usage: "how long a node may be unreachable before its replicas are placed elsewhere (default 10m)", dur: &c.DeadNodeGrace},
		{name: "rebalance-moves", usage: "partition groups the metadata leader moves a replica of at once, onto nodes holding less than an even share (nodes that joined) or into zones a group lacks; 0 turns these automatic moves off (default 2)", num: &c.RebalanceMoves},
		{name: "raft-log-store", usage: "Raft log store of the partition replicas this node creates: shared (one log engine per node in <data-dir>/raft-log, whose concurrent appends of all groups share one fsync; the default), bolt (a raft.db per replica, two fsyncs per append) or wal (raft-wal segment files per replica, one fsync per append); a replica keeps the store it was created with (docs/configuration.md)", str: &c.RaftLogStore},
		{name: "raft-quiesce-after", usage: "how long a partition group stays idle before it goes quiet: no heartbeats or timers until the next operation, failure detection by gossip and the transport (0: never) (default 2s)", dur: &c.RaftQuiesceAfter},
		{name: "raft-pipeline", usage: "how many AppendEntries a partition group's leader keeps in flight to each follower (pipelined replication; 1: one at a time, as earlier releases) (default 8)", num: &c.RaftPipeline},
		{name: "raft-transport", usage: "how the partition groups' Raft RPCs travel between nodes: groups (one connection per peer node for every group; the default) or per-group (pooled connections of each group's own, as earlier releases)", str: &c.RaftTransport},

		// AMQP limits (docs/security.md, "Limits").
		{name: "amqp-max-connections", usage: "AMQP connections this node serves; one more is closed with amqp:resource-limit-exceeded (default 1000)", num: &c.AMQPLimits.MaxConnections},
		{name: "amqp-max-sessions", usage: "sessions per AMQP connection, advertised as channel-max (default 256)", num: &c.AMQPLimits.MaxSessions},
		{name: "amqp-max-links-per-session", usage: "links per AMQP session, advertised as handle-max (default 500)", num: &c.AMQPLimits.MaxLinksPerSession},
		{name: "amqp-max-links-per-connection", usage: "links per AMQP connection over all its sessions (default 500)", num: &c.AMQPLimits.MaxLinksPerConnection},
		{name: "amqp-max-unauthenticated-links", usage: "links a connection may attach before it puts a token on $cbs (default 8)", num: &c.AMQPLimits.MaxUnauthenticatedLinks},
		{name: "amqp-max-frame-size", usage: "largest AMQP frame accepted and advertised, bytes (default 65536)", num: &c.AMQPLimits.MaxFrameSize},
		{name: "amqp-unauthenticated-timeout", usage: "a connection that has put no token on $cbs this long after open is closed (default 1m)", dur: &c.AMQPLimits.UnauthenticatedTimeout},
		{name: "amqp-claim-recheck-interval", usage: "how often a connection re-checks its tokens against the shared access rules; a removed rule or changed key cuts links off within it (default 30s)", dur: &c.AMQPLimits.ClaimRecheckInterval},
		{name: "amqp-max-app-properties-size", usage: "largest application-properties section of a message, bytes (default 65536, as Service Bus)", num: &c.AMQPLimits.MaxAppPropertiesSize},
		{name: "amqp-max-app-properties", usage: "most application properties in a message (default 32767, what the SDKs decode)", num: &c.AMQPLimits.MaxAppProperties},
		{name: "amqp-max-app-property-depth", usage: "how deeply an application property may nest lists and maps (default 8)", num: &c.AMQPLimits.MaxAppPropertyDepth},
		{name: "amqp-txn-timeout", usage: "how long a transaction may stay open between declare and discharge before it rolls back (default 2m, as Service Bus)", dur: &c.AMQPLimits.TxnTimeout},
		{name: "amqp-txn-max-operations", usage: "most operations (messages sent plus messages settled) in one transaction (default 100, as Service Bus)", num: &c.AMQPLimits.TxnMaxOperations},
		{name: "amqp-max-conn-buffered-mb", usage: "MiB of incomplete multi-frame messages one AMQP connection may buffer; a message beyond it is rejected with amqp:resource-limit-exceeded, so keep it above the largest MaxMessageSizeInKilobytes (default 128)", num: &c.AMQPLimits.MaxConnBufferedMB},
		{name: "amqp-max-unsettled-per-link", usage: "peek-lock deliveries a receiving link may hold unsettled; at the bound the node sends nothing more on it until the client settles (default 5000, the SDKs' largest credit)", num: &c.AMQPLimits.MaxUnsettledPerLink},
		{name: "amqp-max-unsettled-per-conn", usage: "peek-lock deliveries one AMQP connection may hold unsettled over all its receivers; at the bound its receivers wait for settlements (default 10000)", num: &c.AMQPLimits.MaxUnsettledPerConn},
		{name: "amqp-max-conn-outgoing-mb", usage: "MiB one AMQP connection may have queued for the client and not yet written (deliveries fetched for its receivers, $management responses, frames); a client that stops reading makes its receivers wait (default 16)", num: &c.AMQPLimits.MaxConnOutgoingMB},

		// HTTP limits, per port that speaks HTTP (docs/security.md, "Limits").
		{name: "http-max-connections", usage: "HTTP connections open at once on each port that serves HTTP (the admin port, and the HTTP side of the AMQP and AMQPS ports); one more is closed at once (default 1000)", num: &c.HTTPLimits.MaxConnections},
		{name: "http-read-timeout", usage: "how long an HTTP request may take to arrive, headers (at most 10s of it) and body; a slower one is answered or closed (default 1m)", dur: &c.HTTPLimits.ReadTimeout},
		{name: "http-write-timeout", usage: "how long one write of an HTTP response may wait for a client that does not read before the connection is closed (default 1m)", dur: &c.HTTPLimits.WriteTimeout},
		{name: "http-idle-timeout", usage: "how long a keep-alive HTTP connection may wait for its next request before it is closed (default 1m)", dur: &c.HTTPLimits.IdleTimeout},
	}
}

// loadConfig builds the Config from defaults, an optional JSON file (--config or
// QUORUMBUS_CONFIG), the environment and the command line, in rising precedence.
func loadConfig(args []string, getenv func(string) string, stderr io.Writer) (Config, error) {
	c := DefaultConfig()
	c.NodeID = "" // set below: the host name unless a source names it
	fs := flag.NewFlagSet("quorumbus", flag.ContinueOnError)
	fs.SetOutput(stderr)
	file := fs.String("config", getenv("QUORUMBUS_CONFIG"), "optional JSON config file; keys are the flag names")
	fs.BoolVar(&c.checkOnly, "check-config", false, "validate the settings, print them as a JSON config file (sas-key redacted) and exit")
	fs.BoolVar(&c.showVersion, "version", false, "print the version, VCS revision and Go version of this build and exit")
	ss := settings(&c)
	var fromFlags Config // parsed into a scratch Config, applied last
	for i, s := range settings(&fromFlags) {
		usage := fmt.Sprintf("%s (env %s)", ss[i].usage, ss[i].envName())
		switch {
		case s.str != nil:
			fs.StringVar(s.str, s.name, "", usage)
		case s.num != nil:
			fs.IntVar(s.num, s.name, 0, usage)
		case s.list != nil:
			fs.Func(s.name, usage, func(v string) error { *s.list = splitList(v); return nil })
		case s.b != nil:
			fs.BoolVar(s.b, s.name, false, usage)
		default:
			fs.DurationVar(s.dur, s.name, 0, usage)
		}
	}
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: quorumbus [flags]\n\nStarts a Quorumbus node. With no flags: one node on 127.0.0.1, data in ./data.\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if c.showVersion {
		return c, nil // whatever else is set: the version needs no valid settings
	}
	if *file != "" {
		if err := applyFile(ss, *file); err != nil {
			return c, err
		}
	}
	for _, s := range ss {
		if v := getenv(s.envName()); v != "" {
			if err := s.set(v); err != nil {
				return c, fmt.Errorf("%s=%q: %v", s.envName(), v, err)
			}
		}
	}
	explicit := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { explicit[f.Name] = true })
	for i, s := range settings(&fromFlags) {
		if !explicit[s.name] {
			continue
		}
		s.copyTo(ss[i])
	}
	if c.NodeID == "" {
		c.NodeID, c.nodeIDDefaulted = defaultNodeID(), true
	}
	if c.AMQPAddr == "off" { // the environment cannot say "": QUORUMBUS_AMQP_ADDR=off
		c.AMQPAddr = ""
	}
	err := c.Validate()
	return c, err
}

// nodeIDFile records, in the data directory, the node ID its Raft state belongs to.
const nodeIDFile = "node-id"

// resolveNodeID returns the ID to start with on data directory dir and records it
// there. The Raft state of a data directory belongs to one ID: a node restarted under
// another (a new host name) would not be a member of its own groups. So a defaulted ID
// yields to the recorded one, and an explicit ID that contradicts it is an error. A data
// directory written before IDs were recorded, by a single node, used "node-1".
func resolveNodeID(dir, id string, defaulted bool) (string, error) {
	path := filepath.Join(dir, nodeIDFile)
	b, err := os.ReadFile(path)
	recorded := strings.TrimSpace(string(b))
	switch {
	case err == nil && recorded != "":
	case errors.Is(err, os.ErrNotExist):
		if _, serr := os.Stat(filepath.Join(dir, "meta")); serr == nil && defaulted {
			recorded = "node-1" // a single node's default before node IDs were recorded
		}
	case err != nil:
		return "", fmt.Errorf("--data %s: %v", dir, err)
	}
	switch {
	case recorded == "":
	case defaulted:
		id = recorded
	case id != recorded:
		return "", fmt.Errorf("--node-id %q: the data directory %s belongs to node %q (%s); "+
			"start with --node-id %s, or with an empty --data to join as a new node", id, dir, recorded, path, recorded)
	}
	if err != nil { // not recorded yet
		// Durably: after a power loss the directory must still name its node.
		if err := durable.WriteFile(path, []byte(id+"\n"), 0o600); err != nil {
			return "", fmt.Errorf("--data %s: recording the node ID: %v", dir, err)
		}
	}
	return id, nil
}

// applyFile reads a JSON object whose keys are flag names; values are strings (durations
// as "30s"), numbers, or for lists an array of strings or a comma-separated string.
// Unknown keys are an error, so a typo does not pass silently.
func applyFile(ss []setting, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("--config: %v", err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return fmt.Errorf("--config %s: %v", path, err)
	}
	byName := map[string]setting{}
	for _, s := range ss {
		byName[s.name] = s
	}
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		s, ok := byName[k]
		if !ok {
			return fmt.Errorf("--config %s: unknown key %q", path, k)
		}
		var v string
		var list []string
		if s.list != nil && json.Unmarshal(raw[k], &list) == nil {
			*s.list = list
			continue
		}
		var b bool
		if s.b != nil && json.Unmarshal(raw[k], &b) == nil {
			*s.b = b
			continue
		}
		if err := json.Unmarshal(raw[k], &v); err != nil {
			var n json.Number
			if json.Unmarshal(raw[k], &n) != nil {
				return fmt.Errorf("--config %s: key %q: want a string", path, k)
			}
			v = n.String()
			if s.dur != nil {
				if _, err := strconv.ParseFloat(v, 64); err == nil {
					v += "s" // a bare number of seconds
				}
			}
		}
		if err := s.set(v); err != nil {
			return fmt.Errorf("--config %s: key %q: %v", path, k, err)
		}
	}
	return nil
}

// effectiveJSON is c as a config file (keys are flag names, durations in Go form), with
// the value of sas-key (and of each cluster secret, unless it names a file) replaced by
// "REDACTED" when one is set.
func (c Config) effectiveJSON() ([]byte, error) {
	out := map[string]any{}
	for _, s := range settings(&c) {
		switch {
		case s.str != nil:
			out[s.name] = *s.str
		case s.num != nil:
			out[s.name] = *s.num
		case s.list != nil:
			out[s.name] = append([]string{}, *s.list...)
		case s.b != nil:
			out[s.name] = *s.b
		default:
			out[s.name] = s.dur.String()
		}
	}
	if c.Key != "" {
		out["sas-key"] = "REDACTED"
	}
	if c.ClusterSecret != "" && !strings.HasPrefix(c.ClusterSecret, "@") {
		out["cluster-secret"] = "REDACTED"
	}
	accepted := []string{}
	for _, v := range c.ClusterSecretAccepted {
		if !strings.HasPrefix(v, "@") {
			v = "REDACTED"
		}
		accepted = append(accepted, v)
	}
	out["cluster-secret-accepted"] = accepted
	return json.MarshalIndent(out, "", "  ")
}
