#!/usr/bin/env bash
# A private, real Kubernetes for sandpit's cluster tests: a control plane
# (etcd + kube-apiserver) and, with --node, a real single node (containerd,
# runc, kubelet, kube-scheduler) that runs Pods. Real admission, RBAC,
# optimistic concurrency, CRDs, scheduling, Pods. No mocks.
#
#   scripts/k8s.sh build [--control-plane]
#                                         build everything (once), or only what up
#                                         without --node needs, and print the
#                                         binaries' dir
#   scripts/k8s.sh up DIR [--node] [--owner PID]
#                                         start a control plane whose state is DIR;
#                                         prints KUBECONFIG=… APISERVER=… ETCD=…
#                                         (shell assignments), with --node also
#                                         NETNS=… CTR_ADDRESS=… NODE=… NODE_IP=…;
#                                         with --owner it stops when PID exits (a
#                                         test killed before its cleanup)
#   scripts/k8s.sh up DIR --node --services [--sandpit BIN]
#                                         also kube-controller-manager, kube-proxy
#                                         and a bridge Pod network (Deployments,
#                                         DaemonSets, Services work); with --sandpit
#                                         the node's host runs `BIN containerd start`
#                                         for a sandpit node agent Pod (prints also
#                                         CGROOT=… SANDPIT_HOST=… SANDPIT_CONTAINERD=…)
#   scripts/k8s.sh down DIR               stop the one started in DIR, Pods and all
#   scripts/k8s.sh import DIR IMAGE.tar   import an OCI layout or docker archive
#                                         into DIR's node (containerd namespace k8s.io;
#                                         Pods use it with imagePullPolicy: Never)
#
# What runs without --node: etcd and kube-apiserver, nothing else. No
# controller manager (nothing creates a namespace's "default"
# ServiceAccount, collects garbage or signs CSRs), no scheduler, no kubelet,
# no kube-proxy: a test that needs such an object creates it itself. Each
# up starts from an empty etcd. Both listen on 127.0.0.1 only, on ports
# picked free at start; etcd speaks plain HTTP there (loopback, a test's
# data), the apiserver TLS with a CA, serving and client certificates made
# with openssl in DIR/pki: DIR/kubeconfig is an admin (group
# system:masters), DIR/nobody.kubeconfig a user in no group bound to no
# role. Authorization Node,RBAC, default admission plugins and
# NodeRestriction, no cloud provider, a service-account signing key, the
# Service range a documentation prefix. Nothing on the host changes but DIR
# and the loopback ports. Processes are recorded in DIR/NAME.pid as "PID
# STARTTIME" and only a process with both is ever signalled (never one found
# by name; the one exception, a node's containerd shims left by a killed
# containerd, is found by its binary's path and DIR's socket in its
# arguments). A stopped daemon may stay a zombie until init reaps it (this
# machine's init does so within ~1.5 s); it holds nothing by then.
#
# With --node (root only): the above, the apiserver on the host end of a
# veth instead of 127.0.0.1, and a node "sandpit-test-node" in a network
# namespace of its own (design and what it changes on the host: "A node"
# below): containerd $containerd (CRI, own root/state/socket under
# DIR/containerd, own runc root, NRI off, restrict_oom_score_adj), runc
# $runc, a kubelet (cgroup v1: failCgroupV1 false, cgroupfs, EventedPLEG;
# client certificate system:node:sandpit-test-node; Webhook authorization
# of its API, which the apiserver reaches as system:masters for logs and
# exec) and kube-scheduler. up waits for the Node to be Ready, then does
# what the absent controller manager would: removes the not-ready taint,
# creates the default ServiceAccount and kube-root-ca.crt ConfigMap of
# namespace default. The Pod sandbox image is a static pause of ours
# ($pauseimage), imported at up. Pods get a network namespace with only lo
# (a report-only CNI plugin) and may run with hostUsers: false.
#
# With --services (root only), what a cluster's workloads need: in the
# node's network namespace kube-controller-manager (which then makes the
# default ServiceAccount and CA ConfigMap), kube-proxy (iptables mode, the
# node namespace's tables only, masquerading Service traffic) and a Pod
# network of Debian's bridge + host-local CNI plugins ($podcidr on bridge
# cni0, inside the node's namespace: Pods reach each other, the node and
# Services, nothing beyond). The apiserver keeps the `kubernetes`
# Service's endpoints (HOSTIP), so Pods use in-cluster config. No DNS, no
# NetworkPolicy enforcement (no policy plugin). With --sandpit BIN, the
# node's "host" paths /run/sandpit and /var/lib/sandpit (DIR/host/run and
# DIR/host/lib, a shared mount, peers in the node's mount namespaces and
# the host's) and a sandpit containerd there (`BIN containerd start`),
# what scripts/kubernetes/node.yaml's agent drives.
#
# Measured (2 cores shared with another engineer's container tests, build
# under nice 10): control plane only: cold build (empty module and build
# caches for these modules) 4m05s wall, 6m10s user + 1m18s sys CPU, 39 MB
# etcd + 119 MB kube-apiserver; a rebuild with the Go caches warm 8-12 s;
# build when built 5 ms. Warm up -> /readyz 200: 2.7-4.6 s (certificates
# 0.3 s, etcd healthy ~1 s, apiserver ready ~2.4 s), 6-8 s each for 4 at
# once; down 1.2-1.4 s; killing the owner (even the test binary, SIGKILL,
# midway through up) stops everything within ~2.1 s (the watcher polls each
# second). Nothing here but --node needs root (checked as nobody).
# --node, measured 2026-12-02 on the same machine under the same load: a
# cold build of what it adds (kubelet, kube-scheduler, containerd, its
# shim, ctr, runc, the CNI plugin, pause; empty Go build cache, modules
# already downloaded) 8m24s wall, 7m56s user + 1m36s sys CPU (kubelet and
# kube-scheduler 7m35s of it, containerd 1m33s, runc 23s, ours < 1s); with
# the build cache warm from the control plane's build and containerd's and
# runc's modules still to download, 2m46s. +262 MB of binaries (kubelet
# 92, kube-scheduler 81, containerd 39, ctr 23, shim 14, runc 12). Warm up
# --node 5.0-6.0 s (control plane 3.4-4.4 s, then containerd, the pause
# import, kubelet and scheduler to a Ready, untainted node 1.6-1.8 s);
# import 0.1-0.2 s; a Pod created -> Succeeded 0.8-1.6 s: up -> first Pod
# Succeeded 6-7.6 s. down, Pods and all, 1.8-2.0 s; two nodes up at once
# 12.9 s, down at once 3.0 s; the owner killed 1-5 s into up --node:
# everything gone within 3 s.
# --services (r3), measured 2026-12-02: the whole build cold, with
# kube-controller-manager and kube-proxy and empty module and build caches,
# on two cores shared with image builds: etcd 102 s, the five kubernetes
# commands 813 s wall / 880 s CPU, containerd 138 s, runc 27 s (about 18
# minutes). up --services --sandpit 10-12 s (controller manager, proxy and
# the node's sandpit containerd included); down, Pods and sandboxes and
# all, 2.8-3.7 s.
#
# All is built from the Go module proxy into a cache outside the checkout:
# $SANDPIT_TOOLS_DIR, default /var/cache/sandpit/tools as root, else
# ${XDG_CACHE_HOME:-~/.cache}/sandpit/tools, in a directory named after the
# version key ($key below: change it whenever what gets built changes).
#   kube-apiserver, kubelet, kube-scheduler: a wrapper module requiring
#     k8s.io/kubernetes $k8s, with the 33 `=> ./staging/...` replaces of
#     kubernetes' own go.mod mapped to the published k8s.io/<name> $staging
#     modules (a replace only counts in the main module), the commands as
#     `tool`s of the wrapper.
#   etcd: go.etcd.io/etcd/server/v3 $etcd in a wrapper of its own (its
#     grpc/otel versions are not kubernetes'). Not Debian's etcd 3.4: k8s
#     1.37 needs 3.5+ (with 3.4 a watch without a resourceVersion fails "Too
#     large resource version").
#   containerd, containerd-shim-runc-v2, ctr: `go install PKG@$containerd`
#     (tag no_btrfs); runc: `go install` with cgo and tag seccomp
#     (libseccomp-dev); Debian's containerd 1.6 has no user namespaces for
#     Pods, and kubelet 1.38 drops CRI runtimes older than 2.0.
#   cni/sandpit-report and pause (+ pause.tar): small programs of our own,
#     their sources written here (build_node_bits).
# shellcheck disable=SC2317 # the build steps are called through timed
set -euo pipefail
export PATH="/usr/local/go/bin:$PATH"
# A go.work above the cache must not take the wrapper modules in.
export GOWORK=off
k8s=v1.37.2
staging=v0.37.2
etcd=v3.6.16
containerd=v2.4.2
runc=v1.3.7
# Bump rev when the build recipe changes without a version changing.
rev=3
key=k8s-$k8s-etcd-$etcd-containerd-$containerd-runc-$runc-r$rev

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

# What build makes, in $bindir (the CNI plugin in $bindir/cni), and what
# build --control-plane (all up without --node needs) makes.
binaries="etcd kube-apiserver kubelet kube-scheduler kube-controller-manager kube-proxy containerd containerd-shim-runc-v2 ctr runc pause pause.tar cni/sandpit-report"
cpbinaries="etcd kube-apiserver"
# The kubernetes commands build_kubernetes makes.
kubecmds="kube-apiserver kubelet kube-scheduler kube-controller-manager kube-proxy"

# built LIST: every binary in LIST is there.
built() {
	local b
	for b in $1; do
		[ -f "$bindir/$b" ] || return 1
	done
}

# build [--control-plane]: everything, or only etcd and kube-apiserver (a
# control plane needs neither root nor libseccomp's headers, nor the
# kubelet's minutes of compiling).
build() {
	local want=$binaries steps="build_etcd build_kubernetes build_containerd build_runc build_node_bits"
	local what="etcd $etcd, kube-apiserver, kubelet, kube-scheduler, kube-controller-manager and kube-proxy $k8s, containerd $containerd, runc $runc (cold: about 15 minutes on two cores)"
	if [ "${1:-}" = --control-plane ]; then
		want=$cpbinaries
		steps="build_etcd build_kubernetes"
		kubecmds=kube-apiserver
		what="etcd $etcd and kube-apiserver $k8s (cold: about 4 minutes on two cores)"
	fi
	if built "$want"; then
		echo "$bindir"
		return
	fi
	mkdir -p "$moddir"
	# One builder at a time: parallel test packages may all ask at once.
	exec 9>"$moddir/.lock"
	flock 9
	if ! built "$want"; then
		echo "k8s.sh: building $what into $moddir" >&2
		local start=$SECONDS
		mkdir -p "$bindir"
		local step
		for step in $steps; do
			timed "$step"
		done
		echo "k8s.sh: built in $((SECONDS - start))s" >&2
	fi
	flock -u 9
	exec 9>&-
	echo "$bindir"
}

# timed runs command $1 and reports its wall time and its children's CPU.
timed() {
	local t0=$SECONDS c0 c1
	c0=$(childcpu)
	"$@"
	c1=$(childcpu)
	echo "k8s.sh: $1: $((SECONDS - t0))s wall, $((c1 - c0))s CPU (user+sys)" >&2
}

# childcpu prints the user+sys CPU seconds of this shell's ended children
# (fields 16 and 17 of its stat, in clock ticks).
childcpu() {
	local stat
	read -r stat <"/proc/$$/stat"
	# shellcheck disable=SC2086 # split on purpose, as in starttime
	set -- ${stat##*) }
	echo $(((${14} + ${15}) / $(getconf CLK_TCK)))
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

build_kubernetes() {
	built "$kubecmds" && return
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
		local cmd
		for cmd in $kubecmds; do
			go mod edit -tool "k8s.io/kubernetes/cmd/$cmd" >&2
		done
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
		for cmd in $kubecmds; do
			[ -x "$bindir/$cmd" ] && continue
			CGO_ENABLED=0 gonice build -trimpath -ldflags "$ld" -o "$bindir/$cmd.tmp" \
				"k8s.io/kubernetes/cmd/$cmd" >&2
			mv "$bindir/$cmd.tmp" "$bindir/$cmd"
		done
	)
}

# build_containerd: containerd, its runc shim and ctr, with `go install
# PKG@VERSION` (containerd's own go.mod, which has no replace: no wrapper
# needed). no_btrfs: no btrfs headers on these machines, no btrfs here.
build_containerd() {
	[ -x "$bindir/containerd" ] && [ -x "$bindir/containerd-shim-runc-v2" ] && [ -x "$bindir/ctr" ] && return
	local tmp=$moddir/containerd.tmp m=github.com/containerd/containerd/v2
	rm -rf "$tmp"
	mkdir -p "$tmp"
	GOBIN=$tmp CGO_ENABLED=0 gonice install -trimpath -tags no_btrfs \
		-ldflags "-s -w -X $m/version.Version=$containerd -X $m/version.Revision=proxy" \
		"$m/cmd/containerd@$containerd" "$m/cmd/containerd-shim-runc-v2@$containerd" "$m/cmd/ctr@$containerd" >&2
	mv "$tmp"/* "$bindir/"
	rmdir "$tmp"
}

# build_runc: runc with cgo and libseccomp (the seccomp tag: without it
# runc refuses every Pod's RuntimeDefault profile), dynamically linked
# against the host's libseccomp2 (libseccomp-dev to build).
build_runc() {
	[ -x "$bindir/runc" ] && return
	[ -f /usr/include/seccomp.h ] || die "runc needs libseccomp's headers: apt-get install libseccomp-dev (scripts/install-deps.sh)"
	local tmp=$moddir/runc.tmp
	rm -rf "$tmp"
	mkdir -p "$tmp"
	GOBIN=$tmp CGO_ENABLED=1 gonice install -trimpath -tags seccomp \
		-ldflags "-s -w -X main.version=${runc#v} -X main.gitCommit=proxy" \
		"github.com/opencontainers/runc@$runc" >&2
	mv "$tmp/runc" "$bindir/runc"
	rmdir "$tmp"
}

# build_node_bits: the two small programs of our own a node needs.
#   cni/sandpit-report: a CNI plugin that configures nothing and reports an
#     eth0 with an address from 192.0.2.0/24 (TEST-NET-1). containerd
#     refuses a result without an interface address, and sets up the Pod's
#     lo itself: a Pod has lo and nothing else.
#   pause (and pause.tar, a docker-archive image of it): the Pod sandbox's
#     process, static C; it reaps children and exits on SIGINT/SIGTERM.
build_node_bits() {
	local src=$moddir/node-src
	mkdir -p "$src/cni" "$bindir/cni"
	if [ ! -x "$bindir/cni/sandpit-report" ]; then
		cat >"$src/cni/main.go" <<'GO'
// sandpit-report is a CNI plugin that configures nothing: ADD reports an
// eth0 with an address from 192.0.2.0/24 (TEST-NET-1) derived from the
// container id; every other command succeeds and says nothing.
package main

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"os"
)

func main() {
	conf, _ := io.ReadAll(os.Stdin)
	var c struct {
		CNIVersion string `json:"cniVersion"`
	}
	_ = json.Unmarshal(conf, &c)
	switch os.Getenv("CNI_COMMAND") {
	case "ADD":
		h := fnv.New32a()
		h.Write([]byte(os.Getenv("CNI_CONTAINERID")))
		fmt.Printf(`{"cniVersion":%q,"interfaces":[{"name":"eth0","sandbox":%q}],"ips":[{"address":"192.0.2.%d/24","interface":0}]}`,
			c.CNIVersion, os.Getenv("CNI_NETNS"), h.Sum32()%253+1)
	case "VERSION":
		fmt.Print(`{"cniVersion":"1.0.0","supportedVersions":["0.4.0","1.0.0","1.1.0"]}`)
	}
}
GO
		(
			cd "$src/cni"
			[ -f go.mod ] || go mod init sandpit.local/cni-report >&2
			CGO_ENABLED=0 gonice build -trimpath -ldflags "-s -w" -o "$bindir/cni/sandpit-report.tmp" . >&2
		)
		mv "$bindir/cni/sandpit-report.tmp" "$bindir/cni/sandpit-report"
	fi
	if [ ! -f "$bindir/pause.tar" ]; then
		cat >"$src/pause.c" <<'C'
/* The Pod sandbox's process: waits, reaps, exits 0 on SIGINT/SIGTERM. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void quit(int sig) { (void)sig; _exit(0); }
static void reap(int sig) { (void)sig; while (waitpid(-1, 0, WNOHANG) > 0) ; }

int main(void) {
	signal(SIGINT, quit);
	signal(SIGTERM, quit);
	signal(SIGCHLD, reap);
	for (;;)
		pause();
}
C
		nice -n 10 gcc -static -Os -s -o "$bindir/pause.tmp" "$src/pause.c" >&2
		mv "$bindir/pause.tmp" "$bindir/pause"
		pause_image "$bindir/pause" "$bindir/pause.tar.tmp"
		mv "$bindir/pause.tar.tmp" "$bindir/pause.tar"
	fi
}

# The sandbox image every Pod's pause runs from: imported, never pulled
# (pinned in containerd's CRI config, so the kubelet's image GC keeps it).
pauseimage=sandpit.test/pause:1

# pause_image packs binary $1 as /pause into docker-archive $2: one layer,
# a config with its diff id, a manifest.json naming $pauseimage.
pause_image() {
	local t diff
	t=$(mktemp -d)
	mkdir -p "$t/root"
	cp "$1" "$t/root/pause"
	tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$t/root" -cf "$t/layer.tar" pause
	diff=$(sha256sum "$t/layer.tar" | cut -d' ' -f1)
	printf '%s\n' '{"architecture":"amd64","os":"linux","config":{"Entrypoint":["/pause"],"User":"65535:65535"},"rootfs":{"type":"layers","diff_ids":["sha256:'"$diff"'"]}}' >"$t/config.json"
	printf '%s\n' '[{"Config":"config.json","RepoTags":["'"$pauseimage"'"],"Layers":["layer.tar"]}]' >"$t/manifest.json"
	tar --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$t" -cf "$2" manifest.json config.json layer.tar
	rm -rf "$t"
}

# freeport prints a loopback TCP port nothing listens on now.
# freeport prints a TCP port nothing listens on now at address $1
# (default 127.0.0.1).
freeport() {
	python3 -c 'import socket,sys; s=socket.socket(); s.bind((sys.argv[1],0)); print(s.getsockname()[1])' "${1:-127.0.0.1}"
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

# cert makes, in pki directory $1, key and certificate $2 for subject $3
# with x509 extensions $4, signed by the CA there.
cert() {
	(
		cd "$1"
		umask 077
		openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
			-keyout "$2.key" -out "$2.csr" -subj "$3" 2>/dev/null
		printf '%s\n' "$4" >"$2.ext"
		openssl x509 -req -in "$2.csr" -CA ca.crt -CAkey ca.key -CAcreateserial \
			-days 3650 -extfile "$2.ext" -out "$2.crt" 2>/dev/null
		rm -f "$2.csr" "$2.ext"
	)
}

clientext="basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"

# pki makes, with openssl, in DIR/pki: a CA, the apiserver's serving
# certificate (127.0.0.1, localhost, the in-cluster names and the
# subjectAltNames in $3, e.g. ",IP:198.18.0.1"), an admin client
# certificate (group system:masters, which RBAC lets do anything), a
# second client certificate for no group at all (a test's "who has no
# rights"), and the service-account signing key pair.
pki() {
	local p=$1/pki svcip=$2 extra=${3:-}
	mkdir -p "$p"
	chmod 700 "$p"
	(
		cd "$p"
		umask 077
		openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \
			-keyout ca.key -out ca.crt -subj "/CN=sandpit-test-ca" 2>/dev/null
		openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out sa.key 2>/dev/null
		openssl pkey -in sa.key -pubout -out sa.pub 2>/dev/null
	)
	cert "$p" apiserver "/CN=kube-apiserver" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,DNS:localhost,IP:$svcip,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local$extra"
	cert "$p" admin "/O=system:masters/CN=sandpit-admin" "$clientext"
	cert "$p" nobody "/CN=sandpit-nobody" "$clientext"
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
# More apiserver flags (up --node adds the kubelet client's).
apiserver_extra=()
reconciler=none
# What up --services and --sandpit add (set by up's options).
services=""
sandpit=""
# The Pods' network with --services (RFC 5737 TEST-NET-3): a bridge in the
# node's network namespace, routed nowhere outside it.
podcidr=203.0.113.0/24
# Debian's CNI plugins (package containernetworking-plugins).
debiancni=/usr/lib/cni

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

# start_apiserver DIR [BIND]: the apiserver on address BIND (default
# 127.0.0.1), with the flags in array apiserver_extra too.
start_apiserver() {
	local dir=$1 bind=${2:-127.0.0.1} port pid rc p=$1/pki
	for _ in 1 2 3 4 5; do
		port=$(freeport "$bind")
		# --endpoint-reconciler-type=none: the `kubernetes` Service's
		# Endpoints would be 127.0.0.1, which validation refuses (a
		# loopback endpoint), and nothing here routes to it anyway.
		# No --cloud-provider, default admission plugins; no
		# controller manager runs (see "What runs" above).
		# --allow-privileged as kubeadm and every managed cluster set it:
		# sandpit's node DaemonSet needs it (scripts/kubernetes/node.yaml).
		setsid "$bindir/kube-apiserver" \
			--etcd-servers "$etcd_url" \
			--bind-address "$bind" --advertise-address "$bind" --secure-port "$port" \
			--cert-dir "$p" --tls-cert-file "$p/apiserver.crt" --tls-private-key-file "$p/apiserver.key" \
			--client-ca-file "$p/ca.crt" \
			--authorization-mode Node,RBAC \
			--allow-privileged=true \
			--service-account-issuer https://kubernetes.default.svc.cluster.local \
			--service-account-key-file "$p/sa.pub" --service-account-signing-key-file "$p/sa.key" \
			--service-cluster-ip-range "$svcrange" \
			--endpoint-reconciler-type "$reconciler" \
			--profiling=false \
			--enable-admission-plugins NodeRestriction \
			"${apiserver_extra[@]}" \
			</dev/null >"$dir/kube-apiserver.log" 2>&1 &
		pid=$!
		record "$dir" kube-apiserver "$pid" || true
		rc=0
		wait_ready "https://$bind:$port/readyz" "$pid" 120 \
			--cacert "$p/ca.crt" --cert "$p/admin.crt" --key "$p/admin.key" || rc=$?
		if [ $rc -eq 0 ]; then
			apiserver_url=https://$bind:$port
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

# ---- A node (up --node) ---------------------------------------------------
#
# The network: a namespace of the node's own, NETNS=sandpit-k8s-HASH (HASH
# from DIR), joined to the host by a veth pair on a /30 of 198.18.0.0/15
# (RFC 2544 benchmarking, routed nowhere): HOSTIP (.1, host end) and NODEIP
# (.2, the node's end). The kubelet refuses a loopback node IP, and a netns
# lo holds only 127.0.0.1; NODEIP is the node's InternalIP. etcd stays on
# the host's 127.0.0.1; the apiserver listens on HOSTIP only, which the host
# (the test) reaches as a local address and the node through the veth; the
# apiserver reaches the kubelet (logs, exec) at NODEIP:10250. containerd,
# the kubelet and kube-scheduler run inside the namespace, so their ports
# (10250, 10248, containerd's streaming port) collide with nobody's. A Pod
# gets a network namespace of its own with only lo (the report-only CNI
# plugin, see build_node_bits): it can reach neither the node nor the host.
#
# What changes on the host while a node is up, all undone by down: the
# netns (/run/netns/NETNS), the veth's host end with HOSTIP (a connected
# route to the /30), cgroups /sys/fs/cgroup/*/sandpit-k8s-HASH (the
# kubelet's cgroupRoot, made in every hierarchy as it needs on cgroup v1),
# a shared bind mount of DIR/kubelet onto itself (and the Pod volumes the
# kubelet mounts there), and the shims' sockets in /run/containerd/s
# (containerd puts them there whatever its state dir; named by a hash of
# DIR's socket, they collide with no other containerd's). Never
# /run/containerd's daemon or /run/sandpit/containerd. `ip netns add`
# makes /run/netns a shared mount the first time it runs on a boot; it is
# every netns user's and stays.
# containerd and the kubelet each run in a private mount namespace: what
# containerd and its shims mount (rootfs, shm, Pod netns) stays in it and
# goes with them, and DIR/varlib is bound over /var/lib in both (libcni
# caches results in /var/lib/cni, the kubelet makes
# /var/lib/kubelet/device-plugins, whatever their configured directories).
# The kubelet's namespace also has DIR/varlog over /var/log (it makes
# /var/log/containers) and, over each host sysctl it would set
# (vm.overcommit_memory, kernel.panic, kernel.panic_on_oops here), a file
# holding the value it wants: it finds them set and writes nothing. Only
# DIR/kubelet is shared between the two and the host, so Pod volumes reach
# runc.

nodename=sandpit-test-node

# node_names sets the names of DIR's node: netns, veth ends, cgroup root.
node_names() {
	local h
	h=$(printf '%s' "$1" | sha256sum | cut -c1-8)
	netns=sandpit-k8s-$h
	hostveth=spk${h}h
	nodeveth=spk${h}n
	cgroot=/sandpit-k8s-$h
	nodehash=$h
}

# ip4 prints dotted address number $1.
ip4() {
	echo "$(($1 >> 24 & 255)).$(($1 >> 16 & 255)).$(($1 >> 8 & 255)).$(($1 & 255))"
}

# node_net makes the netns and the veth pair (node_names first) and sets
# hostip and nodeip: the /30 numbered from HASH, or the next one no host
# address is in. Held under a lock so that two ups at once pick two.
node_net() {
	local dir=$1 base i tries
	mkdir -p "$tools"
	exec 7>>"$tools/.node-net.lock"
	flock 7
	i=$((0x$nodehash % 32768))
	for tries in $(seq 1 64); do
		base=$(((198 << 24 | 18 << 16) + 4 * i))
		hostip=$(ip4 $((base + 1)))
		nodeip=$(ip4 $((base + 2)))
		if ! ip -o -4 addr show | grep -qE " ($hostip|$nodeip|$(ip4 "$base")|$(ip4 $((base + 3))))/"; then
			break
		fi
		i=$(((i + 1) % 32768))
		[ "$tries" -lt 64 ] || die "no free /30 in 198.18.0.0/15 after 64 tries"
	done
	printf 'NETNS=%s\nHOSTVETH=%s\nHOSTIP=%s\nNODEIP=%s\nCGROOT=%s\n' \
		"$netns" "$hostveth" "$hostip" "$nodeip" "$cgroot" >"$dir/node.env"
	ip netns add "$netns"
	ip link add "$hostveth" type veth peer name "$nodeveth" netns "$netns"
	ip addr add "$hostip/30" dev "$hostveth"
	ip link set "$hostveth" up
	ip -n "$netns" link set lo up
	ip -n "$netns" addr add "$nodeip/30" dev "$nodeveth"
	ip -n "$netns" link set "$nodeveth" up
	flock -u 7
	exec 7>&-
}

# hierarchies prints the mount points of the host's cgroup hierarchies.
hierarchies() {
	awk '$3 == "cgroup" || $3 == "cgroup2" { print $2 }' /proc/self/mounts
}

# node_cgroups makes the kubelet's cgroupRoot in every hierarchy (cpuset
# needs cpus and mems before a process may join).
node_cgroups() {
	local h
	for h in $(hierarchies); do
		# 755, not up's umask: runc binds a container's cgroups into it,
		# which a user-namespaced container must be able to reach.
		mkdir -p "$h$cgroot"
		chmod 755 "$h$cgroot"
		if [ -f "$h/cpuset.cpus" ]; then
			cat "$h/cpuset.cpus" >"$h$cgroot/cpuset.cpus"
			cat "$h/cpuset.mems" >"$h$cgroot/cpuset.mems"
		fi
	done
}

node_pki() {
	local p=$1/pki
	cert "$p" kubelet "/O=system:nodes/CN=system:node:$nodename" "$clientext"
	cert "$p" scheduler "/CN=system:kube-scheduler" "$clientext"
	cert "$p" apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" "$clientext"
	cert "$p" kubelet-serving "/CN=$nodename" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:$nodeip,DNS:$nodename"
	if [ -n "$services" ]; then
		cert "$p" kube-controller-manager "/CN=system:kube-controller-manager" "$clientext"
		cert "$p" kube-proxy "/CN=system:kube-proxy" "$clientext"
	fi
}

# hostbinds prints, with --sandpit, the mounts (a shell command list ending
# in &&) that make a node's mount namespace see DIR/host/run as
# /run/sandpit and DIR/host/lib as /var/lib/sandpit (after DIR/varlib is
# bound over /var/lib): the node's "host" paths a sandpit node agent's
# hostPath volumes name. DIR/host is a shared mount (up_node), so each
# bind is a peer of it: what the agent mounts there (Bidirectional)
# reaches the node's sandpit containerd and the host, and the other way.
hostbinds() {
	[ -n "$sandpit" ] || return 0
	local h
	h=$(printf %q "$1/host")
	printf '%s' "mkdir -p /run/sandpit /var/lib/sandpit && mount --bind $h/run /run/sandpit && mount --bind $h/lib /var/lib/sandpit && "
}

start_containerd() {
	local dir=$1 c=$1/containerd pid
	mkdir -p "$c" "$dir/cni"
	chmod 711 "$c"
	# The CNI config before containerd starts (its watcher can miss one
	# written later).
	if [ -n "$services" ]; then
		# A real Pod network: Debian's bridge and host-local plugins,
		# in the node's namespace (Pods reach each other, the node and,
		# through kube-proxy, Services; nothing routes them further).
		cat >"$dir/cni/10-sandpit-pods.conflist" <<EOF
{"cniVersion": "1.0.0", "name": "sandpit-pods", "plugins": [{"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
  "ipam": {"type": "host-local", "dataDir": "$dir/cni-ipam", "ranges": [[{"subnet": "$podcidr"}]], "routes": [{"dst": "0.0.0.0/0"}]}}]}
EOF
	else
		cat >"$dir/cni/10-sandpit-report.conflist" <<EOF
{"cniVersion": "1.0.0", "name": "sandpit-report", "plugins": [{"type": "sandpit-report"}]}
EOF
	fi
	cat >"$c/config.toml" <<EOF
version = 3
root = "$c/root"
state = "$c/state"
temp = "$c/tmp"
disabled_plugins = ["io.containerd.image-verifier.v1.bindir", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.blockfile", "io.containerd.snapshotter.v1.erofs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "$c/containerd.sock"

[ttrpc]
  address = "$c/containerd.sock.ttrpc"

[plugins.'io.containerd.internal.v1.opt']
  path = "$c/opt"

[plugins.'io.containerd.nri.v1.nri']
  disable = true

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "$pauseimage"

[plugins.'io.containerd.cri.v1.runtime']
  enable_cdi = false
  # No CAP_SYS_RESOURCE on these machines: nothing may lower an oom_score_adj.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "$bindir/runc"
        Root = "$c/runc"
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["$bindir/cni", "$debiancni"]
    conf_dir = "$dir/cni"
    max_conf_num = 1
    # containerd sets the Pod's lo up itself: no CNI loopback plugin.
    use_internal_loopback = true
EOF
	# PATH: the shim (containerd-shim-runc-v2) is found there. umask 022
	# (up's is 077): a Pod in a user namespace must traverse the
	# directories containerd makes (with modes its umask would cut).
	(
		umask 022
		exec setsid nsenter --net="/run/netns/$netns" -- unshare --mount --propagation unchanged -- \
			/bin/sh -c "mount --bind $(printf %q "$dir/varlib") /var/lib && $(hostbinds "$dir")exec \"\$0\" \"\$@\"" \
			env PATH="$bindir:$PATH" "$bindir/containerd" --config "$c/config.toml"
	) </dev/null >"$dir/containerd.log" 2>&1 &
	pid=$!
	record "$dir" containerd "$pid" || true
	local deadline=$((SECONDS + 60))
	until "$bindir/ctr" --address "$c/containerd.sock" --timeout 5s version >/dev/null 2>&1; do
		[ -n "$(starttime "$pid")" ] || {
			tail -30 "$dir/containerd.log" >&2
			die "containerd exited at start (log: $dir/containerd.log)"
		}
		[ $SECONDS -lt $deadline ] || die "containerd did not answer within 60s (log: $dir/containerd.log)"
		sleep 0.1
	done
	ctr_address=$c/containerd.sock
}

# import_image imports docker or OCI archive $2 into the k8s.io namespace
# of DIR $1's containerd, unpacked for its snapshotter.
import_image() {
	local dir=$1 tar=$2
	"$bindir/ctr" --address "$dir/containerd/containerd.sock" --timeout 5m -n k8s.io \
		images import --snapshotter overlayfs "$tar" >&2
}

# The host sysctls the kubelet sets when they differ (its
# setupKernelTunables) and the values it wants.
kubelet_sysctls="vm/overcommit_memory=1 vm/panic_on_oom=0 kernel/panic=10 kernel/panic_on_oops=1 kernel/keys/root_maxkeys=1000000 kernel/keys/root_maxbytes=25000000"

start_kubelet() {
	local dir=$1 k=$1/kubelet pid binds="" kv name want
	mkdir -p "$dir/varlog" "$dir/pod-logs" "$dir/sysctl" "$dir/kubelet-plugins"
	for kv in $kubelet_sysctls; do
		name=${kv%%=*}
		want=${kv#*=}
		[ "$(cat "/proc/sys/$name")" = "$want" ] && continue
		echo "$want" >"$dir/sysctl/${name//\//.}"
		binds="$binds mount --bind $(printf %q "$dir/sysctl/${name//\//.}") /proc/sys/$name &&"
	done
	cat >"$dir/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# cgroup v1 (hybrid) hosts: the kubelet refuses v1 unless told.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: $cgroot
containerRuntimeEndpoint: unix://$ctr_address
featureGates:
  EventedPLEG: true
address: $nodeip
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
tlsCertFile: $dir/pki/kubelet-serving.crt
tlsPrivateKeyFile: $dir/pki/kubelet-serving.key
# Its API (logs, exec): client certificates of the CA only, each request
# authorized by the apiserver (SubjectAccessReview).
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $dir/pki/ca.crt}
authorization:
  mode: Webhook
podLogsDir: $dir/pod-logs
volumePluginDir: $dir/kubelet-plugins
resolvConf: ""
failSwapOn: false
# Its own, unchanged: no CAP_SYS_RESOURCE here to lower it (default -999).
oomScoreAdj: $(cat /proc/self/oom_score_adj)
# A shared disk: evict only when it is all but full.
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  imagefs.available: 1%
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
# Secret and ConfigMap volumes refreshed within ~10 s of a change (1 min
# by default): a test waits for what it changed to reach a Pod.
syncFrequency: 10s
EOF
	kubeconfig "$dir" "$apiserver_url" kubelet >"$dir/kubelet.kubeconfig"
	# umask 022 as for containerd: what the kubelet makes for a Pod
	# (etc-hosts, volumes) is read by its user-namespaced processes.
	(
		umask 022
		# shellcheck disable=SC2016 # $0 "$@" for the inner shell
		exec setsid nsenter --net="/run/netns/$netns" -- unshare --mount --propagation unchanged -- \
			/bin/sh -c "set -e; $binds mount --bind $(printf %q "$dir/varlog") /var/log && mount --bind $(printf %q "$dir/varlib") /var/lib && $(hostbinds "$dir")exec \"\$0\" \"\$@\"" \
			"$bindir/kubelet" --config "$dir/kubelet.yaml" --kubeconfig "$dir/kubelet.kubeconfig" \
			--root-dir "$k" --node-ip "$nodeip" --hostname-override "$nodename" --v 1
	) </dev/null >"$dir/kubelet.log" 2>&1 &
	pid=$!
	record "$dir" kubelet "$pid" || true
}

start_scheduler() {
	local dir=$1
	kubeconfig "$dir" "$apiserver_url" scheduler >"$dir/scheduler.kubeconfig"
	# --secure-port 0: no metrics/health server, so no delegated
	# authentication to configure.
	setsid nsenter --net="/run/netns/$netns" -- "$bindir/kube-scheduler" \
		--kubeconfig "$dir/scheduler.kubeconfig" --leader-elect=false --secure-port 0 \
		</dev/null >"$dir/kube-scheduler.log" 2>&1 &
	record "$dir" kube-scheduler $! || true
}

# kapi METHOD PATH [BODY [CONTENT-TYPE]]: a request to the apiserver as admin.
kapi() {
	local dir=$node_dir
	local args=(-fsS --max-time 10 --cacert "$dir/pki/ca.crt" --cert "$dir/pki/admin.crt" --key "$dir/pki/admin.key" -X "$1")
	if [ $# -ge 3 ]; then
		args+=(-H "Content-Type: ${4:-application/json}" --data-binary "$3")
	fi
	curl "${args[@]}" "$apiserver_url$2"
}

# node_ready waits until the Node is Ready, then does what the controller
# manager (not run) would: removes the not-ready taint, creates the
# default ServiceAccount and kube-root-ca.crt ConfigMap of `default`.
node_ready() {
	local dir=$1 deadline=$((SECONDS + 120)) node n
	node_dir=$dir
	while :; do
		for n in containerd kubelet kube-scheduler ${services:+kube-controller-manager kube-proxy}; do
			if [ -z "$(recorded "$dir" $n)" ]; then
				tail -30 "$dir/$n.log" >&2
				die "$n exited (log: $dir/$n.log)"
			fi
		done
		node=$(kapi GET "/api/v1/nodes/$nodename" 2>/dev/null) || node=
		if [ -n "$node" ] && printf '%s' "$node" | python3 -c '
import json, sys
n = json.load(sys.stdin)
sys.exit(0 if any(c["type"] == "Ready" and c["status"] == "True" for c in n.get("status", {}).get("conditions", [])) else 1)'; then
			break
		fi
		[ $SECONDS -lt $deadline ] || die "node $nodename not Ready within 120s (logs: $dir/kubelet.log, $dir/containerd.log)"
		sleep 0.2
	done
	# The taints but node.kubernetes.io/not-ready, with the resourceVersion
	# read: a JSON merge patch that replaces the list.
	kapi PATCH "/api/v1/nodes/$nodename" "$(printf '%s' "$node" | python3 -c '
import json, sys
n = json.load(sys.stdin)
t = [x for x in n["spec"].get("taints", []) if x["key"] != "node.kubernetes.io/not-ready"]
print(json.dumps({"metadata": {"resourceVersion": n["metadata"]["resourceVersion"]}, "spec": {"taints": t or None}}))')" \
		application/merge-patch+json >/dev/null ||
		die "could not remove the not-ready taint"
	if [ -n "$services" ]; then
		# The controller manager makes them: wait for both.
		until kapi GET /api/v1/namespaces/default/serviceaccounts/default >/dev/null 2>&1 &&
			kapi GET /api/v1/namespaces/default/configmaps/kube-root-ca.crt >/dev/null 2>&1; do
			[ -n "$(recorded "$dir" kube-controller-manager)" ] || {
				tail -30 "$dir/kube-controller-manager.log" >&2
				die "kube-controller-manager exited (log: $dir/kube-controller-manager.log)"
			}
			[ $SECONDS -lt $deadline ] || die "no default ServiceAccount within 120s (log: $dir/kube-controller-manager.log)"
			sleep 0.2
		done
		return 0
	fi
	kapi POST /api/v1/namespaces/default/serviceaccounts '{"metadata": {"name": "default"}}' >/dev/null ||
		die "could not create the default ServiceAccount"
	kapi POST /api/v1/namespaces/default/configmaps "$(python3 -c '
import json, sys
print(json.dumps({"metadata": {"name": "kube-root-ca.crt"}, "data": {"ca.crt": open(sys.argv[1]).read()}}))' "$dir/pki/ca.crt")" >/dev/null ||
		die "could not create the kube-root-ca.crt ConfigMap"
}

# up_node starts, after etcd and the apiserver, containerd, the kubelet and
# the scheduler (node_net and node_pki done), and waits for a Ready node.
up_node() {
	local dir=$1 k=$1/kubelet
	node_cgroups
	# containerd and the kubelet each run in a private mount namespace
	# (what they mount stays there and goes with them) where DIR/varlib
	# is bound over /var/lib: libcni caches results in /var/lib/cni and
	# the kubelet's device-plugin socket is /var/lib/kubelet/device-plugins,
	# whatever their configured directories. DIR/kubelet is shared
	# between them: the volumes the kubelet mounts there reach runc.
	mkdir -p "$dir/varlib" "$k"
	mount --bind "$k" "$k"
	mount --make-rshared "$k"
	if [ -n "$sandpit" ]; then
		mkdir -p "$dir/host/run" "$dir/host/lib"
		chmod 711 "$dir/host" "$dir/host/run" "$dir/host/lib"
		mount --bind "$dir/host" "$dir/host"
		mount --make-rshared "$dir/host"
	fi
	if [ -n "$services" ]; then
		[ -x "$debiancni/bridge" ] && [ -x "$debiancni/host-local" ] ||
			die "--services needs Debian's CNI plugins in $debiancni: apt-get install containernetworking-plugins"
		command -v iptables-restore >/dev/null || die "--services needs iptables (kube-proxy): apt-get install iptables"
		# The node's own connections to a Service (a test's client
		# entering the namespace) need a route before kube-proxy's DNAT.
		ip -n "$netns" route add "$svcrange" dev "$nodeveth"
	fi
	start_containerd "$dir"
	import_image "$dir" "$bindir/pause.tar"
	start_kubelet "$dir"
	start_scheduler "$dir"
	if [ -n "$services" ]; then
		start_controller_manager "$dir"
		start_kube_proxy "$dir"
	fi
	node_ready "$dir"
	[ -z "$sandpit" ] || start_sandpit "$dir"
}

# start_controller_manager runs kube-controller-manager in the node's
# network namespace (it needs only the apiserver): Deployments,
# DaemonSets, ReplicaSets, EndpointSlices, ServiceAccounts and their
# namespaces' kube-root-ca.crt, garbage collection. Each controller acts
# with its own service account's rights. --secure-port 0: no health
# server, no delegated authentication to set up.
start_controller_manager() {
	local dir=$1 p=$1/pki
	kubeconfig "$dir" "$apiserver_url" kube-controller-manager >"$dir/kube-controller-manager.kubeconfig"
	setsid nsenter --net="/run/netns/$netns" -- "$bindir/kube-controller-manager" \
		--kubeconfig "$dir/kube-controller-manager.kubeconfig" \
		--authentication-kubeconfig "$dir/kube-controller-manager.kubeconfig" \
		--authorization-kubeconfig "$dir/kube-controller-manager.kubeconfig" \
		--leader-elect=false --secure-port 0 --use-service-account-credentials \
		--service-account-private-key-file "$p/sa.key" --root-ca-file "$p/ca.crt" \
		--service-cluster-ip-range "$svcrange" --cluster-cidr "$podcidr" \
		--controllers '*,-nodeipam,-csrsigning,-csrapproving' \
		--v 1 </dev/null >"$dir/kube-controller-manager.log" 2>&1 &
	record "$dir" kube-controller-manager $! || true
}

# start_kube_proxy runs kube-proxy (iptables mode) in the node's network
# namespace: its rules are that namespace's, never the host's. It changes
# no conntrack sysctl (maxPerCore 0, timeouts 0) and no route_localnet
# (no localhost NodePorts). masqueradeAll: a Pod's packets to a Service
# leave with the node's address, so the apiserver on HOSTIP answers to a
# node address the host routes (Pod addresses it does not route).
start_kube_proxy() {
	local dir=$1
	kubeconfig "$dir" "$apiserver_url" kube-proxy >"$dir/kube-proxy.kubeconfig"
	cat >"$dir/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $dir/kube-proxy.kubeconfig}
mode: iptables
hostnameOverride: $nodename
bindAddress: $nodeip
clusterCIDR: $podcidr
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
iptables: {masqueradeAll: true, localhostNodePorts: false}
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
	setsid nsenter --net="/run/netns/$netns" -- "$bindir/kube-proxy" --config "$dir/kube-proxy.yaml" --v 1 \
		</dev/null >"$dir/kube-proxy.log" 2>&1 &
	record "$dir" kube-proxy $! || true
}

# start_sandpit starts the node's sandpit containerd (`sandpit containerd
# start`: Debian's containerd with sandpit's config, /run/sandpit/containerd
# and /var/lib/sandpit/containerd as the node sees them, i.e. DIR/host/run
# and DIR/host/lib) in the node's network namespace and a mount namespace
# with hostbinds: what a node's operator runs on each host before the
# DaemonSet's agent drives it (scripts/kubernetes/node.yaml).
start_sandpit() {
	local dir=$1 pid
	(
		umask 022
		# shellcheck disable=SC2016 # $0 "$@" for the inner shell
		exec nsenter --net="/run/netns/$netns" -- unshare --mount --propagation unchanged -- \
			/bin/sh -c "mount --bind $(printf %q "$dir/varlib") /var/lib && $(hostbinds "$dir")exec \"\$0\" \"\$@\"" \
			"$sandpit" containerd start
	) </dev/null >"$dir/sandpit-containerd.log" 2>&1 || {
		tail -20 "$dir/sandpit-containerd.log" >&2
		die "the node's sandpit containerd did not start (log: $dir/sandpit-containerd.log, $dir/host/run/containerd/containerd.log)"
	}
	read -r pid <"$dir/host/run/containerd/containerd.pid" || die "no pid file from the node's sandpit containerd"
	record "$dir" sandpit-containerd "$pid" || die "the node's sandpit containerd (pid $pid) is gone"
}

# shims prints the pids of live containerd-shim-runc-v2 processes started by
# the containerd whose socket is $1 (their -address argument): a killed
# containerd leaves them, and they keep the Pods' processes.
shims() {
	local sock=$1 f pid
	for f in /proc/[0-9]*/cmdline; do
		pid=${f#/proc/}
		pid=${pid%/cmdline}
		[ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = "$bindir/containerd-shim-runc-v2" ] || continue
		if tr '\0' '\n' <"$f" 2>/dev/null | grep -qxF -- "$sock"; then
			[ -n "$(starttime "$pid")" ] && echo "$pid"
		fi
	done
	return 0
}

# cgprocs prints the pids in cgroup subtree $1 of every hierarchy.
cgprocs() {
	local h
	for h in $(hierarchies); do
		[ -d "$h$1" ] || continue
		find "$h$1" -name cgroup.procs -exec cat {} + 2>/dev/null
	done | sort -u
}

# undermounts prints the mount points at or under directory $1, deepest
# first.
undermounts() {
	awk -v d="$1" '{ m = $5; gsub(/\\040/, " ", m); if (m == d || index(m, d "/") == 1) print length(m), m }' \
		/proc/self/mountinfo | sort -rn | cut -d' ' -f2-
}

# down_node stops the scheduler, the kubelet, the Pods' processes,
# containerd and its shims.
down_node() {
	local dir=$1 f key val sock=$1/containerd/containerd.sock pids deadline
	local CGROOT=""
	while IFS='=' read -r key val; do
		case "$key" in
		CGROOT) CGROOT=$val ;;
		esac
	done <"$dir/node.env"
	stop_one "$dir" kube-controller-manager
	stop_one "$dir" kube-proxy
	stop_one "$dir" kube-scheduler
	stop_one "$dir" kubelet
	# The Pods' processes: every process in the kubelet's cgroupRoot.
	case "$CGROOT" in /sandpit-k8s-?*) ;; *) CGROOT= ;; esac
	if [ -n "$CGROOT" ]; then
		killall_of "in $CGROOT" 30 cgprocs "$CGROOT"
	fi
	# The node's sandpit containerd, once no agent Pod is left to make
	# sandboxes: first its tasks (the sandboxes, in every containerd
	# namespace it has: they are this node's), then the daemon; shims
	# left are in the node's network namespace (below).
	sock=$dir/host/run/containerd/containerd.sock
	if [ -n "$(recorded "$dir" sandpit-containerd)" ]; then
		local ns
		for ns in $(timeout 10 ctr --address "$sock" namespaces ls -q 2>/dev/null); do
			for f in $(timeout 10 ctr --address "$sock" -n "$ns" tasks ls -q 2>/dev/null); do
				timeout 10 ctr --address "$sock" -n "$ns" tasks kill -s KILL "$f" >/dev/null 2>&1 || true
				timeout 20 ctr --address "$sock" -n "$ns" tasks delete -f "$f" >/dev/null 2>&1 || true
			done
		done
	fi
	stop_one "$dir" sandpit-containerd
	sock=$dir/containerd/containerd.sock
	# Their tasks, so that containerd shuts the shims down cleanly
	# (sockets, rootfs mounts).
	if [ -n "$(recorded "$dir" containerd)" ]; then
		for f in $(timeout 10 "$bindir/ctr" --address "$sock" -n k8s.io tasks ls -q 2>/dev/null); do
			timeout 10 "$bindir/ctr" --address "$sock" -n k8s.io tasks delete -f "$f" >/dev/null 2>&1 || true
		done
	fi
	stop_one "$dir" containerd
	# Shims still there (containerd was killed, or a delete failed).
	pids=$(shims "$sock")
	if [ -n "$pids" ]; then
		# shellcheck disable=SC2086 # a list of pids
		kill -9 $pids 2>/dev/null || true
		deadline=$((SECONDS + 10))
		while [ -n "$(shims "$sock")" ] && [ $SECONDS -lt $deadline ]; do
			sleep 0.1
		done
	fi
	# Anything else still in the node's network namespace (the sandpit
	# containerd's shims, a daemon whose pid file was lost): the namespace
	# is this node's alone, so what is in it is the node's.
	killall_of "in the node's network namespace" 10 innetns "$dir"
}

# killall_of WHERE SECONDS LIST...: SIGKILLs the pids command LIST...
# prints until it prints none, for at most SECONDS; says what is left.
killall_of() {
	local where=$1 deadline=$((SECONDS + $2)) pids
	shift 2
	while pids=$("$@") && [ -n "$pids" ]; do
		# shellcheck disable=SC2086 # a list of pids
		kill -9 $pids 2>/dev/null || true
		[ $SECONDS -lt $deadline ] || {
			echo "k8s.sh: processes left $where: $pids" >&2
			break
		}
		sleep 0.1
	done
}

# innetns prints the pids of live processes in DIR's node network
# namespace (same namespace inode as /run/netns/NETNS).
innetns() {
	local key val NETNS="" ino f pid
	while IFS='=' read -r key val; do
		[ "$key" = NETNS ] && NETNS=$val
	done <"$1/node.env"
	[ -n "$NETNS" ] && [ -e "/run/netns/$NETNS" ] || return 0
	ino=$(stat -L -c %i "/run/netns/$NETNS") || return 0
	for f in /proc/[0-9]*/ns/net; do
		[ "$(stat -L -c %i "$f" 2>/dev/null)" = "$ino" ] || continue
		pid=${f#/proc/}
		pid=${pid%/ns/net}
		[ "$pid" != "$$" ] && [ -n "$(starttime "$pid")" ] && echo "$pid"
	done
	return 0
}

# down_host undoes, once nothing of the node runs and the apiserver is
# stopped too (its connections to itself go through HOSTIP: with the veth
# gone first it waits for them until killed), what up --node changed on
# the host.
down_host() {
	local dir=$1 f key val deadline m h
	local NETNS="" HOSTVETH="" CGROOT=""
	while IFS='=' read -r key val; do
		case "$key" in
		NETNS) NETNS=$val ;;
		HOSTVETH) HOSTVETH=$val ;;
		CGROOT) CGROOT=$val ;;
		esac
	done <"$dir/node.env"
	case "$CGROOT" in /sandpit-k8s-?*) ;; *) CGROOT= ;; esac
	# Sockets of killed shims, named in their bundles.
	for f in "$dir"/containerd/state/io.containerd.runtime.v2.task/*/*/address; do
		[ -f "$f" ] || continue
		m=$(cat "$f")
		m=${m#unix://}
		case "$m" in /run/containerd/s/*) [ -S "$m" ] && rm -f "$m" ;; esac
	done
	# Mounts: containerd's and the shims' (rootfs, shm, netns), the
	# kubelet's volumes, DIR/kubelet itself.
	for _ in 1 2 3; do
		while read -r m; do
			[ -n "$m" ] || continue
			umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
		done < <(undermounts "$dir")
		[ -z "$(undermounts "$dir")" ] && break
		sleep 0.2
	done
	[ -z "$(undermounts "$dir")" ] || echo "k8s.sh: mounts left under $dir: $(undermounts "$dir" | tr '\n' ' ')" >&2
	if [ -n "$CGROOT" ]; then
		deadline=$((SECONDS + 10))
		for h in $(hierarchies); do
			[ -d "$h$CGROOT" ] || continue
			# Deepest first; a cgroup whose last process is a zombie
			# not yet reaped is busy for a moment.
			while ! find "$h$CGROOT" -depth -type d -exec rmdir {} + 2>/dev/null && [ -d "$h$CGROOT" ]; do
				[ $SECONDS -lt $deadline ] || {
					echo "k8s.sh: could not remove $h$CGROOT" >&2
					break
				}
				sleep 0.1
			done
		done
	fi
	if [ -n "$NETNS" ] && [ -e "/run/netns/$NETNS" ]; then
		ip netns delete "$NETNS" || echo "k8s.sh: could not delete netns $NETNS" >&2
	fi
	# The veth goes with the namespace, once nothing holds it.
	if [ -n "$HOSTVETH" ]; then
		deadline=$((SECONDS + 10))
		while ip link show "$HOSTVETH" >/dev/null 2>&1 && [ $SECONDS -lt $deadline ]; do
			ip link delete "$HOSTVETH" 2>/dev/null || sleep 0.1
		done
	fi
	rm -f "$dir/node.env"
}

up() {
	local dir=${1:-}
	case "$dir" in "" | -*) die "usage: $0 up DIR [--node] [--services] [--sandpit BIN] [--owner PID]" ;; esac
	shift
	local owner="" node=""
	services="" sandpit=""
	while [ $# -gt 0 ]; do
		case "$1" in
		--owner)
			owner=${2:?--owner needs a pid}
			shift 2
			;;
		--node)
			node=1
			shift
			;;
		--services)
			node=1 services=1
			shift
			;;
		--sandpit)
			node=1 sandpit=${2:?--sandpit needs the sandpit binary}
			[ -x "$sandpit" ] || die "--sandpit $sandpit: not an executable"
			sandpit=$(readlink -f "$sandpit")
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
	if [ -n "$node" ] && [ "$(id -u)" -ne 0 ]; then
		die "up --node needs root (a network namespace, cgroups, mounts)"
	fi
	if [ -n "$node" ]; then
		build >/dev/null
	else
		build --control-plane >/dev/null
	fi
	mkdir -p "$dir"
	dir=$(cd "$dir" && pwd)
	local n
	[ ! -f "$dir/node.env" ] || die "a node was started in $dir: $0 down $dir"
	for n in kube-apiserver etcd watcher containerd kubelet kube-scheduler kube-controller-manager kube-proxy sandpit-containerd up; do
		if [ -n "$(recorded "$dir" $n)" ]; then
			die "a control plane already runs in $dir ($n pid $(recorded "$dir" $n)): $0 down $dir"
		fi
	done
	local start cp=""
	start=$(date +%s%N)
	umask 077
	# Whatever fails or is interrupted from here on leaves nothing running.
	# shellcheck disable=SC2064 # $dir now, not at exit
	trap "down $(printf %q "$dir")" EXIT
	# A down while this up runs (the owner died midway) stops it first:
	# else it would go on starting what that down has already stopped.
	record "$dir" up $$
	if [ -n "$owner" ]; then
		# A watcher, started first, that takes the control plane down
		# when its owner is gone, even when the owner was killed midway
		# through this up.
		setsid "$(readlink -f "$0")" _watch "$dir" "$owner" "$ownerstart" \
			</dev/null >>"$dir/watcher.log" 2>&1 &
		record "$dir" watcher $! || die "the owner watcher did not start"
	fi
	local bind=127.0.0.1 extra=
	if [ -n "$node" ]; then
		# Unix sockets (containerd's, the kubelet's) live under DIR, up
		# to 40 bytes below it; a socket path has at most 107.
		[ ${#dir} -le 64 ] || die "DIR is ${#dir} bytes long, at most 64 for --node: its sockets would not fit in a unix socket path"
		# A Pod's processes, in a user namespace (hostUsers: false), must
		# traverse DIR to their root filesystem under DIR/containerd.
		chmod 711 "$dir"
		local d=$dir
		while [ "$d" != / ]; do
			d=$(dirname "$d")
			[ -n "$(find "$d" -maxdepth 0 -perm -o=x)" ] ||
				die "$d is not searchable by others (chmod o+x): Pods in user namespaces could not reach their root filesystem under $dir"
		done
		node_names "$dir"
		node_net "$dir"
		bind=$hostip
		extra=",IP:$hostip"
		# With the cluster's services the apiserver keeps the
		# `kubernetes` Service's endpoints (HOSTIP, which Pods reach
		# through kube-proxy); else none (see start_apiserver).
		[ -z "$services" ] || reconciler=lease
		apiserver_extra=(--kubelet-client-certificate "$dir/pki/apiserver-kubelet-client.crt"
			--kubelet-client-key "$dir/pki/apiserver-kubelet-client.key"
			--kubelet-preferred-address-types InternalIP)
	fi
	pki "$dir" "$svcip" "$extra"
	[ -z "$node" ] || node_pki "$dir"
	start_etcd "$dir"
	start_apiserver "$dir" "$bind"
	kubeconfig "$dir" "$apiserver_url" admin >"$dir/kubeconfig"
	kubeconfig "$dir" "$apiserver_url" nobody >"$dir/nobody.kubeconfig"
	if [ -n "$node" ]; then
		local nodestart
		nodestart=$(date +%s%N)
		up_node "$dir"
		cp=" (control plane $(since "$start" "$nodestart"), node Ready and set up $(since "$nodestart"))"
	fi
	trap - EXIT
	rm -f "$dir/up.pid"
	echo "k8s.sh: up in $(since "$start")$cp: $apiserver_url (logs: $dir/*.log)" >&2
	echo "KUBECONFIG=$dir/kubeconfig"
	echo "APISERVER=$apiserver_url"
	echo "ETCD=$etcd_url"
	if [ -n "$node" ]; then
		echo "NETNS=$netns"
		echo "CTR_ADDRESS=$ctr_address"
		echo "NODE=$nodename"
		echo "NODE_IP=$nodeip"
		echo "CGROOT=$cgroot"
	fi
	if [ -n "$sandpit" ]; then
		echo "SANDPIT_HOST=$dir/host"
		echo "SANDPIT_CONTAINERD=$dir/host/run/containerd/containerd.sock"
	fi
}

# since prints the seconds from nanosecond time $1 to $2 (default now).
since() {
	local d=$((${2:-$(date +%s%N)} - $1))
	printf '%d.%02ds' $((d / 1000000000)) $((d % 1000000000 / 10000000))
}

# stop_one stops the process recorded in DIR/NAME.pid, if it is still that
# process (same pid, same start time), with the process group it leads
# (setsid made one for it): SIGTERM, up to 30s to exit, then SIGKILL; it
# returns when none of them is left. Only that group is signalled, never
# anything found by name.
stop_one() {
	local dir=$1 name=$2 sig=${3:-TERM} pid deadline
	pid=$(recorded "$dir" "$name")
	if [ -n "$pid" ] && [ "$pid" != "$$" ]; then
		kill -s "$sig" -- "-$pid" 2>/dev/null || kill -s "$sig" "$pid" 2>/dev/null || true
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
	# An up still running: killed at once (what it started is recorded,
	# and its own exit trap would wait for this down's lock).
	stop_one "$dir" up KILL
	[ ! -f "$dir/node.env" ] || down_node "$dir"
	stop_one "$dir" kube-apiserver
	stop_one "$dir" etcd
	[ ! -f "$dir/node.env" ] || down_host "$dir"
	flock -u 8
	exec 8>&-
}

# main is the command line. bash reads a script as it runs it: the whole
# of it is read (function definitions) before the one line below runs,
# so a long-running up, build or _watch is not disturbed by an edit of
# this file (a checkout updated meanwhile).
main() {
	case "${1:-}" in
	build)
		case "${2:-}" in "" | --control-plane) ;; *) die "usage: $0 build [--control-plane]" ;; esac
		build "${2:-}"
		;;
	up)
		shift
		up "$@"
		;;
	down) down "${2:-}" ;;
	import)
		[ $# -eq 3 ] || die "usage: $0 import DIR IMAGE.tar"
		[ -S "$2/containerd/containerd.sock" ] || die "no node runs in $2 (up --node)"
		[ -f "$3" ] || die "no file $3"
		import_image "$2" "$3"
		;;
	_watch)
		shift
		watch "$@"
		;;
	*)
		echo "usage: $0 build | up DIR [--node] [--services] [--sandpit BIN] [--owner PID] | down DIR | import DIR IMAGE.tar" >&2
		exit 2
		;;
	esac
}

main "$@"; exit
