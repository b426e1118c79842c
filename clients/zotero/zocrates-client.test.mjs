// node --test clients/zotero/: the client against a real zocratesd the test starts.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, mkdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import { DaemonNotRunning, ZocratesClient, ZocratesHttpError, connect, parseSse, readDaemonInfo } from "./zocrates-client.mjs";

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const READY_TIMEOUT_MS = 60_000;

function python() {
  if (process.env.ZOCRATES_TEST_PYTHON) return process.env.ZOCRATES_TEST_PYTHON;
  for (const v of ["3.12", "3.11"]) {
    const p = join(REPO, `.venv-${v}`, "bin", "python");
    if (existsSync(p)) return p;
  }
  return "python3";
}

const PASSAGES = [
  { item_key: "LEWIS202", title: "Retrieval-Augmented Generation for Knowledge-Intensive NLP Tasks", year: 2020, page: 1,
    text: "RAG models combine parametric and non-parametric memory. The retriever finds passages in a dense index of Wikipedia." },
];

let root, dataDir, daemonJsonPath, proc;

async function waitForDaemon() {
  const deadline = Date.now() + READY_TIMEOUT_MS;
  while (Date.now() < deadline) {
    if (proc.exitCode !== null) throw new Error(`zocratesd exited ${proc.exitCode}`);
    try {
      const info = JSON.parse(await readFile(daemonJsonPath, "utf8"));
      if (info.pid === proc.pid && info.http) return info;
    } catch {
      /* not yet */
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error("zocratesd did not become ready");
}

before(async () => {
  root = await mkdtemp(join(tmpdir(), "zqjs"));
  dataDir = join(root, "zotero");
  const state = join(dataDir, "zocrates-data");
  await mkdir(state, { recursive: true });
  await mkdir(join(root, "run"), { mode: 0o700 });
  await writeFile(join(state, "library_passages.jsonl"), PASSAGES.map((p) => JSON.stringify(p)).join("\n") + "\n");
  // One search round before a checkpoint: a two-part question pauses for the user.
  await writeFile(join(state, "zocrates_config.json"), JSON.stringify({ research: { initial_budget: 1 } }));
  daemonJsonPath = join(state, "daemon.json");
  const env = { ...process.env, XDG_RUNTIME_DIR: join(root, "run"), PYTHONPATH: REPO };
  for (const k of Object.keys(env)) if (k.startsWith("ZOCRATES_") || k.startsWith("LISTEN_") || k === "NOTIFY_SOCKET") delete env[k];
  proc = spawn(python(), ["-m", "zocratesd", "serve", "--zotero-data-dir", dataDir, "--http-port", "0"], {
    env, cwd: REPO, stdio: ["ignore", "ignore", "ignore"],
  });
  await waitForDaemon();
});

after(async () => {
  if (proc && proc.exitCode === null) {
    const exited = new Promise((r) => proc.once("exit", r));
    proc.kill("SIGTERM");
    await exited;
  }
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
    const reg = await client.register({ client: "zotero-plugin-test" });
    assert.equal(reg.protocol_version, 1);
    assert.equal(reg.capabilities.chat, true);
    assert.ok(reg.startup_maintenance.vacuum);

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
