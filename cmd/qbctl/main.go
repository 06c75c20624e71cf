package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

type globals struct {
	connStr   string
	adminAddr string
	tlsCA     string      // --tls-ca
	adminTLS  *tls.Config // nil: the admin API is plain HTTP (nodeTLS)
	data      string
	output    string
	digests   bool // cluster partitions --digests
	stdout    io.Writer
	stderr    io.Writer
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "qbctl:", err)
		if errors.Is(err, errUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

var errUsage = errors.New("usage")

const usage = `Usage: qbctl [global flags] COMMAND ...

Commands:
  status                                     node health and namespace
  queue create|list|show|update|delete|purge queues
  topic create|list|show|update|delete|purge topics (purge: every subscription)
  subscription create|list|show|update|delete|purge TOPIC [SUB]
  rule create|list|show|delete TOPIC SUB [RULE]
  peek ENTITY                                browse messages without locking them
  send QUEUE|TOPIC [--body TEXT] [--create]  send one message
  receive ENTITY [--count N] [--expect BODY] receive and complete messages
  dlq inspect|purge|resubmit ENTITY          the dead-letter sub-queue of ENTITY
  key list|create|delete [NAME]              namespace shared access keys (create: --rights Send,Listen)
  namespace purge                            every message of every entity (entities stay)
  cluster status|partitions                  members and partition groups of the cluster
  node drain|remove NODE|--self              move leaderships away; remove a node for good
  partition transfer-leader GROUP [--to NODE] move one group's leadership

ENTITY is QUEUE or TOPIC/Subscriptions/SUB. Run a command with -h for its flags.

Global flags:
`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	g := &globals{stdout: stdout, stderr: stderr}
	fs := flag.NewFlagSet("qbctl", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&g.connStr, "connection-string", "", "Service Bus connection string (env QUORUMBUS_CONNECTION_STRING)")
	fs.StringVar(&g.adminAddr, "admin-addr", envOr("QUORUMBUS_ADMIN_ADDR", "127.0.0.1:5300"), "the node's admin API, HOST:PORT (env QUORUMBUS_ADMIN_ADDR)")
	fs.StringVar(&g.tlsCA, "tls-ca", os.Getenv("QUORUMBUS_TLS_CA"), "PEM CA (or certificate) to trust for a node serving TLS (env QUORUMBUS_TLS_CA); default: the node's QUORUMBUS_TLS_CERT, else <data>/tls/ca.crt")
	fs.StringVar(&g.data, "data", envOr("QUORUMBUS_DATA", "./data"), "the node's data directory, read for its connection-string file (env QUORUMBUS_DATA)")
	fs.StringVar(&g.output, "output", "table", "table or json")
	fs.StringVar(&g.output, "o", "table", "short for --output")
	fs.Usage = func() { fmt.Fprint(stderr, usage); fs.PrintDefaults() }
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if g.output != "table" && g.output != "json" {
		return fmt.Errorf("%w: --output must be table or json", errUsage)
	}
	var err error
	if g.adminTLS, err = g.nodeTLS(); err != nil {
		return err
	}
	rest := fs.Args()
	if len(rest) == 0 {
		fs.Usage()
		return errUsage
	}
	cmd, rest := rest[0], rest[1:]
	switch cmd {
	case "status":
		return g.status(ctx, rest)
	case "queue", "queues":
		return g.entityCmd(ctx, kindQueue, rest)
	case "topic", "topics":
		return g.entityCmd(ctx, kindTopic, rest)
	case "subscription", "subscriptions", "sub":
		return g.entityCmd(ctx, kindSubscription, rest)
	case "rule", "rules":
		return g.ruleCmd(ctx, rest)
	case "peek":
		return g.peek(ctx, rest)
	case "send":
		return g.send(ctx, rest)
	case "receive":
		return g.receive(ctx, rest)
	case "dlq":
		return g.dlqCmd(ctx, rest)
	case "key", "keys":
		return g.keyCmd(ctx, rest)
	case "namespace":
		return g.namespaceCmd(ctx, rest)
	case "cluster":
		return g.clusterCmd(ctx, rest)
	case "node", "nodes":
		return g.nodeCmd(ctx, rest)
	case "partition", "partitions":
		return g.partitionCmd(ctx, rest)
	}
	fs.Usage()
	return fmt.Errorf("%w: unknown command %q", errUsage, cmd)
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// parseInterleaved parses flags that may appear before, between or after positional
// arguments (qbctl queue create q1 --lock-duration 30s).
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, fmt.Errorf("%w: %v", errUsage, err)
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}
