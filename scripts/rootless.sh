#!/usr/bin/env bash
# Rootless containerd for sandpit: a non-root user runs containerd under
# rootlesskit, and sandpit inside the same namespaces.
#
#   sudo scripts/rootless.sh setup USER   # once, as root: packages, /etc/subuid and /etc/subgid ranges
#   scripts/rootless.sh start             # as USER: start rootlesskit + containerd, print the socket
#   scripts/rootless.sh exec -- CMD...    # as USER: run CMD inside the rootless namespaces (e.g. sandpit serve)
#   scripts/rootless.sh stop|status|address
#
# How it works (see RUNTIME-NOTES.md, "Rootless containerd"): rootlesskit
# makes a user namespace that maps the user to root plus a subuid range, with
# --net=host (every sandbox still gets its own empty network namespace;
# slirp4netns would need /dev/net/tun, which is root-only on these hosts) and
# copy-up of /etc, /run and /var/lib so containerd can write there. Sockets
# and state live under $SANDPIT_ROOTLESS_DIR (default ~/.local/share/sandpit/rootless),
# outside the copied-up /run, so they are reachable from both sides.
#
# sandpit must run inside the namespaces (`exec`): it chowns per-run files to
# the sandbox user and bind-mounts them, which only works where that user is
# mapped. There it detects rootless mode by itself. On cgroup v1 or hybrid
# hosts rootless runc cannot create cgroups, so sandpit refuses to run code
# unless started with --allow-unenforced-limits (weaker rlimit fallbacks,
# listed in every result). `sandpit doctor` says which applies.
set -euo pipefail

dir=${SANDPIT_ROOTLESS_DIR:-$HOME/.local/share/sandpit/rootless}
sock="$dir/containerd.sock"
pidfile="$dir/rootlesskit.pid"
childpid="$dir/child.pid"
log="$dir/containerd.log"

say() { echo "rootless.sh: $*" >&2; }

setup() {
	local user=${1:?usage: setup USER}
	[ "$(id -u)" -eq 0 ] || { say "setup needs root"; exit 1; }
	for bin in rootlesskit newuidmap containerd runc; do
		command -v "$bin" >/dev/null || {
			say "installing rootlesskit uidmap containerd runc"
			apt-get install -y rootlesskit uidmap containerd runc >/dev/null
			break
		}
	done
	id "$user" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$user"
	# A 65536-id range per file, after every range already handed out, so it
	# overlaps neither another user's nor sandpit's rootful range (0x70000000+).
	for f in /etc/subuid /etc/subgid; do
		touch "$f"
		if ! grep -q "^$user:" "$f"; then
			local next
			next=$(awk -F: 'BEGIN{m=100000} {e=$2+$3; if (e>m) m=e} END{print m}' "$f")
			echo "$user:$next:65536" >>"$f"
		fi
	done
	say "user $user has $(grep "^$user:" /etc/subuid) in /etc/subuid; now, as $user: scripts/rootless.sh start"
}

running() { [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }

start() {
	[ "$(id -u)" -ne 0 ] || { say "start runs as the non-root user (root can use scripts/containerd.sh)"; exit 1; }
	if running; then
		say "already running (rootlesskit pid $(cat "$pidfile")) at $sock"
		echo "$sock"
		return 0
	fi
	command -v rootlesskit >/dev/null || { say "rootlesskit is not installed (hint: sudo $0 setup $(id -un))"; exit 1; }
	grep -q "^$(id -un):" /etc/subuid || { say "no /etc/subuid range for $(id -un) (hint: sudo $0 setup $(id -un))"; exit 1; }
	mkdir -p "$dir/root" "$dir/state"
	chmod 0700 "$dir"
	cat >"$dir/config.toml" <<TOML
version = 2
root = "$dir/root"
state = "$dir/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]

[grpc]
  address = "$sock"

[ttrpc]
  address = "$sock.ttrpc"

[debug]
  address = "$dir/debug.sock"

[plugins."io.containerd.internal.v1.opt"]
  path = "$dir/opt"
TOML
	rm -f "$sock" "$sock.ttrpc" "$dir/debug.sock"
	# Inside the child: a fresh /run/containerd (the copy-up of /run carries
	# the host's, owned by real root), then containerd in the foreground.
	setsid rootlesskit --net=host --copy-up=/etc --copy-up=/run --copy-up=/var/lib \
		--state-dir="$dir/rootlesskit" \
		sh -c 'rm -rf /run/containerd /run/sandpit && mkdir -p /run/containerd /run/sandpit && echo $$ >"$1" && exec containerd --config "$2"' \
		sh "$childpid" "$dir/config.toml" >>"$log" 2>&1 </dev/null &
	echo $! >"$pidfile"
	for _ in $(seq 1 100); do
		if [ -S "$sock" ] && ctr --address "$sock" version >/dev/null 2>&1; then
			say "started (rootlesskit pid $(cat "$pidfile")) at $sock; log: $log"
			echo "$sock"
			return 0
		fi
		running || break
		sleep 0.1
	done
	say "rootless containerd did not come up; last log lines:"
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
	rm -f "$pidfile" "$childpid"
}

# enter runs a command in the child's user and mount namespaces, as its root
# (the invoking user), keeping the host's network (rootlesskit --net=host).
enter() {
	running || { say "not running (hint: $0 start)"; exit 1; }
	exec nsenter --user --mount --preserve-credentials --target "$(cat "$childpid")" --wd="$PWD" \
		env SANDPIT_ROOTLESS=1 SANDPIT_CONTAINERD_ADDRESS="$sock" "$@"
}

case "${1:-}" in
setup) shift; setup "$@" ;;
start) start ;;
stop) stop ;;
exec)
	shift
	[ "${1:-}" = -- ] && shift
	enter "$@"
	;;
status)
	if running && ctr --address "$sock" version >/dev/null 2>&1; then say "running at $sock"; else say "not running"; exit 1; fi
	;;
address) echo "$sock" ;;
*)
	echo "usage: $0 setup USER | start | stop | status | address | exec -- CMD..." >&2
	exit 2
	;;
esac
