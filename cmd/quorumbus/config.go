package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
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
	// ShutdownTimeout bounds a graceful stop (SIGTERM) before the node exits anyway.
	ShutdownTimeout time.Duration `json:"shutdown-timeout"`
}

// DefaultConfig is a single node on loopback with the official emulator's ports.
func DefaultConfig() Config {
	return Config{
		Data:            "./data",
		AMQPAddr:        "127.0.0.1:5672",
		AdminAddr:       "127.0.0.1:5300",
		ClusterAddr:     "127.0.0.1:5400",
		NodeID:          "node-1",
		Namespace:       "", // Config.json's namespace, else "quorumbus" (run.go)
		KeyName:         "RootManageSharedAccessKey",
		LogLevel:        "info",
		LogFormat:       "text",
		ShutdownTimeout: 30 * time.Second,
	}
}

// Validate reports the first setting that cannot work, naming it.
func (c *Config) Validate() error {
	for _, a := range []struct{ name, v string }{
		{"amqp-addr", c.AMQPAddr}, {"admin-addr", c.AdminAddr}, {"cluster-addr", c.ClusterAddr},
	} {
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

// setting binds one Config field to its flag, environment variable and file key.
type setting struct {
	name  string // flag name and JSON key
	usage string
	str   *string
	dur   *time.Duration
}

func (s setting) envName() string {
	return "QUORUMBUS_" + strings.ToUpper(strings.ReplaceAll(s.name, "-", "_"))
}

func (s setting) set(v string) error {
	if s.str != nil {
		*s.str = v
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return err
	}
	*s.dur = d
	return nil
}

func settings(c *Config) []setting {
	return []setting{
		{name: "data", usage: "directory for all state (Raft logs, snapshots, metadata)", str: &c.Data},
		{name: "amqp-addr", usage: "AMQP 1.0 listener, HOST:PORT", str: &c.AMQPAddr},
		{name: "admin-addr", usage: "admin HTTP API listener (Service Bus ATOM API, /healthz), HOST:PORT", str: &c.AdminAddr},
		{name: "cluster-addr", usage: "cluster traffic (all Raft groups), HOST:PORT", str: &c.ClusterAddr},
		{name: "node-id", usage: "this node's stable identity in the cluster", str: &c.NodeID},
		{name: "namespace", usage: "the Service Bus namespace name this cluster serves (default: Config.json's, else quorumbus)", str: &c.Namespace},
		{name: "config-json", usage: "the official emulator's Config.json to load at start-up: a path, or the JSON itself", str: &c.ConfigJSON},
		{name: "sas-key-name", usage: "name of the default shared access key (Manage, Send, Listen)", str: &c.KeyName},
		{name: "sas-key", usage: "value of the default key; generated and kept in --data when empty", str: &c.Key},
		{name: "log-level", usage: "debug, info, warn or error", str: &c.LogLevel},
		{name: "log-format", usage: "text or json", str: &c.LogFormat},
		{name: "shutdown-timeout", usage: "how long a graceful stop may take", dur: &c.ShutdownTimeout},
	}
}

// loadConfig builds the Config from defaults, an optional JSON file (--config or
// QUORUMBUS_CONFIG), the environment and the command line, in rising precedence.
func loadConfig(args []string, getenv func(string) string, stderr io.Writer) (Config, error) {
	c := DefaultConfig()
	fs := flag.NewFlagSet("quorumbus", flag.ContinueOnError)
	fs.SetOutput(stderr)
	file := fs.String("config", getenv("QUORUMBUS_CONFIG"), "optional JSON config file; keys are the flag names")
	ss := settings(&c)
	var fromFlags Config // parsed into a scratch Config, applied last
	for i, s := range settings(&fromFlags) {
		usage := fmt.Sprintf("%s (env %s)", ss[i].usage, ss[i].envName())
		if s.str != nil {
			fs.StringVar(s.str, s.name, "", usage)
		} else {
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
		if s.str != nil {
			*ss[i].str = *s.str
		} else {
			*ss[i].dur = *s.dur
		}
	}
	return c, c.Validate()
}

// applyFile reads a JSON object whose keys are flag names; values are strings (durations
// as "30s"). Unknown keys are an error, so a typo does not pass silently.
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
