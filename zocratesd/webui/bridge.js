// bridge.js: the page's side of the page <-> Zotero plugin bridge (window.postMessage).
//
// Only the plugin can touch Zotero's window (the selection, opening an item or a PDF page), so the
// page asks it by messages `{zocrates: "bridge/1", dir, type, id?, ...}`:
// - page -> host: to window.parent when framed, else to this window (a chrome host that embeds a
//   top-level content browser listens on its contentWindow); targetOrigin "*", so a message never
//   carries anything secret (never the token);
// - host -> page: `selection` pushes, and `result` answers to our requests (matched by `id`).
// Messages without the tag, in the page's own direction (ours, when we post to ourselves), or
// (when framed) from any window but our parent are ignored.
// No answer to `hello` within HELLO_TIMEOUT_MS: the page runs standalone (a browser tab).

export const BRIDGE_TAG = "bridge/1";
export const HELLO_TIMEOUT_MS = 1000;
// How long a request (open) may wait for the host: a host that never answers must not leave the
// page waiting forever. (Writes into Zotero do not cross the bridge: the daemon hands them to the
// plugin, after the person's consent, and records them.)
const REQUEST_TIMEOUT_MS = 15_000;

export class Bridge {
  constructor(win = window) {
    this.win = win;
    this.framed = win.parent !== win;
    this.target = this.framed ? win.parent : win;
    this.hosted = false;
    this.host = null; // the hello result: {host, zoteroVersion, capabilities}
    this.onSelection = null; // (selection) => void
    this._pending = new Map();
    this._seq = 0;
    this._listener = (event) => this._receive(event);
    win.addEventListener("message", this._listener);
  }

  /** Say hello; resolves true when a host answered (the page is in Zotero), false after the timeout. */
  async start(timeoutMs = HELLO_TIMEOUT_MS) {
    try {
      this.host = await this.request("hello", {}, timeoutMs);
      this.hosted = true;
    } catch {
      this.hosted = false;
    }
    return this.hosted;
  }

  can(capability) {
    return this.hosted && Array.isArray(this.host?.capabilities) && this.host.capabilities.includes(capability);
  }

  /** Send a request and wait for its `result`: resolves with the result, rejects with an Error
   *  carrying the host's readable message. */
  request(type, fields = {}, timeoutMs = REQUEST_TIMEOUT_MS) {
    const id = `p${++this._seq}-${Date.now().toString(36)}`;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this._pending.delete(id);
        reject(new Error(`Zotero did not answer (${type})`));
      }, timeoutMs);
      this._pending.set(id, { resolve, reject, timer });
      this.target.postMessage({ ...fields, zocrates: BRIDGE_TAG, dir: "page-host", type, id }, "*");
    });
  }

  /** Ask Zotero to open a zotero:// URI (an item, a PDF at a page). */
  open(uri) {
    return this.request("open", { uri });
  }

  close() {
    this.win.removeEventListener("message", this._listener);
    for (const { timer, reject } of this._pending.values()) {
      clearTimeout(timer);
      reject(new Error("closed"));
    }
    this._pending.clear();
  }

  _receive(event) {
    const msg = event.data;
    if (!msg || typeof msg !== "object" || msg.zocrates !== BRIDGE_TAG || msg.dir !== "host-page") return;
    if (this.framed && event.source !== this.win.parent) return;
    if (msg.type === "result") {
      const waiting = this._pending.get(msg.id);
      if (!waiting) return;
      this._pending.delete(msg.id);
      clearTimeout(waiting.timer);
      if (msg.ok) waiting.resolve(msg);
      else waiting.reject(new Error(typeof msg.error === "string" && msg.error ? msg.error : "Zotero could not do it"));
    } else if (msg.type === "selection") {
      this.onSelection?.(normaliseSelection(msg));
    }
  }
}

const KEY_RE = /^[A-Z0-9]{8}$/;

/** A host's selection as `{items: [{item_key, title, uri}], collection: {key, name} | null}`,
 *  dropping whatever does not have the shape (a Zotero key is 8 characters of A-Z, 0-9). */
export function normaliseSelection(msg) {
  const items = (Array.isArray(msg.items) ? msg.items : [])
    .filter((it) => it && typeof it.key === "string" && KEY_RE.test(it.key))
    .slice(0, 100)
    .map((it) => ({ item_key: it.key, title: typeof it.title === "string" ? it.title.slice(0, 500) : "", uri: typeof it.uri === "string" ? it.uri : null }));
  const c = msg.collection;
  const collection = c && typeof c.key === "string" && KEY_RE.test(c.key) ? { key: c.key, name: typeof c.name === "string" ? c.name.slice(0, 500) : c.key } : null;
  return { items, collection };
}
