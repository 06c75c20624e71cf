#!/usr/bin/env bash
# make conformance: builds Quorumbus and runs the official SDKs against it:
#
#   single   a fresh single node on loopback ports;
#   cluster  a fresh 3-node cluster (each partition on 2 nodes), through the node that
#            hosts no replica, so every operation is forwarded to another node.
#
# For each, it creates limited-rights keys (Send+Listen, Send, Listen) through the admin
# API's /$keys, then runs the Azure SDK for Go's own live tests (../shared/sdk-livetests,
# or $QB_SDK_LIVETESTS) and the JavaScript SDK runner (test/js); then, on fresh nodes
# serving TLS, the Python SDK runner (test/python: azure-servicebus from Debian's
# packages, installed when missing). The Python SDK always dials port 5671, so during
# that run the node clients use listens for AMQPS on 127.0.0.1:5671 (the run fails,
# saying so, when something else holds that port). It stops every node it started,
# also on failure. Exit status: 0 when every run passed (but for the documented
# expected failures), 1 otherwise.
#
# Environment: QB_PHASES (default "single cluster"), QB_EXPECTED_FAILURES (Go tests
# allowed to fail, each documented in docs/compatibility.md; default
# TestReceiveWithDifferentWaitTime), QB_SDK_LIVETESTS, QB_PORT_BASE
# (default 25000; node i uses base+1000*i + 672 AMQP, +300 admin, +400 cluster),
# QB_RUN (passed to the Go suite), QB_SKIP_GO=1, QB_SKIP_JS=1, QB_SKIP_PY=1, QB_TIMEOUT
# (one Go suite run, default 12m). Only the Python runner:
# QB_SKIP_GO=1 QB_SKIP_JS=1 make conformance.
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
  cp test/js/package.json test/js/package-lock.json test/js/run.js test/js/readme-admin.js "$JSDIR/"
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

# TLS: set by start_tls_nodes to the phase whose nodes serve TLS (their admin API is
# then HTTPS, trusted through the CA each node writes in its data directory).
TLS_PHASE=
node_ca() { echo "$WORK/$TLS_PHASE-data-$1/tls/ca.crt"; }
admin_url() {
  if [[ -n $TLS_PHASE ]]; then echo "https://$(admin_addr "$1")"; else echo "http://$(admin_addr "$1")"; fi
}
# nodejs I ARGS...: node, trusting node I's CA when it serves TLS.
nodejs() {
  local i=$1
  shift
  if [[ -n $TLS_PHASE ]]; then NODE_EXTRA_CA_CERTS=$(node_ca "$i") node "$@"; else node "$@"; fi
}

# wait_ready I: until node I answers /readyz (at most 90 s).
wait_ready() {
  local i=$1
  for _ in $(seq 1 450); do
    if [[ -z $TLS_PHASE || -s $(node_ca "$i") ]]; then
      nodejs "$i" -e 'fetch(process.argv[1]).then(r => process.exit(r.ok ? 0 : 1), () => process.exit(1))' \
        "$(admin_url "$i")/readyz" 2>/dev/null && return 0
    fi
    sleep 0.2
  done
  echo "conformance: node $i is not ready after 90 s"
  return 1
}

# putkey I NAME RIGHTS-JSON KEY: a namespace key through PUT /$keys/NAME on node I,
# signed as the SDKs sign (node is needed for the JavaScript runner anyway).
putkey() {
  nodejs "$1" -e '
    const [admin, amqp, root, name, rights, key] = process.argv.slice(1);
    const crypto = require("crypto");
    const sr = encodeURIComponent(`https://${amqp}/$keys/${name}`).toLowerCase();
    const se = Math.floor(Date.now() / 1000) + 3600;
    const sig = encodeURIComponent(crypto.createHmac("sha256", root).update(sr + "\n" + se).digest("base64"));
    fetch(`${admin}/$keys/${name}`, { method: "PUT",
      headers: { Authorization: `SharedAccessSignature sr=${sr}&sig=${sig}&se=${se}&skn=RootManageSharedAccessKey` },
      body: JSON.stringify({ rights: JSON.parse(rights), primaryKey: key }) })
      .then(async r => { if (!r.ok) { console.error(r.status, await r.text()); process.exit(1); } });
  ' "$(admin_url "$1")" "$(amqp_addr "$1")" "$KEY" "$2" "$3" "$4"
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
    echo "== [$phase] JavaScript SDK (@azure/service-bus 7.9.5 and 7.10.0-beta.2) through $amqp"
    (cd "$JSDIR" &&
      QB_CONN=$(conn "$amqp" RootManageSharedAccessKey "$KEY") QB_ADMIN_URL="http://$(admin_addr "$i")" \
      QB_CONN_SEND_ONLY=$(conn "$amqp" conformance-send send-key) \
      QB_CONN_LISTEN_ONLY=$(conn "$amqp" conformance-listen listen-key) node run.js) || ok=1
  fi
  return $ok
}

# The Python SDK dials 5671 whatever the Endpoint says (docs/compatibility.md).
PY_PORT=5671
py_port_free() {
  if (exec 3<>"/dev/tcp/127.0.0.1/$PY_PORT") 2>/dev/null; then
    echo "conformance: 127.0.0.1:$PY_PORT is in use by another process; the Python SDK always dials"
    echo "conformance: port $PY_PORT, so its run needs that port (free it, or set QB_SKIP_PY=1)"
    return 1
  fi
}

# start_tls_nodes PHASE I...: nodes I of PHASE serving TLS (self-signed), the last of
# them with AMQPS on 127.0.0.1:5671, the others on base+1000*i+671; plain AMQP stays on
# (qbctl uses it). Extra flags for every node in TLS_FLAGS_<i> (an array name).
start_tls_nodes() {
  local phase=$1 last=${*: -1} i amqps
  shift
  TLS_PHASE=$phase
  for i in "$@"; do
    amqps="127.0.0.1:$((BASE + 1000 * i + 671))"
    [[ $i == "$last" ]] && amqps="127.0.0.1:$PY_PORT"
    local -n extra="TLS_FLAGS_$i"
    start_node "$phase" "$i" --tls-self-signed --amqps-addr "$amqps" "${extra[@]}"
  done
}

# run_python PHASE I: the Python runner against node I (serving AMQPS on 5671).
run_python() {
  local phase=$1 i=$2 ok=0
  putkey "$i" conformance-send '["Send"]' send-key
  echo "== [$phase] Python SDK (azure-servicebus 7.8.2 on uamqp 1.5.3) through 127.0.0.1:$PY_PORT"
  QB_CONN="Endpoint=sb://127.0.0.1:$PY_PORT/;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=$KEY" \
  QB_CONN_SEND_ONLY="Endpoint=sb://127.0.0.1:$PY_PORT/;SharedAccessKeyName=conformance-send;SharedAccessKey=send-key" \
  QB_CA=$(node_ca "$i") QB_WS_ENDPOINT="sb://127.0.0.1:$PY_PORT" \
    timeout "${QB_PY_TIMEOUT:-15m}" test/python/run.sh || ok=1
  if [[ "${QB_SKIP_JS:-}" != 1 ]]; then
    # The README's JavaScript admin snippet needs a node serving TLS: it runs here.
    (cd "$JSDIR" && NODE_EXTRA_CA_CERTS=$(node_ca "$i") \
      QB_CONN="Endpoint=sb://localhost:$PY_PORT/;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=$KEY" \
      node readme-admin.js) || ok=1
  fi
  return $ok
}

skip_sdks() { [[ "${QB_SKIP_GO:-}" == 1 && "${QB_SKIP_JS:-}" == 1 ]]; }

status=0
for phase in $PHASES; do
  case $phase in
  single)
    if ! skip_sdks; then
      TLS_PHASE=
      start_node single 0
      wait_ready 0
      run_clients single 0 || status=1
      stop_nodes
    fi
    if [[ "${QB_SKIP_PY:-}" != 1 ]]; then
      if py_port_free; then
        TLS_FLAGS_0=()
        start_tls_nodes single-py 0
        wait_ready 0
        run_python single 0 || status=1
      else
        status=1
      fi
    fi
    ;;
  cluster)
    # Three nodes joining each other; every partition on 2 of them. Node 3 is drained
    # (its leaderships moved away, nothing placed on it), so clients connected to it
    # reach every partition through another node.
    cluster_flags() {
      local i=$1 j join=()
      for j in 1 2 3; do [[ $j == "$i" ]] || join+=("$(cluster_addr "$j")"); done
      echo --node-id "n$i" --advertise-addr "$(cluster_addr "$i")" \
        --bootstrap-expect 3 --replicas 2 --join "$(IFS=,; echo "${join[*]}")"
    }
    drain3() {
      local data=()
      [[ -n $TLS_PHASE ]] && data=(--data "$WORK/$TLS_PHASE-data-3")
      "$WORK/bin/qbctl" --admin-addr "$(admin_addr 3)" "${data[@]}" \
        --connection-string "$(conn "$(amqp_addr 3)" RootManageSharedAccessKey "$KEY")" node drain n3
    }
    if ! skip_sdks; then
      TLS_PHASE=
      for i in 1 2 3; do
        # shellcheck disable=SC2046 # the flags are words without spaces
        start_node cluster "$i" $(cluster_flags "$i")
      done
      for i in 1 2 3; do wait_ready "$i"; done
      drain3
      run_clients cluster 3 || status=1
      stop_nodes
    fi
    if [[ "${QB_SKIP_PY:-}" != 1 ]]; then
      if py_port_free; then
        # shellcheck disable=SC2207 # the flags are words without spaces
        TLS_FLAGS_1=($(cluster_flags 1)) TLS_FLAGS_2=($(cluster_flags 2)) TLS_FLAGS_3=($(cluster_flags 3))
        start_tls_nodes cluster-py 1 2 3
        for i in 1 2 3; do wait_ready "$i"; done
        drain3
        run_python cluster 3 || status=1
      else
        status=1
      fi
    fi
    ;;
  *)
    echo "conformance: unknown phase $phase (single, cluster)"
    exit 1
    ;;
  esac
  stop_nodes
done
exit $status
