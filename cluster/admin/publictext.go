package admin

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"

	"github.com/quorumbus/quorumbus/cluster/meta"
)

// internalPrefix is the package prefix of a sentinel error's text ("meta: ",
// "cluster: ", "rule: "): meaningful in a log line, noise in an answer a user reads.
var internalPrefix = regexp.MustCompile(`\b(?:meta|metagroup|cluster|partition|fsm|rule|admin|placement|transport|wire|sas): `)

// StripPrefixes is msg without the package prefixes of the broker's error texts, for
// the other edges that answer users in words (the AMQP bridge's error descriptions).
func StripPrefixes(msg string) string { return internalPrefix.ReplaceAllString(msg, "") }

// publicText is err as a user reads it in an answer: Service Bus's sentences for an
// entity that exists ("The messaging entity 'jobs' already exists") or is missing, and
// no package prefixes. path names the entity the request is about ("" when none); the
// log line keeps err as it is.
func publicText(err error, path string) string {
	msg := err.Error()
	switch {
	case errors.Is(err, meta.ErrExists):
		if path != "" {
			return fmt.Sprintf("The messaging entity '%s' already exists", path)
		}
		msg = strings.Replace(msg, ": "+meta.ErrExists.Error(), " already exists", 1)
	case errors.Is(err, meta.ErrNotFound):
		// What is missing may be another entity than the path's (a subscription's topic).
		if m := strings.Replace(msg, ": "+meta.ErrNotFound.Error(), " was not found", 1); m != msg {
			msg = m
		} else if path != "" {
			return fmt.Sprintf("The messaging entity '%s' was not found", path)
		}
	}
	return internalPrefix.ReplaceAllString(msg, "")
}

// entityPath is the entity path of a management request ("jobs",
// "orders/Subscriptions/eu"), without the API's query.
func entityPath(r *http.Request) string {
	return strings.Trim(r.URL.Path, "/")
}
