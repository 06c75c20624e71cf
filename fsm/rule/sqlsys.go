package rule

import "strings"

// sysID names a system property (sys.X).
type sysID uint8

const (
	sysMessageID sysID = iota
	sysCorrelationID
	sysTo
	sysReplyTo
	sysSubject
	sysSessionID
	sysReplyToSessionID
	sysContentType
	sysPartitionKey
	sysSequenceNumber
	sysEnqueuedTime
	sysScheduledEnqueueTime
	sysTimeToLive
	sysExpiresAt
	sysSize
)

// sysNames maps every accepted spelling (compared case-insensitively) to a property.
// Both the BrokeredMessage names of the SQL documentation and the names of the
// current SDKs are accepted.
var sysNames = [...]struct {
	name string
	id   sysID
}{
	{"MessageId", sysMessageID},
	{"CorrelationId", sysCorrelationID},
	{"To", sysTo},
	{"ReplyTo", sysReplyTo},
	{"Label", sysSubject},
	{"Subject", sysSubject},
	{"SessionId", sysSessionID},
	{"ReplyToSessionId", sysReplyToSessionID},
	{"ContentType", sysContentType},
	{"PartitionKey", sysPartitionKey},
	{"SequenceNumber", sysSequenceNumber},
	{"EnqueuedTimeUtc", sysEnqueuedTime},
	{"EnqueuedTime", sysEnqueuedTime},
	{"ScheduledEnqueueTimeUtc", sysScheduledEnqueueTime},
	{"ScheduledEnqueueTime", sysScheduledEnqueueTime},
	{"TimeToLive", sysTimeToLive},
	{"ExpiresAtUtc", sysExpiresAt},
	{"ExpiresAt", sysExpiresAt},
	{"Size", sysSize},
}

func lookupSys(name string) (sysID, bool) {
	for _, s := range sysNames {
		if strings.EqualFold(s.name, name) {
			return s.id, true
		}
	}
	return 0, false
}

// sysString returns a pointer to the field behind a string system property, or nil for
// the others. Exactly these are settable and removable by an action, except
// PartitionKey, which has already chosen the partition.
func sysString(p *Properties, id sysID) *string {
	switch id {
	case sysMessageID:
		return &p.MessageID
	case sysCorrelationID:
		return &p.CorrelationID
	case sysTo:
		return &p.To
	case sysReplyTo:
		return &p.ReplyTo
	case sysSubject:
		return &p.Subject
	case sysSessionID:
		return &p.SessionID
	case sysReplyToSessionID:
		return &p.ReplyToSessionID
	case sysContentType:
		return &p.ContentType
	case sysPartitionKey:
		return &p.PartitionKey
	}
	return nil
}

func sysSettable(id sysID) bool { return id <= sysContentType }

// sysValue reads a system property. An empty string property, an unset scheduled time
// and an unset time to live are NULL; a SessionId set to "" (BlankSessionID) is the
// empty string.
func sysValue(p *Properties, id sysID) val {
	if s := sysString(p, id); s != nil {
		switch {
		case id == sysSessionID && *s == BlankSessionID:
			return val{k: vString, s: ""}
		case *s == "":
			return nullVal
		}
		return val{k: vString, s: *s}
	}
	switch id {
	case sysSequenceNumber:
		return val{k: vInt, i: p.SequenceNumber}
	case sysEnqueuedTime:
		return val{k: vTime, i: p.EnqueuedTime}
	case sysScheduledEnqueueTime:
		if p.ScheduledEnqueueTime == 0 {
			return nullVal
		}
		return val{k: vTime, i: p.ScheduledEnqueueTime}
	case sysTimeToLive:
		if p.TimeToLive == 0 {
			return nullVal
		}
		return val{k: vInt, i: p.TimeToLive}
	case sysExpiresAt:
		if p.TimeToLive == 0 {
			return nullVal
		}
		return val{k: vTime, i: p.EnqueuedTime + p.TimeToLive}
	case sysSize:
		return val{k: vInt, i: p.Size}
	}
	return nullVal
}
