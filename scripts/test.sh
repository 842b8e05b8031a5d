#!/usr/bin/env bash
# The whole test suite, exactly as CI runs it (.ci/run calls this):
# installs what is missing, starts a private containerd, builds the language
# images (or reuses the cached ones), then runs every test — the containerd
# integration tests included, which fail rather than skip here — as root,
# and last the rootless smoke suite in a cgroup v2 + systemd guest under qemu
# (scripts/vm-test.sh; SANDPIT_VM_TEST=0 skips it, saying so).
#
#   sudo scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
	echo "test.sh: the integration tests create containers: run as root (sudo $0)" >&2
	exit 1
fi
start=$(date +%s)
vm=--vm
[ "${SANDPIT_VM_TEST:-1}" = 0 ] && vm=
# --browser: Debian's chromium, which the dashboard's tests drive.
scripts/install-deps.sh $vm --browser
export PATH="/usr/local/go/bin:$PATH"

echo "== build"
scripts/build.sh
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
	echo "gofmt needed on:"; echo "$unformatted"; exit 1
fi
go vet ./...
echo "== lint"
# go.mod lists exactly what the code imports (direct vs indirect included).
if ! go mod tidy -diff; then
	echo "go.mod/go.sum are not tidy: run go mod tidy"; exit 1
fi
go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

echo "== containerd"
sock=$(scripts/containerd.sh start)

echo "== images, ory/hydra (the OAuth server the auth tests run against) and a Kubernetes control plane"
# hydra is built from the Go module proxy into a cache outside the checkout
# (cold: about 3 minutes), beside the image builds.
scripts/hydra.sh build >"${TMPDIR:-/tmp}/sandpit-hydra-build.log" 2>&1 &
hydra=$!
# kube-apiserver and etcd for the cluster tests (scripts/k8s.sh: from the Go
# module proxy into the same cache; cold about 4 minutes of CPU), beside.
scripts/k8s.sh build >"${TMPDIR:-/tmp}/sandpit-k8s-build.log" 2>&1 &
k8s=$!
# toolchain: what most integration tests run on; datascience: what serve
# runs every language on by default (the data stack, plots, JavaScript).
# Built side by side: one downloads while the other unpacks (cold, about
# 5 and 11 minutes on a loaded 2-core machine; cached, a minute together).
bin/sandpit images build --address "$sock" toolchain &
toolchain=$!
bin/sandpit images build --address "$sock" datascience
wait "$toolchain"
if ! wait "$hydra"; then
	echo "scripts/hydra.sh build failed:"; cat "${TMPDIR:-/tmp}/sandpit-hydra-build.log"; exit 1
fi
if ! wait "$k8s"; then
	echo "scripts/k8s.sh build failed:"; cat "${TMPDIR:-/tmp}/sandpit-k8s-build.log"; exit 1
fi

echo "== tests"
export SANDPIT_TEST_CONTAINERD="$sock"
export SANDPIT_REQUIRE_INTEGRATION=1
export SANDPIT_HYDRA=1 # OAuth tests against a real ory/hydra (scripts/hydra.sh)
# The dashboard's tests drive this headless Chromium (chromedp); set, they
# fail rather than skip without it.
SANDPIT_BROWSER=$(command -v chromium)
export SANDPIT_BROWSER
export SANDPIT_BIN="$PWD/bin/sandpit"
export SANDPIT_TEST_RUNTIME=sandpit # the shim serve uses by default
# A live neighbour: `sandpit serve` with the default state dir and instance
# on the same containerd, running run_code the whole time the Go tests run.
# The suite's servers (instance default, other state dirs) must never touch
# its sandboxes, nor count them as their leftovers; every run must succeed.
# SANDPIT_NEIGHBOUR=0 leaves it out.
neighbour=
if [ "${SANDPIT_NEIGHBOUR:-1}" != 0 ]; then
	nbdir=$(mktemp -d)
	python3 scripts/neighbour.py --address "$sock" --until-file "$nbdir/stop" >"$nbdir/out" 2>&1 &
	neighbour=$!
	trap 'touch "$nbdir/stop"' EXIT
fi
go test -count=1 -timeout 30m ./...
# The suite above runs sandboxes under sandpit's own shim (the default);
# the containerd runc shim stays selectable, so the attack suite, the
# pool's equivalence table and the stdio integrity soak run under it too.
echo "== runtime tests under io.containerd.runc.v2"
SANDPIT_TEST_RUNTIME=io.containerd.runc.v2 go test -count=1 -timeout 20m \
	-run 'TestAttack|TestSecurityFromInside|TestPoolBehavesLikeCold|TestStdioIntegrity|TestRunPrograms' ./runtime

if [ -n "$neighbour" ]; then
	touch "$nbdir/stop"
	if ! wait "$neighbour"; then
		echo "== the live neighbour's runs failed beside the suite:"; cat "$nbdir/out"; exit 1
	fi
	echo "== $(tail -1 "$nbdir/out") (a live server beside the suite)"
fi

if [ -x scripts/inspector-test.sh ]; then
	echo "== MCP Inspector (third-party client)"
	scripts/inspector-test.sh "$sock"
fi
if [ -x scripts/http-clients-test.sh ]; then
	echo "== MCP TypeScript SDK over HTTP (two tenants, one server)"
	scripts/http-clients-test.sh "$sock"
fi
if [ "${SANDPIT_VM_TEST:-1}" = 0 ]; then
	echo "== rootless VM test: SKIPPED (SANDPIT_VM_TEST=0)"
else
	echo "== rootless on cgroup v2 + systemd (qemu guest)"
	vm_start=$(date +%s)
	scripts/vm-test.sh
	echo "== rootless VM test passed in $(( $(date +%s) - vm_start ))s"
fi
echo "== all tests passed in $(( $(date +%s) - start ))s"
