package main

import (
	"context"
	"errors"
	"fmt"
	"html"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/go-amqp"
)

// hinted is an error with a sentence that tells the user what to do next; main prints
// it on its own line after the error.
type hinted struct {
	err  error
	hint string
}

func (h *hinted) Error() string { return h.err.Error() }
func (h *hinted) Unwrap() error { return h.err }

func withHint(err error, hint string) error {
	if err == nil {
		return nil
	}
	return &hinted{err: err, hint: hint}
}

// hintOf returns the outermost hint err carries, or "".
func hintOf(err error) string {
	var h *hinted
	if errors.As(err, &h) {
		return h.hint
	}
	return ""
}

// statusError is a non-2xx answer of the admin API to a request qbctl made itself
// (purge, keys): the status and the error text of its body.
type statusError struct {
	code   int
	detail string
}

func (e *statusError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.code, http.StatusText(e.code), e.detail)
}

// target names what a command acted on, for error sentences: `queue "jobs"`.
type target struct {
	kind string // queue, topic, subscription, rule, key, entity
	name string // as the user wrote it
	list string // the command that lists these ("qbctl queue list"), for hints
}

func (t target) String() string {
	if t.name == "" {
		return "the " + t.kind
	}
	return fmt.Sprintf("%s %q", t.kind, t.name)
}

// subject is what error sentences say a command attempted: t itself, or for a list
// command (which names no entity, or only the parent of what it lists) "listing
// queues", "listing the subscriptions of topic "events"". parent is what a 404 of a
// list command is about: the topic or subscription whose children it lists (the zero
// target for queues, topics and keys).
func (g *globals) subject(t target) (what string, parent target) {
	if g.verb != "list" {
		switch {
		case t.name == "" && (g.verb == "create" || g.verb == "update"): // --from-file without names
			return "the " + t.kind + " the file names", target{}
		case t.name == "" && g.cmdPath != "":
			return "'qbctl " + g.cmdPath + "'", target{}
		}
		return t.String(), target{}
	}
	switch strings.TrimSuffix(g.cmdPath, " list") {
	case "subscription": // t is the topic, as a topic or as a subscription target
		p := target{kind: "topic", name: t.name, list: "qbctl topic list"}
		return "listing the subscriptions of " + p.String(), p
	case "rule": // t is the subscription: TOPIC/SUB or TOPIC/Subscriptions/SUB
		topic, sub, _ := strings.Cut(t.name, "/")
		sub = strings.TrimPrefix(sub, "Subscriptions/")
		p := target{kind: "subscription", name: topic + "/Subscriptions/" + sub, list: "qbctl subscription list " + topic}
		return "listing the rules of " + p.String(), p
	}
	return "listing " + t.kind + "s", target{}
}

// human turns an error from the admin client, the data-plane client or the admin API
// into a sentence about t with a hint, instead of an HTTP or AMQP dump. Errors it does
// not recognise, and those that already have a hint, pass unchanged, but never as a raw
// Go struct (*Error{Condition: ...}): those become a sentence with their condition.
func (g *globals) human(err error, t target) error {
	if err == nil || hintOf(err) != "" {
		return err
	}
	what, parent := g.subject(t)
	code, detail := 0, ""
	var re *azcore.ResponseError
	var se *statusError
	var sbe *azservicebus.Error
	var ae *amqp.Error
	switch {
	case errors.As(err, &re):
		code = re.StatusCode
		if re.RawResponse != nil {
			if b, perr := runtime.Payload(re.RawResponse); perr == nil {
				detail = atomDetail(string(b))
			}
		}
	case errors.As(err, &se):
		code, detail = se.code, se.detail
	case errors.As(err, &sbe):
		_, detail = sdkCondition(err)
		switch sbe.Code {
		case azservicebus.CodeNotFound:
			code = http.StatusNotFound
		case azservicebus.CodeUnauthorizedAccess:
			code = http.StatusUnauthorized
		case azservicebus.CodeConnectionLost:
			return withHint(fmt.Errorf("%s: cannot reach the node over AMQP: %s", what, strings.TrimPrefix(err.Error(), "(connlost): ")),
				"is the node running and its AMQP port reachable at the connection string's Endpoint? 'qbctl status' checks the node")
		case azservicebus.CodeTimeout:
			return withHint(fmt.Errorf("%s: the node did not answer in time (%s)", what, detailOr(detail, "timeout")),
				"try again; 'qbctl status' checks the node")
		}
	case errors.As(err, &ae):
		return g.amqpRefusal(what, t, ae)
	}
	if code == 0 {
		var ue *url.Error
		var oe *net.OpError
		if errors.As(err, &ue) || errors.As(err, &oe) {
			return withHint(fmt.Errorf("cannot reach the admin API at %s: %v", g.adminAddr, unwrapURL(err)),
				"is the node running? Point --admin-addr (or QUORUMBUS_ADMIN_ADDR) at its admin listener")
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return withHint(fmt.Errorf("%s: the node did not answer in time", what),
				"try again; 'qbctl status' checks the node")
		}
		if cond, desc := sdkCondition(err); cond != "" {
			return fmt.Errorf("%s: the node refused it (%s): %s", what, cond, desc)
		}
		return err
	}
	with := ""
	if detail != "" {
		with = ": " + detail
	}
	switch code {
	case http.StatusNotFound:
		if parent.name != "" {
			t = parent
		}
		hint := "check the name"
		if t.list != "" {
			hint = "'" + t.list + "' lists them"
		}
		if t.name == "" {
			return withHint(fmt.Errorf("%s: not found (404)%s", what, with), hint)
		}
		return withHint(fmt.Errorf("%s not found (404)", t), hint)
	case http.StatusConflict:
		hint := "delete it first, or choose another name"
		switch t.kind {
		case "queue", "topic", "subscription":
			hint = fmt.Sprintf("'qbctl %s update' changes an existing %s; 'qbctl %s show' shows it", t.kind, t.kind, t.kind)
		}
		return withHint(fmt.Errorf("%s already exists (409)", what), hint)
	case http.StatusUnauthorized, http.StatusForbidden:
		return g.unauthorized(what, code, detail)
	case http.StatusBadRequest:
		return withHint(fmt.Errorf("%s: rejected (400)%s", what, with),
			"see the command's --help for the accepted values")
	case http.StatusServiceUnavailable, http.StatusInternalServerError, http.StatusGatewayTimeout:
		return withHint(fmt.Errorf("%s: the node cannot do this now (%d)%s", what, code, with),
			"try again; 'qbctl cluster status' shows whether the cluster has a metadata leader")
	}
	return fmt.Errorf("%s: the node answered %d%s", what, code, with)
}

func detailOr(detail, def string) string {
	if detail == "" {
		return def
	}
	return detail
}

// authProblem is why the node refused a token, read from the text of its refusal (the
// admin API's 401 body, the AMQP description): Service Bus's own words, which the node
// uses on both surfaces (cluster/admin auth.go, amqp cbs.go and attach.go).
type authProblem int

const (
	authOther    authProblem = iota
	authBadKey               // InvalidSignature: the key's value is wrong, or its name unknown
	authExpired              // ExpiredToken
	authNoManage             // a valid key without the Manage right
	authNoSend               // ... without Send
	authNoListen             // ... without Listen
)

func classifyAuth(detail string) authProblem {
	switch {
	case strings.Contains(detail, "InvalidSignature"):
		return authBadKey
	case strings.Contains(detail, "ExpiredToken"):
		return authExpired
	case strings.Contains(detail, "'Send' claim"):
		return authNoSend
	case strings.Contains(detail, "'Listen' claim"):
		return authNoListen
	case strings.Contains(detail, "Manage"), strings.Contains(detail, "Unauthorized access for '"):
		// "Manage,EntityRead claims required", "Authorization failed for specified
		// action: Manage,EntityWrite", "Manage claim(s) are required", and the
		// subscription operations' "Unauthorized access for 'GetSubscription' operation".
		return authNoManage
	}
	return authOther
}

// unauthorized words a 401/403: a key the node does not accept (wrong value, unknown
// name) is a different mistake from a good key that lacks a right, and each gets its
// own sentence and hint.
func (g *globals) unauthorized(what string, code int, detail string) error {
	keyName, src := "", g.connStringSource()
	if cs, err := g.connectionString(); err == nil {
		if p, err := parseConnString(cs); err == nil {
			keyName = p.keyName
		}
	}
	key := "the connection string's key"
	if keyName != "" {
		key = fmt.Sprintf("the key %q", keyName)
	}
	with := ""
	if detail != "" {
		with = ": " + detail
	}
	lacks := func(right, needs string) error {
		return withHint(fmt.Errorf("%s: %s lacks the %s right (%d)", what, key, right, code),
			needs+"; 'qbctl key list' (with a Manage key) shows each key's rights, 'qbctl key create' makes one")
	}
	switch classifyAuth(detail) {
	case authBadKey:
		return withHint(fmt.Errorf("%s: the node does not accept %s (%d)%s", what, key, code, with),
			"check SharedAccessKeyName and SharedAccessKey in the connection string ("+src+
				"): the name must be one of the namespace's keys and the key its current value")
	case authExpired:
		return withHint(fmt.Errorf("%s: the node refused an expired token (%d)%s", what, code, with),
			"a SharedAccessSignature in the connection string ("+src+") has expired: get a new one; with a SharedAccessKey, check this machine's clock")
	case authNoManage:
		return lacks("Manage", "managing entities, keys and the cluster needs a key with the Manage right")
	case authNoSend:
		return lacks("Send", "sending needs a key with the Send right")
	case authNoListen:
		return lacks("Listen", "peeking and receiving need a key with the Listen right")
	}
	return withHint(fmt.Errorf("%s: not authorized (%d)%s", what, code, with),
		"check the connection string's key ("+src+") and its rights: Manage for entities, Send or Listen for messages")
}

// connStringSource says where the connection string came from, for hints.
func (g *globals) connStringSource() string {
	switch {
	case g.connStr != "":
		return "--connection-string"
	case os.Getenv("QUORUMBUS_CONNECTION_STRING") != "":
		return "QUORUMBUS_CONNECTION_STRING"
	}
	return filepath.Join(g.data, "connection-string")
}

// amqpRefusal words an AMQP error the node sent (a refused attach, send or management
// request) as a sentence with its condition.
func (g *globals) amqpRefusal(what string, t target, ae *amqp.Error) error {
	cond, desc := string(ae.Condition), trimTracking(ae.Description)
	switch {
	case ae.Condition == amqp.ErrCondUnauthorizedAccess:
		return g.unauthorized(what, http.StatusUnauthorized, desc)
	case ae.Condition == amqp.ErrCondNotFound:
		hint := "check the name"
		if t.list != "" {
			hint = "'" + t.list + "' lists them"
		}
		return withHint(fmt.Errorf("%s not found (%s)", what, cond), hint)
	case cond == condSessionCannotBeLocked:
		return withHint(fmt.Errorf("%s: the session is held by another receiver (%s): %s", what, cond, desc),
			"try again once that receiver lets it go; 'qbctl peek' without --session browses every session without taking its lock")
	case ae.Condition == amqp.ErrCondNotAllowed && strings.Contains(desc, "SessionId was not set"):
		return withHint(fmt.Errorf("%s requires sessions: a message needs a session ID (%s)", what, cond),
			"give --session ID")
	case ae.Condition == amqp.ErrCondNotAllowed && strings.Contains(desc, "requires sessions"):
		return withHint(fmt.Errorf("%s requires sessions (%s)", what, cond),
			"give --session ID; 'qbctl peek "+t.name+"' shows the messages of every session with their session IDs")
	case ae.Condition == amqp.ErrCondNotAllowed && strings.Contains(desc, "does not require sessions"):
		return withHint(fmt.Errorf("%s does not use sessions, so --session does not apply (%s)", what, cond),
			"leave out --session")
	case cond == condEntityDisabled:
		return withHint(fmt.Errorf("%s is disabled (%s): %s", what, cond, desc),
			"'qbctl "+t.kind+" update "+strings.Replace(t.name, "/Subscriptions/", " ", 1)+" --status Active' enables it")
	}
	return fmt.Errorf("%s: the node refused it (%s): %s", what, cond, desc)
}

// The Service Bus conditions go-amqp has no constant for.
const (
	condSessionCannotBeLocked = "com.microsoft:session-cannot-be-locked"
	condEntityDisabled        = "com.microsoft:entity-disabled"
)

var (
	amqpErrRE = regexp.MustCompile(`(?s)\*Error\{Condition: (\S+), Description: (.*?), Info: map\[.*\]\}`)
	rpcErrRE  = regexp.MustCompile(`(?s)status code (\d+) and description: (.*)`)
)

// sdkCondition digs the AMQP condition and description out of an error of the Service
// Bus SDK, whose *Error does not unwrap to the AMQP error it carries (its text is the
// go-amqp struct's, or "rpc: failed, status code N and description: ..."). cond is ""
// when there is none.
func sdkCondition(err error) (cond, desc string) {
	var ae *amqp.Error
	if errors.As(err, &ae) {
		return string(ae.Condition), trimTracking(ae.Description)
	}
	s := err.Error()
	if m := amqpErrRE.FindStringSubmatch(s); m != nil {
		return m[1], trimTracking(m[2])
	}
	if m := rpcErrRE.FindStringSubmatch(s); m != nil {
		return "status " + m[1], trimTracking(m[2])
	}
	return "", strings.TrimSpace(s[strings.Index(s, ")")+1:])
}

// trimTracking drops Service Bus's " TrackingId:..., SystemTracker:..., Timestamp:..."
// suffix from a description.
func trimTracking(s string) string {
	if i := strings.Index(s, "TrackingId:"); i >= 0 {
		s = s[:i]
	}
	return strings.TrimRight(strings.TrimSpace(s), ".")
}

var detailRE = regexp.MustCompile(`(?s)<Detail>(.*?)</Detail>`)

// atomDetail extracts the sentence of an ATOM error body (<Error><Code/><Detail/>),
// without its TrackingId; JSON bodies ({"message": ...}) and plain text pass through.
func atomDetail(body string) string {
	s := strings.TrimSpace(body)
	if m := detailRE.FindStringSubmatch(s); m != nil {
		s = html.UnescapeString(m[1])
	} else if m := regexp.MustCompile(`"message"\s*:\s*"((?:[^"\\]|\\.)*)"`).FindStringSubmatch(s); m != nil {
		s = strings.ReplaceAll(m[1], `\"`, `"`)
	}
	if i := strings.Index(s, " TrackingId:"); i >= 0 {
		s = strings.TrimRight(s[:i], ". ")
	}
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}
