#!/usr/bin/env bash
# Install what sandpit needs on a Debian/Ubuntu host, skipping what is there:
# containerd and runc (Debian's packages), debootstrap to build images
# offline, and checks that a Go toolchain new enough to build sandpit exists.
# Output goes to stderr: this script runs before `sandpit serve`, whose
# stdout is the MCP protocol.
set -euo pipefail
exec 3>&1 1>&2

need=()
for pkg in containerd runc debootstrap debian-archive-keyring ca-certificates; do
	dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "install-deps: missing packages: ${need[*]} (run as root: sudo $0)"
		exit 1
	fi
	echo "install-deps: installing ${need[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# Go: sandpit needs Go >= 1.25 (containerd's v1.7 client does). Debian's
# golang package is older; /usr/local/go is where the upstream tarball goes.
export PATH="/usr/local/go/bin:$PATH"
if ! command -v go >/dev/null; then
	echo "install-deps: no Go toolchain found: install Go 1.25 or newer (https://go.dev/doc/install) into /usr/local/go"
	exit 1
fi
gover=$(go env GOVERSION | sed 's/^go//')
if [ "$(printf '%s\n1.25\n' "$gover" | sort -V | head -n1)" != "1.25" ]; then
	echo "install-deps: Go $gover is too old: sandpit needs Go 1.25 or newer"
	exit 1
fi
echo "install-deps: ok (containerd $(containerd --version | awk '{print $3}'), runc $(runc --version | awk 'NR==1{print $3}'), go $gover)"
