#!/usr/bin/env bash
# Drive `sandpit serve` with a real third-party MCP client: the MCP
# Inspector's CLI mode (npm @modelcontextprotocol/inspector), over stdio and
# over HTTP (`serve --listen` with a bearer token: Streamable HTTP at /mcp,
# legacy SSE at /sse; no token is refused). Installs it
# into a cache outside the checkout on first use. Skips (saying so) only when
# npm is not installed at all; any failure of the client or server fails.
#
#   scripts/inspector-test.sh CONTAINERD_SOCKET
set -euo pipefail
cd "$(dirname "$0")/.."
sock=${1:?usage: $0 CONTAINERD_SOCKET}
version=2.12.0
cache=${SANDPIT_CACHE_DIR:-/var/cache/sandpit}/npm
if ! command -v npm >/dev/null; then
	echo "inspector-test: SKIP: npm is not installed (apt-get install npm to run this test)"
	exit 0
fi
if [ ! -x "$cache/node_modules/.bin/mcp-inspector" ] || ! grep -q "\"version\": \"$version\"" "$cache/node_modules/@modelcontextprotocol/inspector/package.json" 2>/dev/null; then
	mkdir -p "$cache"
	(cd "$cache" && npm install --no-audit --no-fund --loglevel=error "@modelcontextprotocol/inspector@$version" >/dev/null)
fi
inspector="$cache/node_modules/.bin/mcp-inspector"
. scripts/http-server.sh
work=$(mktemp -d)
trap 'http_server_stop || true; rm -rf "$work"' EXIT
# The Inspector keeps OAuth state (a no-token call starts a login) here, not in ~.
export MCP_STORAGE_DIR="$work/inspector-storage"
server=("$PWD/bin/sandpit" serve --address "$sock" --no-start --build-images=false --instance inspector-test --state-dir "$work/state")
if bin/sandpit serve --help | grep -q -- --workspace; then
	server+=(--workspace "$work/ws")
fi
fail=0 passed=0
target=("${server[@]}") # what the Inspector connects to: a command, or a URL and flags
expect() { # name, grep pattern, inspector args...
	local name=$1 pattern=$2
	shift 2
	local out
	if ! out=$(timeout 120 "$inspector" --cli "${target[@]}" "$@" 2>"$work/err" </dev/null); then
		echo "inspector-test: FAIL $name: client exited non-zero"; cat "$work/err"; fail=1; return
	fi
	if grep -q -- "$pattern" <<<"$out"; then
		echo "inspector-test: ok   $name"; passed=$((passed + 1))
	else
		echo "inspector-test: FAIL $name: output lacks $pattern:"; echo "$out" | head -40; fail=1
	fi
}
expect "tools/list has run_code" '"run_code"' --method tools/list
expect "run_code python" '"stdout": "hello from inspector\\n"' --method tools/call --tool-name run_code --tool-arg language=python 'code=print("hello from inspector")'
# The Inspector exits non-zero on a tool error and says so on stdout/stderr.
if out=$(timeout 120 "$inspector" --cli "${server[@]}" --method tools/call --tool-name run_code --tool-arg language=cobol code=x 2>&1); then
	echo "inspector-test: FAIL unknown language: the client saw success:"; echo "$out" | head -20; fail=1
elif grep -q "tool_is_error" <<<"$out"; then
	echo "inspector-test: ok   unknown language is a tool error"; passed=$((passed + 1))
else
	echo "inspector-test: FAIL unknown language: no tool error in:"; echo "$out" | head -20; fail=1
fi
expect "list_supported_languages" '"cpp"' --method tools/call --tool-name list_supported_languages

# Over HTTP: a token made before the server starts (it re-reads the token
# file at most once a second), the Inspector sending it as a header.
if ! tok=$(bin/sandpit token create --data-dir "$work/http/data" inspector 2>"$work/err" | tail -1) || [ -z "$tok" ]; then
	echo "inspector-test: FAIL sandpit token create:"; cat "$work/err"; exit 1
fi
http_server_start "$sock" "$work/http" inspector-http-test
target=("$http_server_url/mcp" --transport http --header "Authorization: Bearer $tok")
expect "http: tools/list has run_code" '"run_code"' --method tools/list
expect "http: run_code python" '"stdout": "hello over http\\n"' --method tools/call --tool-name run_code --tool-arg language=python 'code=print("hello over http")'
target=("$http_server_url/sse" --transport sse --header "Authorization: Bearer $tok")
expect "sse: tools/list has run_code" '"run_code"' --method tools/list
expect "sse: run_code python" '"stdout": "hello over sse\\n"' --method tools/call --tool-name run_code --tool-arg language=python 'code=print("hello over sse")'
# No token: the server answers 401 naming its OAuth metadata; the
# Inspector, with no TTY to log in on, exits non-zero saying auth_required.
if out=$(timeout 120 "$inspector" --cli "$http_server_url/mcp" --transport http --method tools/list 2>&1 </dev/null); then
	echo "inspector-test: FAIL http without a token: the client saw success:"; echo "$out" | head -20; fail=1
elif grep -q "auth_required" <<<"$out"; then
	echo "inspector-test: ok   http without a token is refused"; passed=$((passed + 1))
else
	echo "inspector-test: FAIL http without a token: no auth_required in:"; echo "$out" | head -20; fail=1
fi
if ! http_server_stop; then
	echo "inspector-test: FAIL the HTTP server did not stop cleanly:"; tail -40 "$work/http/serve.log"; fail=1
fi
[ "$fail" -eq 0 ] && echo "inspector-test: $passed passed, 0 failed" || { echo "inspector-test: failed"; exit 1; }
