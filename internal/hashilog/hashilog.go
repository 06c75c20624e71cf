// Package hashilog routes the log output of hashicorp/raft (hclog) and
// hashicorp/memberlist (a standard *log.Logger) into a node's slog logger, so that every
// line follows --log-level and --log-format, and keeps their per-RPC noise out of an
// operator's way.
//
// Both libraries report ordinary events loudly: raft logs an election at start-up as a
// warning, and a leader logs "failed to heartbeat to" at error level twice a second
// for every group and every stopped peer; memberlist logs every failed probe. The
// Bridge maps their levels (docs/operations.md § What is logged):
//
//   - raft's trace, debug, info and warn lines, and memberlist's debug and info lines,
//     go to slog's debug level;
//   - a failed RPC to a peer (noise, below) is logged at warn at most once per Interval
//     for each message and peer, with the number of lines held back since; the rest go
//     to debug;
//   - raft's errors that every leadership change, stop and restart produce (routine,
//     below: a leader that learns of a newer term, a connection a stopping peer closed
//     under a request) go to debug;
//   - every other raft error is logged at error, memberlist's warnings and errors at
//     warn, also limited per message.
//
// The node logs what an operator needs at info itself (a member joined, died or left,
// the metadata leader changed, a drain began or ended).
//
// It imports hclog and the standard library only; its Bridge is safe for concurrent use.
package hashilog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Config is a Bridge's configuration.
type Config struct {
	// Interval is how often one repeated message about one peer is logged above debug.
	// 0: DefaultInterval.
	Interval time.Duration
	// Now is the clock of the limiter; nil: time.Now.
	Now func() time.Time
}

// DefaultInterval is Config.Interval's default.
const DefaultInterval = time.Minute

// maxKeys bounds the limiter's memory: past it, it forgets every key and starts again.
const maxKeys = 4096

// noise are raft's messages about one failed RPC to a peer: repeated for as long as the
// peer is down, once per group. hashicorp/raft v1.7 replication.go and raft.go.
var noise = []string{
	"failed to heartbeat to",
	"failed to appendEntries to",
	"failed to start pipeline replication to",
	"failed to pipeline appendEntries",
	"failed to make requestVote RPC",
	"failed to send snapshot to",
	"failed to contact",
}

// routine are raft's error lines that say nothing is wrong: hashicorp/raft v1.7
// replication.go logs a leader's discovery that another node won a newer term (after
// every leadership transfer and election, so on every rolling restart) at error.
var routine = []string{
	"peer has newer term, stopping replication",
}

// connClosed are raft's error lines about one incoming connection
// (net_transport.go), routine when the connection was closed under them (closedConn):
// the peer stopped or restarted, or this node is closing its transport.
var connClosed = []string{
	"failed to decode incoming command",
	"failed to flush response",
	"failed to accept connection",
}

// closedConn reports whether raft's args carry an error that a closed connection
// gives (net.ErrClosed's text, a reset, a broken pipe, a connection cut mid-message).
func closedConn(args []any) bool {
	for i := 0; i+1 < len(args); i += 2 {
		err, ok := args[i+1].(error)
		if !ok {
			continue
		}
		if errors.Is(err, net.ErrClosed) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
			errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
			return true
		}
		// The msgpack decoder wraps what it read from without %w.
		for _, s := range []string{"use of closed network connection", "connection reset by peer", "broken pipe", "unexpected EOF"} {
			if strings.Contains(err.Error(), s) {
				return true
			}
		}
	}
	return false
}

func isRoutine(msg string, args []any) bool {
	if slices.Contains(routine, msg) {
		return true
	}
	return slices.Contains(connClosed, msg) && closedConn(args)
}

// Bridge hands the libraries' lines to one slog.Logger.
type Bridge struct {
	log      *slog.Logger
	interval time.Duration
	now      func() time.Time

	mu   sync.Mutex
	seen map[string]*window // by message and peer; owner: mu
}

// window is one repeated message's current interval.
type window struct {
	start time.Time
	held  int // lines sent to debug since start
}

// New returns a Bridge to l.
func New(l *slog.Logger, cfg *Config) *Bridge {
	b := &Bridge{log: l, interval: DefaultInterval, now: time.Now, seen: map[string]*window{}}
	if cfg != nil {
		if cfg.Interval > 0 {
			b.interval = cfg.Interval
		}
		if cfg.Now != nil {
			b.now = cfg.Now
		}
	}
	return b
}

// Raft returns an hclog.Logger for hashicorp/raft (and the stores and transports that
// take one), named name ("raft.meta", "raft.orders.0"): it becomes the slog attribute
// component.
func (b *Bridge) Raft(name string) hclog.Logger {
	il := hclog.NewInterceptLogger(&hclog.LoggerOptions{Name: name, Level: hclog.Off})
	il.RegisterSink(raftSink{b})
	return il
}

// Memberlist returns a standard logger for memberlist.Config.Logger: its "[LEVEL]"
// prefixes set the slog level.
func (b *Bridge) Memberlist() *log.Logger {
	il := hclog.NewInterceptLogger(&hclog.LoggerOptions{Name: "memberlist", Level: hclog.Off})
	il.RegisterSink(memberlistSink{b})
	return il.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true})
}

type raftSink struct{ b *Bridge }

func (s raftSink) Accept(name string, level hclog.Level, msg string, args ...any) {
	switch {
	case level < hclog.Error, isRoutine(msg, args):
		s.b.emit(slog.LevelDebug, name, msg, args)
	case isNoise(msg):
		s.b.limited(slog.LevelWarn, name, msg+" "+peerOf(args), msg, args)
	default:
		s.b.emit(slog.LevelError, name, msg, args)
	}
}

type memberlistSink struct{ b *Bridge }

func (s memberlistSink) Accept(name string, level hclog.Level, msg string, args ...any) {
	msg = strings.TrimPrefix(msg, "memberlist: ")
	if level < hclog.Warn {
		s.b.emit(slog.LevelDebug, name, msg, args)
		return
	}
	// memberlist formats the peer into the text: key on the text before the details.
	key, _, _ := strings.Cut(msg, ":")
	s.b.limited(slog.LevelWarn, name, key, msg, args)
}

func isNoise(msg string) bool {
	for _, n := range noise {
		if msg == n {
			return true
		}
	}
	return false
}

// peerOf is the value of raft's "peer" (or "server-id") argument, "" without one.
func peerOf(args []any) string {
	for i := 0; i+1 < len(args); i += 2 {
		if k, ok := args[i].(string); ok && (k == "peer" || k == "server-id") {
			return fmt.Sprint(args[i+1])
		}
	}
	return ""
}

// limited logs msg at level when key was not logged at that level within the
// interval, with how many lines were held back meanwhile; else at debug.
func (b *Bridge) limited(level slog.Level, component, key, msg string, args []any) {
	now := b.now()
	b.mu.Lock()
	w, ok := b.seen[key]
	if !ok {
		if len(b.seen) >= maxKeys {
			clear(b.seen)
		}
		w = &window{start: now}
		b.seen[key] = w
	} else if now.Sub(w.start) < b.interval {
		w.held++
		b.mu.Unlock()
		b.emit(slog.LevelDebug, component, msg, args)
		return
	}
	held := w.held
	w.start, w.held = now, 0
	b.mu.Unlock()
	if ok {
		args = append(args[:len(args):len(args)], "repeated", held)
	}
	b.emit(level, component, msg, args)
}

func (b *Bridge) emit(level slog.Level, component, msg string, args []any) {
	ctx := context.Background()
	if !b.log.Enabled(ctx, level) {
		return
	}
	attrs := make([]any, 0, len(args)+2)
	attrs = append(attrs, "component", component)
	for i := 0; i+1 < len(args); i += 2 {
		k, ok := args[i].(string)
		if !ok {
			k = fmt.Sprint(args[i])
		}
		v := args[i+1]
		if e, ok := v.(error); ok {
			v = e.Error()
		}
		attrs = append(attrs, strings.ReplaceAll(k, " ", "_"), v)
	}
	if len(args)%2 == 1 {
		attrs = append(attrs, "extra", args[len(args)-1])
	}
	b.log.Log(ctx, level, msg, attrs...)
}
