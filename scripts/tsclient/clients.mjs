// The MCP TypeScript SDK's clients against a running `sandpit serve
// --listen`: two tenants over Streamable HTTP, each confined to its own
// workspace and history (tools and resources), neither able to use the
// other's session id; no token and a wrong token refused with 401;
// progress notifications of a run that prints over time; the legacy SSE
// transport; mcp-remote, the stdio-to-HTTP bridge the README shows, with
// --header and --header-file. scripts/http-clients-test.sh starts the
// server and runs this.
//
//   SANDPIT_URL=http://127.0.0.1:PORT TOKEN_A=spt_... TOKEN_B=spt_... node clients.mjs
//
// Prints one line per check and "N passed, N failed" last; exits non-zero
// when any check failed.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport, StreamableHTTPError } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { SSEClientTransport, SseError } from "@modelcontextprotocol/sdk/client/sse.js";
import { UnauthorizedError } from "@modelcontextprotocol/sdk/client/auth.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const base = process.env.SANDPIT_URL;
const tokens = { a: process.env.TOKEN_A, b: process.env.TOKEN_B };
if (!base || !tokens.a || !tokens.b) {
	console.error("usage: SANDPIT_URL=http://HOST:PORT TOKEN_A=... TOKEN_B=... node clients.mjs");
	process.exit(2);
}
// A run waits for a sandbox on a loaded machine: generous, never a speed
// claim (the server's own --timeout bounds each run).
const callTimeout = 180_000;

let passed = 0, failed = 0;
function ok(name) { passed++; console.log(`http-clients: ok   ${name}`); }
function fail(name, why) { failed++; console.log(`http-clients: FAIL ${name}: ${why}`); }
function check(name, cond, why) { cond ? ok(name) : fail(name, why()); }

function bearer(token) { return token ? { requestInit: { headers: { Authorization: `Bearer ${token}` } } } : {}; }

async function connect(transport) {
	const client = new Client({ name: "sandpit-http-clients-test", version: "1.0.0" });
	await client.connect(transport, { timeout: callTimeout });
	return client;
}

// call runs a tool and returns {result, error}: a JSON-RPC error is caught
// (error set), a tool error is a result with isError.
async function call(client, name, args, opts = {}) {
	try {
		const result = await client.callTool({ name, arguments: args }, undefined, { timeout: callTimeout, ...opts });
		return { result };
	} catch (error) {
		return { error };
	}
}
const text = (r) => (r?.content ?? []).filter((c) => c.type === "text").map((c) => c.text).join("\n");
const show = (x) => (x.error ? `error ${x.error}` : JSON.stringify(x.result).slice(0, 600));
// refused: the call failed, as a tool error or a JSON-RPC error.
const refused = (x) => x.error !== undefined || x.result?.isError === true;

async function tenants() {
	const names = ["a", "b"];
	const c = {};
	for (const t of names) {
		c[t] = await connect(new StreamableHTTPClientTransport(new URL("/mcp", base), bearer(tokens[t])));
		ok(`tenant ${t}: Streamable HTTP initialize (protocol ${c[t].transport.protocolVersion ?? "?"}, server ${c[t].getServerVersion()?.name})`);
	}
	const list = await c.a.listTools();
	check("tools/list has run_code, read_file, get_run", ["run_code", "read_file", "get_run", "get_execution_history"].every((n) => list.tools.some((t) => t.name === n)),
		() => JSON.stringify(list.tools.map((t) => t.name)));

	// Each writes a secret file of its own; both exist before any
	// cross-check, so a refusal means isolation, not absence.
	const secret = { a: `alpha-${process.pid}-${Date.now()}`, b: `bravo-${process.pid}-${Date.now()}` };
	for (const t of names) {
		const w = await call(c[t], "write_file", { path: `secret-${t}.txt`, content: secret[t] });
		check(`tenant ${t}: write_file`, !refused(w), () => show(w));
	}
	const run = {};
	for (const t of names) {
		const other = t === "a" ? "b" : "a";
		const code = [
			"import os",
			`print("hello from tenant ${t}")`,
			`print(open("secret-${t}.txt").read())`,
			`print("other file visible:", os.path.exists("secret-${other}.txt"))`,
		].join("\n");
		const r = await call(c[t], "run_code", { language: "python", code });
		const sc = r.result?.structuredContent;
		run[t] = sc?.id;
		check(`tenant ${t}: run_code python prints and reads its own file`,
			!refused(r) && sc?.status === "success" && sc.stdout === `hello from tenant ${t}\n${secret[t]}\nother file visible: False\n` && typeof sc.id === "string",
			() => show(r));
	}
	for (const t of names) {
		const other = t === "a" ? "b" : "a";
		const own = await call(c[t], "read_file", { path: `secret-${t}.txt` });
		check(`tenant ${t}: read_file of its own file`, !refused(own) && text(own.result).includes(secret[t]), () => show(own));
		const theirs = await call(c[t], "read_file", { path: `secret-${other}.txt` });
		check(`tenant ${t}: read_file of ${other}'s file is an error`,
			refused(theirs) && !JSON.stringify(theirs.result ?? String(theirs.error)).includes(secret[other]), () => show(theirs));

		const h = await call(c[t], "get_execution_history", { limit: 100 });
		const ids = (h.result?.structuredContent?.runs ?? []).map((r) => r.id);
		check(`tenant ${t}: history has its run and not ${other}'s`,
			!refused(h) && ids.includes(run[t]) && !ids.includes(run[other]) && !JSON.stringify(h.result).includes(`tenant ${other}`),
			() => `own ${run[t]}, other ${run[other]}, got ${JSON.stringify(ids)}`);

		const mine = await call(c[t], "get_run", { id: run[t] });
		check(`tenant ${t}: get_run of its own run`, !refused(mine) && mine.result.structuredContent?.id === run[t], () => show(mine));
		const notMine = await call(c[t], "get_run", { id: run[other] });
		check(`tenant ${t}: get_run of ${other}'s run is an error`,
			refused(notMine) && !JSON.stringify(notMine.result ?? String(notMine.error)).includes(`tenant ${other}`), () => show(notMine));
	}

	// The same through resources: a workspace file and a run by URI.
	for (const t of names) {
		const other = t === "a" ? "b" : "a";
		const read = async (uri) => {
			try {
				return { result: await c[t].readResource({ uri }, { timeout: callTimeout }) };
			} catch (error) {
				return { error };
			}
		};
		const own = await read(`sandbox://workspace/secret-${t}.txt`);
		check(`tenant ${t}: resources/read of its own file`, own.result?.contents?.[0]?.text === secret[t], () => show(own));
		const theirs = await read(`sandbox://workspace/secret-${other}.txt`);
		check(`tenant ${t}: resources/read of ${other}'s file is an error`,
			theirs.error !== undefined && !String(theirs.error).includes(secret[other]), () => show(theirs));
		const ownRun = await read(`sandbox://runs/${run[t]}`);
		check(`tenant ${t}: resources/read of its own run`, (ownRun.result?.contents?.[0]?.text ?? "").includes(run[t]), () => show(ownRun));
		const theirRun = await read(`sandbox://runs/${run[other]}`);
		check(`tenant ${t}: resources/read of ${other}'s run is an error`,
			theirRun.error !== undefined && !String(theirRun.error).includes(`tenant ${other}`), () => show(theirRun));
	}

	// Progress: a run that prints over a few seconds, called with
	// onprogress (the SDK then sends a progressToken).
	const notes = [];
	const p = await call(c.a, "run_code", {
		language: "python",
		code: "import time\nfor i in range(6):\n    print('tick', i, flush=True)\n    time.sleep(0.5)\n",
	}, { onprogress: (n) => notes.push(n) });
	check("progress notifications while a run prints", !refused(p) && p.result.structuredContent?.status === "success" && notes.length > 0 && notes.some((n) => /tick \d/.test(n.message ?? "")),
		() => `${notes.length} notifications ${JSON.stringify(notes).slice(0, 300)}; result ${show(p)}`);

	// a's live session id with b's token: the front routes by the token's
	// tenant, whose server does not know that id. The SDK skips initialize
	// when given a session id to resume.
	const sid = c.a.transport.sessionId;
	const hijack = new Client({ name: "sandpit-http-clients-test", version: "1.0.0" });
	try {
		await hijack.connect(new StreamableHTTPClientTransport(new URL("/mcp", base), { ...bearer(tokens.b), sessionId: sid }));
		const r = await call(hijack, "read_file", { path: "secret-a.txt" });
		check(`tenant b with a's session id is refused (HTTP ${r.error?.code})`, typeof sid === "string" && r.error instanceof StreamableHTTPError && [400, 404].includes(r.error.code),
			() => `session ${sid}: ${show(r)} (code ${r.error?.code})`);
	} finally {
		await hijack.close();
	}
	const still = await call(c.a, "read_file", { path: "secret-a.txt" });
	check("tenant a's session still works after that", !refused(still) && text(still.result).includes(secret.a), () => show(still));

	for (const t of names) {
		await c[t].transport.terminateSession();
		await c[t].close();
	}
}

// refusedAs401 tells whether err is the SDK's way of saying the server
// answered 401: StreamableHTTPError/SseError with code 401, or
// UnauthorizedError (what it throws when it has an auth provider).
function refusedAs401(err) {
	return err instanceof UnauthorizedError ||
		((err instanceof StreamableHTTPError || err instanceof SseError) && err.code === 401);
}

async function unauthorized() {
	for (const [name, token] of [["no token", undefined], ["a wrong token", "spt_" + "A".repeat(43)]]) {
		try {
			const cl = await connect(new StreamableHTTPClientTransport(new URL("/mcp", base), bearer(token)));
			await cl.close();
			fail(`Streamable HTTP with ${name} is refused`, "initialize succeeded");
		} catch (err) {
			check(`Streamable HTTP with ${name} is refused with 401`, refusedAs401(err), () => `${err?.constructor?.name}: ${err?.message} (code ${err?.code})`);
		}
		try {
			const cl = await connect(new SSEClientTransport(new URL("/sse", base), bearer(token)));
			await cl.close();
			fail(`SSE with ${name} is refused`, "connect succeeded");
		} catch (err) {
			check(`SSE with ${name} is refused with 401`, refusedAs401(err), () => `${err?.constructor?.name}: ${err?.message} (code ${err?.code})`);
		}
	}
}

async function legacySSE() {
	const cl = await connect(new SSEClientTransport(new URL("/sse", base), bearer(tokens.b)));
	ok("legacy SSE: initialize");
	const r = await call(cl, "run_code", { language: "python", code: "print(6*7)" });
	check("legacy SSE: run_code python", !refused(r) && r.result.structuredContent?.stdout === "42\n", () => show(r));
	// Same tenant over the other transport: its workspace, not a's.
	const own = await call(cl, "read_file", { path: "secret-b.txt" });
	check("legacy SSE: tenant b reads its own file", !refused(own) && text(own.result).includes("bravo-"), () => show(own));
	const theirs = await call(cl, "read_file", { path: "secret-a.txt" });
	check("legacy SSE: tenant b cannot read a's file", refused(theirs), () => show(theirs));
	await cl.close();
}

// mcpRemote bridges stdio to the server as a client that speaks only
// stdio would (Claude Desktop's command/args), exactly as the README shows.
async function mcpRemote() {
	const proxy = fileURLToPath(new URL("./node_modules/mcp-remote/dist/proxy.js", import.meta.url));
	// Its OAuth state goes to a directory of its own, not ~/.mcp-auth.
	const dir = mkdtempSync(join(tmpdir(), "mcp-remote-"));
	try {
		const headers = join(dir, "headers.txt");
		writeFileSync(headers, `Authorization: Bearer ${tokens.a}\n`, { mode: 0o600 });
		const env = { ...process.env, MCP_REMOTE_CONFIG_DIR: dir, AUTH_HEADER: `Bearer ${tokens.a}` };
		for (const [name, args] of [
			["--header", [new URL("/mcp", base).href, "--header", `Authorization: Bearer ${tokens.a}`]],
			// The README's claude_desktop_config.json: mcp-remote itself
			// fills ${AUTH_HEADER} from its environment.
			["--header Authorization:${AUTH_HEADER}", [new URL("/mcp", base).href, "--header", "Authorization:${AUTH_HEADER}"]],
			["--header-file", [new URL("/mcp", base).href, "--header-file", headers]],
			["--transport sse-only", [new URL("/sse", base).href, "--transport", "sse-only", "--header-file", headers]],
		]) {
			const cl = await connect(new StdioClientTransport({ command: process.execPath, args: [proxy, ...args], env, stderr: "pipe" }));
			const r = await call(cl, "read_file", { path: "secret-a.txt" });
			check(`mcp-remote ${name}: tenant a reads its own file`, !refused(r) && text(r.result).includes("alpha-"), () => show(r));
			await cl.close();
		}
	} finally {
		rmSync(dir, { recursive: true, force: true });
	}
}

for (const [name, fn] of [["tenants", tenants], ["unauthorized", unauthorized], ["legacy SSE", legacySSE], ["mcp-remote", mcpRemote]]) {
	try {
		await fn();
	} catch (err) {
		fail(name, `threw ${err?.constructor?.name}: ${err?.stack ?? err}`);
	}
}
console.log(`http-clients: ${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
