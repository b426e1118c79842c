// bridge.js: the Zotero side of the page <-> plugin bridge (/work/notes/BRIDGE.md, "bridge/1").
//
// A classic script that defines one global, `ZocratesBridge`. bootstrap.js loads it with
// Services.scriptloader.loadSubScript (into the plugin's sandbox), the preferences pane loads it
// into the preferences window, and the browser test loads it with a <script> tag into a page that
// stands in for Zotero's window. It only touches Zotero through the globals `Zotero`, `IOUtils` and
// `PathUtils` and the host window it is given, so it runs the same in all three.
//
// Two transports, one protocol. In Zotero (a XUL window) the page is in a remote <browser>: Zotero 7+
// runs web content in content processes, where the chrome host cannot reach the page's window, so a
// JSWindowActor pair (actors/) relays the messages (registerActors, from bootstrap.js). In a plain
// HTML host page (the browser test's stand-in) the page is in an <iframe> and posts to its parent.
//
//   const host = new ZocratesBridge.BridgeHost({ window, container, view: "chat" });
//   await host.start();   // finds the daemon (daemon.json, its /health proof), frames /ui/ or says how to start one
//   host.destroy();       // removes everything it added
//
// The page is unprivileged web content from the daemon (http://127.0.0.1:<port>/ui/); it can only
// ask, by message, for the two things the host offers: the selection and opening a zotero:// URI.
// Writes (a note, tags) go through the daemon, where the person consents to each, and reach Zotero
// through the write channel (writes.js). Everything the page sends is checked here as untrusted input.

/* exported ZocratesBridge */
var ZocratesBridge = (function () {
  "use strict";

  const TAG = "bridge/1";
  const HTML_NS = "http://www.w3.org/1999/xhtml";
  const CAPABILITIES = ["selection", "open"];
  /** How often an open pane rereads daemon.json: a restarted daemon has a new port and token, and
   *  a stopped one removes the file; a small local read, so a few seconds costs nothing. */
  const WATCH_INTERVAL_MS = 3000;
  /** A daemon that does not answer /health within this is treated as not running (Retry). */
  const HEALTH_TIMEOUT_MS = 3000;
  /** The random nonce of the /health challenge: 128 bits, as 32 hex digits (the daemon takes 16-128). */
  const CHALLENGE_BYTES = 16;
  /** The daemon's /health answer is ~100 bytes; a listener sending more than this is not the daemon. */
  const MAX_HEALTH_BYTES = 4096;
  /** The doctor's report is a few KB (a dozen one-line checks). */
  const MAX_DOCTOR_BYTES = 256 * 1024;
  /** /proc/<pid>/status is ~1.5 KB; read no more than this of it. */
  const MAX_PROC_STATUS_BYTES = 16384;
  /** What the daemon's HMAC covers before the nonce (protocol/http.md, "GET /health?challenge="). */
  const PROOF_LABEL = "zocratesd-health-proof:";
  /** Selection events come in bursts (shift-click, collection switch): push once they settle. */
  const SELECTION_DEBOUNCE_MS = 150;
  /** At most this many selected items go to the page (it keeps 100 as chips). */
  const MAX_SELECTION_ITEMS = 100;
  /** A note is one answer; a page sending more than this is broken, not verbose. */
  const MAX_NOTE_HTML_CHARS = 1_000_000;
  /** Request ids already answered: a page that repeats one is not obeyed twice. */
  const MAX_SEEN_IDS = 1000;
  const ACTOR = "ZocratesBridge";
  /** resource://zocrates/ is the plugin's root while it runs: where the actors' modules load from. */
  const RESOURCE_HOST = "zocrates";

  const KEY_RE = /^[A-Z0-9]{8}$/;
  // zotero://select/library/items/KEY, zotero://select/groups/<gid>/items/KEY,
  // zotero://open-pdf/(library|groups/<gid>)/items/KEY?page=N: the forms the page may ask for.
  const ZOTERO_URI_RE = /^zotero:\/\/(select|open-pdf)\/(?:library|groups\/(\d+))\/items\/([A-Z0-9]{8})(?:\?([^#]*))?$/;

  /** What the bridge could not do, said so a user understands it (goes back as `error`). */
  class BridgeError extends Error {}

  /** The daemon cannot be used from here; the message says why (shown under the help). `impostor`:
   *  something answers on the daemon's port but could not prove it is the user's daemon. */
  class NoDaemon extends Error {
    /** @param {string} message @param {{impostor?: boolean}} [options] */
    constructor(message, { impostor = false } = {}) {
      super(message);
      this.impostor = impostor;
    }
  }

  /** The version bootstrap.js recorded for this plugin (shared by Zotero's windows), or "". */
  function ownVersion() {
    const recorded = typeof Zotero !== "undefined" && /** @type {any} */ (Zotero).ZocratesPluginVersion;
    return typeof recorded === "string" ? recorded : "";
  }

  /** The doctor report as lines in `container`: one per check, its status, what to do. Text only. */
  function renderDoctor(/** @type {Element} */ container, /** @type {any} */ report) {
    const doc = container.ownerDocument;
    const list = doc.createElementNS(HTML_NS, "ul");
    list.setAttribute("class", "zocrates-doctor");
    const checks = Array.isArray(report && report.checks) ? report.checks : [];
    for (const check of checks) {
      const li = doc.createElementNS(HTML_NS, "li");
      const status = ["ok", "warn", "fail", "skip"].includes(check.status) ? check.status : "fail";
      li.setAttribute("class", `zocrates-doctor-${status}`);
      const mark = { ok: "✓", warn: "!", fail: "✗", skip: "–" }[status];
      li.textContent = `${mark} ${String(check.name)}: ${String(check.summary)}${check.fix ? `; ${String(check.fix)}` : ""}`;
      list.append(li);
    }
    const head = doc.createElementNS(HTML_NS, "p");
    head.setAttribute("class", "zocrates-doctor-head");
    // A warning fails nothing (a Zotero newer than the daemon knows, read on trust), but is said.
    const warned = checks.filter((/** @type {any} */ c) => c.status === "warn").length;
    head.textContent = !(report && report.passed) ? "zocratesd doctor: some checks failed"
      : `zocratesd doctor: all checks passed${warned ? `, ${warned} with a warning` : ""}`;
    container.replaceChildren(head, list);
  }

  function log(message) {
    Zotero.debug(`Zocrates: ${message}`);
  }

  /** @param {unknown} err */
  function logError(err) {
    Zotero.logError(err instanceof Error ? err : new Error(String(err)));
  }

  /** @param {unknown} err */
  function errorMessage(err) {
    return err instanceof Error ? err.message : String(err);
  }

  // ---- finding the daemon ------------------------------------------------------------------

  /** <Zotero data directory>/zocrates-data/daemon.json: where a running zocratesd says where it listens. */
  function daemonJsonPath() {
    return PathUtils.join(Zotero.DataDirectory.dir, "zocrates-data", "daemon.json");
  }

  /** `{path, origin, port, pid, token, signature}` from daemon.json; NoDaemon when there is none to use. */
  async function readDaemonInfo(path = daemonJsonPath()) {
    let text;
    try {
      text = await IOUtils.readUTF8(path);
    } catch (err) {
      throw new NoDaemon(`${path} does not exist (${errorName(err)})`);
    }
    let info;
    try {
      info = JSON.parse(text);
    } catch {
      throw new NoDaemon(`${path} is not valid JSON (a daemon starting?)`);
    }
    const port = info && info.http && info.http.port;
    if (!Number.isInteger(port) || port <= 0 || port > 65535) {
      throw new NoDaemon("zocratesd runs without its HTTP server (started with --no-http)");
    }
    if (typeof info.token !== "string" || !info.token) throw new NoDaemon(`${path} has no token`);
    // Always the loopback address: the origin the page is served from and the bridge checks.
    const origin = `http://127.0.0.1:${port}`;
    const pid = Number.isInteger(info.pid) && info.pid > 0 ? info.pid : null;
    // plugin_token: the write channel's own credential (writes.js), never given to the page.
    const pluginToken = typeof info.plugin_token === "string" ? info.plugin_token : "";
    const version = typeof info.version === "string" ? info.version : "";
    return { path, origin, port, pid, token: info.token, pluginToken, version, signature: `${info.pid}|${port}|${info.token}` };
  }

  // daemon.json outlives a daemon that was killed (SIGKILL, the OOM killer), and once its port is
  // free any local user can listen there and answer /health and /ui/ as the daemon would. So before
  // the page is framed with the token (and before any of its bridge calls is accepted), whatever
  // listens must prove it holds daemon.json's token: it answers GET /health?challenge=<fresh nonce>
  // with HMAC-SHA256(token, PROOF_LABEL + nonce), which only the token's holder can compute, and the
  // request carries no token. Checked on every platform, unlike the listener's owner (readable from
  // /proc/net/tcp on Linux only), and it tells the user's daemon from any other process of theirs.

  /** @typedef {{path: string, origin: string, port: number, pid: number | null, token: string, pluginToken: string, version: string, signature: string}} DaemonInfo */

  /** @param {Uint8Array} bytes */
  function hex(bytes) {
    return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  }

  /** The real uid in /proc/<pid>/status (`pid` "self": ours), or null; throws when there is no such file.
   *  A /proc file's size reads as 0, so IOUtils.readUTF8 gets nothing from it: read up to a bound. */
  async function processUid(/** @type {number | "self"} */ pid) {
    const status = new TextDecoder().decode(await IOUtils.read(`/proc/${pid}/status`, { maxBytes: MAX_PROC_STATUS_BYTES }));
    const m = /^Uid:\s+(\d+)/m.exec(status);
    return m ? Number(m[1]) : null;
  }

  /** Whether the daemon's process still runs: "running" (a process of ours has its pid), "gone" (no
   *  such process, or another user's), "unknown" (no /proc here: macOS, Windows). */
  async function daemonProcess(/** @type {number | null} */ pid) {
    if (pid === null) return "unknown";
    let own;
    try {
      own = await processUid("self");
    } catch {
      return "unknown";
    }
    if (own === null) return "unknown";
    try {
      return (await processUid(pid)) === own ? "running" : "gone";
    } catch {
      return "gone";
    }
  }

  /** The body of `response`, or null once it passes `maxBytes` (the rest is not read). */
  async function boundedText(/** @type {Response} */ response, maxBytes = MAX_HEALTH_BYTES) {
    if (!response.body) return "";
    const reader = response.body.getReader();
    const chunks = [];
    let size = 0;
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      size += value.byteLength;
      if (size > maxBytes) {
        reader.cancel().catch(() => {});
        return null;
      }
      chunks.push(value);
    }
    const all = new Uint8Array(size);
    let at = 0;
    for (const c of chunks) {
      all.set(c, at);
      at += c.byteLength;
    }
    return new TextDecoder().decode(all);
  }

  /** HMAC-SHA256(token, PROOF_LABEL + nonce) as lowercase hex: what the user's daemon answers. */
  async function expectedProof(/** @type {Window} */ win, /** @type {string} */ token, /** @type {string} */ nonce) {
    const encode = (/** @type {string} */ text) => /** @type {Uint8Array<ArrayBuffer>} */ (new TextEncoder().encode(text));
    const key = await win.crypto.subtle.importKey("raw", encode(token), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
    return hex(new Uint8Array(await win.crypto.subtle.sign("HMAC", key, encode(PROOF_LABEL + nonce))));
  }

  /** Why the /health answer is not the user's daemon's proof (null: it is). */
  async function proofProblem(/** @type {Window} */ win, /** @type {DaemonInfo} */ daemon, /** @type {string} */ nonce, /** @type {Response} */ response) {
    if (response.status !== 200) return `it answered HTTP ${response.status}`;
    const text = await boundedText(response);
    if (text === null) return `it answered more than ${MAX_HEALTH_BYTES} bytes`;
    let body;
    try {
      body = JSON.parse(text);
    } catch {
      return "its answer is not JSON";
    }
    if (!body || typeof body.proof !== "string") return "its answer has no proof";
    return body.proof === (await expectedProof(win, daemon.token, nonce)) ? null : "its proof is wrong";
  }

  /** Resolve when the listener at `daemon.origin` proves it is the daemon of daemon.json (above);
   *  else NoDaemon, saying whether daemon.json is stale. The token is never sent. */
  async function proveDaemon(/** @type {Window} */ win, /** @type {DaemonInfo} */ daemon) {
    const random = new Uint8Array(CHALLENGE_BYTES);
    win.crypto.getRandomValues(random);
    const nonce = hex(random);
    const controller = new win.AbortController();
    const timer = win.setTimeout(() => controller.abort(), HEALTH_TIMEOUT_MS);
    let problem;
    try {
      let response;
      try {
        // No credentials, no redirects: nothing of ours goes anywhere but this one request.
        response = await win.fetch(`${daemon.origin}/health?challenge=${nonce}`,
          { cache: "no-store", credentials: "omit", redirect: "error", signal: controller.signal });
      } catch (err) {
        const pid = daemon.pid === null ? "" : ` (pid ${daemon.pid})`;
        if ((await daemonProcess(daemon.pid)) === "gone") {
          throw new NoDaemon(`${daemon.path} is stale: the daemon it names${pid} is not running (it was stopped without removing the file, e.g. killed); start zocratesd again`);
        }
        throw new NoDaemon(`nothing answers at ${daemon.origin}, where the daemon${pid} should listen (${errorName(err)})`);
      }
      problem = await proofProblem(win, daemon, nonce, response);
    } catch (err) {
      if (err instanceof NoDaemon) throw err;
      problem = `its answer could not be read (${errorName(err)})`;
    } finally {
      win.clearTimeout(timer);
    }
    if (problem === null) return;
    const pid = daemon.pid === null ? "the daemon" : `the daemon (pid ${daemon.pid})`;
    const why = (await daemonProcess(daemon.pid)) === "gone"
      ? `${daemon.path} is stale: ${pid} is not running, and another program took its port`
      : `${pid} may have stopped and another program taken its port, or it is a zocratesd older than this plugin (update and restart it)`;
    throw new NoDaemon(`something that is not your zocratesd answers on port ${daemon.port}: it could not prove it holds daemon.json's token (${problem}), so nothing was sent to it and its page is not shown. ${why}`, { impostor: true });
  }

  // A daemon installed as a service (`zocratesd service install`) is started by the service manager on
  // the first connection to its Unix socket, and writes daemon.json only then: connecting to that
  // socket is how any client starts it. The path is zocratesd's (zocratesd.locations.default_socket_path):
  // "zocratesd-" + the first 12 hex digits of SHA-256(resolved data dir) + ".sock", in the user's
  // runtime dir ($XDG_RUNTIME_DIR/zocrates, else /run/user/<uid>/zocrates; on macOS
  // ~/Library/Caches/TemporaryItems/zocrates), or in /tmp/zocrates-<uid> when that path is longer than
  // a socket address allows (103 bytes).
  const MAX_SOCKET_PATH_BYTES = 103;

  /** @param {Window} win */
  async function activationSocketPath(win) {
    const Ci = Components.interfaces;
    const dir = /** @type {nsIFile} */ (Components.classes["@mozilla.org/file/local;1"].createInstance(Ci.nsIFile));
    dir.initWithPath(Zotero.DataDirectory.dir);
    dir.normalize(); // resolves symbolic links on Unix, as Python's Path.resolve() does
    const digest = new Uint8Array(await win.crypto.subtle.digest("SHA-256", /** @type {Uint8Array<ArrayBuffer>} */ (new TextEncoder().encode(dir.path))));
    const name = `zocratesd-${hex(digest.slice(0, 6))}.sock`;
    let uid = null;
    try {
      uid = await processUid("self");
    } catch {
      /* not Linux */
    }
    let runtime;
    if (Zotero.isMac) runtime = PathUtils.join(Services.dirsvc.get("Home", Ci.nsIFile).path, "Library", "Caches", "TemporaryItems", "zocrates");
    else if (Services.env.get("XDG_RUNTIME_DIR")) runtime = PathUtils.join(Services.env.get("XDG_RUNTIME_DIR"), "zocrates");
    else if (uid !== null) runtime = `/run/user/${uid}/zocrates`;
    else return null;
    const preferred = PathUtils.join(runtime, name);
    if (new TextEncoder().encode(preferred).length <= MAX_SOCKET_PATH_BYTES) return preferred;
    return uid === null ? null : `/tmp/zocrates-${uid}/${name}`;
  }

  /** Connect once to the service's socket (when there is one), which starts the daemon; true if tried. */
  async function wakeServiceDaemon(win) {
    if (typeof Components === "undefined" || Zotero.isWin) return false; // no service manager socket there
    const path = await activationSocketPath(win);
    if (!path || !(await IOUtils.exists(path))) return false;
    const Ci = Components.interfaces;
    const file = /** @type {nsIFile} */ (Components.classes["@mozilla.org/file/local;1"].createInstance(Ci.nsIFile));
    file.initWithPath(path);
    const sts = Components.classes["@mozilla.org/network/socket-transport-service;1"].getService(Ci.nsISocketTransportService);
    const transport = sts.createUnixDomainTransport(file);
    const out = transport.openOutputStream(0, 0, 0);
    // The connection is what starts the service; a moment later, close it (the daemon sees EOF).
    win.setTimeout(() => {
      try {
        out.close();
        transport.close(0);
      } catch {
        /* already closed */
      }
    }, 2000);
    log(`asked the zocratesd service to start (${path})`);
    return true;
  }

  function errorName(err) {
    return (err && (err.name || err.message)) || String(err);
  }

  // ---- zotero:// URIs, items, the selection ------------------------------------------------

  /** `{action: "select"|"open-pdf", groupID, key, page}` for a URI the page may ask for, else BridgeError. */
  function parseZoteroURI(uri) {
    const m = typeof uri === "string" ? ZOTERO_URI_RE.exec(uri) : null;
    if (!m) throw new BridgeError(`not a Zotero item link: ${String(uri).slice(0, 200)}`);
    const [, action, group, key, query] = m;
    let page = null;
    if (query) {
      const raw = new URLSearchParams(query).get("page");
      if (raw !== null) {
        page = Number(raw);
        if (!Number.isInteger(page) || page < 1) throw new BridgeError(`not a page number: ${raw.slice(0, 20)}`);
      }
    }
    return { action, groupID: group ? Number(group) : null, key, page };
  }

  function libraryIDFor(groupID) {
    if (groupID === null) return Zotero.Libraries.userLibraryID;
    const libraryID = Zotero.Groups.getLibraryIDFromGroupID(groupID);
    if (!libraryID) throw new BridgeError(`group ${groupID} is not in this Zotero`);
    return libraryID;
  }

  /** The item a parsed URI names, or BridgeError. */
  async function itemFor(parsed) {
    const item = await Zotero.Items.getByLibraryAndKeyAsync(libraryIDFor(parsed.groupID), parsed.key);
    if (!item) throw new BridgeError(`item ${parsed.key} is not in this Zotero library`);
    return item;
  }

  /** The zotero://select URI of an item or a collection (what the page and Zotero's links use). */
  function selectURI(libraryID, kind, key) {
    const groupID = libraryID === Zotero.Libraries.userLibraryID ? null : Zotero.Groups.getGroupIDFromLibraryID(libraryID);
    return `zotero://select/${groupID ? `groups/${groupID}` : "library"}/${kind}/${key}`;
  }

  function mainPane() {
    const win = Zotero.getMainWindow();
    return win && win.ZoteroPane ? { win, pane: win.ZoteroPane } : null;
  }

  // Zotero 10 replaced the single-selection getters with plural ones (several collections can be
  // selected); Zotero 7 to 9 only have the singular ones.
  function selectedLibraryID(pane) {
    if (typeof pane.getSelectedLibraryIDs === "function") return pane.getSelectedLibraryIDs()[0] ?? Zotero.Libraries.userLibraryID;
    return pane.getSelectedLibraryID();
  }

  function selectedCollection(pane) {
    if (typeof pane.getSelectedCollections === "function") return pane.getSelectedCollections()[0] || null;
    return pane.getSelectedCollection() || null;
  }

  /** The items the user is looking at: the library tab's selection, or the item open in a reader tab. */
  function selectedItems(win, pane) {
    const tabs = win.Zotero_Tabs;
    if (tabs && tabs.selectedType === "reader") {
      const reader = Zotero.Reader.getByTabID(tabs.selectedID);
      const item = reader && reader.itemID ? Zotero.Items.get(reader.itemID) : null;
      return item ? [item] : [];
    }
    return pane.getSelectedItems() || [];
  }

  /** The `selection` message body: top-level items (a selected PDF counts as its paper), no notes. */
  function selectionSnapshot() {
    const main = mainPane();
    if (!main) return { libraryID: null, items: [], collection: null };
    const { win, pane } = main;
    const seen = new Set();
    const items = [];
    for (const selected of selectedItems(win, pane)) {
      const item = selected.isRegularItem() ? selected : (selected.parentItem || selected);
      if (item.isNote() || seen.has(item.id)) continue;
      seen.add(item.id);
      items.push({ key: item.key, title: item.getDisplayTitle(), uri: selectURI(item.libraryID, "items", item.key) });
      if (items.length >= MAX_SELECTION_ITEMS) break;
    }
    const c = selectedCollection(pane);
    const collection = c ? { key: c.key, name: c.name, uri: selectURI(c.libraryID, "collections", c.key) } : null;
    return { libraryID: selectedLibraryID(pane), items, collection };
  }

  // ---- notes ---------------------------------------------------------------------------------

  // What an answer rendered as a note may contain; everything else is dropped (scripts, styles,
  // forms, media) or unwrapped (unknown inline elements keep their text).
  const NOTE_TAGS = new Set(["p", "br", "h1", "h2", "h3", "h4", "h5", "h6", "ul", "ol", "li", "blockquote", "pre",
    "code", "em", "strong", "b", "i", "u", "s", "sub", "sup", "a", "span", "div", "hr",
    "table", "thead", "tbody", "tr", "th", "td"]);
  const DROPPED_TAGS = new Set(["script", "style", "iframe", "object", "embed", "template", "noscript", "svg", "math",
    "form", "input", "button", "textarea", "select", "img", "video", "audio", "link", "meta", "base", "head", "title"]);
  const VOID_TAGS = new Set(["br", "hr"]);

  function noteLinkAllowed(href) {
    return ZOTERO_URI_RE.test(href) || /^https?:\/\/[^\s]+$/i.test(href);
  }

  function escapeHTML(text) {
    return String(text).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c] || c);
  }

  /** The page's html reduced to the allowlist above, serialised by us (never the page's markup). */
  function sanitizeNoteHTML(win, html) {
    const doc = new win.DOMParser().parseFromString(`<!DOCTYPE html><body>${html}</body>`, "text/html");
    const out = [];
    const walk = (node) => {
      for (const child of Array.from(node.childNodes)) {
        if (child.nodeType === 3) {
          out.push(escapeHTML(child.nodeValue));
        } else if (child.nodeType === 1) {
          const el = /** @type {Element} */ (child);
          const tag = el.localName;
          if (DROPPED_TAGS.has(tag)) continue;
          if (!NOTE_TAGS.has(tag)) {
            walk(el);
            continue;
          }
          let attrs = "";
          if (tag === "a") {
            const href = el.getAttribute("href") || "";
            if (!noteLinkAllowed(href)) {
              walk(el);
              continue;
            }
            attrs = ` href="${escapeHTML(href)}"`;
          }
          out.push(`<${tag}${attrs}>`);
          if (VOID_TAGS.has(tag)) continue;
          walk(el);
          out.push(`</${tag}>`);
        }
      }
    };
    walk(doc.body);
    return out.join("");
  }

  // ---- the actors (Zotero only) ---------------------------------------------------------------

  /** @returns {nsIResProtocolHandler} */
  function resourceHandler() {
    return /** @type {any} */ (Services.io.getProtocolHandler("resource")).QueryInterface(Components.interfaces.nsIResProtocolHandler);
  }

  /** Register the JSWindowActor pair that relays messages for our <browser>s (bootstrap startup). */
  function registerActors(rootURI) {
    resourceHandler().setSubstitution(RESOURCE_HOST, Services.io.newURI(rootURI));
    ChromeUtils.registerWindowActor(ACTOR, {
      parent: { esModuleURI: `resource://${RESOURCE_HOST}/actors/ZocratesBridgeParent.sys.mjs` },
      child: {
        esModuleURI: `resource://${RESOURCE_HOST}/actors/ZocratesBridgeChild.sys.mjs`,
        // Capture: the page posts to its own window, and the actor listens where its events pass.
        events: { message: { capture: true } },
      },
      // Only the plugin's own browsers, only the daemon's loopback origin.
      messageManagerGroups: ["zocrates"],
      matches: ["http://127.0.0.1/*"],
    });
  }

  /** Undo registerActors (bootstrap shutdown). */
  function unregisterActors() {
    try {
      ChromeUtils.unregisterWindowActor(ACTOR);
    } catch {
      /* not registered */
    }
    resourceHandler().setSubstitution(RESOURCE_HOST, /** @type {any} */ (null));
  }

  // ---- the host ------------------------------------------------------------------------------

  class BridgeHost {
    /**
     * @param {object} options
     * @param {Window} options.window the window that holds `container` (Zotero's main or preferences window)
     * @param {Element} options.container where the frame or the no-daemon message goes
     * @param {"chat"|"prefs"} [options.view] `prefs`: the page's "Chat Sessions & Storage" view only
     * @param {string} [options.pluginVersion] this plugin's version (default: what bootstrap.js recorded
     *   on the Zotero object, which the preferences window shares), checked against the daemon's
     */
    constructor({ window, container, view = "chat", pluginVersion = ownVersion() }) {
      this.window = window;
      this.pluginVersion = pluginVersion;
      this.doc = container.ownerDocument;
      this.container = container;
      this.view = view;
      this.state = "idle"; // idle | connecting | ready | no-daemon | destroyed
      /** @type {DaemonInfo | null} */
      this.daemon = null;
      /** @type {any} */
      this.frame = null;
      this.remote = false;
      this.helloed = false;
      this.lastSelection = "";
      this._seen = new Set();
      this._selectionTimer = 0;
      this._watchTimer = 0;
      this._unwatchSelection = null;
      this._starting = null;
      this._onMessage = (/** @type {Event} */ event) => this._receive(/** @type {MessageEvent} */ (event));
      this._onActorMessage = (/** @type {Event} */ event) => {
        const { origin, data } = /** @type {CustomEvent} */ (event).detail || {};
        this._accept(origin, data);
      };
      this.window.addEventListener("message", this._onMessage);
    }

    /** Find the daemon and show the page, or the no-daemon message. Safe to call again (Retry). */
    start() {
      if (this.state === "destroyed") return Promise.resolve();
      if (!this._starting) {
        this._starting = this._start().finally(() => {
          this._starting = null;
        });
      }
      return this._starting;
    }

    async _start() {
      this.state = "connecting";
      let daemon;
      try {
        daemon = await readDaemonInfo();
        // The page, and with it the token, only for a listener that proved it is the user's daemon.
        await proveDaemon(this.window, daemon);
      } catch (err) {
        if (this.state === "destroyed") return;
        if (!(err instanceof NoDaemon)) logError(err);
        let detail = err instanceof NoDaemon ? err.message : String(err);
        try {
          if (await wakeServiceDaemon(this.window)) detail += "; asked the installed zocratesd service to start, waiting for it";
        } catch (wakeErr) {
          log(`could not reach the service's socket: ${errorMessage(wakeErr)}`);
        }
        if (this.state === "destroyed") return;
        this._showNoDaemon(detail, err instanceof NoDaemon && err.impostor);
        this._watch();
        return;
      }
      if (this.state === "destroyed") return;
      this.daemon = daemon;
      this._showFrame(daemon);
      if (this.view === "chat" && !this._unwatchSelection) this._unwatchSelection = watchSelection(() => this.selectionChanged());
      this._watch();
    }

    /** Remove the frame, the message, the timers and the listeners: nothing of ours stays. */
    destroy() {
      this.state = "destroyed";
      this.window.removeEventListener("message", this._onMessage);
      this.window.clearTimeout(this._selectionTimer);
      this.window.clearInterval(this._watchTimer);
      if (this._unwatchSelection) this._unwatchSelection();
      this._unwatchSelection = null;
      this._removeFrame();
      this.container.replaceChildren();
    }

    /** The Zotero selection changed: push it to the page once the burst settles. */
    selectionChanged() {
      if (this.state !== "ready") return;
      this.window.clearTimeout(this._selectionTimer);
      this._selectionTimer = this.window.setTimeout(() => this.pushSelection(false), SELECTION_DEBOUNCE_MS);
    }

    /** Send the selection (`force`: even when unchanged, as after hello). */
    pushSelection(force = true) {
      if (!this.helloed) return;
      let snapshot;
      try {
        snapshot = selectionSnapshot();
      } catch (err) {
        logError(err);
        return;
      }
      const json = JSON.stringify(snapshot);
      if (!force && json === this.lastSelection) return;
      this.lastSelection = json;
      this._post({ type: "selection", ...snapshot });
    }

    // Reread daemon.json every few seconds: a new daemon (pid, port or token changed) reloads the
    // page with its token; a vanished one shows the message; one that came back replaces the message.
    // A framed daemon that died without removing daemon.json (killed) leaves its port to whoever
    // takes it, and the frame's next load would be theirs: the pane starts over (proving again) once
    // its process is gone, or, where that cannot be seen (no /proc), once its port stops proving.
    _watch() {
      this.window.clearInterval(this._watchTimer);
      this._watchTimer = this.window.setInterval(async () => {
        if (this._starting || this.state === "destroyed") return;
        let signature = null;
        try {
          signature = (await readDaemonInfo()).signature;
        } catch {
          /* no daemon.json: a stopped daemon */
        }
        if (this.state === "ready" && signature !== (this.daemon && this.daemon.signature)) {
          log(`daemon changed (${signature ? "restarted" : "stopped"}), reconnecting`);
          this.start();
        } else if (this.state === "ready" && this.daemon && !(await this._stillProven(this.daemon))) {
          if (this._starting || this.state !== "ready") return;
          log("the framed daemon is gone, reconnecting");
          this.start();
        } else if (this.state === "no-daemon" && signature) {
          this.start();
        }
      }, WATCH_INTERVAL_MS);
    }

    /** Whether the framed daemon still runs (a quiet check; false only when it is surely gone). */
    async _stillProven(/** @type {DaemonInfo} */ daemon) {
      const running = await daemonProcess(daemon.pid);
      if (running !== "unknown") return running === "running";
      try {
        await proveDaemon(this.window, daemon);
        return true;
      } catch (err) {
        // Not answering may be a busy daemon; answering without the proof is not the daemon.
        return !(err instanceof NoDaemon && err.impostor);
      }
    }

    /** @param {DaemonInfo} daemon */
    _frameURL(daemon) {
      const query = this.view === "prefs" ? "?view=prefs" : "";
      // The token rides in the fragment (never sent to the server); the page moves it to sessionStorage.
      return `${daemon.origin}/ui/${query}#token=${encodeURIComponent(daemon.token)}`;
    }

    /** @param {DaemonInfo} daemon */
    _showFrame(daemon) {
      this._removeFrame();
      this.helloed = false;
      this.lastSelection = "";
      this._seen.clear();
      let frame;
      if (typeof this.doc.createXULElement === "function") {
        // Zotero: a remote content <browser> (its page runs in a content process, as Zotero's own
        // feed abstract and web pages do); the group is what our actors are registered for.
        frame = this.doc.createXULElement("browser");
        frame.setAttribute("type", "content");
        frame.setAttribute("remote", "true");
        frame.setAttribute("maychangeremoteness", "true");
        frame.setAttribute("messagemanagergroup", "zocrates");
        frame.setAttribute("disableglobalhistory", "true");
        frame.setAttribute("flex", "1");
        frame.addEventListener("ZocratesBridge:message", this._onActorMessage);
        this.remote = true;
      } else {
        frame = this.doc.createElementNS(HTML_NS, "iframe");
        this.remote = false;
      }
      frame.setAttribute("class", "zocrates-frame");
      frame.setAttribute("src", this._frameURL(daemon));
      const notice = this._versionNotice(daemon);
      if (notice) this.container.replaceChildren(notice, frame);
      else this.container.replaceChildren(frame);
      this.frame = frame;
      this.state = "ready";
    }

    /** A plugin of another version than the daemon's would talk to it in ways it may not know:
     *  say so, and how to get the plugin that matches (the page still shows, from the daemon). */
    _versionNotice(/** @type {DaemonInfo} */ daemon) {
      if (!this.pluginVersion || !daemon.version || daemon.version === this.pluginVersion) return null;
      const doc = this.doc;
      const box = doc.createElementNS(HTML_NS, "div");
      box.setAttribute("class", "zocrates-version-notice");
      box.setAttribute("role", "alert");
      box.setAttribute("style", "padding: 6px 8px; border-bottom: 1px solid #c90; background: #fff6d5; color: #000;");
      const code = doc.createElementNS(HTML_NS, "code");
      code.textContent = "zocratesd plugin";
      box.append(
        `This Zocrates plugin is ${this.pluginVersion}, but zocratesd is ${daemon.version}. To update it, run `,
        code,
        " in a terminal and install the file it writes: Tools → Plugins → the gear icon → Install Plugin From File.",
      );
      return box;
    }

    /** The daemon's `zocratesd doctor` report (GET /doctor), or null when none can be had. */
    async doctorReport() {
      const daemon = this.daemon;
      if (this.state !== "ready" || !daemon) return null;
      const response = await this.window.fetch(`${daemon.origin}/doctor`, {
        headers: { Authorization: `Bearer ${daemon.token}` }, redirect: "error", credentials: "omit",
      });
      if (!response.ok) throw new Error(`the daemon answered /doctor with HTTP ${response.status}`);
      const text = await boundedText(response, MAX_DOCTOR_BYTES);
      if (text === null) throw new Error(`the daemon's /doctor answer is larger than ${MAX_DOCTOR_BYTES} bytes`);
      const body = JSON.parse(text);
      return body && typeof body.report === "object" ? body.report : null;
    }

    _removeFrame() {
      if (!this.frame) return;
      this.frame.removeEventListener("ZocratesBridge:message", this._onActorMessage);
      this.frame.remove();
      this.frame = null;
    }

    /** @param {string} detail @param {boolean} impostor something answered that is not the user's daemon */
    _showNoDaemon(detail, impostor = false) {
      this._removeFrame();
      this.state = "no-daemon";
      const doc = this.doc;
      const el = (/** @type {string} */ tag, /** @type {string | null} */ l10nID, /** @type {string} */ text, /** @type {string} */ cls = "") => {
        const node = doc.createElementNS(HTML_NS, tag);
        if (l10nID) node.setAttribute("data-l10n-id", l10nID);
        if (cls) node.setAttribute("class", cls);
        node.textContent = text; // English until Fluent (Zotero) translates the data-l10n-id
        return node;
      };
      const box = el("div", null, "", "zocrates-no-daemon");
      box.setAttribute("role", "status");
      const list = el("ul", null, "");
      const step = (/** @type {string} */ l10nID, /** @type {string} */ text, /** @type {string} */ command) => {
        const li = el("li", null, "");
        li.append(el("span", l10nID, text), " ", el("code", null, command));
        return li;
      };
      list.append(
        step("zocrates-no-daemon-service", "Install it as a service (Zotero then starts it when this pane opens):", "zocratesd service install"),
        step("zocrates-no-daemon-dev", "Or, in a clone of the zocratesd repository, run it in a terminal:", "./dev serve"),
      );
      const retry = el("button", "zocrates-no-daemon-retry", "Retry", "zocrates-retry");
      retry.setAttribute("type", "button");
      retry.addEventListener("click", () => this.start());
      box.append(
        impostor
          ? el("h2", "zocrates-impostor-title", "Something that is not your zocratesd answers on its port")
          : el("h2", "zocrates-no-daemon-title", "No zocratesd running"),
        impostor
          ? el("p", "zocrates-impostor-explain", "Its page is not shown and nothing was sent to it. Start zocratesd (it takes another port), then press Retry:")
          : el("p", "zocrates-no-daemon-explain", "The Zocrates chat needs the zocratesd daemon on this computer. Start it, then press Retry:"),
        list,
        retry,
        el("p", null, detail, "zocrates-no-daemon-detail"),
      );
      this.container.replaceChildren(box);
    }

    // ---- messages ----

    _post(message) {
      if (!this.frame || !this.daemon) return;
      const full = { ...message, zocrates: TAG, dir: "host-page" };
      try {
        if (this.remote) {
          const actor = this.frame.browsingContext?.currentWindowGlobal?.getActor(ACTOR);
          actor?.sendAsyncMessage("ZocratesBridge:toPage", { message: full, origin: this.daemon.origin });
        } else {
          this.frame.contentWindow?.postMessage(full, this.daemon.origin);
        }
      } catch (err) {
        // The page is navigating (no window global yet): it says hello again once loaded.
        log(`cannot post to the page: ${errorMessage(err)}`);
      }
    }

    /** A postMessage to the host window: the page framed by an HTML host page posts to its parent. */
    _receive(/** @type {MessageEvent} */ event) {
      if (this.remote || !this.frame || event.source !== this.frame.contentWindow) return;
      let data;
      try {
        // A plain copy: no getters or prototypes of the page's run here.
        data = JSON.parse(JSON.stringify(event.data));
      } catch {
        return;
      }
      this._accept(event.origin, data);
    }

    /** A message from the page, by either transport, with the origin it came from: only while the
     *  frame shows a daemon that proved itself (a gone one's frame is removed by the watch). */
    _accept(origin, msg) {
      if (!this.daemon || !this.frame || origin !== this.daemon.origin) return;
      if (!msg || typeof msg !== "object" || msg.zocrates !== TAG || msg.dir !== "page-host") return;
      const id = typeof msg.id === "string" ? msg.id.slice(0, 200) : null;
      if (id !== null) {
        if (this._seen.has(id)) return;
        if (this._seen.size >= MAX_SEEN_IDS) this._seen.clear();
        this._seen.add(id);
      }
      this._handle(msg, id).catch(logError);
    }

    async _handle(msg, id) {
      const reply = (/** @type {object} */ fields) => {
        if (id !== null) this._post({ type: "result", id, ...fields });
      };
      try {
        switch (msg.type) {
          case "hello":
            this.helloed = true;
            reply({ ok: true, host: "zotero", zoteroVersion: String(Zotero.version), capabilities: CAPABILITIES });
            this.pushSelection(true);
            return;
          case "open":
            await openURI(msg.uri);
            reply({ ok: true });
            return;
          case "reconnect":
            // The page lost the daemon (a 401 after a restart): reread daemon.json and reload.
            reply({ ok: true });
            this.window.setTimeout(() => this.start(), 0);
            return;
          default:
            reply({ ok: false, error: `Zotero does not know the request "${String(msg.type).slice(0, 50)}"` });
        }
      } catch (err) {
        if (!(err instanceof BridgeError)) logError(err);
        reply({ ok: false, error: err instanceof BridgeError ? err.message : `Zotero could not do it: ${errorMessage(err)}` });
      }
    }
  }

  /** Open an item (select it in the library) or a PDF at a page, as Zotero's own zotero:// links do. */
  async function openURI(uri) {
    const parsed = parseZoteroURI(uri);
    const item = await itemFor(parsed);
    const main = mainPane();
    if (!main) throw new BridgeError("Zotero's main window is closed");
    if (parsed.action === "select") {
      await main.pane.selectItem(item.id);
      return;
    }
    // A citation names the paper; its PDF is its best attachment (a URI may also name the PDF itself).
    const attachment = item.isFileAttachment() ? item : await item.getBestAttachment();
    if (!attachment) throw new BridgeError(`"${item.getDisplayTitle()}" has no PDF in Zotero`);
    await Zotero.Reader.open(attachment.id, parsed.page ? { pageIndex: parsed.page - 1 } : undefined);
  }

  /** @param {number} libraryID */
  /** Call `onChange` when the item list, the collection tree or the selected tab changes; returns the undo. */
  function watchSelection(onChange) {
    const main = mainPane();
    const undo = [];
    const listen = (/** @type {any} */ view) => {
      if (view && view.onSelect && typeof view.onSelect.addListener === "function") {
        view.onSelect.addListener(onChange);
        undo.push(() => view.onSelect.removeListener(onChange));
      }
    };
    if (main) {
      listen(main.pane.itemsView);
      listen(main.pane.collectionsView);
    }
    // Switching to a reader tab (its paper becomes the selection) or back.
    const observerID = Zotero.Notifier.registerObserver({
      notify: (/** @type {string} */ event) => {
        if (event === "select" || event === "close") onChange();
      },
    }, ["tab"], "zocrates-selection");
    undo.push(() => Zotero.Notifier.unregisterObserver(observerID));
    return () => undo.forEach((fn) => fn());
  }

  return {
    TAG,
    CAPABILITIES,
    KEY_RE,
    MAX_NOTE_HTML_CHARS,
    registerActors,
    unregisterActors,
    BridgeHost,
    BridgeError,
    renderDoctor,
    NoDaemon,
    daemonJsonPath,
    readDaemonInfo,
    proveDaemon,
    boundedText,
    parseZoteroURI,
    sanitizeNoteHTML,
    selectionSnapshot,
    openURI,
  };
})();
