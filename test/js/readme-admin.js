// The README quick start's JavaScript admin snippet, as a user runs it: the
// administration client from the TLS connection string the node prints, trusting the
// node's CA through NODE_EXTRA_CA_CERTS. make conformance runs it against the node that
// serves TLS (test/conformance/run.sh, Python phase):
//
//   NODE_EXTRA_CA_CERTS=<data>/tls/ca.crt QB_CONN='Endpoint=sb://localhost:5671/;...' node readme-admin.js
//
// Prints "js readme admin: ok" or the error, and exits non-zero on failure.
"use strict";
const { ServiceBusAdministrationClient } = require("@azure/service-bus");

(async () => {
  // --- README snippet ---
  const admin = new ServiceBusAdministrationClient(process.env.QB_CONN);
  await admin.createQueue("orders");
  // --- end ---
  const q = await admin.getQueue("orders");
  if (q.name !== "orders") throw new Error(`getQueue: ${q.name}`);
  await admin.deleteQueue("orders");
  console.log("js readme admin: ok");
})().catch((e) => {
  console.log(`js readme admin: FAIL ${e && (e.code ? e.code + ": " : "")}${e && e.message}`);
  process.exit(1);
});
