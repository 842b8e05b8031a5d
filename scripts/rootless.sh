#!/usr/bin/env bash
# Rootless containerd for sandpit: a non-root user runs containerd under
# rootlesskit, and sandpit inside the same namespaces. scripts/serve.sh does
# all of this by itself when run as a normal user; these are its pieces.
#
#   scripts/rootless.sh check             # as USER: can this user run it, and with limits enforced?
#   scripts/rootless.sh start             # as USER: start rootlesskit + containerd, print the socket
#   scripts/rootless.sh exec -- CMD...    # as USER: run CMD inside the rootless namespaces (e.g. sandpit serve)
#   scripts/rootless.sh stop|status|address
#   sudo scripts/rootless.sh setup USER   # once, as root, if check says so: packages, /etc/subuid and /etc/subgid
#
# How it works (see RUNTIME-NOTES.md, "Rootless containerd"): rootlesskit
# makes a user namespace that maps the user to root plus a subuid range, with
# --net=host (every sandbox still gets its own empty network namespace;
# slirp4netns would need /dev/net/tun, which is root-only on these hosts) and
# copy-up of /etc, /run and /var/lib so containerd can write there. Sockets
# and state live under $SANDPIT_ROOTLESS_DIR (default ~/.local/share/sandpit/rootless),
# outside the copied-up /run, so they are reachable from both sides.
#
# Limits: on cgroup v2 with systemd, the daemon runs as a transient unit of
# the user's own systemd manager (systemd-run --user, Delegate=yes), so the
# memory, pids and cpu controllers that systemd delegates to user@UID.service
# are the daemon's to hand out: it moves itself into a leaf cgroup ("daemon")
# of its unit, and runc creates each sandbox's cgroup beside it, under the
# unit (sandpit gives runc a relative cgroupsPath, which runc resolves under
# the parent of its own cgroup). On cgroup v1 or hybrid hosts rootless runc
# cannot create cgroups at all, so sandpit refuses to run code unless started
# with --allow-unenforced-limits (weaker rlimit fallbacks, listed in every
# result). `check` and `sandpit doctor` say which applies.
#
# sandpit must run inside the namespaces (`exec`): it chowns per-run files to
# the sandbox user and bind-mounts them, which only works where that user is
# mapped. There it detects rootless mode by itself.
set -euo pipefail

dir=${SANDPIT_ROOTLESS_DIR:-$HOME/.local/share/sandpit/rootless}
sock="$dir/containerd.sock"
pidfile="$dir/rootlesskit.pid"
childpid="$dir/child.pid"
log="$dir/containerd.log"

unit=sandpit-containerd.service
self=$(readlink -f "$0")
# runc and the uid map helpers live in sbin, which a normal user's PATH may lack.
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"

say() { echo "rootless.sh: $*" >&2; }

# cgroup_v2: the unified hierarchy is mounted at /sys/fs/cgroup.
cgroup_v2() { [ -f /sys/fs/cgroup/cgroup.controllers ]; }

# systemd_user: this user's systemd manager answers (a login session with
# pam_systemd, or lingering: `loginctl enable-linger USER`).
systemd_user() {
	export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/run/user/$(id -u)}
	command -v systemctl >/dev/null && systemctl --user show-environment >/dev/null 2>&1
}

# sandpit_bin is the sandpit binary of this checkout (built if missing).
sandpit_bin() {
	local repo bin
	repo=$(cd "$(dirname "$0")/.." && pwd)
	bin=${SANDPIT_BIN:-$repo/bin/sandpit}
	if [ ! -x "$bin" ]; then
		(cd "$repo" && PATH="/usr/local/go/bin:$PATH" go build -o "$bin" ./cmd/sandpit) >&2
	fi
	echo "$bin"
}

# check says whether this user can run a rootless containerd here, and
# whether sandboxes' limits can be enforced; it exits non-zero, with what to
# do, only when containerd cannot start at all.
check() {
	local user fail=0 userdir
	user=$(id -un)
	[ "$(id -u)" -ne 0 ] || { say "running as root: use scripts/containerd.sh (rootful) instead"; return 1; }
	for bin in rootlesskit newuidmap newgidmap containerd runc; do
		command -v "$bin" >/dev/null || { say "$bin is not installed (fix, as root: sudo apt-get install --no-install-recommends rootlesskit uidmap; or sudo $self setup $user)"; fail=1; }
	done
	for f in /etc/subuid /etc/subgid; do
		if ! grep -qE "^($user|$(id -u)):[0-9]+:[0-9]+" "$f" 2>/dev/null; then
			say "$user has no subordinate id range in $f, which rootlesskit maps into its user namespace (fix, as root: sudo usermod --add-subuids 100000-165535 --add-subgids 100000-165535 $user, picking a range no other user has; or sudo $self setup $user)"
			fail=1
		fi
	done
	[ "$fail" -eq 0 ] || return 1
	if ! cgroup_v2; then
		say "limits: this host mounts cgroup v1 (or hybrid), where rootless runc cannot create cgroups: sandpit will refuse to run code rootless here. Run it as root (sudo scripts/serve.sh), or boot with systemd.unified_cgroup_hierarchy=1 (cgroup v2)."
		return 0
	fi
	if ! systemd_user; then
		say "limits: no systemd user manager answers for $user (XDG_RUNTIME_DIR=$XDG_RUNTIME_DIR), so no cgroup is delegated to it: sandpit will refuse to run code. Log in through a systemd session, or as root: sudo loginctl enable-linger $user."
		return 0
	fi
	userdir=/sys/fs/cgroup/user.slice/user-$(id -u).slice/user@$(id -u).service
	local ctl
	ctl=$(cat "$userdir/cgroup.controllers" 2>/dev/null || true)
	for c in memory pids cpu; do
		case " $ctl " in
		*" $c "*) ;;
		*) say "limits: systemd does not delegate the $c controller to $user ($userdir has: ${ctl:-nothing}): sandpit will refuse to run code. Fix, as root: mkdir -p /etc/systemd/system/user@.service.d && printf '[Service]\\nDelegate=cpu cpuset io memory pids\\n' > /etc/systemd/system/user@.service.d/delegate.conf && systemctl daemon-reload, then log in again."; return 0 ;;
		esac
	done
	say "ok: cgroup v2, memory, pids and cpu delegated to $user by systemd"
}

setup() {
	local user=${1:?usage: setup USER}
	[ "$(id -u)" -eq 0 ] || { say "setup needs root"; exit 1; }
	"$(dirname "$self")/install-deps.sh" --rootless --no-go
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
	check || exit 1
	mkdir -p "$dir/root" "$dir/state"
	chmod 0700 "$dir"
	# The private daemon's config, written by sandpit itself (one place for
	# it): root, state, sockets and plugins all under $dir.
	"$(sandpit_bin)" containerd config --private-dir "$dir" --private-root "$dir" >"$dir/config.toml"
	rm -f "$sock" "$sock.ttrpc" "$dir/debug.sock" "$pidfile" "$childpid"
	if cgroup_v2 && systemd_user; then
		# A unit of the user's manager with Delegate=yes: its cgroup, and
		# the controllers systemd delegated to the user, are the daemon's.
		systemctl --user stop "$unit" >/dev/null 2>&1 || true
		systemctl --user reset-failed "$unit" >/dev/null 2>&1 || true
		systemd-run --user --quiet --collect --unit="$unit" --property=Delegate=yes \
			--property=StandardOutput="append:$log" --property=StandardError="append:$log" \
			--setenv=PATH="$PATH" --setenv=SANDPIT_ROOTLESS_DIR="$dir" --setenv=HOME="$HOME" \
			"$self" _daemon
	else
		setsid "$self" _daemon >>"$log" 2>&1 </dev/null &
	fi
	for _ in $(seq 1 300); do
		if [ -S "$sock" ] && ctr --address "$sock" version >/dev/null 2>&1; then
			say "started (rootlesskit pid $(cat "$pidfile")) at $sock; log: $log"
			echo "$sock"
			return 0
		fi
		if [ -f "$pidfile" ] && ! running; then break; fi
		sleep 0.2
	done
	say "rootless containerd did not come up; last log lines:"
	tail -n 20 "$log" >&2 || true
	exit 1
}

# daemon runs rootlesskit and, inside it, containerd in the foreground.
daemon() {
	local cg
	# In a delegated unit, move into a leaf cgroup of our own: runc puts
	# sandbox cgroups under the parent of its own cgroup (the unit's), and
	# a cgroup holding processes cannot enable controllers for children.
	if [ -n "${INVOCATION_ID:-}" ] && cgroup_v2; then
		cg=/sys/fs/cgroup$(sed -n 's/^0:://p' /proc/self/cgroup)
		if [ -w "$cg/cgroup.procs" ]; then
			mkdir -p "$cg/daemon"
			echo $$ >"$cg/daemon/cgroup.procs"
		fi
	fi
	echo $$ >"$pidfile"
	# Inside the child: a fresh /run/containerd (the copy-up of /run carries
	# the host's, owned by real root), then containerd in the foreground.
	exec rootlesskit --net=host --copy-up=/etc --copy-up=/run --copy-up=/var/lib \
		--state-dir="$dir/rootlesskit" \
		sh -c 'rm -rf /run/containerd /run/sandpit && mkdir -p /run/containerd /run/sandpit && echo $$ >"$1" && exec containerd --config "$2"' \
		sh "$childpid" "$dir/config.toml"
}

stop() {
	if cgroup_v2 && systemd_user && systemctl --user is-active --quiet "$unit"; then
		systemctl --user stop "$unit"
		say "stopped"
	elif running; then
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
check) check ;;
start) start ;;
_daemon) daemon ;;
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
	echo "usage: $0 check | start | stop | status | address | exec -- CMD... | setup USER" >&2
	exit 2
	;;
esac
