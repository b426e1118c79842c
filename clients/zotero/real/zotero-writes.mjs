// ./dev test-zotero, writes: what a person asks Zocrates to write lands in a real Zotero (9.0.6 on
// Gecko 140.12) through the plugin Zotero runs, from every face: the terminal (`zocrates`), an MCP
// client (the official MCP TypeScript SDK, with and without elicitation), an editor (the official
// ACP TypeScript SDK, its permission request answered both ways) and the sidebar's consent card.
//
// Every write is read back twice: through Zotero's own API (Zotero.Items, Zotero.Collections) and
// from a copy of zotero.sqlite as Zotero wrote it; then undone through the same path and read back
// again. Zotero quit while writes are being applied keeps the rest waiting, across a daemon killed
// with SIGKILL, and each lands exactly once when Zotero is back.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdir, mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable, Writable } from "node:stream";

import * as acp from "@agentclientprotocol/sdk";

import { buildXpi } from "../plugin/build.mjs";
import { REPO, Zocratesd, daemonEnv, python } from "../testkit.mjs";
import {
  PANE_BROWSER, PLUGIN_ID, RealZotero, askInPane, daemonLibrary, inPage, installPlugin, killGroup,
  requireZotero, startXvfb, tearDown,
} from "./zoterokit.mjs";
import { APPLIED_TIMEOUT_MS, WritesWorld } from "./writeskit.mjs";

const PAPERS = {
  reef: { title: "Thermal tolerance of reef-building corals under repeated marine heatwaves", year: "2021",
    abstract: "Repeated marine heatwaves bleached the same colonies three times in five years. Colonies that survived the "
      + "first event bleached less in the second, showing acquired thermal tolerance.",
    creators: [{ firstName: "Lena", lastName: "Ströhle", creatorType: "author" }], tags: ["bleaching"] },
  sleep: { title: "Sleep spindles and overnight memory consolidation", year: "2019",
    abstract: "Slow-wave sleep spindles predicted how much of a learned word list was recalled the next morning.",
    creators: [{ firstName: "Ana", lastName: "Lewis", creatorType: "author" }], tags: [] },
  acid: { title: "Ocean acidification thins the shells of pteropods", year: "2018",
    abstract: "Lower seawater pH reduced the shell calcification of pteropods by a fifth over two summers.",
    creators: [{ firstName: "Mei", lastName: "Tanaka", creatorType: "author" }], tags: [] },
};

describe("Writes into a real Zotero, from every face", { timeout: 30 * 60_000 }, () => {
  let root, xvfb, zotero, daemon, env;
  /** Keys of what the test made in Zotero before any write: papers and collections. */
  const made = {};
  const world = new WritesWorld(() => ({ zotero, daemon, root, env }));
  const { item, collection, disk, assertTags, assertCollections, assertTrashed, shim, writeIn, zocrates, mcpClient } = world;
  /** `zocrates ARGS --json`, each write applied through the plugin. */
  const written = (...args) => world.written("plugin", ...args);

  before(async () => {
    requireZotero();
    root = await mkdtemp(join(tmpdir(), "zqwrites"));
    await mkdir(join(root, "run"), { mode: 0o700 });
    env = daemonEnv(root);
    const xpi = (await buildXpi({ out: join(root, "zocrates.xpi") })).path;
    xvfb = await startXvfb();
    zotero = new RealZotero({ root, display: xvfb.display });
    await zotero.start();
    const addon = await installPlugin(zotero, xpi);
    assert.equal(addon.id, PLUGIN_ID);
    Object.assign(made, await zotero.run(`
      const [papers] = arguments;
      const lib = Zotero.Libraries.userLibraryID;
      const out = {};
      for (const name of ["Coral reefs", "Thesis"]) {
        const c = new Zotero.Collection({ libraryID: lib, name });
        await c.saveTx();
        out[name === "Thesis" ? "thesis" : "reefs"] = c.key;
      }
      for (const [id, p] of Object.entries(papers)) {
        const item = new Zotero.Item("journalArticle");
        item.libraryID = lib;
        item.setField("title", p.title);
        item.setField("abstractNote", p.abstract);
        item.setField("date", p.year);
        item.setCreators(p.creators);
        for (const t of p.tags) item.addTag(t);
        if (id !== "sleep") item.addToCollection((await Zotero.Collections.getByLibraryAndKeyAsync(lib, out.reefs)).id);
        await item.saveTx();
        out[id] = item.key;
      }
      return out;`, [PAPERS]));
    daemon = new Zocratesd({ dataDir: zotero.dataDir, env, stderr: join(root, "zocratesd.log") });
    await daemon.start();
    await daemonLibrary(daemon, (s) => s.state === "ready" && s.items_indexed >= 3);
  });

  after(() => tearDown({ zotero, daemon, xvfb, root }));

  test("the terminal: tags, a new collection under a parent, notes; each read back, then undone", async () => {
    // The first write may wait for the plugin's first poll of the new daemon: the CLI says so, then it lands.
    const first = await zocrates("tag", made.reef, made.acid, "--tag", "review", "--tag", "heat stress", "--yes", "--json");
    assert.equal(first.code, 0, first.stderr);
    const tag = first.records[0].state === "applied" ? first.records[0] : await writeIn(first.records[0].id, "applied");
    assert.equal(tag.path, "plugin");
    await assertTags(made.reef, ["bleaching", "heat stress", "review"], "tagged");
    await assertTags(made.acid, ["heat stress", "review"], "tagged");

    // Without --yes and without a terminal the write waits, Zotero untouched, until it is confirmed.
    const waiting = await zocrates("untag", made.reef, "--tag", "bleaching");
    assert.equal(waiting.code, 1, waiting.stderr);
    assert.match(waiting.stderr, /waits for your consent/);
    const untagId = /zocrates writes confirm (w-[\w-]+)/.exec(waiting.stderr)[1];
    await assertTags(made.reef, ["bleaching", "heat stress", "review"], "an unconfirmed untag");
    const [untag] = await written("writes", "confirm", untagId);
    await assertTags(made.reef, ["heat stress", "review"], "untagged");

    const [create, file] = await written("collect", "Chapter 2", made.reef, made.acid, "--create", "--parent", "Thesis", "--yes");
    const chapter = create.created[0];
    assert.equal(chapter, create.operation.new_key);
    assert.deepEqual(await collection(chapter), { name: "Chapter 2", parentKey: made.thesis, deleted: false, items: [made.reef, made.acid].sort() });
    assert.deepEqual(await disk.collection(chapter), ["Chapter 2", made.thesis, 0]);
    await assertCollections(made.reef, [made.reefs, chapter], "filed");

    const [standalone] = await written("note", "## Reading plan\n\nStart with the **heatwave** paper.", "--in", chapter, "--yes");
    const plan = await item(standalone.created[0]);
    assert.equal(plan.parentKey, null);
    assert.deepEqual(plan.collections, [chapter]);
    assert.match(plan.note, /<h2>Reading plan<\/h2>/);
    assert.match(plan.note, /<strong>heatwave<\/strong>/);
    const [planHtml, planParent] = await disk.note(standalone.created[0]);
    assert.equal(planParent, null);
    assert.match(planHtml, /<strong>heatwave<\/strong>/);
    const [child] = await written("note", "Tolerance faded after two years.", "--on", made.reef, "--yes");
    assert.equal((await item(child.created[0])).parentKey, made.reef);
    assert.equal((await disk.note(child.created[0]))[1], made.reef);

    // `zocrates writes` lists them, newest first; undo takes each back, newest first, through Zotero.
    const listed = await zocrates("writes", "--json");
    assert.deepEqual(JSON.parse(listed.stdout).writes.slice(0, 6).map((w) => w.id), [child, standalone, file, create, untag, tag].map((w) => w.id));
    const undo = async () => {
      const [w] = await written("undo");
      assert.ok(w.undoes, JSON.stringify(w));
      return w;
    };
    await undo();
    await assertTrashed("item", child.created[0], "the child note");
    await undo();
    await assertTrashed("item", standalone.created[0], "the standalone note");
    await undo();
    await assertCollections(made.reef, [made.reefs], "taken out of Chapter 2");
    await assertCollections(made.acid, [made.reefs], "taken out of Chapter 2");
    await undo();
    await assertTrashed("collection", chapter, "Chapter 2");
    await undo();
    await assertTags(made.reef, ["bleaching", "heat stress", "review"], "the removed tag back");
    await undo();
    // Only what the write added comes off: the paper's own tag stays.
    await assertTags(made.reef, ["bleaching"], "the added tags off");
    await assertTags(made.acid, [], "the added tags off");
  });

  test("an MCP client with elicitation: the user is asked the exact change; yes writes, no writes nothing; undo", async () => {
    const answers = ["accept", "decline", "accept", "accept", "accept", "accept"];
    const { client, call, asked } = await mcpClient(() => {
      const action = answers.shift();
      return action === "accept" ? { action, content: { always: false } } : { action };
    });
    try {
      const note = await call("save_note", { markdown: "Spindle density predicted **recall**.", parent_item: made.sleep,
        citations: [{ key: made.sleep, title: PAPERS.sleep.title }] });
      assert.equal(note.state, "applied");
      assert.match(asked[0].message, /Sleep spindles and overnight memory consolidation/);
      const saved = await item(note.created[0]);
      assert.equal(saved.parentKey, made.sleep);
      assert.match(saved.note, new RegExp(`href="zotero://select/library/items/${made.sleep}"`));
      assert.match((await disk.note(note.created[0]))[0], /<strong>recall<\/strong>/);

      const declined = await call("tag_items", { item_keys: [made.sleep], tags: ["declined"] });
      assert.equal(declined.state, "discarded");
      assert.match(asked[1].message, /Add the tag "declined"/);
      await assertTags(made.sleep, [], "a declined tag");

      const added = await call("add_item", { csl: { type: "article-journal", title: "Coral spawning under warming seas", DOI: "10.5555/coral.2024.7",
        author: [{ given: "Ana", family: "Reyes" }], issued: { "date-parts": [[2024]] }, "container-title": "Coral Reefs" },
      collection: "Coral reefs" });
      assert.equal(added.state, "applied");
      const paper = await item(added.created[0]);
      assert.equal(paper.title, "Coral spawning under warming seas");
      assert.equal(paper.itemType, "journalArticle");
      assert.equal(paper.doi, "10.5555/coral.2024.7");
      assert.deepEqual(paper.creators, [["Ana", "Reyes"]]);
      assert.deepEqual(paper.collections, [made.reefs]);
      assert.equal(await disk.title(added.created[0]), "Coral spawning under warming seas");

      const folder = await call("create_collection", { name: "Sleep studies" });
      const sleepStudies = folder.created[0];
      const filed = await call("add_to_collection", { item_keys: [made.sleep], collection: sleepStudies });
      assert.equal(filed.state, "applied");
      await assertCollections(made.sleep, [sleepStudies], "filed by MCP");
      const untagged = await call("untag_items", { item_keys: [made.reef], tags: ["bleaching"] });
      assert.equal(untagged.state, "applied");
      await assertTags(made.reef, [], "untagged by MCP");

      // undo, newest first: the tag back, out of the collection, the collection, the item and the note to the trash.
      for (const expect of [
        () => assertTags(made.reef, ["bleaching"], "MCP undo"),
        () => assertCollections(made.sleep, [], "MCP undo"),
        () => assertTrashed("collection", sleepStudies, "Sleep studies"),
        () => assertTrashed("item", added.created[0], "the added item"),
        () => assertTrashed("item", note.created[0], "the MCP note"),
      ]) {
        const undone = await call("undo", {});
        assert.equal(undone.state, "applied", JSON.stringify(undone));
        await expect();
      }
    } finally {
      await client.close();
    }
  });

  test("an MCP client without elicitation: the write waits until confirm_write; discard writes nothing", async () => {
    const { client, call } = await mcpClient(null);
    try {
      const pending = await call("tag_items", { item_keys: [made.acid], tags: ["acidification"] });
      assert.equal(pending.state, "awaiting_consent");
      assert.match(pending.text, /confirm_write/);
      await assertTags(made.acid, [], "an unconfirmed tag");
      const done = await call("confirm_write", { write_id: pending.id, decision: "write" });
      assert.equal(done.state, "applied");
      await assertTags(made.acid, ["acidification"], "confirmed");
      const dropped = await call("add_to_collection", { item_keys: [made.acid], collection: "Thesis" });
      assert.equal((await call("confirm_write", { write_id: dropped.id, decision: "discard" })).state, "discarded");
      await assertCollections(made.acid, [made.reefs], "a discarded filing");
      assert.equal((await call("undo", {})).state, "applied");
      await assertTags(made.acid, [], "undone");
    } finally {
      await client.close();
    }
  });

  test("an ACP editor: /tag and /note on what the answer cited, after the permission; rejected writes nothing; /undo", async () => {
    const child = spawn(python(), ["-m", "zocratesd", "stdio", "--zotero-data-dir", zotero.dataDir], { cwd: REPO, env, stdio: ["pipe", "pipe", "ignore"] });
    const answers = ["reject_once", "allow_once", "allow_once"];
    const asked = [];
    const app = acp.client({ name: "zocrates-real-zotero-test" })
      .onNotification(acp.methods.client.session.update, () => {})
      .onRequest(acp.methods.client.session.requestPermission, async ({ params }) => {
        asked.push(params);
        const kind = answers.shift();
        return { outcome: { outcome: "selected", optionId: params.options.find((o) => o.kind === kind).optionId } };
      });
    const agent = app.connect(acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout))).agent;
    try {
      await agent.request(acp.methods.agent.initialize, { protocolVersion: acp.PROTOCOL_VERSION, clientCapabilities: {},
        clientInfo: { name: "zocrates-real-zotero-test", version: "1.0.0" } });
      const { sessionId } = await agent.request(acp.methods.agent.session.new, { cwd: "/", mcpServers: [] });
      const prompt = (text) => agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text }] });
      assert.equal((await prompt("Did surviving colonies bleach less in a second heatwave?")).stopReason, "end_turn");

      await prompt("/tag editor-pick");
      assert.match(asked[0].toolCall.title, /Add the tag "editor-pick"/);
      await assertTags(made.reef, ["bleaching"], "a rejected /tag");
      await prompt("/tag editor-pick");
      await assertTags(made.reef, ["bleaching", "editor-pick"], "an allowed /tag");
      await prompt("/note");
      assert.match(asked[2].toolCall.title, /Save a note/);
      const { writes: [saved] } = await shim("GET", "/writes?limit=1");
      assert.equal(saved.kind, "save_note");
      assert.equal(saved.state, "applied");
      const note = { key: saved.created[0], ...(await item(saved.created[0])) };
      assert.equal(note.parentKey, made.reef, "the answer cited one paper: the note is its child");
      assert.match(note.note, /bleached less/);
      assert.equal((await disk.note(note.key))[1], made.reef);

      await prompt("/undo");
      await assertTrashed("item", note.key, "the /note");
      await prompt("/undo");
      await assertTags(made.reef, ["bleaching"], "/undo");
      assert.equal(asked.length, 3, "undo asks nothing: it takes back a write the person made");
    } finally {
      child.stdin.end();
      await killGroup(child);
    }
  });

  test("the sidebar: Tag cited papers and Add to collection (created on the way) through the consent card; Undo", async () => {
    await inPage(zotero, `!!document.getElementById("prompt")`, { wait: true, what: "the chat page in the pane" });
    await zotero.run(`await ZoteroPane.collectionsView.selectLibrary(Zotero.Libraries.userLibraryID); ZoteroPane.itemsView.selection.clearSelection(); return true;`);
    await inPage(zotero, `!!document.querySelector("#chips .chip.library")`, { wait: true, what: "the whole-library chip once nothing is selected" });
    // A question of its own: the pane opens on the newest conversation, which may hold the editor's.
    const answer = await askInPane(zotero, "Which colonies bleached less when the heatwave came back?");
    const cited = [...new Set(answer.links.map((l) => /items\/([A-Z0-9]{8})/.exec(l.href)?.[1]).filter(Boolean))].sort();
    assert.ok(cited.includes(made.reef), `${answer.text} ${JSON.stringify(answer.links)}`);
    const last = `Array.from(document.querySelectorAll("#messages .msg.assistant")).filter((m) => m.querySelector(".answer")).pop()`;
    const card = `${last}.querySelector(".write-card")`;

    // Tag cited papers: the tags asked inline, previewed on the card, written on "Write to Zotero".
    await inPage(zotero, `(${last}.querySelector("button.tag-cited").click(), true)`);
    await inPage(zotero, `(() => { const i = ${last}.querySelector(".ask-tags input"); if (!i) return false;
      i.value = "sidebar-pick, to-cite"; i.closest("form").requestSubmit(); return true; })()`, { wait: true, what: "the tags asked" });
    const preview = await inPage(zotero, `${card}?.dataset.state === "awaiting_consent" && ${card}.querySelector(".write-preview").textContent`,
      { wait: true, what: "the consent card" });
    assert.match(preview, /sidebar-pick/);
    assert.match(preview, /Thermal tolerance of reef-building corals/);
    await assertTags(made.reef, ["bleaching"], "a card not yet confirmed");
    await zotero.screenshot(join(REPO, "clients", "zotero", "screenshots", "zotero-write-card.png"));
    await inPage(zotero, `(${card}.querySelector(".write-confirm").click(), true)`);
    await inPage(zotero, `${card}.dataset.state === "applied"`, { wait: true, what: "the card written", timeoutMs: APPLIED_TIMEOUT_MS });
    await assertTags(made.reef, ["bleaching", "sidebar-pick", "to-cite"], "tagged from the sidebar");
    await inPage(zotero, `(${card}.querySelector(".write-undo").click(), true)`);
    await inPage(zotero, `${card}.dataset.state === "undone"`, { wait: true, what: "the card undone", timeoutMs: APPLIED_TIMEOUT_MS });
    await assertTags(made.reef, ["bleaching"], "undone from the sidebar");

    // Add to collection, to one that does not exist yet: "Create it" makes it under its parent and files the paper.
    await inPage(zotero, `(${last}.querySelector("button.add-to-collection").click(), true)`);
    await inPage(zotero, `(() => { const i = ${last}.querySelector(".ask-collection input"); if (!i) return false;
      i.value = "Thesis / Chapter 3"; i.closest("form").requestSubmit(); return true; })()`, { wait: true, what: "the collection asked" });
    await inPage(zotero, `(() => { const b = ${last}.querySelector(".write-create"); if (!b) return false; b.click(); return true; })()`,
      { wait: true, what: "the offer to create the collection" });
    const cards = `Array.from(${last}.querySelectorAll(".write-card"))`;
    await inPage(zotero, `${cards}.some((c) => c.dataset.state === "awaiting_consent" && c.querySelectorAll(".write-one").length === 2)`,
      { wait: true, what: "one card with both writes" });
    await inPage(zotero, `(${cards}.find((c) => c.dataset.state === "awaiting_consent").querySelector(".write-confirm").click(), true)`);
    const ids = await inPage(zotero, `(() => { const c = ${cards}.find((c) => c.dataset.writes.split(" ").length === 2);
      return c && c.dataset.state === "applied" ? c.dataset.writes.split(" ") : null; })()`, { wait: true, what: "both written", timeoutMs: APPLIED_TIMEOUT_MS });
    const { write: created } = await shim("GET", `/writes/${ids[0]}`);
    const chapter3 = created.created[0];
    assert.deepEqual(await collection(chapter3), { name: "Chapter 3", parentKey: made.thesis, deleted: false, items: cited });
    assert.deepEqual(await disk.collection(chapter3), ["Chapter 3", made.thesis, 0]);
    await inPage(zotero, `(${cards}.find((c) => c.dataset.writes.split(" ").length === 2).querySelector(".write-undo").click(), true)`);
    await inPage(zotero, `${cards}.find((c) => c.dataset.writes.split(" ").length === 2).dataset.state === "undone"`,
      { wait: true, what: "both undone", timeoutMs: APPLIED_TIMEOUT_MS });
    await assertCollections(made.reef, [made.reefs], "undone from the sidebar");
    await assertTrashed("collection", chapter3, "Chapter 3");
  });

  test("Zotero quit while writes are applied: the rest wait, across a daemon SIGKILL, and each lands once when Zotero is back", async () => {
    // Eight writes the person confirmed at once (two notes: a retry must not make a second one).
    const proposals = [
      ["tag", { itemKeys: [made.acid], tags: ["queued-1"] }],
      ["save_note", { markdown: "Queued note one.", parentItem: made.acid }],
      ["tag", { itemKeys: [made.acid], tags: ["queued-2"] }],
      ["add_to_collection", { itemKeys: [made.acid], collection: "Thesis" }],
      ["save_note", { markdown: "Queued note two.", parentItem: made.acid }],
      ["tag", { itemKeys: [made.sleep], tags: ["queued-3"] }],
      ["tag", { itemKeys: [made.sleep], tags: ["queued-4"] }],
      ["tag", { itemKeys: [made.sleep], tags: ["never"] }],
    ];
    const writes = [];
    for (const [kind, params] of proposals) writes.push((await shim("POST", `/writes/${kind}`, params)).write);
    const confirm = (w) => shim("POST", `/writes/${w.id}/confirm`, {}).then((r) => r.write);
    assert.equal((await confirm(writes[0])).state, "applied");
    // Four more confirmed as Zotero quits (as a person closes it): each lands now or waits.
    const [, ...racing] = await Promise.all([zotero.stop(), ...writes.slice(1, 5).map(confirm)]);
    for (const w of racing) assert.ok(["applied", "queued"].includes(w.state), JSON.stringify(w));
    // Two confirmed with Zotero gone: they wait, and say for what.
    for (const w of writes.slice(5, 7)) {
      const answered = await confirm(w);
      assert.equal(answered.state, "queued", JSON.stringify(answered));
      assert.ok(answered.error, JSON.stringify(answered));
    }
    // Shown as pending everywhere: here, in the terminal.
    const pending = await zocrates("writes", "--pending", "--json");
    const listed = JSON.parse(pending.stdout).writes.map((w) => w.id);
    for (const w of [...writes.slice(5, 8)]) assert.ok(listed.includes(w.id), `${w.id} not listed as pending: ${pending.stdout}`);
    // The person drops the last one; the daemon dies; a new one takes over the queue from writes.db.
    await shim("POST", `/writes/${writes[7].id}/discard`);
    daemon.proc.kill("SIGKILL");
    await new Promise((r) => daemon.proc.once("exit", r));
    await daemon.start();
    await zotero.start();
    for (const w of writes.slice(0, 7)) await writeIn(w.id, "applied");
    assert.equal((await shim("GET", `/writes/${writes[7].id}`)).write.state, "discarded");

    const notes = (await item(made.acid)).notes;
    for (const text of ["Queued note one.", "Queued note two."]) {
      assert.equal(notes.filter((n) => n.html.includes(text)).length, 1, `${text}: ${JSON.stringify(notes)}`);
    }
    await assertTags(made.acid, ["queued-1", "queued-2"], "after Zotero came back");
    await assertTags(made.sleep, ["queued-3", "queued-4"], "after Zotero came back");
    await assertCollections(made.acid, [made.reefs, made.thesis], "after Zotero came back");
    // The plugin is still there after Zotero's restart, and its pane found the new daemon.
    await zotero.until(`const b = ${PANE_BROWSER}; return b && b.currentURI.spec.includes("/ui/");`, "the pane after Zotero's restart");
  });
});

