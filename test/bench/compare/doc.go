// Command compare runs one load against Quorumbus, RabbitMQ quorum queues and NATS
// JetStream, and turns the results into the side-by-side table and chart of
// docs/benchmarks.md. run.sh (make bench-compare) installs and starts each 3-node
// cluster on 127.0.0.1 in turn and calls it; run it by hand only against clusters you
// started yourself.
//
//	compare load -system S -url URL[,URL...] [load flags]   measure; prints RESULT and CDF lines
//	compare report -raw FILE [-md docs/benchmarks.md] [-png docs/img/bench-compare.png]
//
// Systems:
//
//	quorumbus      AMQP 1.0 (github.com/Azure/go-amqp) against a Quorumbus cluster; the queue
//	               is made through the admin API, clients connect to the AMQP listener of
//	               the node that leads the queue's partition (found with qbctl)
//	quorumbus-sdk  the same through the official azservicebus SDK, as a Service Bus user would
//	quorumbus-follower  the same as quorumbus with the clients on a node that follows the
//	               queue's partition (forwarded to the leader), as a Kubernetes Service
//	               sends two clients of three
//	rabbit-091     RabbitMQ quorum queue over AMQP 0-9-1, publisher confirms (amqp091-go)
//	rabbit-amqp10  the same queue over AMQP 1.0 (rabbitmq_amqp1_0), with link credit
//	               managed by hand: RabbitMQ 3.10's plugin stalls go-amqp's automatic credit
//	nats           NATS JetStream stream with 3 replicas, durable pull consumer
//
// Every system gets the same tests: acknowledged sends with W unconfirmed in flight,
// receive with an explicit acknowledgement per message from a pre-filled queue with P
// messages of credit/prefetch, and end-to-end latency at a fixed offered rate measured
// from each message's scheduled send time (open loop, so a stalled producer counts).
//
// Goroutines: a test's sender confirmations are awaited by one goroutine of windowed,
// the latency test's receiver runs on one more; both end before the test returns.
// Only loopback broker addresses are accepted.
//
// It is a Go module of its own (go.mod here), so that the RabbitMQ, NATS and plotting
// clients it alone uses stay out of the product's go.mod; `make test` and `make lint`
// cover it (SUBMODS in the Makefile).
package main
