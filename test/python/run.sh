#!/usr/bin/env bash
# Runs test/python/run.py (the official azure-servicebus SDK against a node; see its
# header for the environment) with Debian's packages: installs python3-azure and
# python3-uamqp when /usr/bin/python3 cannot import them (needs root, as CI runs).
# Uses /usr/bin/python3 explicitly: a python3 found earlier on PATH may be another
# build that does not see Debian's packages.
set -euo pipefail
PY=/usr/bin/python3
if ! "$PY" -c 'import azure.servicebus, uamqp' 2>/dev/null; then
  if [[ $(id -u) != 0 ]]; then
    echo "python: python3-azure and python3-uamqp are missing; install them as root:"
    echo "  apt-get update && apt-get install -y python3-azure python3-uamqp"
    exit 1
  fi
  echo "python: installing python3-azure and python3-uamqp"
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-azure python3-uamqp >/dev/null
fi
"$PY" -c 'import azure.servicebus as s, uamqp as u; print("python: azure-servicebus %s on uamqp %s" % (s.__version__, u.__version__))'
exec "$PY" -u "$(dirname "${BASH_SOURCE[0]}")/run.py" "$@"
