// A client of `hermes mcp` on the official TypeScript SDK (@modelcontextprotocol/sdk 1.x), the
// client most MCP hosts embed. Run by tests/interop/test_mcp_ts_client.py:
//
//   node mcp_ts_client.mjs SCENARIO CONFIG_JSON
//
// CONFIG_JSON: {"command": ..., "args": [...], "env": {...}, "session": "<a session id>"}.
// Prints one JSON report on stdout; what the test asserts is in that report. The SDK's client
// validates every successful answer's structuredContent against the tool's outputSchema and
// throws on a mismatch, so a call that resolves is one this client accepts.

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const [scenario, configText] = process.argv.slice(2);
const config = JSON.parse(configText);

function transport(extraArgs = []) {
  return new StdioClientTransport({
    command: config.command,
    args: [...config.args, ...extraArgs],
    env: config.env,
    stderr: "pipe",
  });
}

async function connect(extraArgs = []) {
  const client = new Client({ name: "hermes-interop", version: "1.0.0" });
  const t = transport(extraArgs);
  await client.connect(t);
  return { client, t };
}

function summary(result) {
  const text = (result.content || []).filter((c) => c.type === "text").map((c) => c.text);
  return {
    isError: result.isError === true,
    text: text.join("\n"),
    structured: result.structuredContent ?? null,
  };
}

async function settle(promise) {
  try {
    return { ok: true, value: await promise };
  } catch (err) {
    return { ok: false, error: String(err && err.message ? err.message : err), code: err?.code };
  }
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function alive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

const scenarios = {
  // Every tool, successful calls (their structured content checked by the SDK).
  async tools() {
    const { client } = await connect();
    const listed = await client.listTools();
    const calls = {
      search_messages: { query: "docker" },
      list_sessions: { limit: 3 },
      get_session: { session: config.session, limit: 5 },
      get_usage: { by: "model" },
    };
    const answers = {};
    for (const [name, args] of Object.entries(calls)) {
      const got = await settle(client.callTool({ name, arguments: args }));
      answers[name] = got.ok ? summary(got.value) : got;
    }
    await client.close();
    return { tools: listed.tools.map((t) => t.name).sort(), answers };
  },

  // Every refusal kind: each must arrive as an isError result whose text has its hint.
  async refusals() {
    const { client } = await connect();
    const calls = {
      session_not_found: ["get_session", { session: "no-such-session" }],
      bad_query: ["search_messages", { query: "docker AND" }],
      bad_cursor: ["list_sessions", { cursor: "not-a-cursor" }],
      bad_argument: ["search_messages", { query: "x", since: "the other day" }],
      bad_source: ["search_messages", { query: "x", sources: ["nowhere"] }],
      bad_model: ["get_usage", { models: ["no/such-model"] }],
      bad_limit: ["search_messages", { query: "x", limit: 500 }],
      unknown_argument: ["list_sessions", { lmit: 5 }],
      missing_argument: ["get_session", {}],
      unknown_tool: ["drop_tables", {}],
    };
    const answers = {};
    for (const [kind, [name, args]] of Object.entries(calls)) {
      const got = await settle(client.callTool({ name, arguments: args }));
      answers[kind] = got.ok ? summary(got.value) : got;
    }
    // Still serving after them all.
    const after = await settle(client.callTool({ name: "list_sessions", arguments: { limit: 1 } }));
    await client.close();
    return { answers, after: after.ok ? summary(after.value) : after };
  },

  // A call cancelled while it runs (by an AbortSignal, then by the client's own timeout, both
  // of which send notifications/cancelled), then further calls.
  async cancel() {
    const { client } = await connect();
    const controller = new AbortController();
    const aborted = settle(
      client.callTool({ name: "search_messages", arguments: { query: "docker" } }, undefined, {
        signal: controller.signal,
      }),
    );
    await sleep(300);
    controller.abort("the test cancels it");
    const first = await aborted;
    const timedOut = await settle(
      client.callTool({ name: "search_messages", arguments: { query: "kubernetes" } }, undefined, {
        timeout: 300,
      }),
    );
    await sleep(config.settleMs ?? 4000); // the workers finish; a second answer would come now
    const next = [];
    for (let i = 0; i < 3; i++) {
      const got = await settle(client.callTool({ name: "list_sessions", arguments: { limit: 1 } }));
      next.push(got.ok ? summary(got.value) : got);
    }
    await client.close();
    return { aborted: first, timedOut, next };
  },

  // Two clients (two servers) at once, each with calls in flight together.
  async two() {
    const [a, b] = await Promise.all([connect(), connect()]);
    const calls = [];
    for (const { client } of [a, b]) {
      for (const query of ["docker", "the", "会議"]) {
        calls.push(client.callTool({ name: "search_messages", arguments: { query } }));
      }
      calls.push(client.callTool({ name: "list_sessions", arguments: {} }));
    }
    const results = (await Promise.all(calls.map(settle))).map((r) =>
      r.ok ? summary(r.value) : r,
    );
    await Promise.all([a.client.close(), b.client.close()]);
    return { results };
  },

  // SIGINT to the server: how long until it is gone.
  async sigint() {
    const { client, t } = await connect();
    await client.listTools();
    const pid = t.pid;
    const started = Date.now();
    process.kill(pid, config.signal || "SIGINT");
    while (alive(pid) && Date.now() - started < 10000) {
      await sleep(20);
    }
    const ms = Date.now() - started;
    const gone = !alive(pid);
    await settle(client.close());
    return { pid, gone, ms };
  },
};

const run = scenarios[scenario];
if (!run) {
  console.error(`unknown scenario ${scenario}`);
  process.exit(2);
}
// Exit once the report is written whole (process.exit alone may cut a piped stdout short).
function finish(report, status) {
  process.stdout.write(JSON.stringify(report) + "\n", () => process.exit(status));
}
const watchdog = setTimeout(() => {
  finish({ error: "watchdog: the scenario took longer than 60 s" }, 3);
}, 60000);
try {
  const report = await run();
  clearTimeout(watchdog);
  finish(report, 0);
} catch (err) {
  clearTimeout(watchdog);
  finish({ error: String(err && err.stack ? err.stack : err) }, 1);
}
