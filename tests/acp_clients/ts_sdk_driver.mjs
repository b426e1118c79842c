// The official ACP TypeScript SDK (@agentclientprotocol/sdk, pinned in package.json) as the editor:
// it drives `zocratesd stdio` processes (each a real pump to the running daemon) through the whole
// ACP v1 surface issue 19 added. Run by tests/e2e/test_acp_clients.py, which starts the daemon on
// a Zotero library and passes, as one JSON argument: {command: [argv of `zocratesd stdio ...`], env}.
// Any failed check throws: the process exits non-zero and prints what it saw; on success it prints
// one JSON line of facts the Python test checks again.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk";

const cfg = JSON.parse(process.argv[2]);
const TIMEOUT_MS = 60_000;
const children = [];

// One editor: a `zocratesd stdio` process, the SDK's client app on its stdio, and what it received.
async function editor(name, capabilities, answers = {}) {
  const child = spawn(cfg.command[0], cfg.command.slice(1), { env: cfg.env, stdio: ["pipe", "pipe", "inherit"] });
  children.push(child);
  const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
  const seen = []; // every session/update params, in order
  const asked = []; // [method, params] of every request the agent sent
  let wake = () => {};
  const app = acp
    .client({ name })
    .onNotification(acp.methods.client.session.update, ({ params }) => {
      seen.push(params);
      wake();
    })
    .onRequest(acp.methods.client.elicitation.create, async ({ params }) => {
      asked.push(["elicitation/create", params]);
      assert.ok(answers.elicit, `${name}: elicitation/create not expected`);
      return answers.elicit(params);
    })
    .onRequest(acp.methods.client.session.requestPermission, async ({ params }) => {
      asked.push(["session/request_permission", params]);
      assert.ok(answers.permission, `${name}: session/request_permission not expected`);
      return answers.permission(params);
    });
  const conn = app.connect(stream);
  const agent = conn.agent;
  const init = await agent.request(acp.methods.agent.initialize, {
    protocolVersion: acp.PROTOCOL_VERSION,
    clientCapabilities: capabilities,
    clientInfo: { name, version: "1.0.0" },
  });
  // The updates of `sessionId` from index `from` on, once `pred` holds for one of them.
  async function until(sessionId, pred, from = 0, what = "an update") {
    const deadline = Date.now() + TIMEOUT_MS;
    for (;;) {
      const mine = seen.slice(from).filter((n) => n.sessionId === sessionId).map((n) => n.update);
      if (mine.some(pred)) return mine;
      if (Date.now() > deadline) throw new Error(`${name}: no ${what} in ${TIMEOUT_MS} ms; saw ${JSON.stringify(mine)}`);
      await new Promise((resolve) => {
        wake = resolve;
        setTimeout(resolve, 200);
      });
    }
  }
  return { name, conn, agent, init, seen, asked, until, child };
}

const kinds = (updates) => updates.map((u) => u.sessionUpdate);
const lastOf = (updates, kind) => updates.filter((u) => u.sessionUpdate === kind).at(-1);
const byId = (options) => Object.fromEntries(options.map((o) => [o.id, o]));
const settle = (ms) => new Promise((r) => setTimeout(r, ms));
const facts = {};

try {
  // Editor A advertises boolean config options and form elicitation; B advertises neither.
  const a = await editor("ts-sdk-a", { session: { configOptions: { boolean: {} } }, elicitation: { form: {} } }, {
    elicit: (params) => ({ action: "accept", content: { action: "extend", guidance: "hypothetical document embeddings" } }),
  });
  const b = await editor("ts-sdk-b", {}, {});
  const caps = a.init.agentCapabilities;
  assert.equal(a.init.protocolVersion, 1);
  assert.equal(caps.loadSession, true);
  for (const cap of ["list", "delete", "resume", "close"]) assert.deepEqual(caps.sessionCapabilities[cap], {}, cap);
  facts.sessionCapabilities = Object.keys(caps.sessionCapabilities).sort();

  // The library index is built in the background: wait for it (the scope lists its collections).
  for (let i = 0; ; i++) {
    const status = await a.agent.request("_zocrates/library/status", {});
    if (status.state === "ready" && status.collections > 0) break;
    assert.ok(i < 300, `library not ready: ${JSON.stringify(status)}`);
    await settle(200);
  }

  // session/new: the options in the answer, then the slash commands.
  const created = await a.agent.request(acp.methods.agent.session.new, { cwd: "/home/u/papers", mcpServers: [] });
  const sid = created.sessionId;
  let opts = byId(created.configOptions);
  assert.deepEqual(Object.keys(opts), ["scope", "model", "research_budget", "compaction", "citation_style"]);
  assert.equal(opts.scope.category, "mode");
  assert.equal(opts.model.category, "model");
  assert.equal(opts.research_budget.category, "model_config");
  assert.equal(opts.scope.currentValue, "library");
  assert.deepEqual(opts.compaction, { ...opts.compaction, type: "boolean", currentValue: true });
  assert.ok(opts.model.options.some((o) => o.value === "offline"), "offline is always a model");
  const rag = opts.scope.options.find((o) => o.name === "Collection: Retrieval-augmented generation");
  assert.ok(rag, `collections listed by name: ${JSON.stringify(opts.scope.options)}`);
  const cmds = await a.until(sid, (u) => u.sessionUpdate === "available_commands_update", 0, "available_commands_update");
  const names = cmds.find((u) => u.sessionUpdate === "available_commands_update").availableCommands.map((c) => c.name);
  assert.deepEqual(names, ["library", "collection", "papers", "research", "compact", "rewind", "status", "note", "tag", "undo", "writes",
    "bib", "cite"]);
  facts.commands = names;

  // B attaches with session/resume: no replay, the options (compaction as a select), the commands.
  const resumed = await b.agent.request(acp.methods.agent.session.resume, { sessionId: sid, cwd: "/home/u/papers" });
  const bOpts = byId(resumed.configOptions);
  assert.equal(bOpts.compaction.type, "select");
  assert.equal(bOpts.compaction.currentValue, "on");
  const bStart = await b.until(sid, (u) => u.sessionUpdate === "available_commands_update", 0, "commands");
  assert.deepEqual(kinds(bStart), ["available_commands_update"], "resume replays nothing");

  // Each option set by A: A's answer has the full set; B hears config_option_update; A does not.
  const sets = [
    ["scope", rag.value, undefined],
    ["model", "offline", undefined],
    ["research_budget", "1", undefined],
    ["compaction", false, "boolean"],
    ["citation_style", "pandoc", undefined],
  ];
  for (const [configId, value, type] of sets) {
    const aFrom = a.seen.length;
    const bFrom = b.seen.length;
    const params = { sessionId: sid, configId, value, ...(type ? { type } : {}) };
    const answer = await a.agent.request(acp.methods.agent.session.setConfigOption, params);
    opts = byId(answer.configOptions);
    assert.deepEqual(Object.keys(opts), ["scope", "model", "research_budget", "compaction", "citation_style"]);
    assert.equal(opts[configId].currentValue, value, configId);
    const heard = await b.until(sid, (u) => u.sessionUpdate === "config_option_update", bFrom, `${configId} update`);
    const theirs = byId(lastOf(heard, "config_option_update").configOptions);
    assert.equal(theirs[configId].currentValue, configId === "compaction" ? "off" : value, configId);
    await settle(100);
    assert.ok(!a.seen.slice(aFrom).some((n) => n.update.sessionUpdate === "config_option_update"), "the setter is not told twice");
  }
  // A bad value is refused with the choices, and nothing changes.
  await assert.rejects(
    a.agent.request(acp.methods.agent.session.setConfigOption, { sessionId: sid, configId: "research_budget", value: "99" }),
    (err) => err.code === -32602 && /1 to 10/.test(err.message + JSON.stringify(err.data)),
  );
  facts.setOptions = sets.map(([id]) => id);

  // A slash command is a prompt whose text starts with it.
  let from = a.seen.length;
  let bFrom = b.seen.length;
  const status = await a.agent.request(acp.methods.agent.session.prompt, {
    sessionId: sid,
    prompt: [{ type: "text", text: "/status" }],
  });
  assert.equal(status.stopReason, "end_turn");
  let got = await a.until(sid, (u) => u.sessionUpdate === "agent_message_chunk", from, "the /status reply");
  const statusText = got.find((u) => u.sessionUpdate === "agent_message_chunk").content.text;
  assert.match(statusText, /Library: ready/);
  assert.match(statusText, /research budget 1; compaction off/);
  facts.statusReply = statusText;
  from = a.seen.length;
  await a.agent.request(acp.methods.agent.session.prompt, { sessionId: sid, prompt: [{ type: "text", text: "/collection miscellany" }] });
  got = await a.until(sid, (u) => u.sessionUpdate === "config_option_update", from, "the /collection update");
  assert.equal(byId(lastOf(got, "config_option_update").configOptions).scope.currentValue, "collection:MISCCOLL");
  got = await b.until(sid, (u) => u.sessionUpdate === "config_option_update" && byId(u.configOptions).scope.currentValue === "collection:MISCCOLL", bFrom, "B hears /collection");
  from = a.seen.length;
  await a.agent.request(acp.methods.agent.session.prompt, { sessionId: sid, prompt: [{ type: "text", text: "/library" }] });
  await a.until(sid, (u) => u.sessionUpdate === "config_option_update" && byId(u.configOptions).scope.currentValue === "library", from, "/library");

  // A checkpoint (research budget 1, a two-part question), asked by elicitation/create since A
  // advertised it; A extends with guidance and the turn ends with an answer.
  from = a.seen.length;
  bFrom = b.seen.length;
  const turn = await a.agent.request(acp.methods.agent.session.prompt, {
    sessionId: sid,
    prompt: [{ type: "text", text: "What does RAG combine? How does HyDE retrieve documents?" }],
  });
  assert.equal(turn.stopReason, "end_turn");
  // Each extension searches the guidance and one more round; it asks again while aspects remain,
  // up to research.max_extensions (3) times.
  assert.ok(a.asked.length >= 1 && a.asked.length <= 3, JSON.stringify(a.asked));
  assert.deepEqual([...new Set(a.asked.map(([m]) => m))], ["elicitation/create"]);
  const [method, asked] = a.asked[0];
  assert.equal(asked.mode, "form");
  assert.equal(asked.sessionId, sid);
  assert.match(asked.toolCallId, /^interrupt_ext_1@/);
  assert.deepEqual(asked.requestedSchema.required, ["action"]);
  const turnUpdates = await a.until(sid, (u) => u.sessionUpdate === "usage_update", from, "usage_update");
  const ckptDone = turnUpdates.find((u) => u.sessionUpdate === "tool_call_update" && u.toolCallId === asked.toolCallId);
  assert.equal(ckptDone.status, "completed");
  assert.equal(ckptDone.rawOutput.action, "extend_budget");
  assert.equal(ckptDone.rawOutput.guidance, "hypothetical document embeddings");
  const chunks = turnUpdates.filter((u) => u.sessionUpdate === "agent_message_chunk");
  assert.ok(chunks.length > 0 && chunks.every((u) => typeof u.messageId === "string" && u.messageId), "messageId on chunks");
  const usage = turnUpdates.find((u) => u.sessionUpdate === "usage_update");
  assert.ok(usage.used > 0 && usage.size > 0, JSON.stringify(usage));
  assert.equal(usage._meta.zocrates.reason, "off", "compaction is off for this session");
  const theirs = await b.until(sid, (u) => u.sessionUpdate === "usage_update", bFrom, "B sees the turn");
  // B did not prompt: it sees the user's message too (after the /library update it may still get).
  const question = theirs.find((u) => u.sessionUpdate === "user_message_chunk");
  assert.match(question.content.text, /^What does RAG combine\?/);
  assert.equal(b.asked.length, 0, "only the prompting editor is asked");
  facts.checkpoint = { method, toolCallId: asked.toolCallId, usage: { used: usage.used, size: usage.size } };

  // session/close: A no longer hears the session; it stays stored.
  assert.deepEqual(await a.agent.request(acp.methods.agent.session.close, { sessionId: sid }), {});
  from = a.seen.length;
  bFrom = b.seen.length;
  await b.agent.request(acp.methods.agent.session.prompt, { sessionId: sid, prompt: [{ type: "text", text: "/research 2" }] });
  await b.until(sid, (u) => u.sessionUpdate === "config_option_update", bFrom, "B's own /research update");
  await settle(300);
  assert.deepEqual(a.seen.slice(from).filter((n) => n.sessionId === sid), [], "a closed session sends nothing");

  // A new process resumes the session: no replay, the settings as they are now.
  const c = await editor("ts-sdk-c", { session: { configOptions: { boolean: {} } } });
  const resumedC = await c.agent.request(acp.methods.agent.session.resume, { sessionId: sid, cwd: "/x" });
  const again = byId(resumedC.configOptions);
  assert.equal(again.scope.currentValue, "library");
  assert.equal(again.research_budget.currentValue, "2");
  assert.equal(again.compaction.currentValue, false);
  const cStart = await c.until(sid, (u) => u.sessionUpdate === "available_commands_update", 0, "commands");
  assert.deepEqual(kinds(cStart), ["available_commands_update"], "resume in a new process replays nothing");
  const listed = await c.agent.request(acp.methods.agent.session.list, {});
  assert.ok(listed.sessions.some((s) => s.sessionId === sid));
  from = c.seen.length;
  const answered = await c.agent.request(acp.methods.agent.session.prompt, {
    sessionId: sid,
    prompt: [{ type: "text", text: "What is HyDE?" }],
  });
  assert.equal(answered.stopReason, "end_turn");
  await c.until(sid, (u) => u.sessionUpdate === "usage_update", from, "C's turn");
  // /rewind undoes that turn.
  from = c.seen.length;
  await c.agent.request(acp.methods.agent.session.prompt, { sessionId: sid, prompt: [{ type: "text", text: "/rewind" }] });
  got = await c.until(sid, (u) => u.sessionUpdate === "agent_message_chunk", from, "the /rewind reply");
  assert.match(lastOf(got, "agent_message_chunk").content.text, /Rewound the last turn \(“What is HyDE\?”\)/);
  facts.resumedWithoutReplay = true;
  facts.sessionId = sid;
  console.log(JSON.stringify(facts));
} finally {
  for (const child of children) child.stdin.end();
}
