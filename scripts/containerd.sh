#!/usr/bin/env bash
# Start, stop or check a private containerd for sandpit: its own root, state,
# sockets and plugin dir, CRI disabled, so it runs beside any system daemon.
# The daemon's config and start-up live in sandpit itself
# (`sandpit containerd ...`, the same code `sandpit serve` uses when no
# system containerd answers); this script builds bin/sandpit if needed.
#
#   scripts/containerd.sh start|stop|status|address|config
#
# Environment: SANDPIT_CONTAINERD_DIR (state and sockets, default /run/sandpit/containerd)
#              SANDPIT_CONTAINERD_ROOT (persistent data, default /var/lib/sandpit/containerd)
#              SANDPIT_BIN (the sandpit binary, default bin/sandpit of this checkout)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
bin=${SANDPIT_BIN:-$repo/bin/sandpit}
if [ ! -x "$bin" ]; then
	echo "containerd.sh: building $bin" >&2
	(cd "$repo" && PATH="/usr/local/go/bin:$PATH" go build -o "$bin" ./cmd/sandpit) >&2
fi
case "${1:-}" in
start | stop | status | address | config) exec "$bin" containerd "$1" ;;
*)
	echo "usage: $0 start|stop|status|address|config" >&2
	exit 2
	;;
esac
