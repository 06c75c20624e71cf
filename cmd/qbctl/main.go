package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

type globals struct {
	connStr   string
	adminAddr string
	tlsCA     string      // --tls-ca
	adminTLS  *tls.Config // nil: the admin API is plain HTTP (nodeTLS)
	data      string
	output    string
	digests   bool   // cluster partitions --digests
	verb      string // the command being run ("list"), and its path without "qbctl "
	cmdPath   string // ("queue list"): error sentences say what was attempted
	stdout    io.Writer
	stderr    io.Writer
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		printError(os.Stderr, err)
		if errors.Is(err, errUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// printError writes "qbctl: what went wrong" and, when the error carries one, a line
// saying what to do about it.
func printError(w io.Writer, err error) {
	fmt.Fprintln(w, "qbctl:", err)
	if h := hintOf(err); h != "" {
		fmt.Fprintln(w, "hint:", h)
	}
}

// errUsage marks errors in how qbctl was called (exit status 2).
var errUsage = errors.New("usage")

// usageErr is a usage error of the command at path ("qbctl queue create"): its hint
// points at that command's help.
func usageErr(path, format string, args ...any) error {
	return withHint(fmt.Errorf("%w: "+format, append([]any{errUsage}, args...)...),
		fmt.Sprintf("run '%s --help' for its usage", path))
}

// run parses args and runs the command they name, writing to stdout and stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	g := &globals{stdout: stdout, stderr: stderr}
	root := g.rootCmd()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	return root.ExecuteContext(ctx)
}

const rootLong = `qbctl operates a Quorumbus node: entities, messages, dead letters, keys and the cluster.

Entity management goes through the official azservicebus/admin client against the node's
admin API (--admin-addr); peek, send, receive and dead-letter work go through the official
azservicebus client over AMQP. ENTITY is QUEUE or TOPIC/Subscriptions/SUB.

The connection string comes from --connection-string, else QUORUMBUS_CONNECTION_STRING,
else the file connection-string in the node's data directory (--data), which quorumbus
writes at start-up; the admin address then comes from the endpoints.json beside it
unless --admin-addr or QUORUMBUS_ADMIN_ADDR is given: next to a node started with
'make run' no flag is needed, whatever its ports.`

func (g *globals) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "qbctl",
		Short:         "Operate a Quorumbus node",
		Long:          rootLong,
		SilenceErrors: true, // main prints them, with their hint
		SilenceUsage:  true, // a usage error says where the help is instead
		Args:          unknownCommand,
		RunE: func(c *cobra.Command, args []string) error {
			return usageErr("qbctl", "a command is needed")
		},
		PersistentPreRunE: func(c *cobra.Command, args []string) error {
			if g.output != "table" && g.output != "json" {
				return usageErr(c.CommandPath(), "--output must be table or json, not %q", g.output)
			}
			g.verb, g.cmdPath = c.Name(), strings.TrimPrefix(c.CommandPath(), "qbctl ")
			g.adminFromEndpoints(c.Flags().Changed("admin-addr"))
			var err error
			g.adminTLS, err = g.nodeTLS()
			return err
		},
		CompletionOptions: cobra.CompletionOptions{HiddenDefaultCmd: false},
	}
	pf := root.PersistentFlags()
	pf.StringVar(&g.connStr, "connection-string", "", "Service Bus connection string (env QUORUMBUS_CONNECTION_STRING; default: the connection-string file in --data)")
	pf.StringVar(&g.adminAddr, "admin-addr", envOr("QUORUMBUS_ADMIN_ADDR", "127.0.0.1:5300"), "the node's admin API, HOST:PORT (env QUORUMBUS_ADMIN_ADDR)")
	pf.StringVar(&g.tlsCA, "tls-ca", os.Getenv("QUORUMBUS_TLS_CA"), "PEM CA (or certificate) to trust for a node serving TLS (env QUORUMBUS_TLS_CA); default: the node's QUORUMBUS_TLS_CERT, else <data>/tls/ca.crt")
	pf.StringVar(&g.data, "data", envOr("QUORUMBUS_DATA", "./data"), "the node's data directory, read for its connection-string file (env QUORUMBUS_DATA)")
	pf.StringVarP(&g.output, "output", "o", "table", "output format: table or json")
	_ = root.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"table", "json"}, cobra.ShellCompDirectiveNoFileComp))
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageErr(c.CommandPath(), "%v", err)
	})
	root.AddGroup(&cobra.Group{ID: "entities", Title: "Entities:"},
		&cobra.Group{ID: "messages", Title: "Messages:"},
		&cobra.Group{ID: "namespace", Title: "Namespace and cluster:"})
	add := func(group string, cs ...*cobra.Command) {
		for _, c := range cs {
			c.GroupID = group
			root.AddCommand(c)
		}
	}
	add("entities", g.entityCmd(kindQueue), g.entityCmd(kindTopic), g.entityCmd(kindSubscription), g.ruleCmd())
	add("messages", g.peekCmd(), g.sendCmd(), g.receiveCmd(), g.dlqCmd())
	add("entities", g.applyCmd())
	add("namespace", g.statusCmd(), g.keyCmd(), g.namespaceCmd(), g.clusterCmd(), g.nodeCmd(), g.partitionCmd(), g.backupCmd(), g.versionCmd())
	return root
}

// unknownCommand rejects a word that names no command, suggesting the nearest one.
func unknownCommand(c *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], c.CommandPath())
	if s := c.SuggestionsFor(args[0]); len(s) > 0 {
		return withHint(fmt.Errorf("%w: %s", errUsage, msg), "did you mean "+strings.Join(s, " or ")+"?")
	}
	return usageErr(c.CommandPath(), "%s", msg)
}

// group makes the parent of verbs (qbctl queue): without a verb, or with one it does not
// know, it fails with a usage error that lists them.
func group(use, short string, aliases []string, verbs ...*cobra.Command) *cobra.Command {
	c := &cobra.Command{Use: use + " VERB", Short: short, Aliases: aliases}
	for _, v := range verbs {
		c.AddCommand(v)
	}
	c.Args = cobra.ArbitraryArgs
	c.RunE = func(c *cobra.Command, args []string) error {
		names := make([]string, 0, len(c.Commands()))
		for _, v := range c.Commands() {
			if v.IsAvailableCommand() {
				names = append(names, v.Name())
			}
		}
		list := strings.Join(names, ", ")
		if len(args) == 0 {
			return usageErr(c.CommandPath(), "%s needs a verb: %s", c.Name(), list)
		}
		return usageErr(c.CommandPath(), "unknown %s verb %q (%s)", c.Name(), args[0], list)
	}
	return c
}

// nArgs accepts exactly the named positional arguments.
func nArgs(names ...string) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		if len(args) == len(names) {
			return nil
		}
		if len(names) == 0 {
			return usageErr(c.CommandPath(), "%s takes no arguments, got %d", c.Name(), len(args))
		}
		return usageErr(c.CommandPath(), "%s takes %s, got %d argument(s)", strings.TrimPrefix(c.CommandPath(), "qbctl "),
			strings.Join(names, " "), len(args))
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
