#!/usr/bin/env bash
# A private ory/hydra (OAuth 2.1 / OpenID Connect authorization server) for
# sandpit's OAuth tests: real tokens, real keys, real revocation.
#
#   scripts/hydra.sh build                 build it (once) and print the binary's path
#   scripts/hydra.sh start DIR [--access-token-ttl DURATION] [--owner PID]
#                                          start one whose state is DIR; prints
#                                          ISSUER=… and ADMIN=… (shell assignments);
#                                          with --owner it stops when PID exits
#                                          (a test killed before its cleanup)
#   scripts/hydra.sh stop DIR              stop the one started in DIR
#
# hydra is built from the Go module proxy (github.com/ory/hydra/v2 at
# $version, as a tool of a wrapper module) into a cache outside the checkout:
# $SANDPIT_TOOLS_DIR, default /var/cache/sandpit/tools as root, else
# ${XDG_CACHE_HOME:-~/.cache}/sandpit/tools. The build needs cgo (SQLite).
#
# The server listens on 127.0.0.1 only, on two ports picked free at start
# (public: the issuer; admin: clients, login/consent, introspection), issues
# JWT access tokens, keeps everything in memory (DSN "memory": nothing
# survives stop), and runs with --dev (plain HTTP on loopback: never expose
# it). Login and consent are left to the caller (a test accepts them through
# the admin API); their URLs point at a port nothing listens on.
set -euo pipefail
export PATH="/usr/local/go/bin:$PATH"
version=v2.3.0
# The pop fork hydra $version's go.mod replaces gobuffalo/pop with.
pop=v6.2.1-0.20241121111754-e5dfc0f3344b

if [ "$(id -u)" -eq 0 ]; then
	tools=${SANDPIT_TOOLS_DIR:-/var/cache/sandpit/tools}
else
	tools=${SANDPIT_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/sandpit/tools}
fi
moddir=$tools/hydra-$version
bin=$moddir/hydra

die() {
	echo "hydra.sh: $*" >&2
	exit 1
}

build() {
	if [ -x "$bin" ]; then
		echo "$bin"
		return
	fi
	mkdir -p "$moddir"
	# One builder at a time: parallel test packages may all ask at once.
	exec 9>"$moddir/.lock"
	flock 9
	if [ ! -x "$bin" ]; then
		echo "hydra.sh: building ory/hydra $version into $moddir (cold: several minutes)" >&2
		local start=$SECONDS
		(
			cd "$moddir"
			[ -f go.mod ] || go mod init sandpit.local/hydra-tool >&2
			GOFLAGS=-mod=mod go get -tool "github.com/ory/hydra/v2@$version" >&2
			# hydra's own go.mod replaces pop with ory's fork; a replace
			# only counts in the main module, so this one repeats it
			# (without it: "p.conn.Store.SQLDB undefined").
			go mod edit -replace "github.com/gobuffalo/pop/v6=github.com/ory/pop/v6@$pop" >&2
			# sqlite: the in-memory DSN is SQLite (mattn/go-sqlite3, cgo);
			# without the tag hydra knows only network databases.
			GOFLAGS=-mod=mod CGO_ENABLED=1 go build -tags sqlite,sqlite_omit_load_extension \
				-o "$bin.tmp" github.com/ory/hydra/v2 >&2
			mv "$bin.tmp" "$bin"
		)
		echo "hydra.sh: built in $((SECONDS - start))s" >&2
	fi
	flock -u 9
	echo "$bin"
}

# freeport prints a loopback TCP port nothing listens on now.
freeport() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

start() {
	local dir=${1:-}
	[ -n "$dir" ] || die "usage: $0 start DIR [--access-token-ttl DURATION] [--owner PID]"
	shift
	local ttl=1h owner=
	while [ $# -gt 0 ]; do
		case "$1" in
		--access-token-ttl)
			ttl=${2:?--access-token-ttl needs a duration}
			shift 2
			;;
		--owner)
			owner=${2:?--owner needs a pid}
			shift 2
			;;
		*) die "unknown option $1" ;;
		esac
	done
	local exe
	exe=$(build)
	mkdir -p "$dir"
	dir=$(cd "$dir" && pwd)
	if [ -f "$dir/hydra.pid" ] && kill -0 "$(cat "$dir/hydra.pid")" 2>/dev/null; then
		die "one is already running in $dir (pid $(cat "$dir/hydra.pid")): $0 stop $dir"
	fi
	local attempt public admin secret pid
	secret=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
	# The ports are free when picked and taken a moment later: another
	# program can get there first, so a start whose ports were taken is
	# tried again with new ones.
	for attempt in 1 2 3 4 5; do
		public=$(freeport)
		admin=$(freeport)
		[ "$public" != "$admin" ] || continue
		cat >"$dir/hydra.yml" <<EOF
serve:
  public: {host: 127.0.0.1, port: $public}
  admin: {host: 127.0.0.1, port: $admin}
dsn: memory
urls:
  self: {issuer: "http://127.0.0.1:$public"}
  login: "http://127.0.0.1:1/login"
  consent: "http://127.0.0.1:1/consent"
secrets: {system: ["$secret"]}
strategies: {access_token: jwt}
ttl: {access_token: $ttl}
log: {level: warn}
sqa: {opt_out: true}
EOF
		chmod 600 "$dir/hydra.yml"
		# setsid: stop kills the whole group; the server outlives this
		# script and must not hold the caller's stdout open.
		setsid env -u DSN "$exe" serve all --dev --sqa-opt-out -c "$dir/hydra.yml" \
			</dev/null >"$dir/hydra.log" 2>&1 &
		pid=$!
		echo "$pid" >"$dir/hydra.pid"
		local deadline=$((SECONDS + 120)) up=
		while [ $SECONDS -lt $deadline ]; do
			if ! kill -0 "$pid" 2>/dev/null; then
				break
			fi
			if curl -fsS -o /dev/null "http://127.0.0.1:$admin/health/ready" 2>/dev/null &&
				curl -fsS -o /dev/null "http://127.0.0.1:$public/.well-known/openid-configuration" 2>/dev/null; then
				up=1
				break
			fi
			sleep 0.2
		done
		if [ -n "$up" ]; then
			if [ -n "$owner" ]; then
				# A watcher that stops hydra when its owner is gone.
				setsid bash -c 'while kill -0 "$1" 2>/dev/null && kill -0 "$2" 2>/dev/null; do sleep 1; done; kill -- "-$2" 2>/dev/null' \
					hydra-owner "$owner" "$pid" </dev/null >/dev/null 2>&1 &
			fi
			echo "ISSUER=http://127.0.0.1:$public"
			echo "ADMIN=http://127.0.0.1:$admin"
			return
		fi
		if kill -0 "$pid" 2>/dev/null; then
			kill -- "-$pid" 2>/dev/null || true
			die "hydra did not become ready within 120s (log: $dir/hydra.log)"
		fi
		if ! grep -qi "address already in use" "$dir/hydra.log"; then
			cat "$dir/hydra.log" >&2
			die "hydra exited at start (log: $dir/hydra.log)"
		fi
		echo "hydra.sh: ports $public/$admin taken, trying others" >&2
	done
	die "no free ports after 5 tries"
}

stop() {
	local dir=${1:-}
	[ -n "$dir" ] || die "usage: $0 stop DIR"
	[ -f "$dir/hydra.pid" ] || return 0
	local pid
	pid=$(cat "$dir/hydra.pid")
	if kill -0 "$pid" 2>/dev/null; then
		kill -- "-$pid" 2>/dev/null || kill "$pid" 2>/dev/null || true
		local deadline=$((SECONDS + 30))
		while kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $deadline ]; do
			sleep 0.1
		done
		kill -9 -- "-$pid" 2>/dev/null || true
	fi
	rm -f "$dir/hydra.pid"
}

case "${1:-}" in
build) build ;;
start)
	shift
	start "$@"
	;;
stop) stop "${2:-}" ;;
*)
	echo "usage: $0 build | start DIR [--access-token-ttl DURATION] [--owner PID] | stop DIR" >&2
	exit 2
	;;
esac
