// ./dev test-zotero: the Zocrates plugin in a real Zotero (9.0.6 on Gecko 140.12), on a virtual
// screen, against a real `zocratesd serve` on Zotero's own data directory.
//
// Zotero is driven through Marionette (part of Gecko: chrome JavaScript in Zotero's main window, as
// Zotero's own UI runs), the chat page inside the pane through a frame script in its content
// process. Items are made with Zotero's API, so zotero.sqlite, storage/ and the full-text cache
// are exactly as Zotero writes them, and Zotero holds its database the whole time, as it does for
// a user. Screenshots of Zotero's window go to clients/zotero/screenshots/zotero-*.png.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, readFile, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { buildXpi } from "../plugin/build.mjs";
import { REPO, Zocratesd, daemonEnv } from "../testkit.mjs";
import { makePdf } from "./pdf.mjs";
import {
  PANE_BROWSER, PLUGIN_ID, PREFS_BROWSER, RealZotero, ZOTERO_APP, askInPane, daemonLibrary as daemonLibraryOf, inPage as inPageOf,
  installPlugin, installedVersions, requireZotero, startXvfb, tearDown, zoteroRows,
} from "./zoterokit.mjs";

const SCREENSHOTS = join(REPO, "clients", "zotero", "screenshots");

// The paper the test adds, with what each kind of text says (each question below is answered from one).
const PAPER = {
  title: "Thermal tolerance of reef-building corals under repeated marine heatwaves",
  abstract: "Repeated marine heatwaves bleached the same colonies three times in five years. Colonies that survived "
    + "the first event bleached less in the second, showing acquired thermal tolerance.",
  creators: [{ firstName: "Lena", lastName: "Ströhle", creatorType: "author" }, { firstName: "Jonas", lastName: "Kühn", creatorType: "author" }],
  year: "2021",
  // Pages 1-3 of the PDF, labelled 126-128 as in the journal issue.
  pages: [
    ["Introduction", "Coral reefs now face marine heatwaves more often than at any time on record."],
    ["Results", "Symbiont shuffling toward Durusdinium raised the bleaching threshold by about one degree."],
    ["Discussion", "Acquired tolerance faded within two years once the colonies saw no further heat stress."],
  ],
  firstLabel: 126,
  note: "My reading note: the recovery window between heatwaves was too short for coral cover to return.",
  highlight: { pageIndex: 1, text: "Symbiont shuffling toward Durusdinium raised the bleaching threshold by about one degree.",
    comment: "Key mechanism: algal symbionts swap to heat-tolerant clades." },
};
const OTHER = { title: "Sleep spindles and overnight memory consolidation", year: "2019",
  abstract: "Slow-wave sleep spindles predicted how much of a learned word list was recalled the next morning." };

describe("Zocrates in a real Zotero", { timeout: 30 * 60_000 }, () => {
  let root, xvfb, zotero, daemon, xpi, daemonLog;
  /** Keys and ids of what the test made in Zotero. */
  const made = {};

  before(async () => {
    requireZotero();
    root = await mkdtemp(join(tmpdir(), "zqreal"));
    await mkdir(join(root, "run"), { mode: 0o700 });
    daemonLog = join(root, "zocratesd.log");
    xpi = (await buildXpi({ out: join(root, "zocrates.xpi") })).path;
    xvfb = await startXvfb();
    zotero = new RealZotero({ root, display: xvfb.display });
    await zotero.start();
  });

  after(() => tearDown({ zotero, daemon, xvfb, root }));

  /** A new `zocratesd serve` on Zotero's data directory (a new port and token at each start). */
  async function startDaemon() {
    daemon = new Zocratesd({ dataDir: zotero.dataDir, env: daemonEnv(root), stderr: daemonLog });
    return daemon.start();
  }

  /** The chat page in the pane: a value from it, and a question asked through it. */
  const inPage = (expression, options) => inPageOf(zotero, expression, options);
  const ask = (question) => askInPane(zotero, question);

  test("Zotero 9.0.6 runs on Gecko 140.12", async () => {
    const info = await zotero.run(`return { zotero: Zotero.version, gecko: Services.appinfo.platformVersion, dataDir: Zotero.DataDirectory.dir };`);
    const installed = await installedVersions(ZOTERO_APP);
    console.log(`# Zotero ${info.zotero} (installed ${installed.zotero}), Gecko ${info.gecko}, data dir ${info.dataDir}`);
    assert.match(info.zotero, /^9\.0\.6/);
    assert.match(info.gecko, /^140\.12\./);
    assert.equal(info.dataDir, zotero.dataDir);
  });

  test("installed from its XPI as Tools > Plugins > Install Plugin From File does: listed, enabled, started", async () => {
    const result = await installPlugin(zotero, xpi);
    assert.equal(result.id, PLUGIN_ID);
    assert.equal(result.active, true);
    assert.equal(result.temporary, false, "a real install, kept across restarts");
    assert.ok(result.listed.some((a) => a.id === PLUGIN_ID && a.name === "Zocrates" && a.active), JSON.stringify(result.listed));
    // bootstrap.js's startup ran: the pane is in the main window.
    await zotero.until(`return !!document.getElementById("zocrates-pane")`, "the Zocrates pane");
  });

  test("with no daemon, the pane says how to start one", async () => {
    const text = await zotero.until(`return document.querySelector("#zocrates-pane .zocrates-no-daemon")?.textContent`, "the no-daemon message");
    assert.match(text, /No zocratesd running/);
    assert.match(text, /zocratesd service install/);
  });

  test("a daemon started on Zotero's data directory is found: the pane frames its chat page", async () => {
    const info = await startDaemon();
    const url = await zotero.until(`
      const b = document.querySelector("#zocrates-pane browser.zocrates-frame");
      return b && b.currentURI && b.currentURI.spec.includes("/ui/") ? b.currentURI.spec : null;`, "the chat page in the pane");
    assert.ok(url.startsWith(`http://127.0.0.1:${info.http.port}/ui/`), url);
    await inPage(`!!document.getElementById("prompt")`, { wait: true, what: "the chat page's prompt" });
    // The page took its token and took it out of the address (the browser keeps no history anyway).
    const now = await zotero.run(`return document.querySelector("#zocrates-pane browser.zocrates-frame").currentURI.spec;`);
    assert.ok(!now.includes("token="), `the token stayed in the address: ${now}`);
  });

  /** The rectangles of the pane and of what Zotero shows left of it, in the main window. */
  function layout() {
    return zotero.run(`
      const rect = (el) => { if (!el) return null; const r = el.getBoundingClientRect(); return { left: r.left, right: r.right, top: r.top, bottom: r.bottom, width: r.width, height: r.height }; };
      const visible = (el) => el && el.getBoundingClientRect().width > 0 && !el.closest("[hidden]") && !el.closest("[collapsed=true]");
      const pane = document.getElementById("zocrates-pane");
      // Zotero's own parts that must stay left of the pane: the item list, the item pane and its
      // side navigation, and in a reader tab the reader and its context pane.
      const selectors = ["#zotero-items-tree", "#zotero-item-pane", "item-pane-sidenav", "#zotero-context-pane", "#zotero-context-pane-sidenav", "#tabs-deck browser"];
      const theirs = [];
      for (const sel of selectors) for (const el of document.querySelectorAll(sel)) if (visible(el)) theirs.push({ sel, ...rect(el) });
      return { window: { width: window.innerWidth, height: window.innerHeight }, pane: rect(pane), paneHidden: pane.hidden,
        splitter: rect(document.getElementById("zocrates-splitter")), theirs,
        paneParent: pane.parentNode.id, after: pane.previousElementSibling?.previousElementSibling?.id };`);
  }

  function assertBeside(l, what) {
    assert.equal(l.paneHidden, false, `${what}: the pane is hidden`);
    assert.ok(l.pane.width >= 200, `${what}: the pane is ${l.pane.width}px wide`);
    assert.ok(Math.abs(l.pane.right - l.window.width) <= 1, `${what}: the pane ends at ${l.pane.right}, the window at ${l.window.width}`);
    assert.ok(l.pane.bottom <= l.window.height + 1, `${what}: the pane runs below the window`);
    for (const t of l.theirs) {
      assert.ok(t.right <= l.splitter.left + 1, `${what}: Zotero's ${t.sel} (right edge ${t.right}) reaches under the pane (from ${l.splitter.left})`);
    }
  }

  test("the pane sits at the window's right edge beside the item list, at full size and in a small window", async () => {
    await zotero.run(`ZoteroPane.collectionsView.selectLibrary(Zotero.Libraries.userLibraryID); return true;`);
    const wide = await layout();
    assert.equal(wide.paneParent, "browser");
    assert.equal(wide.after, "appcontent");
    assert.ok(wide.theirs.some((t) => t.sel === "#zotero-items-tree"), JSON.stringify(wide.theirs));
    assertBeside(wide, "1600x1000");
    assert.ok(await zotero.run(`return ${PANE_BROWSER}.getBoundingClientRect().height;`) >= 600, "the chat frame is not as high as the pane");
    // Zotero's first-run window size here (1000x600), too narrow for Zotero's panes and the chat side
    // by side: the window stays as wide as both need (Zotero's own minimum plus the narrowest chat),
    // and Zotero's panes never slide under the chat.
    await zotero.run(`window.resizeTo(1000, 600); return true;`);
    await zotero.until(`return window.innerWidth < 1550 && window.innerHeight <= 600`, "the smaller window");
    await new Promise((r) => setTimeout(r, 500));
    const small = await layout();
    await zotero.run(`window.resizeTo(1600, 1000); return true;`);
    await zotero.until(`return window.innerWidth >= 1550`, "the full-size window");
    console.log(`# asked for 1000x600, the window is ${small.window.width}x${small.window.height}; the chat ${small.pane.width}px`);
    assertBeside(small, "a window asked to be 1000x600");
    assert.ok(small.window.width < 1600, "the window did not get smaller at all");
  });

  test("Zotero's collections pane dragged wide: the chat gives way down to its narrowest, and no pane goes under it", async () => {
    /** Drag Zotero's collections splitter by `dx` with real mouse events, as a user does. */
    const drag = (dx) => zotero.run(`
      const s = document.getElementById("zotero-collections-splitter").getBoundingClientRect();
      const x = s.left + s.width / 2, y = s.top + s.height / 2, utils = window.windowUtils;
      utils.sendMouseEvent("mousedown", x, y, 0, 1, 0);
      for (let i = 1; i <= 10; i++) utils.sendMouseEvent("mousemove", x + (${dx} * i) / 10, y, 0, 0, 0);
      utils.sendMouseEvent("mouseup", x + ${dx}, y, 0, 1, 0);
      return true;`);
    const collectionsWidth = () => zotero.run(`return document.getElementById("zotero-collections-pane").getBoundingClientRect().width;`);
    const before = await collectionsWidth();
    const chatBefore = (await layout()).pane.width;
    await drag(300);
    await zotero.until(`return document.getElementById("zotero-collections-pane").getBoundingClientRect().width > ${before + 100}`, "a wider collections pane");
    await new Promise((r) => setTimeout(r, 300));
    const wider = await layout();
    assertBeside(wider, "collections pane 300 px wider");
    // The chat took less room, the item list kept its minimum.
    assert.ok(wider.pane.width < chatBefore || wider.pane.width <= 281, `the chat stayed ${wider.pane.width}px wide (was ${chatBefore})`);
    await drag(1500); // as far as a user can
    await new Promise((r) => setTimeout(r, 300));
    const widest = await layout();
    console.log(`# collections pane ${before}px -> ${await collectionsWidth()}px; the chat ${chatBefore}px -> ${widest.pane.width}px`);
    assertBeside(widest, "collections pane dragged as far as it goes");
    assert.ok(widest.pane.width >= 279, `the chat is ${widest.pane.width}px wide, narrower than its minimum`);
    await drag(before - (await collectionsWidth()));
    await zotero.until(`return Math.abs(document.getElementById("zotero-collections-pane").getBoundingClientRect().width - ${before}) <= 2`, "the collections pane back");
  });

  test("the toolbar button and View > Zocrates Chat toggle the pane, and the choice is kept", async () => {
    const state = `const p = document.getElementById("zocrates-pane"); const b = document.getElementById("zocrates-tb-toggle");
      const m = document.getElementById("zocrates-menuitem-toggle");
      return { hidden: p.hidden, button: b.checked, menu: m.getAttribute("checked") === "true", pref: Zotero.Prefs.get("extensions.zocrates.paneOpen", true), menuInView: m.parentNode.id };`;
    const open = await zotero.run(state);
    // open.pref: the default from the plugin's prefs.js, which Zotero read at install.
    assert.deepEqual([open.hidden, open.button, open.menu, open.pref, open.menuInView], [false, true, true, true, "menu_viewPopup"]);
    await zotero.run(`document.getElementById("zocrates-tb-toggle").click(); return true;`);
    const closed = await zotero.run(state);
    assert.deepEqual([closed.hidden, closed.button, closed.menu, closed.pref], [true, false, false, false]);
    // The View menu, opened as a user opens it, and its item chosen.
    await zotero.run(`
      const popup = document.getElementById("menu_viewPopup");
      const shown = new Promise((r) => popup.addEventListener("popupshown", r, { once: true }));
      popup.openPopup(document.getElementById("view-menu") || null, "after_start");
      await shown;
      const item = document.getElementById("zocrates-menuitem-toggle");
      const hidden = new Promise((r) => popup.addEventListener("popuphidden", r, { once: true }));
      popup.activateItem(item);
      await hidden;
      return true;`);
    const reopened = await zotero.run(state);
    // Zotero's Fluent translated the plugin's strings (locale/en-US/zocrates.ftl, registered by Zotero).
    const labels = await zotero.run(`return [document.getElementById("zocrates-menuitem-toggle").getAttribute("label"),
      document.getElementById("zocrates-tb-toggle").getAttribute("tooltiptext")];`);
    assert.deepEqual(labels, ["Zocrates Chat", "Zocrates Chat"]);
    assert.deepEqual([reopened.hidden, reopened.button, reopened.menu, reopened.pref], [false, true, true, true]);
    await inPage(`!!document.getElementById("prompt")`, { wait: true, what: "the chat page, kept while hidden" });
  });

  test("items made through Zotero's API are indexed by the daemon while Zotero runs and holds its database", async () => {
    const pdfPath = join(root, "thermal-tolerance.pdf");
    await writeFile(pdfPath, makePdf({ title: PAPER.title, pages: PAPER.pages, firstLabel: PAPER.firstLabel }));
    Object.assign(made, await zotero.run(`
      const [paper, other, pdfPath] = arguments;
      const lib = Zotero.Libraries.userLibraryID;
      const reefs = new Zotero.Collection({ libraryID: lib, name: "Coral reefs" });
      await reefs.saveTx();
      const sleep = new Zotero.Collection({ libraryID: lib, name: "Sleep" });
      await sleep.saveTx();
      const art = new Zotero.Item("journalArticle");
      art.libraryID = lib;
      art.setField("title", paper.title);
      art.setField("abstractNote", paper.abstract);
      art.setField("date", paper.year);
      art.setField("publicationTitle", "Marine Ecology Progress Series");
      art.setCreators(paper.creators);
      art.addTag("bleaching");
      art.addToCollection(reefs.id);
      await art.saveTx();
      const o = new Zotero.Item("journalArticle");
      o.libraryID = lib;
      o.setField("title", other.title);
      o.setField("abstractNote", other.abstract);
      o.setField("date", other.year);
      o.setCreators([{ firstName: "Ana", lastName: "Lewis", creatorType: "author" }]);
      o.addToCollection(sleep.id);
      await o.saveTx();
      // The PDF as "Add Attachment > File..." stores it; Zotero's own indexer extracts its text.
      const att = await Zotero.Attachments.importFromFile({ file: Zotero.File.pathToFile(pdfPath), parentItemID: art.id, contentType: "application/pdf" });
      const note = new Zotero.Item("note");
      note.libraryID = lib;
      note.parentID = art.id;
      note.setNote("<p>" + paper.note + "</p>");
      await note.saveTx();
      // A highlight with a comment, as the reader saves one (page index 1, labelled 127).
      const annotation = await Zotero.Annotations.saveFromJSON(att, {
        key: Zotero.DataObjectUtilities.generateKey(), type: "highlight", color: "#ffd400",
        text: paper.highlight.text, comment: paper.highlight.comment, pageLabel: String(paper.firstLabel + paper.highlight.pageIndex),
        sortIndex: "00001|000100|00200", position: { pageIndex: paper.highlight.pageIndex, rects: [[72, 738, 540, 752]] }, tags: [],
      });
      return { art: art.key, artID: art.id, other: other.key, otherID: o.id, att: att.key, attID: att.id, note: note.key,
        annotation: annotation.key, reefs: reefs.key, reefsID: reefs.id, sleep: sleep.key, sleepID: sleep.id };`, [PAPER, OTHER, pdfPath]));
    // Zotero's indexer (its PDF worker) extracted the PDF's text into the full-text cache.
    const indexed = await zotero.until(`
      const att = Zotero.Items.get(arguments[0]);
      const state = await Zotero.Fulltext.getIndexedState(att);
      if (state !== Zotero.Fulltext.INDEX_STATE_INDEXED) return null;
      const cache = Zotero.Fulltext.getItemCacheFile(att).path;
      return (await IOUtils.exists(cache)) ? await Zotero.File.getContentsAsync(cache) : null;`, "Zotero's full-text index of the PDF", { args: [made.attID], timeoutMs: 60_000 });
    assert.match(indexed, /Durusdinium/);
    // Zotero holds zotero.sqlite all along; the daemon still indexes every kind of text.
    const status = await daemonLibrary((s) => s.state === "ready" && s.annotations_indexed >= 1 && s.items_indexed >= 2 && s.attachments_with_text >= 1);
    console.log(`# library: ${status.detail ?? JSON.stringify(status)}`);
  });

  /** Poll the daemon's /library/status until `check(status)` holds; the status. */
  const daemonLibrary = (check) => daemonLibraryOf(daemon, check);

  test("a question about each kind of text is answered from it and cited, in the pane", async () => {
    await zotero.run(`await ZoteroPane.collectionsView.selectLibrary(Zotero.Libraries.userLibraryID); ZoteroPane.itemsView.selection.clearSelection(); return true;`);
    await inPage(`!!document.querySelector("#chips .chip.library")`, { wait: true, what: "the whole-library chip once nothing is selected" });
    const cases = [
      { kind: "abstract", q: "Did surviving colonies bleach less in a second heatwave?", expect: /bleached less in the second/ },
      { kind: "full text (PDF)", q: "What raised the bleaching threshold of the corals?", expect: /Durusdinium/ },
      { kind: "child note", q: "Was the recovery window between heatwaves long enough for coral cover?", expect: /recovery window/ },
      { kind: "highlight comment", q: "Which algal symbionts swap to heat-tolerant clades?", expect: /heat-tolerant clades|Durusdinium/ },
    ];
    for (const c of cases) {
      const answer = await ask(c.q);
      assert.match(answer.text, c.expect, `${c.kind}: ${answer.text}`);
      assert.ok(answer.links.some((l) => l.href === `zotero://select/library/items/${made.art}`), `${c.kind}: no citation of the paper: ${JSON.stringify(answer.links)}`);
      made.lastAnswer = answer;
    }
    await zotero.screenshot(join(SCREENSHOTS, "zotero-pane-library.png"));
  });

  test("selecting items and a collection in Zotero's trees sets the question's chips and scope", async () => {
    const chips = () => inPage(`Array.from(document.querySelectorAll("#chips .chip"), (c) => c.dataset.kind + ":" + c.querySelector(".chip-label").textContent)`);
    await zotero.run(`await ZoteroPane.collectionsView.selectLibrary(Zotero.Libraries.userLibraryID); await ZoteroPane.selectItems(arguments[0]); return true;`, [[made.artID, made.otherID]]);
    await inPage(`document.querySelectorAll("#chips .chip.paper").length === 2`, { wait: true, what: "two paper chips" });
    assert.deepEqual((await chips()).filter((c) => c.startsWith("paper:")).sort(), [`paper:${OTHER.title}`, `paper:${PAPER.title}`].sort());
    // A collection: its chip, and the question is asked in it.
    await zotero.run(`await ZoteroPane.collectionsView.selectByID("C" + arguments[0]); ZoteroPane.itemsView.selection.clearSelection(); return true;`, [made.sleepID]);
    await inPage(`Array.from(document.querySelectorAll("#chips .chip.collection"), (c) => c.textContent).join("|").includes("Sleep")`, { wait: true, what: "the Sleep collection chip" });
    const scoped = await ask("What did the sleep spindles predict?");
    assert.match(scoped.text, /recalled|word list/);
    assert.ok(!scoped.links.some((l) => l.href.includes(made.art)), `the coral paper is outside the collection: ${JSON.stringify(scoped.links)}`);
    await zotero.run(`await ZoteroPane.collectionsView.selectLibrary(Zotero.Libraries.userLibraryID); ZoteroPane.itemsView.selection.clearSelection(); return true;`);
    await inPage(`!!document.querySelector("#chips .chip.library")`, { wait: true, what: "the whole-library chip" });
  });

  test("a citation selects its item in Zotero; a page link opens the PDF in Zotero's reader at that page", async () => {
    const answer = await ask("What raised the bleaching threshold of the corals?");
    const cite = answer.links.find((l) => l.href === `zotero://select/library/items/${made.art}`);
    assert.ok(cite, JSON.stringify(answer.links));
    await zotero.run(`ZoteroPane.itemsView.selection.clearSelection(); return true;`);
    await inPage(`(Array.from(document.querySelectorAll("#messages .msg.assistant a[href=${JSON.stringify(cite.href).replace(/"/g, "'")}]")).pop().click(), true)`);
    await zotero.until(`return ZoteroPane.getSelectedItems().map((i) => i.key).join() === arguments[0]`, "the cited item selected", { args: [made.art] });
    // The page link: the PDF page the quoted passage is on (index 1, the second page).
    const pageLink = answer.links.find((l) => l.href === `zotero://open-pdf/library/items/${made.att}?page=${PAPER.highlight.pageIndex + 1}`);
    assert.ok(pageLink, `no link to the page the answer quotes: ${JSON.stringify(answer.links)}`);
    await inPage(`(Array.from(document.querySelectorAll("#messages .msg.assistant a.pdf-link[href=${JSON.stringify(pageLink.href).replace(/"/g, "'")}]")).pop().click(), true)`);
    const readerStats = `
      if (Zotero_Tabs.selectedType !== "reader") return null;
      const reader = Zotero.Reader.getByTabID(Zotero_Tabs.selectedID);
      if (!reader || reader.itemID !== arguments[0]) return null;
      await reader._initPromise;
      const stats = reader._internalReader && reader._internalReader._state && reader._internalReader._state.primaryViewStats;
      if (!stats || stats.pageIndex === undefined) return null;
      return { pageIndex: stats.pageIndex, pageLabel: stats.pageLabel ?? null, pagesCount: stats.pagesCount ?? null };`;
    await zotero.until(readerStats, "the PDF open in a reader tab", { args: [made.attID], timeoutMs: 60_000 });
    // The reader draws page 1 first, then moves to the page asked for.
    let opened = null;
    try {
      opened = await zotero.until(`const s = await (async () => { ${readerStats} })(); return s && s.pageIndex === arguments[1] ? s : null;`,
        "the reader at the linked page", { args: [made.attID, PAPER.highlight.pageIndex], timeoutMs: 20_000 });
    } catch (err) {
      opened = await zotero.run(readerStats, [made.attID]);
    }
    console.log(`# reader: ${JSON.stringify(opened)}`);
    assert.equal(opened.pageIndex, PAPER.highlight.pageIndex);
  });

  test("beside the PDF reader the pane stays at the window's right edge", async () => {
    await new Promise((r) => setTimeout(r, 1500)); // the reader draws its pages
    const l = await layout();
    assert.ok(l.theirs.some((t) => t.sel === "#tabs-deck browser"), `no reader view: ${JSON.stringify(l.theirs)}`);
    assertBeside(l, "in a reader tab");
    await zotero.screenshot(join(SCREENSHOTS, "zotero-pane-reader.png"));
  });

  test("Save as note makes a child note of the cited paper, read back through Zotero and from zotero.sqlite", async () => {
    // The reader tab's paper is the selection: ask about it and save the answer.
    await inPage(`Array.from(document.querySelectorAll("#chips .chip.paper"), (c) => c.textContent).join("|").includes(${JSON.stringify(PAPER.title.slice(0, 30))})`,
      { wait: true, what: "the reader's paper as the chip" });
    const answer = await ask("How long did acquired tolerance last without heat stress?");
    assert.match(answer.text, /two years/);
    const notesBefore = await zotero.run(`return Zotero.Items.get(arguments[0]).getNotes();`, [made.artID]);
    await inPage(`(Array.from(document.querySelectorAll("#messages .msg.assistant button.save-note")).pop().click(), true)`);
    // The consent card: the person's yes; the daemon hands the note to the plugin.
    await inPage(`!!document.querySelector('#messages .write-card[data-state="awaiting_consent"] .write-confirm')`, { wait: true, what: "the consent card" });
    await inPage(`(document.querySelector('#messages .write-card[data-state="awaiting_consent"] .write-confirm').click(), true)`);
    await inPage(`Array.from(document.querySelectorAll("#messages .msg.assistant button.save-note")).pop()?.textContent === "Saved as a note"`, { wait: true, what: "the note saved" });
    const note = await zotero.until(`
      const added = Zotero.Items.get(arguments[0]).getNotes().filter((id) => !arguments[1].includes(id));
      if (added.length !== 1) return null;
      const n = Zotero.Items.get(added[0]);
      return { key: n.key, html: n.getNote(), parentKey: n.parentItem.key, libraryID: n.libraryID };`, "the new child note", { args: [made.artID, notesBefore] });
    assert.equal(note.parentKey, made.art);
    assert.match(note.html, /two years/);
    assert.match(note.html, new RegExp(`href="zotero://select/library/items/${made.art}"`));
    assert.ok(!/<script|onerror|javascript:/i.test(note.html), note.html);
    // On disk, as Zotero wrote it (a copy: Zotero holds the database).
    const [[html, parentKey]] = await zoteroRows(zotero, root, `SELECT n.note, p.key FROM items i JOIN itemNotes n ON n.itemID = i.itemID
      JOIN items p ON p.itemID = n.parentItemID WHERE i.key = ?`, [note.key]);
    assert.equal(parentKey, made.art);
    assert.match(html, /two years/);
  });

  test("Settings shows the Zocrates preferences pane with the daemon's live figures", async () => {
    await zotero.run(`
      const pane = Zotero.PreferencePanes.pluginPanes.find((p) => p.pluginID === arguments[0]);
      Zotero.Utilities.Internal.openPreferences(pane.id);
      return true;`, [PLUGIN_ID]);
    await zotero.until(`return !!(${PREFS_BROWSER})`, "the Zocrates pane in Settings");
    const figures = await inPage(`(() => {
      const t = (id) => document.getElementById(id)?.textContent || "";
      const s = t("pref-sessions");
      return /^\\d+$/.test(s) && Number(s) >= 1 && t("pref-db-size") && t("pref-version") && t("pref-version") !== "…" ? { sessions: s, db: t("pref-db-size"), version: t("pref-version"), model: t("pref-model") } : null;
    })()`, { wait: true, browser: PREFS_BROWSER, what: "the live figures" });
    console.log(`# preferences: ${JSON.stringify(figures)}`);
    // Seen, not just there: the frame has a height in Zotero's preferences layout.
    const height = await zotero.run(`return ${PREFS_BROWSER}.getBoundingClientRect().height;`);
    assert.ok(height >= 400, `the preferences frame is ${height}px high`);
    const handles = await zotero.marionette.command("WebDriver:GetWindowHandles", {});
    const main = await zotero.marionette.command("WebDriver:GetWindowHandle", {});
    const prefs = handles.find((h) => h !== main);
    await zotero.marionette.command("WebDriver:SwitchToWindow", { handle: prefs, focus: true });
    try {
      await zotero.marionette.script(`window.resizeTo(1000, 760); return true;`);
      await new Promise((r) => setTimeout(r, 800));
      await zotero.screenshot(join(SCREENSHOTS, "zotero-preferences.png"));
      await zotero.marionette.script(`window.close(); return true;`);
    } finally {
      await zotero.marionette.command("WebDriver:SwitchToWindow", { handle: main, focus: true });
    }
  });

  test("the daemon restarting on a new port, and stopping: the pane says so and recovers", async () => {
    // Back to the library tab, the chat as a user left it.
    await zotero.run(`Zotero_Tabs.select("zotero-pane"); return true;`);
    const first = JSON.parse(await readFile(daemon.daemonJsonPath, "utf8"));
    await daemon.stop({ killAfterMs: 20_000 });
    const second = await startDaemon();
    assert.notEqual(second.http.port, first.http.port);
    await zotero.until(`
      const b = ${PANE_BROWSER};
      return b && b.currentURI.spec.startsWith(arguments[0]);`, "the pane on the new port", { args: [`http://127.0.0.1:${second.http.port}/ui/`] });
    await inPage(`!!document.getElementById("prompt")`, { wait: true, what: "the page from the new daemon" });
    const again = await ask("What raised the bleaching threshold of the corals?");
    assert.match(again.text, /Durusdinium/);
    // Stopped: the pane says so (and how to start it).
    await daemon.stop({ killAfterMs: 20_000 });
    await zotero.until(`return document.querySelector("#zocrates-pane .zocrates-no-daemon")?.textContent.includes("No zocratesd running")`, "the no-daemon message");
    // Started again: the pane finds it by itself.
    const third = await startDaemon();
    await zotero.until(`const b = ${PANE_BROWSER}; return b && b.currentURI.spec.startsWith(arguments[0]);`, "the pane back", { args: [`http://127.0.0.1:${third.http.port}/ui/`] });
    await inPage(`!!document.getElementById("prompt")`, { wait: true, what: "the page back" });
  });

  /** What of the plugin is in Zotero now (in the main window, Zotero's registries and its debug log). */
  async function leftovers() {
    const inZotero = await zotero.run(`
      const ids = ["zocrates-pane", "zocrates-splitter", "zocrates-tb-toggle", "zocrates-menuitem-toggle"];
      const left = ids.filter((id) => document.getElementById(id));
      for (const el of document.querySelectorAll("link[href*='zocrates'], [data-l10n-id^='zocrates-']")) left.push(el.localName + ":" + (el.getAttribute("href") || el.getAttribute("data-l10n-id")));
      if (document.documentElement.style.minWidth) left.push("window min-width " + document.documentElement.style.minWidth);
      const res = Services.io.getProtocolHandler("resource").QueryInterface(Ci.nsIResProtocolHandler);
      if (res.hasSubstitution("zocrates")) left.push("resource://zocrates/");
      try {
        // Registering the actor's name succeeds only when nothing holds it.
        ChromeUtils.registerWindowActor("ZocratesBridge", { child: { esModuleURI: "resource://gre/modules/Timer.sys.mjs" }, matches: ["http://127.0.0.1/*"] });
        ChromeUtils.unregisterWindowActor("ZocratesBridge");
      } catch (e) { left.push("window actor ZocratesBridge"); }
      if (Zotero.PreferencePanes.pluginPanes.some((p) => p.pluginID === arguments[0])) left.push("preferences pane");
      for (const [name, view] of [["items", ZoteroPane.itemsView], ["collections", ZoteroPane.collectionsView]]) {
        const n = view && view._events && view._events.select ? view._events.select.listeners.size : 0;
        if (n) left.push(name + " select listeners: " + n);
      }
      const btn = ${PANE_BROWSER};
      if (btn) left.push("chat browser");
      return left;`, [PLUGIN_ID]);
    // Notifier observers are private to Zotero: its debug log names each one registered and unregistered.
    const log = await readFile(zotero.log, "utf8");
    const registered = [...log.matchAll(/Registering notifier observer '(zocrates-selection_[^']+)'/g)].map((m) => m[1]);
    const unregistered = new Set([...log.matchAll(/Unregistering notifier observer in notifier with id '(zocrates-selection_[^']+)'/g)].map((m) => m[1]));
    for (const id of registered) if (!unregistered.has(id)) inZotero.push(`notifier observer ${id}`);
    return { left: inZotero, observers: registered.length };
  }

  test("disabling, enabling and uninstalling the plugin: nothing of it stays behind", async () => {
    const before = await zotero.run(`return ZoteroPane.itemsView._events?.select?.listeners.size ?? null;`);
    await zotero.run(`
      const { AddonManager } = ChromeUtils.importESModule("resource://gre/modules/AddonManager.sys.mjs");
      await (await AddonManager.getAddonByID(arguments[0])).disable();
      return true;`, [PLUGIN_ID]);
    const disabled = await leftovers();
    assert.deepEqual(disabled.left, [], `left behind after disabling: ${disabled.left.join("; ")} (select listeners before: ${before})`);
    assert.ok(disabled.observers >= 1, "the debug log shows no observer of ours at all: the check would not see one left behind");
    // Enabled again: everything is back and works.
    await zotero.run(`
      const { AddonManager } = ChromeUtils.importESModule("resource://gre/modules/AddonManager.sys.mjs");
      await (await AddonManager.getAddonByID(arguments[0])).enable();
      return true;`, [PLUGIN_ID]);
    await zotero.until(`const b = ${PANE_BROWSER}; return b && b.currentURI.spec.includes("/ui/");`, "the pane after enabling");
    await inPage(`!!document.getElementById("prompt")`, { wait: true, what: "the page after enabling" });
    const uninstalled = await zotero.run(`
      const { AddonManager } = ChromeUtils.importESModule("resource://gre/modules/AddonManager.sys.mjs");
      await (await AddonManager.getAddonByID(arguments[0])).uninstall();
      return (await AddonManager.getAddonsByTypes(["extension"])).map((a) => a.id);`, [PLUGIN_ID]);
    assert.ok(!uninstalled.includes(PLUGIN_ID), JSON.stringify(uninstalled));
    const gone = await leftovers();
    assert.deepEqual(gone.left, [], `left behind after uninstalling: ${gone.left.join("; ")}`);
    assert.ok(!existsSync(join(zotero.profile, "extensions", `${PLUGIN_ID}.xpi`)), "the XPI is still in the profile");
  });
});

