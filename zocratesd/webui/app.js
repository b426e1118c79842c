// app.js: the Zocrates sidebar (issue 18; spec sections 2.2, 5, 6, 7, 8).
//
// Served by the daemon's shim at /ui/, so it is same-origin with the API it calls through the one
// JavaScript client (zocrates-client.mjs). The Zotero plugin hosts it in a pane and answers the
// bridge (bridge.js); in a plain browser tab it runs standalone. `?view=prefs` shows only the
// "Chat Sessions & Storage" preferences (the plugin's preferences pane embeds that).
//
// Everything untrusted (answers, titles, messages, error texts) goes into the DOM as text: `h()`
// never sets innerHTML, and Markdown is rendered by markdown.js into nodes.

import { DaemonNotRunning, TurnView, ZocratesClient, ZocratesHttpError } from "./zocrates-client.mjs";
import { Bridge } from "./bridge.js";
import { ONLINE_MARK, noteMarkdown, parseSources, renderMarkdown } from "./markdown.js";

const TOKEN_KEY = "zocrates.token";
const SESSION_KEY = "zocrates.session";
// Spec 7: a streamed answer is re-rendered at most this often (each render re-parses the whole
// Markdown; chunks arrive far faster than a reader can see them).
const RENDER_INTERVAL_MS = 50;
// How often the library status is asked while it changes (indexing), and while it is missing.
const LIBRARY_POLL_MS = { starting: 1000, indexing: 1000, unavailable: 15_000, error: 15_000 };
// A ready but empty library is asked again this often (the daemon looks at Zotero every 2 s):
// the first screen notices the first papers.
const EMPTY_LIBRARY_POLL_MS = 5000;
// While the library is indexed, the first screen's questions are asked for again at most this
// often (they come from what is indexed so far).
const SUGGESTIONS_REFRESH_MS = 5000;
// After Stop, how long the stream may take to end before the page stops listening to it.
const STOP_GRACE_MS = 15_000;
const CANCEL_RETRIES = 8; // a turn that just started may not be cancellable for a few ms
// While a consented write waits for Zotero (closed, a dialog unanswered), its card asks how it
// stands this often, so that it says "written" once Zotero took it.
const WRITE_POLL_MS = 4000;
// A cited item as the answer's sources name it: the library it is in and its key.
const ITEM_URI_RE = /^zotero:\/\/select\/(library|groups\/\d{1,12})\/items\/([A-Z0-9]{8})$/;
// The pages a source's entry lists at its end ("... pp. 1, 2.").
const LISTED_PAGES_RE = /\bpp?\. ([0-9A-Za-z-]{1,16}(?:, [0-9A-Za-z-]{1,16})*)\.$/;

const app = {
  client: null,
  bridge: null,
  register: null,
  sessions: [],
  session: null, // the UI session shown (spec 2.2)
  turns: new Map(), // session id -> the running turn this page started
  passages: new Map(), // invocation id -> the numbered passages its search found (PDF page links)
  context: { mode: "library", items: [], collection: null, snippets: [] }, // the next prompt's chips
  selection: null, // the last Zotero selection the host sent
  guidance: null, // {interrupt, text}: what is typed in the checkpoint card
  deleting: null, // {id, at}: a chat whose delete button was clicked once
  notice: null, // {sessionId, text}: a line under the messages ("Stopped.")
  queued: null, // a question sent while no chat was open yet (the page starting, a chat opening): sent when one is
  libraryTimer: null,
  library: null, // the last library status
  suggestions: { key: null, at: 0, list: [], loading: false }, // the first screen's questions (from the daemon)
  cards: [], // the consent cards of writes into Zotero shown in this page (see newCard)
  asking: new Map(), // "<session> <invocation>" -> the inline question of an answer's write action
  writesLoadedFor: null, // the session whose pending writes were asked for
  writeTimer: null,
  styleChoices: null, // [{value, name}]: the citation styles the daemon offers (asked for once)
  styleChoicesLoading: false,
  savingStyle: false, // a citation style change on its way to the daemon
  els: {},
};

// --- small DOM helpers ---------------------------------------------------------------------------

/** An element; props: class, text, on {event: fn}, data {k: v}, value/checked/disabled/hidden as
 *  properties, anything else as an attribute. Children: nodes or strings (as text). */
function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") el.className = value;
    else if (key === "text") el.textContent = String(value);
    else if (key === "on") for (const [ev, fn] of Object.entries(value)) el.addEventListener(ev, fn);
    else if (key === "data") Object.assign(el.dataset, value);
    else if (key === "value" || key === "checked" || key === "disabled" || key === "hidden") el[key] = value;
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(typeof child === "string" ? document.createTextNode(child) : child);
  }
  return el;
}

/** Replace an element's children, skipping null/false (replaceChildren would show "null"). */
function fill(el, ...children) {
  el.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
}

function formatBytes(n) {
  if (!Number.isFinite(n)) return "—";
  if (n < 1024) return `${n} B`;
  const units = ["KB", "MB", "GB", "TB"];
  let v = n / 1024;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${v.toFixed(v < 10 ? 1 : 0)} ${units[i]}`;
}

function formatWhen(ts) {
  if (typeof ts !== "number") return "";
  const d = new Date(ts > 1e12 ? ts : ts * 1000);
  const now = new Date();
  if (d.toDateString() === now.toDateString()) return d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
  return d.toLocaleDateString([], { year: d.getFullYear() === now.getFullYear() ? undefined : "numeric", month: "short", day: "numeric" });
}

function plural(n, one, many = `${one}s`) {
  return `${n} ${n === 1 ? one : many}`;
}

// --- errors: always a readable message, never a blank pane ----------------------------------------

/** A readable sentence for an error of the client, the daemon or the bridge. */
function describe(err) {
  if (err instanceof DaemonNotRunning) {
    return `zocratesd is not answering at ${location.origin}. Start it (zocratesd serve, or ./dev serve in a clone; `
      + "zocratesd service install starts it with your session), then try again.";
  }
  if (err instanceof ZocratesHttpError) {
    const message = err.body?.error?.message || err.message;
    switch (err.code) {
      case "session_busy":
        return "This chat is busy with another turn (in another window?). Wait for it to finish, or stop it.";
      case "checkpoint_not_pending":
        return "This checkpoint was already answered, or its question was discarded. The chat has been reloaded.";
      case "not_found":
        return `Not found: ${message}. The chat may have been deleted elsewhere.`;
      case "invalid_input":
        return `The daemon refused this: ${message}`;
      case "model_error":
        return `The model failed: ${message}. Check the model settings in zocrates_config.json, or try again.`;
      case "unauthorized":
        return "The daemon refused this page's token (it has restarted since). Reopen the sidebar.";
      case "write_refused":
        return message;
      default:
        return `${err.code}: ${message}`;
    }
  }
  if (err && err.name === "AbortError") return "Stopped listening to the answer.";
  if (err instanceof TypeError && /network|fetch/i.test(err.message)) {
    // A stream cut mid-way (the daemon stopped or crashed): what was saved is reloaded once it is back.
    return `The connection to zocratesd was lost (${err.message}). If it stopped, start it again and reopen the chat.`;
  }
  return String(err?.message || err || "something went wrong");
}

function showError(err) {
  if (!app.els.error?.isConnected) {
    // A view without the chat's error line (preferences only): put one at the top.
    app.els.error = h("div", { id: "error", class: "error", role: "alert", hidden: true });
    document.getElementById("root").prepend(app.els.error);
  }
  const box = app.els.error;
  box.replaceChildren(
    h("span", { class: "error-text", text: typeof err === "string" ? err : describe(err) }),
    h("button", { class: "link-button", type: "button", "aria-label": "Dismiss", text: "×", on: { click: () => { box.hidden = true; } } }),
  );
  box.hidden = false;
  if (err instanceof ZocratesHttpError && err.code === "unauthorized") showHelp({ refused: true });
}

function clearError() {
  if (app.els.error) app.els.error.hidden = true;
}

function showFatal(err, retry) {
  if (err instanceof ZocratesHttpError && err.code === "unauthorized") {
    showHelp({ refused: true });
    return;
  }
  document.documentElement.dataset.view = "fatal";
  document.getElementById("root").replaceChildren(
    h("div", { class: "fatal", role: "alert" },
      h("h1", { text: "Zocrates" }),
      h("p", { text: describe(err) }),
      h("button", { type: "button", class: "primary", id: "retry", text: "Try again", on: { click: retry } })),
  );
}

// --- the token (handed over in the URL fragment, kept in sessionStorage) ---------------------------
//
// `zocrates open` puts a one-time code in the fragment (`#code=`), which the page exchanges for
// the token (POST /auth/exchange): the browser's history keeps the address, and so only a spent
// code. The Zotero plugin's pane, whose browser keeps no history, hands the token itself
// (`#token=`). Either leaves the address at once (history.replaceState).

let memoryToken = null; // where the token lives when sessionStorage is refused

function keepToken(token) {
  memoryToken = token || null;
  try {
    if (memoryToken) sessionStorage.setItem(TOKEN_KEY, memoryToken);
  } catch {
    /* private mode or a sandbox: keep it in memory for this page's life */
  }
}

/** What the fragment hands over, `{token}` or `{code}` (or {} for neither); it leaves the address. */
function takeFragment() {
  const token = /(?:^#|&)token=([^&]*)/.exec(location.hash);
  const code = /(?:^#|&)code=([^&]*)/.exec(location.hash);
  if (!token && !code) return {};
  // Out of the address at once: not in a bookmark, a screen share or this entry of the history.
  history.replaceState(history.state, "", location.pathname + location.search);
  const value = (m) => { try { return decodeURIComponent(m[1]); } catch { return ""; } };
  return token ? { token: value(token) } : { code: value(code) };
}

function storedToken() {
  try {
    return sessionStorage.getItem(TOKEN_KEY) || memoryToken;
  } catch {
    return memoryToken;
  }
}

/** The token: handed over in the fragment (as it is, or for a code), else the one this tab kept.
 *  Null when there is none; throws the exchange's error for a code that was refused. */
async function takeToken() {
  const handed = takeFragment();
  if (handed.token) keepToken(handed.token);
  else if (handed.code !== undefined) {
    const answer = await new ZocratesClient({ baseUrl: location.origin, token: null }).exchangeCode(handed.code);
    keepToken(answer.token);
  }
  return storedToken();
}

function forgetToken() {
  memoryToken = null;
  try {
    sessionStorage.removeItem(TOKEN_KEY);
  } catch {
    /* nothing kept */
  }
}

/** A link of `zocrates open` that was opened before (from the history, a second tab) or too late. */
function showSpentLink() {
  forgetToken();
  stopLibraryPoll();
  document.documentElement.dataset.view = "spent-link";
  document.getElementById("root").replaceChildren(
    h("div", { class: "help", id: "spent-link", role: "alert" },
      h("h1", { text: "Zocrates" }),
      h("p", { text: "This link has been used already, or it has expired. A link from zocrates open opens the page once, within two minutes, so that a copy in your browser's history is worthless." }),
      h("p", {}, "Run ", h("code", { text: "zocrates open" }), " (or ", h("code", { text: "zocratesd open" }), ") again for a new one.")),
  );
}

function showHelp({ refused = false } = {}) {
  if (refused) forgetToken();
  stopLibraryPoll();
  document.documentElement.dataset.view = "help";
  document.getElementById("root").replaceChildren(
    h("div", { class: "help", id: "help" },
      h("h1", { text: "Zocrates" }),
      h("p", { text: refused
        ? "This page's access token was refused: zocratesd has restarted since it was opened, or the link is old."
        : "This page needs an access token from your zocratesd." }),
      h("h2", { text: "To open the sidebar" }),
      h("ul", {},
        h("li", {}, "In Zotero: open the Zocrates pane (the Zocrates plugin opens this page with a fresh token)."),
        h("li", {}, "In a browser: run ", h("code", { text: "zocrates open" }), " (or ", h("code", { text: "zocratesd open" }),
          ") in a terminal. It prints this page's address with a one-time code and opens it.")),
      h("p", { class: "muted", text: "The page trades the code for an access token, which changes each time zocratesd starts and stays in this tab only." })),
  );
}

// --- the chat layout ---------------------------------------------------------------------------------

function buildLayout() {
  const els = app.els;
  els.title = h("span", { id: "session-title", class: "title", text: "" });
  els.sessionsToggle = h("button", { id: "sessions-toggle", type: "button", class: "icon", title: "Chats", "aria-label": "Chats", "aria-expanded": "false", text: "☰",
    on: { click: () => toggleSessions() } });
  els.newChat = h("button", { id: "new-chat", type: "button", class: "icon", title: "New chat", "aria-label": "New chat", text: "+", on: { click: () => newChat().catch(showError) } });
  els.prefsToggle = h("button", { id: "prefs-toggle", type: "button", class: "icon", title: "Preferences", "aria-label": "Preferences", "aria-pressed": "false", text: "⚙",
    on: { click: () => togglePrefs() } });
  els.sessionsList = h("ul", { id: "sessions" });
  els.sessionsPanel = h("nav", { id: "sessions-panel", class: "sessions-panel", hidden: true, "aria-label": "Chats" }, els.sessionsList);
  els.error = h("div", { id: "error", class: "error", role: "alert", hidden: true });
  els.library = h("div", { id: "library-status", class: "library-status", hidden: true, role: "status" });
  els.messages = h("div", { id: "messages", class: "messages", role: "log", "aria-live": "polite" });
  els.chat = h("main", { id: "chat", class: "chat" }, els.messages);
  els.prefs = h("section", { id: "prefs", class: "prefs", hidden: true });
  els.chips = h("div", { id: "chips", class: "chips", "aria-label": "Context" });
  els.prompt = h("textarea", { id: "prompt", rows: "2", placeholder: "Ask about your library…", "aria-label": "Your question",
    on: { keydown: onPromptKey, input: autoGrow } });
  els.send = h("button", { id: "send", type: "submit", class: "primary", text: "Send" });
  els.stop = h("button", { id: "stop", type: "button", class: "danger", text: "Stop", hidden: true, on: { click: () => stopTurn() } });
  els.citationStyle = h("select", { id: "citation-style", "aria-label": "Citation style", title: "How answers in this chat cite their sources",
    on: { change: () => saveCitationStyle() } });
  els.composer = h("form", { id: "composer", class: "composer", on: { submit: (e) => { e.preventDefault(); submitPrompt(); } } },
    els.chips, h("div", { class: "composer-row" }, els.prompt, h("div", { class: "composer-actions" }, els.send, els.stop)),
    h("label", { class: "composer-options" }, h("span", { text: "Cite as" }), els.citationStyle));
  els.quotePanel = quoteFinder();
  els.quoteToggle = h("button", { id: "quote-toggle", type: "button", class: "icon", title: "Find a quote", "aria-label": "Find a quote",
    "aria-expanded": "false", text: "❝", on: { click: () => toggleQuotes() } });
  const header = h("header", { class: "bar" }, els.sessionsToggle, els.title, els.quoteToggle, els.newChat, els.prefsToggle);
  document.getElementById("root").replaceChildren(
    h("div", { class: "app" }, header, els.sessionsPanel, els.quotePanel, els.error, els.library, els.chat, els.prefs, els.composer),
  );
}

function autoGrow() {
  const ta = app.els.prompt;
  ta.style.height = "auto";
  ta.style.height = `${Math.min(ta.scrollHeight + 2, 200)}px`;
}

function onPromptKey(event) {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    submitPrompt();
  }
}

function onGlobalKey(event) {
  if (event.key === "Escape" && !event.defaultPrevented && app.session && app.turns.has(app.session.id)) {
    event.preventDefault();
    stopTurn();
  }
}

// --- sessions ---------------------------------------------------------------------------------------

function sortedSessions() {
  // Newest first (the API lists oldest first).
  return [...app.sessions].sort((a, b) => (b.created_at - a.created_at) || (a.id < b.id ? 1 : -1));
}

async function refreshSessions() {
  app.sessions = (await app.client.listSessions()).sessions;
  renderSessions();
}

function toggleSessions(open) {
  const panel = app.els.sessionsPanel;
  const show = open ?? panel.hidden;
  panel.hidden = !show;
  app.els.sessionsToggle.setAttribute("aria-expanded", String(show));
  if (show) {
    renderSessions();
    refreshSessions().catch(showError);
  }
}

function renderSessions() {
  const list = app.els.sessionsList;
  if (!list) return;
  list.replaceChildren(...sortedSessions().map((s) => sessionRow(s)));
  if (!app.sessions.length) list.append(h("li", { class: "muted", text: "No chats yet." }));
}

function sessionRow(s) {
  const current = app.session?.id === s.id;
  const running = app.turns.has(s.id);
  const open = h("button", { type: "button", class: "session-open", title: s.title, on: { click: () => { toggleSessions(false); openSession(s.id).catch(showError); } } },
    h("span", { class: "session-title", text: s.title }),
    h("span", { class: "session-when", text: running ? "answering…" : formatWhen(s.updated_at ?? s.created_at) }));
  const rename = h("button", { type: "button", class: "icon rename", title: "Rename", "aria-label": `Rename ${s.title}`, text: "✎", on: { click: () => startRename(li, s) } });
  const confirming = app.deleting?.id === s.id;
  const del = h("button", { type: "button", class: `icon delete${confirming ? " confirm" : ""}`, title: confirming ? "Click again to delete" : "Delete",
    "aria-label": `Delete ${s.title}`, text: confirming ? "Delete?" : "🗑", on: { click: () => confirmDelete(del, s) } });
  const li = h("li", { class: `session${current ? " current" : ""}`, data: { id: s.id } }, open, rename, del);
  return li;
}

function startRename(li, s) {
  const input = h("input", { type: "text", class: "rename-input", value: s.title, maxlength: "200", "aria-label": "Chat title" });
  let done = false;
  const finish = async (save) => {
    if (done) return;
    done = true;
    const title = input.value.trim();
    if (save && title && title !== s.title) {
      try {
        const { session } = await app.client.renameSession(s.id, title);
        s.title = session.title;
        if (app.session?.id === s.id) {
          app.session.title = session.title;
          app.els.title.textContent = session.title;
        }
      } catch (err) {
        showError(err);
      }
    }
    renderSessions();
  };
  input.addEventListener("keydown", (e) => {
    if (e.key === "Enter") {
      e.preventDefault();
      finish(true);
    } else if (e.key === "Escape") {
      e.preventDefault();
      finish(false);
    }
  });
  input.addEventListener("blur", () => finish(true));
  li.replaceChildren(input);
  input.focus();
  input.select();
}

const DELETE_CONFIRM_MS = 4000;

function confirmDelete(button, s) {
  // Two clicks, not a modal dialog: a dialog in a narrow pane hides what is being deleted.
  if (app.deleting?.id === s.id && Date.now() - app.deleting.at < DELETE_CONFIRM_MS) {
    app.deleting = null;
    deleteSession(s).catch(showError);
    return;
  }
  app.deleting = { id: s.id, at: Date.now() };
  renderSessions();
  setTimeout(() => { if (app.deleting?.id === s.id) { app.deleting = null; renderSessions(); } }, DELETE_CONFIRM_MS);
}

async function deleteSession(s) {
  await app.client.deleteSession(s.id);
  app.sessions = app.sessions.filter((x) => x.id !== s.id);
  if (app.session?.id === s.id) {
    app.session = null;
    const next = sortedSessions()[0];
    if (next) await openSession(next.id);
    else await newChat();
  }
  renderSessions();
}

async function newChat() {
  clearError();
  togglePrefs(false);
  toggleSessions(false);
  // An empty chat is reused rather than piling up untitled ones.
  if (app.session && !app.session.messages.length && !app.turns.has(app.session.id)) {
    app.els.prompt.focus();
    return;
  }
  const { session } = await app.client.createSession();
  app.sessions.push({ id: session.id, title: session.title, created_at: session.created_at, updated_at: session.updated_at });
  showSession(session);
  app.els.prompt.focus();
}

async function openSession(id) {
  clearError();
  togglePrefs(false);
  const { session } = await app.client.getSession(id);
  showSession(session);
}

function showSession(session) {
  app.session = session;
  try {
    sessionStorage.setItem(SESSION_KEY, session.id);
  } catch {
    /* not remembered across reloads */
  }
  const row = app.sessions.find((s) => s.id === session.id);
  if (row) row.title = session.title;
  renderChat();
  if (app.writesLoadedFor !== session.id) loadPendingWrites(session.id).catch(showError);
  const queued = app.queued;
  if (queued !== null) {
    app.queued = null;
    // Sent unless the box was changed since (then Send is the user's to press again).
    if (app.els.prompt.value.trim() === queued) submitPrompt();
    else updateComposer();
  }
}

/** Reload the shown session from the daemon (after a turn that ended without one, an error...). */
async function reloadSession(id) {
  try {
    const { session } = await app.client.getSession(id);
    if (app.session?.id === id) showSession(session);
  } catch (err) {
    showError(err);
  }
}

// --- messages ----------------------------------------------------------------------------------------

function renderChat() {
  const s = app.session;
  app.els.title.textContent = s ? s.title : "";
  app.els.title.title = s ? s.title : "";
  renderMessages();
  updateComposer();
}

function nearBottom(box) {
  return box.scrollHeight - box.scrollTop - box.clientHeight < 80;
}

function renderMessages() {
  const box = app.els.messages;
  const s = app.session;
  box.replaceChildren();
  if (!s) return;
  const turn = app.turns.get(s.id);
  if (!s.messages.length && !turn) box.append(welcome());
  for (const m of s.messages) box.append(m.role === "user" ? userMessage(m, !!turn) : assistantMessage(m));
  // Writes not under an answer shown here (found pending on load, or their answer was rewound).
  const shown = new Set(s.messages.filter((m) => m.role !== "user" && m.text && m.invocation_id).map((m) => m.invocation_id));
  const loose = app.cards.filter((c) => c.sessionId === s.id && !shown.has(c.anchor));
  if (loose.length) box.append(h("div", { class: "writes-loose", role: "group", "aria-label": "Writes into Zotero" }, loose.map((c) => c.el)));
  if (turn) {
    box.append(turn.el);
    renderLive(turn);
  } else if (s.pending_hitl) {
    box.append(checkpointCard(s.pending_hitl));
  }
  if (app.notice?.sessionId === s.id) box.append(h("p", { class: "notice", text: app.notice.text }));
  box.scrollTop = box.scrollHeight;
}

// --- the first screen: the library's state and questions drawn from it -------------------------------

function welcome() {
  const box = h("div", { class: "welcome", id: "welcome" });
  fillWelcome(box);
  queueMicrotask(loadSuggestions); // once the box is in the page (a new chat after the library settled)
  return box;
}

function refreshWelcome() {
  const box = document.getElementById("welcome");
  if (box) fillWelcome(box);
  loadSuggestions();
}

function count(n, one, many) {
  const v = Number.isFinite(n) ? n : 0;
  return `${v.toLocaleString("en")} ${v === 1 ? one : many}`;
}

/** What the library holds, in words (its kinds: items, notes, annotations, full texts). */
function holdings(lib) {
  const k = lib.kinds || {};
  const papers = k.items ?? lib.items_indexed ?? 0;
  const parts = [count(papers, "paper", "papers"), count(k.notes ?? lib.notes_indexed ?? 0, "note", "notes"),
    count(k.annotations ?? lib.annotations_indexed ?? 0, "annotation", "annotations")];
  return `${parts[0]}, ${parts[1]} and ${parts[2]}`;
}

function librarySummary(lib) {
  if (!lib) return "Looking at your library…";
  switch (lib.state) {
    case "starting":
      return "Opening your Zotero library…";
    case "indexing":
      return `Indexing is under way: ${holdings(lib)} so far (${Math.floor(Math.max(0, Math.min(100, Number(lib.percent) || 0)))}%). `
        + "You can ask already; answers search what is indexed.";
    case "ready":
      if (!(lib.kinds?.items ?? lib.items_indexed)) {
        return "Your Zotero library is empty. Papers you add in Zotero are indexed within seconds, and questions about them appear here.";
      }
      return `Your library: ${holdings(lib)} indexed${lib.kinds?.texts ? `, ${count(lib.kinds.texts, "full text", "full texts")}` : ""}.`;
    case "unavailable":
    case "error":
      return "No library to search yet: see above for what to do.";
    case "disabled":
      return lib.message || "This daemon has no Zotero library index.";
    default:
      return lib.summary || lib.state;
  }
}

function fillWelcome(box) {
  const lib = app.library;
  const list = app.suggestions.list;
  box.dataset.state = lib?.state || "unknown";
  fill(box,
    h("p", { class: "welcome-lead", text: "Ask a question about your papers. The answer quotes your library and cites it." }),
    h("p", { id: "library-summary", class: "library-summary", text: librarySummary(lib) }),
    list.length ? h("div", { class: "suggestions", role: "group", "aria-label": "Questions to ask" },
      h("p", { class: "suggestions-label muted", text: lib?.state === "indexing" ? "Try asking (from what is indexed so far):" : "Try asking:" }),
      list.map((sg) => h("button", { type: "button", class: "suggestion", data: { kind: sg.kind }, title: scopeOf(sg),
        disabled: !app.session || app.turns.has(app.session.id), on: { click: () => askSuggestion(sg) } }, sg.text))) : null,
    h("p", { class: "muted", text: app.bridge?.hosted
      ? "Papers or a collection selected in Zotero become the question's context."
      : "The whole library is searched; in Zotero, the selected papers become the context." }));
}

function scopeOf(sg) {
  if (sg.mode === "papers") return `Asked about ${sg.items.map((it) => it.title).join(", ")}`;
  if (sg.mode === "collection" && sg.collection) return `Asked in the collection ${sg.collection.name} and its subcollections`;
  return "Asked of your whole library";
}

/** Ask the daemon for the first screen's questions when the library changed since (at most every
 *  SUGGESTIONS_REFRESH_MS while it is indexed). */
function loadSuggestions() {
  const lib = app.library;
  const state = app.suggestions;
  if (!lib || !app.client || state.loading || !document.getElementById("welcome")) return;
  const key = `${lib.state}:${lib.items_indexed}:${lib.collections}:${lib.last_refresh}`;
  if (key === state.key || (lib.state === "indexing" && Date.now() - state.at < SUGGESTIONS_REFRESH_MS && state.key !== null)) return;
  state.loading = true;
  let fetched = false;
  app.client.librarySuggestions().then(({ suggestions }) => {
    state.list = Array.isArray(suggestions) ? suggestions.filter((sg) => sg && typeof sg.text === "string") : [];
    state.key = key;
    fetched = true;
  }, () => { /* kept as they were: tried again below */ }).finally(() => {
    state.loading = false;
    state.at = Date.now();
    const box = document.getElementById("welcome");
    if (box) fillWelcome(box);
    // The library may have changed while these were asked for (its last poll, "ready", came in
    // meanwhile, and no other poll follows it): ask again for what it is now. A failure is tried
    // again a little later.
    if (fetched) loadSuggestions();
    else setTimeout(loadSuggestions, SUGGESTIONS_REFRESH_MS);
  });
}

function askSuggestion(sg) {
  if (!app.session || app.turns.has(app.session.id)) return;
  const items = Array.isArray(sg.items) ? sg.items.filter((it) => it && it.item_key).map((it) => ({ item_key: it.item_key, title: it.title || it.item_key })) : [];
  if (sg.mode === "papers" && items.length) app.context = { mode: "papers", items, collection: null, snippets: app.context.snippets };
  else if (sg.mode === "collection" && sg.collection?.key) app.context = { mode: "collection", items: [], collection: { key: sg.collection.key, name: sg.collection.name || sg.collection.key }, snippets: app.context.snippets };
  else app.context = { mode: "library", items: [], collection: null, snippets: app.context.snippets };
  renderChips();
  sendPrompt(sg.text).catch(showError);
}

function userMessage(m, busy) {
  const bubble = h("div", { class: "bubble", text: m.text });
  const el = h("div", { class: "msg user", data: { invocation: m.invocation_id || "" } }, bubble);
  if (m.invocation_id && !busy) {
    el.append(h("div", { class: "msg-actions" },
      h("button", { type: "button", class: "link-button edit", text: "Edit", title: "Edit and ask again (what came after it is discarded)",
        on: { click: () => startEdit(m, el) } })));
  }
  return el;
}

function assistantMessage(m) {
  const el = h("div", { class: "msg assistant", data: { invocation: m.invocation_id || "" } });
  if (m.thought) el.append(thoughtBlock(m.thought, false));
  if (m.text) {
    const sources = withPages(parseSources(m.text), app.passages.get(m.invocation_id), m.text, m.citations);
    el.append(h("div", { class: "answer" }, renderMarkdown(m.text, { sources })));
    const links = pageLinks(sources);
    if (links) el.append(links); // append(null) would show the word "null"
    if (m.citations?.length) el.append(citationChecks(m.citations));
    el.append(writeActions(m));
    const again = onlineAgain(m);
    if (again) el.append(again);
    if (m.invocation_id) for (const card of cardsOf(app.session?.id, m.invocation_id)) el.append(card.el);
  }
  return el;
}

/** The answer's citations as checked against their sources (the message's `citations`): each
 *  verified, not found in its source, or not checked; a quote's page where it really is. A row
 *  names the citation as the answer wrote it: "[2]", else its `label` ("[@key]", "(Lewis, 2020)"). */
function citationChecks(citations) {
  const rows = citations.map((c) => {
    const state = c.verified === true ? "verified" : c.verified === false ? "unverified" : "unchecked";
    const said = { verified: "✓ found in the cited source", unverified: "✗ not found in the cited source", unchecked: "not checked" }[state];
    const row = h("li", { class: `check ${state}`, data: { n: String(c.n), verified: String(c.verified) } },
      h("span", { class: "check-n", text: `${c.label || `[${c.n}]`} ` }), h("span", { class: "check-state", text: said }));
    for (const ch of c.checks || []) {
      if (ch.status === "not_found" || ch.status === "misquoted" || ch.status === "unsupported") {
        row.append(h("div", { class: "check-text", text: `“${ch.text}”${ch.source_reads ? ` — the source reads “${ch.source_reads}”` : ""}` }));
      }
      if (ch.page_corrected && ch.page) {
        const where = ch.link ? h("a", { href: ch.link, class: "pdf-link", text: `p. ${ch.page}` }) : h("span", { text: `p. ${ch.page}` });
        row.append(h("div", { class: "check-page" }, `on `, where, `, not p. ${ch.cited_page}`));
      }
    }
    if (c.partial) row.append(h("div", { class: "check-partial", text: c.partial }));
    return row;
  });
  return h("details", { class: "citation-checks", open: citations.some((c) => c.verified === false || c.partial) },
    h("summary", { text: `Citations checked: ${citations.filter((c) => c.verified === true).length} of ${citations.length} found in their sources` }),
    h("ul", {}, ...rows));
}

function toggleQuotes(open) {
  const panel = app.els.quotePanel;
  const show = open ?? panel.hidden;
  panel.hidden = !show;
  app.els.quoteToggle.setAttribute("aria-expanded", String(show));
  if (show) document.getElementById("quote-input")?.focus();
}

/** "Find a quote" (❝ in the bar): a pasted sentence to the items and pages that have it, each a
 *  link that opens the PDF at that page. */
function quoteFinder() {
  const input = h("textarea", { id: "quote-input", rows: "2", placeholder: "Paste a quote…", "aria-label": "A quote to find" });
  const results = h("ul", { id: "quote-results", class: "quote-results", role: "status" });
  const find = async () => {
    const quote = input.value.trim();
    if (!quote) return;
    results.replaceChildren(h("li", { text: "Looking…" }));
    try {
      const { matches } = await app.client.findQuote({ quote });
      results.replaceChildren(...(matches.length ? matches.map((m) => h("li", { class: "quote-match" },
        h("a", { href: m.link, class: "pdf-link", text: `${m.title}${m.page_label ? `, p. ${m.page_label}` : ""}` }),
        h("span", { class: "quote-how", text: m.exact ? " (exact)" : ` (near: ${Math.round(m.score * 100)}%)` })))
        : [h("li", { text: "No item of your library has this quote." })]));
    } catch (err) {
      results.replaceChildren(h("li", { class: "error-text", text: err?.message || String(err) }));
    }
  };
  return h("section", { id: "quote-finder", class: "quote-finder", hidden: true, "aria-label": "Find a quote" },
    input, h("div", { class: "quote-actions" },
      h("button", { id: "quote-find", type: "button", class: "primary", text: "Find", on: { click: () => find().catch(showError) } }),
      h("button", { type: "button", class: "link-button", text: "Close", on: { click: () => toggleQuotes(false) } })), results);
}

function thoughtBlock(text, open) {
  return h("details", { class: "thought", open },
    h("summary", { text: "Thoughts" }),
    h("div", { class: "thought-text", text }));
}

/** The sources with their citation keys and the PDF pages the answer cites. A source's key, when
 *  its entry does not lead with it: the answer's checked citations' (`citations`, what the daemon
 *  keeps with the answer: there after a reload, and for a chat of another client), else the
 *  passages of the search this page saw. The pages, when this page saw the search (the stream's
 *  `tool_result` passages: item, attachment, page, page label): `pdfs` maps the page as cited (its
 *  label, "127", else its number) -> the open-pdf URI at the PDF's page index. A page is cited when
 *  the source's entry lists it ("... p. 127.") or a citation names it ("[2, p. 127]"). */
function withPages(sources, passages, text, citations) {
  for (const s of sources.values()) {
    const [, lib, key] = ITEM_URI_RE.exec(s.uri || "") || [];
    const library = lib === "library" ? "user" : lib;
    s.key ??= citations?.find((c) => c.item_key === key && c.library === library && c.citation_key)?.citation_key
      ?? passages?.find((p) => p.item_key === key && p.citation_key)?.citation_key ?? null;
  }
  if (!passages?.length) return sources;
  const inline = new Map();
  for (const m of String(text || "").matchAll(/\[(\d{1,4}),\s*pp?\.\s*([0-9A-Za-z-]{1,16})\]/g)) {
    if (!inline.has(Number(m[1]))) inline.set(Number(m[1]), new Set());
    inline.get(Number(m[1])).add(m[2]);
  }
  const ordered = [...passages].sort((a, b) => (a.page ?? 0) - (b.page ?? 0));
  for (const s of sources.values()) {
    // The PDF opens in the library the cited item is in: the user's own, or a group's.
    const [, lib, key] = ITEM_URI_RE.exec(s.uri || "") || [];
    if (!key) continue;
    const listed = LISTED_PAGES_RE.exec(s.title || "");
    const cited = new Set([...(listed ? listed[1].split(", ") : []), ...(inline.get(s.n) || [])]);
    for (const p of ordered) {
      if (p.item_key === key && p.attachment_key && Number.isInteger(p.page)) {
        const label = p.page_label || String(p.page);
        if (!cited.has(label)) continue;
        s.pdfs ??= new Map();
        if (!s.pdfs.has(label)) s.pdfs.set(label, `zotero://open-pdf/${lib}/items/${encodeURIComponent(p.attachment_key)}?page=${p.page}`);
      }
    }
  }
  return sources;
}

function pageLinks(sources) {
  const links = [];
  for (const s of sources.values()) {
    for (const [page, href] of s.pdfs || new Map()) {
      links.push(h("a", { href, class: "pdf-link", title: s.title, text: `[${s.n}] p. ${page}` }));
    }
  }
  if (!links.length) return null;
  return h("div", { class: "page-links" }, "Open the PDF at: ", ...links.flatMap((a, i) => (i ? [", ", a] : [a])));
}

// --- a running turn ----------------------------------------------------------------------------------

function liveElement() {
  const thought = thoughtBlock("", false);
  thought.hidden = true;
  const progress = h("ul", { class: "progress-lines" });
  const answer = h("div", { class: "answer" });
  const status = h("p", { class: "turn-status", text: "Working…" });
  const el = h("div", { class: "msg assistant live" }, thought, progress, answer, status);
  return { el, thought, progress, answer, status };
}

function scheduleRender(turn) {
  if (turn.timer !== null) return;
  const wait = Math.max(0, RENDER_INTERVAL_MS - (performance.now() - turn.lastRender));
  turn.timer = setTimeout(() => {
    turn.timer = null;
    if (app.session?.id === turn.sessionId) renderLive(turn);
  }, wait);
}

function renderLive(turn) {
  const now = performance.now();
  if (turn.lastRender) turn.minGap = Math.min(turn.minGap, now - turn.lastRender);
  turn.lastRender = now;
  turn.renders += 1;
  const v = turn.view;
  const box = app.els.messages;
  const stick = nearBottom(box);
  const parts = turn.parts;
  if (v.thought) {
    parts.thought.hidden = false;
    parts.thought.querySelector(".thought-text").textContent = v.thought;
  }
  parts.progress.replaceChildren(...v.progress.map((line) => h("li", { text: line })));
  if (v.answer) parts.answer.replaceChildren(renderMarkdown(v.answer, { sources: withPages(parseSources(v.answer), v.passages, v.answer) }));
  parts.status.textContent = turn.stopping ? "Stopping…" : v.answer ? "" : v.progress.length ? "Searching…" : "Working…";
  parts.status.hidden = !parts.status.textContent;
  // How the throttle behaved, for whoever inspects the page (the browser tests do).
  turn.el.dataset.renders = String(turn.renders);
  turn.el.dataset.minGapMs = Number.isFinite(turn.minGap) ? turn.minGap.toFixed(1) : "";
  if (stick) box.scrollTop = box.scrollHeight;
}

/** Run a turn (a prompt or a checkpoint answer) of session `sid`, showing it as it streams. */
async function runTurn(sid, open) {
  const parts = liveElement();
  const turn = { sessionId: sid, view: new TurnView(), controller: new AbortController(), el: parts.el, parts,
    timer: null, lastRender: 0, renders: 0, minGap: Infinity, stopping: false, stopTimer: null };
  app.turns.set(sid, turn);
  app.notice = null;
  clearError();
  renderChat();
  let failure = null;
  try {
    for await (const event of open(turn.controller.signal)) {
      if (turn.view.feed(event)) scheduleRender(turn);
    }
  } catch (err) {
    failure = err;
  } finally {
    clearTimeout(turn.timer);
    clearTimeout(turn.stopTimer);
    app.turns.delete(sid);
  }
  const v = turn.view;
  if (v.invocationId && v.passages.length) app.passages.set(v.invocationId, v.passages);
  if (v.stopReason === "cancelled") app.notice = { sessionId: sid, text: "Stopped. What was written so far is kept." };
  if (v.error) showError(`The answer failed: ${describeTurnError(v.error)}`);
  else if (failure && !(failure.name === "AbortError" && turn.stopping)) showError(failure);
  if (v.session && app.session?.id === sid) showSession(v.session);
  else if (app.session?.id === sid) await reloadSession(sid);
  else renderSessions();
  refreshSessions().catch(() => {});
  // A write the model proposed during the turn waits for consent: its card.
  if (app.session?.id === sid) loadPendingWrites(sid).catch(() => {});
  return { view: v, failure };
}

function describeTurnError({ code, message }) {
  if (code === "model_error") return `the model failed (${message}). Check the model settings, or try again.`;
  if (code === "cancelled") return message;
  return `${message} (${code})`;
}

function submitPrompt() {
  const text = app.els.prompt.value.trim();
  if (!text) return;
  if (!app.session) {
    // The page is still opening its chat (a slow daemon, a loaded machine): the question waits in
    // the box, marked, and goes as soon as the chat is shown (showSession), rather than being lost.
    app.queued = text;
    updateComposer();
    return;
  }
  if (app.turns.has(app.session.id)) return;
  app.els.prompt.value = "";
  autoGrow();
  sendPrompt(text).catch(showError);
}

async function sendPrompt(text, { online } = {}) {
  const sid = app.session.id;
  const ctx = app.context;
  // Shown at once; the daemon's session replaces it when the turn ends.
  app.session.messages = [...app.session.messages, { role: "user", text, invocation_id: null }];
  app.session.pending_hitl = null; // a new prompt supersedes an unanswered checkpoint
  const request = {
    prompt: text, sessionId: sid, mode: ctx.mode,
    activeItems: ctx.mode === "papers" ? ctx.items.map((it) => ({ item_key: it.item_key, title: it.title || it.item_key })) : [],
    collection: ctx.mode === "collection" ? ctx.collection?.key : undefined,
    snippets: ctx.snippets.length ? ctx.snippets : undefined,
    online,
  };
  if (ctx.snippets.length) {
    app.context = { ...ctx, snippets: [] }; // focal snippets belong to the turn they were asked with
    renderChips();
  }
  const { view, failure } = await runTurn(sid, (signal) => app.client.chat(request, { signal }));
  if (failure instanceof ZocratesHttpError && !view.invocationId && !app.els.prompt.value) {
    app.els.prompt.value = text; // refused before it started: the question is not lost
  }
}

async function stopTurn() {
  const turn = app.session && app.turns.get(app.session.id);
  if (!turn || turn.stopping) return;
  turn.stopping = true;
  renderLive(turn);
  turn.stopTimer = setTimeout(() => turn.controller.abort(), STOP_GRACE_MS);
  try {
    for (let i = 0; i < CANCEL_RETRIES && app.turns.get(turn.sessionId) === turn; i++) {
      const { cancelled } = await app.client.cancel(turn.sessionId);
      if (cancelled) return;
      await new Promise((r) => setTimeout(r, 250));
    }
  } catch (err) {
    showError(err);
  }
}

function updateComposer() {
  const running = !!(app.session && app.turns.has(app.session.id));
  app.els.send.hidden = running;
  app.els.stop.hidden = !running;
  showCitationStyle(running);
  const waiting = !app.session && app.queued !== null;
  app.els.send.disabled = waiting;
  app.els.send.textContent = waiting ? "Sending…" : "Send";
  if (waiting) app.els.prompt.dataset.queued = "";
  else delete app.els.prompt.dataset.queued;
  renderChips();
}

// --- the chat's citation style (a session setting: GET/PATCH /sessions/{id}/settings) ----------------

/** The style select shows the shown chat's `settings.citation_style`, among the daemon's choices
 *  (asked for once); it waits while a turn runs (a setting cannot change under one). */
function showCitationStyle(running) {
  const select = app.els.citationStyle;
  const current = app.session?.settings?.citation_style;
  if (!app.styleChoices && app.session && !app.styleChoicesLoading) loadStyleChoices(app.session.id);
  const choices = app.styleChoices || (current ? [{ value: current, name: current }] : []);
  if (select.options.length !== choices.length || [...select.options].some((o, i) => o.value !== choices[i].value)) {
    select.replaceChildren(...choices.map((c) => h("option", { value: c.value, text: c.name })));
  }
  if (current) select.value = current;
  select.disabled = !app.session || running || !!app.savingStyle;
}

async function loadStyleChoices(sessionId) {
  app.styleChoicesLoading = true;
  try {
    const { options } = await app.client.sessionSettings(sessionId);
    app.styleChoices = options.find((o) => o.id === "citation_style")?.choices || null;
    showCitationStyle(!!(app.session && app.turns.has(app.session.id)));
  } catch (err) {
    showError(err);
  } finally {
    app.styleChoicesLoading = false;
  }
}

async function saveCitationStyle() {
  const session = app.session;
  if (!session) return;
  const value = app.els.citationStyle.value;
  app.savingStyle = true;
  updateComposer();
  try {
    const { options } = await app.client.updateSessionSettings(session.id, { citation_style: value });
    const now = options.find((o) => o.id === "citation_style")?.current ?? value;
    session.settings = { ...(session.settings || {}), citation_style: now };
  } catch (err) {
    showError(err);
  } finally {
    app.savingStyle = false;
    updateComposer();
  }
}

// --- the checkpoint card (spec 5.1) ------------------------------------------------------------------

function checkpointCard(pending) {
  const payload = pending.payload && typeof pending.payload === "object" ? pending.payload : {};
  const addressed = Array.isArray(payload.addressed_aspects) ? payload.addressed_aspects : [];
  const unaddressed = Array.isArray(payload.unaddressed_aspects) ? payload.unaddressed_aspects : [];
  const actions = Array.isArray(payload.actions) && payload.actions.length ? payload.actions : ["extend_budget", "synthesize"];
  const guidance = h("textarea", { class: "guidance", rows: "2", placeholder: "Optional: what should the next rounds look for?", "aria-label": "Guidance for the next rounds",
    on: { input: () => { app.guidance = { interrupt: pending.interrupt_id, text: guidance.value }; } } });
  // A re-render (another chat's turn ending, the host arriving) keeps what was typed.
  if (app.guidance?.interrupt === pending.interrupt_id) guidance.value = app.guidance.text;
  const buttons = [];
  const answer = (response) => {
    buttons.forEach((b) => { b.disabled = true; });
    resumeTurn(pending, response).catch(showError);
  };
  if (actions.includes("extend_budget")) {
    buttons.push(h("button", { type: "button", class: "primary extend", text: "Search more", on: { click: () => {
      const g = guidance.value.trim();
      answer(g ? { action: "extend_budget", guidance: g } : { action: "extend_budget" });
    } } }));
  }
  if (actions.includes("search_online")) {
    buttons.push(h("button", { type: "button", class: "search-online", text: "Search online",
      title: "Search OpenAlex, arXiv and Crossref for what is left, then answer (only the search terms leave this computer)",
      on: { click: () => answer({ action: "search_online" }) } }));
  }
  if (actions.includes("synthesize")) {
    buttons.push(h("button", { type: "button", class: "synthesize", text: "Answer now", on: { click: () => answer({ action: "synthesize" }) } }));
  }
  buttons.push(h("button", { type: "button", class: "link-button discard", text: "Discard question", title: "Rewind: the question goes back into the box",
    on: { click: () => { buttons.forEach((b) => { b.disabled = true; }); discardTurn(pending).catch(showError); } } }));
  const rounds = Array.isArray(payload.rounds) ? payload.rounds.length : payload.rounds;
  const meta = [];
  if (Number.isInteger(rounds)) meta.push(plural(rounds, "search round"));
  if (Number.isInteger(payload.extension) && Number.isInteger(payload.max_extensions)) meta.push(`checkpoint ${payload.extension} of at most ${payload.max_extensions}`);
  return h("div", { class: "checkpoint-card", role: "group", "aria-label": "Research checkpoint", data: { interrupt: pending.interrupt_id || "" } },
    h("h3", { text: "Research checkpoint" }),
    pending.message ? h("p", { class: "checkpoint-message", text: pending.message }) : null,
    addressed.length ? h("div", { class: "aspects done" }, h("span", { class: "aspects-label", text: "Searched" }), h("ul", {}, addressed.map((a) => h("li", { text: String(a) })))) : null,
    unaddressed.length ? h("div", { class: "aspects todo" }, h("span", { class: "aspects-label", text: "Not searched yet" }), h("ul", {}, unaddressed.map((a) => h("li", { text: String(a) })))) : null,
    meta.length ? h("p", { class: "muted", text: meta.join(" · ") }) : null,
    guidance,
    h("div", { class: "card-actions" }, buttons));
}

async function resumeTurn(pending, response) {
  const sid = app.session.id;
  app.session.pending_hitl = null;
  const { failure } = await runTurn(sid, (signal) => app.client.resume(
    { sessionId: sid, invocationId: pending.invocation_id, interruptId: pending.interrupt_id, response }, { signal }));
  if (failure instanceof ZocratesHttpError && failure.code === "checkpoint_not_pending") await reloadSession(sid);
}

async function discardTurn(pending) {
  const sid = app.session.id;
  const result = await app.client.rewind(sid, pending.invocation_id);
  applyRestored(result.restored);
  showSession(result.session);
  if (result.restored?.text && !app.els.prompt.value) {
    app.els.prompt.value = result.restored.text;
    autoGrow();
  }
}

// --- inline edit = rewind (spec 5.2) -----------------------------------------------------------------

function startEdit(m, el) {
  const ta = h("textarea", { class: "edit-text", rows: "3", "aria-label": "Edit your question" });
  ta.value = m.text;
  const send = h("button", { type: "button", class: "primary edit-send", text: "Ask again" });
  const cancel = h("button", { type: "button", class: "link-button edit-cancel", text: "Cancel" });
  const submit = async () => {
    const text = ta.value.trim();
    if (!text) return;
    send.disabled = cancel.disabled = ta.disabled = true;
    await editAndResend(m, text);
  };
  send.addEventListener("click", () => submit().catch(showError));
  cancel.addEventListener("click", () => renderMessages());
  ta.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      submit().catch(showError);
    } else if (e.key === "Escape") {
      e.preventDefault();
      renderMessages();
    }
  });
  el.replaceChildren(ta, h("div", { class: "msg-actions" }, send, cancel));
  ta.focus();
}

async function editAndResend(m, text) {
  const sid = app.session.id;
  let result;
  try {
    result = await app.client.rewind(sid, m.invocation_id);
  } catch (err) {
    showError(err);
    await reloadSession(sid);
    return;
  }
  // The turn is asked again with the context it had: its chips, snippets and mode.
  applyRestored(result.restored);
  showSession(result.session);
  await sendPrompt(text);
}

function applyRestored(restored) {
  if (!restored) return;
  const items = Array.isArray(restored.active_context_items)
    ? restored.active_context_items.filter((it) => it && it.item_key).map((it) => ({ item_key: it.item_key, title: it.title || it.item_key }))
    : [];
  let mode = restored.mode || "library";
  const key = typeof restored.collection === "string" ? restored.collection : null;
  const collection = key ? { key, name: app.selection?.collection?.key === key ? app.selection.collection.name : `collection ${key}` } : null;
  if (mode === "papers" && !items.length) mode = "library";
  if (mode === "collection" && !collection) mode = "library";
  app.context = { mode, items, collection, snippets: Array.isArray(restored.snippets) ? restored.snippets : [] };
  renderChips();
}

// --- context chips (from the Zotero selection) -------------------------------------------------------

function contextFromSelection(sel, snippets = []) {
  if (sel?.items?.length) return { mode: "papers", items: sel.items.map((it) => ({ item_key: it.item_key, title: it.title || it.item_key })), collection: null, snippets };
  if (sel?.collection) return { mode: "collection", items: [], collection: sel.collection, snippets };
  return { mode: "library", items: [], collection: null, snippets };
}

function chip(kind, label, title, remove) {
  return h("span", { class: `chip ${kind}`, title: title || label, data: { kind } },
    h("span", { class: "chip-label", text: label }),
    remove ? h("button", { type: "button", class: "chip-remove", "aria-label": `Remove ${label}`, text: "×", on: { click: remove } }) : null);
}

function renderChips() {
  const box = app.els.chips;
  if (!box) return;
  const ctx = app.context;
  const chips = [];
  const fallback = () => {
    app.context = { ...contextFromSelection({ collection: app.selection?.collection }, ctx.snippets) };
    renderChips();
  };
  if (ctx.mode === "papers") {
    for (const it of ctx.items) {
      chips.push(chip("paper", it.title || it.item_key, `${it.title || ""} (${it.item_key})`, () => {
        const items = ctx.items.filter((x) => x.item_key !== it.item_key);
        if (items.length) {
          app.context = { ...ctx, items };
          renderChips();
        } else {
          fallback();
        }
      }));
    }
  } else if (ctx.mode === "collection" && ctx.collection) {
    chips.push(chip("collection", ctx.collection.name, `the collection ${ctx.collection.name} and its subcollections`, () => {
      app.context = { mode: "library", items: [], collection: null, snippets: ctx.snippets };
      renderChips();
    }));
  } else {
    chips.push(chip("library", "Whole library", "the question searches your whole library", null));
  }
  ctx.snippets.forEach((sn, i) => {
    const text = String(sn.text || "");
    const label = `“${text.length > 40 ? `${text.slice(0, 39)}…` : text}”${Number.isInteger(sn.page) ? ` p. ${sn.page}` : ""}`;
    chips.push(chip("snippet", label, text, () => {
      app.context = { ...app.context, snippets: app.context.snippets.filter((_, j) => j !== i) };
      renderChips();
    }));
  });
  box.replaceChildren(...chips);
}

// --- links (through the bridge when Zotero hosts the page) ------------------------------------------

function onLinkClick(event) {
  const a = event.target instanceof Element ? event.target.closest("a[href]") : null;
  if (!a) return;
  const href = a.getAttribute("href");
  if (href.startsWith("zotero:") && app.bridge?.can("open")) {
    event.preventDefault();
    app.bridge.open(href).catch(showError);
  }
}

// --- writes into Zotero: an answer's actions and their consent cards ---------------------------------
//
// Every write goes through the daemon (POST /writes/<kind>), whether Zotero hosts the page or not:
// the daemon records it, the person says yes on its card, the daemon hands it to Zotero (the
// plugin, or Zotero's local API) and can undo it. A card is one proposal (one write, or two: a
// collection created and the papers put into it); its element lives across re-renders of the
// chat and is refilled in place, so the conversation neither jumps nor loses what a card shows.

// What "Always for this kind" lets through without asking, in words.
const KIND_NAMES = {
  save_note: "notes", tag_items: "tags added", untag_items: "tags removed", add_to_collection: "additions to collections",
  create_collection: "new collections", add_item: "new items",
};
const NO_COLLECTION_RE = /^no collection called /;

/** The Zotero items an answer cites (its "# Cited Sources" entries): `all` of them
 *  `[{key, title, page, library}]`, and the `items` of one `library`, the first one's (a tag or a
 *  collection is written in one library; a note's citations may name several). */
function citedItems(m) {
  const sources = withPages(parseSources(m.text), app.passages.get(m.invocation_id), m.text);
  const all = [];
  for (const s of sources.values()) {
    const [, lib, key] = ITEM_URI_RE.exec(s.uri || "") || [];
    if (!key || all.some((c) => c.key === key)) continue;
    const listed = LISTED_PAGES_RE.exec(s.title || "");
    const pages = listed ? listed[1] : [...(s.pdfs?.keys() || [])].join(", ");
    all.push({ key, title: String(s.title || "").slice(0, 1000), page: pages ? pages.slice(0, 40) : null, library: lib === "library" ? "user" : lib });
  }
  const library = all[0]?.library || "user";
  return { library, all, items: all.filter((c) => c.library === library) };
}

function askKey(m) {
  return `${app.session?.id} ${m.invocation_id || ""}`;
}

/** The answer's cited sources found online (not in the library): [{n, title, uri, passage?}], with
 *  the search's passage for it when this page streamed the turn (authors, year, abstract). */
function onlineSources(m) {
  const passages = (app.passages.get(m.invocation_id) || []).filter((p) => p && p.kind === "online");
  const out = [];
  for (const s of parseSources(m.text).values()) {
    if (!String(s.title || "").includes(ONLINE_MARK) || !/^https?:/.test(s.uri)) continue;
    const title = String(s.title).split(ONLINE_MARK)[0].trim();
    out.push({ n: s.n, title, uri: s.uri, passage: passages.find((p) => p.link === s.uri) || null });
  }
  return out;
}

/** The add_item write for an online source: its title, authors, year, DOI, link and abstract. */
function addItemParams(source) {
  const p = source.passage;
  const doi = /^https:\/\/doi\.org\/(.+)$/.exec(source.uri)?.[1];
  const fields = { url: source.uri };
  if (doi) fields.DOI = decodeURIComponent(doi);
  if (p?.year) fields.date = String(p.year);
  if (p?.text) fields.abstractNote = String(p.text).slice(0, 10000);
  const creators = (p?.creators || []).slice(0, 50).map((name) => {
    const parts = String(name).trim().split(/\s+/);
    return parts.length > 1 ? { creator_type: "author", first_name: parts.slice(0, -1).join(" "), last_name: parts.at(-1) }
      : { creator_type: "author", name: String(name) };
  });
  // Without the search's passage (a reloaded page) the entry's text is all we have: "Author (Year). Title."
  const title = p?.title || source.title.replace(/^.*?\(\d{4}|n\.d\.\)\.\s*/, "").replace(/\.$/, "");
  return { item_type: "journalArticle", title: title.slice(0, 1000), creators, fields, sessionId: app.session.id };
}

// How an answer ends when the library left part of it unanswered and nobody could be asked whether
// to search online (online.mode ask): the daemon's engine/models/offline.py ONLINE_TIP.
const ONLINE_TIP_START = "Beyond your library: I can search OpenAlex, arXiv and Crossref";

/** Under such an answer: the person's yes, here: the same question again, allowed to search online. */
function onlineAgain(m) {
  if (!String(m.text || "").includes(ONLINE_TIP_START)) return null;
  const messages = app.session?.messages || [];
  const at = messages.indexOf(m);
  const asked = messages.slice(0, at < 0 ? messages.length : at).reverse().find((x) => x.role === "user");
  if (!asked?.text) return null;
  return h("div", { class: "msg-actions online-again" },
    h("button", { type: "button", class: "link-button search-online-again", text: "Search online too",
      title: "Ask again, searching OpenAlex, arXiv and Crossref for what your library leaves unanswered (only the search terms leave this computer)",
      on: { click: (e) => { e.currentTarget.disabled = true; sendPrompt(asked.text, { online: true }).catch(showError); } } }));
}

function onlineActions(m) {
  const online = onlineSources(m);
  if (!online.length) return null;
  return h("div", { class: "online-sources", role: "group", "aria-label": "Sources found online" },
    online.map((s) => h("button", { type: "button", class: "link-button add-to-zotero", data: { n: String(s.n) },
      text: `Add [${s.n}] to Zotero`, title: `Add “${s.title.slice(0, 120)}” to your library (you confirm it first)`,
      on: { click: () => proposeFor(m.invocation_id || null, [() => ["add_item", addItemParams(s)]]).catch(showError) } })));
}

function writeActions(m) {
  const { items } = citedItems(m);
  const actions = h("div", { class: "msg-actions" },
    h("button", { type: "button", class: "link-button save-note", text: savedNote(m) ? "Saved as a note" : "Save as note",
      title: "Save this answer as a note in Zotero (you confirm it first)", on: { click: () => saveNote(m) } }),
    items.length ? h("button", { type: "button", class: "link-button tag-cited", text: "Tag cited papers", "aria-expanded": String(app.asking.get(askKey(m))?.what === "tag"),
      on: { click: (e) => askFor(m, "tag", e.currentTarget) } }) : null,
    citedItems(m).all.length ? h("button", { type: "button", class: "link-button copy-bib", text: "Copy bibliography",
      title: "Copy the cited papers' references (in Zotero's Quick Copy style when it is installed, else APA) to the clipboard",
      on: { click: (e) => copyBibliography(m, e.currentTarget) } }) : null,
    items.length ? h("button", { type: "button", class: "link-button add-to-collection", text: "Add to collection", "aria-expanded": String(app.asking.get(askKey(m))?.what === "collection"),
      on: { click: (e) => askFor(m, "collection", e.currentTarget) } }) : null);
  return h("div", { class: "write-actions" }, actions, onlineActions(m), app.asking.get(askKey(m))?.el);
}

/** The bibliography of the answer's cited papers, formatted by the daemon (citeproc with a CSL
 *  style), onto the clipboard; where the page may not write it, the text is shown selected to copy. */
async function copyBibliography(m, button) {
  try {
    const { text } = await app.client.bibliography(app.session.id, { format: "text", invocationId: m.invocation_id || undefined });
    try {
      await navigator.clipboard.writeText(text);
      button.textContent = "Copied";
    } catch {
      const area = h("textarea", { class: "bib-text", readonly: "", rows: "6", "aria-label": "Bibliography" });
      area.value = text;
      button.closest(".write-actions")?.append(area);
      area.select();
    }
  } catch (err) {
    showError(err);
  }
}

/** Whether a note saved from this answer is in Zotero now (the button says so). */
function savedNote(m) {
  return cardsOf(app.session?.id, m.invocation_id).some((c) => c.writes.some((w) => w.kind === "save_note" && w.state === "applied"));
}

function cardsOf(sessionId, anchor) {
  return app.cards.filter((c) => c.sessionId === sessionId && c.anchor === anchor);
}

async function saveNote(m) {
  const sources = parseSources(m.text);
  const { library, all, items } = citedItems(m);
  const params = {
    markdown: noteMarkdown(m.text, sources),
    citations: all.map(({ key, title, page, library: lib }) => ({ key, title, page, library: lib })),
    sessionId: app.session.id,
  };
  // One cited paper: the note is its child; else a standalone note.
  if (all.length === 1) {
    params.parentItem = items[0].key;
    params.library = library;
  }
  await proposeFor(m.invocation_id || null, [() => ["save_note", params]]).catch(showError);
}

/** The inline question of "Tag cited papers" / "Add to collection" under an answer (a second
 *  click on its button closes it). */
function askFor(m, what, button) {
  const key = askKey(m);
  const open = app.asking.get(key);
  if (open) {
    open.el.remove();
    app.asking.delete(key);
    for (const b of button.parentElement.querySelectorAll("[aria-expanded]")) b.setAttribute("aria-expanded", "false");
    if (open.what === what) return;
  }
  const tagging = what === "tag";
  const input = h("input", { type: "text", class: "write-input", maxlength: tagging ? "2000" : "500",
    "aria-label": tagging ? "Tags, separated by commas" : "Collection name or path",
    placeholder: tagging ? "Tags, separated by commas" : "Collection (e.g. Thesis / Chapter 2)" });
  const problem = h("div", { class: "write-problem", role: "alert", hidden: true });
  const submit = h("button", { type: "submit", class: "primary write-preview-button", text: "Preview" });
  const close = () => {
    form.remove();
    app.asking.delete(key);
    button.setAttribute("aria-expanded", "false");
    button.focus();
  };
  const form = h("form", { class: `write-ask ${tagging ? "ask-tags" : "ask-collection"}`, "aria-label": tagging ? "Tag cited papers" : "Add to collection",
    on: {
      submit: (e) => { e.preventDefault(); submitAsk(m, what, input, problem, submit, close); },
      keydown: (e) => { if (e.key === "Escape") { e.preventDefault(); e.stopPropagation(); close(); } },
    } },
  h("div", { class: "write-ask-row" }, input, submit,
    h("button", { type: "button", class: "link-button", text: "Cancel", on: { click: close } })),
  problem);
  app.asking.set(key, { what, el: form });
  button.setAttribute("aria-expanded", "true");
  button.closest(".write-actions").append(form);
  input.focus();
}

async function submitAsk(m, what, input, problem, submit, close) {
  const { library, items } = citedItems(m);
  const itemKeys = items.map((c) => c.key);
  const value = input.value.trim();
  const say = (...content) => {
    fill(problem, ...content);
    problem.hidden = !content.length;
  };
  let steps;
  if (what === "tag") {
    const tags = [...new Set(value.split(",").map((t) => t.trim()).filter(Boolean))];
    if (!tags.length) return say("Type one or more tags, separated by commas.");
    steps = [() => ["tag", { itemKeys, tags, library, sessionId: app.session.id }]];
  } else {
    if (!value) return say("Type the name of a collection, or its path (Parent / Child).");
    steps = [() => ["add_to_collection", { itemKeys, collection: value, library, sessionId: app.session.id }]];
  }
  say();
  submit.disabled = true;
  try {
    await proposeFor(m.invocation_id || null, steps);
    close();
  } catch (err) {
    if (what === "collection" && err instanceof ZocratesHttpError && NO_COLLECTION_RE.test(err.body?.error?.message || "")) {
      // Offer to create it (and its place: "Parent / Child" makes Child under Parent).
      const parts = value.split("/").map((p) => p.trim()).filter(Boolean);
      const name = parts.at(-1);
      const parent = parts.slice(0, -1).join(" / ");
      const create = h("button", { type: "button", class: "link-button write-create", text: "Create it",
        on: { click: () => {
          create.disabled = true;
          proposeFor(m.invocation_id || null, [
            () => ["create_collection", { name, ...(parent ? { parent } : {}), library, sessionId: app.session.id }],
            (made) => ["add_to_collection", { itemKeys, collection: made.operation.new_key, library, sessionId: app.session.id }],
          ]).then(close, (e) => { create.disabled = false; say(describe(e)); });
        } } });
      say(h("span", { text: `There is no collection “${value}” in your library. ` }), create);
      create.focus();
    } else {
      say(describe(err));
    }
  } finally {
    submit.disabled = false;
  }
}

/** Propose the writes of `steps` (each a function of the write before it, giving [kind, params])
 *  and show them on one card under the answer `anchor`. A step refused takes back the ones before. */
async function proposeFor(anchor, steps) {
  const sessionId = app.session.id;
  const writes = [];
  try {
    for (const step of steps) {
      const [kind, params] = step(writes.at(-1));
      writes.push((await app.client.proposeWrite(kind, params)).write);
    }
  } catch (err) {
    for (const w of writes) await app.client.discardWrite(w.id).catch(() => {});
    throw err;
  }
  const card = newCard(sessionId, anchor, writes);
  placeCard(card);
  card.el.scrollIntoView({ block: "nearest" });
  card.el.querySelector("button")?.focus();
  watchWrites();
}

function newCard(sessionId, anchor, writes) {
  const card = { sessionId, anchor, writes, undos: [], busy: null, problem: null,
    el: h("div", { class: "write-card", role: "group", "aria-label": "Write to Zotero", tabindex: "-1" }) };
  app.cards.push(card);
  fillCard(card);
  return card;
}

/** Put a new card where it belongs in the shown chat: under its answer, else with the loose ones. */
function placeCard(card) {
  if (app.session?.id !== card.sessionId) return;
  const box = app.els.messages;
  // The answer's own message (a turn's thoughts may be a message of their own before it).
  const under = card.anchor && [...box.querySelectorAll(".msg.assistant")].filter((el) => el.dataset.invocation === card.anchor && el.querySelector(".answer")).at(-1);
  if (under) {
    under.append(card.el);
    return;
  }
  let loose = box.querySelector(".writes-loose");
  if (!loose) {
    loose = h("div", { class: "writes-loose", role: "group", "aria-label": "Writes into Zotero" });
    const live = app.turns.get(card.sessionId)?.el;
    if (live?.isConnected) live.before(loose);
    else box.append(loose);
  }
  loose.append(card.el);
}

/** The summary state of a card: what the person is asked, or what came of it. */
function cardState(card) {
  const states = card.writes.map((w) => w.state);
  for (const st of ["awaiting_consent", "failed", "queued", "applied", "undone"]) if (states.includes(st)) return st;
  return "discarded";
}

function outcome(w) {
  switch (w.state) {
    case "applied": return "Written to Zotero.";
    case "queued": return `Not written yet: ${w.error || "waiting for Zotero"}. It will be once Zotero can take it, unless you discard it.`;
    case "failed": return `Not written: ${w.error || "Zotero refused it"}.`;
    case "discarded": return "Cancelled: nothing was written.";
    case "undone": return "Undone.";
    default: return "";
  }
}

function fillCard(card) {
  const focused = card.el.contains(document.activeElement);
  const state = cardState(card);
  card.el.dataset.state = state;
  card.el.dataset.writes = card.writes.map((w) => w.id).join(" ");
  const asking = state === "awaiting_consent";
  const buttons = [];
  const act = (label, fn) => () => cardAction(card, label, fn);
  if (card.busy) {
    // nothing to press while the daemon answers
  } else if (asking) {
    const kinds = [...new Set(card.writes.map((w) => KIND_NAMES[w.kind] || w.kind))].join(" and ");
    buttons.push(
      h("button", { type: "button", class: "primary write-confirm", text: "Write to Zotero", on: { click: act("Writing to Zotero…", () => confirmCard(card, false)) } }),
      h("button", { type: "button", class: "write-always", text: "Always for this kind", title: `From now on, write ${kinds} without asking`,
        on: { click: act("Writing to Zotero…", () => confirmCard(card, true)) } }),
      h("button", { type: "button", class: "link-button write-cancel", text: "Cancel", on: { click: act("Cancelling…", () => discardCard(card, ["awaiting_consent"])) } }));
  } else {
    if (card.writes.some((w) => w.state === "applied")) {
      buttons.push(h("button", { type: "button", class: "write-undo", text: "Undo", on: { click: act("Undoing…", () => undoCard(card)) } }));
    }
    if (card.writes.some((w) => w.state === "queued")) {
      buttons.push(h("button", { type: "button", class: "link-button write-discard", text: "Discard", title: "Drop this write: nothing is written",
        on: { click: act("Discarding…", () => discardCard(card, ["queued"])) } }));
    }
  }
  const waitingUndo = card.undos.filter((u) => u.state === "queued" || u.state === "failed");
  fill(card.el,
    h("div", { class: "write-title", text: asking ? "Write to Zotero?" : "Write to Zotero" }),
    card.writes.map((w) => h("div", { class: "write-one", data: { id: w.id, state: w.state } },
      h("pre", { class: "write-preview", text: w.preview || "" }),
      asking ? null : h("p", { class: "write-outcome", text: outcome(w) }))),
    waitingUndo.map((u) => h("p", { class: "write-outcome", text: u.state === "failed" ? `Undo failed: ${u.error || "Zotero refused it"}.` : `Undo not done yet: ${u.error || "waiting for Zotero"}.` })),
    card.problem ? h("p", { class: "write-problem", role: "alert", text: card.problem }) : null,
    h("p", { class: "write-status", role: "status", text: card.busy || "" }),
    buttons.length ? h("div", { class: "card-actions" }, buttons) : null);
  if (focused) (card.el.querySelector("button") || card.el).focus();
  // The answer's "Save as note" says when its note is in Zotero.
  const save = card.el.closest(".msg.assistant")?.querySelector(".save-note");
  if (save && card.writes.some((w) => w.kind === "save_note")) save.textContent = state === "applied" ? "Saved as a note" : "Save as note";
}

async function cardAction(card, busy, fn) {
  card.busy = busy;
  card.problem = null;
  fillCard(card);
  try {
    await fn();
  } catch (err) {
    card.problem = describe(err);
  }
  card.busy = null;
  fillCard(card);
  watchWrites();
}

function replaceWrite(card, write) {
  card.writes = card.writes.map((w) => (w.id === write.id ? write : w));
}

async function confirmCard(card, always) {
  for (const w of card.writes) {
    if (w.state !== "awaiting_consent") continue;
    // A step that failed (the collection was not created) takes the rest back.
    if (card.writes.some((x) => x.state === "failed")) replaceWrite(card, (await app.client.discardWrite(w.id)).write);
    else replaceWrite(card, (await app.client.confirmWrite(w.id, { always })).write);
    fillCard(card);
  }
}

async function discardCard(card, states) {
  for (const w of card.writes) if (states.includes(w.state)) replaceWrite(card, (await app.client.discardWrite(w.id)).write);
}

async function undoCard(card) {
  // The last written first (papers out of a collection, then the collection).
  for (const w of [...card.writes].reverse()) {
    if (w.state !== "applied") continue;
    card.undos.push((await app.client.undoWrite({ writeId: w.id })).write);
    replaceWrite(card, (await app.client.getWrite(w.id)).write);
  }
}

/** Ask again, every WRITE_POLL_MS, about the writes that wait for Zotero. */
function watchWrites() {
  const waiting = () => app.cards.some((c) => !c.busy && [...c.writes, ...c.undos].some((w) => w.state === "queued"));
  if (app.writeTimer !== null || !waiting()) return;
  app.writeTimer = setTimeout(async () => {
    for (const card of app.cards) {
      if (card.busy) continue;
      let changed = false;
      for (const list of [card.writes, card.undos]) {
        for (const [i, w] of list.entries()) {
          if (w.state !== "queued") continue;
          try {
            const { write } = await app.client.getWrite(w.id);
            if (write.state !== w.state) {
              list[i] = write;
              changed = true;
            }
          } catch {
            /* the daemon is away: asked again next time */
          }
        }
      }
      if (changed) {
        // An undo that went through: the write it undid says so.
        for (const u of card.undos) {
          if (u.state === "applied" && u.undoes) {
            const target = card.writes.find((w) => w.id === u.undoes && w.state === "applied");
            if (target) replaceWrite(card, (await app.client.getWrite(target.id).catch(() => ({ write: target }))).write);
          }
        }
        fillCard(card);
      }
    }
    app.writeTimer = null;
    watchWrites();
  }, WRITE_POLL_MS);
}

/** Show the cards of the session's writes that wait (for consent, or for Zotero): proposed by a
 *  model during a turn, or by this page before a reload. */
async function loadPendingWrites(sessionId) {
  app.writesLoadedFor = sessionId;
  const { writes } = await app.client.listWrites({ pending: true, sessionId });
  const known = new Set(app.cards.flatMap((c) => c.writes.map((w) => w.id)));
  for (const w of writes.filter((x) => !known.has(x.id)).reverse()) placeCard(newCard(sessionId, null, [w]));
  watchWrites();
}

// --- library status ----------------------------------------------------------------------------------

function stopLibraryPoll() {
  clearTimeout(app.libraryTimer);
  app.libraryTimer = null;
}

async function pollLibrary({ refresh = false } = {}) {
  stopLibraryPoll();
  let library;
  try {
    library = (await app.client.libraryStatus({ refresh })).library;
  } catch (err) {
    if (err instanceof ZocratesHttpError && err.code === "unauthorized") return showError(err);
    app.libraryTimer = setTimeout(pollLibrary, LIBRARY_POLL_MS.unavailable);
    return;
  }
  renderLibrary(library);
  app.library = library;
  refreshWelcome();
  const empty = library?.state === "ready" && !(library.kinds?.items ?? library.items_indexed);
  const wait = LIBRARY_POLL_MS[library?.state] ?? (empty ? EMPTY_LIBRARY_POLL_MS : 0);
  if (wait) app.libraryTimer = setTimeout(pollLibrary, wait);
}

function renderLibrary(lib) {
  const box = app.els.library;
  if (!box || !lib) return;
  box.dataset.state = lib.state;
  const again = () => h("button", { type: "button", class: "link-button", text: "Check again", on: { click: () => pollLibrary({ refresh: true }) } });
  switch (lib.state) {
    case "starting":
      fill(box, h("span", { text: "Opening your Zotero library…" }), h("progress", { "aria-label": "Opening the library" }));
      break;
    case "indexing": {
      const pct = Math.max(0, Math.min(100, Number(lib.percent) || 0));
      const counts = lib.items_to_index ? ` (${lib.items_done} of ${lib.items_to_index} items)` : "";
      fill(box, h("span", { text: `Indexing your Zotero library: ${Math.floor(pct)}%${counts}. Answers search what is indexed so far.` }),
        h("progress", { max: "100", value: String(pct), "aria-label": "Indexing progress" }));
      break;
    }
    case "unavailable":
      fill(box,
        h("strong", { text: "No Zotero library found." }),
        lib.message ? h("p", { class: "library-message", text: lib.message }) : null,
        h("p", { text: "What to do: start zocratesd with --zotero-data-dir set to your Zotero data directory "
          + "(Zotero: Settings > Advanced > Files and Folders), or let it read your library through Zotero's local API "
          + "(Zotero: Settings > Advanced > \u201cAllow other applications on this computer to communicate with Zotero\u201d). "
          + "Until then answers find nothing." }),
        again());
      break;
    case "error":
      fill(box, h("strong", { text: "Indexing your library failed." }), lib.message ? h("p", { text: lib.message }) : null, again());
      break;
    default: // ready, stopped, disabled: nothing to say in the chat
      fill(box);
  }
  box.hidden = !box.childNodes.length;
}

// --- preferences: "Chat Sessions & Storage" (spec 8.1) -------------------------------------------------

const SKIP_REASONS = {
  not_needed: "not needed (little space to reclaim)",
  chat_in_progress: "deferred, a chat is running (it is done at the next clean-up)",
  insufficient_disk: "not enough free disk space",
  busy: "the database is busy; try again later",
  error: "it failed (see zocratesd.log); the database is intact",
};

function describeModel(model) {
  if (!model) return "—";
  if (typeof model === "string") return model;
  if (typeof model === "object") return [model.provider, model.name].filter(Boolean).join(": ") || "—";
  return String(model);
}

function figure(id, label) {
  return [h("dt", { text: label }), h("dd", { id, text: "…" })];
}

function buildPrefs(container, { standalone }) {
  const days = h("input", { id: "retention-days", type: "number", min: "0", step: "1", inputmode: "numeric", "aria-describedby": "retention-help" });
  const max = h("input", { id: "max-sessions", type: "number", min: "0", step: "1", inputmode: "numeric" });
  const status = h("p", { id: "settings-status", class: "muted", role: "status" });
  const save = h("button", { id: "save-settings", type: "submit", class: "primary", text: "Save" });
  const cleanup = h("button", { id: "cleanup", type: "button", text: "Clean Up Now" });
  const report = h("p", { id: "cleanup-report", role: "status" });
  const form = h("form", { class: "settings-form", on: { submit: (e) => { e.preventDefault(); saveSettings(days, max, status, save); } } },
    h("label", {}, h("span", { text: "Delete chats not used for" }), h("span", { class: "field" }, days, " days")),
    h("label", {}, h("span", { text: "Keep at most" }), h("span", { class: "field" }, max, " chats")),
    h("p", { id: "retention-help", class: "muted", text: "0 or empty: no limit. Chats with a running answer are never deleted." }),
    h("div", { class: "card-actions" }, save), status);
  cleanup.addEventListener("click", () => cleanUp(cleanup, report));
  const onlineStatus = h("p", { id: "online-status", class: "muted", role: "status" });
  const onlineMode = h("select", { id: "online-mode", "aria-describedby": "online-help",
    on: { change: () => saveOnlineMode(onlineMode, onlineStatus) } },
    [["ask", "Ask me first"], ["on", "When my library has no answer"], ["off", "Never"]].map(([value, text]) => h("option", { value, text })));
  container.replaceChildren(...[
    standalone ? null : h("div", { class: "prefs-head" }, h("button", { type: "button", class: "link-button", id: "prefs-back", text: "← Back to the chat", on: { click: () => togglePrefs(false) } })),
    h("h2", { text: "Chat Sessions & Storage" }),
    h("dl", { class: "figures" }, figure("pref-db-size", "Database size"), figure("pref-sessions", "Sessions"), figure("pref-events", "Events"), figure("pref-free", "Free pages")),
    h("h3", { text: "Retention" }), form,
    h("h3", { text: "Clean up" }),
    h("p", { class: "muted", text: "Deletes empty chats older than a day and chats beyond the limits above, then compacts the database when that frees enough space." }),
    h("div", { class: "card-actions" }, cleanup), report,
    h("h3", { text: "Beyond your library" }),
    h("label", { class: "settings-form" }, h("span", { text: "Search OpenAlex, arXiv and Crossref" }), h("span", { class: "field" }, onlineMode)),
    h("p", { id: "online-help", class: "muted", text: "Only the search terms leave this computer, never your library or your chats." }),
    onlineStatus,
    h("h3", { text: "About" }),
    h("dl", { class: "figures" }, figure("pref-version", "Daemon version"), figure("pref-model", "Model"), figure("pref-library", "Library"), figure("pref-config", "Settings file")),
  ].filter(Boolean));
}

function setText(id, text) {
  const el = document.getElementById(id);
  if (el) el.textContent = text;
}

function showStats(stats) {
  const db = (stats.db_size_bytes || 0) + (stats.wal_size_bytes || 0);
  setText("pref-db-size", formatBytes(db));
  setText("pref-sessions", String(stats.session_count));
  setText("pref-events", String(stats.event_count));
  setText("pref-free", `${stats.freelist_count} of ${stats.page_count} pages (${Math.round((stats.freelist_ratio || 0) * 100)}%)`);
}

function showSettings(answer) {
  const s = answer.settings || {};
  const days = document.getElementById("retention-days");
  const max = document.getElementById("max-sessions");
  if (!days || !max) return;
  days.value = s.session_retention_days ?? "";
  max.value = s.max_saved_sessions ?? "";
  const env = Array.isArray(answer.environment) ? answer.environment : [];
  for (const [input, key] of [[days, "session_retention_days"], [max, "max_saved_sessions"]]) {
    input.disabled = env.includes(key);
    input.title = input.disabled ? `set by ZOCRATES_${key.toUpperCase()} in the daemon's environment` : "";
  }
  setText("pref-config", answer.config_path || "—");
  if (answer.model !== undefined) setText("pref-model", describeModel(answer.model));
  const online = document.getElementById("online-mode");
  if (online && s.online?.mode) {
    online.value = s.online.mode;
    online.disabled = env.includes("online.mode");
    online.title = online.disabled ? "set by ZOCRATES_ONLINE__MODE in the daemon's environment" : "";
  }
}

async function saveOnlineMode(select, status) {
  status.className = "muted";
  status.textContent = "Saving…";
  try {
    showSettings(await app.client.updateSettings({ online: { mode: select.value } }));
    status.textContent = "Saved. Applies now.";
  } catch (err) {
    status.className = "error-text";
    status.textContent = `Not saved: ${describe(err)}`;
  }
}

// "31 items, 2 notes, 12 annotations, 30 attachments": `counts` (each Zotero kind once; items are
// regular items only); a daemon older than `counts` gives its indexed records as items.
function libraryCounts(l) {
  const c = l.counts;
  if (!c) return plural(l.items_indexed ?? 0, "item");
  return [plural(c.items ?? 0, "item"), plural(c.notes ?? 0, "note"), plural(c.annotations ?? 0, "annotation"),
    plural(c.attachments ?? 0, "attachment")].join(", ");
}

async function loadPrefs() {
  const c = app.client;
  const tasks = [
    c.storageStats().then(showStats),
    c.getSettings().then(showSettings),
    (app.register ? Promise.resolve(app.register) : c.register({ client: "zocrates-webui" })).then((reg) => {
      app.register = reg;
      setText("pref-version", reg.version || "—");
      if (reg.model !== undefined) setText("pref-model", describeModel(reg.model));
    }),
    c.libraryStatus().then(({ library }) => {
      const l = library || {};
      const what = l.state === "ready" ? `ready: ${libraryCounts(l)} indexed`
        : l.state === "indexing" ? `indexing: ${Math.floor(l.percent || 0)}%` : `${l.state}${l.message ? ` (${l.message})` : ""}`;
      setText("pref-library", what);
    }),
  ];
  const results = await Promise.allSettled(tasks);
  const failed = results.find((r) => r.status === "rejected");
  if (failed) throw failed.reason;
  if (document.getElementById("pref-model")?.textContent === "…") setText("pref-model", "—");
}

function intOrNull(input) {
  const v = input.value.trim();
  if (v === "") return null;
  const n = Number(v);
  return Number.isInteger(n) && n >= 0 ? n : Number.NaN;
}

async function saveSettings(daysInput, maxInput, status, button) {
  const changes = {};
  for (const [input, key] of [[daysInput, "session_retention_days"], [maxInput, "max_saved_sessions"]]) {
    if (input.disabled) continue;
    const v = intOrNull(input);
    if (Number.isNaN(v)) {
      status.className = "error-text";
      status.textContent = "Use a whole number, 0 or more (or leave it empty for no limit).";
      return;
    }
    changes[key] = v;
  }
  button.disabled = true;
  status.className = "muted";
  status.textContent = "Saving…";
  try {
    const answer = await app.client.updateSettings(changes);
    showSettings(answer);
    const later = Object.keys(changes).filter((k) => answer.applies?.[k] === "next_start");
    status.textContent = later.length
      ? "Saved. It applies when zocratesd next starts."
      : "Saved. Applies now: at the next Clean Up Now (and at every daemon start).";
  } catch (err) {
    status.className = "error-text";
    status.textContent = err instanceof ZocratesHttpError && err.code === "invalid_input"
      ? `Not saved: ${err.body?.error?.message || err.message}` : `Not saved: ${describe(err)}`;
  } finally {
    button.disabled = false;
  }
}

async function cleanUp(button, report) {
  button.disabled = true;
  button.textContent = "Cleaning up…";
  report.className = "muted";
  report.textContent = "Working…";
  try {
    const r = await app.client.maintenance();
    const v = r.vacuum || {};
    const deleted = `Deleted ${plural(r.empty_deleted ?? 0, "empty chat")} and ${plural(r.retention_deleted ?? 0, "chat")} beyond the limits.`;
    const vac = v.ran
      ? ` Compacted the database: ${formatBytes(v.bytes_before)} → ${formatBytes(v.bytes_after)}.`
      : ` Database not compacted: ${SKIP_REASONS[v.skipped_reason] || v.skipped_reason || "not needed"}.`;
    report.className = "cleanup-done";
    report.textContent = `${deleted}${vac} Took ${Math.round(r.duration_ms ?? 0)} ms.`;
    showStats(await app.client.storageStats());
    if (app.els.sessionsList) refreshSessions().catch(() => {});
  } catch (err) {
    report.className = "error-text";
    report.textContent = `Clean-up failed: ${describe(err)}`;
  } finally {
    button.disabled = false;
    button.textContent = "Clean Up Now";
  }
}

function togglePrefs(show) {
  const prefs = app.els.prefs;
  if (!prefs) return;
  const open = show ?? prefs.hidden;
  prefs.hidden = !open;
  app.els.chat.hidden = open;
  app.els.composer.hidden = open;
  app.els.prefsToggle.setAttribute("aria-pressed", String(open));
  if (open) {
    toggleSessions(false);
    buildPrefs(prefs, { standalone: false });
    loadPrefs().catch(showError);
  }
}

// --- start-up ----------------------------------------------------------------------------------------

async function bootChat() {
  buildLayout();
  app.bridge = new Bridge(window);
  app.bridge.onSelection = (sel) => {
    app.selection = sel;
    app.context = contextFromSelection(sel, app.context.snippets);
    renderChips();
  };
  const hello = app.bridge.start().then((hosted) => {
    document.documentElement.dataset.host = hosted ? "zotero" : "standalone";
    if (hosted && app.session && !app.turns.has(app.session.id)) renderMessages(); // save-note buttons, once the host said it can
  });
  renderChips();
  app.register = await app.client.register({ client: "zocrates-webui" });
  await refreshSessions();
  let id = null;
  try {
    id = sessionStorage.getItem(SESSION_KEY);
  } catch {
    /* none remembered */
  }
  const known = app.sessions.find((s) => s.id === id) || sortedSessions()[0];
  if (known) {
    try {
      await openSession(known.id);
    } catch (err) {
      if (!(err instanceof ZocratesHttpError && err.code === "not_found")) throw err;
      await newChat();
    }
  } else {
    await newChat();
  }
  pollLibrary();
  document.documentElement.dataset.view = "chat";
  await hello;
}

async function bootPrefs() {
  document.getElementById("root").replaceChildren(h("div", { class: "app prefs-only" }, h("section", { id: "prefs", class: "prefs" })));
  buildPrefs(document.getElementById("prefs"), { standalone: true });
  await loadPrefs();
  document.documentElement.dataset.view = "prefs";
}

async function boot() {
  let token;
  try {
    token = await takeToken();
  } catch (err) {
    if (err instanceof ZocratesHttpError && err.code === "code_refused") showSpentLink();
    else showFatal(err, () => location.reload());
    return;
  }
  if (!token) {
    showHelp();
    return;
  }
  app.client = new ZocratesClient({ baseUrl: location.origin, token });
  const prefsOnly = new URLSearchParams(location.search).get("view") === "prefs";
  try {
    if (prefsOnly) await bootPrefs();
    else await bootChat();
  } catch (err) {
    showFatal(err, () => {
      app.bridge?.close();
      boot();
    });
  }
}

document.documentElement.dataset.ready = "1";
// An address with a new token or code pasted into this tab is a same-document navigation: take
// the token and start afresh with it.
window.addEventListener("hashchange", () => {
  if (/(?:^#|&)(?:token|code)=/.test(location.hash)) {
    takeToken().then(() => location.reload(), (err) => {
      if (err instanceof ZocratesHttpError && err.code === "code_refused") showSpentLink();
      else showError(err);
    });
  }
});
document.addEventListener("keydown", onGlobalKey);
document.addEventListener("click", onLinkClick);
window.addEventListener("unhandledrejection", (event) => showError(event.reason));
boot();
