#!/usr/bin/env bash
# Drive `sandpit serve --listen` over HTTP with the MCP TypeScript SDK's
# clients (npm @modelcontextprotocol/sdk, pinned with its lock file in
# scripts/tsclient): two tenants, each with its own token, on one server;
# each confined to its own files and runs; no token and a wrong one refused
# with 401; progress of a run that prints; the legacy SSE transport
# (scripts/tsclient/clients.mjs says what is checked: also resources by
# URI, another tenant's session id, and mcp-remote). The SDK is installed
# into a cache outside the checkout on first use. Skips (saying so) only
# when npm is not installed at all; any failure of a client or the server
# fails.
#
#   scripts/http-clients-test.sh CONTAINERD_SOCKET
set -euo pipefail
cd "$(dirname "$0")/.."
sock=${1:?usage: $0 CONTAINERD_SOCKET}
if ! command -v npm >/dev/null; then
	echo "http-clients-test: SKIP: npm is not installed (apt-get install npm to run this test)"
	exit 0
fi
# npm ci from the lock file, again whenever the lock file changes.
cache=${SANDPIT_CACHE_DIR:-/var/cache/sandpit}/npm/tsclient
if ! cmp -s scripts/tsclient/package-lock.json "$cache/package-lock.json" || [ ! -d "$cache/node_modules/@modelcontextprotocol/sdk" ]; then
	rm -rf "$cache"
	mkdir -p "$cache"
	cp scripts/tsclient/package.json scripts/tsclient/package-lock.json "$cache/"
	(cd "$cache" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi
. scripts/http-server.sh
work=$(mktemp -d)
trap 'http_server_stop || true; rm -rf "$work"' EXIT
# The client runs from the work dir, its modules from the cache.
cp scripts/tsclient/clients.mjs "$work/"
ln -s "$cache/node_modules" "$work/node_modules"
# Tokens before the server starts.
tok_a=$(bin/sandpit token create --data-dir "$work/data" tenant-a 2>/dev/null | tail -1)
tok_b=$(bin/sandpit token create --data-dir "$work/data" tenant-b 2>/dev/null | tail -1)
http_server_start "$sock" "$work" http-clients-test
echo "http-clients-test: server at $http_server_url"
rc=0
SANDPIT_URL=$http_server_url TOKEN_A=$tok_a TOKEN_B=$tok_b timeout 600 node "$work/clients.mjs" || rc=$?
if ! http_server_stop; then
	echo "http-clients-test: FAIL the server did not stop cleanly"; rc=1
fi
if [ "$rc" -ne 0 ]; then
	echo "http-clients-test: failed; the server's log:"; tail -60 "$work/serve.log"
	exit 1
fi
# Each tenant's data lives under its own directory of the data dir.
for t in tenant-a tenant-b; do
	if [ ! -f "$work/data/tenants/$t/workspace/secret-${t#tenant-}.txt" ]; then
		echo "http-clients-test: FAIL $t's file is not in $work/data/tenants/$t/workspace:"; find "$work/data" -maxdepth 4 | head -30; exit 1
	fi
done
echo "http-clients-test: ok   each tenant's file is under its own data dir"
