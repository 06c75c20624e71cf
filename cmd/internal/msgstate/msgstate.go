// Package msgstate names a peeked message's state the way qbctl's `peek` table and the
// explorer's message list both show it. It imports only the Service Bus SDK.
package msgstate

import (
	"strconv"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

// Name is the state as Service Bus Explorer and the portal name it: Active, Deferred
// or Scheduled; a state the SDK adds later shows as its number.
func Name(s azservicebus.MessageState) string {
	switch s {
	case azservicebus.MessageStateActive:
		return "Active"
	case azservicebus.MessageStateDeferred:
		return "Deferred"
	case azservicebus.MessageStateScheduled:
		return "Scheduled"
	}
	return strconv.Itoa(int(s))
}
