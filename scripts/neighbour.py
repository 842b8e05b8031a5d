#!/usr/bin/env python3
"""A live neighbour for the test suite: `sandpit serve` (default state dir,
default instance) on the same containerd, running run_code in a loop the
whole time, every run checked.

    scripts/neighbour.py --address SOCK [--until-file F] [--seconds N]

It runs until F exists (or N seconds pass), then closes the server's stdin
and prints one line: 'neighbour: N runs, N succeeded, N failed'. Exit 1 if
any run did not succeed, or if the server died. Used to check the suite
beside a live server (issue 24): the suite must not kill a live server's
runs, and must not count its sandboxes as its own leftovers.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ap = argparse.ArgumentParser()
ap.add_argument("--address", required=True)
ap.add_argument("--bin", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bin", "sandpit"))
ap.add_argument("--until-file")
ap.add_argument("--seconds", type=float, default=3600)
a = ap.parse_args()

ws = tempfile.mkdtemp(prefix="sandpit-neighbour-")
proc = subprocess.Popen(
    [a.bin, "serve", "--address", a.address, "--no-start", "--workspace", ws,
     "--history-db", "off", "--build-images=false"],
    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(os.path.join(ws, "..", os.path.basename(ws) + ".log"), "w"),
    text=True, bufsize=1)

next_id = 0


def call(method, params):
    global next_id
    next_id += 1
    proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": next_id, "method": method, "params": params}) + "\n")
    proc.stdin.flush()
    while True:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError("server closed stdout")
        msg = json.loads(line)
        if msg.get("id") == next_id:
            return msg


call("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                    "clientInfo": {"name": "neighbour", "version": "1"}})
proc.stdin.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n")
proc.stdin.flush()

runs = ok = 0
failures = []
end = time.time() + a.seconds
i = 0
while time.time() < end and not (a.until_file and os.path.exists(a.until_file)):
    i += 1
    # Alternate a quick run and one that lasts 3 s, so that runs are in
    # flight while the suite's servers start and sweep.
    code = f"import time\ntime.sleep({3 if i % 2 else 0})\nprint({i}*2)"
    try:
        r = call("tools/call", {"name": "run_code", "arguments": {"language": "python", "code": code, "timeout_seconds": 60}})
    except Exception as e:  # the server died
        failures.append(f"run {i}: {e}")
        runs += 1
        break
    runs += 1
    res = r.get("result") or {}
    sc = res.get("structuredContent") or {}
    if sc.get("status") == "success" and sc.get("stdout", "").strip() == str(i * 2):
        ok += 1
    else:
        failures.append(f"run {i}: {json.dumps(r)[:600]}")

proc.stdin.close()
try:
    proc.wait(timeout=60)
except subprocess.TimeoutExpired:
    proc.kill()
for f in failures[:10]:
    print("neighbour:", f, file=sys.stderr)
print(f"neighbour: {runs} runs, {ok} succeeded, {runs - ok} failed")
sys.exit(0 if runs and ok == runs else 1)
