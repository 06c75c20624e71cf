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
	"sync"
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
	"github.com/quorumbus/quorumbus/cmd/internal/httplimit"
	"github.com/quorumbus/quorumbus/cmd/internal/kubenode"
	"github.com/quorumbus/quorumbus/cmd/internal/sniff"
	"github.com/quorumbus/quorumbus/cmd/internal/version"
	"github.com/quorumbus/quorumbus/internal/certs"
	"github.com/quorumbus/quorumbus/internal/offsetclock"
)

// run starts the node and blocks until SIGTERM or SIGINT, then stops it gracefully.
// Each start-up step returns its closer, deferred so that a failed start undoes what
// had started, last first; on a signal run shuts the HTTP servers down and has the node
// leave gracefully before the closers (each runs once) end the rest.
func run(cfg Config) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	log := newLogger(cfg)
	slog.SetDefault(log) // libraries that log through slog's default follow --log-format
	unlock, err := prepareData(&cfg, log)
	if err != nil {
		return err
	}
	defer unlock()
	if cfg.ZoneFromNode != "" {
		kc, err := kubenode.InCluster(os.Getenv)
		if err != nil {
			return fmt.Errorf("--zone-from-node: %w", err)
		}
		if cfg.Zone, err = zoneFromNode(ctx, kc, cfg.ZoneFromNode, time.Minute, log); err != nil {
			return err
		}
	}
	ls, closeListeners, err := listen(cfg)
	if err != nil {
		return err
	}
	defer closeListeners()
	node, closeNode, err := startNode(ctx, &cfg, ls, log)
	if err != nil {
		return err
	}
	defer closeNode()
	front, closeAMQP, err := startAMQP(cfg, node, ls, log)
	if err != nil {
		return err
	}
	defer closeAMQP()
	web, shutdownHTTP, err := startHTTP(ctx, cfg, node, front, ls, log)
	if err != nil {
		return err
	}
	if err := announce(cfg, node, ls, log); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		log.Info("shutting down")
	case err := <-web.errc:
		return fmt.Errorf("admin API: %w", err)
	case err := <-front.errc:
		return fmt.Errorf("AMQP listener: %w", err)
	}
	stop()
	shutCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	// Clients go first, so they reconnect to other nodes; then the node hands its
	// leaderships over and leaves, all within --shutdown-timeout; closeNode ends the rest.
	errs := []error{shutdownHTTP(shutCtx), closeAMQP()}
	if err := node.Shutdown(shutCtx); err != nil {
		errs = append(errs, fmt.Errorf("graceful leave: %w", err))
	}
	errs = append(errs, closeNode())
	return errors.Join(errs...)
}

// prepareData applies the memory settings, creates the data directory, takes its lock
// (lockData) and settles the node ID it belongs to (resolveNodeID). unlock releases the
// lock.
func prepareData(cfg *Config, log *slog.Logger) (unlock func(), err error) {
	ms, err := applyMemory(*cfg)
	if err != nil {
		return nil, err
	}
	if ms.limit > 0 || ms.headroom > 0 {
		log.Info("memory", "limit", ms.limit, "limit-from", ms.limitSrc, "gc-headroom-percent", ms.headroom)
	}
	if err := os.MkdirAll(cfg.Data, 0o750); err != nil {
		return nil, err
	}
	if unlock, err = lockData(cfg.Data); err != nil {
		return nil, err
	}
	id, err := resolveNodeID(cfg.Data, cfg.NodeID, cfg.nodeIDDefaulted)
	if err != nil {
		unlock()
		return nil, err
	}
	cfg.NodeID = id
	return unlock, nil
}

// listeners are the node's client listeners and their TLS. They are bound before the
// node starts, so that the node can advertise the addresses they actually got (port 0
// in tests) to its peers.
type listeners struct {
	amqp, amqps net.Listener // nil when off (--amqp-addr "", or no TLS)
	admin       net.Listener
	tls         *tls.Config // AMQPS, HTTPS admin and WebSockets; nil without TLS
	caFile      string      // the development CA of --tls-self-signed, else ""
}

// client is the listener advertised to peers and written to endpoints.json as "amqp":
// plain AMQP when it listens, else AMQPS.
func (ls *listeners) client() net.Listener {
	if ls.amqp != nil {
		return ls.amqp
	}
	return ls.amqps
}

// listen sets up client TLS and binds the client listeners; its closer closes them.
func listen(cfg Config) (*listeners, func(), error) {
	ls := &listeners{}
	closeAll := func() {
		for _, l := range []net.Listener{ls.amqp, ls.amqps, ls.admin} {
			if l != nil {
				_ = l.Close() // already closed by Serve's end on a graceful stop
			}
		}
	}
	var err error
	if ls.tls, ls.caFile, err = clientTLS(cfg); err != nil {
		return nil, nil, err
	}
	if cfg.AMQPAddr != "" {
		if ls.amqp, err = net.Listen("tcp", cfg.AMQPAddr); err != nil {
			return nil, nil, fmt.Errorf("--amqp-addr %s: %w", cfg.AMQPAddr, err)
		}
	}
	if ls.tls != nil {
		if ls.amqps, err = net.Listen("tcp", cfg.AMQPSAddr); err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("--amqps-addr %s: %w", cfg.AMQPSAddr, err)
		}
	}
	if ls.admin, err = net.Listen("tcp", cfg.AdminAddr); err != nil {
		closeAll()
		return nil, nil, fmt.Errorf("--admin-addr %s: %w", cfg.AdminAddr, err)
	}
	return ls, closeAll, nil
}

// startNode starts the node's share of the cluster and loads --config-json into it. It
// sets cfg.Namespace: --namespace, else Config.json's, else the default. Its closer
// closes the node at once (Node.Shutdown is the graceful leave) and is safe to call
// again.
func startNode(ctx context.Context, cfg *Config, ls *listeners, log *slog.Logger) (*cluster.Node, func() error, error) {
	// Config.json is read before the node starts: its namespace name is the one the
	// node serves unless --namespace names another.
	configJSON, ec, err := readEmulatorConfig(cfg.ConfigJSON, log)
	if err != nil {
		return nil, nil, err
	}
	switch {
	case cfg.Namespace == "" && ec != nil && ec.Namespace != "":
		cfg.Namespace = ec.Namespace
	case cfg.Namespace == "":
		cfg.Namespace = cluster.DefaultConfig().Namespace
	}
	cc, closeClock, err := nodeConfig(*cfg, ls, log)
	if err != nil {
		return nil, nil, err
	}
	startCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	node, err := cluster.Start(startCtx, cc)
	cancel()
	if err != nil {
		closeClock()
		return nil, nil, err
	}
	closeNode := sync.OnceValue(func() error {
		defer closeClock()
		return node.Close()
	})
	if configJSON != nil {
		if err := loadEmulatorConfig(ctx, node, configJSON, ec, log); err != nil {
			_ = closeNode() // the start-up error is the news
			return nil, nil, err
		}
	}
	return node, closeNode, nil
}

// readEmulatorConfig reads and checks --config-json; nil, nil without one.
func readEmulatorConfig(v string, log *slog.Logger) ([]byte, *meta.EmulatorConfig, error) {
	if v == "" {
		return nil, nil, nil
	}
	data, source, err := readConfigJSON(v)
	if err != nil {
		return nil, nil, err
	}
	ec, warnings, err := meta.LoadEmulatorConfig(data)
	for _, w := range warnings {
		log.Warn("Config.json", "source", source, "warning", w)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("--config-json (%s): %w", source, err)
	}
	return data, ec, nil
}

// loadEmulatorConfig creates what Config.json declares on the started node.
func loadEmulatorConfig(ctx context.Context, node *cluster.Node, data []byte, ec *meta.EmulatorConfig, log *slog.Logger) error {
	if _, err := node.LoadEmulatorConfig(ctx, data); err != nil {
		return fmt.Errorf("--config-json: %w", err)
	}
	if node.Namespace() != ec.Namespace {
		log.Warn("Config.json names another namespace than the node serves",
			"config_json", ec.Namespace, "serving", node.Namespace(),
			"why", "--namespace, or a data directory created under another name")
	}
	queues, topics, subs := ec.Counts()
	log.Info("Config.json loaded", "namespace", node.Namespace(), "queues", queues, "topics", topics, "subscriptions", subs)
	return nil
}

// nodeConfig is clusterConfig plus what start-up adds: the cluster credentials, the
// logger and, with --clock-offset-file, the offset clock, which its closer stops.
func nodeConfig(cfg Config, ls *listeners, log *slog.Logger) (cluster.Config, func(), error) {
	cc := clusterConfig(cfg, ls.client().Addr(), ls.admin.Addr())
	var err error
	if cc.TLS, cc.GossipKey, cc.GossipAcceptKeys, err = clusterCredentials(cfg); err != nil {
		return cc, nil, err
	}
	if cc.TLS == nil && (len(cfg.Join) > 0 || cfg.BootstrapExpect > 1) {
		log.Warn("cluster traffic is not authenticated: any process that reaches --cluster-addr can join; set --cluster-secret",
			"cluster_addr", cfg.ClusterAddr)
	}
	cc.Logger = log
	if cfg.ClockOffsetFile == "" {
		return cc, func() {}, nil
	}
	clock, err := offsetclock.New(cfg.ClockOffsetFile, 100*time.Millisecond)
	if err != nil {
		return cc, nil, fmt.Errorf("--clock-offset-file: %w", err)
	}
	log.Warn("this node's clock is offset by the contents of --clock-offset-file: for fault tests only",
		"file", cfg.ClockOffsetFile, "offset", clock.Offset())
	cc.Clock = clock
	return cc, clock.Close, nil
}

// amqpFront is the AMQP server on the client listeners.
type amqpFront struct {
	srv *amqp.Server
	// http are the client listeners' HTTP halves (cmd/internal/sniff), each bounded to
	// --http-max-connections; nil when off.
	http []*httplimit.Listener
	errc chan error // a listener's Serve ended
}

// startAMQP starts the AMQP server on the client listeners. Its closer closes the
// server (and, through it, the listeners' AMQP halves) and is safe to call again.
func startAMQP(cfg Config, node *cluster.Node, ls *listeners, log *slog.Logger) (*amqpFront, func() error, error) {
	ac := amqp.DefaultConfig()
	ac.Addresses = nil // listeners are handed to Serve below
	ac.Namespace = node.Namespace()
	ac.Logger = log
	cfg.AMQPLimits.apply(ac)
	srv, err := amqp.New(ac, bridge.New(node))
	if err != nil {
		return nil, nil, err
	}
	closeSrv := sync.OnceValue(srv.Close)
	if err := errors.Join(node.Registry().Register(amqpCollector{srv}), node.Registry().Register(buildInfo())); err != nil {
		_ = closeSrv()
		return nil, nil, err
	}
	f := &amqpFront{srv: srv, errc: make(chan error, 4)}
	// Each Serve ends when srv.Close closes its listener. The AMQP ports serve the admin
	// API too, told apart by the first bytes (after the TLS handshake on AMQPS): "AMQP"
	// is AMQP, anything else HTTP (cmd/internal/sniff). So the TLS connection string
	// works for the SDKs' administration clients (HTTPS to the Endpoint's host and port),
	// and so does the emulator string for a client that, like the .NET one with
	// UseDevelopmentEmulator=true, speaks plain HTTP to the Endpoint's port.
	//
	// Sockets are bounded twice: the HTTP half to --http-max-connections, and the port as
	// a whole (AMQP, HTTP and connections not yet told apart, each of which waits at most
	// the header wait for its first bytes) to the sum of both limits and the 64 AMQP
	// refusals the server may have in progress, so that a flood of silent sockets cannot
	// outgrow what the two servers bound.
	hl := cfg.HTTPLimits
	portMax := cfg.AMQPLimits.MaxConnections + hl.MaxConnections + 64
	serve := func(ln net.Listener, tc *tls.Config) {
		var bounded net.Listener = httplimit.NewListener(ln, portMax)
		if tc != nil {
			bounded = tls.NewListener(bounded, tc)
		}
		mux := sniff.New(bounded, min(httplimit.MaxHeaderWait, hl.ReadTimeout))
		f.http = append(f.http, hl.Listen(mux.HTTP()))
		go func() { f.errc <- mux.Serve() }()
		go func() { f.errc <- srv.Serve(mux.AMQP()) }()
	}
	if ls.amqp != nil {
		serve(ls.amqp, nil)
	}
	if ls.amqps != nil {
		serve(ls.amqps, ls.tls)
	}
	return f, closeSrv, nil
}

// webFront is the HTTP side: the explorer, admin API and AMQP over WebSockets on the
// admin port, and the admin API and WebSockets on the AMQP ports.
type webFront struct {
	hs, ps *http.Server        // admin port; AMQP ports
	admin  *httplimit.Listener // the admin port's listener
	amqp   []*httplimit.Listener
	errc   chan error // a Serve ended
}

// startHTTP serves the admin port and the AMQP ports' HTTP halves. Its closer shuts the
// servers down within the context it is given.
func startHTTP(ctx context.Context, cfg Config, node *cluster.Node, f *amqpFront, ls *listeners, log *slog.Logger) (*webFront, func(context.Context) error, error) {
	handler, err := adminHandler(ctx, cfg, node, f.srv, ls, log)
	if err != nil {
		return nil, nil, err
	}
	// AMQP over WebSockets shares the admin port (443-style: one HTTPS port for the
	// management API and wss://host/$servicebus/websocket). One WebSocket message holds
	// at most a few frames; bound it well above the frame size.
	ws := amqpws.Handler(f.srv.ServeConn, max(1<<20, 4*int64(cfg.AMQPLimits.MaxFrameSize)), log)
	ui, err := explorerHandler(cfg, node, f.srv, amqpws.Route(ws, handler), handler.Authorize, ls, log)
	if err != nil {
		return nil, nil, err
	}
	// Every HTTP port is bounded by --http-max-connections and the --http-*-timeout
	// settings (cmd/internal/httplimit, docs/security.md).
	hl := cfg.HTTPLimits
	w := &webFront{
		hs: hl.Server(ui),
		// On the AMQP ports: the admin API and AMQP over WebSockets, not the explorer.
		ps:    hl.Server(amqpws.Route(ws, handler)),
		admin: hl.Listen(ls.admin), // counted before the TLS handshake, which it bounds too
		amqp:  f.http,
		errc:  make(chan error, 3),
	}
	for _, ln := range f.http {
		go func() { w.errc <- w.ps.Serve(ln) }() // TLS, if any, already ended by the mux
	}
	if ls.tls != nil {
		w.hs.TLSConfig = ls.tls.Clone()
		go func() { w.errc <- w.hs.ServeTLS(w.admin, "", "") }() // certificate from GetCertificate
	} else {
		go func() { w.errc <- w.hs.Serve(w.admin) }()
	}
	if err := node.Registry().Register(httpCollector{w}); err != nil {
		return nil, nil, err
	}
	shutdown := func(ctx context.Context) error { return errors.Join(w.hs.Shutdown(ctx), w.ps.Shutdown(ctx)) }
	return w, shutdown, nil
}

// adminHandler is the admin API: Service Bus's ATOM entity API, the cluster API,
// /healthz, /readyz, /metrics and, with --pprof, /debug/pprof/.
func adminHandler(ctx context.Context, cfg Config, node *cluster.Node, srv *amqp.Server, ls *listeners, log *slog.Logger) (*admin.Handler, error) {
	hc := admin.DefaultConfig()
	hc.Store = node.Store()
	hc.Cluster = node.Ops()
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
		log.Warn("--pprof: Go's profiler is served under /debug/pprof/ on the admin port", "admin", ls.admin.Addr().String())
	}
	hc.Logger = log
	hc.PartitionCount = int32(cfg.PartitionCount)
	return admin.New(hc)
}

// explorerHandler is the explorer web UI, which shares the admin port: its page at "/",
// its assets and JSON API under /$ui/; every other path goes on to next (the WebSocket
// route and the admin API) unchanged. Its SDK clients reach the AMQP server through a
// pipe.
func explorerHandler(cfg Config, node *cluster.Node, srv *amqp.Server, next http.Handler,
	authorize func(*http.Request) error, ls *listeners, log *slog.Logger) (http.Handler, error) {
	xc := explorer.DefaultConfig()
	xc.Dial = func(context.Context) (net.Conn, error) {
		client, server := net.Pipe()
		srv.ServeConn(server)
		return client, nil
	}
	xc.Authorize = authorize
	xc.Next = next
	xc.Sessions = explorer.NodeSessions(node.Router())
	trust := ls.caFile
	if trust == "" {
		trust = cfg.TLSCert
	}
	xc.Metrics = newClusterMetrics(cfg.NodeID, node.Registry(), node.Ops(), ls.tls != nil, trust)
	xc.Logger = log
	return explorer.New(xc)
}

// announce writes endpoints.json and connection-string, prints the banner for a person
// at a terminal and logs where the node serves.
func announce(cfg Config, node *cluster.Node, ls *listeners, log *slog.Logger) error {
	name, key := node.DefaultKey()
	sas := amqp.SASKey{Name: name, Key: key}
	adminScheme := "http"
	if ls.tls != nil {
		adminScheme = "https"
	}
	ep := endpoints{
		AMQP: ls.client().Addr().String(), Admin: ls.admin.Addr().String(),
		AdminURL: adminScheme + "://" + ls.admin.Addr().String(), Cluster: node.ClusterAddr(), CA: ls.caFile,
	}
	if ls.amqp != nil {
		ep.ConnectionString = amqp.ConnectionString(ls.amqp.Addr().String(), sas)
	}
	if ls.amqps != nil {
		ep.AMQPS = ls.amqps.Addr().String()
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
	log.Info("serving", "node", cfg.NodeID, "version", version.Get().String(), "namespace", node.Namespace(), "amqp", ep.AMQP, "amqps", ep.AMQPS,
		"admin", ep.AdminURL, "connection_string_file", filepath.Join(cfg.Data, "connection-string"))
	if ep.CA != "" {
		// A development certificate: worth a warning in any log, and clients need the CA
		// (no secret) to trust it.
		log.Warn("serving TLS with a self-signed development certificate; clients must trust its CA", "tls_ca_file", ep.CA)
	}
	return nil
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
	cc.RebalanceMoves = cfg.RebalanceMoves
	cc.BodyMemoryBudget = int64(cfg.BodyMemoryBudgetMB) << 20
	cc.BodyDiskBudget = int64(cfg.BodyDiskBudgetMB) << 20
	cc.Storage.LogStore = cfg.RaftLogStore
	cc.Bench.PerGroupTransport = cfg.RaftTransport == "per-group"
	cc.Raft.Pipeline = cfg.RaftPipeline
	cc.Raft.QuiesceAfter = cfg.RaftQuiesceAfter
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
