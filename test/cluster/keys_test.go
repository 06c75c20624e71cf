package cluster_test

import (
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/quorumbus/quorumbus/test/harness"
)

// A key created through one node authorizes on every other node at once: a token that
// names a key a node does not know yet waits for that node's metadata to catch up with
// the leader's before it is refused (a Listen key created through n1 was
// refused on n2 50 ms later, "not known"). The SDK clients here do not retry, so a
// refusal fails the test instead of being hidden by a second attempt.
func TestKeyCreatedThroughOneNodeWorksAtOnceOnTheOthers(t *testing.T) {
	c := harness.StartCluster(t, 3, harness.WithArgs("--replicas", "3"))
	c.WaitFor(t, 60*time.Second, func() error { return formed(t, c) })
	const q = "fresh-keys"
	createQueue(t, c.Nodes[0], q, nil)
	c.WaitFor(t, 60*time.Second, func() error { return serving(t, c, q, 3) })
	for i := range 8 {
		name, secret := fmt.Sprint("app-", i), fmt.Sprintf("c2VjcmV0LWtleS0%dCg==", i)
		if out, err := c.Nodes[0].Qbctl(t, "key", "create", name, "--rights", "Send,Listen", "--key", secret); err != nil {
			t.Fatalf("qbctl key create %s through %s: %v\n%s", name, c.Nodes[0].ID, err, out)
		}
		for _, n := range c.Nodes[1:] {
			cs := withKey(n.ConnectionString, name, secret)
			client, err := azservicebus.NewClientFromConnectionString(cs, &azservicebus.ClientOptions{
				RetryOptions: azservicebus.RetryOptions{MaxRetries: -1}})
			if err != nil {
				t.Fatal(err)
			}
			s, err := client.NewSender(q, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.SendMessage(ctxT(t, 30*time.Second), &azservicebus.Message{Body: []byte(name)}, nil); err != nil {
				t.Fatalf("key %s created through %s, first use on %s: %v", name, c.Nodes[0].ID, n.ID, err)
			}
			client.Close(ctxT(t, 10*time.Second))
		}
	}
}

var keyPart = regexp.MustCompile(`SharedAccessKeyName=[^;]*;SharedAccessKey=[^;]*`)

// withKey returns connection string cs with another key name and key.
func withKey(cs, name, key string) string {
	return keyPart.ReplaceAllString(cs, "SharedAccessKeyName="+name+";SharedAccessKey="+key)
}
