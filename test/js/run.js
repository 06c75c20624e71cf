// Runs what a JavaScript user of the official @azure/service-bus SDK (7.9.5,
// unmodified) does against a Quorumbus node, and what only the 7.10.0-beta.2 release
// offers (installed beside it as service-bus-beta: deleteMessages, purgeMessages,
// peekMessages with omitMessageBody; the tests named "beta: ..."). make conformance runs it (QB_SKIP_GO=1
// QB_PHASES=single for this runner alone). By hand, install it outside the repository
// (whose checks read every .md file under test/, node_modules included):
//
//   d=$(mktemp -d); cp package.json package-lock.json run.js $d; cd $d; npm ci
//   QB_CONN='Endpoint=sb://127.0.0.1:5672;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=KEY;UseDevelopmentEmulator=true' \
//   QB_ADMIN_URL=http://127.0.0.1:5300 node run.js [name-regex]
//
// QB_CONN_SEND_ONLY and QB_CONN_LISTEN_ONLY (limited-rights keys) are needed by one test.
//
// The last line is "N passed, M failed"; the exit status is 1 when a check failed.
"use strict";

const {
  ServiceBusClient,
  ServiceBusAdministrationClient,
  isServiceBusError,
} = require("@azure/service-bus");

// The beta release (package.json: "service-bus-beta": "npm:@azure/service-bus@7.10.0-beta.2").
const beta = require("service-bus-beta");

const conn = process.env.QB_CONN;
const adminURL = process.env.QB_ADMIN_URL;
if (!conn || !adminURL) {
  console.error("set QB_CONN and QB_ADMIN_URL");
  process.exit(2);
}
const only = process.argv[2] ? new RegExp(process.argv[2]) : null;
const run = Date.now().toString(36);
const name = (p) => `js-${p}-${run}`;

// The administration client always addresses https://<Endpoint host>/<path>, and its
// constructor ignores additionalPolicies. To reach a plain-http admin port, add a policy
// to its pipeline that rewrites scheme and host and allows the insecure connection; the
// SAS token is signed for the original URL, which Quorumbus accepts (it authorizes by
// path). See docs/compatibility.md.
function rewriteToAdminPort(base) {
  const target = new URL(base);
  return {
    name: "quorumbusAdminPort",
    sendRequest(request, next) {
      const u = new URL(request.url);
      u.protocol = target.protocol;
      u.host = target.host;
      request.url = u.toString();
      request.allowInsecureConnection = target.protocol === "http:";
      return next(request);
    },
  };
}

const client = new ServiceBusClient(conn, { retryOptions: { maxRetries: 2, timeoutInMs: 20000 } });
const betaClient = new beta.ServiceBusClient(conn, { retryOptions: { maxRetries: 2, timeoutInMs: 20000 } });
const admin = new ServiceBusAdministrationClient(conn);
admin.pipeline.addPolicy(rewriteToAdminPort(adminURL), { afterPhase: "Sign" });

function check(cond, msg) {
  if (!cond) throw new Error(msg);
}

async function receiveN(receiver, n, waitMs = 10000) {
  const out = [];
  const deadline = Date.now() + waitMs;
  while (out.length < n && Date.now() < deadline) {
    const ms = await receiver.receiveMessages(n - out.length, { maxWaitTimeInMs: 2000 });
    out.push(...ms);
  }
  return out;
}

async function withQueue(props, fn) {
  const q = name("q" + Math.random().toString(36).slice(2, 7));
  await admin.createQueue(q, props);
  try {
    await fn(q);
  } finally {
    await admin.deleteQueue(q).catch(() => {});
  }
}

const tests = [];
const test = (n, fn) => tests.push({ n, fn });

test("admin: queue create, get, update, list, exists, runtime, delete", async () => {
  const q = name("admin");
  const created = await admin.createQueue(q, { lockDuration: "PT45S", maxDeliveryCount: 7 });
  check(created.name === q && created.lockDuration === "PT45S" && created.maxDeliveryCount === 7, `create: ${JSON.stringify(created)}`);
  const got = await admin.getQueue(q);
  check(got.name === q, `get name ${got.name}`);
  got.maxDeliveryCount = 3;
  const upd = await admin.updateQueue(got);
  check(upd.maxDeliveryCount === 3, `update: ${upd.maxDeliveryCount}`);
  const names = [];
  for await (const item of admin.listQueues()) names.push(item.name);
  check(names.includes(q), `list names: ${names.join(",")}`);
  check(await admin.queueExists(q), "queueExists");
  const rt = await admin.getQueueRuntimeProperties(q);
  check(rt.name === q && rt.activeMessageCount === 0, `runtime: ${JSON.stringify(rt)}`);
  await admin.deleteQueue(q);
  check(!(await admin.queueExists(q)), "exists after delete");
});

test("admin: topic, subscription, rules, namespace, runtime properties", async () => {
  const t = name("admint");
  await admin.createTopic(t, { maxSizeInMegabytes: 2048 });
  try {
    check(await admin.topicExists(t), "topicExists");
    const ns = await admin.getNamespaceProperties();
    check(ns.name && ns.messagingSku === "Standard", `namespace: ${JSON.stringify(ns)}`);
    const sub = await admin.createSubscription(t, "s1", { maxDeliveryCount: 4, lockDuration: "PT30S" });
    check(sub.subscriptionName === "s1" && sub.topicName === t && sub.maxDeliveryCount === 4, `sub: ${JSON.stringify(sub)}`);
    sub.maxDeliveryCount = 6;
    check((await admin.updateSubscription(sub)).maxDeliveryCount === 6, "updateSubscription");
    await admin.createRule(t, "s1", "r1", { sqlExpression: `name = 'o''brien'` }, { sqlExpression: `SET seen = "yes"` });
    const rules = [];
    for await (const r of admin.listRules(t, "s1")) rules.push(r.name);
    check(rules.sort().join() === "$Default,r1", `rules: ${rules}`);
    const r1 = await admin.getRule(t, "s1", "r1");
    check(r1.filter.sqlExpression === `name = 'o''brien'` && r1.action.sqlExpression === `SET seen = "yes"`,
      `rule read back: ${JSON.stringify(r1)}`);
    const s = client.createSender(t);
    await s.scheduleMessages({ body: "later" }, new Date(Date.now() + 3600_000));
    await s.close();
    const trt = await admin.getTopicRuntimeProperties(t);
    check(trt.subscriptionCount === 1 && trt.scheduledMessageCount === 1, `topic runtime: ${JSON.stringify(trt)}`);
    const srt = await admin.getSubscriptionRuntimeProperties(t, "s1");
    check(srt.subscriptionName === "s1" && srt.activeMessageCount === 0, `subscription runtime: ${JSON.stringify(srt)}`);
    const topics = [];
    for await (const x of admin.listTopics()) topics.push(x.name);
    check(topics.includes(t), `listTopics: ${topics}`);
    await admin.deleteSubscription(t, "s1");
    check(!(await admin.subscriptionExists(t, "s1")), "subscription exists after delete");
  } finally {
    await admin.deleteTopic(t).catch(() => {});
  }
});

test("limited-rights keys are refused with UnauthorizedAccess", async () => {
  const listenOnly = process.env.QB_CONN_LISTEN_ONLY;
  const sendOnly = process.env.QB_CONN_SEND_ONLY;
  if (!listenOnly || !sendOnly) throw new Error("set QB_CONN_LISTEN_ONLY and QB_CONN_SEND_ONLY");
  await withQueue({}, async (q) => {
    const lc = new ServiceBusClient(listenOnly, { retryOptions: { maxRetries: 0 } });
    const sc = new ServiceBusClient(sendOnly, { retryOptions: { maxRetries: 0 } });
    try {
      let err = null;
      try {
        await lc.createSender(q).sendMessages({ body: "x" });
      } catch (e) {
        err = e;
      }
      check(err && err.code === "UnauthorizedAccess", `send with a Listen key: ${err && err.code} ${err && err.message}`);
      await sc.createSender(q).sendMessages({ body: "ok" });
      const got = await lc.createReceiver(q, { receiveMode: "receiveAndDelete" }).receiveMessages(1, { maxWaitTimeInMs: 5000 });
      check(got.length === 1 && got[0].body === "ok", "receive with a Listen key");
    } finally {
      await lc.close();
      await sc.close();
    }
  });
});

test("send single, peek-lock receive, complete", async () => {
  await withQueue({}, async (q) => {
    const s = client.createSender(q);
    await s.sendMessages({ body: "hello", messageId: "m1", subject: "greet", applicationProperties: { n: 1, s: "x" } });
    const r = client.createReceiver(q);
    const [m] = await receiveN(r, 1);
    check(m && m.body === "hello" && m.messageId === "m1" && m.subject === "greet", `got ${JSON.stringify(m && m.body)}`);
    check(m.applicationProperties.n === 1 && m.applicationProperties.s === "x", "application properties");
    // The JS SDK shows the AMQP header's delivery-count (previous attempts): 0 on the
    // first delivery, where the Go and .NET SDKs show 1. Azure behaves the same.
    check(m.deliveryCount === 0 && m.sequenceNumber !== undefined && m.lockToken, `broker fields: dc=${m.deliveryCount}`);
    await r.completeMessage(m);
    check((await r.peekMessages(1)).length === 0, "queue empty after complete");
    await r.close();
    await s.close();
  });
});

test("send batch, receive all", async () => {
  await withQueue({}, async (q) => {
    const s = client.createSender(q);
    const batch = await s.createMessageBatch();
    for (let i = 0; i < 10; i++) check(batch.tryAddMessage({ body: `b${i}` }), "tryAddMessage");
    await s.sendMessages(batch);
    await s.sendMessages([{ body: "arr1" }, { body: "arr2" }]);
    const r = client.createReceiver(q, { receiveMode: "receiveAndDelete" });
    const got = await receiveN(r, 12);
    check(got.length === 12, `received ${got.length} of 12`);
    check(got[0].body === "b0" && got[11].body === "arr2", "order");
    await r.close();
    await s.close();
  });
});

test("abandon, dead-letter, dead-letter queue", async () => {
  await withQueue({}, async (q) => {
    const s = client.createSender(q);
    await s.sendMessages({ body: "x" });
    const r = client.createReceiver(q);
    let [m] = await receiveN(r, 1);
    await r.abandonMessage(m, { hello: "world" });
    [m] = await receiveN(r, 1);
    check(m.deliveryCount === 1 && m.applicationProperties.hello === "world", `after abandon: dc=${m.deliveryCount}`);
    await r.deadLetterMessage(m, { deadLetterReason: "why", deadLetterErrorDescription: "because" });
    const d = client.createReceiver(q, { subQueueType: "deadLetter" });
    const [dm] = await receiveN(d, 1);
    check(dm && dm.deadLetterReason === "why" && dm.deadLetterErrorDescription === "because", `dlq: ${dm && dm.deadLetterReason}`);
    check(dm.deliveryCount === 1, `dlq delivery count ${dm.deliveryCount}`);
    await d.completeMessage(dm);
    await d.close();
    await r.close();
    await s.close();
  });
});

test("defer and receive deferred", async () => {
  await withQueue({}, async (q) => {
    const s = client.createSender(q);
    await s.sendMessages({ body: "later" });
    const r = client.createReceiver(q);
    const [m] = await receiveN(r, 1);
    await r.deferMessage(m);
    check((await r.receiveMessages(1, { maxWaitTimeInMs: 1000 })).length === 0, "deferred message received normally");
    const [dm] = await r.receiveDeferredMessages(m.sequenceNumber);
    check(dm && dm.body === "later", "receiveDeferredMessages");
    await r.completeMessage(dm);
    let notFound = null;
    try {
      await r.receiveDeferredMessages(m.sequenceNumber);
    } catch (e) {
      notFound = e;
    }
    check(notFound === null || (isServiceBusError(notFound) && notFound.code === "MessageNotFound"),
      `receive of a completed deferred message: ${notFound && notFound.code}`);
    await r.close();
    await s.close();
  });
});

test("schedule and cancel", async () => {
  await withQueue({}, async (q) => {
    const s = client.createSender(q);
    const at = new Date(Date.now() + 3600_000);
    const [seq1, seq2] = await s.scheduleMessages([{ body: "s1" }, { body: "s2" }], at);
    const r = client.createReceiver(q);
    const peeked = await r.peekMessages(10);
    check(peeked.length === 2 && peeked[0].state === "scheduled", `peek scheduled: ${peeked.length} ${peeked[0] && peeked[0].state}`);
    await s.cancelScheduledMessages([seq1, seq2]);
    check((await r.peekMessages(10, { fromSequenceNumber: seq1 })).length === 0, "cancelled messages still there");
    const soon = new Date(Date.now() + 1500);
    await s.scheduleMessages({ body: "soon" }, soon);
    const [m] = await receiveN(r, 1, 15000);
    check(m && m.body === "soon", "scheduled message arrives");
    await r.completeMessage(m);
    await r.close();
    await s.close();
  });
});

test("renew message lock", async () => {
  await withQueue({ lockDuration: "PT10S" }, async (q) => {
    const s = client.createSender(q);
    await s.sendMessages({ body: "x" });
    const r = client.createReceiver(q);
    const [m] = await receiveN(r, 1);
    const before = m.lockedUntilUtc.getTime();
    await new Promise((res) => setTimeout(res, 1100));
    const until = await r.renewMessageLock(m);
    check(until.getTime() > before, `renewed until ${until.toISOString()} (was ${new Date(before).toISOString()})`);
    await r.completeMessage(m);
    await r.close();
    await s.close();
  });
});

test("receive and delete, peek", async () => {
  await withQueue({}, async (q) => {
    const s = client.createSender(q);
    await s.sendMessages([{ body: "1" }, { body: "2" }, { body: "3" }]);
    const r = client.createReceiver(q, { receiveMode: "receiveAndDelete" });
    const p = await r.peekMessages(3);
    check(p.length === 3 && p[0].body === "1", `peek ${p.length}`);
    const got = await receiveN(r, 3);
    check(got.length === 3, `received ${got.length}`);
    check((await r.peekMessages(3)).length === 0, "messages left after receive-and-delete");
    await r.close();
    await s.close();
  });
});

test("sessions with state", async () => {
  await withQueue({ requiresSession: true }, async (q) => {
    const s = client.createSender(q);
    await s.sendMessages([{ body: "a1", sessionId: "a" }, { body: "b1", sessionId: "b" }, { body: "a2", sessionId: "a" }]);
    const ra = await client.acceptSession(q, "a");
    check(ra.sessionId === "a", `session id ${ra.sessionId}`);
    const got = await receiveN(ra, 2);
    check(got.map((m) => m.body).join() === "a1,a2", `session a: ${got.map((m) => m.body)}`);
    for (const m of got) await ra.completeMessage(m);
    await ra.setSessionState("state-a");
    check(String(await ra.getSessionState()) === "state-a", "session state");
    await ra.renewSessionLock();
    await ra.close();
    const rn = await client.acceptNextSession(q);
    check(rn.sessionId === "b", `next session ${rn.sessionId}`);
    const [b] = await receiveN(rn, 1);
    await rn.completeMessage(b);
    await rn.close();
    let locked = null;
    const again = await client.acceptSession(q, "a");
    try {
      await client.acceptSession(q, "a");
    } catch (e) {
      locked = e;
    }
    check(locked && locked.code === "SessionCannotBeLocked", `second accept: ${locked && locked.code}`);
    await again.close();
    await s.close();
  });
});

test("topics with SQL and correlation rules", async () => {
  const t = name("topic");
  await admin.createTopic(t);
  try {
    await admin.createSubscription(t, "red");
    await admin.deleteRule(t, "red", "$Default");
    await admin.createRule(t, "red", "sql", { sqlExpression: "color = 'red' AND n > 1" });
    const rule = await admin.getRule(t, "red", "sql");
    check(rule.filter.sqlExpression === "color = 'red' AND n > 1", `SQL read back: ${rule.filter.sqlExpression}`);
    await admin.createSubscription(t, "corr");
    await admin.deleteRule(t, "corr", "$Default");
    await admin.createRule(t, "corr", "c", { correlationId: "cid", applicationProperties: { kind: "k" } });
    const subs = [];
    for await (const sub of admin.listSubscriptions(t)) subs.push(sub.subscriptionName);
    check(subs.sort().join() === "corr,red", `subscriptions: ${subs}`);
    const s = client.createSender(t);
    await s.sendMessages([
      { body: "r2", applicationProperties: { color: "red", n: 2 } },
      { body: "r1", applicationProperties: { color: "red", n: 1 } },
      { body: "c", correlationId: "cid", applicationProperties: { kind: "k" } },
      { body: "none", applicationProperties: { color: "blue" } },
    ]);
    const rr = client.createReceiver(t, "red", { receiveMode: "receiveAndDelete" });
    const red = await receiveN(rr, 1);
    check(red.length === 1 && red[0].body === "r2", `red got ${red.map((m) => m.body)}`);
    const rc = client.createReceiver(t, "corr", { receiveMode: "receiveAndDelete" });
    const corr = await receiveN(rc, 1);
    check(corr.length === 1 && corr[0].body === "c", `corr got ${corr.map((m) => m.body)}`);
    check((await rr.receiveMessages(1, { maxWaitTimeInMs: 1000 })).length === 0, "extra message on red");
    await rr.close();
    await rc.close();
    await s.close();
  } finally {
    await admin.deleteTopic(t).catch(() => {});
  }
});

test("rule manager: createRule, listRules, deleteRule over AMQP", async () => {
  const t = name("rulemgr");
  await admin.createTopic(t);
  try {
    await admin.createSubscription(t, "s");
    const rm = client.createRuleManager(t, "s");
    await rm.deleteRule("$Default");
    await rm.createRule("sql", { sqlExpression: "color = 'red'" }, { sqlExpression: "SET seen = 'yes'" });
    await rm.createRule("corr", { correlationId: "cid", subject: "lbl", applicationProperties: { kind: "k" } });
    await rm.createRule("all", { sqlExpression: "1=1" });
    let dup;
    try {
      await rm.createRule("sql", { sqlExpression: "1=1" });
    } catch (e) {
      dup = e;
    }
    check(dup && dup.code === "MessagingEntityAlreadyExists", `duplicate rule: ${dup && dup.code} ${dup && dup.message}`);
    const rules = [];
    for await (const r of rm.listRules()) rules.push(r);
    check(rules.map((r) => r.name).join() === "sql,corr,all", `listRules: ${rules.map((r) => r.name)}`);
    check(rules[0].filter.sqlExpression === "color = 'red'" && rules[0].action.sqlExpression === "SET seen = 'yes'",
      `sql rule: ${JSON.stringify(rules[0])}`);
    check(rules[1].filter.correlationId === "cid" && rules[1].filter.subject === "lbl" &&
      rules[1].filter.applicationProperties.kind === "k", `correlation rule: ${JSON.stringify(rules[1])}`);
    check(rules[2].filter.sqlExpression === "1=1", `true rule: ${JSON.stringify(rules[2])}`);
    const viaAdmin = await admin.getRule(t, "s", "corr");
    check(viaAdmin.filter.correlationId === "cid", `admin sees: ${JSON.stringify(viaAdmin)}`);
    await rm.deleteRule("all");
    await rm.deleteRule("corr");
    let missing;
    try {
      await rm.deleteRule("corr");
    } catch (e) {
      missing = e;
    }
    check(missing && missing.code === "MessagingEntityNotFound", `delete missing rule: ${missing && missing.code} ${missing && missing.message}`);
    const s = client.createSender(t);
    await s.sendMessages([
      { body: "blue", applicationProperties: { color: "blue" } },
      { body: "red", applicationProperties: { color: "red" } },
    ]);
    const r = client.createReceiver(t, "s", { receiveMode: "receiveAndDelete" });
    const got = await receiveN(r, 1);
    check(got.length === 1 && got[0].body === "red" && got[0].applicationProperties.seen === "yes",
      `filtered by the AMQP rule: ${JSON.stringify(got.map((m) => [m.body, m.applicationProperties]))}`);
    await r.close();
    await s.close();
  } finally {
    await admin.deleteTopic(t).catch(() => {});
  }
});

test("subscribe() streaming receive", async () => {
  await withQueue({}, async (q) => {
    const s = client.createSender(q);
    await s.sendMessages([...Array(20).keys()].map((i) => ({ body: `m${i}` })));
    const r = client.createReceiver(q);
    const seen = [];
    const errors = [];
    await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`subscribe got ${seen.length} of 20`)), 20000);
      const sub = r.subscribe({
        async processMessage(m) {
          seen.push(m.body);
          if (seen.length === 20) {
            clearTimeout(timer);
            sub.close().then(resolve, reject);
          }
        },
        async processError(args) {
          errors.push(args.error);
        },
      });
    });
    check(errors.length === 0, `processError: ${errors.map((e) => e.message)}`);
    await r.close();
    await s.close();
  });
});

test("large message (200 KB)", async () => {
  await withQueue({}, async (q) => {
    const s = client.createSender(q);
    const body = Buffer.alloc(200 * 1024, 7);
    await s.sendMessages({ body });
    const r = client.createReceiver(q, { receiveMode: "receiveAndDelete" });
    const [m] = await receiveN(r, 1);
    check(m && Buffer.isBuffer(m.body) && m.body.length === body.length && m.body[1000] === 7, "large body round trip");
    let tooBig = null;
    try {
      await s.sendMessages({ body: Buffer.alloc(300 * 1024) });
    } catch (e) {
      tooBig = e;
    }
    check(tooBig !== null, "a 300 KB message was accepted by a 256 KB queue");
    await r.close();
    await s.close();
  });
});

test("settling a lost lock is MessageLockLost", async () => {
  await withQueue({}, async (q) => {
    const s = client.createSender(q);
    await s.sendMessages({ body: "x" });
    const r = client.createReceiver(q);
    const [m] = await receiveN(r, 1);
    await r.completeMessage(m);
    let err = null;
    try {
      await r.renewMessageLock(m);
    } catch (e) {
      err = e;
    }
    check(err && err.code === "MessageLockLost", `renew after complete: ${err && err.code} ${err && err.message}`);
    await r.close();
    await s.close();
  });
});

// sendMany sends n small messages (bodies m0..m<n-1>) in as few batches as fit.
async function sendMany(sender, n, props = {}) {
  let batch = await sender.createMessageBatch();
  for (let i = 0; i < n; i++) {
    const m = { body: `m${i}`, ...props };
    if (!batch.tryAddMessage(m)) {
      await sender.sendMessages(batch);
      batch = await sender.createMessageBatch();
      check(batch.tryAddMessage(m), "tryAddMessage into an empty batch");
    }
  }
  if (batch.count > 0) await sender.sendMessages(batch);
}

// S-DEL-1..3 through the beta SDK, on a plain and a partitioned queue: deleteMessages
// removes up to maxMessageCount in sequence order and answers how many; purgeMessages
// (batches of 500 until one is short) empties the queue but for the locked message,
// whose lock still completes it; a cutoff before the messages deletes none.
for (const partitioned of [false, true]) {
  test(`beta: deleteMessages and purgeMessages${partitioned ? " (partitioned)" : ""}`, async () => {
    await withQueue({ enablePartitioning: partitioned }, async (q) => {
      const s = client.createSender(q);
      const total = 1105;
      await sendMany(s, total);
      const r = betaClient.createReceiver(q);
      const [locked] = await receiveN(r, 1);
      check(locked, "receive one to lock it");
      const none = await r.deleteMessages({ maxMessageCount: 10, beforeEnqueueTime: new Date(Date.now() - 3600_000) });
      check(none === 0, `delete before the first message: ${none}`);
      const n = await r.deleteMessages({ maxMessageCount: 10 });
      check(n === 10, `deleteMessages(10) deleted ${n}`);
      const purged = await r.purgeMessages();
      check(purged === total - 11, `purgeMessages deleted ${purged}, want ${total - 11}`);
      const left = await r.peekMessages(10);
      check(left.length === 1 && left[0].sequenceNumber.equals(locked.sequenceNumber),
        `left ${left.length} messages, want only the locked one`);
      await r.completeMessage(locked);
      await r.close();
      await s.close();
    });
  });
}

// S-DEL-4: a session receiver's deleteMessages and purgeMessages send its session id and
// delete that session's messages only.
test("beta: session receiver deleteMessages and purgeMessages", async () => {
  await withQueue({ requiresSession: true }, async (q) => {
    const s = client.createSender(q);
    await s.sendMessages([1, 2, 3, 4].map((i) => ({ body: `a${i}`, sessionId: "a" })));
    await s.sendMessages([1, 2].map((i) => ({ body: `b${i}`, sessionId: "b" })));
    const ra = await betaClient.acceptSession(q, "a");
    const one = await ra.deleteMessages({ maxMessageCount: 1 });
    check(one === 1, `session deleteMessages(1) deleted ${one}`);
    const rest = await ra.purgeMessages();
    check(rest === 3, `session purgeMessages deleted ${rest}, want 3`);
    check((await ra.peekMessages(10)).length === 0, "session a empty");
    await ra.close();
    const rb = await betaClient.acceptSession(q, "b");
    const left = await rb.peekMessages(10);
    check(left.map((m) => m.body).join() === "b1,b2", `session b: ${left.map((m) => m.body)}`);
    await rb.close();
    await s.close();
  });
});

// peekMessages with omitMessageBody (the beta's experimental option): properties,
// application properties and sequence numbers, no body; by session too.
test("beta: peekMessages with omitMessageBody", async () => {
  await withQueue({ requiresSession: true }, async (q) => {
    const s = client.createSender(q);
    await s.sendMessages({ body: "secret", sessionId: "s", subject: "subj", applicationProperties: { k: "v" } });
    const r = await betaClient.acceptSession(q, "s");
    const [p] = await r.peekMessages(5, { omitMessageBody: true });
    check(p && p.body === undefined && p.subject === "subj" && p.applicationProperties.k === "v" && p.sequenceNumber !== undefined,
      `peeked without body: ${JSON.stringify(p && { body: p.body, subject: p.subject })}`);
    // (peek without fromSequenceNumber goes on after the last message peeked)
    const [full] = await r.peekMessages(5, { fromSequenceNumber: p.sequenceNumber });
    check(full && full.body === "secret", `peeked with body: ${full && full.body}`);
    await r.close();
    await s.close();
  });
  await withQueue({}, async (q) => {
    const s = client.createSender(q);
    await s.sendMessages({ body: "secret", messageId: "m1" });
    const r = betaClient.createReceiver(q);
    const [p] = await r.peekMessages(5, { omitMessageBody: true });
    check(p && p.body === undefined && p.messageId === "m1", `peeked without body: ${JSON.stringify(p && p.body)}`);
    await r.close();
    await s.close();
  });
});

(async () => {
  let passed = 0;
  let failed = 0;
  for (const t of tests) {
    if (only && !only.test(t.n)) continue;
    const start = Date.now();
    try {
      await Promise.race([
        t.fn(),
        new Promise((_, rej) => setTimeout(() => rej(new Error("timed out after 60 s")), 60000).unref()),
      ]);
      passed++;
      console.log(`PASS ${((Date.now() - start) / 1000).toFixed(2)}s  ${t.n}`);
    } catch (e) {
      failed++;
      console.log(`FAIL ${((Date.now() - start) / 1000).toFixed(2)}s  ${t.n}  -- ${e && (e.code ? e.code + ": " : "")}${e && e.message}`);
    }
  }
  await client.close().catch(() => {});
  await betaClient.close().catch(() => {});
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed > 0 ? 1 : 0);
})();
