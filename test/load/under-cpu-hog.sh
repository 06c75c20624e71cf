#!/usr/bin/env bash
# Runs a command while as many busy loops as there are cores keep the machine loaded,
# the way a shared CI machine is: the ordering checks of issue 22 passed on a quiet
# machine and failed beside other work. The loops are niced below the command under
# test only by the kernel's fair share (same nice), and end with this script, however
# it ends.
#   test/load/under-cpu-hog.sh go test -race -count=20 -run 'TestX' ./amqp/
set -euo pipefail
hogs=()
cleanup() { for p in "${hogs[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT INT TERM
for _ in $(seq "$(nproc)"); do
  ( while :; do :; done ) &
  hogs+=($!)
done
"$@"
