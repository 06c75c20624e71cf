package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/quorumbus/quorumbus/amqp"
	"github.com/quorumbus/quorumbus/cluster"
	"github.com/quorumbus/quorumbus/cluster/admin"
	"github.com/quorumbus/quorumbus/cluster/meta"
	"github.com/quorumbus/quorumbus/cmd/internal/amqpws"
	"github.com/quorumbus/quorumbus/cmd/internal/bridge"
	"github.com/quorumbus/quorumbus/cmd/internal/explorer"
	"github.com/quorumbus/quorumbus/cmd/internal/sniff"
	"github.com/quorumbus/quorumbus/internal/certs"
	"github.com/quorumbus/quorumbus/internal/offsetclock"
)

// run starts the node and blocks until SIGTERM or SIGINT, then stops it gracefully.
func run(cfg Config) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	log := newLogger(cfg)
	slog.SetDefault(log) // libraries that log through slog's default follow --log-format
	ms, err := applyMemory(cfg)
	if err != nil {
		return err
	}
	if ms.limit > 0 || ms.headroom > 0 {
		log.Info("memory", "limit", ms.limit, "limit-from", ms.limitSrc, "gc-headroom-percent", ms.headroom)
	}
	if err := os.MkdirAll(cfg.Data, 0o750); err != nil {
		return err
	}
	id, err := resolveNodeID(cfg.Data, cfg.NodeID, cfg.nodeIDDefaulted)
	if err != nil {
		return err
	}
	cfg.NodeID = id

	tlsCfg, caFile, err := clientTLS(cfg)
	if err != nil {
		return err
	}

	// The client listeners are bound before the node starts, so that the node can
	// advertise the addresses they actually got (port 0 in tests) to its peers.
	var amqpLn, amqpsLn net.Listener
	if cfg.AMQPAddr != "" {
		if amqpLn, err = net.Listen("tcp", cfg.AMQPAddr); err != nil {
			return fmt.Errorf("--amqp-addr %s: %w", cfg.AMQPAddr, err)
		}
		defer amqpLn.Close()
	}
	if tlsCfg != nil {
		if amqpsLn, err = net.Listen("tcp", cfg.AMQPSAddr); err != nil {
			return fmt.Errorf("--amqps-addr %s: %w", cfg.AMQPSAddr, err)
		}
		defer amqpsLn.Close()
	}
	// The address advertised to peers and written to endpoints.json as "amqp":
	// plain AMQP when it listens, else AMQPS.
	clientLn := amqpLn
	if clientLn == nil {
		clientLn = amqpsLn
	}
	adminLn, err := net.Listen("tcp", cfg.AdminAddr)
	if err != nil {
		return fmt.Errorf("--admin-addr %s: %w", cfg.AdminAddr, err)
	}
	defer adminLn.Close()

	// Config.json is read before the node starts: its namespace name is the one the
	// node serves unless --namespace names another.
	var configJSON []byte
	var ec *meta.EmulatorConfig
	if cfg.ConfigJSON != "" {
		data, source, err := readConfigJSON(cfg.ConfigJSON)
		if err != nil {
			return err
		}
		var warnings []string
		ec, warnings, err = meta.LoadEmulatorConfig(data)
		for _, w := range warnings {
			log.Warn("Config.json", "source", source, "warning", w)
		}
		if err != nil {
			return fmt.Errorf("--config-json (%s): %w", source, err)
		}
		configJSON = data
	}
	switch {
	case cfg.Namespace == "" && ec != nil && ec.Namespace != "":
		cfg.Namespace = ec.Namespace
	case cfg.Namespace == "":
		cfg.Namespace = defaultNamespace
	}

	cc := clusterConfig(cfg, clientLn.Addr(), adminLn.Addr())
	if cc.TLS, cc.GossipKey, cc.GossipAcceptKeys, err = clusterCredentials(cfg); err != nil {
		return err
	}
	if cc.TLS == nil && (len(cfg.Join) > 0 || cfg.BootstrapExpect > 1) {
		log.Warn("cluster traffic is not authenticated: any process that reaches --cluster-addr can join; set --cluster-secret",
			"cluster_addr", cfg.ClusterAddr)
	}
	if cfg.ClockOffsetFile != "" {
		clock, err := offsetclock.New(cfg.ClockOffsetFile, 100*time.Millisecond)
		if err != nil {
			return fmt.Errorf("--clock-offset-file: %w", err)
		}
		defer clock.Close()
		log.Warn("this node's clock is offset by the contents of --clock-offset-file: for fault tests only",
			"file", cfg.ClockOffsetFile, "offset", clock.Offset())
		cc.Clock = clock
	}
	cc.Logger = log
	startCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	node, err := cluster.Start(startCtx, cc)
	cancel()
	if err != nil {
		return err
	}
	defer node.Close()

	if configJSON != nil {
		if _, err := node.LoadEmulatorConfig(ctx, configJSON); err != nil {
			return fmt.Errorf("--config-json: %w", err)
		}
		if node.Namespace() != ec.Namespace {
			log.Warn("Config.json names another namespace than the node serves",
				"config_json", ec.Namespace, "serving", node.Namespace(),
				"why", "--namespace, or a data directory created under another name")
		}
		queues, topics, subs := ec.Counts()
		log.Info("Config.json loaded", "namespace", node.Namespace(), "queues", queues, "topics", topics, "subscriptions", subs)
	}

	ac := amqp.DefaultConfig()
	ac.Addresses = nil // listeners are handed to Serve below
	ac.Namespace = node.Namespace()
	ac.Logger = log
	cfg.AMQPLimits.apply(ac)
	srv, err := amqp.New(ac, bridge.New(node))
	if err != nil {
		return err
	}
	defer srv.Close()
	if err := node.Registry().Register(amqpCollector{srv}); err != nil {
		return err
	}
	amqpErr := make(chan error, 4)
	// Each Serve ends when srv.Close closes its listener. The AMQP ports serve the admin
	// API too, told apart by the first bytes (after the TLS handshake on AMQPS): "AMQP"
	// is AMQP, anything else HTTP (cmd/internal/sniff). So the TLS connection string
	// works for the SDKs' administration clients (HTTPS to the Endpoint's host and port),
	// and so does the emulator string for a client that, like the .NET one with
	// UseDevelopmentEmulator=true, speaks plain HTTP to the Endpoint's port.
	var amqpHTTP, amqpsHTTP net.Listener
	if amqpLn != nil {
		mux := sniff.New(amqpLn, 10*time.Second)
		amqpHTTP = mux.HTTP()
		go func() { amqpErr <- mux.Serve() }()
		go func() { amqpErr <- srv.Serve(mux.AMQP()) }()
	}
	if amqpsLn != nil {
		mux := sniff.New(tls.NewListener(amqpsLn, tlsCfg), 10*time.Second)
		amqpsHTTP = mux.HTTP()
		go func() { amqpErr <- mux.Serve() }()
		go func() { amqpErr <- srv.Serve(mux.AMQP()) }()
	}

	hc := admin.DefaultConfig()
	hc.Store = node
	// Ready while the node can serve and the AMQP listener accepts: a listener
	// retrying a failing Accept (out of file descriptors) takes the node out of
	// rotation instead of leaving it looking healthy while it serves no one.
	// Ready for traffic: the metadata group and every local replica have a leader,
	// every local replica is within reach of its leader's log (cluster.Node.CaughtUp),
	// and the AMQP listeners accept: a listener retrying a failing Accept (out of file
	// descriptors) takes the node out of rotation instead of leaving it looking healthy
	// while it serves no one.
	hc.Ready = func() error {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return errors.Join(node.CaughtUp(ctx), srv.Ready())
	}
	hc.Metrics = promhttp.HandlerFor(node.Registry(), promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn), ErrorHandling: promhttp.ContinueOnError,
	})
	if cfg.Pprof {
		hc.Debug = pprofHandler()
		log.Warn("--pprof: Go's profiler is served under /debug/pprof/ on the admin port", "admin", adminLn.Addr().String())
	}
	hc.Logger = log
	hc.PartitionCount = int32(cfg.PartitionCount)
	// The node serves the cluster API once it implements admin.Cluster; until then
	// /$cluster/ answers 404 saying the node runs without a cluster.
	if c, ok := any(node).(admin.Cluster); ok {
		hc.Cluster = c
	}
	handler, err := admin.New(hc)
	if err != nil {
		return err
	}
	// AMQP over WebSockets shares the admin port (443-style: one HTTPS port for the
	// management API and wss://host/$servicebus/websocket). One WebSocket message holds
	// at most a few frames; bound it well above the frame size.
	ws := amqpws.Handler(srv.ServeConn, max(1<<20, 4*int64(ac.MaxFrameSize)), log)
	// The explorer web UI shares the admin port too: its page at "/", its assets and
	// JSON API under /$ui/; every other path goes on to the WebSocket route and the
	// admin API unchanged. Its SDK clients reach the AMQP server through a pipe.
	xc := explorer.DefaultConfig()
	xc.Dial = func(context.Context) (net.Conn, error) {
		client, server := net.Pipe()
		srv.ServeConn(server)
		return client, nil
	}
	xc.Authorize = handler.Authorize
	xc.Next = amqpws.Route(ws, handler)
	xc.Sessions = explorer.NodeSessions(node)
	trust := caFile
	if trust == "" {
		trust = cfg.TLSCert
	}
	xc.Metrics = newClusterMetrics(cfg.NodeID, node.Registry(), hc.Cluster, tlsCfg != nil, trust)
	xc.Logger = log
	ui, err := explorer.New(xc)
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: ui, ReadHeaderTimeout: 10 * time.Second}
	// On the AMQP ports: the admin API and AMQP over WebSockets, not the explorer.
	ps := &http.Server{Handler: amqpws.Route(ws, handler), ReadHeaderTimeout: 10 * time.Second}
	adminErr := make(chan error, 3)
	for _, ln := range []net.Listener{amqpHTTP, amqpsHTTP} {
		if ln != nil {
			go func() { adminErr <- ps.Serve(ln) }() // TLS, if any, already ended by the mux
		}
	}
	adminScheme := "http"
	if tlsCfg != nil {
		adminScheme = "https"
		hs.TLSConfig = tlsCfg.Clone()
		go func() { adminErr <- hs.ServeTLS(adminLn, "", "") }() // certificate from GetCertificate
	} else {
		go func() { adminErr <- hs.Serve(adminLn) }()
	}

	name, key := node.DefaultKey()
	sas := amqp.SASKey{Name: name, Key: key}
	ep := endpoints{
		AMQP: clientLn.Addr().String(), Admin: adminLn.Addr().String(),
		AdminURL: adminScheme + "://" + adminLn.Addr().String(), Cluster: node.ClusterAddr(), CA: caFile,
	}
	if amqpLn != nil {
		ep.ConnectionString = amqp.ConnectionString(amqpLn.Addr().String(), sas)
	}
	if amqpsLn != nil {
		ep.AMQPS = amqpsLn.Addr().String()
		ep.TLSConnectionString = tlsConnectionString(ep.AMQPS, sas)
		if ep.ConnectionString == "" {
			ep.ConnectionString = ep.TLSConnectionString
		}
	}
	if err := writeEndpoints(cfg.Data, ep); err != nil {
		return err
	}
	if cfg.PrintConnectionString || (cfg.LogFormat == "text" && stdoutIsTerminal()) {
		printBanner(cfg, node.Namespace(), ep)
	}
	// The log line has no key: it goes wherever logs are collected.
	log.Info("serving", "node", cfg.NodeID, "namespace", node.Namespace(), "amqp", ep.AMQP, "amqps", ep.AMQPS,
		"admin", ep.AdminURL, "connection_string_file", filepath.Join(cfg.Data, "connection-string"))
	if ep.CA != "" {
		// A development certificate: worth a warning in any log, and clients need the CA
		// (no secret) to trust it.
		log.Warn("serving TLS with a self-signed development certificate; clients must trust its CA", "tls_ca_file", ep.CA)
	}

	select {
	case <-ctx.Done():
		log.Info("shutting down")
	case err := <-adminErr:
		return fmt.Errorf("admin API: %w", err)
	case err := <-amqpErr:
		return fmt.Errorf("AMQP listener: %w", err)
	}
	stop()
	shutCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	// Clients go first, so they reconnect to other nodes; then the node hands its
	// leaderships over and leaves (when it can: cluster.Node gains Shutdown with the
	// multi-node work), all within --shutdown-timeout; Close ends the rest.
	errs := []error{hs.Shutdown(shutCtx), ps.Shutdown(shutCtx), srv.Close()}
	if g, ok := any(node).(interface{ Shutdown(context.Context) error }); ok {
		if err := g.Shutdown(shutCtx); err != nil {
			errs = append(errs, fmt.Errorf("graceful leave: %w", err))
		}
	}
	errs = append(errs, node.Close())
	return errors.Join(errs...)
}

// printBanner prints, for a person at a terminal, where the node listens and the
// connection string with the root key (--print-connection-string).
func printBanner(cfg Config, namespace string, ep endpoints) {
	fmt.Printf("Quorumbus is running (node %s, namespace %s, data %s)\n", cfg.NodeID, namespace, cfg.Data)
	if ep.AMQP != "" && ep.AMQP != ep.AMQPS {
		fmt.Printf("  AMQP      %s\n", ep.AMQP)
	}
	if ep.AMQPS != "" {
		fmt.Printf("  AMQPS     %s\n  WebSocket wss://%s/$servicebus/websocket\n", ep.AMQPS, ep.Admin)
	}
	fmt.Printf("  admin API %s\n  explorer  %s/\n", ep.AdminURL, ep.AdminURL)
	if ep.CA != "" {
		fmt.Printf("  TLS       self-signed development certificate; clients trust the CA in %s\n", ep.CA)
	}
	fmt.Printf("Connection string:\n%s\n", ep.ConnectionString)
	if ep.TLSConnectionString != "" && ep.TLSConnectionString != ep.ConnectionString {
		fmt.Printf("Connection string (TLS):\n%s\n", ep.TLSConnectionString)
	}
}

// stdoutIsTerminal reports whether standard output is a character device (a terminal),
// not a pipe or file a log collector reads.
func stdoutIsTerminal() bool {
	fi, err := os.Stdout.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// defaultNamespace is the namespace name when neither --namespace nor Config.json names one.
const defaultNamespace = "quorumbus"

// readConfigJSON reads --config-json: a file path, or (a value containing "{") the
// Config.json content itself, so a container can be configured by environment alone
// (QUORUMBUS_CONFIG_JSON='{"UserConfig": ...}').
func readConfigJSON(v string) (data []byte, source string, err error) {
	if strings.Contains(v, "{") {
		return []byte(v), "inline --config-json / QUORUMBUS_CONFIG_JSON", nil
	}
	data, err = os.ReadFile(v)
	if err != nil {
		return nil, v, fmt.Errorf("--config-json: %w", err)
	}
	return data, v, nil
}

// clusterConfig maps the node's settings to cluster.Config. amqpAddr and adminAddr are
// the bound client listeners; they are advertised to peers, with a wildcard host
// replaced by the host of --advertise-addr.
func clusterConfig(cfg Config, amqpAddr, adminAddr net.Addr) cluster.Config {
	cc := cluster.DefaultConfig()
	cc.NodeID = cfg.NodeID
	cc.DataDir = cfg.Data
	cc.ClusterAddr = cfg.ClusterAddr
	cc.Namespace = cfg.Namespace
	cc.DefaultKeyName = cfg.KeyName
	cc.DefaultKey = cfg.Key
	cc.AdvertiseAddr = cfg.AdvertiseAddr
	cc.Join = append([]string(nil), cfg.Join...)
	cc.BootstrapExpect = cfg.BootstrapExpect
	cc.Zone = cfg.Zone
	cc.Replicas = cfg.Replicas
	cc.DeadNodeGrace = cfg.DeadNodeGrace
	cc.BodyMemoryBudget = int64(cfg.BodyMemoryBudgetMB) << 20
	cc.BodyDiskBudget = int64(cfg.BodyDiskBudgetMB) << 20
	cc.Raft.LogStore = cfg.RaftLogStore
	cc.Raft.PerGroupTransport = cfg.RaftTransport == "per-group"
	advHost, _, _ := net.SplitHostPort(cfg.AdvertiseAddr)
	cc.AMQPAddr = advertised(amqpAddr, advHost)
	cc.AdminAddr = advertised(adminAddr, advHost)
	return cc
}

// advertised is the address peers and operators should use for a listener bound to a:
// a itself, or with a wildcard host, host with a's port ("" keeps a as it is).
func advertised(a net.Addr, host string) string {
	h, port, err := net.SplitHostPort(a.String())
	if err != nil || host == "" || !isWildcard(h) {
		return a.String()
	}
	return net.JoinHostPort(host, port)
}

// clientTLS is the TLS configuration of the client listeners (AMQPS, HTTPS admin,
// WebSockets), nil when TLS is not configured. With --tls-self-signed it creates (or
// reuses) the development certificate in <data>/tls and returns its CA file.
func clientTLS(cfg Config) (*tls.Config, string, error) {
	if !cfg.tlsEnabled() {
		return nil, "", nil
	}
	certFile, keyFile, caFile := cfg.TLSCert, cfg.TLSKey, ""
	if cfg.TLSSelfSigned {
		var hosts []string
		for _, a := range []string{cfg.AdvertiseAddr, cfg.AMQPSAddr, cfg.AdminAddr} {
			if h, _, err := net.SplitHostPort(a); err == nil && !isWildcard(h) {
				hosts = append(hosts, h)
			}
		}
		f, err := certs.SelfSigned(filepath.Join(cfg.Data, "tls"), hosts, time.Now())
		if err != nil {
			return nil, "", fmt.Errorf("--tls-self-signed: %w", err)
		}
		certFile, keyFile, caFile = f.Cert, f.Key, f.CA
	}
	r, err := certs.NewReloader(certFile, keyFile)
	if err != nil {
		return nil, "", fmt.Errorf("--tls-cert/--tls-key: %w", err)
	}
	return certs.ServerConfig(r), caFile, nil
}

// clusterCredentials are the mutual-TLS configuration of the cluster port and the
// gossip keys: from --cluster-tls-* files when given, else derived from --cluster-secret
// (trusting also the CAs of --cluster-secret-accepted); none without a secret. The
// gossip key is the current secret's, the accepted keys those of the accepted secrets.
func clusterCredentials(cfg Config) (tc *tls.Config, key []byte, accept [][]byte, err error) {
	if cfg.ClusterSecret == "" {
		return nil, nil, nil, nil
	}
	secret, err := certs.ReadSecret(cfg.ClusterSecret)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("--cluster-secret: %w", err)
	}
	if key, err = certs.GossipKey(secret); err != nil {
		return nil, nil, nil, fmt.Errorf("--cluster-secret: %w", err)
	}
	var accepted [][]byte
	for i, v := range cfg.ClusterSecretAccepted {
		a, err := certs.ReadSecret(v)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("--cluster-secret-accepted entry %d: %w", i+1, err)
		}
		k, err := certs.GossipKey(a)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("--cluster-secret-accepted entry %d: %w", i+1, err)
		}
		accepted, accept = append(accepted, a), append(accept, k)
	}
	if cfg.ClusterTLSCert != "" {
		tc, err := certs.FileClusterTLS(cfg.ClusterTLSCert, cfg.ClusterTLSKey, cfg.ClusterTLSCA)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("--cluster-tls-cert/--cluster-tls-key/--cluster-tls-ca: %w", err)
		}
		return tc, key, accept, nil
	}
	if tc, err = certs.SecretClusterTLS(secret, cfg.NodeID, time.Now(), accepted...); err != nil {
		return nil, nil, nil, fmt.Errorf("--cluster-secret: %w", err)
	}
	return tc, key, accept, nil
}

// tlsConnectionString is a normal (non-emulator) connection string for the AMQPS
// listener at hostPort; a loopback host is named localhost, which the development
// certificate covers.
func tlsConnectionString(hostPort string, key amqp.SASKey) string {
	if h, p, err := net.SplitHostPort(hostPort); err == nil {
		if ip := net.ParseIP(h); ip != nil && ip.IsLoopback() {
			hostPort = net.JoinHostPort("localhost", p)
		}
	}
	return "Endpoint=sb://" + hostPort + "/;SharedAccessKeyName=" + key.Name + ";SharedAccessKey=" + key.Key
}

// endpoints is endpoints.json: where the node listens (ports may be 0 on the command
// line). AMQP is the plain listener, or AMQPS when plain AMQP is off.
type endpoints struct {
	AMQP                string `json:"amqp"`
	AMQPS               string `json:"amqps,omitempty"`
	Admin               string `json:"admin"`
	AdminURL            string `json:"adminURL"`
	Cluster             string `json:"cluster"`
	CA                  string `json:"ca,omitempty"`
	ConnectionString    string `json:"connectionString"`
	TLSConnectionString string `json:"tlsConnectionString,omitempty"`
}

// writeEndpoints records where the node listens: endpoints.json for tools and tests
// and connection-string for qbctl. Each is written to a temporary file and renamed, so
// a reader never sees half a file.
func writeEndpoints(dir string, ep endpoints) error {
	b, err := json.MarshalIndent(ep, "", "  ")
	if err != nil {
		return err
	}
	connStr := ep.ConnectionString
	for name, data := range map[string][]byte{"endpoints.json": b, "connection-string": []byte(connStr + "\n")} {
		tmp := filepath.Join(dir, "."+name+".tmp")
		if err := os.WriteFile(tmp, data, 0o600); err != nil {
			return err
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			return err
		}
	}
	return nil
}

func newLogger(cfg Config) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.LogLevel))
	opts := &slog.HandlerOptions{Level: level}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts))
}
