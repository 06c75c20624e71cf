package cluster

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	sbadmin "github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/quorumbus/quorumbus/cluster/admin"
	"github.com/quorumbus/quorumbus/fsm"
)

// sdkRewrite sends the admin client's https://<endpoint>/ requests to a test server over
// plain HTTP on 127.0.0.1; the signature still covers the original URL.
type sdkRewrite struct{ srv *httptest.Server }

func (r sdkRewrite) Do(req *http.Request) (*http.Response, error) {
	u, _ := url.Parse(r.srv.URL)
	c := req.Clone(req.Context())
	c.URL.Scheme, c.URL.Host = "http", u.Host
	return r.srv.Client().Do(c)
}

// A create committed while its partitions do not serve yet (a loaded cluster whose
// groups are slow to elect; here their replicas are held closed) is acknowledged with
// 201 and the entity's description. It was answered 503 "the change is committed but
// its partitions are not serving yet", which the SDK's admin client retried into 409
// "already exists": CreateQueue failed although the queue was created. A
// send made meanwhile waits for the partitions and completes once they serve.
func TestCommittedCreateSucceedsBeforePartitionsServe(t *testing.T) {
	var hold atomic.Bool
	hold.Store(true)
	nd := startClusterWith(t, 1, 1, func(c *Config) {
		c.ServeWait = 300 * time.Millisecond
		c.holdReplica = func(entity string) bool { return hold.Load() && strings.HasPrefix(entity, "held-") }
	})[0]
	hc := admin.DefaultConfig()
	hc.Store = nd.Store()
	h, err := admin.New(hc)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h) // 127.0.0.1:0
	t.Cleanup(srv.Close)
	name, key := nd.DefaultKey()
	ac, err := sbadmin.NewClientFromConnectionString("Endpoint=sb://127.0.0.1:5672;SharedAccessKeyName="+name+";SharedAccessKey="+key,
		&sbadmin.ClientOptions{ClientOptions: azcore.ClientOptions{
			Transport: sdkRewrite{srv},
			// The SDK's retries, made quick: a 503 for the create is retried into 409.
			Retry: policy.RetryOptions{MaxRetries: 3, RetryDelay: 10 * time.Millisecond, MaxRetryDelay: 50 * time.Millisecond},
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	q, err := ac.CreateQueue(ctx, "held-orders", nil)
	if err != nil {
		t.Fatalf("CreateQueue while its partitions do not serve: %v", err)
	}
	if q.QueueName != "held-orders" || q.LockDuration == nil || *q.LockDuration != "PT1M" {
		t.Fatalf("CreateQueue answered %+v, want the queue's description", q)
	}
	if _, err := ac.CreateTopic(ctx, "held-events", nil); err != nil {
		t.Fatalf("CreateTopic while its partitions do not serve: %v", err)
	}
	// A subscription changes the topic's partitions, which cannot apply it yet.
	if _, err := ac.CreateSubscription(ctx, "held-events", "eu", nil); err != nil {
		t.Fatalf("CreateSubscription while the topic's partitions do not serve: %v", err)
	}
	if _, err := ac.CreateQueue(ctx, "held-orders", nil); statusCode(err) != http.StatusConflict {
		t.Fatalf("a second CreateQueue: %v, want 409 already exists", err)
	}

	// A send made now waits for the partitions, which serve once released.
	sent := make(chan error, 1)
	go func() {
		m := &fsm.Message{}
		m.MessageID = "m1"
		sent <- nd.Router().Send(ctx, "held-orders", []*fsm.Message{m})
	}()
	select {
	case err := <-sent:
		t.Fatalf("a send completed while the queue's partitions were held: %v", err)
	case <-time.After(200 * time.Millisecond): // the send is under way: nothing to await
	}
	hold.Store(false)
	nd.rec.changed()
	if err := <-sent; err != nil {
		t.Fatalf("send once the partitions serve: %v", err)
	}
	msgs, err := nd.Router().Receive(ctx, Address{Entity: "held-orders"}, "", "", fsm.ReceiveAndDelete, 1, 10*time.Second)
	if err != nil || len(msgs) != 1 || msgs[0].MessageID != "m1" {
		t.Fatalf("receive: %v, %v; want m1", msgs, err)
	}
	if s, err := ac.GetSubscription(ctx, "held-events", "eu", nil); err != nil || s == nil {
		t.Fatalf("GetSubscription once the partitions serve: %+v, %v", s, err)
	}
}

// statusCode is the HTTP status of an SDK admin client's error, 0 for none.
func statusCode(err error) int {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return re.StatusCode
	}
	return 0
}
