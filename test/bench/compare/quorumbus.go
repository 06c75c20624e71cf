package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
)

// quorumbus is one single-partition queue of a Quorumbus cluster, driven over AMQP 1.0
// with go-amqp exactly like the other brokers (unsettled sends waiting for accepted,
// automatic credit, accept per message). Reset makes a new queue through the admin API
// (the azservicebus/admin client), waits until its partition has 3 replicas and a
// leader, and finds the leader's AMQP listener with qbctl: data clients connect there,
// as they do to the NATS stream leader and the RabbitMQ queue leader.
type quorumbus struct {
	adminAddr string
	connStr   string
	qbctl     string // path of the qbctl binary
	keyName   string
	key       string
	ac        *admin.Client
	prefix    string
	seq       int
	queue     string // the current queue; "" before the first Reset
	amqpAddr  string // the leader node's AMQP listener, HOST:PORT
	amqpURL   string // the same with credentials
	leader    string // node ID
	// follower: the data clients connect to a replica that does not lead the queue
	// (system quorumbus-follower), as a Kubernetes Service sends two clients of three,
	// so every send and settlement is forwarded to the leader.
	follower bool
	node     string // the node the data clients connect to
}

func newQuorumbus(adminAddr, connStr, qbctl, prefix string) (*quorumbus, error) {
	q := &quorumbus{adminAddr: adminAddr, connStr: connStr, qbctl: qbctl, prefix: prefix}
	for _, part := range strings.Split(connStr, ";") {
		k, v, _ := strings.Cut(part, "=")
		switch strings.ToLower(strings.TrimSpace(k)) {
		case "sharedaccesskeyname":
			q.keyName = v
		case "sharedaccesskey":
			q.key = v
		}
	}
	if q.keyName == "" || q.key == "" {
		return nil, errors.New("quorumbus: the connection string needs SharedAccessKeyName and SharedAccessKey")
	}
	ac, err := admin.NewClientFromConnectionString(connStr, &admin.ClientOptions{
		ClientOptions: azcore.ClientOptions{
			Transport: adminTransport{adminAddr},
			Retry:     policy.RetryOptions{MaxRetries: 3, RetryDelay: 200 * time.Millisecond},
		},
	})
	if err != nil {
		return nil, err
	}
	q.ac = ac
	return q, nil
}

// adminTransport sends the admin client's https://<namespace>/... requests to the
// node's admin listener over plain HTTP; the signed token still names the namespace.
type adminTransport struct{ addr string }

func (t adminTransport) Do(req *http.Request) (*http.Response, error) {
	req.URL.Scheme, req.URL.Host, req.Host = "http", t.addr, t.addr
	return http.DefaultClient.Do(req)
}

func (q *quorumbus) Close() {}

// Reset deletes the previous queue and makes a fresh one under a new name, so that no
// state of the last test (partition group, log) is reused.
func (q *quorumbus) Reset(ctx context.Context) error {
	if q.queue != "" {
		if _, err := q.ac.DeleteQueue(ctx, q.queue, nil); err != nil {
			return fmt.Errorf("delete %s: %w", q.queue, err)
		}
	}
	q.seq++
	q.queue = fmt.Sprintf("%s-%d", q.prefix, q.seq)
	// Right after start-up the cluster may not accept entities yet: retry for a minute.
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := q.ac.CreateQueue(ctx, q.queue, nil)
		if err == nil {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("create %s: %w", q.queue, err)
		}
		time.Sleep(time.Second) // waiting for the metadata group to elect a leader
	}
	return q.findLeader(ctx)
}

// qbctlRun runs qbctl against the admin listener and returns its standard output.
func (q *quorumbus) qbctlRun(ctx context.Context, args ...string) ([]byte, error) {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, q.qbctl, append([]string{"--admin-addr", q.adminAddr,
		"--connection-string", q.connStr}, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("qbctl %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(errOut.String()))
	}
	return out.Bytes(), nil
}

// partitionRow is one row of `qbctl cluster partitions -o json`.
type partitionRow struct {
	Entity   string `json:"entity"`
	Leader   string `json:"leader"`
	Replicas []struct {
		Node string `json:"node"`
	} `json:"replicas"`
}

// clusterMembers is `qbctl cluster status -o json`.
type clusterMembers struct {
	Members []struct {
		ID       string `json:"id"`
		AMQPAddr string `json:"AMQPAddr"`
	} `json:"members"`
}

// findLeader waits up to a minute for the queue's partition to have 3 replicas and a
// leader, and points the data clients at the leader's AMQP listener (at a follower's
// with q.follower).
func (q *quorumbus) findLeader(ctx context.Context) error {
	deadline := time.Now().Add(time.Minute)
	var last string
	for {
		out, err := q.qbctlRun(ctx, "cluster", "partitions", "-o", "json")
		if err != nil {
			return err
		}
		var rows []partitionRow
		if err := json.Unmarshal(out, &rows); err != nil {
			return fmt.Errorf("qbctl cluster partitions: %w", err)
		}
		last = "no partition"
		for _, r := range rows {
			if !strings.EqualFold(r.Entity, q.queue) {
				continue
			}
			last = fmt.Sprintf("leader %q, %d replicas", r.Leader, len(r.Replicas))
			if r.Leader != "" && len(r.Replicas) == 3 {
				q.leader = r.Leader
				if !q.follower {
					return q.useNode(ctx, r.Leader)
				}
				for _, rep := range r.Replicas {
					if rep.Node != r.Leader {
						return q.useNode(ctx, rep.Node)
					}
				}
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("queue %s not placed after a minute: %s", q.queue, last)
		}
		time.Sleep(200 * time.Millisecond) // polling placement: qbctl has no wait
	}
}

func (q *quorumbus) useNode(ctx context.Context, id string) error {
	out, err := q.qbctlRun(ctx, "cluster", "status", "-o", "json")
	if err != nil {
		return err
	}
	var st clusterMembers
	if err := json.Unmarshal(out, &st); err != nil {
		return fmt.Errorf("qbctl cluster status: %w", err)
	}
	for _, m := range st.Members {
		if m.ID == id {
			if err := checkLoopback("amqp://" + m.AMQPAddr); err != nil {
				return err
			}
			q.node, q.amqpAddr = id, m.AMQPAddr
			q.amqpURL = (&url.URL{Scheme: "amqp", User: url.UserPassword(q.keyName, q.key), Host: m.AMQPAddr}).String()
			return nil
		}
	}
	return fmt.Errorf("node %s is not among the members qbctl lists", id)
}

func (q *quorumbus) Depth(ctx context.Context) (int, error) {
	rp, err := q.ac.GetQueueRuntimeProperties(ctx, q.queue, nil)
	if err != nil {
		return 0, err
	}
	if rp == nil {
		return 0, fmt.Errorf("queue %s not found", q.queue)
	}
	return int(rp.ActiveMessageCount), nil
}

func (q *quorumbus) Describe(ctx context.Context) string {
	if q.follower {
		return fmt.Sprintf("queue %q (1 partition, 3 replicas), leader %s; clients connect to the AMQP listener of follower %s, %s",
			q.queue, q.leader, q.node, redact(q.amqpURL))
	}
	return fmt.Sprintf("queue %q (1 partition, 3 replicas), leader %s; clients connect to its AMQP listener %s",
		q.queue, q.leader, redact(q.amqpURL))
}

func (q *quorumbus) NewSender(ctx context.Context) (sender, error) {
	return newAMQPSender(ctx, q.amqpURL, q.queue)
}

func (q *quorumbus) NewReceiver(ctx context.Context, prefetch int) (receiver, error) {
	return newAMQPReceiver(ctx, q.amqpURL, q.queue, prefetch, true)
}
