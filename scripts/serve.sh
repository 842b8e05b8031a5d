#!/usr/bin/env bash
# Run the sandpit MCP server on stdio, setting up everything it needs first:
# packages (containerd, runc, debootstrap), the sandpit binary, and — inside
# sandpit itself — a private containerd when no system one answers and the
# language image on first use. Point an MCP client at this script.
#
#   sudo scripts/serve.sh [serve flags...]     e.g. --workspace /srv/agent
#
# stdout is the MCP protocol: everything else goes to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
export PATH="/usr/local/go/bin:$PATH"
mkdir -p bin
# Rebuild only when a source file is newer than the binary.
if [ ! -x bin/sandpit ] || [ -n "$(find cmd runtime oci mcp store images internal go.mod go.sum -newer bin/sandpit -print -quit)" ]; then
	echo "serve.sh: building bin/sandpit" >&2
	go build -o bin/sandpit ./cmd/sandpit >&2
fi
exec bin/sandpit serve "$@"
