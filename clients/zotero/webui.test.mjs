// node --test clients/: the sidebar web app (zocratesd/webui/) in a real Gecko browser.
//
// Firefox ESR (Zotero 7 runs on its engine), headless, driven by puppeteer-core over WebDriver BiDi,
// against real `zocratesd serve` processes: one with a fixture Zotero library and the offline model,
// one with no library and a slow model (tests/fake_openai.py, a real HTTP server) for Stop. A small
// Node HTTP server stands in for what is not ours: Zotero's window hosting the page (it records the
// bridge messages, tests/ never stubs our own code) and a foreign web page that tries to read the API.
// A missing browser or puppeteer-core fails the run; nothing here is skipped.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { mkdtemp, mkdir, rm, stat, writeFile } from "node:fs/promises";
import { createServer } from "node:http";
import { createServer as createNetServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

import { REPO, Zocratesd, daemonEnv, launchFirefox, python, requireFirefox } from "./testkit.mjs";
import { ZocratesClient } from "./zocrates-client.mjs";

const SCREENSHOTS = join(dirname(fileURLToPath(import.meta.url)), "screenshots");
const SIDEBAR = { width: 340, height: 760 }; // Zotero's item pane is about this wide
const STEP_TIMEOUT_MS = 90_000; // one UI step (a turn included) on a loaded 2-core machine: a hang guard
const FOUR_PARTS = "What is retrieval-augmented generation? What is dense passage retrieval? What is HyDE? How do beekeepers treat varroa mites?";

requireFirefox();

/** daemonEnv, and the developer's own Zotero is never read by a test daemon: not its data dir,
 *  not its local API (port 9 has no listener). */
function isolatedEnv(root, extra = {}) {
  // Online search off unless a test points it at its stand-ins (the real services are never asked).
  const env = daemonEnv(root, { ZOCRATES_LIBRARY__LOCAL_API_URL: "http://127.0.0.1:9", ZOCRATES_ONLINE__MODE: "off", ...extra });
  delete env.ZOTERO_DATA_DIR;
  return env;
}

/** A port free now, for a daemon started (and restarted) on it later. Not one the kernel hands
 *  out itself (listen(0), a connection's own end): those come from the ephemeral range, where any
 *  process on a busy machine may take it before the daemon binds; below that range only an
 *  explicit bind can. */
async function freePort() {
  let low = 32768;
  try {
    low = Number(readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/)[0]) || low;
  } catch { /* not Linux: the usual range */ }
  const base = Math.max(1024, Math.min(low, 32768) - 12000);
  for (;;) {
    const port = base + Math.floor(Math.random() * 12000);
    const server = createNetServer();
    const bound = await new Promise((r) => {
      server.once("error", () => r(false));
      server.listen(port, "127.0.0.1", () => r(true));
    });
    if (bound) {
      await new Promise((r) => server.close(r));
      return port;
    }
  }
}

function runPython(args, env) {
  return new Promise((resolveRun, reject) => {
    const child = spawn(python(), args, { cwd: REPO, env, stdio: ["ignore", "ignore", "pipe"] });
    let err = "";
    child.stderr.on("data", (d) => { err += d; });
    child.on("exit", (code) => (code === 0 ? resolveRun() : reject(new Error(`python ${args.join(" ")} failed (${code}): ${err}`))));
  });
}

/** A real `zocratesd serve` on a fixed port (so a restart keeps the page's origin). */
class Daemon extends Zocratesd {
  constructor(root, name, { port, env, testHooks = false }) {
    super({ dataDir: join(root, name), env, port, stderr: join(root, `${name}.stderr`), testHooks });
  }

  get base() {
    return `http://127.0.0.1:${this.port}`;
  }

  async start() {
    // Ready once its HTTP answers (until then, another poll of daemon.json).
    await super.start({
      ready: async (info) => {
        this.token = info.token;
        this.pluginToken = info.plugin_token;
        this.client = new ZocratesClient({ baseUrl: this.base, token: info.token });
        await this.client.health();
      },
    });
    return this;
  }

  async stop() {
    // A daemon must stop on SIGTERM (its drain is 10 s); one that does not fails the test, not hangs it.
    return super.stop({ killAfterMs: 20_000 });
  }

  url(query = "") {
    return `${this.base}/ui/${query}#token=${this.token}`;
  }
}

// The stand-in for Zotero's window: frames the page beside nothing, answers the bridge as the
// plugin does (BRIDGE contract) and records every message. And a foreign page that tries the API.
const HOST_HTML = `<!doctype html><meta charset="utf-8"><title>Zotero stand-in</title>
<style>body{margin:0}iframe{border:0;width:${SIDEBAR.width}px;height:${SIDEBAR.height}px}</style>
<iframe id="pane"></iframe>
<script>
const ui = decodeURIComponent(location.hash.slice(1));
const daemonOrigin = new URL(ui).origin;
const pane = document.getElementById("pane");
window.__messages = [];
window.__selection = { libraryID: 1, items: [], collection: null };
function post(msg) { pane.contentWindow.postMessage({ zocrates: "bridge/1", dir: "host-page", ...msg }, daemonOrigin); }
window.sendSelection = (sel) => { window.__selection = { libraryID: 1, items: [], collection: null, ...sel }; post({ type: "selection", ...window.__selection }); };
addEventListener("message", (e) => {
  if (e.origin !== daemonOrigin || e.source !== pane.contentWindow) return;
  const m = e.data;
  if (!m || m.zocrates !== "bridge/1" || m.dir !== "page-host") return;
  window.__messages.push(m);
  if (m.type === "hello") {
    post({ type: "result", id: m.id, ok: true, host: "zotero", zoteroVersion: "7.0 (stand-in)", capabilities: ["selection", "open", "save-note"] });
    post({ type: "selection", ...window.__selection });
  } else if (m.type === "open") post({ type: "result", id: m.id, ok: true });
  else if (m.type === "save-note") post({ type: "result", id: m.id, ok: true, key: "NOTEKEY1" });
});
pane.src = ui;
</script>`;

const FOREIGN_HTML = `<!doctype html><meta charset="utf-8"><title>foreign</title>
<script>
(async () => {
  const q = new URLSearchParams(location.search);
  const api = q.get("api"), token = q.get("token");
  const results = {};
  async function attempt(name, go) {
    try {
      const res = await go();
      let body = null;
      try { body = await res.text(); } catch (e) { body = "unreadable: " + e; }
      results[name] = { fetched: true, type: res.type, status: res.status, body };
    } catch (e) {
      results[name] = { fetched: false, error: String(e) };
    }
  }
  await attempt("sessions", () => fetch(api + "/sessions", { headers: { Authorization: "Bearer " + token } }));
  await attempt("create", () => fetch(api + "/sessions", { method: "POST", mode: "no-cors", headers: { "Content-Type": "text/plain" }, body: '{"title":"foreign"}' }));
  await attempt("settings", () => fetch(api + "/settings", { method: "PATCH", headers: { Authorization: "Bearer " + token, "Content-Type": "application/json" }, body: '{"max_saved_sessions":1}' }));
  await attempt("page", () => fetch(api + "/ui/"));
  await attempt("health", () => fetch(api + "/health"));
  // no-cors: the browser hands back an opaque answer unless the daemon says it is not for other sites.
  await attempt("probe-health", () => fetch(api + "/health", { mode: "no-cors" }));
  await attempt("probe-refused", () => fetch(api + "/sessions", { mode: "no-cors" }));
  await attempt("probe-missing", () => fetch(api + "/no-such-route", { mode: "no-cors" }));
  await attempt("probe-page", () => fetch(api + "/ui/app.js", { mode: "no-cors" }));
  window.__results = results;
})();
</script>`;

// The fixture library, and a paper whose text has a link whose label hides where it goes.
const LIBRARY_SCRIPT = [
  "import sys",
  "from pathlib import Path",
  "from tests.zoterofixture import FixtureItem, build_zotero_dir, sample_library",
  "items, collections = sample_library()",
  "items.append(FixtureItem('PHISHNOT', 'Membership of the Amateur Astronomers Guild', date='2024', abstract="
    + "'Members renew their guild subscription at [the guild members page](https://attacker.example/renew) every spring.'))",
  "from zocratesd.demo.zotero_dir import Attachment, Group, Item",
  // A group library's paper with a PDF: its page links open the group's copy.
  "reef = Item('GRPREEF1', 'Reef recovery after bleaching', creators=[('Terry', 'Hughes')], date='2018', attachments=["
    + "Attachment('GRPPDF01', pages=['Field sites and methods of the survey.', "
    + "'Coral reefs recovered from mass bleaching within a decade where grazing parrotfish remained.'])])",
  "build_zotero_dir(Path(sys.argv[1]), items, collections, groups=[Group(4343, 'Reef Lab', items=[reef])])",
].join("\n");

let root, library, slow, fake, browser, page, helper, helperPort;

/** OpenAlex, arXiv and Crossref stand-ins (tests/fake_scholarly.py, real HTTP servers) holding one
 *  work no fixture paper is about; resolves {child, urls: [openalex, arxiv, crossref]}. */
async function startScholarly() {
  const script = [
    "import sys",
    "from tests.fake_scholarly import FakeArxiv, FakeCrossref, FakeOpenAlex, ScholarlyWork",
    "tardi = ScholarlyWork('Tardigrade survival of desiccation by vitrification', authors=(('Maria', 'Boothby'),), year=2017,",
    "    venue='Molecular Cell', doi='10.1016/j.molcel.2017.02.018',",
    "    abstract='Tardigrades survive desiccation using intrinsically disordered proteins that vitrify.')",
    "services = [FakeOpenAlex([tardi]), FakeArxiv([tardi]), FakeCrossref([tardi])]",
    "for s in services: s.__enter__()",
    "print(' '.join(s.base_url for s in services), flush=True)",
    "sys.stdin.read()",
  ].join("\n");
  const child = spawn(python(), ["-c", script], { cwd: REPO, env: { ...process.env, PYTHONPATH: REPO }, stdio: ["pipe", "pipe", "inherit"] });
  const urls = await new Promise((resolveUrls, reject) => {
    let out = "";
    child.stdout.on("data", (d) => {
      out += d;
      if (out.includes("\n")) resolveUrls(out.trim().split(" "));
    });
    child.on("exit", (code) => reject(new Error(`the scholarly stand-ins exited ${code}`)));
  });
  return { child, urls };
}

async function startFakeModel(behaviour = "Behaviour(chunk_delay_s=1.0)", prelude = []) {
  const script = [
    "import sys",
    "from tests.fake_openai import Behaviour, FakeOpenAI",
    ...prelude,
    `fake = FakeOpenAI(${behaviour})`,
    "print(fake.base_url, flush=True)",
    "sys.stdin.read()",
  ].join("\n");
  const child = spawn(python(), ["-c", script], { cwd: REPO, env: { ...process.env, PYTHONPATH: REPO }, stdio: ["pipe", "pipe", "inherit"] });
  const url = await new Promise((resolveUrl, reject) => {
    let out = "";
    child.stdout.on("data", (d) => {
      out += d;
      if (out.includes("\n")) resolveUrl(out.trim());
    });
    child.on("exit", (code) => reject(new Error(`the fake model server exited ${code}`)));
  });
  return { child, url };
}

before(async () => {
  root = await mkdtemp(join(tmpdir(), "zqweb"));
  await mkdir(join(root, "run"), { mode: 0o700 });
  await mkdir(SCREENSHOTS, { recursive: true });
  helper = createServer((req, res) => {
    const path = new URL(req.url, "http://x").pathname;
    const body = path === "/host.html" ? HOST_HTML : path === "/foreign.html" ? FOREIGN_HTML : null;
    res.writeHead(body ? 200 : 404, { "Content-Type": "text/html; charset=utf-8" });
    res.end(body || "not found");
  });
  await new Promise((r) => helper.listen(0, "127.0.0.1", r));
  helperPort = helper.address().port;

  const [libPort, slowPort] = [await freePort(), await freePort()];
  library = new Daemon(root, "zotero", { port: libPort, env: isolatedEnv(root) });
  const [fakeModel] = await Promise.all([
    startFakeModel(),
    runPython(["-c", LIBRARY_SCRIPT, library.dataDir], { ...process.env, PYTHONPATH: REPO }),
  ]);
  fake = fakeModel;
  await mkdir(library.stateDir, { recursive: true });
  // The stand-in host page is the one origin allowed to frame the page (frame-ancestors).
  await writeFile(join(library.stateDir, "zocrates_config.json"), JSON.stringify({ http: { allowed_origins: [`http://127.0.0.1:${helperPort}`] } }));
  slow = new Daemon(root, "nolibrary", { port: slowPort, env: isolatedEnv(root, { ZQ_KEY: "test-key" }) });
  await mkdir(slow.stateDir, { recursive: true });
  await writeFile(join(slow.stateDir, "zocrates_config.json"), JSON.stringify({
    model: { provider: "openai", name: "fake/slow", base_url: fake.url, api_key_env: "ZQ_KEY" },
  }));
  [browser] = await Promise.all([
    launchFirefox({ defaultViewport: null, protocolTimeout: STEP_TIMEOUT_MS }),
    library.start(),
    slow.start(),
  ]);
  page = await newPage();
  // The questions below need the fixture library indexed: the daemon indexes in the background,
  // and on a loaded machine the first question could otherwise find "still being indexed (0%)".
  for (const t0 = Date.now(); (await library.client.libraryStatus()).library?.state !== "ready";) {
    if (Date.now() - t0 > 180_000) throw new Error("the fixture library was not indexed within 180 s");
    await new Promise((r) => setTimeout(r, 200));
  }
});

after(async () => {
  await browser?.close().catch(() => {});
  await Promise.all([library?.stop(), slow?.stop()]);
  fake?.child.kill("SIGTERM");
  await new Promise((r) => (helper ? helper.close(r) : r()));
  if (root) await rm(root, { recursive: true, force: true });
});

async function newPage() {
  const p = await browser.newPage();
  // puppeteer's setViewport also sets a screen orientation Firefox ESR 140 does not implement;
  // the BiDi viewport alone is what we need.
  await p.mainFrame().browsingContext.setViewport({ viewport: SIDEBAR, devicePixelRatio: 1 });
  p.setDefaultTimeout(STEP_TIMEOUT_MS);
  p.errors = [];
  p.on("pageerror", (err) => p.errors.push(err.message));
  return p;
}

async function open(p, url) {
  await p.goto("about:blank"); // a fresh document: not a same-document fragment navigation
  await p.goto(url);
  await until(p, () => document.documentElement?.dataset.view); // chat, prefs, help or fatal: started
}

async function ask(p, text) {
  await present(p, "#send:not([hidden])");
  await typeInto(p, "#prompt", text);
  await press(p, "Enter");
}

/** Wait until `fn` (run in the page, with `args`) is truthy; its value. puppeteer's own
 *  waitForFunction compiles with Function(), which the page's CSP (rightly) refuses. */
function until(p, fn, ...args) {
  return untilWithin(STEP_TIMEOUT_MS, p, fn, ...args);
}

/** `until`, with a timeout of its own (a library being indexed on a loaded machine). */
async function untilWithin(timeoutMs, p, fn, ...args) {
  const deadline = Date.now() + timeoutMs;
  let last;
  for (;;) {
    try {
      last = await evaluateOnce(p, fn, ...args);
      if (last) return last;
    } catch (err) {
      // A navigation in progress destroys the context (Firefox's remote agent may then fail the
      // call itself, an "unknown error" of the protocol, not of `fn`); anything else is a bug in `fn`.
      if (!/context|destroyed|navigat|Discarded|Protocol error \(script\.callFunction\): unknown error|no answer within/i.test(err.message)) throw err;
    }
    if (Date.now() > deadline) {
      const shown = await p.evaluate(() => document.body?.innerText.slice(0, 1500)).catch((err) => `(unreadable: ${err.message})`);
      throw new Error(`timed out waiting for ${fn.toString().slice(0, 300)}\n--- the page shows:\n${shown}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

// One evaluation of `until`'s condition: a condition is a DOM query, answered in milliseconds.
// Firefox can drop the answer to a call made while its page navigates (the call then waits for
// puppeteer's protocolTimeout): past this, that try is abandoned and the condition asked again.
const EVALUATE_TRY_MS = 15_000;

function evaluateOnce(p, fn, ...args) {
  const call = p.evaluate(fn, ...args);
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${EVALUATE_TRY_MS} ms`)), EVALUATE_TRY_MS);
  });
  call.catch(() => {}); // an abandoned try's late failure is not the test's
  return Promise.race([call, late]).finally(() => clearTimeout(timer));
}

/** Wait for an element (through `until`, so a timeout says what the page shows). */
function present(p, selector) {
  return until(p, (sel) => !!document.querySelector(sel), selector);
}

const isFrame = (p) => typeof p.page === "function";

/** A real mouse click on the element. In a cross-origin frame (whose elements this BiDi build
 *  cannot locate) at the element's place, from the frame's place in its page. */
async function click(p, selector) {
  await present(p, selector);
  if (!isFrame(p)) return p.click(selector);
  const at = await p.evaluate((sel) => {
    const el = document.querySelector(sel);
    el.scrollIntoView({ block: "nearest" });
    const r = el.getBoundingClientRect();
    return { x: r.left + Math.min(r.width / 2, 20), y: r.top + r.height / 2 };
  }, selector);
  const frameAt = await p.page().evaluate(() => {
    const r = document.querySelector("iframe").getBoundingClientRect();
    return { x: r.left, y: r.top };
  });
  return p.page().mouse.click(frameAt.x + at.x, frameAt.y + at.y);
}

/** Click into a field and type into it with the keyboard. */
async function typeInto(p, selector, text, { clear = false } = {}) {
  await click(p, selector);
  if (clear) await p.evaluate((sel) => { document.querySelector(sel).value = ""; }, selector);
  await (isFrame(p) ? p.page() : p).keyboard.type(text);
}

function press(p, key) {
  return (isFrame(p) ? p.page() : p).keyboard.press(key);
}

/** Wait until no turn runs in the page (the live bubble is gone and Send is back). */
async function turnEnded(p) {
  await until(p, () => !document.querySelector(".msg.live") && !document.querySelector("#send")?.hidden);
}

async function shot(p, name) {
  await p.screenshot({ path: join(SCREENSHOTS, name) });
}

/** Whether the page fits the sidebar's width (no horizontal scrolling). */
function fitsWidth(p) {
  return p.evaluate(() => document.documentElement.scrollWidth <= document.documentElement.clientWidth + 1);
}

function texts(p, selector) {
  return p.evaluate((sel) => [...document.querySelectorAll(sel)].map((e) => e.textContent.trim()), selector);
}

function attrs(p, selector, name) {
  return p.evaluate((sel, n) => [...document.querySelectorAll(sel)].map((e) => e.getAttribute(n)), selector, name);
}

/** Open the web app of the fixture library, start a new chat there and ask `question`; once the
 *  turn showed `shows` (its answer, by default) and ended. */
async function askInNewChat(p, question, shows = ".msg.assistant:not(.live) .answer") {
  await open(p, library.url());
  await click(p, "#new-chat");
  await present(p, "#welcome");
  await ask(p, question);
  await present(p, shows);
  await turnEnded(p);
}

/** The session the page shows. */
function shownSession(p) {
  return p.evaluate(() => sessionStorage.getItem("zocrates.session"));
}

/** The Zocrates plugin's side of the daemon's write channel, played as the plugin inside Zotero
 *  plays it (Zotero cannot run here; plugin.test.mjs drives the plugin's own code): it long-polls
 *  GET /plugin/writes and answers each plan and apply with what the write changes. `seen` lists
 *  the [call, operation type] it was handed. */
function pluginInZotero(daemon) {
  const headers = { Authorization: `Bearer ${daemon.token}`, "X-Zocrates-Plugin-Token": daemon.pluginToken,
                    "X-Zocrates-Plugin": "0.1.0", "X-Zotero-Version": "9.0.6" };
  const seen = [];
  let stopped = false;
  const changeOf = (op) => {
    switch (op.type) {
      case "tag_items": return { tags_added: Object.fromEntries(op.items.map((k) => [k, op.tags])) };
      case "add_to_collection": return { collection_added: op.items };
      case "create_collection": return { created_collections: [op.new_key] };
      case "save_note": return { created_items: [op.new_key] };
      default: return {};
    }
  };
  const running = (async () => {
    while (!stopped) {
      const { request } = await (await fetch(`${daemon.base}/plugin/writes?wait=1`, { headers })).json();
      if (!request) continue;
      seen.push([request.call, request.operation.type]);
      const answered = await fetch(`${daemon.base}/plugin/writes/${request.id}`, {
        method: "POST", headers: { ...headers, "Content-Type": "application/json" },
        body: JSON.stringify({ result: { change: changeOf(request.operation) } }),
      });
      assert.equal(answered.status, 200, await answered.text());
    }
  })();
  return { seen, stop: async () => { stopped = true; await running; } };
}

describe("the sidebar web app in Firefox", () => {
  test("without a valid token the page says how to get one", async () => {
    await open(page, `${library.base}/ui/`);
    const help = await page.$eval("#help", (e) => e.textContent);
    assert.match(help, /zocrates open/);
    assert.match(help, /Zotero/);
    // A wrong token: refused by the daemon, forgotten, and the help says why.
    await open(page, `${library.base}/ui/#token=not-the-token`);
    await present(page, "#help");
    assert.match(await page.$eval("#help", (e) => e.textContent), /refused/);
    assert.equal(await page.evaluate(() => sessionStorage.getItem("zocrates.token")), null);
  });

  test("a question streams an answer with progress lines and numbered citation links", async () => {
    await open(page, library.url());
    // The token left the address at once and lives in sessionStorage.
    assert.equal(await page.evaluate(() => location.hash), "");
    assert.equal(await page.evaluate(() => sessionStorage.getItem("zocrates.token")), library.token);
    await page.evaluate(() => {
      window.__seen = { renders: 0, minGap: Infinity, live: false };
      new MutationObserver(() => {
        const live = document.querySelector(".msg.live");
        if (!live) return;
        window.__seen.live = true;
        window.__seen.renders = Number(live.dataset.renders || 0);
        if (live.dataset.minGapMs) window.__seen.minGap = Math.min(window.__seen.minGap, Number(live.dataset.minGapMs));
      }).observe(document.body, { subtree: true, childList: true, attributes: true, characterData: true });
    });
    await ask(page, "What is retrieval-augmented generation?");
    await present(page, ".msg.assistant:not(.live) .answer a.cite");
    await turnEnded(page);
    const seen = await page.evaluate(() => ({ ...window.__seen, minGap: Number.isFinite(window.__seen.minGap) ? window.__seen.minGap : null }));
    assert.ok(seen.live, "the turn was shown while it ran");
    // An offline turn is over in tens of milliseconds, within one render interval of its first
    // event, so its progress lines may never be drawn: the slow turn below checks them.
    if (seen.minGap !== null) assert.ok(seen.minGap >= 45, `renders at most every 50 ms (closest two: ${seen.minGap} ms)`);
    const cites = await page.$$eval(".msg.assistant .answer a.cite", (as) => as.map((a) => ({ n: a.textContent, href: a.getAttribute("href") })));
    assert.ok(cites.length >= 2);
    for (const c of cites) assert.match(c.href, /^zotero:\/\/select\/library\/items\/[A-Z0-9]{8}$/);
    // [n] opens the item the "Cited Sources" entry n names.
    const sources = await page.$$eval(".msg.assistant .answer .source", (ds) => ds.map((d) => ({ n: d.dataset.source, href: d.querySelector("a").getAttribute("href"), title: d.querySelector("a").textContent })));
    for (const c of cites) assert.equal(sources.find((s) => s.n === c.n)?.href, c.href);
    assert.ok(sources.some((s) => s.href.endsWith("/LEWIS202") && /Retrieval-Augmented Generation/.test(s.title)));
    // "Open the PDF at" lists the pages the answer cites (an entry's "p. 2.", a "[1, p. 2]"), no
    // other page the search saw; each opens the PDF at its page. No quote starts with a heading.
    const answerText = await page.$eval(".msg.assistant .answer", (e) => e.textContent);
    const citedPages = new Map();
    for (const m of answerText.matchAll(/\[(\d+), pp?\. ([\w-]+)\]/g)) citedPages.set(`${m[1]} ${m[2]}`, true);
    for (const s of sources) {
      const listed = /\bpp?\. ([\w-]+(?:, [\w-]+)*)\.$/.exec(s.title);
      for (const p of listed ? listed[1].split(", ") : []) citedPages.set(`${s.n} ${p}`, true);
    }
    const pdfLinks = await page.$$eval(".msg.assistant .page-links a.pdf-link", (as) => as.map((a) => ({ text: a.textContent, href: a.getAttribute("href") })));
    assert.ok(pdfLinks.length >= 1, "the cited pages of LEWISPDF are listed");
    for (const l of pdfLinks) {
      const [, n, p] = /^\[(\d+)\] p\. ([\w-]+)$/.exec(l.text);
      assert.ok(citedPages.has(`${n} ${p}`), `${l.text} is not cited in: ${answerText}`);
      assert.match(l.href, /^zotero:\/\/open-pdf\/library\/items\/[A-Z0-9]{8}\?page=\d+$/);
    }
    assert.doesNotMatch(answerText, /Introduction\. Language models/);
    assert.doesNotMatch(await page.$eval(".msg.assistant:not(.live)", (e) => e.textContent), /null/, "nothing shows as null");
    // Nothing of the answer went in as markup: the answer holds only the renderer's elements.
    const tags = await page.$$eval(".msg.assistant .answer *", (els) => [...new Set(els.map((e) => e.tagName.toLowerCase()))]);
    for (const t of tags) assert.ok(["p", "br", "ul", "ol", "li", "a", "span", "div", "strong", "em", "code", "pre", "h3", "h4", "blockquote", "hr"].includes(t), t);
    assert.match(await page.$eval("#session-title", (e) => e.textContent), /retrieval-augmented generation/i);
    assert.ok(await fitsWidth(page), "nothing wider than the sidebar");
    await shot(page, "answer-with-citations.png");
    assert.deepEqual(page.errors, []);
  });

  test("the first screen: the library's counts and questions drawn from it, one click away", async () => {
    await open(page, library.url());
    await click(page, "#new-chat");
    await present(page, "#welcome");
    await present(page, "#welcome .suggestion");
    const { library: status } = await library.client.libraryStatus();
    const { suggestions } = await library.client.librarySuggestions();
    assert.ok(suggestions.length >= 3, JSON.stringify(suggestions));
    // The questions are the daemon's, drawn from this library, in its order.
    assert.deepEqual(await texts(page, "#welcome .suggestion"), suggestions.map((sg) => sg.text));
    assert.deepEqual(await attrs(page, "#welcome .suggestion", "data-kind"), suggestions.map((sg) => sg.kind));
    const k = status.kinds;
    const plural = (n, one) => `${n} ${one}${n === 1 ? "" : "s"}`;
    assert.equal(await page.$eval("#library-summary", (e) => e.textContent),
      `Your library: ${plural(k.items, "paper")}, ${plural(k.notes, "note")} and ${plural(k.annotations, "annotation")} indexed, ${plural(k.texts, "full text")}.`);
    assert.ok(await fitsWidth(page), "nothing wider than the sidebar");
    // One click asks it, in its scope: a paper's question is asked of that paper.
    const paper = suggestions.find((sg) => sg.kind === "paper");
    await click(page, `#welcome .suggestion[data-kind="paper"]`);
    await present(page, ".msg.assistant:not(.live) .answer a.cite");
    await turnEnded(page);
    assert.deepEqual(await texts(page, ".msg.user .bubble"), [paper.text]);
    assert.equal(await page.$("#welcome"), null);
    assert.deepEqual(await texts(page, ".chip .chip-label"), [paper.items[0].title]);
    const hrefs = await attrs(page, ".msg.assistant .answer a.cite", "href");
    assert.ok(hrefs.length && hrefs.every((href) => href === `zotero://select/library/items/${paper.items[0].item_key}`), hrefs.join());
    assert.deepEqual(page.errors, []);
  });

  test("the first screen while the library is indexed: counts as they grow, then its questions, without a reload", async () => {
    // A thousand papers, some with full text; the indexer stops after its first batch until the
    // page has shown it (a fast machine indexes them all before the page has opened).
    const hold = join(root, "big.index-hold");
    const big = new Daemon(root, "big", { port: await freePort(), env: isolatedEnv(root, { ZOCRATES_TEST_HOLD_INDEX_UNTIL: hold }), testHooks: true });
    await runPython(["-c", "import sys; from pathlib import Path; from tests.zoterofixture import build_zotero_dir, generate_library; "
      + "g = generate_library(n_items=1000, n_fulltexts=120, pages=5); build_zotero_dir(Path(sys.argv[1]), g.items, g.collections)",
    big.dataDir], { ...process.env, PYTHONPATH: REPO });
    await big.start();
    const p = await newPage();
    try {
      // The page's questions, asked for while the library is indexed, come back only once the page
      // has seen the library ready (a loaded machine answers them late): the last status poll is
      // then behind it, and the page must still end with the questions of the library as it is.
      await p.evaluateOnNewDocument(() => {
        const realFetch = window.fetch.bind(window);
        let sawReady;
        const ready = new Promise((resolve) => { sawReady = resolve; });
        window.fetch = async (input, init) => {
          const url = String(input?.url ?? input);
          const response = await realFetch(input, init);
          if (/\/library\/status/.test(url)) {
            response.clone().json().then((body) => { if (body?.library?.state === "ready") sawReady(); }, () => {});
          }
          return /\/library\/suggestions/.test(url) ? ready.then(() => response) : response;
        };
      });
      await open(p, big.url());
      await p.evaluate(() => {
        window.__summaries = [document.querySelector("#library-summary")?.textContent];
        new MutationObserver(() => {
          const line = document.querySelector("#library-summary")?.textContent;
          if (line && window.__summaries.at(-1) !== line) window.__summaries.push(line);
        }).observe(document.body, { subtree: true, childList: true, characterData: true });
      });
      await untilWithin(120_000, p, () => /^Indexing is under way: /.test(document.querySelector("#library-summary")?.textContent || ""));
      writeFileSync(hold, "");
      await untilWithin(120_000, p, () => /^Your library: [\d,]+ papers/.test(document.querySelector("#library-summary")?.textContent || "")
        && document.querySelectorAll("#welcome .suggestion").length >= 3);
      const seen = await p.evaluate(() => window.__summaries);
      const indexing = seen.filter((line) => /^Indexing is under way: [\d,]+ papers, [\d,]+ notes? and [\d,]+ annotations? so far \(\d+%\)/.test(line || ""));
      assert.ok(indexing.length >= 1, `indexing was shown as it went: ${JSON.stringify(seen)}`);
      const { library: status } = await big.client.libraryStatus();
      assert.match(await p.$eval("#library-summary", (e) => e.textContent), new RegExp(`^Your library: ${status.kinds.items.toLocaleString("en")} papers`));
      const { suggestions } = await big.client.librarySuggestions();
      assert.deepEqual(await texts(p, "#welcome .suggestion"), suggestions.map((sg) => sg.text));
      // No tags in this library: papers and a collection.
      assert.deepEqual([...new Set(suggestions.map((sg) => sg.kind))].sort(), ["collection", "paper"]);
      assert.deepEqual(p.errors, []);
    } finally {
      await p.close();
      await big.stop();
    }
  });

  test("the first screen of an empty library says so, and follows it live when papers arrive", async () => {
    const growing = new Daemon(root, "growing", { port: await freePort(), env: isolatedEnv(root) });
    await mkdir(growing.stateDir, { recursive: true });
    // The daemon looks at Zotero every second here (30 s by default), and without the dense stage
    // (its model's load makes the first refresh slow, and the next waits 20 times as long).
    await writeFile(join(growing.stateDir, "zocrates_config.json"), JSON.stringify({ library: { poll_interval_s: 1, dense: false } }));
    await runPython(["-c", "import sys; from pathlib import Path; from tests.zoterofixture import build_zotero_dir; "
      + "build_zotero_dir(Path(sys.argv[1]), [], [])", growing.dataDir], { ...process.env, PYTHONPATH: REPO });
    await growing.start();
    const p = await newPage();
    try {
      await open(p, growing.url());
      await until(p, () => /Your Zotero library is empty/.test(document.querySelector("#library-summary")?.textContent || ""));
      assert.equal(await p.$("#welcome .suggestion"), null);
      // Papers arrive: the demo library (`zocratesd demo`), written aside, then moved in as a
      // whole, as a sync would leave it.
      const aside = join(root, "growing-aside");
      await runPython(["-m", "zocratesd", "demo", "--dir", aside], { ...process.env, PYTHONPATH: REPO });
      await runPython(["-c", "import os, sys; from pathlib import Path; "
        + "os.rename(Path(sys.argv[1]) / 'storage', Path(sys.argv[2]) / 'storage'); "
        + "os.replace(Path(sys.argv[1]) / 'zotero.sqlite', Path(sys.argv[2]) / 'zotero.sqlite')", aside, growing.dataDir],
      { ...process.env, PYTHONPATH: REPO });
      await until(p, () => /^Your library: 30 papers/.test(document.querySelector("#library-summary")?.textContent || "")
        && document.querySelectorAll("#welcome .suggestion").length === 4);
      const { suggestions } = await growing.client.librarySuggestions();
      assert.deepEqual(await texts(p, "#welcome .suggestion"), suggestions.map((sg) => sg.text));
      assert.deepEqual(suggestions.map((sg) => sg.kind), ["paper", "collection", "tag", "paper"]);
      assert.ok(await fitsWidth(p), "nothing wider than the sidebar");
      await shot(p, "first-screen.png");
      assert.deepEqual(p.errors, []);
    } finally {
      await p.close();
      await growing.stop();
    }
  });

  test("a question sent while the page is still opening its chat is sent once the chat is there", async () => {
    const p = await newPage();
    try {
      // The page's session requests wait until the test lets them through: a daemon slow to answer.
      await p.evaluateOnNewDocument(() => {
        const realFetch = window.fetch.bind(window);
        let open;
        const gate = new Promise((resolve) => { open = resolve; });
        window.__openSessions = () => open();
        window.fetch = (input, init) => (/\/sessions(\/|$|\?)/.test(String(input?.url ?? input)) ? gate.then(() => realFetch(input, init)) : realFetch(input, init));
      });
      await p.goto(library.url());
      await present(p, "#prompt");
      const question = "What did Lewis find about retrieval-augmented generation?";
      await typeInto(p, "#prompt", question);
      await press(p, "Enter");
      // Held, and shown as held: the question is still in the box, Send says it is on its way.
      await until(p, () => document.querySelector("#prompt").hasAttribute("data-queued"));
      assert.equal(await p.$eval("#prompt", (e) => e.value), question);
      assert.equal(await p.$eval("#send", (e) => [e.disabled, e.textContent].join(" ")), "true Sending…");
      assert.equal(await p.$$eval(".msg.user", (els) => els.length), 0);
      await p.evaluate(() => window.__openSessions());
      // The page opens the newest chat (earlier tests' questions may be in it) and asks there.
      await until(p, (q) => [...document.querySelectorAll(".msg.user .bubble")].at(-1)?.textContent === q, question);
      await turnEnded(p);
      await until(p, () => !!document.querySelector(".msg.assistant:last-child .answer a.cite"));
      assert.equal(await p.$eval("#prompt", (e) => e.value), "");
      assert.equal(await p.$eval("#send", (e) => [e.disabled, e.textContent].join(" ")), "false Send");
      assert.deepEqual(p.errors, []);
    } finally {
      await p.close();
    }
  });

  test("a link of zocrates open works once: the page trades its code for the token; a spent one says what to do", async () => {
    const { code } = await library.client.mintCode();
    const url = `${library.base}/ui/#code=${code}`;
    const p = await newPage();
    await open(p, url);
    await until(p, () => document.documentElement?.dataset.view === "chat");
    // The code left the address; the tab holds the token it was traded for.
    assert.equal(await p.evaluate(() => location.href), `${library.base}/ui/`);
    assert.equal(await p.evaluate(() => sessionStorage.getItem("zocrates.token")), library.token);
    await p.reload(); // a reload keeps the tab's token
    await until(p, () => document.documentElement?.dataset.view === "chat");
    await p.close();
    // The same address again (from the history, in a new tab): spent.
    const again = await newPage();
    await open(again, url);
    await present(again, "#spent-link");
    const said = await again.$eval("#spent-link", (e) => e.textContent);
    assert.match(said, /used already, or it has expired/);
    assert.match(said, /zocrates open/);
    assert.equal(await again.evaluate(() => sessionStorage.getItem("zocrates.token")), null);
    assert.equal(await again.evaluate(() => location.hash), "");
    // A code pasted into an open tab is taken too (a same-document navigation).
    const { code: fresh } = await library.client.mintCode();
    await again.evaluate((c) => { location.hash = `code=${c}`; }, fresh);
    await until(again, () => document.documentElement?.dataset.view === "chat");
    assert.equal(await again.evaluate(() => sessionStorage.getItem("zocrates.token")), library.token);
    assert.deepEqual(again.errors, []);
    await again.close();
  });

  test("zocrates open's page file, opened as the command opens it, leads to the web app and goes with its code", async () => {
    // What `zocrates open` starts the browser on instead of the address (shim/openpage.py).
    const r = await fetch(`${library.base}/auth/code`, {
      method: "POST", body: JSON.stringify({ page_file: true }),
      headers: { Authorization: `Bearer ${library.token}`, "Content-Type": "application/json" },
    });
    const { code, page_file: file } = await r.json();
    assert.match(file, /\/open-[0-9a-f]{32}\.html$/);
    assert.equal((await stat(file)).mode & 0o777, 0o600);
    const pageUrl = pathToFileURL(file).href;
    assert.ok(!pageUrl.includes(code), "the file's address holds no code");
    const p = await newPage();
    await open(p, pageUrl);
    await until(p, () => document.documentElement?.dataset.view === "chat");
    assert.equal(await p.evaluate(() => location.href), `${library.base}/ui/`);
    assert.equal(await p.evaluate(() => sessionStorage.getItem("zocrates.token")), library.token);
    await assert.rejects(stat(file), { code: "ENOENT" }); // the code was traded: the page is gone
    assert.deepEqual(p.errors, []);
    await p.close();
  });

  test("a link whose label hides its target shows its host", async () => {
    const out = await page.evaluate(async () => {
      const { renderMarkdown } = await import("/ui/markdown.js");
      const div = document.createElement("div");
      div.append(renderMarkdown([
        "Renew at [the bank](https://attacker.example/login) or [https://example.org/a](https://example.org/a) or [example.org](https://www.example.org/) or [paypal.com](https://xn--pypal-4ve.com/) or https://bare.example/x.",
        "# Cited Sources",
        "[1] A paper (https://elsewhere.example/p)",
        "[2] Ours (zotero://select/library/items/ABCD2345)",
      ].join("\n")));
      return { text: div.textContent, hosts: [...div.querySelectorAll(".link-host")].map((e) => e.textContent),
        outside: [...div.querySelectorAll(".link-host")].every((e) => !e.closest("a")) };
    });
    assert.deepEqual(out.hosts, ["(attacker.example)", "(xn--pypal-4ve.com)", "(elsewhere.example)"]);
    assert.ok(out.outside, "the host is beside the link, not part of its label");
    assert.match(out.text, /the bank \(attacker\.example\) or https:\/\/example\.org\/a or example\.org or paypal\.com \(xn--pypal-4ve\.com\)/);
  });

  test("the Markdown renderer lets no markup or script through", async () => {
    const out = await page.evaluate(async () => {
      const { renderMarkdown } = await import("/ui/markdown.js");
      const hostile = [
        '<img src=x onerror="window.__pwned = 1"> and <script>window.__pwned = 2</script>',
        "[click](javascript:window.__pwned=3) [data](data:text/html,hi) [ok](https://example.org/a) **bold [1]**",
        "- item `<b>code</b>` [2, p. 4]",
        "# Cited Sources",
        "[1] Evil \"><svg onload=alert(1)> (zotero://select/library/items/ABCD2345)",
        "[2] Paper (javascript:alert(1))",
      ].join("\n");
      const div = document.createElement("div");
      div.append(renderMarkdown(hostile));
      document.body.append(div); // connected: an onerror/onload would fire now
      await new Promise((r) => setTimeout(r, 200));
      const result = {
        tags: [...new Set([...div.querySelectorAll("*")].map((e) => e.tagName.toLowerCase()))],
        hrefs: [...div.querySelectorAll("a")].map((a) => a.getAttribute("href")),
        attrs: [...new Set([...div.querySelectorAll("*")].flatMap((e) => [...e.attributes].map((a) => a.name)))],
        text: div.textContent,
        pwned: window.__pwned ?? null,
      };
      div.remove();
      return result;
    });
    assert.equal(out.pwned, null);
    for (const t of out.tags) assert.ok(["p", "br", "ul", "li", "a", "span", "div", "strong", "code", "h3"].includes(t), t);
    for (const a of out.attrs) assert.ok(["href", "class", "target", "rel", "data-cite", "data-source", "title"].includes(a), a);
    assert.deepEqual(out.hrefs.filter((h) => !/^(https:\/\/example\.org\/a|zotero:\/\/select\/library\/items\/ABCD2345)$/.test(h)), []);
    assert.match(out.text, /<img src=x onerror=/);
    assert.match(out.text, /<script>/);
    assert.match(out.text, /<b>code<\/b>/);
  });

  test("a PDF page of a group library's paper opens in that group", async () => {
    await open(page, library.url());
    await click(page, "#new-chat");
    await present(page, "#welcome");
    await ask(page, "How fast did coral reefs recover from mass bleaching where parrotfish remained?");
    await turnEnded(page);
    const sources = await page.$$eval(".msg.assistant:last-child .answer .source a", (as) => as.map((a) => a.getAttribute("href")));
    assert.ok(sources.includes("zotero://select/groups/4343/items/GRPREEF1"), JSON.stringify(sources));
    const pdfLinks = await attrs(page, ".msg.assistant:last-child .page-links a.pdf-link", "href");
    assert.ok(pdfLinks.length >= 1, "the cited page is listed");
    for (const href of pdfLinks) assert.match(href, /^zotero:\/\/open-pdf\/groups\/4343\/items\/GRPPDF01\?page=\d+$/);
    assert.deepEqual(page.errors, []);
  });

  test("an answer's citations show as checked against their sources; a pasted quote finds its item and page", async () => {
    await askInNewChat(page, "What is retrieval-augmented generation?");
    // The offline answer quotes its sources word for word: every citation is found in its source.
    await present(page, ".msg.assistant:not(.live) .citation-checks .check");
    const checks = await page.$$eval(".citation-checks .check", (lis) => lis.map((li) => ({ n: li.dataset.n, verified: li.dataset.verified, text: li.textContent })));
    assert.ok(checks.length >= 1);
    for (const c of checks) assert.deepEqual([c.verified, /found in the cited source/.test(c.text)], ["true", true], c.text);
    const shown = await library.client.getSession(await shownSession(page));
    const checked = shown.session.messages.find((m) => m.citations)?.citations;
    assert.deepEqual(checks.map((c) => Number(c.n)), checked.map((c) => c.n), "one line per checked citation of the UI session");
    // Find a quote: pasted as a PDF gives it, its line broken and a word hyphenated there.
    await click(page, "#quote-toggle");
    await typeInto(page, "#quote-input", "Coral reefs recovered from mass bleach-\ning within a decade where grazing parrotfish remained");
    await click(page, "#quote-find");
    await present(page, "#quote-results .quote-match a");
    const found = await page.$$eval("#quote-results .quote-match", (lis) => lis.map((li) => ({ text: li.textContent, href: li.querySelector("a").getAttribute("href") })));
    assert.deepEqual(found[0], { text: "Reef recovery after bleaching, p. 2 (exact)", href: "zotero://open-pdf/groups/4343/items/GRPPDF01?page=2" });
    await typeInto(page, "#quote-input", "Quantum chromodynamics predicts confinement of colour charge", { clear: true });
    await click(page, "#quote-find");
    await until(page, () => /No item of your library has this quote/.test(document.querySelector("#quote-results")?.textContent || ""));
    assert.ok(await fitsWidth(page), "nothing wider than the sidebar");
    await shot(page, "citations-checked-and-quote-finder.png");
    assert.deepEqual(page.errors, []);
  });

  test("the chat's citation style is set beside the prompt; each source shows its citation key", async () => {
    await askInNewChat(page, "What is retrieval-augmented generation?");
    const sid = await shownSession(page);
    // The daemon's own choices, the chat's current one selected.
    await until(page, () => document.querySelectorAll("#citation-style option").length === 3);
    assert.deepEqual(await attrs(page, "#citation-style option", "value"), ["numbered", "author-year", "pandoc"]);
    assert.equal(await page.$eval("#citation-style", (e) => e.value), "numbered");
    // Numbered: the keys come from the search the page saw (the stream's passages).
    const { sources: keyed } = await library.client.bibliography(sid, { format: "csl-json" });
    const lewisKey = keyed.find((s) => s.item_key === "LEWIS202")?.citation_key;
    assert.ok(lewisKey, JSON.stringify(keyed));
    const shownKeys = () => page.evaluate(() => [...[...document.querySelectorAll(".msg.assistant:not(.live)")].at(-1).querySelectorAll(".answer .source")]
      .map((d) => ({ href: d.querySelector("a").getAttribute("href"), title: d.querySelector("a").textContent, key: d.querySelector(".source-key")?.textContent })));
    let sources = await shownKeys();
    assert.ok(sources.length >= 1);
    for (const s of sources) assert.equal(s.key, `@${keyed.find((k) => s.href.endsWith(`/${k.item_key}`))?.citation_key}`, JSON.stringify(s));
    // After a reload the page saw no search: the keys are those the daemon keeps with the answer.
    await open(page, library.url());
    assert.equal(await shownSession(page), sid);
    await until(page, () => document.querySelectorAll(".msg.assistant:not(.live) .answer .source").length > 0);
    assert.deepEqual(await shownKeys(), sources);

    await page.select("#citation-style", "pandoc");
    await until(page, () => !document.querySelector("#citation-style").disabled);
    assert.equal((await library.client.getSession(sid)).session.settings.citation_style, "pandoc");
    await ask(page, "What is retrieval-augmented generation?");
    await until(page, () => document.querySelectorAll(".msg.assistant:not(.live) .answer").length === 2);
    await turnEnded(page);
    const answer = (await texts(page, ".msg.assistant .answer")).at(-1);
    assert.match(answer, new RegExp(`\\[@${lewisKey}[\\],]`), answer);
    assert.doesNotMatch(answer.split("Cited Sources")[0], /\[\d/, "no number in the text");
    sources = await shownKeys();
    assert.ok(sources.some((s) => s.key === `@${lewisKey}` && s.href.endsWith("/LEWIS202")), JSON.stringify(sources));
    for (const s of sources) assert.doesNotMatch(s.title, /^\[@/, "the key is shown once, beside the entry");
    // The checked citations are named as the answer cites them.
    const rows = await page.evaluate(() => [...[...document.querySelectorAll(".msg.assistant:not(.live)")].at(-1)
      .querySelectorAll(".citation-checks .check-n")].map((e) => e.textContent.trim()));
    assert.ok(rows.includes(`[@${lewisKey}]`), JSON.stringify(rows));
    for (const r of rows) assert.match(r, /^\[@[^\]\s]+\]$/, JSON.stringify(rows));
    // The chat keeps its style: shown again after a reload.
    await open(page, library.url());
    await until(page, () => document.querySelector("#citation-style")?.value === "pandoc");
    assert.ok(await fitsWidth(page), "nothing wider than the sidebar");
    assert.deepEqual(page.errors, []);
  });

  test("a model's invented quote shows as not found, a wrong page as corrected", async () => {
    // A model (tests/fake_openai.py) answering with a real quote given the wrong page, and an invented one.
    const answer = [
      "def answer(question, passages):",
      "    return ('Hughes finds that \"Coral reefs recovered from mass bleaching within a decade\" [1, p. 1]. '",
      "            'Lewis claims that \"retrieval never helps a language model answer questions\" [2].\\n\\n# Cited Sources\\n'",
      "            '[1] Terry Hughes (2018). Reef recovery after bleaching. p. 1. (zotero://select/groups/4343/items/GRPREEF1)\\n'",
      "            '[2] Patrick Lewis & Ethan Perez (2020). Retrieval-Augmented Generation. (zotero://select/library/items/LEWIS202)')",
    ];
    const model = await startFakeModel("Behaviour(answer=answer)", answer);
    const checked = new Daemon(root, "checked", { port: await freePort(), env: isolatedEnv(root, { ZQ_KEY: "test-key" }) });
    const p = await newPage();
    try {
      await runPython(["-c", LIBRARY_SCRIPT, checked.dataDir], { ...process.env, PYTHONPATH: REPO });
      await mkdir(checked.stateDir, { recursive: true });
      await writeFile(join(checked.stateDir, "zocrates_config.json"), JSON.stringify({
        model: { provider: "openai", name: "fake/checks", base_url: model.url, api_key_env: "ZQ_KEY" },
      }));
      await checked.start();
      for (const t0 = Date.now(); (await checked.client.libraryStatus()).library?.state !== "ready";) {
        if (Date.now() - t0 > 180_000) throw new Error("the fixture library was not indexed within 180 s");
        await new Promise((r) => setTimeout(r, 200));
      }
      await open(p, checked.url());
      await ask(p, "How fast do reefs recover?");
      await present(p, ".msg.assistant:not(.live) .citation-checks .check");
      await turnEnded(p);
      assert.match(await p.$eval(".citation-checks summary", (e) => e.textContent), /^Citations checked: 1 of 2 found in their sources$/);
      assert.equal(await p.$eval(".citation-checks", (e) => e.open), true, "open when a citation fails");
      const rows = await p.$$eval(".citation-checks .check", (lis) => lis.map((li) => ({
        n: li.dataset.n, verified: li.dataset.verified, state: li.querySelector(".check-state").textContent,
        quote: li.querySelector(".check-text")?.textContent ?? null, page: li.querySelector(".check-page")?.textContent ?? null,
        href: li.querySelector(".check-page a")?.getAttribute("href") ?? null })));
      assert.deepEqual(rows, [
        { n: "1", verified: "true", state: "✓ found in the cited source", quote: null, page: "on p. 2, not p. 1",
          href: "zotero://open-pdf/groups/4343/items/GRPPDF01?page=2" },
        { n: "2", verified: "false", state: "✗ not found in the cited source",
          quote: "“retrieval never helps a language model answer questions”", page: null, href: null },
      ]);
      // The answer itself says so, in its last words.
      const text = await p.$eval(".msg.assistant:not(.live) .answer", (e) => e.textContent);
      assert.match(text, /Checked against the sources:/);
      assert.match(text, /\[2\] “retrieval never helps a language model answer questions”: not found in the cited source\./);
      assert.match(text, /\[1\] “Coral reefs recovered from mass bleaching within a decade”: on p\. 2, not p\. 1\./);
      assert.ok(await fitsWidth(p), "nothing wider than the sidebar");
      await shot(p, "citations-flagged.png");
      assert.deepEqual(p.errors, []);
    } finally {
      await p.close();
      await checked.stop();
      model.child.kill("SIGTERM");
    }
  });

  test("a page is cited by its label and opens the PDF at its page index", async () => {
    const out = await page.evaluate(async () => {
      const { parseSources, renderMarkdown } = await import("/ui/markdown.js");
      const text = "- Reefs recover in a decade [1, p. 127], slowly [1, p. xi].\n\n# Cited Sources\n"
        + "[1] Terry Hughes (2018). Coral reefs. pp. xi, 127. (zotero://select/library/items/CHAPTER1)";
      const sources = parseSources(text);
      sources.get(1).pdfs = new Map([["127", "zotero://open-pdf/library/items/CHAPPDF1?page=3"], ["xi", "zotero://open-pdf/library/items/CHAPPDF1?page=1"]]);
      const div = document.createElement("div");
      div.append(renderMarkdown(text, { sources }));
      return [...div.querySelectorAll("a.cite-page")].map((a) => [a.textContent, a.getAttribute("href")]);
    });
    assert.deepEqual(out, [["p. 127", "zotero://open-pdf/library/items/CHAPPDF1?page=3"], ["p. xi", "zotero://open-pdf/library/items/CHAPPDF1?page=1"]]);
  });

  test("hosted by Zotero: selection chips, citations open through the bridge, save as note, edit restores the chips", async () => {
    const host = await newPage();
    await host.goto(`http://127.0.0.1:${helperPort}/host.html#${encodeURIComponent(library.url())}`);
    const frame = await (await host.waitForSelector("iframe#pane")).contentFrame();
    await until(frame, () => document.documentElement.dataset.host === "zotero" && document.documentElement.dataset.view === "chat");
    await click(frame, "#new-chat");
    await host.evaluate(() => window.sendSelection({ items: [{ key: "LEWIS202", title: "Retrieval-Augmented Generation for Knowledge-Intensive NLP Tasks", uri: "zotero://select/library/items/LEWIS202" }] }));
    await until(frame, () => [...document.querySelectorAll(".chip.paper")].some((c) => /Retrieval-Augmented/.test(c.textContent)));
    await ask(frame, "What does the retriever find?");
    await present(frame, ".msg.assistant:not(.live) .answer a.cite");
    await turnEnded(frame);
    // The scope was the selected paper: every citation is LEWIS202.
    const hrefs = await attrs(frame, ".msg.assistant .answer a.cite", "href");
    assert.ok(hrefs.length && hrefs.every((h) => h === "zotero://select/library/items/LEWIS202"), hrefs.join());
    await click(frame, ".msg.assistant .answer a.cite");
    await until(host, () => window.__messages.some((m) => m.type === "open"));
    const opened = await host.evaluate(() => window.__messages.filter((m) => m.type === "open").map((m) => m.uri));
    assert.deepEqual(opened, ["zotero://select/library/items/LEWIS202"]);
    // A cited page opens the PDF there (the attachment is known from the search's passages).
    await click(frame, ".msg.assistant .answer a.cite-page");
    await until(host, () => window.__messages.filter((m) => m.type === "open").length === 2);
    const pdf = await host.evaluate(() => window.__messages.filter((m) => m.type === "open")[1].uri);
    assert.match(pdf, /^zotero:\/\/open-pdf\/library\/items\/LEWISPDF\?page=[123]$/);
    // Save as note goes through the daemon (recorded, consented to, undoable), not the bridge: a
    // child note of the one cited paper, its citations linked.
    await click(frame, ".msg.assistant .save-note");
    await present(frame, '.msg.assistant .write-card[data-state="awaiting_consent"]');
    const note = (await library.client.listWrites({ pending: true })).writes[0];
    assert.equal(note.kind, "save_note");
    assert.equal(note.face, "zotero-sidebar");
    assert.equal(note.operation.parent, "LEWIS202");
    assert.deepEqual(note.operation.citations.map((c) => c.key), ["LEWIS202"]);
    assert.match(note.operation.markdown, /\]\(zotero:\/\/select\/library\/items\/LEWIS202\)/);
    await click(frame, ".msg.assistant .write-card .write-cancel");
    await until(frame, () => document.querySelector(".msg.assistant .write-card").dataset.state === "discarded");
    assert.equal((await library.client.getWrite(note.id)).write.state, "discarded");
    assert.ok(!(await host.evaluate(() => window.__messages)).some((m) => m.type === "save-note"), "no note crosses the bridge");
    assert.ok(!JSON.stringify(await host.evaluate(() => window.__messages)).includes(library.token), "the token never crosses the bridge");

    // A paper whose text has a link whose label hides its target: the answer quotes it with its
    // host beside it, and the saved note keeps the host.
    await host.evaluate(() => window.sendSelection({ items: [{ key: "PHISHNOT", title: "Membership of the Amateur Astronomers Guild", uri: "zotero://select/library/items/PHISHNOT" }] }));
    await until(frame, () => [...document.querySelectorAll(".chip.paper")].some((c) => /Astronomers/.test(c.textContent)));
    await ask(frame, "How do members renew their guild subscription?");
    await until(frame, () => document.querySelectorAll(".msg.assistant:not(.live) .answer").length === 2);
    await turnEnded(frame);
    const quoted = await frame.evaluate(() => {
      const answer = [...document.querySelectorAll(".msg.assistant .answer")].at(-1);
      const a = [...answer.querySelectorAll("a")].find((x) => x.getAttribute("href") === "https://attacker.example/renew");
      return a ? { label: a.textContent, next: a.nextSibling?.textContent + a.nextElementSibling?.textContent } : null;
    });
    assert.deepEqual(quoted, { label: "the guild members page", next: " (attacker.example)" });
    await frame.evaluate(() => [...document.querySelectorAll(".msg.assistant .save-note")].at(-1).click());
    await until(frame, () => document.querySelectorAll('.msg.assistant .write-card[data-state="awaiting_consent"]').length === 1);
    const phish = (await library.client.listWrites({ pending: true })).writes[0];
    assert.match(phish.operation.markdown, /\[the guild members page\]\(https:\/\/attacker\.example\/renew\) \(attacker\.example\)/);
    await frame.evaluate(() => document.querySelector('.write-card[data-state="awaiting_consent"] .write-cancel').click());
    await until(frame, () => !document.querySelector('.write-card[data-state="awaiting_consent"]'));

    // The selection changes to nothing (the whole library); a second question goes there.
    await host.evaluate(() => window.sendSelection({ items: [], collection: null }));
    await present(frame, ".chip.library");
    await ask(frame, "What is HyDE?");
    await until(frame, () => document.querySelectorAll(".msg.assistant:not(.live) .answer").length === 3);
    await turnEnded(frame);
    // Edit the first question: the turn is rewound and asked again with its own chips.
    await click(frame, ".msg.user .edit");
    await present(frame, ".msg.user .edit-text");
    await typeInto(frame, ".msg.user .edit-text", "What does the retriever find in the dense index?", { clear: true });
    await press(frame, "Enter");
    await until(frame, () => document.querySelectorAll(".msg.user").length === 1 && !document.querySelector(".msg.live")
      && document.querySelectorAll(".msg.assistant .answer").length === 1);
    await turnEnded(frame);
    assert.deepEqual(await texts(frame, ".msg.user .bubble"), ["What does the retriever find in the dense index?"]);
    const chips = await texts(frame, ".chip .chip-label");
    assert.deepEqual(chips, ["Retrieval-Augmented Generation for Knowledge-Intensive NLP Tasks"]);
    assert.deepEqual(await attrs(frame, ".chip", "data-kind"), ["paper"]);
    assert.deepEqual(host.errors, []);
    await host.close();
  });

  test("an edit asks again with the scope and snippets the turn had, even from another client", async () => {
    const api = library.client;
    const { session } = await api.createSession("Snippets from an editor");
    const snippet = { item_key: "KARPDPR1", text: "The dual encoder is trained with in-batch negatives.", page: 1 };
    for await (const _ of api.chat({ prompt: "What does this passage mean?", sessionId: session.id, mode: "papers",
      activeItems: [{ item_key: "KARPDPR1", title: "Dense Passage Retrieval for Open-Domain Question Answering" }], snippets: [snippet] })) { /* drain */ }
    await open(page, library.url());
    await click(page, "#sessions-toggle");
    await click(page, `#sessions .session[data-id="${session.id}"] .session-open`);
    await until(page, () => document.querySelector("#session-title").textContent === "Snippets from an editor");
    await click(page, ".msg.user .edit");
    await typeInto(page, ".msg.user .edit-text", "What does this passage mean for training?", { clear: true });
    await press(page, "Enter");
    await until(page, () => document.querySelectorAll(".msg.user").length === 1 && !document.querySelector(".msg.live")
      && /for training/.test(document.querySelector(".msg.user .bubble")?.textContent || ""));
    await turnEnded(page);
    // The paper stays the scope (its chip); the snippet went with the turn it belongs to.
    assert.deepEqual(await texts(page, ".chip .chip-label"), ["Dense Passage Retrieval for Open-Domain Question Answering"]);
    const { session: after } = await api.getSession(session.id);
    const last = after.messages.filter((m) => m.role === "user").at(-1);
    const { restored } = await api.rewind(session.id, last.invocation_id);
    assert.equal(restored.mode, "papers");
    assert.deepEqual(restored.active_context_items.map((it) => it.item_key), ["KARPDPR1"]);
    assert.deepEqual(restored.snippets.map((sn) => [sn.item_key, sn.text, sn.page]), [[snippet.item_key, snippet.text, snippet.page]]);
  });

  test("a four-part question shows the checkpoint card; it is back after a reload and a daemon restart; extend with guidance", async () => {
    await askInNewChat(page, FOUR_PARTS, ".checkpoint-card");
    const todo = await texts(page, ".checkpoint-card .aspects.todo li");
    assert.deepEqual(todo, ["How do beekeepers treat varroa mites?"]);
    assert.equal((await texts(page, ".checkpoint-card .aspects.done li")).length, 3);
    assert.ok(await fitsWidth(page), "nothing wider than the sidebar");
    await shot(page, "checkpoint-card.png");

    await page.reload();
    await present(page, ".checkpoint-card");
    assert.deepEqual(await texts(page, ".checkpoint-card .aspects.todo li"), todo);

    await library.stop();
    // A page whose daemon went away says so in words.
    await click(page, "#new-chat");
    await until(page, () => /zocratesd is not answering/.test(document.querySelector("#error:not([hidden])")?.textContent || ""));
    await library.start();
    // The new daemon has a new token: the old one is refused and the page says so...
    await page.reload();
    await present(page, "#help");
    // ...and opened with the new one (as the plugin or `zocrates open` does), the card is back.
    await open(page, library.url());
    await present(page, ".checkpoint-card");
    assert.deepEqual(await texts(page, ".checkpoint-card .aspects.todo li"), todo);

    await typeInto(page, ".checkpoint-card .guidance", "oxalic acid in winter");
    await click(page, ".checkpoint-card .extend");
    await until(page, () => !document.querySelector(".checkpoint-card") && !document.querySelector(".msg.live")
      && document.querySelectorAll(".msg.assistant .answer").length === 1);
    await turnEnded(page);
    assert.equal(await page.$(".checkpoint-card"), null);
    // The guidance was searched first (the bees' book is the only source of it) and cited.
    const answer = (await texts(page, ".msg.assistant .answer")).at(-1);
    assert.match(answer, /Honeybee Colony Collapse/);
  });

  test("discard rewinds a paused question into the box; synthesize answers one at once", async () => {
    await click(page, "#new-chat");
    await ask(page, FOUR_PARTS);
    await present(page, ".checkpoint-card .discard");
    await turnEnded(page);
    await click(page, ".checkpoint-card .discard");
    await until(page, () => !document.querySelector(".checkpoint-card") && !document.querySelector(".msg.user"));
    assert.equal(await page.$eval("#prompt", (e) => e.value), FOUR_PARTS);
    await click(page, "#prompt");
    await press(page, "Enter");
    await present(page, ".checkpoint-card .synthesize");
    await turnEnded(page);
    await click(page, ".checkpoint-card .synthesize");
    await until(page, () => !document.querySelector(".checkpoint-card") && !document.querySelector(".msg.live")
      && document.querySelectorAll(".msg.assistant .answer").length >= 1);
    await turnEnded(page);
    const { session } = await library.client.getSession(await page.evaluate(() => sessionStorage.getItem("zocrates.session")));
    assert.equal(session.pending_hitl, null);
    assert.match((await texts(page, ".msg.assistant .answer")).at(-1), /Cited Sources/);
  });

  test("beyond the library: the checkpoint offers Search online; an online source is marked and Add to Zotero proposes it with its DOI; the preferences switch it", async () => {
    const scholarly = await startScholarly();
    const env = isolatedEnv(root);
    delete env.ZOCRATES_ONLINE__MODE; // this test's config file decides
    const online = new Daemon(root, "online", { port: await freePort(), env });
    let p;
    try {
      await runPython(["-c", LIBRARY_SCRIPT, online.dataDir], { ...process.env, PYTHONPATH: REPO });
      await mkdir(online.stateDir, { recursive: true });
      const [openalex_url, arxiv_url, crossref_url] = scholarly.urls;
      await writeFile(join(online.stateDir, "zocrates_config.json"), JSON.stringify({
        research: { initial_budget: 1 }, online: { mode: "ask", openalex_url, arxiv_url, crossref_url },
      }));
      await online.start();
      for (const t0 = Date.now(); (await online.client.libraryStatus()).library?.state !== "ready";) {
        if (Date.now() - t0 > 180_000) throw new Error("the fixture library was not indexed within 180 s");
        await new Promise((r) => setTimeout(r, 200));
      }
      p = await newPage();
      await open(p, online.url());
      await click(p, "#new-chat");
      await present(p, "#welcome");
      await ask(p, "What does dense passage retrieval do? How do tardigrades survive desiccation?");
      await present(p, ".checkpoint-card .search-online");
      await turnEnded(p);
      await click(p, ".checkpoint-card .search-online");
      await until(p, () => !document.querySelector(".checkpoint-card") && !document.querySelector(".msg.live")
        && document.querySelectorAll(".msg.assistant .answer").length === 1);
      await turnEnded(p);
      const answer = (await texts(p, ".msg.assistant .answer")).at(-1);
      assert.match(answer, /Tardigrade survival of desiccation by vitrification/);
      // The online source is marked as such and links to its DOI; the library's paper to Zotero.
      assert.deepEqual(await texts(p, ".answer .source.online .online-badge"), ["Online, not in your library; its abstract was read"]);
      assert.deepEqual(await attrs(p, ".answer .source.online a", "href"), ["https://doi.org/10.1016/j.molcel.2017.02.018"]);
      assert.ok((await attrs(p, ".answer .source:not(.online) a", "href")).some((h) => h.startsWith("zotero://select/")));
      await click(p, ".online-sources .add-to-zotero");
      await present(p, ".write-card");
      const { writes } = await online.client.listWrites({ pending: true });
      assert.equal(writes.length, 1);
      assert.equal(writes[0].kind, "add_item");
      assert.match(writes[0].preview, /Tardigrade survival of desiccation by vitrification/);
      assert.match(JSON.stringify(writes[0]), /10\.1016\/j\.molcel\.2017\.02\.018/);
      // Under online.mode ask the page is not asked mid-turn: the answer says so, and one click asks again, online.
      await click(p, "#new-chat");
      await present(p, "#welcome");
      await ask(p, "How do tardigrades survive desiccation?");
      await present(p, ".online-again .search-online-again");
      await turnEnded(p);
      const offlineAnswer = (await texts(p, ".msg.assistant .answer")).at(-1);
      assert.doesNotMatch(offlineAnswer, /Tardigrade survival of desiccation/);
      await click(p, ".online-again .search-online-again");
      await until(p, () => document.querySelectorAll(".msg.assistant .answer").length === 2 && !document.querySelector(".msg.live"));
      await turnEnded(p);
      assert.match((await texts(p, ".msg.assistant .answer")).at(-1), /Tardigrade survival of desiccation by vitrification/);
      // The preferences say whether the assistant may search online, and change it now.
      await open(p, online.url("?view=prefs"));
      await until(p, () => document.querySelector("#online-mode")?.value === "ask");
      await p.select("#online-mode", "on");
      await until(p, () => /^Saved/.test(document.querySelector("#online-status").textContent));
      assert.equal((await online.client.getSettings()).settings.online.mode, "on");
      assert.deepEqual(p.errors, []);
    } finally {
      await p?.close();
      await online.stop();
      scholarly.child.stdin.end();
    }
  });

  test("sessions: newest first, rename, delete", async () => {
    await click(page, "#sessions-toggle");
    await present(page, "#sessions-panel:not([hidden]) .session");
    const listed = await page.$$eval("#sessions .session", (lis) => lis.map((li) => li.dataset.id));
    const api = (await library.client.listSessions()).sessions;
    const newestFirst = [...api].sort((a, b) => b.created_at - a.created_at).map((s) => s.id);
    assert.deepEqual(listed, newestFirst);

    const target = listed[1];
    await click(page, `#sessions .session[data-id="${target}"] .rename`);
    await present(page, "#sessions .rename-input");
    await typeInto(page, "#sessions .rename-input", "Bees and retrieval", { clear: true });
    await press(page, "Enter");
    await until(page, (id) => document.querySelector(`#sessions .session[data-id="${id}"] .session-title`)?.textContent === "Bees and retrieval", target);
    assert.equal((await library.client.getSession(target)).session.title, "Bees and retrieval");

    await click(page, `#sessions .session[data-id="${target}"] .delete`);
    await click(page, `#sessions .session[data-id="${target}"] .delete`); // the second click confirms
    await until(page, (id) => !document.querySelector(`#sessions .session[data-id="${id}"]`), target);
    await assert.rejects(library.client.getSession(target), (err) => err.status === 404);
    // Switching opens another chat with its messages.
    await click(page, `#sessions .session[data-id="${listed[0]}"] .session-open`);
    await until(page, () => document.querySelector("#sessions-panel").hidden);
    assert.equal(await page.evaluate(() => sessionStorage.getItem("zocrates.session")), listed[0]);
  });

  test("Stop (button and Esc) ends a slow turn; no library found says what to do", async () => {
    const p = await newPage();
    await open(p, slow.url());
    await present(p, "#library-status:not([hidden])");
    const banner = await p.$eval("#library-status", (e) => e.textContent);
    assert.match(banner, /No Zotero library found/);
    assert.match(banner, /--zotero-data-dir/);
    // The first screen says there is nothing to search yet, and suggests nothing.
    await until(p, () => /No library to search yet/.test(document.querySelector("#library-summary")?.textContent || ""));
    assert.equal(await p.$("#welcome .suggestion"), null);
    for (const how of ["button", "escape"]) {
      await ask(p, `Tell me slowly, please (${how})`);
      await present(p, "#stop:not([hidden])");
      // The model answers one chunk a second: stop once the first is on screen.
      await until(p, () => document.querySelector(".msg.live .answer")?.textContent.trim().length > 0);
      // The search before the answer was shown while the turn ran: a line per research round.
      const lines = await texts(p, ".msg.live .progress-lines li");
      assert.ok(lines.some((l) => /^Round 1: searched/.test(l)), `a line per research round: ${JSON.stringify(lines)}`);
      if (how === "button") await click(p, "#stop");
      else await press(p, "Escape");
      await present(p, ".notice");
      await turnEnded(p);
      assert.match(await p.$eval(".notice", (e) => e.textContent), /Stopped/);
      const answer = (await texts(p, ".msg.assistant .answer")).at(-1) || "";
      assert.doesNotMatch(answer, /questions\./, "the answer was cut short");
    }
    // The session stays usable: both questions are in it.
    assert.equal((await texts(p, ".msg.user .bubble")).length, 2);
    assert.deepEqual(p.errors, []);
    await p.close();
  });

  test("preferences: storage figures, retention settings, Clean Up Now", async () => {
    const p = await newPage();
    await open(p, library.url("?view=prefs"));
    await until(p, () => !["…", ""].includes(document.querySelector("#pref-sessions").textContent)
      && document.querySelector("#pref-version").textContent !== "…" && document.querySelector("#retention-days").value !== "");
    const stats = await library.client.storageStats();
    assert.equal(await p.$eval("#pref-sessions", (e) => e.textContent), String(stats.session_count));
    assert.match(await p.$eval("#pref-db-size", (e) => e.textContent), /\d+(\.\d)? (KB|MB)/);
    assert.match(await p.$eval("#pref-free", (e) => e.textContent), /^\d+ of \d+ pages/);
    assert.equal(await p.$eval("#retention-days", (e) => e.value), "180");
    assert.match(await p.$eval("#pref-version", (e) => e.textContent), /^\d+\.\d+/);
    assert.equal(await p.$eval("#pref-model", (e) => e.textContent), "offline");
    // Each of Zotero's kinds apart (`counts`): sample_library's 6 live papers, the link-label paper
    // (PHISHNOT) and the 3 PDFs.
    assert.equal((await library.client.libraryStatus()).library.state, "ready");
    assert.equal(await p.$eval("#pref-library", (e) => e.textContent), "ready: 8 items, 0 notes, 0 annotations, 4 attachments indexed");
    assert.equal(await p.$("#messages"), null, "?view=prefs shows the preferences only");

    await typeInto(p, "#retention-days", "90", { clear: true });
    await click(p, "#save-settings");
    await until(p, () => /^Saved/.test(document.querySelector("#settings-status").textContent));
    assert.equal((await library.client.getSettings()).settings.session_retention_days, 90);

    await click(p, "#cleanup");
    await until(p, () => /^Deleted/.test(document.querySelector("#cleanup-report").textContent));
    assert.match(await p.$eval("#cleanup-report", (e) => e.textContent), /Deleted \d+ empty chats? and \d+ chats? beyond the limits\. .*Took \d+ ms\./);
    assert.ok(await fitsWidth(p), "nothing wider than the sidebar");
    await shot(p, "preferences.png");
    // The same preferences from the chat (⚙), and back.
    await open(p, library.url());
    await click(p, "#prefs-toggle");
    await until(p, () => /^\d+$/.test(document.querySelector("#pref-sessions")?.textContent || ""));
    assert.equal(await p.evaluate(() => document.querySelector("#chat").hidden), true);
    await click(p, "#prefs-back");
    await until(p, () => !document.querySelector("#chat").hidden && document.querySelector("#prefs").hidden);
    assert.deepEqual(p.errors, []);
    await p.close();
  });

  test("Copy bibliography puts the cited papers' references on the clipboard, formatted by the daemon; refused, it shows them", async () => {
    await askInNewChat(page, "What is retrieval-augmented generation?");
    const sid = await shownSession(page);
    const invocation = (await library.client.getSession(sid)).session.messages.at(-1).invocation_id;
    const { text, count } = await library.client.bibliography(sid, { invocationId: invocation });
    assert.ok(count >= 1 && text.length > 20, text);
    // The browser's clipboard, watched: what the page writes to it.
    await page.evaluate(() => {
      window.__copied = [];
      navigator.clipboard.writeText = async (t) => { window.__copied.push(t); };
    });
    await click(page, ".msg.assistant .copy-bib");
    await until(page, () => document.querySelector(".msg.assistant .copy-bib")?.textContent === "Copied");
    assert.deepEqual(await page.evaluate(() => window.__copied), [text]);
    // A page the clipboard refuses: the references are shown, selected, to copy by hand.
    await page.evaluate(() => { navigator.clipboard.writeText = async () => { throw new DOMException("denied", "NotAllowedError"); }; });
    await click(page, ".msg.assistant .copy-bib");
    await present(page, ".write-actions .bib-text");
    assert.equal(await page.$eval(".write-actions .bib-text", (e) => e.value), text);
    assert.equal(await page.evaluate(() => document.activeElement?.className), "bib-text");
    assert.deepEqual(page.errors, []);
  });

  test("writes into Zotero: a card shows the preview; yes waits for Zotero (not running here), then discard; cancel writes nothing; still there after a reload", async () => {
    await askInNewChat(page, "What is retrieval-augmented generation?");
    const sid = await shownSession(page);
    const cited = await page.$$eval(".msg.assistant .answer .source a", (as) => [...new Set(as.map((a) => a.getAttribute("href")))]);
    assert.ok(cited.length >= 1, "the answer cites papers");
    const keys = cited.map((u) => u.split("/").at(-1));

    // Save as note: the card shows what would be written, and nothing is written yet.
    await click(page, ".msg.assistant .save-note");
    await present(page, '.write-card[data-state="awaiting_consent"]');
    const note = (await library.client.listWrites({ pending: true, sessionId: sid })).writes[0];
    assert.equal(note.state, "awaiting_consent");
    assert.equal(note.session_id, sid);
    assert.equal(await page.$eval(".write-card .write-preview", (e) => e.textContent), note.preview);
    assert.match(note.preview, /^Save a note/);
    assert.deepEqual(note.operation.citations.map((c) => c.key).sort(), [...keys].sort());
    assert.equal(note.operation.parent, keys.length === 1 ? keys[0] : null);
    assert.deepEqual(await texts(page, ".write-card .card-actions button"), ["Write to Zotero", "Always for this kind", "Cancel"]);
    // Under its answer, and the narrowest sidebar (280 px) holds it.
    assert.equal(await page.$eval(".write-card", (c) => c.previousElementSibling?.className), "write-actions");
    await page.mainFrame().browsingContext.setViewport({ viewport: { ...SIDEBAR, width: 280 }, devicePixelRatio: 1 });
    assert.ok(await fitsWidth(page));
    await shot(page, "write-card.png");
    await page.mainFrame().browsingContext.setViewport({ viewport: SIDEBAR, devicePixelRatio: 1 });
    // The keyboard reaches it: the card's first button has the focus, Enter presses it.
    assert.equal(await page.evaluate(() => document.activeElement?.className), "primary write-confirm");
    await press(page, "Enter");
    await until(page, () => document.querySelector(".write-card")?.dataset.state === "queued");
    assert.match(await page.$eval(".write-card .write-outcome", (e) => e.textContent), /Not written yet: Zotero is not running/);
    assert.equal((await library.client.getWrite(note.id)).write.state, "queued");
    assert.equal(await page.$eval(".msg.assistant .save-note", (e) => e.textContent), "Save as note");

    // Tag cited papers: the tags are asked for inline; Cancel on the card writes nothing.
    await click(page, ".msg.assistant .tag-cited");
    await typeInto(page, ".write-ask .write-input", "review, to read");
    await press(page, "Enter");
    await until(page, () => document.querySelectorAll(".write-card").length === 2);
    const tag = (await library.client.listWrites({ pending: true, sessionId: sid })).writes[0];
    assert.equal(tag.kind, "tag_items");
    assert.deepEqual(tag.operation.tags, ["review", "to read"]);
    assert.deepEqual([...tag.operation.items].sort(), [...keys].sort());
    assert.equal(await page.$eval('.write-card[data-state="awaiting_consent"] .write-preview', (e) => e.textContent), tag.preview);
    assert.equal(await page.$(".write-ask"), null, "the question closes once its card is there");
    await click(page, '.write-card[data-state="awaiting_consent"] .write-cancel');
    await until(page, () => [...document.querySelectorAll(".write-card")].map((c) => c.dataset.state).join() === "queued,discarded");
    assert.match(await page.$eval('.write-card[data-state="discarded"] .write-outcome', (e) => e.textContent), /nothing was written/);
    assert.equal((await library.client.getWrite(tag.id)).write.state, "discarded");

    // A reload: the note waiting for Zotero is still shown, and can be dropped from there.
    await open(page, library.url());
    await until(page, (id) => document.querySelector(".write-card")?.dataset.writes === id, note.id);
    assert.equal(await page.$$eval(".write-card", (cs) => cs.length), 1);
    assert.match(await page.$eval(".write-card .write-outcome", (e) => e.textContent), /Zotero is not running/);
    await click(page, ".write-card .write-discard");
    await until(page, () => document.querySelector(".write-card")?.dataset.state === "discarded");
    assert.equal((await library.client.getWrite(note.id)).write.state, "discarded");
    assert.deepEqual((await library.client.listWrites({ pending: true })).writes, []);
    assert.deepEqual(page.errors, []);
  });

  test("writes into Zotero: a waiting one is written once Zotero is back, undone; a collection that does not exist is created on the same card", async () => {
    await askInNewChat(page, "What is dense passage retrieval?");
    await click(page, ".msg.assistant .tag-cited");
    await typeInto(page, ".write-ask .write-input", "cited");
    await click(page, ".write-ask .write-preview-button");
    await present(page, '.write-card[data-state="awaiting_consent"]');
    await click(page, ".write-card .write-confirm");
    await until(page, () => document.querySelector(".write-card")?.dataset.state === "queued");
    // Zotero (its plugin) comes back: the daemon hands it the write, and the card says so by itself.
    const plugin = pluginInZotero(library);
    try {
      await until(page, () => document.querySelector(".write-card")?.dataset.state === "applied");
      assert.equal(await page.$eval(".write-card .write-outcome", (e) => e.textContent), "Written to Zotero.");
      const [tagged] = (await library.client.listWrites({ limit: 1 })).writes;
      assert.equal(tagged.state, "applied");
      assert.equal(tagged.path, "plugin");
      await click(page, ".write-card .write-undo");
      await until(page, () => document.querySelector(".write-card")?.dataset.state === "undone");
      assert.equal(await page.$eval(".write-card .write-outcome", (e) => e.textContent), "Undone.");
      assert.equal((await library.client.getWrite(tagged.id)).write.state, "undone");
      assert.deepEqual(plugin.seen, [["plan", "tag_items"], ["apply", "tag_items"], ["plan", "retag"], ["apply", "retag"]]);

      // Add to collection, by a path no collection has: "Create it" proposes both on one card.
      await click(page, ".msg.assistant .add-to-collection");
      await typeInto(page, ".write-ask .write-input", "Thesis / Chapter 2");
      await press(page, "Enter");
      await until(page, () => /no collection “Thesis \/ Chapter 2”/.test(document.querySelector(".write-ask .write-problem")?.textContent || ""));
      // "Thesis" does not exist either: the daemon says so, and nothing is proposed.
      await click(page, ".write-ask .write-create");
      await until(page, () => /Thesis/.test(document.querySelector(".write-ask .write-problem")?.textContent || "") && !document.querySelector(".write-ask .write-create"));
      assert.deepEqual((await library.client.listWrites({ pending: true })).writes, []);
      await typeInto(page, ".write-ask .write-input", "Chapter 2", { clear: true });
      await press(page, "Enter");
      await present(page, ".write-ask .write-create");
      await click(page, ".write-ask .write-create");
      await until(page, () => document.querySelectorAll('.write-card[data-state="awaiting_consent"] .write-preview').length === 2);
      const previews = await texts(page, '.write-card[data-state="awaiting_consent"] .write-preview');
      assert.match(previews[0], /^Create the collection "Chapter 2"/);
      assert.match(previews[1], /to the collection "Chapter 2"/);
      await click(page, '.write-card[data-state="awaiting_consent"] .write-confirm');
      await until(page, () => document.querySelectorAll('.write-card[data-state="applied"] .write-one[data-state="applied"]').length === 2);
      assert.deepEqual(plugin.seen.slice(4), [["plan", "create_collection"], ["apply", "create_collection"], ["plan", "add_to_collection"], ["apply", "add_to_collection"]]);
      await click(page, '.write-card[data-state="applied"] .write-undo');
      await until(page, () => [...document.querySelectorAll(".write-card")].at(-1).dataset.state === "undone");
      // The papers leave the collection first, then the collection goes to Zotero's trash.
      assert.deepEqual(plugin.seen.slice(8).map(([call, type]) => `${call} ${type}`), ["plan remove_from_collection", "apply remove_from_collection", "plan trash", "apply trash"]);
      assert.deepEqual(page.errors, []);
    } finally {
      await plugin.stop();
    }
  });

  test("writes into Zotero: pending ones are shown when the chat opens, their previews are text, never markup; always for this kind", async () => {
    await open(page, library.url());
    await click(page, "#new-chat");
    await present(page, "#welcome");
    const sid = await shownSession(page);
    // Proposed by another client of the same chat (a model's turn, an editor): one waits for the
    // person's yes, one (said yes to) for Zotero.
    const hostile = '<img src=x onerror="window.__pwned=1"> Attention';
    const { write: item } = await library.client.proposeWrite("add_item", { itemType: "journalArticle", title: hostile, sessionId: sid });
    const { write: tagging } = await library.client.proposeWrite("tag", { itemKeys: ["LEWIS202"], tags: ["later"], sessionId: sid, confirm: true });
    assert.equal(tagging.state, "queued");
    await open(page, library.url());
    await until(page, () => document.querySelectorAll(".writes-loose .write-card").length === 2);
    // Oldest first, as they were proposed.
    assert.deepEqual(await attrs(page, ".write-card", "data-writes"), [item.id, tagging.id]);
    assert.deepEqual(await attrs(page, ".write-card", "data-state"), ["awaiting_consent", "queued"]);
    const shown = await page.$eval(`.write-card[data-writes="${item.id}"] .write-preview`, (e) => e.textContent);
    assert.equal(shown, item.preview);
    assert.ok(shown.includes(hostile));
    assert.equal(await page.$$eval(".write-card img", (imgs) => imgs.length), 0);
    assert.equal(await page.evaluate(() => window.__pwned), undefined);
    await shot(page, "write-cards-pending.png");
    // "Always for this kind", from the keyboard: this one is consented to, and so is the next new item.
    await page.focus(`.write-card[data-writes="${item.id}"] .write-always`);
    await press(page, "Enter");
    await until(page, (id) => document.querySelector(`.write-card[data-writes="${id}"]`).dataset.state === "queued", item.id);
    assert.equal(await page.$eval(`.write-card[data-writes="${item.id}"] .write-preview`, (e) => e.textContent), item.preview);
    const { write: next } = await library.client.proposeWrite("add_item", { itemType: "book", title: "Another book", sessionId: sid });
    assert.equal(next.state, "queued");
    for (const w of [item, tagging]) {
      await click(page, `.write-card[data-writes="${w.id}"] .write-discard`);
      await until(page, (id) => document.querySelector(`.write-card[data-writes="${id}"]`).dataset.state === "discarded", w.id);
    }
    await library.client.discardWrite(next.id);
    assert.deepEqual((await library.client.listWrites({ pending: true })).writes, []);
    // Another chat shows none of them.
    await click(page, "#sessions-toggle");
    await click(page, "#sessions .session:not(.current) .session-open");
    await until(page, (id) => sessionStorage.getItem("zocrates.session") !== id && !document.querySelector(".write-card"), sid);
    assert.deepEqual(page.errors, []);
  });

  test("a page on a foreign origin cannot read anything, even with the token", async () => {
    const before = (await library.client.listSessions()).sessions.length;
    const p = await newPage();
    // localhost:<port> is another origin than the allowed 127.0.0.1:<port> host page.
    await p.goto(`http://localhost:${helperPort}/foreign.html?api=${encodeURIComponent(library.base)}&token=${library.token}`);
    const results = await until(p, () => window.__results);
    assert.equal(results.sessions.fetched, false, JSON.stringify(results.sessions));
    assert.equal(results.settings.fetched, false, JSON.stringify(results.settings));
    assert.equal(results.page.fetched, false, JSON.stringify(results.page));
    assert.equal(results.health.fetched, false, JSON.stringify(results.health));
    // Not even whether the daemon is there: a no-cors probe fails as if nothing listened, refusals
    // included (Cross-Origin-Resource-Policy: same-origin on every answer).
    for (const probe of ["probe-health", "probe-refused", "probe-missing", "probe-page"]) {
      assert.equal(results[probe].fetched, false, `${probe}: ${JSON.stringify(results[probe])}`);
    }
    // A "simple" no-cors POST goes out, but the daemon refused it, and the page does not even get
    // an opaque answer.
    assert.equal(results.create.fetched, false, JSON.stringify(results.create));
    assert.equal((await library.client.listSessions()).sessions.length, before);
    assert.notEqual((await library.client.getSettings()).settings.max_saved_sessions, 1);
    await p.close();
  });
});
