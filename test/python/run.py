#!/usr/bin/python3
# Runs what a Python user of the official azure-servicebus SDK (7.8.2 on uamqp 1.5.3, as
# Debian packages them: python3-azure, python3-uamqp) does against a Quorumbus node.
# make conformance runs it through test/python/run.sh, which installs the packages when
# missing; by hand (the packages install for /usr/bin/python3, not for a python3 found
# earlier on PATH):
#
#   QB_CONN='Endpoint=sb://127.0.0.1:5671/;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=KEY' \
#   QB_CA=DATA/tls/ca.crt QB_WS_ENDPOINT=sb://127.0.0.1:5671 /usr/bin/python3 run.py [name-regex]
#
# The SDK always dials port 5671 with TLS (it ignores the Endpoint's port), so the node
# must serve AMQPS on 127.0.0.1:5671; QB_CA is the CA it trusts (connection_verify). The
# administration client uses the same connection string (QB_ADMIN_CONN overrides it):
# the node serves its HTTP API on the AMQPS port too. QB_WS_ENDPOINT is where AMQP over
# WebSockets is served (the AMQPS port, or the node's HTTPS admin port), given to the
# SDK as custom_endpoint_address. QB_CONN_SEND_ONLY is a Send-only key's string (one
# test); QB_TEST_TIMEOUT bounds each test (seconds, default 90); QB_TRACE=1 prints the
# traceback of a failure, QB_FRAMES=1 turns on uamqp's frame trace.
#
# The last line is "python: N passed, M failed"; the exit status is 1 when a check failed.
import datetime
import os
import re
import signal
import sys
import time
import traceback
import uuid

from azure.servicebus import (
    NEXT_AVAILABLE_SESSION,
    AutoLockRenewer,
    ServiceBusClient,
    ServiceBusMessage,
    ServiceBusReceiveMode,
    ServiceBusSubQueue,
    TransportType,
)
from azure.servicebus.exceptions import (
    MessageAlreadySettled,
    MessageLockLostError,
    ServiceBusError,
)
from azure.servicebus.management import (
    CorrelationRuleFilter,
    ServiceBusAdministrationClient,
    SqlRuleAction,
    SqlRuleFilter,
)

CONN = os.environ.get("QB_CONN")
CA = os.environ.get("QB_CA")
if not CONN or not CA:
    print("set QB_CONN and QB_CA", file=sys.stderr)
    sys.exit(2)
WS_ENDPOINT = os.environ.get("QB_WS_ENDPOINT")
ADMIN_CONN = os.environ.get("QB_ADMIN_CONN", CONN)
ONLY = re.compile(sys.argv[1]) if len(sys.argv) > 1 else None
RUN = format(int(time.time() * 1000) % (36**6), "x")
TEST_TIMEOUT = int(os.environ.get("QB_TEST_TIMEOUT", "90"))  # seconds; one hung test fails instead of hanging the run


def name(p):
    return "py-%s-%s-%s" % (p, RUN, uuid.uuid4().hex[:5])


def without_port(conn):
    """The connection string with no port in its Endpoint, for the data plane. The SDK
    dials 5671 whatever the port says, but keeps the port in the entity URI it compares
    with a session receiver's attach, which then never matches: the session's
    locked_until_utc stays None until the first renew_lock (docs/compatibility.md)."""
    return re.sub(r"(?i)(Endpoint=sb://[^/;:]+):[0-9]+", r"\1", conn)


DATA_CONN = without_port(CONN)
client = ServiceBusClient.from_connection_string(
    DATA_CONN, connection_verify=CA, retry_total=2, logging_enable=bool(os.environ.get("QB_FRAMES")))


class Admin:
    """The administration client as a user writes it: from the connection string, with
    the CA passed on each call (its constructor does not take connection_verify)."""

    def __init__(self, conn):
        self.c = ServiceBusAdministrationClient.from_connection_string(conn)

    def __getattr__(self, attr):
        f = getattr(self.c, attr)
        return lambda *a, **kw: f(*a, connection_verify=CA, **kw)


admin = Admin(ADMIN_CONN)


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def receive_n(receiver, n, wait=10):
    """Up to n messages within wait seconds."""
    out = []
    deadline = time.monotonic() + wait
    while len(out) < n and time.monotonic() < deadline:
        out += receiver.receive_messages(max_message_count=n - len(out), max_wait_time=2)
    return out


def body(m):
    return b"".join(m.body).decode()


def text(v):
    return v.decode() if isinstance(v, bytes) else v


def props(m):
    """Application properties with str keys and str values (uamqp hands out bytes)."""
    return {text(k): text(v) for k, v in (m.application_properties or {}).items()}


class queue:
    def __init__(self, **kw):
        self.kw = kw

    def __enter__(self):
        self.name = name("q")
        admin.create_queue(self.name, **self.kw)
        return self.name

    def __exit__(self, *exc):
        try:
            admin.delete_queue(self.name)
        except Exception:
            pass


tests = []


def test(n):
    def deco(fn):
        tests.append((n, fn))
        return fn

    return deco


@test("README admin snippet")
def _():
    conn, ca = ADMIN_CONN, CA
    # --- README snippet ---
    from azure.servicebus.management import ServiceBusAdministrationClient
    admin = ServiceBusAdministrationClient.from_connection_string(conn)
    admin.create_queue("orders", connection_verify=ca)
    # --- end ---
    try:
        check(admin.get_queue("orders", connection_verify=ca).name == "orders", "get_queue")
    finally:
        admin.delete_queue("orders", connection_verify=ca)


@test("admin: queue create, get, update, list, exists, runtime, delete")
def _():
    q = name("adm")
    created = admin.create_queue(q, max_delivery_count=7, lock_duration=datetime.timedelta(seconds=45))
    check(created.name == q and created.max_delivery_count == 7, "create_queue: %r" % created)
    got = admin.get_queue(q)
    check(got.lock_duration == datetime.timedelta(seconds=45), "lock_duration %r" % got.lock_duration)
    got.max_delivery_count = 9
    admin.update_queue(got)
    check(admin.get_queue(q).max_delivery_count == 9, "update_queue did not apply")
    check(q in [x.name for x in admin.list_queues()], "list_queues misses the queue")
    with client.get_queue_sender(q) as s:
        s.send_messages([ServiceBusMessage("a"), ServiceBusMessage("b")])
    rt = admin.get_queue_runtime_properties(q)
    check(rt.active_message_count == 2 and rt.total_message_count == 2, "runtime %r" % rt)
    check(any(x.name == q for x in admin.list_queues_runtime_properties()), "list runtime")
    admin.delete_queue(q)
    try:
        admin.get_queue(q)
        raise AssertionError("get_queue after delete succeeded")
    except Exception as e:  # ResourceNotFoundError
        check(type(e).__name__ == "ResourceNotFoundError", "get after delete: %r" % e)


@test("admin: topic, subscription, rules, namespace, runtime properties")
def _():
    t = name("t")
    admin.create_topic(t, max_size_in_megabytes=1024)
    try:
        admin.create_subscription(t, "s1", max_delivery_count=3)
        check(admin.get_subscription(t, "s1").max_delivery_count == 3, "subscription props")
        admin.create_rule(t, "s1", "red", filter=SqlRuleFilter("color = 'red'"),
                          action=SqlRuleAction("SET tagged = 'yes'"))
        admin.delete_rule(t, "s1", "$Default")
        rules = {r.name: r for r in admin.list_rules(t, "s1")}
        check(set(rules) == {"red"}, "rules %r" % list(rules))
        check(rules["red"].filter.sql_expression == "color = 'red'", "filter %r" % rules["red"].filter)
        got = admin.get_rule(t, "s1", "red")
        check(got.action.sql_expression == "SET tagged = 'yes'", "action %r" % got.action)
        check(t in [x.name for x in admin.list_topics()], "list_topics")
        check([x.name for x in admin.list_subscriptions(t)] == ["s1"], "list_subscriptions")
        check(admin.get_topic_runtime_properties(t).subscription_count == 1, "topic runtime")
        with client.get_topic_sender(t) as s:
            s.send_messages(ServiceBusMessage("r", application_properties={"color": "red"}))
        check(admin.get_subscription_runtime_properties(t, "s1").active_message_count == 1, "sub runtime")
        ns = admin.get_namespace_properties()
        check(ns.name, "namespace properties %r" % ns)
    finally:
        admin.delete_topic(t)


@test("send single, peek-lock receive, complete")
def _():
    with queue() as q:
        with client.get_queue_sender(q) as s:
            s.send_messages(ServiceBusMessage("hello"))
        with client.get_queue_receiver(q) as r:
            ms = receive_n(r, 1)
            check(len(ms) == 1 and body(ms[0]) == "hello", "got %r" % [str(m) for m in ms])
            check(ms[0].delivery_count == 0 and ms[0].sequence_number > 0, "delivery count / seq")
            check(ms[0].locked_until_utc is not None, "locked_until_utc")
            r.complete_message(ms[0])
            check(r.receive_messages(max_wait_time=1) == [], "completed message came back")


@test("send batch, receive all")
def _():
    with queue() as q:
        with client.get_queue_sender(q) as s:
            b = s.create_message_batch()
            check(b.max_size_in_bytes > 0, "batch size %d" % b.max_size_in_bytes)
            for i in range(20):
                b.add_message(ServiceBusMessage("m%d" % i))
            s.send_messages(b)
            s.send_messages([ServiceBusMessage("l%d" % i) for i in range(5)])
        with client.get_queue_receiver(q, receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE) as r:
            ms = receive_n(r, 25)
            got = [body(m) for m in ms]
            check(got == ["m%d" % i for i in range(20)] + ["l%d" % i for i in range(5)], "got %r" % got)


@test("abandon, dead-letter, dead-letter queue")
def _():
    with queue() as q:
        with client.get_queue_sender(q) as s:
            s.send_messages(ServiceBusMessage("x"))
        with client.get_queue_receiver(q) as r:
            m = receive_n(r, 1)[0]
            r.abandon_message(m)
            m = receive_n(r, 1)[0]
            check(m.delivery_count == 1, "delivery_count after abandon %d" % m.delivery_count)
            r.dead_letter_message(m, reason="bad", error_description="it was bad")
        with client.get_queue_receiver(q, sub_queue=ServiceBusSubQueue.DEAD_LETTER) as d:
            ms = receive_n(d, 1)
            check(len(ms) == 1 and body(ms[0]) == "x", "dead-letter queue %r" % ms)
            check(ms[0].dead_letter_reason == "bad", "reason %r" % ms[0].dead_letter_reason)
            check(ms[0].dead_letter_error_description == "it was bad", "description %r" % ms[0].dead_letter_error_description)
            check(ms[0].dead_letter_source is None or ms[0].dead_letter_source == q, "source %r" % ms[0].dead_letter_source)
            d.complete_message(ms[0])


@test("defer and receive deferred")
def _():
    with queue() as q:
        with client.get_queue_sender(q) as s:
            s.send_messages([ServiceBusMessage("d1"), ServiceBusMessage("d2")])
        with client.get_queue_receiver(q) as r:
            ms = receive_n(r, 2)
            seqs = [m.sequence_number for m in ms]
            for m in ms:
                r.defer_message(m)
            check(r.receive_messages(max_wait_time=1) == [], "deferred messages are received normally")
            # The SDK peeks from the last sequence number it received unless told.
            peeked = r.peek_messages(max_message_count=5, sequence_number=seqs[0])
            check([p.state.name for p in peeked] == ["DEFERRED", "DEFERRED"], "peek states %r" % [p.state for p in peeked])
            got = r.receive_deferred_messages(seqs)
            check(sorted(body(m) for m in got) == ["d1", "d2"], "deferred %r" % [body(m) for m in got])
            for m in got:
                r.complete_message(m)
        check(admin.get_queue_runtime_properties(q).total_message_count == 0, "queue not empty")


@test("schedule and cancel")
def _():
    with queue() as q:
        with client.get_queue_sender(q) as s:
            now = datetime.datetime.now(datetime.timezone.utc)
            keep = s.schedule_messages(ServiceBusMessage("soon"), now + datetime.timedelta(seconds=2))
            drop = s.schedule_messages([ServiceBusMessage("never")], now + datetime.timedelta(seconds=2))
            check(len(keep) == 1 and len(drop) == 1, "sequence numbers %r %r" % (keep, drop))
            s.cancel_scheduled_messages(drop)
        with client.get_queue_receiver(q) as r:
            peeked = r.peek_messages(max_message_count=5)
            check([p.state.name for p in peeked] == ["SCHEDULED"], "peek %r" % [(body(p), p.state) for p in peeked])
            check(peeked[0].scheduled_enqueue_time_utc is not None, "scheduled_enqueue_time_utc")
            ms = receive_n(r, 2, wait=12)
            check([body(m) for m in ms] == ["soon"], "got %r" % [body(m) for m in ms])
            check(ms[0].enqueued_time_utc >= now + datetime.timedelta(seconds=1), "enqueued before its time")
            r.complete_message(ms[0])


@test("renew message lock, and AutoLockRenewer")
def _():
    with queue(lock_duration=datetime.timedelta(seconds=5)) as q:
        with client.get_queue_sender(q) as s:
            s.send_messages([ServiceBusMessage("a"), ServiceBusMessage("b")])
        with client.get_queue_receiver(q) as r:
            m = receive_n(r, 1)[0]
            before = m.locked_until_utc
            time.sleep(1)  # the renewed lock must end later than the first one, on a 1 s clock
            after = r.renew_message_lock(m)
            check(after > before, "renewed until %r, was %r" % (after, before))
            r.complete_message(m)
            renewer = AutoLockRenewer(max_lock_renewal_duration=30)
            m = receive_n(r, 1)[0]
            renewer.register(r, m)
            time.sleep(7)  # past the 5 s lock: only the renewer keeps it
            r.complete_message(m)
            renewer.close()
            try:
                r.renew_message_lock(m)
                raise AssertionError("renewing a completed message's lock succeeded")
            except (MessageAlreadySettled, MessageLockLostError, ServiceBusError, ValueError):
                pass


@test("receive and delete, peek")
def _():
    with queue() as q:
        with client.get_queue_sender(q) as s:
            s.send_messages([ServiceBusMessage("p%d" % i) for i in range(3)])
        with client.get_queue_receiver(q) as r:
            peeked = r.peek_messages(max_message_count=10)
            check([body(p) for p in peeked] == ["p0", "p1", "p2"], "peek %r" % [body(p) for p in peeked])
            again = r.peek_messages(max_message_count=10, sequence_number=peeked[1].sequence_number)
            check([body(p) for p in again] == ["p1", "p2"], "peek from seq %r" % [body(p) for p in again])
        with client.get_queue_receiver(q, receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE) as r:
            ms = receive_n(r, 3)
            check(len(ms) == 3, "received %d" % len(ms))
            try:
                r.complete_message(ms[0])
                raise AssertionError("complete in receive-and-delete mode succeeded")
            except ValueError:
                pass
        check(admin.get_queue_runtime_properties(q).total_message_count == 0, "queue not empty")


@test("sessions with state, next available session, session lock renewal")
def _():
    with queue(requires_session=True, lock_duration=datetime.timedelta(seconds=10)) as q:
        with client.get_queue_sender(q) as s:
            s.send_messages([ServiceBusMessage("a%d" % i, session_id="A") for i in range(3)])
            s.send_messages(ServiceBusMessage("b0", session_id="B"))
        with client.get_queue_receiver(q, session_id="A") as r:
            ms = receive_n(r, 3)
            check([body(m) for m in ms] == ["a0", "a1", "a2"], "session A %r" % [body(m) for m in ms])
            check(all(m.session_id == "A" for m in ms), "session_id on messages")
            r.session.set_state("step-1")
            check(r.session.get_state() == b"step-1", "state %r" % r.session.get_state())
            before = r.session.locked_until_utc
            time.sleep(1)  # the renewed lock must end later, on a 1 s clock
            after = r.session.renew_lock()
            check(after > before, "session lock renewed until %r, was %r" % (after, before))
            for m in ms:
                r.complete_message(m)
        with client.get_queue_receiver(q, session_id=NEXT_AVAILABLE_SESSION, max_wait_time=5) as r:
            check(r.session.session_id == "B", "next available session %r" % r.session.session_id)
            ms = receive_n(r, 1)
            check([body(m) for m in ms] == ["b0"], "session B %r" % [body(m) for m in ms])
            r.complete_message(ms[0])
        with client.get_queue_receiver(q, session_id="A") as r:
            check(r.session.get_state() == b"step-1", "state after reopening")
            r.session.set_state(None)


@test("topics with SQL and correlation filters and actions")
def _():
    t = name("t")
    admin.create_topic(t)
    try:
        admin.create_subscription(t, "sql")
        admin.create_subscription(t, "corr")
        admin.create_subscription(t, "all")
        admin.delete_rule(t, "sql", "$Default")
        admin.delete_rule(t, "corr", "$Default")
        admin.create_rule(t, "sql", "big", filter=SqlRuleFilter("size > 10 AND color = 'red'"),
                          action=SqlRuleAction("SET category = 'large'"))
        admin.create_rule(t, "corr", "blue", filter=CorrelationRuleFilter(
            correlation_id="cid", subject="lbl", properties={"color": "blue"}))
        with client.get_topic_sender(t) as s:
            s.send_messages([
                ServiceBusMessage("red-big", application_properties={"color": "red", "size": 20}),
                ServiceBusMessage("red-small", application_properties={"color": "red", "size": 5}),
                ServiceBusMessage("blue", application_properties={"color": "blue"}, correlation_id="cid", subject="lbl"),
                ServiceBusMessage("blue-other", application_properties={"color": "blue"}, correlation_id="x", subject="lbl"),
            ])
        with client.get_subscription_receiver(t, "sql", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE) as r:
            ms = receive_n(r, 2, wait=5)
            check([body(m) for m in ms] == ["red-big"], "sql subscription %r" % [body(m) for m in ms])
            check(props(ms[0]).get("category") == "large", "action did not apply: %r" % props(ms[0]))
        with client.get_subscription_receiver(t, "corr", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE) as r:
            ms = receive_n(r, 2, wait=5)
            check([body(m) for m in ms] == ["blue"], "correlation subscription %r" % [body(m) for m in ms])
        with client.get_subscription_receiver(t, "all", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE) as r:
            check(len(receive_n(r, 4)) == 4, "the $Default subscription misses messages")
    finally:
        admin.delete_topic(t)


@test("TTL expiry moves the message to the dead-letter queue")
def _():
    with queue(dead_lettering_on_message_expiration=True) as q:
        with client.get_queue_sender(q) as s:
            s.send_messages(ServiceBusMessage("short", time_to_live=datetime.timedelta(seconds=1)))
            s.send_messages(ServiceBusMessage("long"))
        with client.get_queue_receiver(q, sub_queue=ServiceBusSubQueue.DEAD_LETTER) as d:
            ms = receive_n(d, 1, wait=20)
            check([body(m) for m in ms] == ["short"], "dead-letter queue %r" % [body(m) for m in ms])
            check(ms[0].dead_letter_reason == "TTLExpiredException", "reason %r" % ms[0].dead_letter_reason)
            d.complete_message(ms[0])
        with client.get_queue_receiver(q) as r:
            ms = receive_n(r, 1)
            check([body(m) for m in ms] == ["long"], "queue %r" % [body(m) for m in ms])
            r.complete_message(ms[0])


@test("duplicate detection drops a resent message-id")
def _():
    with queue(requires_duplicate_detection=True,
               duplicate_detection_history_time_window=datetime.timedelta(minutes=1)) as q:
        with client.get_queue_sender(q) as s:
            s.send_messages(ServiceBusMessage("one", message_id="dup-1"))
            s.send_messages(ServiceBusMessage("again", message_id="dup-1"))
            s.send_messages(ServiceBusMessage("two", message_id="dup-2"))
        with client.get_queue_receiver(q, receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE) as r:
            ms = receive_n(r, 3, wait=5)
            check([body(m) for m in ms] == ["one", "two"], "got %r" % [body(m) for m in ms])


@test("max delivery count dead-letters the message")
def _():
    with queue(max_delivery_count=2) as q:
        with client.get_queue_sender(q) as s:
            s.send_messages(ServiceBusMessage("poison"))
        with client.get_queue_receiver(q) as r:
            for _ in range(2):
                r.abandon_message(receive_n(r, 1)[0])
            check(r.receive_messages(max_wait_time=1) == [], "message still in the queue")
        with client.get_queue_receiver(q, sub_queue=ServiceBusSubQueue.DEAD_LETTER) as d:
            ms = receive_n(d, 1)
            check(len(ms) == 1 and ms[0].dead_letter_reason == "MaxDeliveryCountExceeded",
                  "dead-letter %r" % [(body(m), m.dead_letter_reason) for m in ms])
            d.complete_message(ms[0])


@test("every message property round-trips, application property types included")
def _():
    with queue(requires_session=True) as q:
        now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
        # uamqp sends bytes as an AMQP string (cut at the first NUL byte) and hands strings
        # back as bytes; a datetime goes as an AMQP timestamp and comes back as milliseconds.
        app = {"s": "text", "i": 42, "neg": -7, "big": 2**40, "f": 1.5, "yes": True, "no": False,
               "b": b"\x01\x02", "u": "h\u00e9"}
        stamp = datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
        sent = ServiceBusMessage(
            "payload", application_properties=dict(app, when=stamp), session_id="S", message_id="mid-1",
            content_type="application/json", correlation_id="corr-1", subject="subj", to="dest",
            reply_to="reply-q", reply_to_session_id="reply-s", time_to_live=datetime.timedelta(minutes=5),
            partition_key="S")
        with client.get_queue_sender(q) as s:
            s.send_messages(sent)
        with client.get_queue_receiver(q, session_id="S") as r:
            m = receive_n(r, 1)[0]
            got = {
                "body": body(m), "session_id": m.session_id, "message_id": m.message_id,
                "content_type": m.content_type, "correlation_id": m.correlation_id, "subject": m.subject,
                "to": m.to, "reply_to": m.reply_to, "reply_to_session_id": m.reply_to_session_id,
                "time_to_live": m.time_to_live, "partition_key": m.partition_key,
            }
            want = {
                "body": "payload", "session_id": "S", "message_id": "mid-1", "content_type": "application/json",
                "correlation_id": "corr-1", "subject": "subj", "to": "dest", "reply_to": "reply-q",
                "reply_to_session_id": "reply-s", "time_to_live": datetime.timedelta(minutes=5), "partition_key": "S",
            }
            check(got == want, "properties\n got %r\nwant %r" % (got, want))
            ap = {text(k): v for k, v in m.application_properties.items()}
            for k, v in app.items():
                g = ap.get(k)
                if isinstance(v, str):
                    g = text(g)
                check(type(g) is type(v) and g == v, "application property %s: got %r (%s), want %r (%s)"
                      % (k, g, type(g).__name__, v, type(v).__name__))
            check(ap.get("when") == int(stamp.timestamp() * 1000), "timestamp property %r" % ap.get("when"))
            check(m.enqueued_time_utc >= now - datetime.timedelta(seconds=5), "enqueued_time_utc %r" % m.enqueued_time_utc)
            check(m.expires_at_utc == m.enqueued_time_utc + datetime.timedelta(minutes=5), "expires_at_utc")
            r.complete_message(m)


@test("limited-rights keys are refused with an authorization error")
def _():
    send_only = os.environ.get("QB_CONN_SEND_ONLY")
    check(send_only, "QB_CONN_SEND_ONLY is not set")
    with queue() as q:
        c = ServiceBusClient.from_connection_string(without_port(send_only), connection_verify=CA, retry_total=0)
        with c:
            with c.get_queue_sender(q) as s:
                s.send_messages(ServiceBusMessage("allowed"))
            try:
                with c.get_queue_receiver(q, max_wait_time=2) as r:
                    r.receive_messages(max_wait_time=2)
                raise AssertionError("a Send-only key received")
            except ServiceBusError as e:
                check(type(e).__name__ == "ServiceBusAuthorizationError", "refusal %s: %s" % (type(e).__name__, e))


@test("AMQP over WebSockets")
def _():
    check(WS_ENDPOINT, "QB_WS_ENDPOINT is not set")
    with queue() as q:
        c = ServiceBusClient.from_connection_string(DATA_CONN, connection_verify=CA, retry_total=2,
                                                    transport_type=TransportType.AmqpOverWebsocket,
                                                    custom_endpoint_address=WS_ENDPOINT)
        with c:
            with c.get_queue_sender(q) as s:
                s.send_messages(ServiceBusMessage("over websockets"))
                s.send_messages(ServiceBusMessage("x" * 200 * 1024))
            with c.get_queue_receiver(q) as r:
                ms = receive_n(r, 2)
                check([len(body(m)) for m in ms] == [15, 200 * 1024], "got %r" % [len(body(m)) for m in ms])
                for m in ms:
                    r.complete_message(m)


@test("large message (200 KB)")
def _():
    with queue() as q:
        big = "0123456789abcdef" * (200 * 1024 // 16)
        with client.get_queue_sender(q) as s:
            s.send_messages(ServiceBusMessage(big))
        with client.get_queue_receiver(q, receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE) as r:
            ms = receive_n(r, 1)
            check(len(ms) == 1 and body(ms[0]) == big, "large message did not round-trip")


class Timeout(Exception):
    pass


def on_alarm(signum, frame):
    raise Timeout("timed out after %d s" % TEST_TIMEOUT)


def main():
    signal.signal(signal.SIGALRM, on_alarm)
    passed = failed = 0
    for n, fn in tests:
        if ONLY and not ONLY.search(n):
            continue
        start = time.monotonic()
        signal.alarm(TEST_TIMEOUT)
        try:
            fn()
            signal.alarm(0)
            passed += 1
            print("PASS %.2fs  %s" % (time.monotonic() - start, n), flush=True)
        except BaseException as e:  # noqa: B036 - Timeout, assertion or SDK error: the test failed
            signal.alarm(0)
            if isinstance(e, KeyboardInterrupt):
                raise
            failed += 1
            print("FAIL %.2fs  %s  -- %s: %s" % (time.monotonic() - start, n, type(e).__name__, e), flush=True)
            if os.environ.get("QB_TRACE"):
                traceback.print_exc()
    try:
        client.close()
    except Exception:
        pass
    print("python: %d passed, %d failed" % (passed, failed), flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
