#!/usr/bin/env bash
# Run the sandpit MCP server on stdio, setting up everything it needs first.
# Point an MCP client at this script.
#
#   scripts/serve.sh [serve flags...]          as a normal user (rootless)
#   sudo scripts/serve.sh [serve flags...]     as root
#   e.g. --workspace /srv/agent
#
# As a normal user it checks the programs a rootless containerd needs and
# the user's /etc/subuid and /etc/subgid ranges (saying how to fix what is
# missing; it never uses sudo), starts a rootless containerd for this user
# (scripts/rootless.sh: rootlesskit, and on cgroup v2 with systemd a
# delegated unit of the user's own manager, so every limit is enforced), and
# serves inside its namespaces; the language image is built or imported into
# it on first use, cached in ~/.cache/sandpit/images. On a host where limits
# cannot be enforced rootless (cgroup v1, or no delegation), it says why and
# what to do, and sandpit refuses to run code. On cgroup v1 that is certain
# before anything starts: it serves without containerd and builds nothing
# (unless --allow-unenforced-limits is given); without delegation on cgroup
# v2 the rootless containerd starts (its cgroup is what sandpit checks) and
# the server builds no image.
#
# As root it installs containerd, runc and debootstrap if missing, and sandpit
# uses the system containerd if one answers or starts a private one.
#
# stdout is the MCP protocol: everything else goes to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"

# Rebuild only when a binary is missing or a source file is newer than the
# oldest one (a copy with bin/ and scripts/ only never rebuilds). Rootless,
# sandboxes run under containerd's runc shim: sandpit's own shims (which
# create sandboxes as root) are neither built nor needed.
bins=(bin/sandpit)
build=(scripts/build.sh)
if [ "$(id -u)" -eq 0 ]; then
	bins+=(bin/sandpit-shim bin/sandpit-shim-init bin/containerd-shim-sandpit-v1)
else
	build+=(--rootless)
fi
stale() {
	local b
	for b in "${bins[@]}"; do
		[ -x "$b" ] || return 0
		[ -z "$(find cmd runtime oci mcp store images internal go.mod go.sum -newer "$b" -print -quit 2>/dev/null)" ] || return 0
	done
	return 1
}
# A normal user on cgroup v1 gets a server that refuses every run (each
# run_code answers why): nothing that runs could use is started or built.
cgroup_fs=${SANDPIT_CGROUP_FS:-/sys/fs/cgroup} # tests point it elsewhere
if [ "$(id -u)" -ne 0 ] && [ ! -f "$cgroup_fs/cgroup.controllers" ]; then
	case " $* " in
	*" --allow-unenforced-limits "* | *" --allow-unenforced-limits=true "*) ;;
	*)
		echo "serve.sh: this host mounts cgroup v1 (or hybrid), where a normal user's sandboxes cannot be limited: sandpit refuses every run here (run it as root: sudo scripts/serve.sh, or boot with systemd.unified_cgroup_hierarchy=1). Serving without containerd or images." >&2
		if stale; then
			echo "serve.sh: building ${bins[*]}" >&2
			"${build[@]}" >&2
		fi
		state=${XDG_RUNTIME_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}}/sandpit/state
		exec bin/sandpit serve --no-start --rootless --build-images=false --state-dir "$state" "$@"
		;;
	esac
fi

deps=()
stale || deps+=(--no-go)
[ "$(id -u)" -eq 0 ] || deps+=(--rootless)
scripts/install-deps.sh "${deps[@]}"
if stale; then
	echo "serve.sh: building ${bins[*]}" >&2
	"${build[@]}" >&2
fi

if [ "$(id -u)" -eq 0 ]; then
	exec bin/sandpit serve "$@"
fi

sock=$(scripts/rootless.sh start)
export SANDPIT_CACHE_DIR=${SANDPIT_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/sandpit/images}
exec scripts/rootless.sh exec -- "$PWD/bin/sandpit" serve --address "$sock" "$@"
