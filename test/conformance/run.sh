#!/usr/bin/env bash
# make conformance: builds Quorumbus and runs the official SDKs against it:
#
#   single   a fresh single node on loopback ports;
#   cluster  a fresh 3-node cluster (each partition on 2 nodes), through the node that
#            hosts no replica, so every operation is forwarded to another node.
#
# For each, it creates limited-rights keys (Send+Listen, Send, Listen) through the admin
# API's /$keys, then runs the Azure SDK for Go's own live tests (../shared/sdk-livetests,
# or $QB_SDK_LIVETESTS) and the JavaScript SDK runner (test/js). It stops every node it
# started, also on failure. Exit status: 0 when every run passed (but for the documented
# expected failures), 1 otherwise.
#
# Environment: QB_PHASES (default "single cluster"), QB_EXPECTED_FAILURES (Go tests
# allowed to fail, each documented in docs/compatibility.md; default
# TestReceiveWithDifferentWaitTime), QB_SDK_LIVETESTS, QB_PORT_BASE
# (default 25000; node i uses base+1000*i + 672 AMQP, +300 admin, +400 cluster),
# QB_RUN (passed to the Go suite), QB_SKIP_GO=1, QB_SKIP_JS=1, QB_TIMEOUT (one Go
# suite run, default 12m).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
LIVETESTS=${QB_SDK_LIVETESTS:-$ROOT/../shared/sdk-livetests}
BASE=${QB_PORT_BASE:-25000}
PHASES=${QB_PHASES:-single cluster}
KEY=conformance-root-key
WORK=$(mktemp -d "${TMPDIR:-/tmp}/qb-conformance.XXXXXX")
PIDS=()

stop_nodes() {
  local pid
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$pid" 2>/dev/null || true
  done
  PIDS=()
}
cleanup() {
  stop_nodes
  local f
  for f in "$WORK"/*.log; do
    [[ -s "$f" ]] || continue
    echo "conformance: $(basename "$f") (warnings and errors):"
    grep -E 'level=(WARN|ERROR)' "$f" | tail -n 20 || true
  done
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [[ "${QB_SKIP_GO:-}" != 1 && ! -x "$LIVETESTS/run.sh" ]]; then
  echo "conformance: $LIVETESTS/run.sh not found; set QB_SDK_LIVETESTS (or QB_SKIP_GO=1)"
  exit 1
fi
cd "$ROOT"
go build -o "$WORK/bin/" ./cmd/quorumbus ./cmd/qbctl
# The JavaScript runner is installed in the work directory, not in test/js: the
# repository's own checks read every .md file under it, node_modules included.
JSDIR=$WORK/js
if [[ "${QB_SKIP_JS:-}" != 1 ]]; then
  mkdir -p "$JSDIR"
  cp test/js/package.json test/js/package-lock.json test/js/run.js "$JSDIR/"
  (cd "$JSDIR" && npm ci --no-audit --no-fund --silent)
fi

amqp_addr() { echo "127.0.0.1:$((BASE + 1000 * $1 + 672))"; }
admin_addr() { echo "127.0.0.1:$((BASE + 1000 * $1 + 300))"; }
cluster_addr() { echo "127.0.0.1:$((BASE + 1000 * $1 + 400))"; }
conn() { echo "Endpoint=sb://$1;SharedAccessKeyName=$2;SharedAccessKey=$3;UseDevelopmentEmulator=true"; }

# start_node PHASE I [flags...]: node I of PHASE, fresh data directory, log in $WORK.
start_node() {
  local phase=$1 i=$2
  shift 2
  "$WORK/bin/quorumbus" --data "$WORK/$phase-data-$i" --amqp-addr "$(amqp_addr "$i")" \
    --admin-addr "$(admin_addr "$i")" --cluster-addr "$(cluster_addr "$i")" --sas-key "$KEY" \
    "$@" >"$WORK/$phase-node$i.log" 2>&1 &
  PIDS+=($!)
}

# wait_ready I: until node I answers /readyz (at most 90 s).
wait_ready() {
  local i=$1
  for _ in $(seq 1 450); do
    node -e 'fetch(process.argv[1]).then(r => process.exit(r.ok ? 0 : 1), () => process.exit(1))' \
      "http://$(admin_addr "$i")/readyz" && return 0
    sleep 0.2
  done
  echo "conformance: node $i is not ready after 90 s"
  return 1
}

# putkey I NAME RIGHTS-JSON KEY: a namespace key through PUT /$keys/NAME on node I,
# signed as the SDKs sign (node is needed for the JavaScript runner anyway).
putkey() {
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
  ' "$(admin_addr "$1")" "$(amqp_addr "$1")" "$KEY" "$2" "$3" "$4"
}

# go_verdict OUT: whether the Go suite's run passed, failures named in EXPECTED_FAILURES
# excepted (docs/compatibility.md says why each is there). A run without its count line
# (setup failure, killed) fails.
EXPECTED_FAILURES=${QB_EXPECTED_FAILURES-TestReceiveWithDifferentWaitTime}
go_verdict() {
  local out=$1 t unexpected=0
  grep -qE '^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$' "$out" || { echo "conformance: the Go suite did not finish"; return 1; }
  while read -r t; do
    if [[ " $EXPECTED_FAILURES " == *" $t "* ]]; then
      echo "conformance: $t failed as documented (docs/compatibility.md)"
    else
      echo "conformance: unexpected failure: $t"
      unexpected=1
    fi
  done < <(awk '/^FAIL +[0-9.]+s +[A-Za-z]+ +Test/ {print $4}' "$out")
  if grep -qE '^0 passed, 1 failed, 0 skipped$' "$out"; then unexpected=1; fi
  return $unexpected
}

# run_clients PHASE I: both SDKs against node I.
run_clients() {
  local phase=$1 i=$2 ok=0
  local amqp
  amqp=$(amqp_addr "$i")
  putkey "$i" conformance-send-listen '["Send","Listen"]' send-listen-key
  putkey "$i" conformance-send '["Send"]' send-key
  putkey "$i" conformance-listen '["Listen"]' listen-key
  if [[ "${QB_SKIP_GO:-}" != 1 ]]; then
    echo "== [$phase] Go SDK (azservicebus v1.11.0) live tests through $amqp"
    QB_CONN=$(conn "$amqp" RootManageSharedAccessKey "$KEY") QB_ADMIN_URL="http://$(admin_addr "$i")" \
    QB_CONN_NO_MANAGE=$(conn "$amqp" conformance-send-listen send-listen-key) \
    QB_CONN_SEND_ONLY=$(conn "$amqp" conformance-send send-key) \
    QB_CONN_LISTEN_ONLY=$(conn "$amqp" conformance-listen listen-key) \
    QB_TIMEOUT=${QB_TIMEOUT:-12m} QB_TEST_TIMEOUT=${QB_TEST_TIMEOUT:-3m} \
      "$LIVETESTS/run.sh" | tee "$WORK/$phase-go.out" || true
    go_verdict "$WORK/$phase-go.out" || ok=1
  fi
  if [[ "${QB_SKIP_JS:-}" != 1 ]]; then
    echo "== [$phase] JavaScript SDK (@azure/service-bus 7.9.5) through $amqp"
    (cd "$JSDIR" &&
      QB_CONN=$(conn "$amqp" RootManageSharedAccessKey "$KEY") QB_ADMIN_URL="http://$(admin_addr "$i")" \
      QB_CONN_SEND_ONLY=$(conn "$amqp" conformance-send send-key) \
      QB_CONN_LISTEN_ONLY=$(conn "$amqp" conformance-listen listen-key) node run.js) || ok=1
  fi
  return $ok
}

status=0
for phase in $PHASES; do
  case $phase in
  single)
    start_node single 0
    wait_ready 0
    run_clients single 0 || status=1
    ;;
  cluster)
    # Three nodes joining each other; every partition on 2 of them. Node 3 is drained
    # (its leaderships moved away, nothing placed on it), so clients connected to it
    # reach every partition through another node.
    for i in 1 2 3; do
      join=()
      for j in 1 2 3; do [[ $j == "$i" ]] || join+=("$(cluster_addr "$j")"); done
      start_node cluster "$i" --node-id "n$i" --advertise-addr "$(cluster_addr "$i")" \
        --bootstrap-expect 3 --replicas 2 --join "$(IFS=,; echo "${join[*]}")"
    done
    for i in 1 2 3; do wait_ready "$i"; done
    "$WORK/bin/qbctl" --admin-addr "$(admin_addr 3)" \
      --connection-string "$(conn "$(amqp_addr 3)" RootManageSharedAccessKey "$KEY")" node drain n3
    run_clients cluster 3 || status=1
    ;;
  *)
    echo "conformance: unknown phase $phase (single, cluster)"
    exit 1
    ;;
  esac
  stop_nodes
done
exit $status
