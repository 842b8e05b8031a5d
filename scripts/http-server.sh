# Sourced by the client test scripts (inspector-test.sh,
# http-clients-test.sh): start `sandpit serve --listen` on a loopback port
# the kernel picks, learn its URL from its log, and stop it.
#
#   http_server_start SOCK DIR NAME [serve flags...]
#       serves with --data-dir DIR/data (make tokens there first: the
#       server re-reads the token file at most once a second), state in
#       DIR/state, instance NAME, log DIR/serve.log; sets http_server_pid
#       and http_server_url (http://127.0.0.1:PORT, no path)
#   http_server_stop
#       SIGTERM, then waits for the exit; fails unless it exits 0 in time

http_server_pid=
http_server_url=

http_server_start() {
	local sock=$1 dir=$2 name=$3
	shift 3
	mkdir -p "$dir/data"
	: >"$dir/serve.log"
	bin/sandpit serve --listen 127.0.0.1:0 --address "$sock" --no-start --build-images=false \
		--instance "$name" --state-dir "$dir/state" --data-dir "$dir/data" \
		--memory-mb 256 --timeout 1m "$@" 2>"$dir/serve.log" &
	http_server_pid=$!
	# The port is the kernel's pick: the server logs it once it listens.
	# Waits for that state, not for a pause (generous: a loaded machine).
	local deadline=$((SECONDS + 120)) line
	while :; do
		line=$(grep -m1 'msg="sandpit serving MCP over HTTP"' "$dir/serve.log" || true)
		if [ -n "$line" ]; then
			http_server_url=$(sed -n 's|.* url=\(http://127\.0\.0\.1:[0-9]*\)/mcp.*|\1|p' <<<"$line")
			[ -n "$http_server_url" ] && return 0
			echo "http-server: no url= in the serving line: $line" >&2
			return 1
		fi
		if ! kill -0 "$http_server_pid" 2>/dev/null; then
			echo "http-server: sandpit serve --listen exited before serving:" >&2
			cat "$dir/serve.log" >&2
			http_server_pid=
			return 1
		fi
		if [ "$SECONDS" -ge "$deadline" ]; then
			echo "http-server: sandpit serve --listen not serving after 120 s:" >&2
			cat "$dir/serve.log" >&2
			return 1
		fi
		sleep 0.2
	done
}

http_server_stop() {
	[ -n "$http_server_pid" ] || return 0
	local pid=$http_server_pid rc=0 deadline=$((SECONDS + 120))
	http_server_pid=
	kill -TERM "$pid" 2>/dev/null || true
	while kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do
		sleep 0.2
	done
	if kill -0 "$pid" 2>/dev/null; then
		echo "http-server: sandpit serve did not exit 120 s after SIGTERM: killing it" >&2
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
		return 1
	fi
	wait "$pid" || rc=$?
	if [ "$rc" -ne 0 ]; then
		echo "http-server: sandpit serve exited $rc after SIGTERM" >&2
		return 1
	fi
}
