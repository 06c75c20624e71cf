package msgstate

import (
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

func TestName(t *testing.T) {
	for s, want := range map[azservicebus.MessageState]string{
		azservicebus.MessageStateActive:    "Active",
		azservicebus.MessageStateDeferred:  "Deferred",
		azservicebus.MessageStateScheduled: "Scheduled",
		azservicebus.MessageState(7):       "7",
	} {
		if got := Name(s); got != want {
			t.Errorf("Name(%d) = %q, want %q", s, got, want)
		}
	}
}
