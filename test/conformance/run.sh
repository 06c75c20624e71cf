#!/usr/bin/env bash
# make conformance: builds Quorumbus, starts a fresh single node on loopback ports,
# creates limited-rights keys (Send+Listen, Send, Listen) through the admin API's /$keys,
# then runs the Azure SDK for Go's own live tests (../shared/sdk-livetests, or
# $QB_SDK_LIVETESTS) and the JavaScript SDK runner (test/js). Stops everything it
# started, also on failure. Exit status: 0 when both passed, 1 otherwise.
#
# Environment: QB_SDK_LIVETESTS (path of sdk-livetests), QB_PORT_BASE (default 25000:
# AMQP +672, admin +300, cluster +400), QB_RUN (passed to run.sh), QB_SKIP_GO=1,
# QB_SKIP_JS=1, QB_TIMEOUT (whole Go suite, default 12m).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
LIVETESTS=${QB_SDK_LIVETESTS:-$ROOT/../shared/sdk-livetests}
BASE=${QB_PORT_BASE:-25000}
AMQP=127.0.0.1:$((BASE + 672))
ADMIN=127.0.0.1:$((BASE + 300))
CLUSTER=127.0.0.1:$((BASE + 400))
KEY=conformance-root-key
WORK=$(mktemp -d "${TMPDIR:-/tmp}/qb-conformance.XXXXXX")
NODE_PID=

cleanup() {
  if [[ -n "$NODE_PID" ]] && kill -0 "$NODE_PID" 2>/dev/null; then
    kill -TERM "$NODE_PID" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$NODE_PID" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$NODE_PID" 2>/dev/null || true
  fi
  if [[ -s "$WORK/node.log" ]]; then
    echo "conformance: node log (warnings and errors):"
    grep -E 'level=(WARN|ERROR)' "$WORK/node.log" | tail -n 40 || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [[ "${QB_SKIP_GO:-}" != 1 && ! -x "$LIVETESTS/run.sh" ]]; then
  echo "conformance: $LIVETESTS/run.sh not found; set QB_SDK_LIVETESTS (or QB_SKIP_GO=1)"
  exit 1
fi
cd "$ROOT"
go build -o "$WORK/bin/" ./cmd/quorumbus
"$WORK/bin/quorumbus" --data "$WORK/data" --amqp-addr "$AMQP" --admin-addr "$ADMIN" \
  --cluster-addr "$CLUSTER" --sas-key "$KEY" >"$WORK/node.log" 2>&1 &
NODE_PID=$!
for _ in $(seq 1 100); do
  node -e 'fetch(process.argv[1]).then(r => process.exit(r.ok ? 0 : 1), () => process.exit(1))' "http://$ADMIN/readyz" && break
  kill -0 "$NODE_PID" 2>/dev/null || { cat "$WORK/node.log"; echo "conformance: the node exited"; exit 1; }
  sleep 0.2
done
kill -0 "$NODE_PID" 2>/dev/null || { echo "conformance: the node is not running"; exit 1; }

conn() { echo "Endpoint=sb://$AMQP;SharedAccessKeyName=$1;SharedAccessKey=$2;UseDevelopmentEmulator=true"; }
ROOT_CONN=$(conn RootManageSharedAccessKey "$KEY")

# Creates a namespace key through PUT /$keys/NAME (docs/admin-api.md), signing the
# request as the SDKs do (node is needed for the JavaScript runner anyway).
putkey() { # name rights-json key
  node -e '
    const [admin, amqp, root, name, rights, key] = process.argv.slice(1);
    const crypto = require("crypto");
    const sr = encodeURIComponent(`https://${amqp}/$keys/${name}`).toLowerCase();
    const se = Math.floor(Date.now() / 1000) + 3600;
    const sig = encodeURIComponent(crypto.createHmac("sha256", root).update(sr + "\n" + se).digest("base64"));
    fetch(`http://${admin}/$keys/${name}`, { method: "PUT",
      headers: { Authorization: `SharedAccessSignature sr=${sr}&sig=${sig}&se=${se}&skn=RootManageSharedAccessKey` },
      body: JSON.stringify({ rights: JSON.parse(rights), primaryKey: key }) })
      .then(async r => { if (!r.ok) { console.error(r.status, await r.text()); process.exit(1); } });
  ' "$ADMIN" "$AMQP" "$KEY" "$1" "$2" "$3"
}
putkey conformance-send-listen '["Send","Listen"]' send-listen-key
putkey conformance-send '["Send"]' send-key
putkey conformance-listen '["Listen"]' listen-key

status=0
if [[ "${QB_SKIP_GO:-}" != 1 ]]; then
  echo "== Go SDK (azservicebus v1.11.0) live tests"
  QB_CONN=$ROOT_CONN QB_ADMIN_URL="http://$ADMIN" \
  QB_CONN_NO_MANAGE=$(conn conformance-send-listen send-listen-key) \
  QB_CONN_SEND_ONLY=$(conn conformance-send send-key) \
  QB_CONN_LISTEN_ONLY=$(conn conformance-listen listen-key) \
  QB_TIMEOUT=${QB_TIMEOUT:-12m} QB_TEST_TIMEOUT=${QB_TEST_TIMEOUT:-3m} \
    "$LIVETESTS/run.sh" 2>&1 | tee "$WORK/go.out" || status=1
fi
if [[ "${QB_SKIP_JS:-}" != 1 ]]; then
  echo "== JavaScript SDK (@azure/service-bus 7.9.5)"
  (cd test/js && { [[ -d node_modules/@azure/service-bus ]] || npm ci --no-audit --no-fund --silent; } &&
    QB_CONN=$ROOT_CONN QB_ADMIN_URL="http://$ADMIN" \
    QB_CONN_SEND_ONLY=$(conn conformance-send send-key) \
    QB_CONN_LISTEN_ONLY=$(conn conformance-listen listen-key) node run.js) || status=1
fi
exit $status
