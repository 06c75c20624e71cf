#!/usr/bin/env bash
# make bench-compare: Quorumbus, RabbitMQ quorum queues and NATS JetStream side by side on
# this machine, each as a 3-node cluster on 127.0.0.1, one system at a time, driven by one
# load tool (test/bench/compare). Writes the raw results, the table in docs/benchmarks.md
# (between the bench-compare markers) and docs/img/bench-compare.png.
#
# Needs root only to install rabbitmq-server and nats-server from Debian when they are
# missing; the packaged services are kept from starting. Every process this script starts
# has its PID recorded under $BASE/pids and is stopped by that PID (SIGTERM, SIGKILL after
# a grace period) when the script ends, also on failure and Ctrl-C; nothing else is
# touched.
#
# Knobs (environment or make variables):
#   N         messages per throughput test (100000)
#   REPS      repetitions (3)
#   SYSTEMS   any of: quorumbus quorumbus-follower quorumbus-sdk rabbit-091 rabbit-amqp10 nats
#             (default: all but quorumbus-follower, whose clients connect to a follower)
#   SIZE      body bytes (1024); WINDOWS (1,256); PREFETCH (256)
#   LAT_RATE  offered msg/s of the latency test (1000); LAT_DUR (30s)
#   BASE      state directory (default: a new temporary directory, removed after a clean run)
#   RESULTS   raw results file (default test/bench/compare/results/raw-<UTC time>.txt)
#   REPORT    1 (default): rewrite docs/benchmarks.md and the chart; 0: only print the table
#   QB_ARGS   extra flags for every Quorumbus node, e.g. "--raft-log-store wal" (split on
#             spaces; recorded in the results' header)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
N=${N:-100000}
REPS=${REPS:-3}
SYSTEMS=${SYSTEMS:-quorumbus quorumbus-sdk rabbit-091 rabbit-amqp10 nats}
SIZE=${SIZE:-1024}
WINDOWS=${WINDOWS:-1,256}
PREFETCH=${PREFETCH:-256}
LAT_RATE=${LAT_RATE:-1000}
LAT_DUR=${LAT_DUR:-30s}
REPORT=${REPORT:-1}
QB_ARGS=${QB_ARGS:-}
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
RESULTS=${RESULTS:-$ROOT/test/bench/compare/results/raw-$STAMP.txt}
CLIENT_LOG=${RESULTS%.txt}.log
made_base=
if [ -z "${BASE:-}" ]; then
	BASE=$(mktemp -d "${TMPDIR:-/tmp}/bench-compare.XXXXXX")
	made_base=1
fi
PIDS=$BASE/pids
BIN=$BASE/bin

# Ports, all on 127.0.0.1. RabbitMQ: AMQP 5701-5703, distribution 25701-25703, its own
# epmd on 4369. NATS: clients 4221-4223, routes 6221-6223. Quorumbus: AMQP 5811-5813,
# admin 5821-5823, cluster 5831-5833.
RMQ_BIN=/usr/lib/rabbitmq/bin
RABBIT_URL=amqp://guest:guest@127.0.0.1:5701/
NATS_URLS=nats://127.0.0.1:4221,nats://127.0.0.1:4222,nats://127.0.0.1:4223
QB_KEY_NAME=bench

log() { printf '%s bench-compare: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() {
	log "FAILED: $*"
	exit 1
}

# ---- processes: start tracked, stop by recorded PID only

alive() { [ -n "${1:-}" ] && [ -e "/proc/$1" ] && [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]; }
track() { echo "$2" >"$PIDS/$1.pid"; }
pid_of() { cat "$PIDS/$1.pid" 2>/dev/null || true; }

# stop NAME... [-g GRACE]: SIGTERM to each recorded PID at once, SIGKILL to those still
# running GRACE seconds later (default 30).
stop() {
	local grace=30 names=() name pid pids=() i left t0
	while (($#)); do
		if [ "$1" = -g ]; then
			grace=$2
			shift 2
		else
			names+=("$1")
			shift
		fi
	done
	for name in "${names[@]}"; do
		pid=$(pid_of "$name")
		[ -n "$pid" ] || continue
		alive "$pid" && kill -TERM "$pid" 2>/dev/null && pids+=("$name:$pid")
	done
	t0=$SECONDS
	for ((i = 0; i < grace * 10; i++)); do
		left=0
		for name in "${pids[@]}"; do alive "${name#*:}" && left=1; done
		((left)) || break
		sleep 0.1
	done
	for name in "${pids[@]}"; do
		if alive "${name#*:}"; then
			log "${name%%:*} (pid ${name#*:}) still running ${grace}s after SIGTERM: SIGKILL"
			kill -KILL "${name#*:}" 2>/dev/null || true
		fi
	done
	((${#pids[@]} == 0)) || log "stopped ${names[*]} in $((SECONDS - t0)) s"
	for name in "${names[@]}"; do rm -f "$PIDS/$name.pid"; done
}

# stop_all stops every process still recorded.
stop_all() {
	local f names=()
	[ -d "$PIDS" ] || return 0
	for f in "$PIDS"/*.pid; do
		[ -e "$f" ] && names+=("$(basename "$f" .pid)")
	done
	((${#names[@]} == 0)) || stop "${names[@]}" -g 60
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_port() { # port seconds name
	local t
	for ((t = 0; t < $2 * 10; t++)); do
		port_open "$1" && return 0
		sleep 0.1
	done
	die "$3: nothing listens on 127.0.0.1:$1 after $2 s"
}

cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	stop_all
	if [ "$rc" -eq 0 ] && [ -n "$made_base" ]; then
		rm -rf "$BASE"
	else
		log "state and node logs kept in $BASE"
	fi
	exit "$rc"
}

# ---- install and build

install() {
	local need=()
	[ -x $RMQ_BIN/rabbitmq-server ] || need+=(rabbitmq-server)
	command -v nats-server >/dev/null || need+=(nats-server)
	((${#need[@]})) || return 0
	[ "$(id -u)" -eq 0 ] || die "installing ${need[*]} needs root"
	log "installing ${need[*]} from Debian"
	# policy-rc.d exit 101 keeps apt from starting the packaged services, which would
	# listen on the default ports outside this script's control.
	local policy=
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
		chmod +x /usr/sbin/policy-rc.d
		policy=1
	fi
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
	[ -z "$policy" ] || rm -f /usr/sbin/policy-rc.d
}

build() {
	mkdir -p "$BIN"
	(cd "$ROOT" && go build -o "$BIN/" ./cmd/quorumbus ./cmd/qbctl)
	(cd "$ROOT/test/bench/compare" && go build -o "$BIN/" .) # its own module (go.mod)
}

conditions() {
	local t0 t1
	echo "# date: $(date -u +%FT%TZ)"
	echo "# host: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), $(awk '/MemTotal/{printf "%.1f GiB", $2/1048576}' /proc/meminfo) RAM, kernel $(uname -r), $(df -T "$BASE" | awk 'NR==2{print $2}') on $(df "$BASE" | awk 'NR==2{print $1}'); all nodes of a cluster and the load tool share the host; one system at a time"
	t0=$(date +%s%N)
	dd if=/dev/zero of="$BASE/.sync-probe" bs=4k count=200 oflag=dsync 2>/dev/null
	t1=$(date +%s%N)
	rm -f "$BASE/.sync-probe"
	echo "# disk: a 4 KiB O_DSYNC write takes $(((t1 - t0) / 200000)) µs (mean of 200)"
	[[ " $SYSTEMS " != *" quorumbus"* ]] || echo "# quorumbus: $(cd "$ROOT" && git log -1 --format='%h %cs' 2>/dev/null || echo unknown) ($(cd "$ROOT" && git status --porcelain --untracked-files=no 2>/dev/null | grep -q . && echo 'with local changes' || echo clean)); 3 nodes, --replicas 3${QB_ARGS:+ $QB_ARGS}, fsync on: a send is accepted once a quorum has fsynced it"
	[[ " $SYSTEMS " != *" rabbit-"* ]] || echo "# rabbitmq-server $(dpkg-query -W -f='${Version}' rabbitmq-server 2>/dev/null), erlang $(dpkg-query -W -f='${Version}' erlang-base 2>/dev/null): quorum queue, 3 replicas; each node fdatasyncs its Ra WAL before a confirm"
	[[ " $SYSTEMS " != *" nats "* ]] || echo "# nats-server $(nats-server --version 2>/dev/null | awk '{print $NF}'): stream R3, file storage; no fsync per message (2.9 syncs in the background every 60 s), a PubAck means in 2 of 3 page caches"
	echo "# clients: $(go version | awk '{print $3}'), $(cd "$ROOT/test/bench/compare" && go list -m -f '{{.Path}} {{.Version}}' github.com/Azure/go-amqp github.com/rabbitmq/amqp091-go github.com/nats-io/nats.go github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus | tr '\n' ',' | sed 's/,$//; s/,/, /g')"
	echo "# load: N=$N messages of $SIZE bytes per throughput test, send windows $WINDOWS, receive prefetch $PREFETCH, latency at $LAT_RATE msg/s for $LAT_DUR (window 256), $REPS repetition(s), one connection per client, clients connect to the queue's leader"
}

load() { # system rep flags...
	local sys=$1 rep=$2 pid
	shift 2
	log "== $sys rep $rep"
	# In the background, and waited for with wait: bash defers a trap while a foreground
	# command runs, and skips the INT trap when that command handles SIGINT itself.
	"$BIN/compare" load -system "$sys" -rep "$rep" -n "$N" -size "$SIZE" -windows "$WINDOWS" \
		-prefetch "$PREFETCH" -lat-rate "$LAT_RATE" -lat-dur "$LAT_DUR" "$@" \
		>>"$RESULTS" 2> >(tee -a "$CLIENT_LOG" >&2) &
	pid=$!
	track load "$pid"
	if wait "$pid"; then
		rm -f "$PIDS/load.pid"
		return 0
	fi
	rm -f "$PIDS/load.pid"
	echo "# FAILED: $sys rep $rep (see $(basename "$CLIENT_LOG"))" >>"$RESULTS"
	log "$sys rep $rep failed"
	return 1
}

# ---- Quorumbus: 3 nodes from this checkout

qb_up() {
	local i j d join key qb_args=()
	read -ra qb_args <<<"$QB_ARGS"
	key=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
	QB_CONN=
	for i in 1 2 3; do
		d=$BASE/qb/n$i
		mkdir -p "$d"
		join=
		for j in 1 2 3; do
			[ "$j" = "$i" ] || join=${join:+$join,}127.0.0.1:$((5830 + j))
		done
		# The key goes through the environment (QUORUMBUS_SAS_KEY), not the command line.
		QUORUMBUS_SAS_KEY=$key setsid "$BIN/quorumbus" --data "$d" --node-id "n$i" \
			--amqp-addr 127.0.0.1:$((5810 + i)) --admin-addr 127.0.0.1:$((5820 + i)) \
			--cluster-addr 127.0.0.1:$((5830 + i)) --advertise-addr 127.0.0.1:$((5830 + i)) \
			--bootstrap-expect 3 --join "$join" --replicas 3 \
			--sas-key-name "$QB_KEY_NAME" --log-level warn "${qb_args[@]}" \
			>"$d.log" 2>&1 </dev/null &
		track "qb-n$i" $!
	done
	for i in 1 2 3; do
		wait_port $((5820 + i)) 90 "quorumbus n$i (see $BASE/qb/n$i.log)"
		log "quorumbus n$i up, pid $(pid_of "qb-n$i"), amqp 127.0.0.1:$((5810 + i))"
	done
	for ((i = 0; i < 300; i++)); do
		[ -s "$BASE/qb/n1/connection-string" ] && break
		sleep 0.1
	done
	QB_CONN=$(cat "$BASE/qb/n1/connection-string")
}

# A node's own graceful stop is bounded by its --shutdown-timeout (30 s by default).
qb_down() { stop qb-n1 qb-n2 qb-n3 -g 45; }

bench_quorumbus() {
	local rep sys failed=0
	qb_up
	for rep in $(seq 1 "$REPS"); do
		for sys in $SYSTEMS; do
			case $sys in quorumbus*) ;; *) continue ;; esac
			# The key goes through the environment, not the command line.
			QUORUMBUS_CONNECTION_STRING=$QB_CONN load "$sys" "$rep" -admin-addr 127.0.0.1:5821 \
				-qbctl "$BIN/qbctl" -queue "$sys-r$rep" || failed=1
		done
	done
	qb_down
	return $failed
}

# ---- RabbitMQ: 3 nodes, one quorum queue

rmq() { # node command...: run a RabbitMQ script with node i's environment
	local i=$1 d=$BASE/rabbit/r$1
	shift
	env HOME="$BASE/rabbit/home" RABBITMQ_NODENAME="r$i@localhost" RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 \
		RABBITMQ_NODE_PORT=$((5700 + i)) RABBITMQ_DIST_PORT=$((25700 + i)) \
		RABBITMQ_MNESIA_BASE="$d/mnesia" RABBITMQ_LOG_BASE="$d/log" \
		RABBITMQ_ENABLED_PLUGINS_FILE="$d/enabled_plugins" RABBITMQ_CONFIG_FILE="$d/rabbitmq.conf" \
		RABBITMQ_ADVANCED_CONFIG_FILE="$d/advanced.config" RABBITMQ_CONF_ENV_FILE="$d/rabbitmq-env.conf" \
		RABBITMQ_PID_FILE="$d/beam.pid" ERL_EPMD_ADDRESS=127.0.0.1 \
		RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}" "$@"
}
ctl() {
	local i=$1
	shift
	rmq "$i" $RMQ_BIN/rabbitmqctl -q -n "r$i@localhost" "$@"
}

rabbit_up() {
	local i d t plugins='[].'
	port_open 4369 && die "an epmd this script did not start listens on 127.0.0.1:4369; stop it first"
	mkdir -p "$BASE/rabbit/home"
	head -c 24 /dev/urandom | base64 | tr -dc A-Za-z0-9 >"$BASE/rabbit/home/.erlang.cookie"
	chmod 400 "$BASE/rabbit/home/.erlang.cookie"
	# Our own epmd on loopback, so that it is ours to stop.
	setsid epmd -address 127.0.0.1 -port 4369 >"$BASE/rabbit/epmd.log" 2>&1 </dev/null &
	track rabbit-epmd $!
	wait_port 4369 10 epmd
	if [[ " $SYSTEMS " == *" rabbit-amqp10 "* ]]; then
		plugins='[rabbitmq_amqp1_0].'
	fi
	for i in 1 2 3; do
		d=$BASE/rabbit/r$i
		mkdir -p "$d/mnesia" "$d/log"
		echo "$plugins" >"$d/enabled_plugins"
		: >"$d/rabbitmq-env.conf"
		printf 'listeners.tcp.1 = 127.0.0.1:%d\nloopback_users.guest = true\nlog.console = false\n' \
			$((5700 + i)) >"$d/rabbitmq.conf"
		# The wrapper script turns SIGTERM into a clean stop of its VM.
		rmq "$i" setsid $RMQ_BIN/rabbitmq-server >"$d/stdout.log" 2>&1 </dev/null &
		track "rabbit-r$i" $!
	done
	for i in 1 2 3; do
		for ((t = 0; t < 180; t++)); do
			ctl "$i" ping >/dev/null 2>&1 && break
			alive "$(pid_of "rabbit-r$i")" || die "RabbitMQ r$i exited; see $BASE/rabbit/r$i/log"
			sleep 1
		done
		ctl "$i" await_startup --timeout 180 >/dev/null || die "RabbitMQ r$i did not start; see $BASE/rabbit/r$i/log"
		track "rabbit-r$i-vm" "$(cat "$BASE/rabbit/r$i/beam.pid")"
		log "RabbitMQ r$i@localhost up, VM pid $(pid_of "rabbit-r$i-vm"), amqp 127.0.0.1:$((5700 + i))"
	done
	for i in 2 3; do
		{ ctl "$i" stop_app && ctl "$i" join_cluster r1@localhost && ctl "$i" start_app; } >>"$BASE/rabbit/join.log" 2>&1 ||
			die "r$i could not join r1; see $BASE/rabbit/join.log"
	done
	ctl 1 cluster_status >"$BASE/rabbit/cluster_status.txt" 2>&1 || true
}

rabbit_down() {
	local i
	for i in 3 2 1; do
		stop "rabbit-r$i" -g 60
		stop "rabbit-r$i-vm" -g 30
	done
	stop rabbit-epmd -g 5
}

bench_rabbit() {
	local rep sys failed=0
	rabbit_up
	for rep in $(seq 1 "$REPS"); do
		for sys in $SYSTEMS; do
			case $sys in rabbit-*) ;; *) continue ;; esac
			load "$sys" "$rep" -url "$RABBIT_URL" || failed=1
		done
	done
	rabbit_down
	return $failed
}

# ---- NATS: 3 servers, one stream R3

nats_up() {
	local i d
	for i in 1 2 3; do
		d=$BASE/nats/n$i
		mkdir -p "$d/store"
		cat >"$d/nats.conf" <<-EOF
			server_name: n$i
			listen: 127.0.0.1:$((4220 + i))
			jetstream { store_dir: "$d/store", max_memory_store: 1G, max_file_store: 50G }
			cluster {
			  name: bench
			  listen: 127.0.0.1:$((6220 + i))
			  routes: [ nats-route://127.0.0.1:6221, nats-route://127.0.0.1:6222, nats-route://127.0.0.1:6223 ]
			}
		EOF
		setsid nats-server -c "$d/nats.conf" >"$d.log" 2>&1 </dev/null &
		track "nats-n$i" $!
	done
	for i in 1 2 3; do
		wait_port $((4220 + i)) 30 "nats n$i (see $BASE/nats/n$i.log)"
		log "NATS n$i up, pid $(pid_of "nats-n$i"), client 127.0.0.1:$((4220 + i))"
	done
}

nats_down() { stop nats-n1 nats-n2 nats-n3; }

bench_nats() {
	local rep failed=0
	nats_up
	for rep in $(seq 1 "$REPS"); do
		load nats "$rep" -url "$NATS_URLS" || failed=1
	done
	nats_down
	return $failed
}

# ---- main

main() {
	local sys failed=0
	for sys in $SYSTEMS; do
		case $sys in quorumbus | quorumbus-follower | quorumbus-sdk | rabbit-091 | rabbit-amqp10 | nats) ;;
		*) die "SYSTEMS: unknown system $sys" ;;
		esac
	done
	trap cleanup EXIT
	trap 'log "interrupted"; exit 130' INT TERM
	mkdir -p "$PIDS" "$(dirname "$RESULTS")"
	log "state in $BASE; raw results to $RESULTS"
	install
	build
	conditions >"$RESULTS"
	# One cluster at a time: each has the machine to itself.
	if [[ " $SYSTEMS " == *" quorumbus"* ]]; then bench_quorumbus || failed=1; fi
	if [[ " $SYSTEMS " == *" rabbit-"* ]]; then bench_rabbit || failed=1; fi
	if [[ " $SYSTEMS " == *" nats "* ]]; then bench_nats || failed=1; fi
	stop_all
	if [ "$REPORT" = 1 ]; then
		"$BIN/compare" report -raw "$RESULTS" -md "$ROOT/docs/benchmarks.md" -png "$ROOT/docs/img/bench-compare.png"
	else
		"$BIN/compare" report -raw "$RESULTS"
	fi
	log "raw results: $RESULTS; client log: $CLIENT_LOG"
	[ "$failed" = 0 ] || die "some runs failed (marked # FAILED in $RESULTS)"
}

main "$@"
