#!/usr/bin/env bash
# Runs upstream hashicorp/raft's own test suite on the fork (third_party/hashicorp-raft),
# as upstream's Makefile does (-race, GOTRACEBACK=all), with any extra go test build
# flags given (e.g. -tags batchtest).
#
# The test binary runs as an unprivileged user when this script runs as root (CI does):
# TestFileSS_BadPerm checks that a directory without permissions is refused, which root
# is not.
#
# Several upstream tests time elections and heartbeats in tens of milliseconds
# (TestRaft_LeaderLeaseExpire, TestRaft_BehindFollower, TestRaft_PreVote*, ...) and fail
# now and then on a loaded 2-core machine, as they do on upstream's own code. A test
# that fails is run again alone, up to twice; it must pass then, and the script names
# every test that needed it. A test that fails three times fails the run (six times for
# the known flaky ones below).
set -euo pipefail
cd "$(dirname "$0")/hashicorp-raft"
go=${GO:-go}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
chmod 755 "$tmp"
mkdir "$tmp/t"
[ "$(id -u)" != 0 ] || chown 65534:65534 "$tmp/t"
GOFLAGS= "$go" test -c -race -o "$tmp/raft.test" "$@" .
run() {
  if [ "$(id -u)" = 0 ]; then
    (cd "$tmp" && GOTRACEBACK=all TMPDIR="$tmp/t" setpriv --reuid=65534 --regid=65534 --clear-groups ./raft.test "$@")
  else
    (cd "$tmp" && GOTRACEBACK=all TMPDIR="$tmp/t" ./raft.test "$@")
  fi
}
log=$tmp/log
if run -test.count=1 -test.timeout=15m -test.v >"$log" 2>&1; then
  echo "ok   upstream hashicorp/raft tests ($(grep -c '^--- PASS' "$log") passed) $*"
  exit 0
fi
failed=$(grep -E '^--- FAIL: ' "$log" | awk '{print $3}' | sed 's#/.*##' | sort -u | tr '\n' ' ')
if [ -z "$failed" ] || ! grep -q '^FAIL$' "$log"; then
  tail -200 "$log" # a panic or a time-out: no test to run again
  exit 1
fi
# Upstream tests that fail often on the pristine module too, measured here with
# -count=50: TestNetworkTransport_AppendEntriesPipeline_CloseStreams 11 and 13 (-race)
# failures in 50 (it checks, racing the stream's close, that a pipelined send fails).
# They get five tries alone instead of two.
flaky=" TestNetworkTransport_AppendEntriesPipeline_CloseStreams "
echo "upstream hashicorp/raft tests failed once: $failed; running each again alone"
for t in $failed; do
  ok=
  tries="1 2"
  case "$flaky" in *" $t "*) tries="1 2 3 4 5" ;; esac
  for try in $tries; do
    if run -test.count=1 -test.timeout=5m -test.v -test.run "^${t}\$" >"$log" 2>&1; then
      echo "  $t passed on try $try"
      ok=1
      break
    fi
  done
  if [ -z "$ok" ]; then
    echo "  $t failed every time:"
    tail -200 "$log"
    exit 1
  fi
done
echo "ok   upstream hashicorp/raft tests $* ($(echo $failed | wc -w) run again)"
