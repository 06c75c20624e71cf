package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: compare load|report [flags], compare trace FILE...; compare load -h for the flags")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "load":
		err = loadCmd(os.Args[2:], os.Stdout, os.Stderr)
	case "report":
		err = reportCmd(os.Args[2:], os.Stdout)
	case "trace":
		err = traceCmd(os.Args[2:], os.Stdout)
	default:
		err = fmt.Errorf("unknown command %q: want load, report or trace", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		os.Exit(1)
	}
}

func loadCmd(args []string, out, logw io.Writer) error {
	c := DefaultLoadConfig()
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	urls := fs.String("url", "", "broker URL(s), comma-separated (nats: every server; quorumbus: unused, see -admin-addr)")
	queue := fs.String("queue", "bench", "queue or stream name (quorumbus: prefix of the per-test queue names)")
	adminAddr := fs.String("admin-addr", "", "quorumbus: a node's admin listener, HOST:PORT")
	connStr := fs.String("connection-string", os.Getenv("QUORUMBUS_CONNECTION_STRING"), "quorumbus: connection string with a Manage key")
	qbctl := fs.String("qbctl", "qbctl", "quorumbus: path of the qbctl binary")
	windows := fs.String("windows", "1,256", "send windows: sends in flight before waiting for a confirmation")
	tests := fs.String("tests", "send,recv,lat", "tests to run: send, recv, lat")
	timeout := fs.Duration("timeout", 60*time.Minute, "give up after this long")
	fs.StringVar(&c.System, "system", "", "quorumbus, quorumbus-follower, quorumbus-sdk, rabbit-091, rabbit-amqp10 or nats")
	fs.IntVar(&c.N, "n", c.N, "messages per throughput test")
	fs.IntVar(&c.Size, "size", c.Size, "message body bytes")
	fs.IntVar(&c.Prefetch, "prefetch", c.Prefetch, "receive credit / prefetch / max ack pending")
	fs.IntVar(&c.LatRate, "lat-rate", c.LatRate, "offered msg/s of the latency test")
	fs.DurationVar(&c.LatDur, "lat-dur", c.LatDur, "duration of the latency test")
	fs.IntVar(&c.LatWindow, "lat-window", c.LatWindow, "send window of the latency test")
	fs.IntVar(&c.Rep, "rep", c.Rep, "repetition number, written into the results")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c.Windows = nil
	for _, w := range splitList(*windows) {
		v, err := strconv.Atoi(w)
		if err != nil {
			return fmt.Errorf("-windows: %q is not a number", w)
		}
		c.Windows = append(c.Windows, v)
	}
	c.Tests = splitList(*tests)
	if err := c.Validate(); err != nil {
		return err
	}
	list := splitList(*urls)
	for _, u := range list {
		if err := checkLoopback(u); err != nil {
			return err
		}
	}
	if *adminAddr != "" {
		if err := checkLoopback("http://" + *adminAddr); err != nil {
			return err
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()

	var s system
	var err error
	switch c.System {
	case "quorumbus", "quorumbus-follower", "quorumbus-sdk":
		if *adminAddr == "" || *connStr == "" {
			return fmt.Errorf("-system %s needs -admin-addr and -connection-string", c.System)
		}
		var q *quorumbus
		q, err = newQuorumbus(*adminAddr, *connStr, *qbctl, *queue)
		if q != nil {
			q.follower = c.System == "quorumbus-follower"
		}
		s = q
		if c.System == "quorumbus-sdk" && err == nil {
			s = quorumbusSDK{q}
		}
	case "rabbit-091", "rabbit-amqp10":
		if len(list) == 0 {
			return errors.New("-url is required")
		}
		s, err = newRabbit(list[0], *queue, c.System == "rabbit-amqp10")
	case "nats":
		if len(list) == 0 {
			return errors.New("-url is required")
		}
		s, err = newNATS(list, *queue, c.Prefetch)
	default:
		return fmt.Errorf("-system %q: want quorumbus, quorumbus-follower, quorumbus-sdk, rabbit-091, rabbit-amqp10 or nats", c.System)
	}
	if err != nil {
		return fmt.Errorf("connect to %s: %w", c.System, err)
	}
	defer s.Close()
	return runLoad(ctx, c, s, out, logw)
}

// checkLoopback refuses any broker address that is not on this machine's loopback.
func checkLoopback(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("broker address %q: %w", raw, err)
	}
	h := u.Hostname()
	if h == "localhost" {
		return nil
	}
	if ip := net.ParseIP(h); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("broker address %q is not on loopback: the benchmark runs on 127.0.0.1 only", redact(raw))
	}
	return nil
}

func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	return u.Redacted()
}

func reportCmd(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	rawPath := fs.String("raw", "", "results file written by compare load (RESULT, CDF and # lines)")
	mdPath := fs.String("md", "", "markdown file whose bench-compare block is replaced (none: print the block)")
	pngPath := fs.String("png", "", "chart to write (PNG)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *rawPath == "" {
		return errors.New("-raw is required")
	}
	f, err := os.Open(*rawPath)
	if err != nil {
		return err
	}
	raw, err := parseRaw(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("%s: %w", *rawPath, err)
	}
	if len(raw.Results) == 0 {
		return fmt.Errorf("%s: no RESULT lines", *rawPath)
	}
	chartRef := ""
	if *pngPath != "" {
		var buf bytes.Buffer
		if err := writeChart(&buf, raw); err != nil {
			return err
		}
		if err := os.WriteFile(*pngPath, buf.Bytes(), 0o644); err != nil {
			return err
		}
		chartRef = *pngPath
		if *mdPath != "" {
			if rel, err := filepath.Rel(filepath.Dir(*mdPath), *pngPath); err == nil {
				chartRef = filepath.ToSlash(rel)
			}
		}
	}
	block := renderTable(raw, filepath.Base(*rawPath), chartRef)
	if *mdPath == "" {
		_, err := io.WriteString(out, block)
		return err
	}
	doc, err := os.ReadFile(*mdPath)
	if err != nil {
		return err
	}
	next, err := replaceBlock(string(doc), block)
	if err != nil {
		return fmt.Errorf("%s: %w", *mdPath, err)
	}
	if err := os.WriteFile(*mdPath, []byte(next), 0o644); err != nil {
		return err
	}
	_, err = io.WriteString(out, strings.TrimRight(block, "\n")+"\n")
	return err
}
