#!/usr/bin/env bash
# Check what sandpit needs on a Debian/Ubuntu host and, as root, install what
# is missing. It looks for the programs and their versions, not for package
# names: hosts that run Docker have containerd and runc from Docker's
# containerd.io package, and `apt-get install containerd runc` there would
# fail or remove Docker. So a program found on PATH is used wherever it came
# from, only missing ones are installed, and apt-get runs with --no-remove:
# this script never removes a package. It says what it found.
#
#   scripts/install-deps.sh [--rootless] [--no-go] [--vm] [--browser]
#     --rootless  also rootlesskit, newuidmap and newgidmap (a normal user's containerd)
#     --no-go     bin/sandpit is built already: no Go toolchain needed
#     --vm        also what scripts/vm-test.sh needs: qemu-system-x86_64, mkfs.ext4
#     --browser   also Debian's chromium, the headless browser the dashboard's tests drive
#
# Output goes to stderr: this script runs before `sandpit serve`, whose
# stdout is the MCP protocol.
#
# For its tests (scripts/installdeps_test.go): SANDPIT_DEPS_SBIN replaces the
# sbin directories appended to PATH, SANDPIT_DEPS_ROOT prefixes the files
# checked.
set -euo pipefail
exec 1>&2

rootless=0 want_go=1 vm=0 browser=0
for arg in "$@"; do
	case $arg in
	--rootless) rootless=1 ;;
	--no-go) want_go=0 ;;
	--vm) vm=1 ;;
	--browser) browser=1 ;;
	*) echo "usage: $0 [--rootless] [--no-go] [--vm] [--browser]"; exit 2 ;;
	esac
done
# runc and the uid map helpers live in sbin, which a normal user's PATH may lack.
export PATH="$PATH:${SANDPIT_DEPS_SBIN-/usr/local/sbin:/usr/sbin:/sbin}"
root=${SANDPIT_DEPS_ROOT:-}

say() { echo "install-deps: $*"; }

# version prints a program's version number (the first x.y[.z] of its
# --version output), or "unknown".
version() {
	local v
	v=$("$1" --version 2>/dev/null | grep -oE '[0-9]+\.[0-9]+(\.[0-9]+)?' | head -n1) || true
	echo "${v:-unknown}"
}

# origin says which package installed a file, if dpkg knows one.
origin() {
	local p pkg
	for p in "$1" "$(readlink -f "$1")"; do
		if pkg=$(dpkg-query -S "$p" 2>/dev/null | head -n1 | cut -d: -f1) && [ -n "$pkg" ]; then
			echo "package $pkg"
			return
		fi
	done
	echo "not from a Debian package"
}

# older VERSION MIN: VERSION is known and below MIN.
older() {
	[ "$1" != unknown ] && [ "$1" != "$2" ] && [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -n1)" = "$1" ]
}

missing=() # packages to install
report=()  # what was found
problems=()

# need CMD PACKAGE [MIN_VERSION]: CMD is on PATH (from any package), or
# PACKAGE is to be installed.
need() {
	local cmd=$1 pkg=$2 min=${3:-} path v
	if ! path=$(command -v "$cmd"); then
		missing+=("$pkg")
		return
	fi
	v=$(version "$cmd")
	report+=("$cmd $v ($path, $(origin "$path"))")
	if [ -n "$min" ] && older "$v" "$min"; then
		problems+=("$cmd $v at $path is older than $min, which sandpit needs: upgrade it through $(origin "$path") (nothing was changed)")
	fi
}

# need_file FILE PACKAGE: FILE exists, or PACKAGE is to be installed.
need_file() {
	[ -e "$root$1" ] || missing+=("$2")
}

need containerd containerd 1.6
need runc runc 1.1
need debootstrap debootstrap
if [ "$want_go" -eq 1 ]; then
	# Building: cgo (SQLite, and, as root, seccomp in sandpit-shim through
	# libseccomp; rootless serving builds no shim).
	need gcc gcc
	# The test command's live neighbour (scripts/neighbour.py).
	need python3 python3
	# The test command's third-party clients (the MCP Inspector, the
	# TypeScript SDK, mcp-remote: scripts/inspector-test.sh,
	# scripts/http-clients-test.sh).
	need npm npm
	[ "$rootless" -eq 1 ] || need_file /usr/include/seccomp.h libseccomp-dev
	if [ "$rootless" -eq 0 ]; then
		# scripts/k8s.sh (the cluster tests' Kubernetes, as root): runc
		# built with libseccomp (above), a static C pause (libc.a), a
		# network namespace and veth for its node (ip).
		need_file "/usr/lib/$(uname -m)-linux-gnu/libc.a" libc6-dev
		need_file /sbin/ip iproute2
		# Its node's Pod network and Services (up --services): Debian's
		# CNI plugins and, for kube-proxy, iptables.
		need_file /usr/lib/cni/bridge containernetworking-plugins
		need iptables-restore iptables
	fi
fi
need_file /usr/share/keyrings/debian-archive-keyring.gpg debian-archive-keyring
need_file /etc/ssl/certs/ca-certificates.crt ca-certificates
if [ "$rootless" -eq 1 ]; then
	need rootlesskit rootlesskit
	need newuidmap uidmap
	need newgidmap uidmap
fi
if [ "$vm" -eq 1 ]; then
	need qemu-system-x86_64 qemu-system-x86
	need mkfs.ext4 e2fsprogs
fi
if [ "$browser" -eq 1 ]; then
	need chromium chromium
fi

if [ ${#problems[@]} -gt 0 ]; then
	printf 'install-deps: %s\n' "${problems[@]}"
	exit 1
fi
if [ ${#missing[@]} -gt 0 ]; then
	mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
	if [ "$(id -u)" -ne 0 ]; then
		say "missing: ${missing[*]} (install them as root: sudo apt-get install --no-install-recommends ${missing[*]})"
		exit 1
	fi
	say "installing ${missing[*]} (found: ${report[*]:-nothing})"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	# --no-remove: if a package would replace one already there (Docker's
	# containerd.io provides containerd and runc), apt-get stops instead.
	if ! apt-get install -y -qq --no-install-recommends --no-remove "${missing[@]}" >/dev/null; then
		say "apt-get could not install ${missing[*]} without removing a package; nothing was removed. Install the missing programs from the packages your host already uses (e.g. Docker's containerd.io ships containerd and runc)."
		exit 1
	fi
fi

gover=""
if [ "$want_go" -eq 1 ]; then
	# Go: sandpit needs Go >= 1.25 (containerd's v1.7 client does). Debian's
	# golang package is older; /usr/local/go is where the upstream tarball goes.
	export PATH="/usr/local/go/bin:$PATH"
	if ! command -v go >/dev/null; then
		say "no Go toolchain found: install Go 1.25 or newer (https://go.dev/doc/install) into /usr/local/go"
		exit 1
	fi
	gover=$(go env GOVERSION | sed 's/^go//')
	if older "$gover" 1.25; then
		say "Go $gover is too old: sandpit needs Go 1.25 or newer"
		exit 1
	fi
	gover=", go $gover"
fi
# What is there now, including anything just installed.
report=() missing=()
need containerd containerd
need runc runc
if [ ${#missing[@]} -gt 0 ]; then
	say "still missing after apt-get: ${missing[*]}"
	exit 1
fi
say "ok: ${report[0]}, ${report[1]}$gover"
