// node --test clients/: the plugin's write channel (clients/zotero/plugin/writes.js) in a real Gecko.
// A headless Firefox ESR runs, in its chrome window, bridge.js and writes.js in a sandbox made as
// Zotero.Plugins makes a plugin's, beside a stand-in for Zotero's data objects (items, tags,
// collections, the trash, keys, saveTx) that keeps what was saved apart from what was only changed.
// The daemon's side is a real HTTP server on 127.0.0.1 answering the plugin's routes as the
// daemon does (protocol/http.md): the /health proof, the long poll and the answers.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { createHmac, randomBytes } from "node:crypto";
import { mkdtemp, mkdir, rm, writeFile } from "node:fs/promises";
import { createServer } from "node:http";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { FIREFOX, Marionette, PLUGIN_SANDBOX, REPO, STEP_TIMEOUT_MS, Zocratesd, daemonEnv, python, requireFirefox, stopProcess } from "./testkit.mjs";

const PLUGIN = join(REPO, "clients", "zotero", "plugin");
const PROOF_LABEL = "zocratesd-health-proof:";

/** Wait until `check()` returns something truthy (checked every 50 ms); that value. */
async function until(check, what, timeoutMs = STEP_TIMEOUT_MS) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/**
 * The plugin's routes of the daemon's HTTP shim, as protocol/http.md describes them: GET
 * /health?challenge= (the HMAC proof), GET /plugin/writes?wait= (held until a request is handed over
 * or `wait` passes), POST /plugin/writes/<id>. Every request is recorded. `mode` "down" drops every
 * connection at once, as a dead daemon's port looks to a fetch; `proof` "wrong" plays an impostor.
 */
class DaemonShim {
  constructor({ token = randomBytes(24).toString("hex"), proof = "right" } = {}) {
    this.token = token;
    this.pluginToken = randomBytes(24).toString("hex");  // daemon.json's plugin_token: the channel's own
    this.proof = proof;
    this.mode = "up";
    this.requests = [];
    this.queue = [];
    /** Requests handed over, by id: their answer's resolver. */
    this.waiting = new Map();
    /** Open polls: {res, timer}. */
    this.polls = new Set();
    this.closedPolls = 0;
    this.sockets = new Set();
  }

  async listen(port = 0) {
    this.server = createServer((req, res) => this.handle(req, res));
    this.server.on("connection", (socket) => {
      if (this.mode === "down") return socket.destroy();
      this.sockets.add(socket);
      socket.on("close", () => this.sockets.delete(socket));
    });
    await new Promise((resolve, reject) => this.server.once("error", reject).listen(port, "127.0.0.1", resolve));
    this.port = this.server.address().port;
    return this;
  }

  /** Stop listening and drop every connection (a daemon gone). */
  async close() {
    for (const s of this.sockets) s.destroy();
    await new Promise((r) => this.server.close(r));
  }

  /** Drop every open connection now (the open poll fails as it does when a daemon dies). */
  dropConnections() {
    for (const s of this.sockets) s.destroy();
  }

  daemonJson(pid = process.pid) {
    return JSON.stringify({ pid, http: { port: this.port }, token: this.token, plugin_token: this.pluginToken });
  }

  json(res, status, body) {
    res.writeHead(status, { "Content-Type": "application/json" }).end(JSON.stringify(body));
  }

  handle(req, res) {
    const url = new URL(req.url, "http://127.0.0.1");
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      const body = Buffer.concat(chunks).toString("utf8");
      this.requests.push({ method: req.method, path: url.pathname + url.search, headers: req.headers, body, at: Date.now() });
      if (url.pathname === "/health") {
        const nonce = url.searchParams.get("challenge") || "";
        const proof = this.proof === "right" ? createHmac("sha256", this.token).update(PROOF_LABEL + nonce).digest("hex") : "ab".repeat(32);
        return this.json(res, 200, { status: "success", proof });
      }
      if (req.headers.authorization !== `Bearer ${this.token}`) return this.json(res, 401, { status: "error" });
      if (req.headers["x-zocrates-plugin-token"] !== this.pluginToken) return this.json(res, 403, { status: "error" });
      if (req.method === "GET" && url.pathname === "/plugin/writes") return this.poll(req, res, Number(url.searchParams.get("wait")));
      const m = /^\/plugin\/writes\/([^/]+)$/.exec(url.pathname);
      if (req.method === "POST" && m) {
        const resolve = this.waiting.get(decodeURIComponent(m[1]));
        if (!resolve) return this.json(res, 404, { status: "error" });
        this.waiting.delete(decodeURIComponent(m[1]));
        resolve(JSON.parse(body));
        return this.json(res, 200, { status: "success" });
      }
      this.json(res, 404, { status: "error" });
    });
  }

  poll(req, res, waitS) {
    if (this.queue.length) return this.json(res, 200, { status: "success", request: this.queue.shift() });
    const poll = { res, timer: null };
    poll.timer = setTimeout(() => {
      this.polls.delete(poll);
      this.json(res, 200, { status: "success", request: null });
    }, Math.min(Math.max(waitS, 0), 25) * 1000);
    this.polls.add(poll);
    res.on("close", () => {
      clearTimeout(poll.timer);
      if (this.polls.delete(poll)) this.closedPolls++;
    });
  }

  /** Hand `request` to the plugin; resolves to the body it posts back. */
  ask(request) {
    const answered = new Promise((resolve) => this.waiting.set(request.id, resolve));
    this.hand(request);
    return answered;
  }

  /** Hand `request` to the open poll, else to the next poll. */
  hand(request) {
    const [poll] = this.polls;
    if (poll) {
      this.polls.delete(poll);
      clearTimeout(poll.timer);
      this.json(poll.res, 200, { status: "success", request });
    } else {
      this.queue.push(request);
    }
  }
}

/** JSON-RPC on the daemon's Unix socket (protocol/README.md: one JSON object per line). */
class Rpc {
  static open(path) {
    return new Promise((resolve, reject) => {
      const socket = net.connect(path, () => resolve(new Rpc(socket)));
      socket.once("error", reject);
    });
  }

  constructor(socket) {
    this.socket = socket;
    this.buffer = "";
    this.pending = new Map();
    this.id = 0;
    socket.setEncoding("utf8");
    socket.on("data", (chunk) => {
      this.buffer += chunk;
      let nl;
      while ((nl = this.buffer.indexOf("\n")) >= 0) {
        const message = JSON.parse(this.buffer.slice(0, nl));
        this.buffer = this.buffer.slice(nl + 1);
        this.pending.get(message.id)?.(message);
        this.pending.delete(message.id);
      }
    });
  }

  async result(method, params) {
    const id = ++this.id;
    const reply = await new Promise((resolve) => {
      this.pending.set(id, resolve);
      this.socket.write(`${JSON.stringify({ jsonrpc: "2.0", id, method, params })}\n`);
    });
    if (reply.error) throw new Error(`${method}: ${JSON.stringify(reply.error)}`);
    return reply.result;
  }

  close() {
    this.socket.destroy();
  }
}

// Runs in Firefox's chrome window: a sandbox with the globals Zotero.Plugins gives a plugin, a
// stand-in for Zotero's data objects, and the plugin's bridge.js and writes.js loaded into it.
const CHROME_SETUP = `
const [rootURI, dataDir] = arguments;
const debug = [];
const saves = [];
const KEY = /^[23456789ABCDEFGHIJKLMNPQRSTUVWXYZ]{8}$/; // Zotero.Utilities.isValidObjectKey
const ITEM_TYPES = new Map([["note", 1], ["attachment", 2], ["journalArticle", 3], ["book", 4], ["case", 5], ["annotation", 6]]);
const FIELDS = new Map([["title", 1], ["date", 2], ["DOI", 3], ["url", 4], ["abstractNote", 5], ["publicationTitle", 6], ["publisher", 7], ["caseName", 8]]);
const TYPE_FIELDS = new Map([[3, [1, 2, 3, 4, 5, 6]], [4, [1, 2, 4, 5, 7]], [5, [8, 2, 4, 5]]]);
const BASE_FIELDS = new Map([["5:1", 8]]); // a case's title is its caseName
const CREATOR_TYPES = new Map([["author", 1], ["editor", 2], ["counsel", 3]]);
const TYPE_CREATORS = new Map([[3, [1, 2]], [4, [1, 2]], [5, [3]]]);
const PRIMARY_CREATOR = new Map([[3, 1], [4, 1], [5, 3]]);
let store, nextID, libraries;

// Zotero's rules that matter here: libraryID before key, a key only once and only Zotero's alphabet,
// one object per key and library (the database's UNIQUE constraint), fields only for their type.
// And a key only before any data: data set on an object with no key marks its primary data loaded,
// after which Zotero refuses a key; an object given a key has its data loaded only by
// loadPrimaryData (which, finding no row, counts it as new).
class DataObject {
  constructor() { this._libraryID = null; this._key = null; this.id = null; this._deleted = false; this.dirty = false; this._loaded = false; }
  get libraryID() { return this._libraryID; }
  set libraryID(v) { if (this.id) throw new Error("Cannot change libraryID"); this._libraryID = v; }
  get key() { return this._key; }
  set key(v) {
    if (this._libraryID === null) throw new Error("libraryID must be set before key");
    if (!KEY.test(v)) throw new Error("key is not valid");
    if (this._key || this.id) throw new Error("Key cannot be changed");
    if (this._loaded) throw new Error("Cannot change key after object is already loaded");
    this._key = v;
  }
  _requirePrimaryData() {
    if (this._loaded) return;
    if (this._key) throw new Error("'primaryData' not loaded for " + this.kind + " (" + this._libraryID + "/" + this._key + ")");
    this._loaded = true;
  }
  async loadPrimaryData() {
    if (store[this.kind].some((o) => o.libraryID === this._libraryID && o.key === this._key)) throw new Error("the stand-in loads only new objects");
    this._loaded = true;
  }
  get deleted() { return this._deleted; }
  set deleted(v) { this._deleted = !!v; this.dirty = true; }
  async saveTx() {
    if (!this._libraryID) this._libraryID = 1;
    if (!this._key) this._key = "GEN" + String(nextID + 1).padStart(5, "2").replace(/[01]/g, "2");
    if (!this.id) {
      if (store[this.kind].some((o) => o.libraryID === this._libraryID && o.key === this._key)) throw new Error("UNIQUE constraint failed: " + this.kind + ".libraryID, " + this.kind + ".key");
      this.id = ++nextID;
      store[this.kind].push(this);
    }
    this.saved = JSON.parse(JSON.stringify(this.snapshot()));
    this.dirty = false;
    saves.push({ kind: this.kind, key: this._key });
    return this.id;
  }
}
class Item extends DataObject {
  constructor(type) {
    super();
    this.kind = "items";
    this.itemType = type || null;
    this.itemTypeID = type ? ITEM_TYPES.get(type) : null;
    if (type && !this.itemTypeID) throw new Error("Unknown item type " + type);
    this._tags = []; this._collections = []; this._fields = {}; this._creators = []; this._note = ""; this._parentID = false;
    if (type) this._requirePrimaryData(); // Zotero's setType
  }
  setType(typeID) {
    this._requirePrimaryData();
    const type = [...ITEM_TYPES].find(([, id]) => id === typeID)?.[0];
    if (!type) throw new Error("Invalid item type id " + typeID);
    this.itemType = type;
    this.itemTypeID = typeID;
    this.dirty = true;
    return true;
  }
  isRegularItem() { return !["note", "attachment", "annotation"].includes(this.itemType); }
  isNote() { return this.itemType === "note"; }
  isTopLevelItem() { return !this._parentID; }
  get parentID() { return this._parentID; }
  set parentID(v) { this._requirePrimaryData(); this._parentID = v; this.dirty = true; }
  // Zotero reads an item's tags and collections only once its library's items are loaded (_requireData).
  _requireData(what) { if (!libraries[this._libraryID].loaded.has("item")) throw new Error("Item " + this._key + "'s " + what + " are not loaded"); }
  hasTag(t) { this._requireData("tags"); return this._tags.some((x) => x.tag === t); }
  getTags() { return this._tags.map((x) => ({ ...x })); }
  addTag(t, type = 0) { if (this.hasTag(t)) return false; this._tags.push({ tag: t, type }); this.dirty = true; return true; }
  removeTag(t) { const n = this._tags.length; this._tags = this._tags.filter((x) => x.tag !== t); this.dirty ||= n !== this._tags.length; return n !== this._tags.length; }
  inCollection(id) { this._requireData("collections"); return this._collections.includes(id); }
  _collectionID(idOrKey) {
    const c = store.collections.find((c) => c.id === idOrKey || (c.libraryID === this._libraryID && c.key === idOrKey));
    if (!c) throw new Error("Invalid collection '" + idOrKey + "'");
    return c.id;
  }
  addToCollection(idOrKey) {
    if (this._parentID) throw new Error("Child items cannot be added to collections");
    const id = this._collectionID(idOrKey);
    if (!this._collections.includes(id)) { this._collections.push(id); this.dirty = true; }
  }
  removeFromCollection(idOrKey) {
    const id = this._collectionID(idOrKey);
    if (this._collections.includes(id)) { this._collections = this._collections.filter((c) => c !== id); this.dirty = true; }
  }
  setField(name, value) {
    this._requirePrimaryData();
    const fieldID = FIELDS.get(name);
    if (!fieldID) throw new Error('"' + name + '" is not a valid itemData field');
    const own = BASE_FIELDS.get(this.itemTypeID + ":" + fieldID) || fieldID;
    if (!(TYPE_FIELDS.get(this.itemTypeID) || []).includes(own)) throw new Error("'" + name + "' is not a valid field for type '" + this.itemType + "'");
    this._fields[[...FIELDS].find(([, id]) => id === own)[0]] = value;
    this.dirty = true;
  }
  setCreators(creators) {
    this._requirePrimaryData();
    for (const c of creators) {
      if (!(TYPE_CREATORS.get(this.itemTypeID) || []).includes(c.creatorTypeID)) throw new Error("Invalid creator type " + c.creatorTypeID);
    }
    this._creators = creators.map((c) => ({ ...c }));
    this.dirty = true;
  }
  setNote(html) { this._requirePrimaryData(); if (!this.isNote()) throw new Error("setNote() can only be called on notes"); this._note = html; this.dirty = true; }
  snapshot() {
    const parent = this._parentID ? store.items.find((i) => i.id === this._parentID).key : null;
    const collections = this._collections.map((id) => store.collections.find((c) => c.id === id).key);
    return { key: this._key, libraryID: this._libraryID, itemType: this.itemType, parent, tags: this._tags.map((t) => t.tag),
      collections, fields: this._fields, creators: this._creators, note: this._note, deleted: this._deleted };
  }
}
class Collection extends DataObject {
  constructor(params = {}) {
    super();
    this.kind = "collections";
    this._name = null;
    this._parentKey = false;
    for (const p of ["name", "libraryID", "parentID", "parentKey"]) if (params[p] !== undefined) this[p] = params[p];
  }
  get name() { return this._name; }
  set name(v) { this._requirePrimaryData(); this._name = v; }
  get parentKey() { return this._parentKey; }
  set parentKey(v) { this._requirePrimaryData(); this._parentKey = v; }
  snapshot() { return { key: this._key, libraryID: this._libraryID, name: this.name, parentKey: this.parentKey, deleted: this._deleted }; }
}
function seed(object, fields) {
  object._libraryID = fields.libraryID || 1;
  object._key = fields.key;
  object._loaded = true;
  Object.assign(object, fields.set || {});
  object.id = ++nextID;
  store[object.kind].push(object);
  object.saved = JSON.parse(JSON.stringify(object.snapshot()));
  return object;
}
// The library every test starts from: two papers (one tagged "read" and in the Thesis collection),
// an attachment of the first, a collection; a group library; a read-only group library.
function reset() {
  // The user library is loaded at Zotero's start; a group library's items when first used.
  libraries = Object.fromEntries([[1, true], [2, true], [3, false]].map(([libraryID, editable]) => [libraryID, {
    libraryID, editable, loaded: new Set(libraryID === 1 ? ["item", "collection"] : []),
    async waitForDataLoad(type) { this.loaded.add(type); },
  }]));
  store = { items: [], collections: [] };
  nextID = 100;
  saves.length = 0;
  const thesis = seed(new Collection(), { key: "THESISCC", set: { name: "Thesis" } });
  const a = seed(new Item("journalArticle"), { key: "PAPERAAA", set: { _tags: [{ tag: "read", type: 0 }], _collections: [thesis.id], _fields: { title: "RAG" } } });
  seed(new Item("book"), { key: "PAPERBBB", set: { _fields: { title: "A book" } } });
  seed(new Item("attachment"), { key: "ATTACHCC", set: { _parentID: a.id } });
  seed(new Item("journalArticle"), { key: "GRPPAPER", libraryID: 2 });
  seed(new Item("journalArticle"), { key: "R3PAPERA", libraryID: 3 });
}
reset();
const find = (kind) => async (libraryID, key) => store[kind].find((o) => o.libraryID === libraryID && o.key === key) || false;
const Zotero = {
  version: "9.0.99-stand-in",
  DataDirectory: { dir: dataDir },
  Libraries: { userLibraryID: 1, get: (id) => libraries[id] || false },
  Groups: { getLibraryIDFromGroupID: (groupID) => ({ 4001: 2, 4002: 3 })[groupID] || false },
  Items: { getByLibraryAndKeyAsync: find("items") },
  Collections: { getByLibraryAndKeyAsync: find("collections") },
  Item,
  Collection,
  ItemTypes: { getID: (name) => ITEM_TYPES.get(name) || false },
  ItemFields: {
    getID: (name) => FIELDS.get(name) || false,
    getFieldIDFromTypeAndBase: (typeID, fieldID) => BASE_FIELDS.get(typeID + ":" + fieldID) || false,
    isValidForType: (fieldID, typeID) => (TYPE_FIELDS.get(typeID) || []).includes(fieldID),
  },
  CreatorTypes: {
    getID: (name) => CREATOR_TYPES.get(name) || false,
    isValidForItemType: (creatorTypeID, typeID) => (TYPE_CREATORS.get(typeID) || []).includes(creatorTypeID),
    getPrimaryIDForType: (typeID) => PRIMARY_CREATOR.get(typeID) || false,
  },
  debug: (line) => debug.push(String(line)),
  logError: (e) => debug.push("logError: " + String(e && e.message || e)),
};
${PLUGIN_SANDBOX}
const sandbox = pluginSandbox("zocrates-writes-test", Zotero);
Services.scriptloader.loadSubScript(rootURI + "bridge.js", sandbox);
Services.scriptloader.loadSubScript(rootURI + "writes.js", sandbox);
const state = () => ({
  items: Object.fromEntries(store.items.map((i) => [i.libraryID + "/" + i.key, i.saved])),
  collections: Object.fromEntries(store.collections.map((c) => [c.libraryID + "/" + c.key, c.saved])),
  unsaved: [...store.items, ...store.collections].filter((o) => o.dirty).map((o) => o.key),
  saves: saves.length,
});
// A paper of another library (the end-to-end test's Zotero data): seeded as Zotero loaded it.
const addPaper = (key) => { seed(new Item("journalArticle"), { key }); return true; };
window.__zw = { sandbox, debug, reset, state, addPaper };
// As bootstrap.js starts it.
sandbox.ZocratesWrites.start({ version: "0.1.0-test" });
return true;
`;

describe("the plugin's write channel in Gecko, as Zotero runs it", () => {
  let root, dataDir, daemonJson, shim, firefox, marionette;
  let seq = 0;

  before(async () => {
    requireFirefox();
    root = await mkdtemp(join(tmpdir(), "zqwrites"));
    dataDir = join(root, "zotero");
    await mkdir(join(dataDir, "zocrates-data"), { recursive: true });
    daemonJson = join(dataDir, "zocrates-data", "daemon.json");
    shim = await new DaemonShim().listen();
    await writeFile(daemonJson, shim.daemonJson(), { mode: 0o600 });
    const profile = join(root, "profile");
    await mkdir(profile);
    await writeFile(join(profile, "user.js"), 'user_pref("marionette.port", 0);\n');
    firefox = spawn(FIREFOX, ["--headless", "--marionette", "--remote-allow-system-access", "--no-remote", "--profile", profile], { stdio: "ignore" });
    marionette = await Marionette.connect(profile);
    await marionette.command("Marionette:SetContext", { value: "chrome" });
    assert.equal(await marionette.script(CHROME_SETUP, [`file://${PLUGIN}/`, dataDir]), true);
  });

  after(async () => {
    marionette?.close();
    await stopProcess(firefox);
    await shim?.close();
    if (root) await rm(root, { recursive: true, force: true });
  });

  const zotero = () => marionette.script("return window.__zw.state()");
  const reset = () => marionette.script("window.__zw.reset(); return true;");

  /** Hand one request to the plugin through `via`; the body it posts back. */
  async function ask(call, operation, { noteHTML = null, via = shim } = {}) {
    const id = `t-${++seq}`;
    let timer;
    const timeout = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no answer to ${call} ${JSON.stringify(operation).slice(0, 200)}`)), STEP_TIMEOUT_MS);
    });
    try {
      return await Promise.race([via.ask({ id, call, operation, change: null, note_html: noteHTML }), timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  // Each operation: what plan answers (read from Zotero, nothing written), and what Zotero holds
  // once it is applied (`check`, given the saved state).
  const NOTE = '<p onclick="alert(1)">RAG <a href="zotero://select/library/items/PAPERAAA">Lewis</a></p><script>alert(1)</script><img src=x onerror=alert(1)>';
  const CASES = [
    { operation: { type: "tag_items", items: ["PAPERAAA", "PAPERBBB"], tags: ["read", "review"], library: "user" },
      plan: { tags_added: { PAPERAAA: ["review"], PAPERBBB: ["read", "review"] } },
      check: (z) => {
        assert.deepEqual(z.items["1/PAPERAAA"].tags, ["read", "review"]);
        assert.deepEqual(z.items["1/PAPERBBB"].tags, ["read", "review"]);
      } },
    { operation: { type: "untag_items", items: ["PAPERAAA", "PAPERBBB"], tags: ["read"], library: "user" },
      plan: { tags_removed: { PAPERAAA: ["read"] } },
      check: (z) => assert.deepEqual([z.items["1/PAPERAAA"].tags, z.items["1/PAPERBBB"].tags], [[], []]) },
    { operation: { type: "retag", add: { PAPERBBB: ["review"] }, remove: { PAPERAAA: ["read"] }, library: "user" },
      plan: {},
      check: (z) => assert.deepEqual([z.items["1/PAPERAAA"].tags, z.items["1/PAPERBBB"].tags], [[], ["review"]]) },
    { operation: { type: "add_to_collection", items: ["PAPERAAA", "PAPERBBB"], collection: "THESISCC", library: "user" },
      plan: { collection_added: ["PAPERBBB"] },
      check: (z) => assert.deepEqual(z.items["1/PAPERBBB"].collections, ["THESISCC"]) },
    { operation: { type: "remove_from_collection", items: ["PAPERAAA", "PAPERBBB"], collection: "THESISCC", library: "user" },
      plan: {},
      check: (z) => assert.deepEqual(z.items["1/PAPERAAA"].collections, []) },
    { operation: { type: "create_collection", name: "  Chapter 2 ", new_key: "CHAP2KEY", parent: "THESISCC", library: "user" },
      plan: { created_collections: ["CHAP2KEY"] },
      check: (z) => assert.deepEqual(z.collections["1/CHAP2KEY"], { key: "CHAP2KEY", libraryID: 1, name: "Chapter 2", parentKey: "THESISCC", deleted: false }) },
    { operation: { type: "save_note", markdown: "RAG", new_key: "N2TEKEYA", parent: "PAPERAAA", collection: null, citations: [], library: "user" },
      noteHTML: NOTE,
      plan: { created_items: ["N2TEKEYA"] },
      check: (z) => {
        const note = z.items["1/N2TEKEYA"];
        assert.deepEqual([note.itemType, note.parent, note.collections], ["note", "PAPERAAA", []]);
        assert.equal(note.note, '<p>RAG <a href="zotero://select/library/items/PAPERAAA">Lewis</a></p>');
      } },
    { operation: { type: "save_note", markdown: "x", new_key: "N2TEKEYB", parent: null, collection: "THESISCC", citations: [], library: "user" },
      noteHTML: "<h2>Standalone</h2>",
      plan: { created_items: ["N2TEKEYB"] },
      check: (z) => assert.deepEqual([z.items["1/N2TEKEYB"].parent, z.items["1/N2TEKEYB"].collections, z.items["1/N2TEKEYB"].note], [null, ["THESISCC"], "<h2>Standalone</h2>"]) },
    { operation: { type: "add_item", new_key: "NEWITEMA", collection: "THESISCC", library: "user",
      item: { item_type: "journalArticle", title: "Dense Passage Retrieval",
        creators: [{ creator_type: "author", first_name: "Vladimir", last_name: "Karpukhin", name: "" }, { creator_type: "director", name: "FAIR" }],
        fields: { date: "2020", DOI: "10.18653/v1/2020.emnlp-main.550", publisher: "not a journal article's field", dateAdded: "1970-01-01", bogus: "x" } } },
      plan: { created_items: ["NEWITEMA"] },
      check: (z) => {
        const item = z.items["1/NEWITEMA"];
        assert.deepEqual(item.fields, { title: "Dense Passage Retrieval", date: "2020", DOI: "10.18653/v1/2020.emnlp-main.550" });
        // A creator type the item type lacks becomes its primary one (author), as Zotero does.
        assert.deepEqual(item.creators, [{ firstName: "Vladimir", lastName: "Karpukhin", fieldMode: 0, creatorTypeID: 1 }, { firstName: "", lastName: "FAIR", fieldMode: 1, creatorTypeID: 1 }]);
        assert.deepEqual(item.collections, ["THESISCC"]);
      } },
    { operation: { type: "add_item", new_key: "NEWCASEA", collection: null, library: "groups/4001", item: { item_type: "case", title: "Roe", creators: [], fields: {} } },
      plan: { created_items: ["NEWCASEA"] },
      check: (z) => assert.deepEqual([z.items["2/NEWCASEA"].itemType, z.items["2/NEWCASEA"].fields], ["case", { caseName: "Roe" }]) },
    { operation: { type: "tag_items", items: ["GRPPAPER"], tags: ["group"], library: "groups/4001" },
      plan: { tags_added: { GRPPAPER: ["group"] } },
      check: (z) => assert.deepEqual(z.items["2/GRPPAPER"].tags, ["group"]) },
    { operation: { type: "trash", items: ["PAPERBBB"], collections: ["THESISCC"], library: "user" },
      plan: {},
      check: (z) => assert.deepEqual([z.items["1/PAPERBBB"].deleted, z.collections["1/THESISCC"].deleted, z.items["1/PAPERAAA"].deleted], [true, true, false]) },
  ];

  test("each operation: plan reads Zotero and writes nothing, apply writes it, a second apply changes nothing", async () => {
    for (const { operation, noteHTML, plan, check } of CASES) {
      await reset();
      const what = `${operation.type} ${JSON.stringify(operation).slice(0, 120)}`;
      const before = await zotero();
      assert.deepEqual(await ask("plan", operation, { noteHTML }), { result: { change: plan } }, what);
      assert.deepEqual(await zotero(), before, `plan wrote: ${what}`);
      // apply answers the change as applied: what plan said.
      assert.deepEqual(await ask("apply", operation, { noteHTML }), { result: { change: plan } }, what);
      const applied = await zotero();
      assert.deepEqual(applied.unsaved, [], `changed without saving: ${what}`);
      assert.ok(applied.saves > before.saves, `nothing saved: ${what}`);
      check(applied);
      // Applied again (a retry after a lost answer): no save, no second object. It answers what it
      // changed now (nothing), and for a creation the key the write's object has.
      const again = ["save_note", "add_item", "create_collection"].includes(operation.type) ? plan : {};
      assert.deepEqual(await ask("apply", operation, { noteHTML }), { result: { change: again } }, `again: ${what}`);
      assert.deepEqual(await zotero(), applied, `a second apply changed Zotero: ${what}`);
    }
  });

  test("a key Zotero does not have, a missing or read-only library, a child item: refused, nothing written", async () => {
    await reset();
    const before = await zotero();
    const refused = async (operation, message, noteHTML = null) => {
      for (const call of ["plan", "apply"]) {
        const body = await ask(call, operation, { noteHTML });
        assert.equal(body.error?.kind, "refused", `${call} ${JSON.stringify(operation)}: ${JSON.stringify(body)}`);
        assert.match(body.error.message, message);
      }
    };
    // The first item exists: it is not tagged either (every key is looked up before anything is written).
    await refused({ type: "tag_items", items: ["PAPERAAA", "MISSING2"], tags: ["new"], library: "user" }, /^item MISSING2 is not in this Zotero library$/);
    await refused({ type: "add_to_collection", items: ["PAPERBBB"], collection: "MISSINGC", library: "user" }, /collection MISSINGC is not in this Zotero library/);
    await refused({ type: "trash", items: ["PAPERBBB"], collections: ["MISSINGC"], library: "user" }, /collection MISSINGC/);
    await refused({ type: "tag_items", items: ["GRPPAPER"], tags: ["x"], library: "groups/9999" }, /group 9999 is not in this Zotero/);
    await refused({ type: "tag_items", items: ["R3PAPERA"], tags: ["x"], library: "groups/4002" }, /groups\/4002 is read-only/);
    // An item of another library is not found in this one.
    await refused({ type: "tag_items", items: ["GRPPAPER"], tags: ["x"], library: "user" }, /GRPPAPER is not in this Zotero library/);
    await refused({ type: "add_to_collection", items: ["ATTACHCC"], collection: "THESISCC", library: "user" }, /ATTACHCC is an attachment or note of a paper/);
    await refused({ type: "save_note", new_key: "N2TEKEYC", parent: "ATTACHCC", collection: null, library: "user" }, /ATTACHCC is not a paper/, "<p>x</p>");
    await refused({ type: "add_item", new_key: "NEWITEMB", library: "user", item: { item_type: "note", title: "x" } }, /no item type "note"/);
    await refused({ type: "add_item", new_key: "NEWITEMB", library: "user", item: { item_type: "spaceship", title: "x" } }, /no item type "spaceship"/);
    assert.deepEqual(await zotero(), before);
  });

  test("hostile input is rejected before Zotero is touched, and logged escaped", async () => {
    await reset();
    const before = await zotero();
    const tag = (fields) => ({ type: "tag_items", items: ["PAPERAAA"], tags: ["x"], library: "user", ...fields });
    const HOSTILE = [
      [{ type: "delete_library", library: "user" }, /^unknown operation "delete_library"$/],
      [{ type: "__proto__", library: "user" }, /unknown operation/],
      [{ type: "constructor", library: "user" }, /unknown operation/],
      ["tag_items", /no operation/],
      [tag({ items: ["paperaaa"] }), /not a Zotero key/],
      [tag({ items: ["../../etc/passwd"] }), /not a Zotero key/],
      [tag({ items: "PAPERAAA" }), /items is not a list/],
      [tag({ items: Array.from({ length: 51 }, (_, i) => `K${String(i).padStart(7, "A")}`) }), /more than 50/],
      [tag({ tags: ["x".repeat(256)] }), /longer than 255 characters/],
      [tag({ tags: [42] }), /a tag is not text/],
      [tag({ tags: ["bad\u0000tag"] }), /control characters/],
      [tag({ tags: ["   "] }), /a tag is empty/],
      [tag({ tags: Array.from({ length: 51 }, (_, i) => `t${i}`) }), /more than 50 tags/],
      [tag({ library: "groups/../1" }), /not a library/],
      [tag({ library: undefined }), /not a library/],
      // As JSON.parse reads them: an own key named __proto__.
      [JSON.parse('{"type": "retag", "add": {"__proto__": ["x"]}, "library": "user"}'), /not a Zotero key/],
      [{ type: "retag", add: { PAPERAAA: "x" }, library: "user" }, /tags is not a list/],
      [{ type: "create_collection", name: "x", new_key: "AAAAAAA0", library: "user" }, /new_key is not a key Zotero accepts/],
      [{ type: "create_collection", name: "a\nb", new_key: "NEWCOLAA", library: "user" }, /control characters/],
      [{ type: "create_collection", name: "x".repeat(256), new_key: "NEWCOLAA", library: "user" }, /longer than 255/],
      [{ type: "save_note", new_key: "N2TEKEYD", parent: "PAPERAAA", library: "user" }, /no note/],
      [{ type: "save_note", new_key: "N2TEKEYD", parent: "PAPERAAA", collection: "THESISCC", library: "user" }, /not both/, "<p>x</p>"],
      [{ type: "save_note", new_key: "N2TEKEYD", parent: "PAPERAAA", library: "user" }, /empty once sanitised/, "<script>alert(1)</script><style>p{}</style>"],
      [JSON.parse('{"type": "add_item", "new_key": "NEWITEMC", "library": "user", "item": {"item_type": "book", "title": "x", "fields": {"__proto__": "x"}}}'), /not a field name/],
      [{ type: "add_item", new_key: "NEWITEMC", library: "user", item: { item_type: "book", title: "x", fields: { date: 2020 } } }, /field date is not text/],
      [{ type: "add_item", new_key: "NEWITEMC", library: "user", item: { item_type: "book", title: "x", creators: [{ creator_type: "author" }] } }, /creator has no name/],
      [{ type: "add_item", new_key: "NEWITEMC", library: "user", item: { item_type: "book/../x", title: "x" } }, /not an item type/],
      [{ type: "trash", items: [], collections: [], library: "user" }, /trash names nothing/],
      [{ type: "\u001b[31mevil\nline", library: "user" }, /unknown operation/],
    ];
    for (const [operation, message, noteHTML = null] of HOSTILE) {
      const body = await ask("apply", operation, { noteHTML });
      assert.equal(body.error?.kind, "refused", `${JSON.stringify(operation)}: ${JSON.stringify(body)}`);
      assert.match(body.error.message, message, JSON.stringify(operation));
    }
    assert.equal((await ask("delete", tag({}))).error.kind, "refused");
    // A request whose id cannot be answered is not performed either: the next one is answered first.
    const unanswerable = { id: "../../health", call: "apply", operation: tag({ tags: ["planted"] }), change: null, note_html: null };
    shim.hand(unanswerable);
    shim.hand({ ...unanswerable, id: undefined });
    assert.deepEqual(await ask("plan", tag({})), { result: { change: { tags_added: { PAPERAAA: ["x"] } } } });
    assert.deepEqual(await zotero(), before);
    assert.ok(!shim.requests.some((r) => r.method === "POST" && !/^\/plugin\/writes\/t-\d+$/.test(r.path)), "an answer went elsewhere");
    // The hostile type reached the debug output escaped: no raw escape or line break.
    const lines = await marionette.script("return window.__zw.debug");
    const evil = lines.filter((l) => l.includes("evil"));
    assert.ok(evil.length >= 1, JSON.stringify(lines.slice(-5)));
    for (const l of evil) assert.ok(!/[\u001b\n]/.test(l), l);
  });

  /** The times of the requests to `server` matching `path` after `since`. */
  const times = (server, re, since) => server.requests.filter((r) => r.at >= since && re.test(r.path)).map((r) => r.at);

  test("a daemon gone: the channel backs off (1 s, 2 s, 4 s ...), then resumes; a restarted daemon is followed", async () => {
    await reset();
    await until(() => shim.polls.size === 1, "an open poll");
    // The daemon dies: its connections drop, and every new one is refused as at a closed port.
    shim.mode = "down";
    const since = Date.now();
    shim.dropConnections();
    const connections = [];
    shim.server.on("connection", () => connections.push(Date.now()));
    // An attempt: Gecko retries a request on a dropped connection by itself, within milliseconds.
    const attempts = () => connections.filter((t, i) => i === 0 || t - connections[i - 1] > 300);
    await until(() => attempts().length >= 4, "four attempts", 60_000);
    const tries = attempts();
    const gaps = tries.slice(1).map((t, i) => t - tries[i]);
    // Never a busy loop: each retry waits, and each wait is about twice the last (1 s, 2 s, 4 s).
    assert.ok(gaps[0] >= 900 && gaps[1] >= 1800 && gaps[2] >= 3600, `gaps ${gaps}`);
    assert.ok(tries[0] - since < 5000, `first retry after ${tries[0] - since} ms`);
    // Back: the channel resumes by itself and the next write goes through.
    shim.mode = "up";
    await until(() => shim.polls.size === 1, "the poll resumed after the daemon came back", 30_000);
    assert.deepEqual(await ask("apply", { type: "tag_items", items: ["PAPERBBB"], tags: ["back"], library: "user" }),
      { result: { change: { tags_added: { PAPERBBB: ["back"] } } } });

    // A restarted daemon: a new port and a new token in daemon.json; the old one is gone.
    const restarted = await new DaemonShim().listen();
    try {
      await writeFile(daemonJson, restarted.daemonJson(), { mode: 0o600 });
      await shim.close();
      await until(() => restarted.polls.size === 1, "a poll at the restarted daemon");
      assert.deepEqual(await ask("apply", { type: "tag_items", items: ["PAPERBBB"], tags: ["restarted"], library: "user" }, { via: restarted }),
        { result: { change: { tags_added: { PAPERBBB: ["restarted"] } } } });
      // Each daemon got its own token only, and a token only after a proof on that port.
      assert.ok(restarted.requests.every((r) => r.headers.authorization === undefined || r.headers.authorization === `Bearer ${restarted.token}`));
      assert.ok(!JSON.stringify(restarted.requests).includes(shim.token));
      assert.ok(!JSON.stringify(shim.requests).includes(restarted.token));
      assert.equal(restarted.requests[0].path.startsWith("/health?challenge="), true);
      assert.deepEqual(restarted.requests.find((r) => r.path.startsWith("/plugin/"))?.headers["x-zocrates-plugin"], "0.1.0-test");
      assert.deepEqual(restarted.requests.find((r) => r.path.startsWith("/plugin/"))?.headers["x-zotero-version"], "9.0.99-stand-in");
    } finally {
      shim = restarted; // what `after` closes, and the daemon of the next test
    }
  });

  test("a listener that cannot prove it holds daemon.json's token gets no token and no request", async () => {
    const impostor = await new DaemonShim({ proof: "wrong" }).listen();
    try {
      await writeFile(daemonJson, impostor.daemonJson(), { mode: 0o600 });
      await until(() => times(impostor, /^\/health\?challenge=[0-9a-f]{32}$/, 0).length >= 2, "two challenges at the impostor", 30_000);
      assert.ok(impostor.requests.every((r) => /^\/health\?challenge=[0-9a-f]{32}$/.test(r.path) && r.headers.authorization === undefined),
        JSON.stringify(impostor.requests.map((r) => [r.path, r.headers.authorization])));
      for (const secret of [impostor.token, impostor.pluginToken, shim.token, shim.pluginToken]) {
        assert.ok(!JSON.stringify(impostor.requests).includes(secret), "a token sent to the impostor");
      }
    } finally {
      await impostor.close();
    }
    // The daemon of daemon.json again: the channel comes back to it (its wait ends on the change).
    await writeFile(daemonJson, shim.daemonJson(), { mode: 0o600 });
    await until(() => shim.polls.size === 1, "the poll back at the daemon", 30_000);
    const lines = await marionette.script("return window.__zw.debug");
    for (const token of [shim.token, shim.pluginToken, impostor.token, impostor.pluginToken]) {
      assert.ok(!lines.some((l) => l.includes(token)), "a token in the debug output");
    }
  });

  test("stop (plugin shutdown) ends the open poll at once, and the channel with it", async () => {
    await until(() => shim.polls.size === 1, "an open poll");
    const closed = shim.closedPolls;
    const started = Date.now();
    await marionette.script("return window.__zw.sandbox.ZocratesWrites.stop().then(() => true)");
    await until(() => shim.closedPolls > closed, "the poll's connection closed");
    assert.ok(Date.now() - started < 10_000, `stop took ${Date.now() - started} ms`);
    // stop() resolved once the loop had ended: nothing can poll again.
    const lines = await marionette.script("return window.__zw.debug");
    assert.match(lines.at(-1), /write channel: stopped$/);
  });

  test("end to end: writes proposed on a real zocratesd's socket reach the channel and Zotero, and undo goes the same way", async () => {
    // A Zotero data directory with the Python tests' sample library (the daemon checks keys against it),
    // Zotero 10's local API off: the plugin is the only way into Zotero.
    const zoteroDir = join(root, "e2e-zotero");
    await mkdir(join(zoteroDir, "zocrates-data"), { recursive: true });
    const built = spawnSync(python(), ["-c", "import sys; from pathlib import Path; from zoterofixture import build_zotero_dir, sample_library; build_zotero_dir(Path(sys.argv[1]), *sample_library())", zoteroDir],
      { cwd: REPO, encoding: "utf8", env: { ...process.env, PYTHONPATH: `${REPO}:${join(REPO, "tests")}` } });
    assert.equal(built.status, 0, built.stderr);
    const closed = await new Promise((resolve) => {
      const probe = net.createServer().listen(0, "127.0.0.1", () => {
        const { port } = probe.address();
        probe.close(() => resolve(port));
      });
    });
    await writeFile(join(zoteroDir, "zocrates-data", "zocrates_config.json"), JSON.stringify({ library: { local_api: false, local_api_url: `http://127.0.0.1:${closed}` } }));
    await mkdir(join(root, "run"), { recursive: true, mode: 0o700 });
    const daemon = new Zocratesd({ dataDir: zoteroDir, env: daemonEnv(root), stderr: "inherit" });
    const info = await daemon.start();
    let rpc;
    try {
      // Zotero holds the paper; the plugin starts (as at Zotero's start) on this data directory.
      await marionette.script(`const zw = window.__zw; zw.reset(); zw.addPaper("LEWIS202");
        zw.sandbox.Zotero.DataDirectory.dir = arguments[0]; zw.sandbox.ZocratesWrites.start({ version: "0.1.0-test" }); return true;`, [zoteroDir]);
      rpc = await Rpc.open(info.socket);
      await until(async () => ["ready", "error", "unavailable"].includes((await rpc.result("_zocrates/library/status", {})).state), "the library index");
      const applied = (writeId, state = "applied") => until(async () => {
        const w = await rpc.result("_zocrates/writes/get", { writeId });
        assert.ok(!["failed", "discarded"].includes(w.state), JSON.stringify(w));
        return w.state === state && w;
      }, `write ${writeId} ${state}`);
      // A tag (the person said yes in this client): planned, then applied, through the plugin.
      const tag = await rpc.result("_zocrates/writes/tag", { itemKeys: ["LEWIS202"], tags: ["review"], confirm: true });
      const tagged = await applied(tag.id);
      assert.equal(tagged.path, "plugin");
      assert.deepEqual((await zotero()).items["1/LEWIS202"].tags, ["review"]);
      // A note rendered by the daemon from Markdown, saved under its key as a child of the paper.
      const note = await rpc.result("_zocrates/writes/save_note", { markdown: "# Summary\n\nRAG combines **parametric** memory.", parentItem: "LEWIS202", confirm: true });
      const saved = await applied(note.id);
      const zotero1 = await zotero();
      const child = zotero1.items[`1/${note.operation.new_key}`];
      assert.deepEqual([child.itemType, child.parent], ["note", "LEWIS202"], JSON.stringify(saved));
      assert.match(child.note, /<strong>parametric<\/strong>/);
      // Undo of the tag: the daemon's inverse (a retag) goes through the channel and takes it off.
      await rpc.result("_zocrates/writes/undo", { writeId: tag.id });
      await applied(tag.id, "undone");
      assert.deepEqual((await zotero()).items["1/LEWIS202"].tags, []);
    } finally {
      rpc?.close();
      await marionette.script("return window.__zw.sandbox.ZocratesWrites.stop().then(() => true)");
      await daemon.stop();
    }
  });
});
