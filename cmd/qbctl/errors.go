package main

import (
	"errors"
	"fmt"
	"html"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
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

func (t target) String() string { return fmt.Sprintf("%s %q", t.kind, t.name) }

// human turns an error from the admin client, the data-plane client or the admin API
// into a sentence about t with a hint, instead of an HTTP or AMQP dump. Errors it does
// not recognise, and those that already have a hint, pass unchanged.
func (g *globals) human(err error, t target) error {
	if err == nil || hintOf(err) != "" {
		return err
	}
	code, detail := 0, ""
	var re *azcore.ResponseError
	var se *statusError
	var sbe *azservicebus.Error
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
		switch sbe.Code {
		case azservicebus.CodeNotFound:
			code = http.StatusNotFound
		case azservicebus.CodeUnauthorizedAccess:
			code = http.StatusUnauthorized
		case azservicebus.CodeConnectionLost:
			return withHint(fmt.Errorf("%s: cannot reach the node over AMQP: %s", t, strings.TrimPrefix(err.Error(), "(connlost): ")),
				"is the node running and its AMQP port reachable at the connection string's Endpoint? 'qbctl status' checks the node")
		}
	}
	if code == 0 {
		var ue *url.Error
		var oe *net.OpError
		if errors.As(err, &ue) || errors.As(err, &oe) {
			return withHint(fmt.Errorf("cannot reach the admin API at %s: %v", g.adminAddr, unwrapURL(err)),
				"is the node running? Point --admin-addr (or QUORUMBUS_ADMIN_ADDR) at its admin listener")
		}
		return err
	}
	with := ""
	if detail != "" {
		with = ": " + detail
	}
	switch code {
	case http.StatusNotFound:
		hint := "check the name"
		if t.list != "" {
			hint = "'" + t.list + "' lists them"
		}
		return withHint(fmt.Errorf("%s not found (404)", t), hint)
	case http.StatusConflict:
		hint := "delete it first, or choose another name"
		switch t.kind {
		case "queue", "topic", "subscription":
			hint = fmt.Sprintf("'qbctl %s update' changes an existing %s; 'qbctl %s show' shows it", t.kind, t.kind, t.kind)
		}
		return withHint(fmt.Errorf("%s already exists (409)", t), hint)
	case http.StatusUnauthorized, http.StatusForbidden:
		return withHint(fmt.Errorf("%s: not authorized (%d)%s", t, code, with),
			"this needs a key with the Manage right (Send or Listen for messages); 'qbctl key list' shows the keys")
	case http.StatusBadRequest:
		return withHint(fmt.Errorf("%s: rejected (400)%s", t, with),
			"see the command's --help for the accepted values")
	case http.StatusServiceUnavailable, http.StatusInternalServerError, http.StatusGatewayTimeout:
		return withHint(fmt.Errorf("%s: the node cannot do this now (%d)%s", t, code, with),
			"try again; 'qbctl cluster status' shows whether the cluster has a metadata leader")
	}
	return fmt.Errorf("%s: the node answered %d%s", t, code, with)
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
