// node --test clients/zotero/: the client against a real zocratesd the test starts.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, mkdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { READY_TIMEOUT_MS, Zocratesd, daemonEnv } from "./testkit.mjs";
import { DaemonNotRunning, TurnView, ZocratesClient, ZocratesHttpError, connect, parseSse, progressLine, readDaemonInfo } from "./zocrates-client.mjs";

const PASSAGES = [
  { item_key: "LEWIS202", title: "Retrieval-Augmented Generation for Knowledge-Intensive NLP Tasks", year: 2020, page: 1,
    text: "RAG models combine parametric and non-parametric memory. The retriever finds passages in a dense index of Wikipedia." },
];

let root, dataDir, stateDir, daemonJsonPath, daemon;

before(async () => {
  root = await mkdtemp(join(tmpdir(), "zqjs"));
  dataDir = join(root, "zotero");
  const state = join(dataDir, "zocrates-data");
  stateDir = state;
  await mkdir(state, { recursive: true });
  await mkdir(join(root, "run"), { mode: 0o700 });
  await writeFile(join(state, "library_passages.jsonl"), PASSAGES.map((p) => JSON.stringify(p)).join("\n") + "\n");
  // One search round before a checkpoint: a two-part question pauses for the user.
  await writeFile(join(state, "zocrates_config.json"), JSON.stringify({ research: { initial_budget: 1 } }));
  daemon = new Zocratesd({ dataDir, env: daemonEnv(root) });
  daemonJsonPath = daemon.daemonJsonPath;
  await daemon.start();
});

after(async () => {
  await daemon?.stop();
  await rm(root, { recursive: true, force: true });
});

async function collect(iterable) {
  const out = [];
  for await (const e of iterable) out.push(e);
  return out;
}

describe("finding the daemon", () => {
  test("no daemon.json is 'daemon not running'", async () => {
    await assert.rejects(connect({ daemonJsonPath: join(root, "nowhere", "daemon.json") }), (err) => {
      assert.ok(err instanceof DaemonNotRunning);
      assert.match(err.message, /not running/);
      return true;
    });
  });

  test("a daemon.json without http is 'running without its HTTP shim'", async () => {
    const path = join(root, "nohttp.json");
    await writeFile(path, JSON.stringify({ pid: 1, http: null, token: null }));
    await assert.rejects(readDaemonInfo(path), (err) => err instanceof DaemonNotRunning && /--no-http/.test(err.message));
  });

  test("a port nobody listens on is 'daemon not running'", async () => {
    const client = new ZocratesClient({ baseUrl: "http://127.0.0.1:9", token: "x" });
    await assert.rejects(client.listSessions(), (err) => err instanceof DaemonNotRunning && /nothing answers/.test(err.message));
  });

  test("a custom readFile (Zotero's IOUtils) is used", async () => {
    let asked = null;
    const client = await connect({ daemonJsonPath: "/virtual/daemon.json", readFile: async (p) => { asked = p; return readFile(daemonJsonPath, "utf8"); } });
    assert.equal(asked, "/virtual/daemon.json");
    assert.equal((await client.health()).status, "success");
  });
});

describe("every route", () => {
  test("register, sessions, chat, rewind, storage, maintenance, delete", async () => {
    const client = await connect({ daemonJsonPath });
    let reg = await client.register({ client: "zotero-plugin-test" });
    assert.equal(reg.protocol_version, 1);
    assert.equal(reg.capabilities.chat, true);
    // The daemon answers while its start finishes (engine import, startup maintenance): until
    // then `startup_maintenance` is null.
    for (const deadline = Date.now() + READY_TIMEOUT_MS; reg.startup_maintenance === null && Date.now() < deadline;) {
      await new Promise((r) => setTimeout(r, 100));
      reg = await client.register({ client: "zotero-plugin-test" });
    }
    assert.ok(reg.startup_maintenance.vacuum);
    assert.equal(reg.model, "offline");

    const { session } = await client.createSession("New Chat");
    assert.equal(session.title, "New Chat");
    assert.deepEqual(session.messages, []);
    const listed = (await client.listSessions()).sessions.map((s) => s.id);
    assert.ok(listed.includes(session.id));

    const events = await collect(client.chat({ prompt: "What is retrieval-augmented generation?", sessionId: session.id }));
    const types = events.map((e) => e.type);
    assert.equal(types.at(-1), "done");
    assert.ok(types.includes("parts"));
    const answer = events.filter((e) => e.type === "parts").flatMap((e) => e.parts).filter((p) => !p.thought).map((p) => p.text).join("");
    assert.ok(answer.length > 0);
    const done = events.at(-1);
    assert.equal(done.session.id, session.id);
    assert.ok(done.invocation_id);

    const got = (await client.getSession(session.id)).session;
    assert.equal(got.messages.filter((m) => m.role === "user").length, 1);

    const second = await collect(client.chat({ prompt: "And dense retrieval?", sessionId: session.id, mode: "papers",
      activeItems: [{ item_key: "LEWIS202", title: "RAG" }], snippets: [{ item_key: "LEWIS202", text: "dense index", page: 1 }] }));
    const rewound = await client.rewind(session.id, second.at(-1).invocation_id);
    assert.equal(rewound.restored.mode, "papers");
    assert.equal(rewound.restored.text, "And dense retrieval?");
    assert.equal(rewound.session.messages.filter((m) => m.role === "user").length, 1);

    const paused = await collect(client.chat({ prompt: "What is RAG? What is a dense index?", sessionId: session.id }));
    const asked = paused.filter((e) => e.type === "request_input");
    assert.equal(asked.length, 1);
    assert.equal(asked[0].interrupt_id, "interrupt_ext_1");
    assert.deepEqual(asked[0].payload.unaddressed_aspects, ["What is a dense index?"]);
    assert.deepEqual(paused.at(-1).session.pending_hitl.interrupt_id, "interrupt_ext_1");
    const resumed = await collect(client.resume({ sessionId: session.id, invocationId: asked[0].invocation_id,
      interruptId: asked[0].interrupt_id, response: { action: "synthesize" } }));
    assert.equal(resumed.at(-1).type, "done");
    assert.equal(resumed.at(-1).session.pending_hitl, null);
    assert.ok(resumed.some((e) => e.type === "parts"));
    await assert.rejects(
      collect(client.resume({ sessionId: session.id, invocationId: asked[0].invocation_id, interruptId: asked[0].interrupt_id,
        response: { action: "synthesize" } })),
      (err) => err instanceof ZocratesHttpError && err.status === 409 && err.code === "checkpoint_not_pending",
    );

    const stats = await client.storageStats();
    assert.ok(stats.session_count >= 1 && stats.db_size_bytes > 0);
    assert.ok("vacuum" in (await client.maintenance()));

    assert.deepEqual(await client.deleteSession(session.id), { status: "success" });
    await assert.rejects(client.getSession(session.id), (err) => err instanceof ZocratesHttpError && err.status === 404 && err.code === "not_found");
  });

  test("refusals throw before the first event", async () => {
    const client = await connect({ daemonJsonPath });
    await assert.rejects(collect(client.chat({ prompt: "hi", sessionId: "session-0-000000" })), (err) => err.status === 404);
    const { session } = await client.createSession();
    await assert.rejects(collect(client.chat({ prompt: "hi", sessionId: session.id, mode: "papers" })), (err) => err.status === 422 && err.code === "invalid_input");
  });

  test("a wrong token is a 401, not 'not running'", async () => {
    const { baseUrl } = await readDaemonInfo(daemonJsonPath);
    const client = new ZocratesClient({ baseUrl, token: "wrong" });
    await assert.rejects(client.listSessions(), (err) => err instanceof ZocratesHttpError && err.status === 401 && err.code === "unauthorized");
  });
});

describe("streams", () => {
  test("abort stops the stream; the turn still finishes and is saved", async () => {
    const client = await connect({ daemonJsonPath });
    const { session } = await client.createSession();
    const controller = new AbortController();
    const seen = [];
    await assert.rejects(
      (async () => {
        for await (const e of client.chat({ prompt: "What is RAG?", sessionId: session.id }, { signal: controller.signal })) {
          seen.push(e);
          controller.abort();
        }
      })(),
      (err) => err.name === "AbortError",
    );
    assert.equal(seen.length, 1);
    const deadline = Date.now() + 20_000;
    for (;;) {
      const { session: s } = await client.getSession(session.id);
      if (s.messages.some((m) => m.role !== "user" && m.text)) break;
      assert.ok(Date.now() < deadline, "the turn did not finish after the abort");
      await new Promise((r) => setTimeout(r, 100));
    }
  });

  test("an abort also stops events already received", async () => {
    const enc = new TextEncoder();
    const body = new ReadableStream({ start(c) { c.enqueue(enc.encode('data: {"n":1}\n\ndata: {"n":2}\n\n')); c.close(); } });
    const controller = new AbortController();
    const seen = [];
    await assert.rejects((async () => {
      for await (const e of parseSse(body, { signal: controller.signal })) {
        seen.push(e);
        controller.abort();
      }
    })(), (err) => err.name === "AbortError");
    assert.deepEqual(seen, [{ n: 1 }]);
  });

  test("parseSse handles split chunks, CRLF and multi-line data", async () => {
    const enc = new TextEncoder();
    const pieces = ['data: {"type":"pa', 'rts","n":1}\r\n\r\n: comment\n\ndata: {"type":\ndata: "done"}\n\n'];
    const body = new ReadableStream({ start(c) { for (const p of pieces) c.enqueue(enc.encode(p)); c.close(); } });
    assert.deepEqual(await collect(parseSse(body)), [{ type: "parts", n: 1 }, { type: "done" }]);
  });
});

describe("the sidebar's routes (issue 18)", () => {
  test("rename, library status, settings", async () => {
    const client = await connect({ daemonJsonPath });
    const { session } = await client.createSession();
    assert.equal((await client.renameSession(session.id, "  My review  ")).session.title, "My review");
    assert.equal((await client.getSession(session.id)).session.title, "My review");
    await assert.rejects(client.renameSession(session.id, "   "), (err) => err.status === 422 && err.code === "invalid_input");
    await assert.rejects(client.renameSession("session-0-000000", "x"), (err) => err.status === 404);

    // This daemon searches fixed passages (library_passages.jsonl), not a Zotero library.
    const { library } = await client.libraryStatus({ refresh: true });
    assert.equal(library.state, "disabled");

    const before = await client.getSettings();
    assert.equal(before.settings.max_saved_sessions, 100);
    assert.equal(before.applies.max_saved_sessions, "now");
    const after = await client.updateSettings({ max_saved_sessions: 50, session_retention_days: null });
    assert.equal(after.settings.max_saved_sessions, 50);
    assert.equal(after.settings.session_retention_days, null);
    assert.deepEqual([...after.changed].sort(), ["max_saved_sessions", "session_retention_days"]);
    await assert.rejects(client.updateSettings({ max_saved_sessions: -1 }), (err) => {
      assert.equal(err.status, 422);
      assert.equal(err.code, "invalid_input");
      assert.equal(err.body.error.field, "max_saved_sessions");
      return true;
    });
    // Written to zocrates_config.json, keeping what else the file says.
    const file = JSON.parse(await readFile(join(stateDir, "zocrates_config.json"), "utf8"));
    assert.equal(file.max_saved_sessions, 50);
    assert.equal(file.research.initial_budget, 1);
    await client.updateSettings({ max_saved_sessions: 100, session_retention_days: 180 });
  });

  test("cancel says whether a turn ran", async () => {
    const client = await connect({ daemonJsonPath });
    const { session } = await client.createSession();
    assert.deepEqual(await client.cancel(session.id), { status: "success", cancelled: false });
    await assert.rejects(client.cancel("session-0-000000"), (err) => err.status === 404);
  });

  test("TurnView adds up a real turn: progress lines, the checkpoint, the answer after it", async () => {
    const client = await connect({ daemonJsonPath });
    const { session } = await client.createSession();
    const view = new TurnView();
    for await (const event of client.chat({ prompt: "What is RAG? What is a dense index?", sessionId: session.id })) view.feed(event);
    assert.equal(view.stopReason, "checkpoint");
    assert.equal(view.error, null);
    assert.ok(view.ended);
    assert.equal(view.checkpoint.interrupt_id, "interrupt_ext_1");
    assert.equal(view.session.pending_hitl.interrupt_id, "interrupt_ext_1");
    assert.ok(view.invocationId);
    assert.ok(view.progress.some((l) => /^Searching your library for/.test(l)), view.progress.join(" | "));
    assert.ok(view.progress.some((l) => /^Round 1: /.test(l)), view.progress.join(" | "));

    const resumed = new TurnView();
    for await (const event of client.resume({ sessionId: session.id, invocationId: view.checkpoint.invocation_id,
      interruptId: view.checkpoint.interrupt_id, response: { action: "synthesize" } })) resumed.feed(event);
    assert.equal(resumed.stopReason, "end_turn");
    assert.equal(resumed.checkpoint, null);
    assert.equal(resumed.invocationId, view.invocationId, "the resumed turn is the same turn");
    assert.ok(resumed.answer.length > 0);
    assert.equal(resumed.progress[0], "Answering from what was found");
  });

  test("progressLine and TurnView on each kind of event", () => {
    assert.equal(progressLine({ kind: "tool_call", name: "search_library", args: { query: "dense retrieval" } }), "Searching your library for \u201cdense retrieval\u201d");
    assert.equal(progressLine({ kind: "round", text: "Round 1: searched \"a\" (2 passages)\nRound 2: searched \"b\" (0 passages)", round: { n: 2 } }), "Round 2: searched \"b\" (0 passages)");
    assert.equal(progressLine({ kind: "round", round: { n: 3, aspect: "bees", hits: 1 } }), "Round 3: searched \u201cbees\u201d (1 passage)");
    assert.equal(progressLine({ kind: "tool_result", name: "search_library", failed: false, passages: [{}, {}] }), "Found 2 passages");
    assert.equal(progressLine({ kind: "tool_result", name: "search_library", failed: true, error: "index busy" }), "search_library failed: index busy");
    assert.equal(progressLine({ kind: "checkpoint_answered", response: { action: "extend_budget", guidance: "mites" } }), "Searching further, first for \u201cmites\u201d");
    assert.equal(progressLine({ kind: "something_new" }), null);

    const v = new TurnView();
    assert.equal(v.feed({ type: "parts", parts: [{ text: "Plan.", thought: true }, { text: "An answer" }], invocation_id: "e-1" }), true);
    v.feed({ type: "parts", parts: [{ text: " [1].", thought: false }], invocation_id: "e-1" });
    v.feed({ type: "progress", kind: "round", call_id: "c", round: { n: 1 }, text: "Round 1: x" });
    v.feed({ type: "progress", kind: "round", call_id: "c", round: { n: 1 }, text: "Round 1: x (again)" });
    v.feed({ type: "progress", kind: "tool_result", name: "search_library", failed: false, passages: [{ n: 1, item_key: "LEWIS202", attachment_key: "LEWISPDF", page: 2 }] });
    assert.equal(v.feed({ type: "a_future_event" }), false);
    assert.equal(v.feed(null), false);
    assert.equal(v.answer, "An answer [1].");
    assert.equal(v.thought, "Plan.");
    assert.deepEqual(v.progress, ["Round 1: x (again)", "Found 1 passage"]);
    assert.equal(v.passages[0].attachment_key, "LEWISPDF");
    assert.equal(v.ended, false);
    v.feed({ type: "error", code: "model_error", message: "HTTP 500" });
    assert.deepEqual(v.error, { code: "model_error", message: "HTTP 500" });
    assert.ok(v.ended);
  });
});
