package fsm

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Scenario scripts (testdata/scenarios/*.txt) drive an FSM with short commands and
// compare what it answers with the expected output under each "----". Regenerate the
// expectations with `go test ./fsm/ -run Scenarios -rewrite` and review the diff.
//
//	config queue|topic [lock=ms] [maxdc=n] [ttl=ms] [dlq-on-expiry] [sessions] [dedupe=ms] [subs=a,b] [maxsize=n] [maxmsg=n]
//	send body[:ttl=ms][:session=id][:id=msgid][:sched=+ms] ...
//	recv [target] [n=N] [rad] [session=id] [owner=o]       target: q, dlq, sub, sub/dlq
//	settle complete|abandon|defer|deadletter|release [target] body ...
//	recv-deferred [target] seq ...
//	accept [target] [session=id] owner=o | release-session [target] session=id owner=o
//	renew [target] body ...   | cancel seq ...   | purge [target]
//	advance ms                | dump
var rewrite = flag.Bool("rewrite", false, "rewrite the expected output of scenario scripts")

func TestScenarios(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "scenarios", "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) { runScenario(t, file) })
	}
}

type scenario struct {
	t    *testing.T
	x    *tf
	held map[string]*Message // target + "|" + body -> the latest locked copy
}

func runScenario(t *testing.T, file string) {
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	s := &scenario{t: t, held: map[string]*Message{}}
	var out strings.Builder
	lines := strings.Split(string(src), "\n")
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			out.WriteString(line + "\n")
			continue
		}
		if i+1 >= len(lines) || lines[i+1] != "----" {
			t.Fatalf("%s:%d: command without ---- after it", file, i+1)
		}
		var want []string
		j := i + 2
		for ; j < len(lines) && lines[j] != ""; j++ {
			want = append(want, lines[j])
		}
		got := s.run(line)
		if !*rewrite && strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s:%d: %s\n got:\n%s\nwant:\n%s", file, i+1, line, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		out.WriteString(line + "\n----\n")
		for _, g := range got {
			out.WriteString(g + "\n")
		}
		i = j - 1
	}
	if *rewrite {
		if err := os.WriteFile(file, []byte(strings.TrimRight(out.String(), "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

var sentinels = []error{ErrLockLost, ErrSessionLockLost, ErrSessionCannotBeLocked, ErrNoSessionAvailable,
	ErrQuotaExceeded, ErrMessageTooLarge, ErrSessionRequired, ErrSessionNotAllowed, ErrNotFound,
	ErrEntityDisabled, ErrBadCommand}

func errName(err error) string {
	for _, s := range sentinels {
		if errors.Is(err, s) {
			return "error: " + strings.TrimPrefix(s.Error(), "fsm: ")
		}
	}
	return "error: " + err.Error()
}

func parseTarget(s string) (Target, bool) {
	switch {
	case s == "q":
		return Target{}, true
	case s == "dlq":
		return Target{DLQ: true}, true
	case strings.HasSuffix(s, "/dlq"):
		return Target{Sub: strings.TrimSuffix(s, "/dlq"), DLQ: true}, true
	case strings.HasPrefix(s, "sub:"):
		return Target{Sub: strings.TrimPrefix(s, "sub:")}, true
	}
	return Target{}, false
}

func targetName(t Target) string {
	n := "q"
	if t.Sub != "" {
		n = "sub:" + t.Sub
	}
	if t.DLQ {
		if t.Sub == "" {
			return "dlq"
		}
		return t.Sub + "/dlq"
	}
	return n
}

func (s *scenario) num(v string) int64 {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		s.t.Fatalf("bad number %q", v)
	}
	return n
}

func (s *scenario) msgLine(m *Message) string {
	l := fmt.Sprintf("%s seq=%d dc=%d", m.Payload, m.SequenceNumber, m.DeliveryCount)
	if m.State != StateActive {
		l += " " + strings.ToLower(m.State.String())
	}
	if m.SessionID != "" {
		l += " session=" + m.SessionID
	}
	if m.LockToken != (LockToken{}) {
		l += fmt.Sprintf(" locked-until=+%d", m.LockedUntil-t0)
	}
	if m.ExpiresAt != NeverMs {
		l += fmt.Sprintf(" expires=+%d", m.ExpiresAt-t0)
	}
	if m.DeadLetter != nil {
		l += " reason=" + m.DeadLetter.Reason
	}
	return l
}

func (s *scenario) run(line string) []string {
	f := strings.Fields(line)
	cmd, args := f[0], f[1:]
	target := Target{}
	kv := map[string]string{}
	var rest []string
	for _, a := range args {
		if t, ok := parseTarget(a); ok {
			target = t
		} else if k, v, ok := strings.Cut(a, "="); ok {
			kv[k] = v
		} else {
			rest = append(rest, a)
		}
	}
	if cmd != "config" && s.x == nil {
		s.t.Fatal("config first")
	}
	switch cmd {
	case "config":
		cfg := queueCfg()
		if len(rest) > 0 && rest[0] == "topic" {
			cfg = topicCfg(strings.Split(kv["subs"], ",")...)
		}
		qcs := []*QueueConfig{&cfg.Queue}
		for i := range cfg.Subscriptions {
			qcs = append(qcs, &cfg.Subscriptions[i].Queue)
		}
		for _, qc := range qcs {
			if v, ok := kv["lock"]; ok {
				qc.LockDurationMs = s.num(v)
			}
			if v, ok := kv["maxdc"]; ok {
				qc.MaxDeliveryCount = int32(s.num(v))
			}
			if v, ok := kv["ttl"]; ok {
				qc.DefaultTTLMs = s.num(v)
			}
			for _, r := range rest {
				qc.DeadLetterOnExpiration = qc.DeadLetterOnExpiration || r == "dlq-on-expiry"
				qc.RequiresSession = qc.RequiresSession || r == "sessions"
			}
		}
		if v, ok := kv["dedupe"]; ok {
			cfg.RequiresDuplicateDetection, cfg.DuplicateWindowMs = true, s.num(v)
		}
		if v, ok := kv["maxsize"]; ok {
			cfg.MaxSizeBytes = s.num(v)
		}
		if v, ok := kv["maxmsg"]; ok {
			cfg.MaxMessageSizeBytes = s.num(v)
		}
		s.x = newTF(s.t, cfg)
		return []string{"ok"}
	case "send":
		var ms []*Message
		for _, a := range args {
			parts := strings.Split(a, ":")
			m := msgOf(parts[0])
			for _, p := range parts[1:] {
				k, v, _ := strings.Cut(p, "=")
				switch k {
				case "ttl":
					m.TimeToLive = s.num(v)
				case "session":
					m.SessionID = v
				case "id":
					m.MessageID = v
				case "sched":
					m.ScheduledEnqueueTime = s.x.now + s.num(strings.TrimPrefix(v, "+"))
				default:
					s.t.Fatalf("send option %q", k)
				}
			}
			ms = append(ms, m)
		}
		r := s.x.one(&Enqueue{Messages: ms})
		if r.Err != nil {
			return []string{errName(r.Err)}
		}
		l := fmt.Sprint("seq ", strings.Trim(fmt.Sprint(r.SeqNos), "[]"))
		if r.Duplicates > 0 {
			l += fmt.Sprintf(" (%d duplicate)", r.Duplicates)
		}
		return []string{l}
	case "recv", "recv-deferred":
		mode := PeekLock
		if len(rest) > 0 && rest[0] == "rad" {
			mode, rest = ReceiveAndDelete, rest[1:]
		}
		s.x.salt++
		var r Result
		if cmd == "recv" {
			n := int64(1)
			if v, ok := kv["n"]; ok {
				n = s.num(v)
			}
			r = s.x.one(&Receive{Target: target, Mode: mode, Max: int32(n), SessionID: kv["session"], Owner: kv["owner"], Salt: s.x.salt})
		} else {
			var seqs []int64
			for _, a := range rest {
				seqs = append(seqs, s.num(a))
			}
			r = s.x.one(&ReceiveDeferred{Target: target, Mode: mode, SeqNos: seqs, SessionID: kv["session"], Owner: kv["owner"], Salt: s.x.salt})
		}
		if r.Err != nil {
			return []string{errName(r.Err)}
		}
		if len(r.Messages) == 0 {
			return []string{"none"}
		}
		var out []string
		for _, m := range r.Messages {
			out = append(out, s.msgLine(m))
			if mode == PeekLock {
				s.held[targetName(target)+"|"+string(m.Payload)] = m
			}
		}
		return out
	case "settle", "renew":
		var disp Disposition
		if cmd == "settle" {
			disp = map[string]Disposition{"complete": Complete, "abandon": Abandon, "defer": Defer,
				"deadletter": DeadLetter, "release": Release}[rest[0]]
			rest = rest[1:]
		}
		var out []string
		for _, body := range rest {
			m := s.held[targetName(target)+"|"+body]
			if m == nil {
				s.t.Fatalf("no held message %q in %s", body, targetName(target))
			}
			var r Result
			if cmd == "settle" {
				r = s.x.one(&Settle{Target: target, Tokens: []LockToken{m.LockToken}, Disposition: disp,
					Reason: kv["reason"], SessionID: kv["session"], Owner: kv["owner"]})
			} else {
				r = s.x.one(&RenewLock{Target: target, Tokens: []LockToken{m.LockToken}})
			}
			switch {
			case r.Err != nil:
				out = append(out, body+": "+errName(r.Err))
			case cmd == "renew":
				out = append(out, fmt.Sprintf("%s: locked-until=+%d", body, r.LockedUntil[0]-t0))
			default:
				out = append(out, body+": ok")
			}
		}
		return out
	case "accept", "release-session", "renew-session":
		var r Result
		switch cmd {
		case "accept":
			r = s.x.one(&AcceptSession{Target: target, SessionID: kv["session"], Owner: kv["owner"]})
		case "release-session":
			r = s.x.one(&ReleaseSession{Target: target, SessionID: kv["session"], Owner: kv["owner"]})
		default:
			r = s.x.one(&RenewSession{Target: target, SessionID: kv["session"], Owner: kv["owner"]})
		}
		if r.Err != nil {
			return []string{errName(r.Err)}
		}
		if r.SessionID != "" {
			return []string{fmt.Sprintf("session=%s locked-until=+%d", r.SessionID, r.LockedUntil[0]-t0)}
		}
		return []string{"ok"}
	case "cancel":
		var seqs []int64
		for _, a := range rest {
			seqs = append(seqs, s.num(a))
		}
		if r := s.x.one(&CancelScheduled{SeqNos: seqs}); r.Err != nil {
			return []string{errName(r.Err)}
		}
		return []string{"ok"}
	case "purge":
		r := s.x.one(&Purge{Target: target})
		return []string{fmt.Sprintf("purged %d", r.Count)}
	case "advance":
		s.x.advance(s.num(rest[0]))
		s.x.tick()
		nd := "never"
		if d := s.x.f.NextDeadline(); d != NeverMs {
			nd = fmt.Sprintf("+%d", d-t0)
		}
		return []string{fmt.Sprintf("now=+%d next-deadline=%s", s.x.now-t0, nd)}
	case "dump":
		var out []string
		for _, st := range s.x.f.Stats().Targets {
			ms := s.x.f.Peek(st.Target, 0, 1000)
			if len(ms) == 0 {
				continue
			}
			out = append(out, targetName(st.Target)+":")
			for _, m := range ms {
				out = append(out, "  "+s.msgLine(m))
			}
		}
		if len(out) == 0 {
			out = []string{"empty"}
		}
		return out
	}
	s.t.Fatalf("unknown command %q", cmd)
	return nil
}
