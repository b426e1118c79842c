// zocrates-client.mjs: THE JavaScript client of zocratesd's HTTP shim (protocol/http.md), used by
// the sidebar web app (zocratesd/webui/, which imports it as ./zocrates-client.mjs: the shim serves
// this file at /ui/zocrates-client.mjs) and by the Zotero plugin (clients/zotero/zocrates-client.mjs
// is a link to this file).
//
//   import { connect } from "./zocrates-client.mjs";
//   const client = await connect({ daemonJsonPath });   // <zotero-data-dir>/zocrates-data/daemon.json
//   const { session } = await client.createSession("New Chat");
//   const view = new TurnView();
//   for await (const event of client.chat({ prompt, sessionId: session.id }, { signal })) view.feed(event);
//
// The page, same-origin with the API, makes its client directly:
// `new ZocratesClient({ baseUrl: location.origin, token })`.
//
// No dependencies: the platform's fetch, ReadableStream and TextDecoder (Node 18+, Firefox/Zotero 7).
// daemon.json is read with `readFile` (node:fs by default; the plugin passes IOUtils.readUTF8).

/** The daemon is not running (no daemon.json, HTTP off, or nothing listening on its port). */
export class DaemonNotRunning extends Error {
  constructor(message, options) {
    super(message, options);
    this.name = "DaemonNotRunning";
  }
}

/** The daemon answered with an error: `status` (HTTP), `code` (stable string), `message`. */
export class ZocratesHttpError extends Error {
  constructor(status, code, message, body) {
    super(`${code}: ${message}`);
    this.name = "ZocratesHttpError";
    this.status = status;
    this.code = code;
    this.body = body;
  }
}

async function defaultReadFile(path) {
  const fs = await import("node:fs/promises");
  return fs.readFile(path, "utf8");
}

/** Read daemon.json: `{baseUrl, token, info}`; DaemonNotRunning when there is none to use. */
export async function readDaemonInfo(daemonJsonPath, { readFile = defaultReadFile } = {}) {
  let text;
  try {
    text = await readFile(daemonJsonPath);
  } catch (err) {
    throw new DaemonNotRunning(`zocratesd is not running: cannot read ${daemonJsonPath} (${err.code || err.name || err})`, { cause: err });
  }
  let info;
  try {
    info = JSON.parse(text);
  } catch (err) {
    throw new DaemonNotRunning(`zocratesd is not running: ${daemonJsonPath} is not valid JSON (a daemon starting?)`, { cause: err });
  }
  if (!info || !info.http || !info.token) {
    throw new DaemonNotRunning("zocratesd is running without its HTTP shim (started with --no-http)");
  }
  return { baseUrl: `http://${info.http.host}:${info.http.port}`, token: info.token, info };
}

/** Find the daemon through daemon.json and return a client (no request is made). */
export async function connect({ daemonJsonPath, readFile, fetch: fetchImpl } = {}) {
  const { baseUrl, token } = await readDaemonInfo(daemonJsonPath, { readFile });
  return new ZocratesClient({ baseUrl, token, fetch: fetchImpl });
}

/** Parse a text/event-stream body into its `data:` payloads, one JSON object per event. */
export async function* parseSse(body, { signal } = {}) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  try {
    for (;;) {
      if (signal?.aborted) throw signal.reason ?? new DOMException("aborted", "AbortError");
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true }).replace(/\r\n?/g, "\n");
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const data = block.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).replace(/^ /, ""));
        if (!data.length) continue;
        // Events already received are not handed out after an abort either.
        if (signal?.aborted) throw signal.reason ?? new DOMException("aborted", "AbortError");
        yield JSON.parse(data.join("\n"));
      }
    }
  } finally {
    reader.releaseLock?.();
    // Stop reading: the turn goes on in the daemon and is persisted; reload with getSession().
    await body.cancel?.().catch(() => {});
  }
}

/** One readable line for a `progress` event of a turn's stream (protocol/http.md: `kind` is
 *  `tool_call`, `round`, `tool_result` or `checkpoint_answered`); null for a kind it does not know. */
export function progressLine(event) {
  switch (event?.kind) {
    case "tool_call": {
      const query = typeof event.args?.query === "string" ? event.args.query : "";
      if (event.name === "search_library") return query ? `Searching your library for “${query}”` : "Searching your library";
      return `Calling ${event.name}`;
    }
    case "round": {
      const lines = typeof event.text === "string" ? event.text.split("\n").filter((l) => l.trim()) : [];
      if (lines.length) return lines.at(-1);
      const r = event.round || {};
      return `Round ${r.n ?? "?"}: searched “${r.aspect ?? ""}” (${r.hits ?? 0} passage${r.hits === 1 ? "" : "s"})`;
    }
    case "tool_result":
      if (event.failed) return `${event.name} failed: ${event.error || "no reason given"}`;
      if (Array.isArray(event.passages)) return `Found ${event.passages.length} passage${event.passages.length === 1 ? "" : "s"}`;
      return `${event.name} answered`;
    case "checkpoint_answered": {
      const r = event.response || {};
      if (r.action === "synthesize") return "Answering from what was found";
      return r.guidance ? `Searching further, first for “${r.guidance}”` : "Searching further";
    }
    default:
      return null;
  }
}

/** What a turn's events add up to, for a UI that shows it while it runs: `feed()` each event of
 *  `chat()` / `resume()` and read `answer`, `thought`, `progress` (one line per research round),
 *  `checkpoint`, and at the end `stopReason`, `session` (the UI session after the turn) or `error`. */
export class TurnView {
  constructor() {
    this.invocationId = null;
    this.answer = "";
    this.thought = "";
    this.progress = []; // readable lines: tool calls, one per research round, results
    this.passages = []; // the last search's numbered passages (`tool_result`), for links to PDF pages
    this._lineAt = new Map();
    this.checkpoint = null; // {invocation_id, interrupt_id, message, payload} when the turn paused
    this.stopReason = null; // "end_turn" | "checkpoint" | "cancelled" | ... once `done` came
    this.session = null;
    this.error = null; // {code, message} when the turn failed after it started
    this.droppedEvents = 0;
  }

  get ended() {
    return this.stopReason !== null || this.error !== null;
  }

  /** Add one event; returns whether it changed what a UI shows. Unknown event types are ignored
   *  (a newer daemon may send more). */
  feed(event) {
    if (!event || typeof event !== "object") return false;
    if (event.invocation_id && !this.invocationId) this.invocationId = event.invocation_id;
    switch (event.type) {
      case "parts":
        for (const part of event.parts || []) {
          if (typeof part?.text !== "string") continue;
          if (part.thought) this.thought += part.text;
          else this.answer += part.text;
        }
        return true;
      case "progress": {
        if (event.kind === "tool_result" && Array.isArray(event.passages) && event.passages.length) {
          this.passages = event.passages; // what the answer's [n] cite: item, attachment, page
        }
        const line = progressLine(event);
        if (line === null) return false;
        // One line per round, even if an event about a round came twice.
        const key = event.kind === "round" ? `round ${event.call_id} ${event.round?.n}` : null;
        if (key !== null && this._lineAt.has(key)) this.progress[this._lineAt.get(key)] = line;
        else {
          if (key !== null) this._lineAt.set(key, this.progress.length);
          this.progress.push(line);
        }
        return true;
      }
      case "request_input":
        this.checkpoint = { invocation_id: event.invocation_id, interrupt_id: event.interrupt_id, message: event.message, payload: event.payload };
        return true;
      case "done":
        this.stopReason = event.stop_reason || "end_turn";
        this.session = event.session || null;
        if (event.checkpoint) this.checkpoint = event.checkpoint;
        else if (this.session && "pending_hitl" in this.session) this.checkpoint = this.session.pending_hitl;
        this.droppedEvents = event.dropped_events || 0;
        return true;
      case "error":
        this.error = { code: event.code || "internal", message: event.message || "the turn failed" };
        this.droppedEvents = event.dropped_events || 0;
        return true;
      default:
        return false;
    }
  }
}

export class ZocratesClient {
  constructor({ baseUrl, token, fetch: fetchImpl }) {
    this.baseUrl = baseUrl.replace(/\/$/, "");
    this.token = token;
    this._fetch = fetchImpl || globalThis.fetch.bind(globalThis);
  }

  async _send(method, path, body, { signal, accept = "application/json" } = {}) {
    const headers = { Accept: accept };
    if (this.token) headers.Authorization = `Bearer ${this.token}`;
    const init = { method, headers, signal };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await this._fetch(this.baseUrl + path, init);
    } catch (err) {
      if (err?.name === "AbortError" || signal?.aborted) throw err;
      throw new DaemonNotRunning(`zocratesd is not running: nothing answers at ${this.baseUrl} (${err.cause?.code || err.message})`, { cause: err });
    }
    if (!response.ok) {
      let payload = null;
      try {
        payload = await response.json();
      } catch {
        /* not JSON: keep the status */
      }
      const error = payload?.error || {};
      throw new ZocratesHttpError(response.status, error.code || `http_${response.status}`, error.message || response.statusText, payload);
    }
    return response;
  }

  async _json(method, path, body, options) {
    return (await this._send(method, path, body, options)).json();
  }

  /** `{status}` without the token; DaemonNotRunning when nothing answers. */
  health(options) {
    return this._json("GET", "/health", undefined, options);
  }

  /** The startup handshake: `{protocol_version, version, capabilities, startup_maintenance}`. */
  register(client = {}, options) {
    return this._json("POST", "/register", client, options);
  }

  /** `{sessions: [{id, title, created_at, updated_at}]}`, oldest first. */
  listSessions(options) {
    return this._json("GET", "/sessions", undefined, options);
  }

  /** `{session}` (the UI session). */
  createSession(title, options) {
    return this._json("POST", "/sessions", title === undefined ? {} : { title }, options);
  }

  /** `{session: {id, title, created_at, updated_at, messages, pending_hitl}}`. */
  getSession(sessionId, options) {
    return this._json("GET", `/sessions/${encodeURIComponent(sessionId)}`, undefined, options);
  }

  deleteSession(sessionId, options) {
    return this._json("DELETE", `/sessions/${encodeURIComponent(sessionId)}`, undefined, options);
  }

  /** `{session, restored: {mode, active_context_items, snippets, text, collection}}`. */
  rewind(sessionId, invocationId, options) {
    return this._json("POST", `/sessions/${encodeURIComponent(sessionId)}/rewind`, { invocation_id: invocationId }, options);
  }

  /** `{format, text, count, keys, missing, style}`: the bibliography of what the session's answers
   *  cite (one answer's with `invocationId`), as text in a CSL style (APA unless `style` names one
   *  Zotero has installed), or `format` "bibtex", "biblatex", "csl-json". */
  bibliography(sessionId, { format = "text", style, invocationId } = {}, options) {
    const q = new URLSearchParams({ format });
    if (style) q.set("style", style);
    if (invocationId) q.set("invocation_id", invocationId);
    return this._json("GET", `/sessions/${encodeURIComponent(sessionId)}/bibliography?${q}`, undefined, options);
  }

  /** `{options: [{id, name, description, category, current, choices: [{value, name, description}]}]}`:
   *  the session's settings (scope, model, research_budget, compaction, citation_style) and their choices. */
  sessionSettings(sessionId, options) {
    return this._json("GET", `/sessions/${encodeURIComponent(sessionId)}/settings`, undefined, options);
  }

  /** Change settings of a session (`{citation_style: "pandoc"}`): the same shape as sessionSettings();
   *  a value not among the choices throws 422 `invalid_input`. */
  updateSessionSettings(sessionId, changes, options) {
    return this._json("PATCH", `/sessions/${encodeURIComponent(sessionId)}/settings`, changes, options);
  }

  /** Rename: `{session}` (the UI session with its new title). */
  renameSession(sessionId, title, options) {
    return this._json("PATCH", `/sessions/${encodeURIComponent(sessionId)}`, { title }, options);
  }

  /** Stop the session's running turn: `{cancelled}` (false when none ran). The turn's own stream
   *  then ends with `done` whose `stop_reason` is `cancelled`; the session stays usable. */
  cancel(sessionId, options) {
    return this._json("POST", `/sessions/${encodeURIComponent(sessionId)}/cancel`, undefined, options);
  }

  /** A one-time code for the web app's address (`/ui/#code=...`): `{code, expires_in_s}`. */
  mintCode(options) {
    return this._json("POST", "/auth/code", {}, options);
  }

  /** The token for a one-time code (needs no token: a client made with `token: null` may ask):
   *  `{token}`; a code used already or expired is a ZocratesHttpError with code `code_refused`. */
  exchangeCode(code, options) {
    return this._json("POST", "/auth/exchange", { code }, options);
  }

  /** `{library: {state, percent, items_done, items_to_index, message, ...}}`: the library index;
   *  `refresh` asks the daemon to check Zotero for changes now. */
  libraryStatus({ refresh = false } = {}, options) {
    return this._json("GET", refresh ? "/library/status?refresh=true" : "/library/status", undefined, options);
  }

  /** `{suggestions: [{text, kind, mode, library, items: [{item_key, title}], collection}]}`: a few
   *  questions drawn from the library (its papers, collections, tags), each with its scope. */
  librarySuggestions({ limit } = {}, options) {
    return this._json("GET", limit ? `/library/suggestions?limit=${Number(limit)}` : "/library/suggestions", undefined, options);
  }

  /** `{quote, matches: [{item_key, library, title, exact, score, page, page_label, link, text, kind}]}`:
   *  the items and pages that have `quote`, exact matches first; `link` opens the PDF at that page. */
  findQuote({ quote, library, limit } = {}, options) {
    return this._json("POST", "/library/find_quote", { quote, ...(library ? { library } : {}), ...(limit ? { limit } : {}) }, options);
  }

  /** `{settings: {session_retention_days, max_saved_sessions, compaction, research}, applies,
   *  restart_needed, environment, config_path}`. */
  getSettings(options) {
    return this._json("GET", "/settings", undefined, options);
  }

  /** Change some settings (written to zocrates_config.json, checked by the daemon's config model):
   *  the same shape as getSettings(); a bad value throws 422 `invalid_input` naming the field. */
  updateSettings(changes, options) {
    return this._json("PATCH", "/settings", changes, options);
  }

  storageStats(options) {
    return this._json("GET", "/sessions/storage_stats", undefined, options);
  }

  maintenance(options) {
    return this._json("POST", "/sessions/maintenance", undefined, options);
  }

  /** Propose a write into Zotero (`kind`: save_note, tag, untag, add_to_collection,
   *  create_collection, add_item; `params` as `_zocrates/writes/<kind>` takes them): `{write}`,
   *  usually `awaiting_consent` with its `preview`. Nothing is written before `confirmWrite`. */
  proposeWrite(kind, params, options) {
    return this._json("POST", `/writes/${encodeURIComponent(kind)}`, params, options);
  }

  /** The person's yes (`always`: later writes of its kind without asking): `{write}` once it was
   *  tried: `applied`, `failed`, or `queued` with what it waits for in `error`. */
  confirmWrite(writeId, { always = false } = {}, options) {
    return this._json("POST", `/writes/${encodeURIComponent(writeId)}/confirm`, always ? { always: true } : {}, options);
  }

  /** The person's no, or dropping a queued write: `{write}`, `discarded`. */
  discardWrite(writeId, options) {
    return this._json("POST", `/writes/${encodeURIComponent(writeId)}/discard`, undefined, options);
  }

  /** Revert an applied write (or the newest one of `sessionId`): `{write}`, the undo as a write. */
  undoWrite({ writeId, sessionId } = {}, options) {
    const body = {};
    if (writeId) body.writeId = writeId;
    if (sessionId) body.sessionId = sessionId;
    return this._json("POST", "/writes/undo", body, options);
  }

  /** `{write}` as recorded. */
  getWrite(writeId, options) {
    return this._json("GET", `/writes/${encodeURIComponent(writeId)}`, undefined, options);
  }

  /** `{writes, waiting_for}`, newest first; `pending`: only those not applied yet. */
  listWrites({ pending = false, sessionId, limit } = {}, options) {
    const q = new URLSearchParams();
    if (pending) q.set("pending", "true");
    if (sessionId) q.set("sessionId", sessionId);
    if (limit) q.set("limit", String(Number(limit)));
    const query = q.toString();
    return this._json("GET", query ? `/writes?${query}` : "/writes", undefined, options);
  }

  /** A turn as an async iterable of events (`parts`, `request_input`, then `done` or `error`).
   *  Refusals (busy: 409, unknown session: 404, bad input: 422) throw before the first event.
   *  Aborting `signal` stops the stream only; the turn finishes and is saved in the daemon. */
  chat({ prompt, sessionId, activeItems = [], mode = "library", snippets, collection, online }, { signal } = {}) {
    const body = { prompt, session_id: sessionId, active_items: activeItems, mode };
    if (snippets) body.snippets = snippets;
    if (collection) body.collection = collection;
    if (typeof online === "boolean") body.online = online; // this question may (not) search beyond the library
    return this._stream("/chat", body, signal);
  }

  /** Answer the pending research checkpoint (`response: {action: "extend_budget"|"synthesize", guidance?}`);
   *  the rest of the turn streams like `chat` (and may stop at a further `request_input`). A checkpoint
   *  that is not pending (answered, rewound, superseded, wrong ids) throws 409 `checkpoint_not_pending`. */
  resume({ sessionId, invocationId, interruptId, response }, { signal } = {}) {
    return this._stream("/chat/resume", { session_id: sessionId, invocation_id: invocationId, interrupt_id: interruptId, response }, signal);
  }

  async *_stream(path, body, signal) {
    const response = await this._send("POST", path, body, { signal, accept: "text/event-stream" });
    yield* parseSse(response.body, { signal });
  }
}
