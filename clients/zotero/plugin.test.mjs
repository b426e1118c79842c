// node --test clients/: the Zotero plugin (clients/zotero/plugin/).
// 1. tsc --checkJs checks the plugin against zotero-types;
// 2. the XPI builds and is a valid zip with the right manifest;
// 3. the bridge host (plugin/bridge.js, the file Zotero loads) in a real Gecko browser (firefox-esr,
//    puppeteer-core over WebDriver BiDi): a host page plays Zotero's window (a recording stand-in
//    for Zotero's objects only) and frames the real web app from a real `zocratesd serve`.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, mkdir, readFile, rm, writeFile } from "node:fs/promises";
import { createServer, request as httpRequest } from "node:http";
import net from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import zlib from "node:zlib";

import { buildXpi, crc32 } from "./plugin/build.mjs";
import { FIREFOX, Marionette, PLUGIN_SANDBOX, REPO, STEP_TIMEOUT_MS, Zocratesd, daemonEnv, launchFirefox, python, requireFirefox, stopProcess, waitForDaemon } from "./testkit.mjs";

const PLUGIN = join(REPO, "clients", "zotero", "plugin");
const TSC = join(REPO, "node_modules", ".bin", "tsc");

describe("type checking", () => {
  test("tsc --checkJs passes against zotero-types", () => {
    assert.ok(existsSync(TSC), `${TSC} is missing: run npm ci (typescript and zotero-types are devDependencies)`);
    assert.ok(existsSync(join(REPO, "node_modules", "zotero-types", "package.json")), "zotero-types is missing: run npm ci");
    const run = spawnSync(TSC, ["-p", PLUGIN], { cwd: REPO, encoding: "utf8" });
    assert.equal(run.error, undefined, String(run.error));
    assert.equal(run.status, 0, `tsc failed:\n${run.stdout}${run.stderr}`);
  });
});

/** The entries of a zip, read from its central directory (independently of build.mjs's writer). */
function readZip(buf) {
  const eocd = buf.lastIndexOf(Buffer.from([0x50, 0x4b, 0x05, 0x06]));
  assert.ok(eocd >= 0, "no end of central directory record");
  const count = buf.readUInt16LE(eocd + 10);
  const cdSize = buf.readUInt32LE(eocd + 12);
  let p = buf.readUInt32LE(eocd + 16);
  assert.equal(p + cdSize, eocd, "central directory does not end where the end record starts");
  const entries = new Map();
  for (let i = 0; i < count; i++) {
    assert.equal(buf.readUInt32LE(p), 0x02014b50, "bad central directory header");
    const method = buf.readUInt16LE(p + 10);
    const crc = buf.readUInt32LE(p + 16);
    const csize = buf.readUInt32LE(p + 20);
    const usize = buf.readUInt32LE(p + 24);
    const nlen = buf.readUInt16LE(p + 28);
    const xlen = buf.readUInt16LE(p + 30);
    const clen = buf.readUInt16LE(p + 32);
    const local = buf.readUInt32LE(p + 42);
    const name = buf.toString("utf8", p + 46, p + 46 + nlen);
    assert.equal(buf.readUInt32LE(local), 0x04034b50, `bad local header for ${name}`);
    assert.equal(buf.toString("utf8", local + 30, local + 30 + buf.readUInt16LE(local + 26)), name);
    const start = local + 30 + buf.readUInt16LE(local + 26) + buf.readUInt16LE(local + 28);
    const raw = buf.subarray(start, start + csize);
    assert.ok(method === 0 || method === 8, `${name}: method ${method}`);
    const data = method === 8 ? zlib.inflateRawSync(raw) : raw;
    assert.equal(data.length, usize, `${name}: size`);
    // node's own CRC-32 when it has one (20.15+), else ours: a wrong checksum makes Zotero refuse the XPI.
    assert.equal(crc, (zlib.crc32 ?? crc32)(data), `${name}: crc32`);
    entries.set(name, data);
    p += 46 + nlen + xlen + clen;
  }
  return entries;
}

describe("the XPI", () => {
  test("builds into a valid zip with the plugin's files and manifest", async () => {
    const dir = await mkdtemp(join(tmpdir(), "zqxpi"));
    try {
      const out = join(dir, "zocrates.xpi");
      const built = await buildXpi({ out });
      const entries = readZip(await readFile(out));
      assert.deepEqual([...entries.keys()], built.entries);
      for (const name of ["manifest.json", "bootstrap.js", "prefs.js", "bridge.js", "writes.js", "zocrates.js", "preferences.xhtml",
        "preferences.js", "style.css", "locale/en-US/zocrates.ftl", "icons/zocrates.svg"]) {
        assert.ok(entries.has(name), `${name} missing from the XPI`);
        assert.deepEqual(entries.get(name), await readFile(join(PLUGIN, name)), `${name} differs from its source`);
      }
      for (const name of ["build.mjs", "tsconfig.json", "globals.d.ts", "xpi-contents.json"]) assert.ok(!entries.has(name), `${name} must not ship`);
      const manifest = JSON.parse(entries.get("manifest.json").toString("utf8"));
      assert.equal(manifest.manifest_version, 2);
      const zotero = manifest.applications.zotero;
      assert.match(zotero.id, /^[a-z0-9.-]+@[a-z0-9.-]+$/);
      assert.equal(zotero.strict_min_version, "6.999");
      assert.match(zotero.update_url, /^https:\/\//);
      assert.ok(zotero.strict_max_version, "strict_max_version");
      const bootstrap = entries.get("bootstrap.js").toString("utf8");
      for (const hook of ["startup", "shutdown", "install", "uninstall", "onMainWindowLoad", "onMainWindowUnload"]) {
        assert.match(bootstrap, new RegExp(`function ${hook}\\(`), `bootstrap.js has no ${hook}()`);
      }
      // The same sources give the same bytes.
      await buildXpi({ out: join(dir, "again.xpi") });
      assert.deepEqual(await readFile(join(dir, "again.xpi")), await readFile(out));
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

// Chrome code: whether the bridge's window actor is still registered (registering the name again
// throws while it is).
const ACTOR_REGISTERED = `(() => {
  try {
    ChromeUtils.registerWindowActor("ZocratesBridge", { child: { esModuleURI: "resource://gre/modules/nothing.sys.mjs" } });
    ChromeUtils.unregisterWindowActor("ZocratesBridge");
    return false;
  } catch (e) {
    return true;
  }
})()`;

// ---- the bridge host in a real browser ----------------------------------------------------------

const LEWIS = { key: "LEWIS202", title: "Retrieval-Augmented Generation for Knowledge-Intensive NLP Tasks" };
const VASWANI = { key: "VASWANI1", title: "Attention Is All You Need" };
const PASSAGES = [
  { item_key: LEWIS.key, title: LEWIS.title, year: 2020, page: 1,
    text: "RAG models combine parametric and non-parametric memory. The retriever finds passages in a dense index of Wikipedia." },
];

// The page that plays Zotero's main window. Only Zotero's objects are stood in for (they record
// what the plugin asks of them); the bridge host is the plugin's real bridge.js.
const HOST_PAGE = `<!doctype html>
<html><head><meta charset="utf-8"><title>Zotero stand-in</title><link rel="stylesheet" href="/plugin/style.css"></head>
<body style="margin:0">
<div id="pane" style="display:flex;flex-direction:column;width:460px;height:760px"></div>
<script>
"use strict";
const calls = [];
window.calls = calls;
const items = new Map();
function makeItem(id, key, title, type, parentID) {
  const item = {
    id, key, libraryID: 1, itemType: type, parentID,
    get parentItem() { return parentID ? items.get(parentID) : false; },
    isRegularItem: () => type !== "attachment" && type !== "note",
    isNote: () => type === "note",
    isFileAttachment: () => type === "attachment",
    getDisplayTitle: () => title,
    getBestAttachment: async () => [...items.values()].find((i) => i.parentID === id && i.itemType === "attachment") || false,
  };
  items.set(id, item);
  return item;
}
makeItem(11, "${LEWIS.key}", "${LEWIS.title}", "journalArticle");
makeItem(12, "LEWISPDF", "Full Text PDF", "attachment", 11);
makeItem(21, "${VASWANI.key}", "${VASWANI.title}", "conferencePaper");
const collection = { id: 7, key: "COLLKEY1", name: "Retrieval", libraryID: 1 };
function binding() {
  const listeners = new Set();
  return { listeners, addListener: (f) => listeners.add(f), removeListener: (f) => listeners.delete(f) };
}
const observers = new Map();
let noteSeq = 0;
class Item {
  constructor(type) { this.itemType = type; this.libraryID = null; this.parentID = null; this.collections = []; this.note = ""; }
  setNote(html) { this.note = html; }
  addToCollection(id) { this.collections.push(id); }
  async saveTx() {
    this.key = "NOTE000" + (++noteSeq);
    calls.push({ call: "Item.saveTx", itemType: this.itemType, libraryID: this.libraryID, parentID: this.parentID,
      collections: this.collections, note: this.note, key: this.key });
    return 100 + noteSeq;
  }
}
const ZoteroPane = {
  selected: [11],
  collection: collection,
  itemsView: { onSelect: binding() },
  collectionsView: { onSelect: binding() },
  getSelectedItems() { return this.selected.map((id) => items.get(id)); },
  getSelectedCollection() { return this.collection || undefined; },
  getSelectedLibraryID() { return 1; },
  async selectItem(id) { calls.push({ call: "ZoteroPane.selectItem", id }); return true; },
};
const Zotero_Tabs = { selectedType: "library", selectedID: "zotero-pane" };
window.Zotero = {
  version: "7.0.99-stand-in",
  DataDirectory: { dir: new URLSearchParams(location.search).get("datadir") },
  Libraries: { userLibraryID: 1, get: (id) => (id === 1 ? { libraryID: 1, editable: true } : false) },
  Groups: { getLibraryIDFromGroupID: () => false, getGroupIDFromLibraryID: () => false },
  Items: {
    get: (id) => items.get(id) || false,
    getByLibraryAndKeyAsync: async (libraryID, key) => [...items.values()].find((i) => i.libraryID === libraryID && i.key === key) || false,
  },
  Item,
  Reader: {
    async open(id, location) { calls.push({ call: "Reader.open", id, location: location ?? null }); },
    getByTabID: () => undefined,
  },
  Notifier: {
    registerObserver(ref, types, name) { const id = name + ":" + observers.size; observers.set(id, { ref, types }); return id; },
    unregisterObserver(id) { observers.delete(id); },
  },
  getMainWindow: () => ({ ZoteroPane, Zotero_Tabs }),
  launchURL(url) { calls.push({ call: "Zotero.launchURL", url }); },
  debug() {},
  logError(err) { calls.push({ call: "Zotero.logError", message: String(err && err.message || err) }); },
};
// Gecko's chrome-only file globals, reading the real files through the test server.
async function readFile(path) {
  const r = await fetch("/fs?path=" + encodeURIComponent(path));
  if (!r.ok) throw new DOMException("Could not open " + path, "NotFoundError");
  return r;
}
window.IOUtils = {
  async readUTF8(path) {
    return (await readFile(path)).text();
  },
  async read(path, { maxBytes } = {}) {
    const bytes = new Uint8Array(await (await readFile(path)).arrayBuffer());
    return maxBytes === undefined ? bytes : bytes.slice(0, maxBytes);
  },
};
window.PathUtils = { join: (...parts) => parts.join("/") };
// Zotero's window is chrome, whose fetch CORS does not limit (it reads the daemon's /health proof).
// The stand-in's fetch of another origin goes through the test server, which forwards the request as
// the page made it (method, headers, body) and hands back the answer as it came.
const pageFetch = window.fetch.bind(window);
window.fetch = (input, init) => {
  const url = new URL(typeof input === "string" ? input : input.url, location.href);
  return url.origin === location.origin ? pageFetch(input, init) : pageFetch("/relay?url=" + encodeURIComponent(url.href), init);
};
// What Zotero does when the selection changes: run the item tree's select listeners.
window.changeSelection = (ids, coll) => {
  ZoteroPane.selected = ids;
  ZoteroPane.collection = coll === undefined ? ZoteroPane.collection : coll;
  for (const f of ZoteroPane.itemsView.onSelect.listeners) f();
};
window.selectListenerCount = () => ZoteroPane.itemsView.onSelect.listeners.size + ZoteroPane.collectionsView.onSelect.listeners.size + observers.size;
</script>
<script src="/plugin/bridge.js"></script>
<script>
window.host = new ZocratesBridge.BridgeHost({ window, container: document.getElementById("pane"), view: "chat" });
window.host.start();
</script>
</body></html>`;

// Runs in Firefox's browser window (chrome), as bootstrap.js runs in Zotero: a system-principal
// sandbox with the globals Zotero gives a plugin (plugins.js), a recording stand-in for Zotero's
// objects, the XPI's bridge.js, its actors registered, and a host in the window.
const CHROME_SETUP = `
const [rootURI, dataDir, key, title] = arguments;
const calls = [];
const paper = { id: 11, key, libraryID: 1, parentItem: false, isRegularItem: () => true, isNote: () => false,
  isFileAttachment: () => false, getDisplayTitle: () => title, getBestAttachment: async () => pdf };
const pdf = { id: 12, key: "LEWISPDF", libraryID: 1, parentItem: paper, isRegularItem: () => false, isNote: () => false,
  isFileAttachment: () => true, getDisplayTitle: () => "PDF" };
const items = [paper, pdf];
const ZoteroPane = {
  itemsView: { onSelect: { addListener() {}, removeListener() {} } },
  collectionsView: { onSelect: { addListener() {}, removeListener() {} } },
  getSelectedItems: () => [paper], getSelectedCollection: () => undefined, getSelectedLibraryID: () => 1,
  selectItem: async (id) => { calls.push({ call: "ZoteroPane.selectItem", id }); },
};
const Zotero = {
  version: "7.0.99-chrome-stand-in",
  DataDirectory: { dir: dataDir },
  Libraries: { userLibraryID: 1, get: () => ({ editable: true }) },
  Groups: { getLibraryIDFromGroupID: () => false, getGroupIDFromLibraryID: () => false },
  Items: { get: (id) => items.find((i) => i.id === id) || false,
    getByLibraryAndKeyAsync: async (l, k) => items.find((i) => i.libraryID === l && i.key === k) || false },
  Reader: { open: async (id, location) => { calls.push({ call: "Reader.open", id, location }); }, getByTabID: () => undefined },
  Notifier: { registerObserver: () => "observer", unregisterObserver() {} },
  getMainWindow: () => ({ ZoteroPane, Zotero_Tabs: { selectedType: "library", selectedID: "zotero-pane" } }),
  launchURL: (url) => calls.push({ call: "Zotero.launchURL", url }),
  debug() {},
  logError: (e) => calls.push({ call: "Zotero.logError", message: String(e) }),
};
${PLUGIN_SANDBOX}
const sandbox = pluginSandbox("zocrates-test", Zotero);
Services.scriptloader.loadSubScript(rootURI + "bridge.js", sandbox);
sandbox.ZocratesBridge.registerActors(rootURI);
const box = document.createXULElement("vbox");
box.setAttribute("style", "width: 460px; height: 760px;");
const container = document.createElementNS("http://www.w3.org/1999/xhtml", "div");
container.setAttribute("style", "display: flex; flex-direction: column; height: 760px;");
box.append(container);
document.getElementById("browser").append(box);
const host = new sandbox.ZocratesBridge.BridgeHost({ window, container, view: "chat" });
// A test probe into the remote page (a frame script): evaluates an expression in the content process.
let probeSeq = 0;
const probe = (expression) => new Promise((resolve) => {
  const mm = container.firstChild.messageManager;
  const name = "zocrates-test-probe-" + (++probeSeq);
  const listener = (m) => { mm.removeMessageListener(name, listener); resolve(m.data); };
  mm.addMessageListener(name, listener);
  mm.loadFrameScript("data:application/javascript," + encodeURIComponent(
    "try { sendAsyncMessage(" + JSON.stringify(name) + ", " + expression + "); } catch (e) { sendAsyncMessage(" + JSON.stringify(name) + ", 'error: ' + e); }"), false);
});
window.__zq = { host, calls, container, box, sandbox, probe };
return host.start().then(() => [host.state, container.firstChild.localName, container.firstChild.isRemoteBrowser]);
`;

// Another local user's server on a port a killed daemon left (daemon.json still names it): it
// answers /health and /ui/ as the daemon would, without the token (daemon.json is 0600), and
// records every request, one JSON line each, on stdout. Run as uid 65534 when we are root.
const IMPOSTOR = `
import http.server, json, sys
PAGE = b"""<!doctype html><title>Zocrates</title><script>
fetch("/collect", {method: "POST", body: location.hash});
parent.postMessage({zocrates: "bridge/1", dir: "page-host", type: "save-note", id: "planted", parent: null, html: "<p>planted by the impostor</p>"}, "*");
</script>"""
class Handler(http.server.BaseHTTPRequestHandler):
    def answer(self):
        size = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(size).decode("latin-1") if size else ""
        print(json.dumps({"method": self.command, "path": self.path, "headers": dict(self.headers), "body": body}), flush=True)
        if self.path.startswith("/health"):
            status, kind, out = 200, "application/json", json.dumps({"status": "success", "proof": "ab" * 32}).encode()
        elif self.path.startswith("/ui"):
            status, kind, out = 200, "text/html", PAGE
        else:
            status, kind, out = 401, "application/json", b'{"status": "error"}'
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(out)))
        self.send_header("Access-Control-Allow-Origin", "*")
        self.end_headers()
        self.wfile.write(out)
    do_GET = do_POST = answer
    def log_message(self, *args):
        pass
server = http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
print("ready", server.server_address[1], flush=True)
server.serve_forever()
`;

/** The impostor on 127.0.0.1:`port` (0: a free one), listening: `{proc, port, requests, uid}` (requests fill in as they come). */
async function startImpostor(port) {
  const asOther = process.getuid?.() === 0;
  // The system's Python: uid 65534 may not reach a venv or pyenv under the caller's home.
  const py = existsSync("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
  const [cmd, args] = asOther
    ? ["setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups", py, "-c", IMPOSTOR, String(port)]]
    : [py, ["-c", IMPOSTOR, String(port)]];
  const proc = spawn(cmd, args, { cwd: "/", stdio: ["ignore", "pipe", "inherit"] });
  const requests = [];
  let buffered = "";
  const ready = /** @type {Promise<number>} */ (new Promise((resolve, reject) => {
    proc.once("exit", (code) => reject(new Error(`the impostor exited (${code}) before listening on ${port}`)));
    proc.stdout.setEncoding("utf8");
    proc.stdout.on("data", (chunk) => {
      buffered += chunk;
      let nl;
      while ((nl = buffered.indexOf("\n")) >= 0) {
        const line = buffered.slice(0, nl);
        buffered = buffered.slice(nl + 1);
        if (line.startsWith("ready ")) resolve(Number(line.slice(6)));
        else requests.push(JSON.parse(line));
      }
    });
  }));
  return { proc, port: await ready, requests, uid: asOther ? 65534 : process.getuid?.() };
}

/** Forward the stand-in page's request `req` to `target` (a loopback URL) as it is, and its answer back. */
function relay(req, res, target) {
  if (target.protocol !== "http:" || target.hostname !== "127.0.0.1") throw new Error("not a loopback URL");
  const headers = { ...req.headers, host: target.host };
  delete headers.connection;
  return new Promise((resolve) => {
    const out = httpRequest(target, { method: req.method, headers }, (answer) => {
      res.writeHead(answer.statusCode, answer.headers);
      answer.pipe(res).on("finish", resolve);
    });
    out.on("error", () => {
      res.destroy(); // as nothing listening looks to a fetch: a network error
      resolve();
    });
    req.pipe(out);
  });
}

/** `zocratesd plugin --out <out>`: the XPI as the package writes it for a user (zocratesd/install/plugin.py). */
function writeXpiAsUsersDo(out, env) {
  const run = spawnSync(python(), ["-m", "zocratesd", "plugin", "--out", out], { cwd: REPO, encoding: "utf8", env });
  assert.equal(run.status, 0, `zocratesd plugin failed: ${run.stdout}${run.stderr}`);
  assert.ok(run.stdout.startsWith("wrote the Zocrates plugin ") && run.stdout.includes(` to ${out}\n`), run.stdout);
}

// A zocratesd of another release than the plugin's: this checkout's daemon with its version set
// before anything reads it, so daemon.json, /health and /doctor all say `version`.
const SERVE_AS_VERSION = "import runpy, sys, zocratesd; zocratesd.__version__ = sys.argv.pop(1); runpy.run_module('zocratesd', run_name='__main__', alter_sys=True)";

/** That daemon on `dir` (its process and daemon.json), ready. */
async function serveAsVersion(dir, version, env) {
  await mkdir(join(dir, "zocrates-data"), { recursive: true });
  const proc = spawn(python(), ["-c", SERVE_AS_VERSION, version, "serve", "--zotero-data-dir", dir, "--http-port", "0"],
    { cwd: REPO, env, stdio: ["ignore", "ignore", "inherit"] });
  try {
    const info = await waitForDaemon(proc, join(dir, "zocrates-data", "daemon.json"));
    assert.equal(info.version, version);
    return { proc, info };
  } catch (err) {
    await stopProcess(proc);
    throw err;
  }
}

/** GET /doctor from the daemon daemon.json `info` names, as the pane asks it: the report. */
async function doctorOf(info) {
  const response = await fetch(`http://127.0.0.1:${info.http.port}/doctor`, { headers: { Authorization: `Bearer ${info.token}` } });
  assert.equal(response.status, 200);
  return (await response.json()).report;
}

// Runs in the chrome window as Zotero.Plugins starts a plugin: the installed XPI's bootstrap.js in a
// plugin sandbox, `startup({id, version, rootURI})` with the manifest's version, then
// `onMainWindowLoad` for the window. The Zotero stand-in is the chrome setup's, with what startup
// waits for and registers with (initializationPromise, Prefs, PreferencePanes), on data dir `dir`.
const BOOTSTRAP = `
const [rootURI, id, version, dir] = arguments;
const zq = window.__zq;
const prefs = new Map([["extensions.zocrates.paneOpen", true], ["extensions.zocrates.paneWidth", 400]]);
const panes = [];
const Zotero = Object.assign({}, zq.sandbox.Zotero, {
  DataDirectory: { dir },
  initializationPromise: Promise.resolve(),
  uiReadyPromise: Promise.resolve(),
  Prefs: { get: (k) => prefs.get(k), set: (k, v) => prefs.set(k, v) },
  PreferencePanes: { register: async (options) => { panes.push(options); return "zocrates-prefpane"; } },
  getMainWindows: () => [],
});
${PLUGIN_SANDBOX}
const scope = pluginSandbox("zocrates-bootstrap", Zotero);
Services.scriptloader.loadSubScript(rootURI + "bootstrap.js", scope);
zq.boot = { Zotero, scope, panes };
return scope.startup({ id, version, rootURI }).then(() => {
  scope.onMainWindowLoad({ window });
  return panes.map((p) => [p.pluginID, p.src, p.scripts]);
});
`;

// Zotero 9's preferences window loading the pane bootstrap.js registered (preferences.js,
// _loadPane): its scripts, as registered, in a sandbox whose prototype is the window and whose
// Zotero is the plugin's, its markup inserted after them, a load event on each top-level element.
const OPEN_PREFERENCES = `
const [markup] = arguments;
const boot = window.__zq.boot;
const scope = Cu.Sandbox(window, { sandboxPrototype: window, sandboxName: "zocrates-prefs", sameZoneAs: window });
scope.Zotero = boot.Zotero;
for (const src of boot.panes[0].scripts) Services.scriptloader.loadSubScript(src, scope);
const container = document.createElementNS("http://www.w3.org/1999/xhtml", "div");
container.setAttribute("style", "display: flex; flex-direction: column; width: 600px;");
document.getElementById("browser").append(container);
container.append(document.importNode(MozXULElement.parseXULToFragment(markup, []), true));
for (const child of container.children) child.dispatchEvent(new Event("load"));
boot.prefs = { scope, container };
return true;
`;

// What the open preferences pane shows once its doctor report is in: [head, [class, text] per line,
// the version notice's text or null, the notice's code], or null before.
const PREFERENCES_SHOWN = `
const { container } = window.__zq.boot.prefs;
const lines = Array.from(container.querySelectorAll("#zocrates-doctor li"), (li) => [li.getAttribute("class"), li.textContent]);
const framed = container.querySelector("#zocrates-prefs-host browser.zocrates-frame");
if (!lines.length || !framed) return null;
const notice = container.querySelector("#zocrates-prefs-host .zocrates-version-notice");
return [container.querySelector("#zocrates-doctor .zocrates-doctor-head").textContent, lines,
  notice ? notice.textContent : null, notice ? notice.querySelector("code").textContent : null];
`;

const CLOSE_PREFERENCES = `
const boot = window.__zq.boot;
boot.prefs.scope.ZocratesPrefsPane.destroy();
boot.prefs.container.remove();
boot.prefs = null;
return true;
`;

describe("the bridge host in Gecko, with the real web app", () => {
  // daemon: `zocratesd serve` on the fixture data dir (a fresh port and token at each start).
  let root, dataDir, emptyDir, daemon, server, hostOrigin, browser, page, chromeFirefox, marionette;

  before(async () => {
    requireFirefox();
    root = await mkdtemp(join(tmpdir(), "zqplug"));
    dataDir = join(root, "zotero");
    emptyDir = join(root, "no-daemon-here");
    const state = join(dataDir, "zocrates-data");
    await mkdir(state, { recursive: true });
    await mkdir(emptyDir);
    await mkdir(join(root, "run"), { mode: 0o700 });

    // The host page's server: the stand-in page, the plugin's real files, and file reads for IOUtils.
    server = createServer(async (req, res) => {
      const url = new URL(req.url, "http://127.0.0.1");
      try {
        if (url.pathname === "/host.html") {
          res.writeHead(200, { "Content-Type": "text/html; charset=utf-8" }).end(HOST_PAGE);
        } else if (url.pathname === "/plugin/bridge.js") {
          const body = await readFile(join(PLUGIN, "bridge.js"));
          res.writeHead(200, { "Content-Type": "text/javascript; charset=utf-8" }).end(body);
        } else if (url.pathname === "/plugin/style.css") {
          // As Zotero loads it for the pane: the frame fills the pane (an unstyled iframe is 150 px high).
          const body = await readFile(join(PLUGIN, "style.css"));
          res.writeHead(200, { "Content-Type": "text/css; charset=utf-8" }).end(body);
        } else if (url.pathname === "/relay") {
          await relay(req, res, new URL(url.searchParams.get("url") || ""));
        } else if (url.pathname === "/fs") {
          const path = resolve(url.searchParams.get("path") || "");
          // The test's files, and the process status files the bridge reads (is daemon.json's pid running?).
          if (!path.startsWith(root + "/") && !/^\/proc\/(self|\d+)\/status$/.test(path)) throw new Error("outside the test's directory");
          const body = await readFile(path);
          res.writeHead(200, { "Content-Type": "text/plain; charset=utf-8" }).end(body);
        } else {
          res.writeHead(404).end();
        }
      } catch {
        res.writeHead(404).end();
      }
    });
    await new Promise((r) => server.listen(0, "127.0.0.1", r));
    hostOrigin = `http://127.0.0.1:${server.address().port}`;

    // The daemon lets the stand-in's origin frame its page (Zotero's window needs no such entry).
    await writeFile(join(state, "library_passages.jsonl"), PASSAGES.map((p) => JSON.stringify(p)).join("\n") + "\n");
    await writeFile(join(state, "zocrates_config.json"), JSON.stringify({ http: { allowed_origins: [hostOrigin] } }));
    daemon = new Zocratesd({ dataDir, env: daemonEnv(root), stderr: "inherit" });
    await daemon.start();

    browser = await launchFirefox();
    page = await browser.newPage();
  });

  after(async () => {
    marionette?.close();
    await stopProcess(chromeFirefox);
    await browser?.close();
    await daemon?.stop();
    await new Promise((r) => (server ? server.close(r) : r()));
    if (root) await rm(root, { recursive: true, force: true });
  });

  /** The framed web app (a frame of the daemon's origin). */
  async function appFrame() {
    const deadline = Date.now() + STEP_TIMEOUT_MS;
    for (;;) {
      const frame = page.frames().find((f) => f !== page.mainFrame() && f.url().includes("/ui/"));
      if (frame) return frame;
      if (Date.now() > deadline) {
        const said = await page.evaluate(() => document.querySelector(".zocrates-no-daemon")?.textContent ?? null).catch(() => null);
        assert.fail(`the web app frame did not appear; the pane says ${JSON.stringify(said)}`);
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  /** Wait until the stand-in recorded a call matching `pred`; returns it. */
  async function recorded(pred, what) {
    const deadline = Date.now() + STEP_TIMEOUT_MS;
    for (;;) {
      const calls = await page.evaluate(() => window.calls);
      const hit = calls.find(pred);
      if (hit) return hit;
      assert.ok(Date.now() < deadline, `no ${what}; recorded: ${JSON.stringify(calls)}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  /** A real (trusted) mouse click on `selector` inside the framed page, at its centre. */
  async function clickIn(frame, selector) {
    const inner = await frame.$eval(selector, (el) => {
      el.scrollIntoView({ block: "center" });
      const r = el.getBoundingClientRect();
      return { x: r.x + r.width / 2, y: r.y + r.height / 2 };
    });
    const outer = await page.$eval("iframe.zocrates-frame", (el) => {
      const r = el.getBoundingClientRect();
      return { x: r.x, y: r.y };
    });
    await page.mouse.click(outer.x + inner.x, outer.y + inner.y);
  }

  async function chipLabels(frame) {
    return frame.$$eval("#chips .chip .chip-label", (els) => els.map((e) => e.textContent));
  }

  async function waitForChips(frame, expected) {
    const deadline = Date.now() + STEP_TIMEOUT_MS;
    for (;;) {
      const labels = await chipLabels(frame).catch(() => []);
      if (JSON.stringify(labels) === JSON.stringify(expected)) return;
      assert.ok(Date.now() < deadline, `chips ${JSON.stringify(labels)}, expected ${JSON.stringify(expected)}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  test("the selection reaches the page as chips, and follows Zotero's selection", async () => {
    await page.goto(`${hostOrigin}/host.html?datadir=${encodeURIComponent(dataDir)}`);
    const frame = await appFrame();
    // hello answered: the page knows it is in Zotero and shows the selected paper as its chip.
    await frame.waitForSelector("html[data-host='zotero']", { timeout: STEP_TIMEOUT_MS });
    await waitForChips(frame, [LEWIS.title]);
    await page.evaluate(() => window.changeSelection([11, 21]));
    await waitForChips(frame, [LEWIS.title, "Attention Is All You Need"]);
    // Nothing selected: the collection is the context.
    await page.evaluate(() => window.changeSelection([]));
    await waitForChips(frame, ["Retrieval"]);
    await page.evaluate(() => window.changeSelection([11]));
    await waitForChips(frame, [LEWIS.title]);
  });

  test("a citation link opens the item; a page link opens the PDF at that page", async () => {
    const frame = await appFrame();
    await frame.waitForSelector("#prompt", { timeout: STEP_TIMEOUT_MS });
    await clickIn(frame, "#prompt");
    await page.keyboard.type("What is retrieval-augmented generation?");
    await page.keyboard.press("Enter");
    const citation = `.msg.assistant .answer a[href="zotero://select/library/items/${LEWIS.key}"]`;
    // Click once the turn is over: while it streams, every chunk re-renders the answer and the
    // finished turn replaces it, so a link found mid-stream can move before the click lands
    // (the Save as note button is only on a finished answer).
    await frame.waitForSelector(".msg.assistant .save-note", { timeout: STEP_TIMEOUT_MS });
    await frame.waitForSelector(citation, { timeout: STEP_TIMEOUT_MS });
    await clickIn(frame, citation);
    await recorded((c) => c.call === "ZoteroPane.selectItem" && c.id === 11, "ZoteroPane.selectItem(11)");
    // The page's own link handler, with a link to a PDF page as the page renders them.
    await frame.evaluate(() => {
      const a = document.createElement("a");
      a.href = "zotero://open-pdf/library/items/LEWIS202?page=3";
      a.id = "test-pdf-link";
      a.textContent = "p. 3";
      document.querySelector(".msg.assistant .answer").append(a);
    });
    await clickIn(frame, "#test-pdf-link");
    // The citation names the paper: its PDF (attachment 12) opens at page 3 (pageIndex 2).
    const opened = await recorded((c) => c.call === "Reader.open", "Reader.open");
    assert.deepEqual(opened, { call: "Reader.open", id: 12, location: { pageIndex: 2 } });
  });

  test("save as note: the page proposes the write to the daemon and shows its card; the bridge writes nothing", async () => {
    const frame = await appFrame();
    await frame.waitForSelector(".msg.assistant .save-note", { timeout: STEP_TIMEOUT_MS });
    await clickIn(frame, ".msg.assistant .save-note");
    await frame.waitForSelector(".write-card", { timeout: STEP_TIMEOUT_MS });
    const preview = await frame.$eval(".write-card", (el) => el.textContent);
    assert.match(preview, /Save a note/);
    // Nothing reaches Zotero before the person's yes, and never through the bridge: the write channel
    // (writes.js, clients/zotero/writes.test.mjs) performs it once it is consented.
    const calls = await page.evaluate(() => window.calls);
    assert.ok(!calls.some((c) => c.call === "Item.saveTx"), "the bridge saved a note");
  });

  test("what a page sends is checked: no writes, refused URIs, foreign origins ignored", async () => {
    const frame = await appFrame();
    // Messages posted by the page's origin, as a compromised page could send them.
    const answers = await frame.evaluate(async () => {
      const ask = (fields) => new Promise((resolve) => {
        const id = `t${Math.random()}`;
        const onMsg = (e) => {
          if (e.data?.dir === "host-page" && e.data.type === "result" && e.data.id === id) {
            window.removeEventListener("message", onMsg);
            resolve(e.data);
          }
        };
        window.addEventListener("message", onMsg);
        window.parent.postMessage({ ...fields, zocrates: "bridge/1", dir: "page-host", id }, "*");
      });
      return {
        note: await ask({ type: "save-note", parent: null, html: "<p>a note a compromised page wants saved</p>" }),
        file: await ask({ type: "open", uri: "file:///etc/passwd" }),
        missing: await ask({ type: "open", uri: "zotero://select/library/items/NOSUCHK1" }),
        unknown: await ask({ type: "delete-library" }),
      };
    });
    // The bridge saves nothing: a write goes through the daemon, with the person's consent.
    assert.equal(answers.note.ok, false);
    assert.match(answers.note.error, /does not know the request "save-note"/);
    assert.deepEqual(answers.file, { zocrates: "bridge/1", dir: "host-page", type: "result", id: answers.file.id, ok: false, error: "not a Zotero item link: file:///etc/passwd" });
    assert.equal(answers.missing.ok, false);
    assert.match(answers.missing.error, /NOSUCHK1 is not in this Zotero library/);
    assert.equal(answers.unknown.ok, false);
    // The host page's own origin is not the daemon's: its messages are ignored.
    await page.evaluate(() => window.postMessage({ zocrates: "bridge/1", dir: "page-host", type: "open", id: "foreign", uri: "zotero://select/library/items/VASWANI1" }, "*"));
    await new Promise((r) => setTimeout(r, 300));
    const calls = await page.evaluate(() => window.calls);
    assert.ok(!calls.some((c) => c.call === "ZoteroPane.selectItem" && c.id === 21), "a foreign origin's message was obeyed");
    assert.deepEqual(calls.filter((c) => c.call === "Zotero.logError"), []);
  });

  test("no daemon.json: the pane says how to start the daemon; Retry finds it", async () => {
    await page.goto(`${hostOrigin}/host.html?datadir=${encodeURIComponent(emptyDir)}`);
    const message = await page.waitForSelector(".zocrates-no-daemon", { timeout: STEP_TIMEOUT_MS });
    const text = await message.evaluate((el) => el.textContent);
    assert.match(text, /No zocratesd running/);
    assert.match(text, /zocratesd service install/);
    assert.match(text, /\.\/dev serve/);
    assert.match(text, new RegExp(`${emptyDir}/zocrates-data/daemon.json does not exist`));
    assert.equal(await page.$("iframe"), null);
    // The daemon is found once the data dir has one (as after `zocratesd service install`).
    await page.evaluate((dir) => { window.Zotero.DataDirectory.dir = dir; }, dataDir);
    await page.click(".zocrates-retry");
    const frame = await appFrame();
    await frame.waitForSelector("html[data-host='zotero']", { timeout: STEP_TIMEOUT_MS });
    await waitForChips(frame, [LEWIS.title]);
  });

  test("a daemon that stops shows the message; a restarted one (new port, new token) is framed again", async () => {
    const before = (await appFrame()).url();
    await daemon.stop();
    await page.waitForSelector(".zocrates-no-daemon", { timeout: STEP_TIMEOUT_MS });
    const info = await daemon.start();
    const deadline = Date.now() + STEP_TIMEOUT_MS;
    let frame;
    for (;;) {
      frame = page.frames().find((f) => f !== page.mainFrame() && f.url().startsWith(`http://127.0.0.1:${info.http.port}/ui/`));
      if (frame) break;
      assert.ok(Date.now() < deadline, "the pane did not reconnect to the restarted daemon");
      await new Promise((r) => setTimeout(r, 100));
    }
    assert.notEqual(frame.url(), before);
    await frame.waitForSelector("html[data-host='zotero']", { timeout: STEP_TIMEOUT_MS });
    await waitForChips(frame, [LEWIS.title]);
  });

  /** The no-daemon message's text once it matches `re`. */
  async function paneMessage(re) {
    const deadline = Date.now() + STEP_TIMEOUT_MS;
    for (;;) {
      const text = await page.evaluate(() => document.querySelector(".zocrates-no-daemon")?.textContent ?? null);
      if (text !== null && re.test(text)) return text;
      assert.ok(Date.now() < deadline, `the pane says ${JSON.stringify(text)}, expected ${re}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  test("a killed daemon's daemon.json: the pane says it is stale; another user's listener on its port gets no token and no frame", async () => {
    await appFrame();
    const info = JSON.parse(await readFile(daemon.daemonJsonPath, "utf8"));
    // SIGKILL (as the OOM killer does): nothing removes daemon.json.
    const exited = new Promise((r) => daemon.proc.once("exit", r));
    daemon.proc.kill("SIGKILL");
    await exited;
    try {
      await staleThenImpostor(info);
    } finally {
      // The real daemon, started again (on a new port): the pane frames it.
      await daemon.start();
    }
    const frame = await appFrame();
    await frame.waitForSelector("html[data-host='zotero']", { timeout: STEP_TIMEOUT_MS });
    await waitForChips(frame, [LEWIS.title]);
  });

  async function staleThenImpostor(info) {
    const { port } = info.http;
    assert.equal(JSON.parse(await readFile(daemon.daemonJsonPath, "utf8")).pid, info.pid, "daemon.json is still there");
    // The open pane sees its daemon gone: the frame goes, the message says why.
    const stale = await paneMessage(/is stale/);
    assert.match(stale, /No zocratesd running/);
    assert.ok(stale.includes(`${daemon.daemonJsonPath} is stale: the daemon it names (pid ${info.pid}) is not running`), stale);
    assert.equal(await page.$("iframe"), null);
    // Another user takes the port and answers as the daemon would.
    const impostor = await startImpostor(port);
    try {
      if (impostor.uid === 65534) assert.match(await readFile(`/proc/${impostor.proc.pid}/status`, "utf8"), /^Uid:\s+65534\s/m);
      const notYours = new RegExp(`something that is not your zocratesd answers on port ${port}`);
      const text = await paneMessage(notYours);
      assert.match(text, /Something that is not your zocratesd answers on its port/);
      assert.match(text, /is stale: the daemon \(pid \d+\) is not running, and another program took its port/);
      // A pane opened now does the same.
      await page.goto(`${hostOrigin}/host.html?datadir=${encodeURIComponent(dataDir)}`);
      await paneMessage(notYours);
      assert.equal(await page.$("iframe"), null);
      // It was asked to prove itself (a fresh nonce each time), and nothing else: no page, no token.
      const challenges = impostor.requests.map((r) => /^\/health\?challenge=([0-9a-f]{32})$/.exec(r.path)?.[1]);
      assert.ok(challenges.length >= 2 && challenges.every(Boolean), JSON.stringify(impostor.requests.map((r) => r.path)));
      assert.equal(new Set(challenges).size, challenges.length, "a nonce was sent twice");
      assert.ok(!JSON.stringify(impostor.requests).includes(info.token), "the token reached the impostor");
      assert.ok(impostor.requests.every((r) => !r.headers.Authorization && !r.headers.Cookie), JSON.stringify(impostor.requests));
      const calls = await page.evaluate(() => window.calls);
      assert.ok(!calls.some((c) => c.call === "Item.saveTx"), JSON.stringify(calls));
    } finally {
      await stopProcess(impostor.proc);
    }
  }

  test("a plugin of another version than the daemon's says how to update; the pane shows the daemon's doctor report", async () => {
    const ours = JSON.parse(await readFile(join(PLUGIN, "manifest.json"), "utf8")).version;
    const notice = async (pluginVersion) => {
      await page.evaluate((v) => {
        window.host.destroy();
        window.host = new ZocratesBridge.BridgeHost({ window, container: document.getElementById("pane"), view: "prefs", pluginVersion: v });
        return window.host.start();
      }, pluginVersion);
      await appFrame();
      return page.evaluate(() => document.querySelector("#pane .zocrates-version-notice")?.textContent ?? null);
    };
    const said = await notice("0.0.1");
    assert.ok(said, "no version notice");
    assert.match(said, new RegExp(`This Zocrates plugin is 0\\.0\\.1, but zocratesd is ${ours.replaceAll(".", "\\.")}`));
    assert.match(said, /run zocratesd plugin in a terminal and install the file it writes: Tools → Plugins/);
    // The report `zocratesd doctor` prints, from the daemon, one line per check.
    const lines = await page.evaluate(async () => {
      const box = document.createElement("div");
      ZocratesBridge.renderDoctor(box, await window.host.doctorReport());
      return [...box.querySelectorAll("li")].map((li) => [li.className, li.textContent]);
    });
    assert.ok(lines.some(([cls, text]) => cls === "zocrates-doctor-ok" && text.startsWith("✓ daemon: zocratesd ")), JSON.stringify(lines));
    assert.ok(lines.some(([, text]) => text.startsWith("✓ HTTP shim: ")), JSON.stringify(lines));
    // A warning (a Zotero newer than the daemon knows) is marked as one, and the report still passes.
    const warned = await page.evaluate(() => {
      const box = document.createElement("div");
      ZocratesBridge.renderDoctor(box, { passed: true, checks: [
        { name: "data dir", status: "ok", summary: "~/Zotero", fix: "" },
        { name: "Zotero version", status: "warn", summary: "userdata schema 131 (newer than this zocratesd knows)", fix: "read on trust" }] });
      return [box.querySelector(".zocrates-doctor-head").textContent, [...box.querySelectorAll("li")].map((li) => [li.className, li.textContent])];
    });
    assert.deepEqual(warned, ["zocratesd doctor: all checks passed, 1 with a warning", [["zocrates-doctor-ok", "✓ data dir: ~/Zotero"],
      ["zocrates-doctor-warn", "! Zotero version: userdata schema 131 (newer than this zocratesd knows); read on trust"]]]);
    assert.equal(await notice(ours), null);
  });

  test("the preferences view, and a teardown that leaves nothing behind", async () => {
    // Teardown: no frame, no select listeners, no notifier observers, no timers answering.
    await page.evaluate(() => window.host.destroy());
    assert.equal(await page.evaluate(() => document.getElementById("pane").childElementCount), 0);
    assert.equal(await page.evaluate(() => window.selectListenerCount()), 0);
    // The preferences pane's host: the page's storage view, no selection wiring.
    await page.evaluate(() => {
      window.host = new ZocratesBridge.BridgeHost({ window, container: document.getElementById("pane"), view: "prefs" });
      return window.host.start();
    });
    const frame = await appFrame();
    assert.match(frame.url(), /\/ui\/\?view=prefs/);
    await frame.waitForSelector(".prefs-only", { timeout: STEP_TIMEOUT_MS });
    assert.equal(await page.evaluate(() => window.selectListenerCount()), 0);
    await page.evaluate(() => window.host.destroy());
  });
  // ---- as in Zotero: a chrome window, a remote <browser>, the JSWindowActor pair ---------------

  test("in a Gecko chrome window, as in Zotero: the XPI's bridge, a remote browser and the actors", async () => {
    // A second Firefox, with Marionette: WebDriver allows one session per browser, puppeteer has the other's.
    const profile = join(root, "firefox-chrome-profile");
    await mkdir(profile);
    await writeFile(join(profile, "user.js"), 'user_pref("marionette.port", 0);\n');
    // Its own runtime dir, where a service's activation socket is looked for (a later test).
    await mkdir(join(root, "xdg"), { mode: 0o700 });
    chromeFirefox = spawn(FIREFOX, ["--headless", "--marionette", "--remote-allow-system-access", "--no-remote", "--profile", profile],
      { stdio: "ignore", env: { ...process.env, XDG_RUNTIME_DIR: join(root, "xdg") } });
    marionette = await Marionette.connect(profile);
    await marionette.command("Marionette:SetContext", { value: "chrome" });
    // The file a user installs, the one `zocratesd plugin --out` writes (not build.mjs's), where
    // Zotero keeps plugins (<profile>/extensions/<id>.xpi), loaded from the jar as Zotero does
    // (rootURI is a jar: URI); the content process reads the actor module from there.
    const xpi = join(profile, "extensions", "zocrates@zocratesd.org.xpi");
    writeXpiAsUsersDo(xpi, daemonEnv(root));
    const rootURI = `jar:file://${xpi}!/`;
    const started = await marionette.script(CHROME_SETUP, [rootURI, dataDir, LEWIS.key, LEWIS.title]);
    assert.deepEqual(started, ["ready", "browser", true]);
    // hello arrived through the child and parent actors and was answered.
    await marionette.until("return window.__zq.host.helloed", "the page's hello reached the host");
    // The page got the selection: its chip (read in the content process by a test probe).
    await marionette.until(`return window.__zq.probe("Array.from(content.document.querySelectorAll('#chips .chip-label'), (e) => e.textContent).join('|')")
      .then((v) => v === ${JSON.stringify(LEWIS.title)})`, "the selection chip in the remote page");
    // A PDF page link clicked in the page: the page sends `open`, the host opens the reader.
    await marionette.script(`return window.__zq.probe("(() => { const a = content.document.createElement('a'); a.href = 'zotero://open-pdf/library/items/LEWIS202?page=5'; a.textContent = 'p. 5'; content.document.body.append(a); a.click(); return 1; })()")`);
    await marionette.until(`return JSON.stringify(window.__zq.calls.find((c) => c.call === "Reader.open") || null) === '{"call":"Reader.open","id":12,"location":{"pageIndex":4}}'`, "Reader.open(12, page 5)");
  });

  test("in the chrome window: zocrates.js adds the pane beside the tabs, toggles it and removes all it added", async () => {
    const added = await marionette.script(`
      const zq = window.__zq;
      zq.sandbox.Zotero.uiReadyPromise = Promise.resolve();
      const prefs = new Map([["extensions.zocrates.paneOpen", true], ["extensions.zocrates.paneWidth", 400]]);
      zq.sandbox.Zotero.Prefs = { get: (k) => prefs.get(k), set: (k, v) => prefs.set(k, v) };
      zq.prefs = prefs;
      zq.before = document.querySelectorAll("[id^='zocrates'], link[href*='zocrates']").length;
      Services.scriptloader.loadSubScript(arguments[0] + "zocrates.js", zq.sandbox);
      zq.sandbox.ZocratesPlugin.init({ id: "zocrates@zocratesd.org", version: "0", rootURI: arguments[0] });
      zq.sandbox.ZocratesPlugin.addToWindow(window);
      const pane = document.getElementById("zocrates-pane");
      const anchor = document.getElementById("appcontent");
      return [zq.before, pane.previousElementSibling.id, pane.parentNode === (anchor ? anchor.parentNode : document.documentElement),
        pane.hidden, pane.getBoundingClientRect().width, document.documentElement.style.minWidth];`, [`jar:file://${join(root, "firefox-chrome-profile", "extensions", "zocrates@zocratesd.org.xpi")}!/`]);
    // The window's minimum width grows by the narrowest chat, as real Zotero's must (its panes slid
    // under the chat in a narrow window: clients/zotero/real/).
    assert.match(added.pop(), /^calc\(max\(var\(--width-of-fixed-components/);
    assert.deepEqual(added, [0, "zocrates-splitter", true, false, 400]);
    // Its host frames the page in a remote browser, which says hello through the actors.
    await marionette.until(`const s = window.__zq.sandbox.ZocratesPlugin.windows.get(window); return !!(s && s.host && s.host.helloed)`,
      "the pane's page saying hello");
    const toggled = await marionette.script(`
      const plugin = window.__zq.sandbox.ZocratesPlugin;
      plugin.toggle(window);
      const hidden = document.getElementById("zocrates-pane").hidden;
      const pref = window.__zq.prefs.get("extensions.zocrates.paneOpen");
      plugin.removeFromWindow(window);
      return [hidden, pref, document.querySelectorAll("[id^='zocrates'], link[href*='zocrates']").length, plugin.windows.size, document.documentElement.style.minWidth];`);
    assert.deepEqual(toggled, [true, false, 0, 0, ""]);
  });

  test("in the chrome window: the preferences pane starts as Zotero loads a plugin's pane", async () => {
    // Zotero 9's preferences window (preferences.js, _loadPane): the pane's scripts run in a sandbox
    // whose prototype is the window, its markup is parsed as XUL and inserted after them, a `load`
    // event is dispatched on each top-level element, and its stylesheets are never applied. The real
    // Zotero showed two things the earlier stand-in hid: an inline onload could not see the pane's
    // scripts, and without style.css the frame was 0 px high.
    const markup = await readFile(join(PLUGIN, "preferences.xhtml"), "utf8");
    const shown = await marionette.script(`
      const [rootURI, markup] = arguments;
      const zq = window.__zq;
      const scope = Cu.Sandbox(window, { sandboxPrototype: window, sandboxName: "zocrates-prefs", sameZoneAs: window });
      scope.Zotero = zq.sandbox.Zotero; // Zotero's global, which the real preferences window has
      Services.scriptloader.loadSubScript(rootURI + "bridge.js", scope);
      Services.scriptloader.loadSubScript(rootURI + "preferences.js", scope);
      const container = document.createElementNS("http://www.w3.org/1999/xhtml", "div");
      container.setAttribute("style", "display: flex; flex-direction: column; width: 600px;");
      document.getElementById("browser").append(container);
      const fragment = document.importNode(MozXULElement.parseXULToFragment(markup, []), true);
      container.append(fragment);
      for (const child of container.children) child.dispatchEvent(new Event("load"));
      zq.prefs = { scope, container };
      return true;`, [`jar:file://${join(root, "firefox-chrome-profile", "extensions", "zocrates@zocratesd.org.xpi")}!/`, markup]);
    assert.equal(shown, true);
    const frame = await marionette.until(`
      const b = window.__zq.prefs.container.querySelector("#zocrates-prefs-host browser.zocrates-frame");
      return b && b.currentURI.spec.includes("/ui/?view=prefs") ? { height: b.getBoundingClientRect().height } : null;`,
    "the preferences page framed in the pane");
    assert.ok(frame.height >= 400, `the preferences frame is ${frame.height}px high`);
    const left = await marionette.script(`
      const { scope, container } = window.__zq.prefs;
      scope.ZocratesPrefsPane.destroy();
      const n = container.querySelectorAll("browser").length;
      container.remove();
      return n;`);
    assert.equal(left, 0);
  });

  /** A host started in the chrome window on Zotero data dir `dir`, then removed: `[state, framed, text]`. */
  function chromePane(/** @type {string} */ dir) {
    return marionette.script(`
      const zq = window.__zq;
      zq.sandbox.Zotero.DataDirectory.dir = arguments[0];
      const container = document.createElementNS("http://www.w3.org/1999/xhtml", "div");
      zq.box.append(container);
      const host = new zq.sandbox.ZocratesBridge.BridgeHost({ window, container, view: "chat" });
      return host.start().then(() => {
        const shown = [host.state, container.querySelector("browser") !== null, container.textContent];
        host.destroy();
        container.remove();
        zq.sandbox.Zotero.DataDirectory.dir = arguments[1];
        return shown;
      });`, [dir, dataDir]);
  }

  test("in the chrome window: no daemon.json but a service's socket: the host connects to it to start the daemon", async () => {
    // What `zocratesd service install` leaves before the first use: the manager's socket at
    // zocratesd's path for the data dir (zocratesd.locations.default_socket_path), no daemon.json yet.
    const serviceDataDir = join(root, "service-zotero");
    await mkdir(serviceDataDir);
    // The path as zocratesd computes it (what the service installer writes into the socket unit).
    const computed = spawnSync(python(), ["-c", "import sys; from pathlib import Path; from zocratesd.locations import default_socket_path; print(default_socket_path(Path(sys.argv[1]).resolve()))", serviceDataDir],
      { cwd: REPO, encoding: "utf8", env: { ...process.env, PYTHONPATH: REPO, XDG_RUNTIME_DIR: join(root, "xdg") } });
    assert.equal(computed.status, 0, computed.stderr);
    const socketPath = computed.stdout.trim();
    assert.equal(dirname(socketPath), join(root, "xdg", "zocrates"));
    await mkdir(dirname(socketPath), { recursive: true, mode: 0o700 });
    let connections = 0;
    const manager = net.createServer((conn) => {
      connections++;
      conn.on("error", () => {});
      conn.resume();
    });
    await new Promise((r) => manager.listen(socketPath, r));
    try {
      const [, , text] = await chromePane(serviceDataDir);
      assert.match(text, /No zocratesd running/);
      assert.match(text, /asked the installed zocratesd service to start/);
      const deadline = Date.now() + STEP_TIMEOUT_MS;
      while (connections === 0) {
        assert.ok(Date.now() < deadline, "the host did not connect to the service's socket");
        await new Promise((r) => setTimeout(r, 100));
      }
    } finally {
      await new Promise((r) => manager.close(r));
    }
  });

  test("in the chrome window: a stale daemon.json, then another user's listener on its port: no browser, no token", async () => {
    // What a killed daemon leaves: daemon.json (0600) naming a pid that is gone and a port now free.
    const staleDataDir = join(root, "stale-zotero");
    await mkdir(join(staleDataDir, "zocrates-data"), { recursive: true });
    const gone = spawnSync("true");
    assert.equal(gone.status, 0);
    const token = "stale-token-" + "x".repeat(32);
    const impostor = await startImpostor(0);
    const daemonJson = join(staleDataDir, "zocrates-data", "daemon.json");
    try {
      await writeFile(daemonJson, JSON.stringify({ pid: gone.pid, http: { port: impostor.port }, token }), { mode: 0o600 });
      // Zotero's own fetch (the system principal's, which CORS does not limit) reads the impostor's
      // answer; its proof is wrong, so no browser is made and the token goes nowhere.
      const [state, framed, text] = await chromePane(staleDataDir);
      assert.equal(state, "no-daemon");
      assert.equal(framed, false);
      assert.match(text, /Something that is not your zocratesd answers on its port/);
      assert.ok(text.includes(`something that is not your zocratesd answers on port ${impostor.port}`), text);
      // Gecko's IOUtils read /proc: the pid is known to be gone.
      assert.ok(text.includes(`${daemonJson} is stale: the daemon (pid ${gone.pid}) is not running, and another program took its port`), text);
      assert.deepEqual(impostor.requests.map((r) => /^\/health\?challenge=[0-9a-f]{32}$/.test(r.path)), [true]);
      assert.ok(!JSON.stringify(impostor.requests).includes(token), "the token reached the impostor");
    } finally {
      await stopProcess(impostor.proc);
    }
    // Nothing listens there now: daemon.json is stale, and the pane says so.
    const [state, framed, text] = await chromePane(staleDataDir);
    assert.deepEqual([state, framed], ["no-daemon", false]);
    assert.match(text, /No zocratesd running/);
    assert.ok(text.includes(`${daemonJson} is stale: the daemon it names (pid ${gone.pid}) is not running`), text);
  });

  test("in the chrome window: teardown removes the frame, the actors and the resource mapping", async () => {
    const after = await marionette.script(`
      const zq = window.__zq;
      zq.host.destroy();
      zq.sandbox.ZocratesBridge.unregisterActors();
      const res = Services.io.getProtocolHandler("resource").QueryInterface(Ci.nsIResProtocolHandler);
      const registered = ${ACTOR_REGISTERED};
      zq.box.remove();
      return [zq.container.childElementCount, res.hasSubstitution("zocrates"), registered, zq.calls.filter((c) => c.call === "Zotero.logError")];`);
    assert.deepEqual(after, [0, false, false, []]);
  });

  test("in the chrome window: the XPI as bootstrap.js starts it: a daemon of another version gets the notice naming zocratesd plugin; the preferences pane shows the daemon's doctor report", async () => {
    // After the teardown above: bootstrap.js registers the actors again, as a plugin's start does.
    const xpi = join(root, "firefox-chrome-profile", "extensions", "zocrates@zocratesd.org.xpi");
    const entries = readZip(await readFile(xpi));
    const manifest = JSON.parse(entries.get("manifest.json").toString("utf8"));
    const ours = manifest.version;
    const otherVersion = "0.0.1";
    assert.notEqual(ours, otherVersion);
    const rootURI = `jar:file://${xpi}!/`;
    const older = await serveAsVersion(join(root, "older-zotero"), otherVersion, daemonEnv(root));
    try {
      const registered = await marionette.script(BOOTSTRAP, [rootURI, manifest.applications.zotero.id, ours, join(root, "older-zotero")]);
      assert.deepEqual(registered, [[manifest.applications.zotero.id, `${rootURI}preferences.xhtml`, [`${rootURI}bridge.js`, `${rootURI}preferences.js`]]]);
      const said = `This Zocrates plugin is ${ours}, but zocratesd is ${otherVersion}. To update it, run zocratesd plugin in a terminal`;
      // The chat pane bootstrap.js put in the window: the version it was started with, against the daemon's.
      const chat = await marionette.until(`
        const notice = document.querySelector("#zocrates-pane .zocrates-version-notice");
        return notice && document.querySelector("#zocrates-pane browser.zocrates-frame") ? [notice.textContent, notice.querySelector("code").textContent] : null;`,
      "the chat pane's version notice");
      assert.ok(chat[0].startsWith(said), chat[0]);
      assert.equal(chat[1], "zocratesd plugin");
      await marionette.script(OPEN_PREFERENCES, [entries.get("preferences.xhtml").toString("utf8")]);
      const [head, lines, notice, code] = await marionette.until(PREFERENCES_SHOWN, "the preferences pane's doctor report and frame");
      assert.ok(notice && notice.startsWith(said), String(notice));
      assert.equal(code, "zocratesd plugin");
      assertDoctorShown(head, lines, await doctorOf(older.info), `✓ daemon: zocratesd ${otherVersion} answers on `);
      await marionette.script(CLOSE_PREFERENCES);
    } finally {
      await stopProcess(older.proc);
    }

    // The daemon of the plugin's own version: no notice; its report in the pane.
    await marionette.script("window.__zq.boot.Zotero.DataDirectory.dir = arguments[0]; return true;", [dataDir]);
    await marionette.script(OPEN_PREFERENCES, [entries.get("preferences.xhtml").toString("utf8")]);
    const [head, lines, notice] = await marionette.until(PREFERENCES_SHOWN, "the preferences pane's doctor report and frame");
    assert.equal(notice, null);
    const info = JSON.parse(await readFile(daemon.daemonJsonPath, "utf8"));
    assertDoctorShown(head, lines, await doctorOf(info), `✓ daemon: zocratesd ${ours} answers on `);
    await marionette.script(CLOSE_PREFERENCES);

    // shutdown() takes away what startup added: the recorded version, the chat pane, the actors.
    const left = await marionette.script(`
      const { Zotero, scope } = window.__zq.boot;
      scope.shutdown();
      const registered = ${ACTOR_REGISTERED};
      return [Zotero.ZocratesPluginVersion === undefined, document.querySelectorAll("[id^='zocrates']").length, registered];`);
    assert.deepEqual(left, [true, 0, false]);
  });

  /** The pane's doctor lines are the report's checks, in order, each with its mark; `line` is one of them. */
  function assertDoctorShown(head, lines, report, line) {
    const mark = { ok: "✓", warn: "!", fail: "✗", skip: "–" };
    const warned = report.checks.filter((c) => c.status === "warn").length;
    assert.equal(head, report.passed ? `zocratesd doctor: all checks passed${warned ? `, ${warned} with a warning` : ""}` : "zocratesd doctor: some checks failed");
    assert.deepEqual(lines.map(([, text]) => text.slice(0, text.indexOf(":"))), report.checks.map((c) => `${mark[c.status] ?? "✗"} ${c.name}`));
    assert.ok(lines.some(([cls, text]) => cls === "zocrates-doctor-ok" && text.startsWith(line)), JSON.stringify(lines));
    assert.ok(lines.some(([cls, text]) => cls === "zocrates-doctor-ok" && text.startsWith("✓ HTTP shim: ")), JSON.stringify(lines));
  }
});
