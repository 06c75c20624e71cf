package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/test/harness"
)

// nodeRunner runs qbctl in this process against a real node (test/harness), with the
// node's connection string unless args give another.
func nodeRunner(n *harness.Node) func(args ...string) (stdout, stderr string, err error) {
	return func(args ...string) (string, string, error) {
		var out, errOut bytes.Buffer
		err := run(context.Background(), append([]string{"--admin-addr", n.Admin, "--connection-string", n.ConnectionString}, args...), &out, &errOut)
		return out.String(), errOut.String(), err
	}
}

// checkSentence fails when err is not an error whose text has every one of want, whose
// hint has hint, and which shows no raw Go struct or empty name.
func checkSentence(t *testing.T, what string, err error, hint string, want ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: succeeded, want an error with %q", what, want)
		return
	}
	var printed bytes.Buffer
	printError(&printed, err)
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: %q lacks %q", what, printed.String(), w)
		}
	}
	if !strings.Contains(hintOf(err), hint) {
		t.Errorf("%s: hint %q lacks %q", what, hintOf(err), hint)
	}
	for _, raw := range []string{"*Error{", "Info: map", `""`, "TrackingId"} {
		if strings.Contains(printed.String(), raw) {
			t.Errorf("%s: the error shows %q: %s", what, raw, printed.String())
		}
	}
}

type peekedRow struct {
	SequenceNumber int64
	SessionID      string
	Body           string
}

func peekJSON(t *testing.T, qb func(...string) (string, string, error), args ...string) []peekedRow {
	t.Helper()
	out, _, err := qb(append(args, "-o", "json")...)
	if err != nil {
		t.Fatalf("qbctl %v: %v", args, err)
	}
	var rows []peekedRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("qbctl %v: %v\n%s", args, err, out)
	}
	return rows
}

// An operator can browse, receive from and send to a session-enabled queue and
// subscription from the CLI; mistakes are sentences with their AMQP condition, never
// the SDK's raw *Error{Condition: ...}.
func TestSessionEntitiesFromTheCLI(t *testing.T) {
	n := harness.Start(t)
	qb := nodeRunner(n)
	for _, args := range [][]string{
		{"queue", "create", "sq", "--requires-session", "true"}, {"queue", "create", "plain"},
		{"topic", "create", "events"}, {"subscription", "create", "events", "ss", "--requires-session", "true"},
	} {
		if _, _, err := qb(args...); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
	}

	// send: a session-enabled queue wants --session.
	_, _, err := qb("send", "sq", "--body", "nosession")
	checkSentence(t, "send without --session", err, "--session ID", `queue "sq" requires sessions`, "amqp:not-allowed")
	for _, m := range [][2]string{{"s1", "one"}, {"s2", "two"}, {"s1", "three"}} {
		if _, _, err := qb("send", "sq", "--session", m[0], "--body", m[1]); err != nil {
			t.Fatalf("send --session %s: %v", m[0], err)
		}
	}

	// peek without --session browses every session, in sequence order.
	rows := peekJSON(t, qb, "peek", "sq")
	if len(rows) != 3 || rows[0].SessionID != "s1" || rows[0].Body != "one" || rows[1].SessionID != "s2" ||
		rows[2].Body != "three" || rows[0].SequenceNumber >= rows[1].SequenceNumber {
		t.Fatalf("peek sq: %+v", rows)
	}
	if rows := peekJSON(t, qb, "peek", "sq", "--count", "1", "--from", "2"); len(rows) != 1 || rows[0].Body != "two" {
		t.Errorf("peek sq --count 1 --from 2: %+v", rows)
	}
	out, _, err := qb("peek", "sq")
	if err != nil || !strings.Contains(strings.SplitN(out, "\n", 2)[0], "SESSION") || !strings.Contains(out, "s2") {
		t.Errorf("peek sq table: %v\n%s", err, out)
	}
	// peek --session: that session only.
	if rows := peekJSON(t, qb, "peek", "sq", "--session", "s1"); len(rows) != 2 || rows[0].Body != "one" || rows[1].Body != "three" {
		t.Errorf("peek sq --session s1: %+v", rows)
	}

	// A consumer holds s1: peek without --session takes no lock and still shows it;
	// with --session s1 it says the session is held.
	c := n.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	held, err := c.AcceptSessionForQueue(ctx, "sq", "s1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if rows := peekJSON(t, qb, "peek", "sq"); len(rows) != 3 {
		t.Errorf("peek sq while s1 is held: %+v", rows)
	}
	_, _, err = qb("peek", "sq", "--session", "s1")
	checkSentence(t, "peek --session of a held session", err, "without --session",
		`queue "sq": the session is held by another receiver`, "com.microsoft:session-cannot-be-locked")
	if err := held.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// receive --session: that session; without: the next available one, named on stderr.
	out, _, err = qb("receive", "sq", "--session", "s2", "-o", "json")
	if err != nil || !strings.Contains(out, `"SessionID": "s2"`) || !strings.Contains(out, `"Body": "two"`) {
		t.Errorf("receive --session s2: %v\n%s", err, out)
	}
	out, stderr, err := qb("receive", "sq", "--count", "2")
	if err != nil || !strings.Contains(stderr, `session "s1"`) || !strings.Contains(out, "one") || !strings.Contains(out, "three") ||
		!strings.Contains(out, "SESSION") {
		t.Errorf("receive without --session: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr)
	}
	_, _, err = qb("receive", "sq", "--timeout", "3s")
	if err == nil || !strings.Contains(err.Error(), "no session of this session-enabled entity became available within 3s") {
		t.Errorf("receive from an empty session queue: %v", err)
	}

	// --session on an entity without sessions.
	_, _, err = qb("peek", "plain", "--session", "x")
	checkSentence(t, "peek --session of a queue without sessions", err, "leave out --session",
		`queue "plain" does not use sessions`, "amqp:not-allowed")

	// A session-enabled subscription: the same through its topic.
	if _, _, err := qb("send", "events", "--session", "e1", "--body", "ev"); err != nil {
		t.Fatal(err)
	}
	if rows := peekJSON(t, qb, "peek", "events/Subscriptions/ss"); len(rows) != 1 || rows[0].SessionID != "e1" || rows[0].Body != "ev" {
		t.Errorf("peek a session subscription: %+v", rows)
	}
	if rows := peekJSON(t, qb, "peek", "events/Subscriptions/ss", "--session", "e1"); len(rows) != 1 {
		t.Errorf("peek a session subscription --session e1: %+v", rows)
	}
	out, _, err = qb("receive", "events/Subscriptions/ss", "-o", "json")
	if err != nil || !strings.Contains(out, `"SessionID": "e1"`) {
		t.Errorf("receive from a session subscription: %v\n%s", err, out)
	}

	// The data plane's key errors: a key the node does not accept, a key without Listen.
	_, _, err = qb("--connection-string", strings.Replace(n.ConnectionString, "SharedAccessKey=", "SharedAccessKey=x", 1), "peek", "sq")
	checkSentence(t, "peek with a wrong key", err, "SharedAccessKeyName and SharedAccessKey",
		`queue "sq": the node does not accept the key "RootManageSharedAccessKey"`)
	out, _, err = qb("key", "create", "sendonly", "--rights", "Send", "-o", "json")
	var key struct{ ConnectionString string }
	if err != nil || json.Unmarshal([]byte(out), &key) != nil {
		t.Fatalf("key create: %v\n%s", err, out)
	}
	_, _, err = qb("--connection-string", key.ConnectionString, "peek", "sq")
	checkSentence(t, "peek with a Send key", err, "Listen right", `queue "sq": the key "sendonly" lacks the Listen right`)
	if _, _, err := qb("--connection-string", key.ConnectionString, "send", "sq", "--session", "k", "--body", "b"); err != nil {
		t.Errorf("send with a Send key: %v", err)
	}
}

// A key the node does not accept (wrong value, unknown name) and a good key without the
// Manage right each get their own sentence and hint; list commands say what they were
// listing instead of an empty name.
func TestKeyErrorsSayWhatIsWrong(t *testing.T) {
	srv := adminServer(t, &fakeCluster{})
	addr := strings.TrimPrefix(srv.URL, "http://")
	qb := func(cs string, args ...string) error {
		var out, errOut bytes.Buffer
		return run(context.Background(), append([]string{"--admin-addr", addr, "--connection-string", cs}, args...), &out, &errOut)
	}
	if err := qb(testConnStr, "topic", "create", "events"); err != nil {
		t.Fatal(err)
	}
	if err := qb(testConnStr, "subscription", "create", "events", "eu"); err != nil {
		t.Fatal(err)
	}
	wrongKey := strings.Replace(testConnStr, "k3y", "wrong", 1)
	unknownKey := strings.Replace(testConnStr, "RootManageSharedAccessKey", "nosuchkey", 1)
	sendKey := strings.Replace(strings.Replace(testConnStr, "RootManageSharedAccessKey", "sender", 1), "k3y", "s3nd", 1)
	for _, tc := range []struct {
		args []string
		what string // how the error names what was attempted
	}{
		{[]string{"queue", "list"}, "listing queues"},
		{[]string{"topic", "list"}, "listing topics"},
		{[]string{"subscription", "list", "events"}, `listing the subscriptions of topic "events"`},
		{[]string{"rule", "list", "events", "eu"}, `listing the rules of subscription "events/Subscriptions/eu"`},
		{[]string{"key", "list"}, "listing keys"},
		{[]string{"topic", "show", "events"}, `topic "events"`},
		{[]string{"queue", "create", "q9"}, `queue "q9"`},
		{[]string{"cluster", "status"}, "cluster status"},
	} {
		err := qb(wrongKey, tc.args...)
		checkSentence(t, "wrong key: "+strings.Join(tc.args, " "), err, "SharedAccessKeyName and SharedAccessKey",
			tc.what+": the node does not accept the key \"RootManageSharedAccessKey\"", "InvalidSignature")
		if err != nil && strings.Contains(err.Error()+hintOf(err), "Manage right") {
			t.Errorf("wrong key: %v: speaks of rights: %v (hint %q)", tc.args, err, hintOf(err))
		}
		err = qb(unknownKey, tc.args...)
		checkSentence(t, "unknown key: "+strings.Join(tc.args, " "), err, "SharedAccessKeyName and SharedAccessKey",
			tc.what+": the node does not accept the key \"nosuchkey\"", "not known")
		err = qb(sendKey, tc.args...)
		checkSentence(t, "Send key: "+strings.Join(tc.args, " "), err, "needs a key with the Manage right",
			tc.what+": the key \"sender\" lacks the Manage right")
	}
}
