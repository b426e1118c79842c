// ./dev test-zotero, Zotero 10: writes through Zotero 10's local API, with no plugin installed (a
// user who never installed it). Zotero's own authorization dialog is answered in its window as a
// person answers it: Deny writes nothing, Allow lets one write through, Always Allow gives a key the
// daemon keeps (0600, never logged) and Zotero asks no more. Every operation is read back through
// Zotero's API and from a copy of zotero.sqlite, then undone (into Zotero's trash where it created
// something). With Zotero closed the write waits, and lands once when Zotero is back.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, readFile, stat } from "node:fs/promises";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { Zocratesd, daemonEnv } from "../testkit.mjs";
import { PLUGIN_ID, RealZotero, ZOTERO10_APP, daemonLibrary, requireZotero, startXvfb, tearDown } from "./zoterokit.mjs";
import { WritesWorld } from "./writeskit.mjs";

/** Papers a person has, and 50 more: one write may touch at most 50 items (limits.MAX_WRITE_ITEMS). */
const PAPERS = {
  reef: { title: "Thermal tolerance of reef-building corals under repeated marine heatwaves", tags: ["bleaching"] },
  sleep: { title: "Sleep spindles and overnight memory consolidation", tags: [] },
};
const BATCH = 50;

/** A free TCP port on 127.0.0.1 for Zotero's HTTP server (23119 may be a real Zotero's). */
function freePort() {
  return new Promise((resolve) => {
    const probe = net.createServer().listen(0, "127.0.0.1", () => {
      const { port } = probe.address();
      probe.close(() => resolve(port));
    });
  });
}

describe("Writes through a real Zotero 10's local API, without the plugin", { timeout: 30 * 60_000 }, () => {
  let root, xvfb, zotero, daemon, env, port;
  /** Keys of what the test made in Zotero before any write. */
  const made = {};
  const world = new WritesWorld(() => ({ zotero, daemon, root, env }));
  const { item, collection, disk, assertTags, assertCollections, assertTrashed, writeIn, zocrates, mcpClient } = world;
  /** `zocrates ARGS --json`, each write applied through Zotero's local API. */
  const written = (...args) => world.written("local_api", ...args);
  const keyFile = () => join(zotero.dataDir, "zocrates-data", "zotero-local-api-key.json");

  before(async () => {
    requireZotero(ZOTERO10_APP);
    root = await mkdtemp(join(tmpdir(), "zq10api"));
    await mkdir(join(root, "run"), { mode: 0o700 });
    port = await freePort();
    xvfb = await startXvfb();
    // Settings → Advanced → "Allow other applications on this computer to communicate with Zotero".
    zotero = new RealZotero({ root, display: xvfb.display, app: ZOTERO10_APP,
      prefs: { "extensions.zotero.httpServer.localAPI.enabled": true, "extensions.zotero.httpServer.port": port } });
    await zotero.start();
    Object.assign(made, await zotero.run(`
      const [papers, batch] = arguments;
      const lib = Zotero.Libraries.userLibraryID;
      const thesis = new Zotero.Collection({ libraryID: lib, name: "Thesis" });
      await thesis.saveTx();
      const out = { thesis: thesis.key, batch: [] };
      for (const [id, p] of Object.entries(papers)) {
        const item = new Zotero.Item("journalArticle");
        item.libraryID = lib;
        item.setField("title", p.title);
        for (const t of p.tags) item.addTag(t);
        await item.saveTx();
        out[id] = item.key;
      }
      await Zotero.DB.executeTransaction(async () => {
        for (let i = 1; i <= batch; i++) {
          const item = new Zotero.Item("journalArticle");
          item.libraryID = lib;
          item.setField("title", "Survey wave " + i + " of reef monitoring");
          await item.save();
          out.batch.push(item.key);
        }
      });
      return out;`, [PAPERS, BATCH]));
    env = daemonEnv(root, { ZOCRATES_LIBRARY__LOCAL_API_URL: `http://127.0.0.1:${port}` });
    daemon = new Zocratesd({ dataDir: zotero.dataDir, env, stderr: join(root, "zocratesd.log") });
    await daemon.start();
    await daemonLibrary(daemon, (s) => s.state === "ready" && s.items_indexed >= 2 + BATCH);
  });

  after(() => tearDown({ zotero, daemon, xvfb, root }));

  /** Run `zocrates ARGS --json` while the person answers Zotero's authorization dialog with the
   *  button `label` (Zotero shows it while the daemon's authorize request waits); the command's
   *  outcome and the dialog's text. */
  async function answered(label, ...args) {
    await zotero.answerNextDialog(label);
    const out = await zocrates(...args, "--json");
    const dialog = await zotero.dialogAnswered();
    assert.ok(dialog, `Zotero showed no dialog: ${out.stderr}`);
    return { ...out, text: dialog.text };
  }

  test("Zotero 10 with its local API on and no Zocrates plugin", async () => {
    const info = await zotero.run(`
      const { AddonManager } = ChromeUtils.importESModule("resource://gre/modules/AddonManager.sys.mjs");
      return { zotero: Zotero.version, addons: (await AddonManager.getAddonsByTypes(["extension"])).map((a) => a.id) };`);
    console.log(`# Zotero ${info.zotero}, local API on port ${port}`);
    assert.match(info.zotero, /^10\./);
    assert.ok(!info.addons.includes(PLUGIN_ID), JSON.stringify(info.addons));
    const r = await fetch(`http://127.0.0.1:${port}/api/`, { headers: { "Zotero-API-Version": "3" } });
    assert.equal(r.status, 200);
    assert.ok(r.headers.get("zotero-server-id"), "no Zotero-Server-ID");
  });

  test("Zotero's dialog: Deny writes nothing, Allow lets one write through, Always Allow is kept 0600 and not asked again", async () => {
    const out = await answered("Deny", "tag", made.reef, "--tag", "denied", "--yes");
    assert.match(out.text, /Zocrates/);
    assert.equal(out.code, 1, out.stderr);
    assert.match(out.stderr, /Deny/);
    await assertTags(made.reef, ["bleaching"], "after Deny");

    const [allowed] = (await answered("Allow", "tag", made.reef, "--tag", "allowed-once", "--yes")).records;
    assert.equal(allowed.state, "applied", JSON.stringify(allowed));
    assert.equal(allowed.path, "local_api");
    await assertTags(made.reef, ["allowed-once", "bleaching"], "after Allow");
    assert.ok(!existsSync(keyFile()), "an Allow key was kept: it is Zotero's for one write");

    // That key was consumed by its write: the next asks again.
    const [always] = (await answered("Always Allow", "untag", made.reef, "--tag", "allowed-once", "--yes")).records;
    assert.equal(always.state, "applied", JSON.stringify(always));
    await assertTags(made.reef, ["bleaching"], "after Always Allow");
    assert.equal((await stat(keyFile())).mode & 0o777, 0o600);
    const kept = Object.values(JSON.parse(await readFile(keyFile(), "utf8")))[0];
    assert.match(kept, /^[A-Za-z0-9]{20,}$/);
    assert.ok(!(await readFile(join(root, "zocratesd.log"), "utf8")).includes(kept), "the key is in the daemon's log");

    // From now on Zotero does not ask.
    const before = await zotero.windows();
    const [unasked] = await written("tag", made.sleep, "--tag", "unasked", "--yes");
    assert.deepEqual(await zotero.windows(), before, "Zotero asked again");
    await assertTags(made.sleep, ["unasked"], "with the kept key");
    await written("undo", unasked.id);
    await assertTags(made.sleep, [], "undone");
  });

  test("every operation through the local API, read back and undone", async () => {
    const [child] = await written("note", "Tolerance faded after **two years**.", "--on", made.reef, "--yes");
    const note = await item(child.created[0]);
    assert.equal(note.parentKey, made.reef);
    assert.match(note.note, /<strong>two years<\/strong>/);
    assert.equal((await disk.note(child.created[0]))[1], made.reef);

    const [create, file] = await written("collect", "Chapter 2", made.reef, made.sleep, "--create", "--parent", "Thesis", "--yes");
    const chapter = create.created[0];
    assert.deepEqual(await collection(chapter), { name: "Chapter 2", parentKey: made.thesis, deleted: false, items: [made.reef, made.sleep].sort() });
    assert.deepEqual(await disk.collection(chapter), ["Chapter 2", made.thesis, 0]);
    const [standalone] = await written("note", "## Plan\n\nRead the surveys.", "--in", chapter, "--yes");
    const plan = await item(standalone.created[0]);
    assert.equal(plan.parentKey, null);
    assert.deepEqual(plan.collections, [chapter]);

    const { client, call } = await mcpClient(() => ({ action: "accept", content: { always: false } }));
    let added;
    try {
      added = await call("add_item", { csl: { type: "article-journal", title: "Coral spawning under warming seas", DOI: "10.5555/coral.2024.7",
        author: [{ given: "Ana", family: "Reyes" }], issued: { "date-parts": [[2024]] } }, collection: chapter });
      assert.equal(added.state, "applied");
      assert.equal(added.path, "local_api");
    } finally {
      await client.close();
    }
    const paper = await item(added.created[0]);
    assert.equal(paper.title, "Coral spawning under warming seas");
    assert.equal(paper.doi, "10.5555/coral.2024.7");
    assert.deepEqual(paper.creators, [["Ana", "Reyes"]]);
    assert.deepEqual(paper.collections, [chapter]);
    assert.equal(await disk.title(added.created[0]), "Coral spawning under warming seas");

    const [untag] = await written("untag", made.reef, "--tag", "bleaching", "--yes");
    await assertTags(made.reef, [], "untagged");
    // The most one write may touch: 50 items, in one request to Zotero.
    const [batch] = await written("tag", ...made.batch, "--tag", "surveyed", "--yes");
    assert.deepEqual(await disk.tagged("surveyed"), [...made.batch].sort());

    // Undo, newest first, through the same path.
    await written("undo", batch.id);
    assert.deepEqual(await disk.tagged("surveyed"), []);
    await written("undo", untag.id);
    await assertTags(made.reef, ["bleaching"], "the tag back");
    await written("undo", added.id);
    await assertTrashed("item", added.created[0], "the added item");
    await written("undo", standalone.id);
    await assertTrashed("item", standalone.created[0], "the standalone note");
    await written("undo", file.id);
    await assertCollections(made.reef, [], "out of Chapter 2");
    await written("undo", create.id);
    await assertTrashed("collection", chapter, "Chapter 2");
    await written("undo", child.id);
    await assertTrashed("item", child.created[0], "the child note");
  });

  test("Zotero closed: the write waits, and lands once when Zotero is back", async () => {
    await zotero.stop();
    const out = await zocrates("tag", made.sleep, "--tag", "while-closed", "--yes", "--json");
    assert.equal(out.code, 0, out.stderr);
    assert.equal(out.records[0].state, "queued", JSON.stringify(out.records[0]));
    assert.match(out.stderr, /as soon as Zotero can take it/);
    await zotero.start();
    const landed = await writeIn(out.records[0].id, "applied");
    assert.equal(landed.path, "local_api");
    await assertTags(made.sleep, ["while-closed"], "after Zotero came back");
  });
});
