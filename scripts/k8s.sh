#!/usr/bin/env bash
# A private, real Kubernetes control plane (etcd + kube-apiserver, nothing
# else) for sandpit's cluster tests: real admission, real RBAC, real
# optimistic concurrency, real CRDs. No mocks.
#
#   scripts/k8s.sh build                 build both (once) and print the binaries' dir
#   scripts/k8s.sh up DIR [--owner PID]  start a control plane whose state is DIR;
#                                        prints KUBECONFIG=… APISERVER=… ETCD=…
#                                        (shell assignments); with --owner it
#                                        stops when PID exits (a test killed
#                                        before its cleanup)
#   scripts/k8s.sh down DIR              stop the one started in DIR
#
# What runs: etcd and kube-apiserver, nothing else. No controller manager
# (nothing creates a namespace's "default" ServiceAccount, collects garbage
# or signs CSRs), no scheduler, no kubelet, no kube-proxy: a test that
# needs such an object creates it itself. Each up starts from an empty
# etcd. Both listen on 127.0.0.1 only, on ports picked free at start; etcd
# speaks plain HTTP there (loopback, a test's data), the apiserver TLS with
# a CA, serving and client certificates made with openssl in DIR/pki:
# DIR/kubeconfig is an admin (group system:masters), DIR/nobody.kubeconfig
# a user in no group bound to no role. Authorization Node,RBAC, default
# admission plugins, no cloud provider, a service-account signing key, the
# Service range a documentation prefix. Nothing on the host changes but DIR
# and the loopback ports. Processes are recorded in DIR/NAME.pid as "PID
# STARTTIME" and only a process with both is ever signalled (never one found
# by name). A stopped daemon may stay a zombie until init reaps it (this
# machine's init does so within ~1.5 s); it holds nothing by then.
#
# Measured (2 cores shared with another engineer's container tests, build
# under nice 10): cold build (empty module and build caches for these
# modules) 4m05s wall, 6m10s user + 1m18s sys CPU, 39 MB etcd + 119 MB
# kube-apiserver; a rebuild with the Go caches warm 8-12 s; build when
# built 5 ms. Warm up -> /readyz 200: 2.7-4.6 s (certificates 0.3 s, etcd
# healthy ~1 s, apiserver ready ~2.4 s), 6-8 s each for 4 at once; down
# 1.2-1.4 s; killing the owner (even the test binary, SIGKILL, midway
# through up) stops everything within ~2.1 s (the watcher polls each
# second). Nothing here needs root (checked as nobody).
#
# Both are built from the Go module proxy into a cache outside the checkout:
# $SANDPIT_TOOLS_DIR, default /var/cache/sandpit/tools as root, else
# ${XDG_CACHE_HOME:-~/.cache}/sandpit/tools, in a directory named after the
# version key ($key below: change it whenever what gets built changes).
#   kube-apiserver: a wrapper module requiring k8s.io/kubernetes $k8s, with
#     the 33 `=> ./staging/...` replaces of kubernetes' own go.mod mapped to
#     the published k8s.io/<name> $staging modules (a replace only counts in
#     the main module), the command as a `tool` of the wrapper.
#   etcd: go.etcd.io/etcd/server/v3 $etcd in a wrapper of its own (its
#     grpc/otel versions are not kubernetes'). Not Debian's etcd 3.4: k8s
#     1.37 needs 3.5+ (with 3.4 a watch without a resourceVersion fails "Too
#     large resource version").
set -euo pipefail
export PATH="/usr/local/go/bin:$PATH"
# A go.work above the cache must not take the wrapper modules in.
export GOWORK=off
k8s=v1.37.2
staging=v0.37.2
etcd=v3.6.16
# Bump rev when the build recipe changes without a version changing.
rev=1
key=k8s-$k8s-etcd-$etcd-r$rev

if [ "$(id -u)" -eq 0 ]; then
	tools=${SANDPIT_TOOLS_DIR:-/var/cache/sandpit/tools}
else
	tools=${SANDPIT_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/sandpit/tools}
fi
moddir=$tools/$key
bindir=$moddir/bin

die() {
	echo "k8s.sh: $*" >&2
	exit 1
}

built() {
	[ -x "$bindir/kube-apiserver" ] && [ -x "$bindir/etcd" ]
}

build() {
	if built; then
		echo "$bindir"
		return
	fi
	mkdir -p "$moddir"
	# One builder at a time: parallel test packages may all ask at once.
	exec 9>"$moddir/.lock"
	flock 9
	if ! built; then
		echo "k8s.sh: building kube-apiserver $k8s and etcd $etcd into $moddir (cold: about 4 minutes on two cores)" >&2
		local start=$SECONDS
		mkdir -p "$bindir"
		build_etcd
		build_apiserver
		echo "k8s.sh: built in $((SECONDS - start))s" >&2
	fi
	flock -u 9
	exec 9>&-
	echo "$bindir"
}

# gonice runs the go command at a lower priority: a cold build takes minutes of
# both cores, and tests may be running next to it.
gonice() {
	nice -n 10 go "$@"
}

build_etcd() {
	[ -x "$bindir/etcd" ] && return
	local m=$moddir/etcd-mod
	mkdir -p "$m"
	(
		cd "$m"
		rm -f go.mod go.sum
		go mod init sandpit.local/etcd-tool >&2
		GOFLAGS=-mod=mod gonice get -tool "go.etcd.io/etcd/server/v3@$etcd" >&2
		CGO_ENABLED=0 gonice build -trimpath -o "$bindir/etcd.tmp" go.etcd.io/etcd/server/v3 >&2
		mv "$bindir/etcd.tmp" "$bindir/etcd"
	)
}

build_apiserver() {
	[ -x "$bindir/kube-apiserver" ] && return
	local m=$moddir/kubernetes-mod
	mkdir -p "$m"
	(
		cd "$m"
		rm -f go.mod go.sum
		go mod init sandpit.local/kubernetes-tool >&2
		go mod edit -require "k8s.io/kubernetes@$k8s" >&2
		# kubernetes requires its staging modules at v0.0.0 and replaces
		# them with directories of its own tree; here each is the
		# published module of the same release.
		local gomod name
		gomod=$(go mod download -json "k8s.io/kubernetes@$k8s" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
		[ -f "$gomod" ] || die "no go.mod for k8s.io/kubernetes@$k8s"
		sed -n 's|^[[:space:]]*\(k8s.io/[^ ]*\) => \./staging/.*|\1|p' "$gomod" | while read -r name; do
			go mod edit -replace "$name=$name@$staging" >&2
		done
		[ "$(grep -c "=> k8s.io/.* $staging" go.mod)" -ge 30 ] || die "too few staging replaces found in $gomod"
		go mod edit -tool k8s.io/kubernetes/cmd/kube-apiserver >&2
		gonice mod tidy >&2
		local ld="-s -w"
		local p
		# What kubernetes' hack/lib/version.sh stamps: the apiserver
		# reports it (/version) and derives its emulation version from it.
		for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
			ld="$ld -X $p.gitVersion=$k8s -X $p.gitMajor=$(echo "${k8s#v}" | cut -d. -f1)"
			ld="$ld -X $p.gitMinor=$(echo "$k8s" | cut -d. -f2) -X $p.gitTreeState=clean"
			ld="$ld -X $p.buildDate=1970-01-01T00:00:00Z"
		done
		CGO_ENABLED=0 gonice build -trimpath -ldflags "$ld" -o "$bindir/kube-apiserver.tmp" \
			k8s.io/kubernetes/cmd/kube-apiserver >&2
		mv "$bindir/kube-apiserver.tmp" "$bindir/kube-apiserver"
	)
}

# freeport prints a loopback TCP port nothing listens on now.
freeport() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# starttime prints the start time of process $1 (field 22 of its stat, in
# clock ticks since boot), or nothing if there is no such live process. A
# pid with the start time recorded at start is the process that was
# started, not a later one that got its number.
starttime() {
	local stat
	read -r stat 2>/dev/null <"/proc/$1/stat" || return 0
	# The fields after the command name, which is in parentheses and may
	# hold anything: state is field 3, starttime field 22.
	# shellcheck disable=SC2086 # split on purpose: numbers and a letter
	set -- ${stat##*) }
	case "$1" in Z | X) return 0 ;; esac
	echo "${20}"
}

# ingroup prints the pids of live processes in process group $1 (each
# process here is started with setsid: its group is its own and holds only
# it and what it started).
ingroup() {
	local f stat pgrp=$1
	for f in /proc/[0-9]*/stat; do
		read -r stat 2>/dev/null <"$f" || continue
		# shellcheck disable=SC2086 # as in starttime
		set -- ${stat##*) }
		[ "$3" = "$pgrp" ] || continue
		case "$1" in Z | X) continue ;; esac
		f=${f#/proc/}
		echo "${f%/stat}"
	done
}

# record writes DIR/NAME.pid: "PID STARTTIME".
record() {
	local dir=$1 name=$2 pid=$3 st
	st=$(starttime "$pid")
	[ -n "$st" ] || return 1
	echo "$pid $st" >"$dir/$name.pid"
}

# recorded prints the pid in DIR/NAME.pid if that process is still the one
# recorded there (same start time), else nothing.
recorded() {
	local f=$1/$2.pid pid st
	[ -f "$f" ] || return 0
	read -r pid st <"$f" || return 0
	[ -n "$pid" ] && [ -n "$st" ] || return 0
	[ "$(starttime "$pid")" = "$st" ] && echo "$pid"
	return 0
}

# pki makes, with openssl, in DIR/pki: a CA, the apiserver's serving
# certificate (127.0.0.1, localhost, and the in-cluster names), an admin
# client certificate (group system:masters, which RBAC lets do anything), a
# second client certificate for no group at all (a test's "who has no
# rights"), and the service-account signing key pair.
pki() {
	local p=$1/pki svcip=$2
	mkdir -p "$p"
	chmod 700 "$p"
	(
		cd "$p"
		umask 077
		openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \
			-keyout ca.key -out ca.crt -subj "/CN=sandpit-test-ca" 2>/dev/null
		cert() { # name subject extensions
			openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
				-keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null
			printf '%s\n' "$3" >"$1.ext"
			openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial \
				-days 3650 -extfile "$1.ext" -out "$1.crt" 2>/dev/null
			rm -f "$1.csr" "$1.ext"
		}
		cert apiserver "/CN=kube-apiserver" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,DNS:localhost,IP:$svcip,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
		local client="basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
		cert admin "/O=system:masters/CN=sandpit-admin" "$client"
		cert nobody "/CN=sandpit-nobody" "$client"
		openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out sa.key 2>/dev/null
		openssl pkey -in sa.key -pubout -out sa.pub 2>/dev/null
	)
}

# kubeconfig writes a kubeconfig for client certificate $3 (admin, nobody)
# of the control plane in $1 at server $2.
kubeconfig() {
	local dir=$1 server=$2 user=$3
	b64() { base64 -w0 <"$1"; }
	cat <<EOF
apiVersion: v1
kind: Config
clusters:
- name: sandpit-test
  cluster:
    server: $server
    certificate-authority-data: $(b64 "$dir/pki/ca.crt")
users:
- name: $user
  user:
    client-certificate-data: $(b64 "$dir/pki/$user.crt")
    client-key-data: $(b64 "$dir/pki/$user.key")
contexts:
- name: sandpit-test
  context: {cluster: sandpit-test, user: $user}
current-context: sandpit-test
EOF
}

# wait_ready waits until URL answers 200 (curl args after it) while pid
# $2 lives; returns 1 if the process died, 2 at the deadline.
wait_ready() {
	local url=$1 pid=$2 deadline=$((SECONDS + $3))
	shift 3
	while [ $SECONDS -lt $deadline ]; do
		[ -n "$(starttime "$pid")" ] || return 1
		if curl -fsS -o /dev/null --max-time 5 "$@" "$url" 2>/dev/null; then
			return 0
		fi
		sleep 0.1
	done
	return 2
}

# The service range: a documentation prefix (RFC 5737 TEST-NET-2), used by
# nothing on a host; no Service gets traffic here anyway (no kube-proxy).
svcrange=198.51.100.0/24
svcip=198.51.100.1

start_etcd() {
	local dir=$1 client peer pid rc
	for _ in 1 2 3 4 5; do
		client=$(freeport)
		peer=$(freeport)
		[ "$client" != "$peer" ] || continue
		rm -rf "$dir/etcd"
		# --unsafe-no-fsync: a test's data need not survive a power cut,
		# and fsyncs on a shared disk are most of etcd's latency.
		setsid "$bindir/etcd" --name default --data-dir "$dir/etcd" \
			--listen-client-urls "http://127.0.0.1:$client" --advertise-client-urls "http://127.0.0.1:$client" \
			--listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
			--initial-cluster "default=http://127.0.0.1:$peer" --initial-cluster-state new \
			--unsafe-no-fsync --log-level warn \
			</dev/null >"$dir/etcd.log" 2>&1 &
		pid=$!
		record "$dir" etcd "$pid" || true
		rc=0
		wait_ready "http://127.0.0.1:$client/health" "$pid" 60 || rc=$?
		if [ $rc -eq 0 ]; then
			etcd_url=http://127.0.0.1:$client
			return 0
		fi
		if [ $rc -eq 2 ]; then
			die "etcd was not healthy within 60s (log: $dir/etcd.log)"
		fi
		if ! grep -qi "address already in use" "$dir/etcd.log"; then
			cat "$dir/etcd.log" >&2
			die "etcd exited at start (log: $dir/etcd.log)"
		fi
		echo "k8s.sh: etcd ports $client/$peer taken, trying others" >&2
	done
	die "etcd: no free ports after 5 tries"
}

start_apiserver() {
	local dir=$1 port pid rc p=$1/pki
	for _ in 1 2 3 4 5; do
		port=$(freeport)
		# --endpoint-reconciler-type=none: the `kubernetes` Service's
		# Endpoints would be 127.0.0.1, which validation refuses (a
		# loopback endpoint), and nothing here routes to it anyway.
		# No --cloud-provider, default admission plugins; no
		# controller manager runs (see "What runs" above).
		# --allow-privileged as kubeadm and every managed cluster set it:
		# sandpit's node DaemonSet needs it (scripts/kubernetes/node.yaml).
		setsid "$bindir/kube-apiserver" \
			--etcd-servers "$etcd_url" \
			--bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$port" \
			--cert-dir "$p" --tls-cert-file "$p/apiserver.crt" --tls-private-key-file "$p/apiserver.key" \
			--client-ca-file "$p/ca.crt" \
			--authorization-mode Node,RBAC \
			--allow-privileged=true \
			--service-account-issuer https://kubernetes.default.svc.cluster.local \
			--service-account-key-file "$p/sa.pub" --service-account-signing-key-file "$p/sa.key" \
			--service-cluster-ip-range "$svcrange" \
			--endpoint-reconciler-type none \
			--profiling=false \
			</dev/null >"$dir/kube-apiserver.log" 2>&1 &
		pid=$!
		record "$dir" kube-apiserver "$pid" || true
		rc=0
		wait_ready "https://127.0.0.1:$port/readyz" "$pid" 120 \
			--cacert "$p/ca.crt" --cert "$p/admin.crt" --key "$p/admin.key" || rc=$?
		if [ $rc -eq 0 ]; then
			apiserver_url=https://127.0.0.1:$port
			return 0
		fi
		if [ $rc -eq 2 ]; then
			die "kube-apiserver was not ready within 120s (log: $dir/kube-apiserver.log)"
		fi
		if ! grep -qi "address already in use" "$dir/kube-apiserver.log"; then
			tail -50 "$dir/kube-apiserver.log" >&2
			die "kube-apiserver exited at start (log: $dir/kube-apiserver.log)"
		fi
		echo "k8s.sh: port $port taken, trying another" >&2
	done
	die "kube-apiserver: no free port after 5 tries"
}

up() {
	local dir=${1:-}
	[ -n "$dir" ] || die "usage: $0 up DIR [--owner PID]"
	shift
	local owner=
	while [ $# -gt 0 ]; do
		case "$1" in
		--owner)
			owner=${2:?--owner needs a pid}
			shift 2
			;;
		*) die "unknown option $1" ;;
		esac
	done
	local ownerstart=
	if [ -n "$owner" ]; then
		ownerstart=$(starttime "$owner")
		[ -n "$ownerstart" ] || die "owner $owner is not a running process"
	fi
	build >/dev/null
	mkdir -p "$dir"
	dir=$(cd "$dir" && pwd)
	local n
	for n in kube-apiserver etcd watcher; do
		if [ -n "$(recorded "$dir" $n)" ]; then
			die "a control plane already runs in $dir ($n pid $(recorded "$dir" $n)): $0 down $dir"
		fi
	done
	local start=$SECONDS
	umask 077
	# Whatever fails or is interrupted from here on leaves nothing running.
	# shellcheck disable=SC2064 # $dir now, not at exit
	trap "down $(printf %q "$dir")" EXIT
	if [ -n "$owner" ]; then
		# A watcher, started first, that takes the control plane down
		# when its owner is gone, even when the owner was killed midway
		# through this up.
		setsid "$(readlink -f "$0")" _watch "$dir" "$owner" "$ownerstart" \
			</dev/null >>"$dir/watcher.log" 2>&1 &
		record "$dir" watcher $! || die "the owner watcher did not start"
	fi
	pki "$dir" "$svcip"
	start_etcd "$dir"
	start_apiserver "$dir"
	kubeconfig "$dir" "$apiserver_url" admin >"$dir/kubeconfig"
	kubeconfig "$dir" "$apiserver_url" nobody >"$dir/nobody.kubeconfig"
	trap - EXIT
	echo "k8s.sh: up in $((SECONDS - start))s: $apiserver_url (logs: $dir/*.log)" >&2
	echo "KUBECONFIG=$dir/kubeconfig"
	echo "APISERVER=$apiserver_url"
	echo "ETCD=$etcd_url"
}

# stop_one stops the process recorded in DIR/NAME.pid, if it is still that
# process (same pid, same start time), with the process group it leads
# (setsid made one for it): SIGTERM, up to 30s to exit, then SIGKILL; it
# returns when none of them is left. Only that group is signalled, never
# anything found by name.
stop_one() {
	local dir=$1 name=$2 pid deadline
	pid=$(recorded "$dir" "$name")
	if [ -n "$pid" ] && [ "$pid" != "$$" ]; then
		kill -- "-$pid" 2>/dev/null || kill "$pid" 2>/dev/null || true
		deadline=$((SECONDS + 30))
		while [ -n "$(recorded "$dir" "$name")$(ingroup "$pid")" ] && [ $SECONDS -lt $deadline ]; do
			sleep 0.1
		done
		if [ -n "$(recorded "$dir" "$name")$(ingroup "$pid")" ]; then
			echo "k8s.sh: $name (pid $pid) still there 30s after SIGTERM: SIGKILL" >&2
			kill -9 -- "-$pid" 2>/dev/null || kill -9 "$pid" 2>/dev/null || true
			while [ -n "$(recorded "$dir" "$name")$(ingroup "$pid")" ]; do
				sleep 0.1
			done
		fi
	fi
	rm -f "$dir/$name.pid"
}

# watch (the watcher up starts) waits until process $2 with start time $3
# is gone, then runs down DIR. down (from here or elsewhere) stops the
# watcher, except this one.
watch() {
	local dir=$1 owner=$2 ownerstart=$3
	while [ "$(starttime "$owner")" = "$ownerstart" ]; do
		sleep 1
	done
	echo "k8s.sh: owner $owner is gone: down $dir" >&2
	down "$dir"
}

down() {
	local dir=${1:-}
	[ -n "$dir" ] || die "usage: $0 down DIR"
	[ -d "$dir" ] || return 0
	# One down at a time per DIR: the owner watcher may run one as the
	# test's cleanup runs another.
	exec 8>>"$dir/.down.lock"
	flock 8
	# The watcher first (unless this is it), so it does not start a down
	# of its own; then the apiserver before the etcd it writes to.
	stop_one "$dir" watcher
	stop_one "$dir" kube-apiserver
	stop_one "$dir" etcd
	flock -u 8
	exec 8>&-
}

case "${1:-}" in
build) build ;;
up)
	shift
	up "$@"
	;;
down) down "${2:-}" ;;
_watch)
	shift
	watch "$@"
	;;
*)
	echo "usage: $0 build | up DIR [--owner PID] | down DIR" >&2
	exit 2
	;;
esac
