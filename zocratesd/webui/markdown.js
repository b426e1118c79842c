// markdown.js: the small, safe Markdown renderer of the sidebar (answers come from a model, which
// may quote anything a paper says: all of it is untrusted text).
//
// Safety by construction: the output is built from DOM nodes; every piece of text goes in through
// createTextNode, never through innerHTML, and the only attribute taken from the text is a link's
// href, after its URL parsed and its scheme is one of LINK_SCHEMES. No raw HTML is passed through:
// "<b>" in an answer shows as "<b>".
//
// What it knows is what answers use: paragraphs (a line break is kept), # headings, - and 1. lists,
// > quotes, ``` code blocks, `code`, **bold**, *italic*, [text](url) links, bare URLs, and numbered
// citations [1] / [1, 2] / [1-3] / [2, p. 4] linked to the answer's "# Cited Sources" entries
// ("[n] Author (Year). Title. (zotero://select/library/items/KEY)"); a page links to the PDF at
// that page when the caller knows the item's attachment (`sources.get(n).pdfs`: page label -> URI of
// the PDF at its page index).
//
// A link's label is text from the library or the model, and may name another place than it goes
// ("[your bank](https://attacker.example)"): an http(s) link whose label is not its URL is
// followed by its host, as text (" (attacker.example)"), here and so in a note saved from it.

const LINK_SCHEMES = new Set(["http:", "https:", "zotero:"]);
// How an answer marks a source found beyond the library (the daemon's engine/answer/sources.py).
export const ONLINE_MARK = "Online, not in your library";
// A source entry: "[n] what it is (uri)"; the uri is what the number's links open.
const SOURCE_RE = /^\s*\[(\d{1,4})\]\s+(.+?)\s*\(((?:zotero|https?):\/\/[^\s()<>]+)\)\s*$/;
// An entry's citation key as the Pandoc style leads it: "[1] [@lewis2020rag] Patrick Lewis (2020). ...".
const ENTRY_KEY_RE = /^\[@([^\]\s]{1,200})\]\s+/;
// A citation group's pieces, between "," or ";": a number, a range "2-4", or the page of the
// number before it ("[2, p. 4]", "[1, pp. 3-5]").
const CITE_NUMBER_RE = /^(\d{1,4})$/;
const CITE_RANGE_RE = /^(\d{1,4})\s*[\u2013-]\s*(\d{1,4})$/;
// A page is cited by its label, as the reader shows it: "127", "xi", "A-3".
const CITE_PAGE_RE = /^pp?\.\s*([A-Za-z]{1,3}-\d{1,5}|[0-9A-Za-z]{1,16})(?:\s*[\u2013-]\s*[0-9A-Za-z]{1,16})?$/;
// Inline tokens, tried at each position in this order of the alternation (first match wins).
const INLINE_RE = new RegExp(
  [
    "(`+)([^`]|[^`][\\s\\S]*?[^`])\\1(?!`)", // 1,2: code span
    "\\[([^\\]\\n]+)\\]\\(([^()\\s]+)\\)", // 3,4: [text](url)
    "\\[(\\d{1,4}(?:\\s*[,;\\u2013-]\\s*(?:\\d{1,5}|pp?\\.\\s*[0-9A-Za-z][0-9A-Za-z\\u2013-]{0,32}))*)\\]", // 5: citations
    "\\*\\*(?=\\S)([^*\\n]*?\\S)\\*\\*", // 6: bold
    "__(?=\\S)([^_\\n]*?\\S)__", // 7: bold
    "\\*(?=[^\\s*])([^*\\n]*?[^\\s*])\\*", // 8: italic
    "(?<![\\w])_(?=[^\\s_])([^_\\n]*?[^\\s_])_(?![\\w])", // 9: italic
    "((?:zotero|https?):\\/\\/[^\\s<>()\"'\\]]+)", // 10: bare URL
  ].join("|"),
  "g",
);

/** A URL we may put in an href, or null (javascript:, data:, relative URLs... are not links). */
export function safeUrl(text) {
  try {
    const url = new URL(text);
    return LINK_SCHEMES.has(url.protocol) ? url.href : null;
  } catch {
    return null;
  }
}

/** What a URL is written as, for comparing a label with it: no scheme, no "www.", no trailing
 *  slash, lower case. */
function bareUrl(text) {
  return String(text).trim().toLowerCase().replace(/^[a-z][a-z0-9+.-]*:\/\//, "").replace(/^www\./, "").replace(/\/+$/, "");
}

/** The host to show beside a link's label, or null: a zotero: link (ours), or a label that is the
 *  URL itself. `host` is the URL parser's (an international name shows as its xn-- form, so a
 *  look-alike letter cannot pass for another). */
export function hiddenHost(href, label) {
  let url;
  try {
    url = new URL(href);
  } catch {
    return null;
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") return null;
  const shown = bareUrl(label);
  if (shown === bareUrl(href) || shown === bareUrl(url.host)) return null;
  return url.host;
}

/** The answer's numbered sources: Map n -> {n, title, uri, key}; `key` the citation key the entry
 *  starts with (the Pandoc style's), else null (a caller that knows it from the search sets it). */
export function parseSources(markdown) {
  const sources = new Map();
  for (const line of String(markdown || "").split("\n")) {
    const m = SOURCE_RE.exec(line);
    if (m && safeUrl(m[3])) {
      const lead = ENTRY_KEY_RE.exec(m[2]);
      sources.set(Number(m[1]), { n: Number(m[1]), title: lead ? m[2].slice(lead[0].length) : m[2], uri: safeUrl(m[3]), key: lead ? lead[1] : null });
    }
  }
  return sources;
}

/** A citation group's text as pieces [{n} | {page, of} | {sep}], or null when it is not one. */
export function parseCitationGroup(group) {
  const pieces = [];
  let last = null;
  for (const [i, token] of group.split(/(\s*[,;]\s*)/).entries()) {
    if (i % 2) {
      pieces.push({ sep: token });
      continue;
    }
    const t = token.trim();
    let m;
    if ((m = CITE_NUMBER_RE.exec(t))) {
      last = Number(m[1]);
      pieces.push({ n: last });
    } else if ((m = CITE_RANGE_RE.exec(t)) && Number(m[2]) >= Number(m[1]) && Number(m[2]) - Number(m[1]) < 50) {
      for (let n = Number(m[1]); n <= Number(m[2]); n++) {
        if (n > Number(m[1])) pieces.push({ sep: ", " });
        pieces.push({ n });
      }
      last = Number(m[2]);
    } else if ((m = CITE_PAGE_RE.exec(t)) && last !== null) {
      pieces.push({ page: m[1], text: t, of: last });
    } else {
      return null;
    }
  }
  return pieces;
}

class Renderer {
  constructor(doc, sources) {
    this.doc = doc;
    this.sources = sources;
  }

  el(tag, className, ...children) {
    const node = this.doc.createElement(tag);
    if (className) node.className = className;
    for (const child of children) node.append(typeof child === "string" ? this.doc.createTextNode(child) : child);
    return node;
  }

  link(href, ...children) {
    const a = this.el("a", null, ...children);
    a.setAttribute("href", href);
    if (!href.startsWith("zotero:")) {
      a.setAttribute("target", "_blank");
      a.setAttribute("rel", "noopener noreferrer");
    }
    return a;
  }

  /** The link `a` with its host after it when its label hides where it goes (module comment). */
  labelled(a) {
    const host = hiddenHost(a.getAttribute("href"), a.textContent);
    if (!host) return a;
    const frag = this.doc.createDocumentFragment();
    frag.append(a, " ", this.el("span", "link-host", `(${host})`));
    return frag;
  }

  citation(n) {
    const source = this.sources.get(n);
    if (!source) return this.doc.createTextNode(String(n));
    const a = this.link(source.uri, String(n));
    a.className = "cite";
    a.dataset.cite = String(n);
    a.title = source.title;
    return a;
  }

  /** "p. 4" of a citation: a link to the PDF at that page when the page is known to us. */
  pageOf({ page, text, of }) {
    const href = this.sources.get(of)?.pdfs?.get(page);
    if (!href) return this.doc.createTextNode(text);
    const a = this.link(href, text);
    a.className = "cite-page";
    return a;
  }

  /** Inline Markdown of one line (or a bit of it) as nodes appended to `parent`. */
  inline(parent, text) {
    let at = 0;
    const re = new RegExp(INLINE_RE.source, "g");
    let m;
    let pieces;
    while ((m = re.exec(text)) !== null) {
      if (m.index > at) parent.append(this.doc.createTextNode(text.slice(at, m.index)));
      at = m.index + m[0].length;
      if (m[2] !== undefined) {
        parent.append(this.el("code", null, m[2]));
      } else if (m[3] !== undefined) {
        const href = safeUrl(m[4]);
        if (href) {
          const a = this.link(href);
          this.inline(a, m[3]);
          parent.append(this.labelled(a));
        } else {
          parent.append(this.doc.createTextNode(m[0]));
        }
      } else if (m[5] !== undefined && (pieces = parseCitationGroup(m[5])) !== null) {
        const span = this.el("span", "cite-group", "[");
        for (const piece of pieces) {
          if (piece.sep !== undefined) span.append(piece.sep);
          else if (piece.n !== undefined) span.append(this.citation(piece.n));
          else span.append(this.pageOf(piece));
        }
        span.append("]");
        parent.append(span);
      } else if (m[6] !== undefined || m[7] !== undefined) {
        const strong = this.el("strong");
        this.inline(strong, m[6] ?? m[7]);
        parent.append(strong);
      } else if (m[8] !== undefined || m[9] !== undefined) {
        const em = this.el("em");
        this.inline(em, m[8] ?? m[9]);
        parent.append(em);
      } else if (m[10] !== undefined) {
        const trimmed = m[10].replace(/[.,;:!?]+$/, "");
        const href = safeUrl(trimmed);
        parent.append(href ? this.link(href, trimmed) : this.doc.createTextNode(trimmed));
        at -= m[10].length - trimmed.length;
      } else {
        parent.append(this.doc.createTextNode(m[0]));
      }
    }
    if (at < text.length) parent.append(this.doc.createTextNode(text.slice(at)));
  }

  paragraph(lines) {
    const p = this.el("p");
    lines.forEach((line, i) => {
      if (i) p.append(this.el("br"));
      this.inline(p, line);
    });
    return p;
  }

  source(m) {
    const n = Number(m[1]);
    const div = this.el("div", "source");
    div.dataset.source = String(n);
    div.append(this.el("span", "source-n", `[${n}]`), " ");
    const online = m[2].indexOf(ONLINE_MARK);
    if (online > 0 && /^https?:/.test(m[3])) {
      // A source found beyond the library: its entry links to its DOI, and a badge says where it is from.
      div.classList.add("online");
      div.append(this.labelled(this.link(safeUrl(m[3]), m[2].slice(0, online).trim())), " ",
        this.el("span", "online-badge", m[2].slice(online).replace(/[.;]\s*$/, "")));
      return div;
    }
    const lead = ENTRY_KEY_RE.exec(m[2]);
    div.append(this.labelled(this.link(safeUrl(m[3]), lead ? m[2].slice(lead[0].length) : m[2])));
    // The item's citation key, to write the citation down: the entry's own, else the search's.
    const key = lead ? lead[1] : this.sources?.get(n)?.key;
    if (key) div.append(" ", this.el("code", "source-key", `@${key}`));
    return div;
  }

  blocks(markdown) {
    const frag = this.doc.createDocumentFragment();
    const lines = String(markdown || "").replace(/\r\n?/g, "\n").split("\n");
    let para = [];
    const flush = () => {
      if (para.length) frag.append(this.paragraph(para));
      para = [];
    };
    for (let i = 0; i < lines.length; i++) {
      const line = lines[i];
      let m;
      if ((m = /^\s*(```+|~~~+)\s*([\w+-]*)\s*$/.exec(line))) {
        flush();
        const fence = m[1];
        const body = [];
        for (i++; i < lines.length && !lines[i].trim().startsWith(fence); i++) body.push(lines[i]);
        const pre = this.el("pre", null, this.el("code", null, body.join("\n")));
        frag.append(pre);
      } else if (!line.trim()) {
        flush();
      } else if ((m = /^(#{1,6})\s+(.*?)\s*#*\s*$/.exec(line))) {
        flush();
        // Headings inside an answer are small: the sidebar's own headings stay above them.
        const h = this.el(`h${Math.min(6, m[1].length + 2)}`);
        this.inline(h, m[2]);
        frag.append(h);
      } else if (/^\s*([-*_])(\s*\1){2,}\s*$/.test(line)) {
        flush();
        frag.append(this.el("hr"));
      } else if ((m = SOURCE_RE.exec(line)) && safeUrl(m[3])) {
        flush();
        frag.append(this.source(m));
      } else if (/^\s*>/.test(line)) {
        flush();
        const quoted = [];
        for (; i < lines.length && /^\s*>/.test(lines[i]); i++) quoted.push(lines[i].replace(/^\s*>\s?/, ""));
        i--;
        const bq = this.el("blockquote");
        bq.append(this.blocks(quoted.join("\n")));
        frag.append(bq);
      } else if ((m = /^\s*([-*+]|\d{1,9}[.)])\s+/.exec(line))) {
        flush();
        const ordered = /\d/.test(m[1]);
        const list = this.el(ordered ? "ol" : "ul");
        if (ordered && Number.parseInt(m[1], 10) !== 1) list.setAttribute("start", String(Number.parseInt(m[1], 10)));
        const itemRe = ordered ? /^\s*\d{1,9}[.)]\s+/ : /^\s*[-*+]\s+/;
        let li = null;
        for (; i < lines.length; i++) {
          const l = lines[i];
          if (itemRe.test(l)) {
            li = this.el("li");
            this.inline(li, l.replace(itemRe, ""));
            list.append(li);
          } else if (l.trim() && /^\s{2,}/.test(l) && li) {
            li.append(this.el("br"));
            this.inline(li, l.trim());
          } else {
            break;
          }
        }
        i--;
        frag.append(list);
      } else {
        para.push(line);
      }
    }
    flush();
    return frag;
  }
}

/** Render Markdown as a DocumentFragment (see the module comment). `sources` defaults to the
 *  text's own "# Cited Sources" entries. */
export function renderMarkdown(markdown, { doc = document, sources } = {}) {
  return new Renderer(doc, sources ?? parseSources(markdown)).blocks(markdown);
}

/** Markdown-escape a title for a link's label. */
function escapeLabel(text) {
  return String(text).replace(/[\\`*_[\]<>]/g, (c) => `\\${c}`);
}

/** One line's inline Markdown as a note keeps it (see noteMarkdown). */
function noteInline(line, sources) {
  let out = "";
  let at = 0;
  for (const m of line.matchAll(INLINE_RE)) {
    out += line.slice(at, m.index);
    at = m.index + m[0].length;
    let pieces;
    if (m[3] !== undefined) {
      const href = safeUrl(m[4]);
      const host = href && hiddenHost(href, m[3]);
      out += host ? `${m[0]} (${host})` : m[0];
    } else if (m[5] !== undefined && (pieces = parseCitationGroup(m[5])) !== null) {
      const linked = pieces.map((p) => {
        if (p.n === undefined) return p.sep ?? p.text;
        const uri = sources.get(p.n)?.uri;
        return uri ? `[${p.n}](${uri})` : String(p.n);
      });
      out += `\\[${linked.join("")}\\]`;
    } else if (m[6] !== undefined || m[7] !== undefined) {
      const mark = m[6] !== undefined ? "**" : "__";
      out += mark + noteInline(m[6] ?? m[7], sources) + mark;
    } else if (m[8] !== undefined || m[9] !== undefined) {
      const mark = m[8] !== undefined ? "*" : "_";
      out += mark + noteInline(m[8] ?? m[9], sources) + mark;
    } else {
      out += m[0];
    }
  }
  return out + line.slice(at);
}

/** An answer's Markdown as a note saved from it says it, for a CommonMark renderer (the daemon's):
 *  each "# Cited Sources" entry a link to its item, each citation number a link to its source, a
 *  link whose label hides its target followed by its host (as this page shows them), and each
 *  line break kept. Code is left as it is. */
export function noteMarkdown(markdown, sources = parseSources(markdown)) {
  const out = [];
  let fence = null;
  for (const line of String(markdown || "").split("\n")) {
    const f = /^\s*(```+|~~~+)/.exec(line);
    if (fence !== null) {
      out.push(line);
      if (f && f[1].startsWith(fence)) fence = null;
      continue;
    }
    if (f) {
      fence = f[1];
      out.push(line);
      continue;
    }
    const m = SOURCE_RE.exec(line);
    const uri = m && safeUrl(m[3]);
    if (uri) out.push(`- \\[${m[1]}\\] [${escapeLabel(m[2])}](${uri})`);
    else out.push(line.trim() ? `${noteInline(line, sources)}  ` : line); // "  ": a hard line break
  }
  return out.join("\n");
}
