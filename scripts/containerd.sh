#!/usr/bin/env bash
# Start, stop or check a private containerd for sandpit: its own root, state,
# sockets and plugin dir, CRI disabled, so it runs beside any system daemon.
#
#   scripts/containerd.sh start|stop|status|address
#
# Environment: SANDPIT_CONTAINERD_DIR (state and sockets, default /run/sandpit/containerd)
#              SANDPIT_CONTAINERD_ROOT (persistent data, default /var/lib/sandpit/containerd)
set -euo pipefail

run_dir=${SANDPIT_CONTAINERD_DIR:-/run/sandpit/containerd}
root_dir=${SANDPIT_CONTAINERD_ROOT:-/var/lib/sandpit/containerd}
sock="$run_dir/containerd.sock"
pidfile="$run_dir/containerd.pid"
log="$run_dir/containerd.log"

say() { echo "containerd.sh: $*" >&2; }

running() {
	[ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null
}

answers() {
	# ctr talks gRPC: a version reply means the daemon is serving.
	ctr --address "$sock" version >/dev/null 2>&1
}

start() {
	if running && answers; then
		say "already running (pid $(cat "$pidfile")) at $sock"
		echo "$sock"
		return 0
	fi
	command -v containerd >/dev/null || { say "containerd is not installed (hint: sudo scripts/install-deps.sh)"; exit 1; }
	command -v runc >/dev/null || { say "runc is not installed (hint: sudo scripts/install-deps.sh)"; exit 1; }
	mkdir -p "$run_dir" "$root_dir"
	chmod 0711 "$run_dir" "$root_dir"
	cat >"$run_dir/config.toml" <<TOML
version = 2
root = "$root_dir/root"
state = "$run_dir/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]

[grpc]
  address = "$sock"

[ttrpc]
  address = "$sock.ttrpc"

[debug]
  address = "$run_dir/debug.sock"

[plugins."io.containerd.internal.v1.opt"]
  path = "$root_dir/opt"
TOML
	rm -f "$sock" "$sock.ttrpc" "$run_dir/debug.sock"
	# setsid: the daemon must outlive this script and its caller's session.
	setsid containerd --config "$run_dir/config.toml" >>"$log" 2>&1 </dev/null &
	echo $! >"$pidfile"
	for _ in $(seq 1 100); do
		if answers; then
			say "started (pid $(cat "$pidfile")) at $sock; log: $log"
			echo "$sock"
			return 0
		fi
		running || break
		sleep 0.1
	done
	say "containerd did not come up; last log lines:"
	tail -n 20 "$log" >&2 || true
	exit 1
}

stop() {
	if running; then
		kill "$(cat "$pidfile")"
		for _ in $(seq 1 50); do running || break; sleep 0.1; done
		running && kill -9 "$(cat "$pidfile")" 2>/dev/null || true
		say "stopped"
	fi
	rm -f "$pidfile"
}

case "${1:-}" in
start) start ;;
stop) stop ;;
status)
	if running && answers; then say "running at $sock"; else say "not running"; exit 1; fi
	;;
address) echo "$sock" ;;
*)
	echo "usage: $0 start|stop|status|address" >&2
	exit 2
	;;
esac
