// zocrates-client.mjs: the Zotero plugin's client of zocratesd's HTTP shim (protocol/http.md).
//
//   import { connect } from "./zocrates-client.mjs";
//   const client = await connect({ daemonJsonPath });   // <zotero-data-dir>/zocrates-data/daemon.json
//   const { session } = await client.createSession("New Chat");
//   for await (const event of client.chat({ prompt, sessionId: session.id }, { signal })) { ... }
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

export class ZocratesClient {
  constructor({ baseUrl, token, fetch: fetchImpl }) {
    this.baseUrl = baseUrl.replace(/\/$/, "");
    this.token = token;
    this._fetch = fetchImpl || globalThis.fetch.bind(globalThis);
  }

  async _send(method, path, body, { signal, accept = "application/json" } = {}) {
    const headers = { Authorization: `Bearer ${this.token}`, Accept: accept };
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

  storageStats(options) {
    return this._json("GET", "/sessions/storage_stats", undefined, options);
  }

  maintenance(options) {
    return this._json("POST", "/sessions/maintenance", undefined, options);
  }

  /** A turn as an async iterable of events (`parts`, `request_input`, then `done` or `error`).
   *  Refusals (busy: 409, unknown session: 404, bad input: 422) throw before the first event.
   *  Aborting `signal` stops the stream only; the turn finishes and is saved in the daemon. */
  chat({ prompt, sessionId, activeItems = [], mode = "library", snippets, collection }, { signal } = {}) {
    const body = { prompt, session_id: sessionId, active_items: activeItems, mode };
    if (snippets) body.snippets = snippets;
    if (collection) body.collection = collection;
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
