// What the real-Zotero write tests share: what Zotero holds, read through its own API and from a
// copy of zotero.sqlite, and the daemon as its faces reach it (the HTTP shim the sidebar uses, the
// `zocrates` terminal client, an MCP client on the official TypeScript SDK).
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { readFile } from "node:fs/promises";

import { Client as McpClient } from "@modelcontextprotocol/client";
import { StdioClientTransport } from "@modelcontextprotocol/client/stdio";

import { REPO, python } from "../testkit.mjs";
import { zoteroRows } from "./zoterokit.mjs";

/** A write confirmed while Zotero can take it is answered once Zotero has made it: seconds; a write
 *  that waited for Zotero lands within the plugin's reconnect (1-30 s) after Zotero is back. */
export const APPLIED_TIMEOUT_MS = 120_000;
/** One `zocrates` command, or one MCP or ACP call, on a loaded machine. */
export const CALL_TIMEOUT_MS = 120_000;

/** The library and the daemon of one test file. `current()` gives what is running now (Zotero and
 *  the daemon restart during a test): `{zotero, daemon, root, env}`. Every method is bound, so a
 *  test may take them apart: `const { item, assertTags } = world`. */
export class WritesWorld {
  constructor(current) {
    this.current = current;
  }

  /** An item as Zotero's API has it: tags, collections (keys), child notes, whether it is in the trash. */
  item = (key) => this.current().zotero.run(`
    const item = await Zotero.Items.getByLibraryAndKeyAsync(Zotero.Libraries.userLibraryID, arguments[0]);
    if (!item) return null;
    const notes = item.isRegularItem() ? Zotero.Items.get(item.getNotes(true)) : [];
    return { tags: item.getTags().map((t) => t.tag).sort(), collections: Zotero.Collections.get(item.getCollections()).map((c) => c.key).sort(),
      deleted: item.deleted, title: item.isNote() ? null : item.getField("title"), itemType: Zotero.ItemTypes.getName(item.itemTypeID),
      parentKey: item.parentItem?.key ?? null, note: item.isNote() ? item.getNote() : null,
      notes: notes.map((n) => ({ key: n.key, html: n.getNote(), deleted: n.deleted })),
      creators: item.isRegularItem() ? item.getCreators().map((c) => [c.firstName, c.lastName]) : [],
      doi: item.isRegularItem() ? item.getField("DOI") : null };`, [key]);

  /** A collection as Zotero's API has it: name, parent's key, its items' keys, whether it is in the trash. */
  collection = (key) => this.current().zotero.run(`
    const c = await Zotero.Collections.getByLibraryAndKeyAsync(Zotero.Libraries.userLibraryID, arguments[0]);
    if (!c) return null;
    const parent = c.parentID ? Zotero.Collections.get(c.parentID) : null;
    return { name: c.name, parentKey: parent ? parent.key : null, deleted: c.deleted,
      items: Zotero.Items.get(c.getChildItems(true)).map((i) => i.key).sort() };`, [key]);

  #rows = (sql, params) => zoteroRows(this.current().zotero, this.current().root, sql, params);

  /** The same facts from zotero.sqlite as Zotero wrote it. */
  disk = {
    tags: async (key) => (await this.#rows(`SELECT t.name FROM items i JOIN itemTags it ON it.itemID = i.itemID
      JOIN tags t ON t.tagID = it.tagID WHERE i.key = ? ORDER BY t.name`, [key])).map((r) => r[0]),
    collections: async (key) => (await this.#rows(`SELECT c.key FROM items i JOIN collectionItems ci ON ci.itemID = i.itemID
      JOIN collections c ON c.collectionID = ci.collectionID WHERE i.key = ? ORDER BY c.key`, [key])).map((r) => r[0]),
    trashed: async (key) => (await this.#rows(`SELECT COUNT(*) FROM items i JOIN deletedItems d ON d.itemID = i.itemID
      WHERE i.key = ?`, [key]))[0][0] === 1,
    note: async (key) => (await this.#rows(`SELECT n.note, p.key FROM items i JOIN itemNotes n ON n.itemID = i.itemID
      LEFT JOIN items p ON p.itemID = n.parentItemID WHERE i.key = ?`, [key]))[0] ?? null,
    collection: async (key) => (await this.#rows(`SELECT c.collectionName, p.key,
      (SELECT COUNT(*) FROM deletedCollections d WHERE d.collectionID = c.collectionID) FROM collections c
      LEFT JOIN collections p ON p.collectionID = c.parentCollectionID WHERE c.key = ?`, [key]))[0] ?? null,
    title: async (key) => (await this.#rows(`SELECT v.value FROM items i JOIN itemData d ON d.itemID = i.itemID
      JOIN fieldsCombined f ON f.fieldID = d.fieldID JOIN itemDataValues v ON v.valueID = d.valueID
      WHERE i.key = ? AND f.fieldName = 'title'`, [key]))[0]?.[0] ?? null,
    /** The keys of the items that have `tag`. */
    tagged: async (tag) => (await this.#rows(`SELECT i.key FROM items i JOIN itemTags it ON it.itemID = i.itemID
      JOIN tags t ON t.tagID = it.tagID WHERE t.name = ? ORDER BY i.key`, [tag])).map((r) => r[0]),
  };

  /** Assert an item's tags, through Zotero and on disk. */
  assertTags = async (key, tags, what) => {
    assert.deepEqual((await this.item(key)).tags, [...tags].sort(), `${what}: tags in Zotero`);
    assert.deepEqual(await this.disk.tags(key), [...tags].sort(), `${what}: tags in zotero.sqlite`);
  };

  /** Assert an item's collections, through Zotero and on disk. */
  assertCollections = async (key, keys, what) => {
    assert.deepEqual((await this.item(key)).collections, [...keys].sort(), `${what}: collections in Zotero`);
    assert.deepEqual(await this.disk.collections(key), [...keys].sort(), `${what}: collections in zotero.sqlite`);
  };

  /** Assert an object a write made went to Zotero's trash by its undo (an item or a collection). */
  assertTrashed = async (kind, key, what) => {
    if (kind === "item") {
      assert.equal((await this.item(key)).deleted, true, `${what}: not in Zotero's trash`);
      assert.equal(await this.disk.trashed(key), true, `${what}: not in deletedItems`);
    } else {
      assert.equal((await this.collection(key)).deleted, true, `${what}: not in Zotero's trash`);
      assert.equal((await this.disk.collection(key))[2], 1, `${what}: not in deletedCollections`);
    }
  };

  /** A request to the daemon's HTTP shim with its token (the sidebar's routes); the JSON answer. */
  shim = async (method, path, body) => {
    const info = JSON.parse(await readFile(this.current().daemon.daemonJsonPath, "utf8"));
    const r = await fetch(`http://127.0.0.1:${info.http.port}${path}`, {
      method, headers: { Authorization: `Bearer ${info.token}`, "Content-Type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const answer = await r.json();
    assert.ok(r.ok, `${method} ${path}: ${r.status} ${JSON.stringify(answer)}`);
    return answer;
  };

  /** Wait until the write `id` is in `state` (it may wait for Zotero, or for the plugin's next poll); the write. */
  writeIn = async (id, state, timeoutMs = APPLIED_TIMEOUT_MS) => {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const { write } = await this.shim("GET", `/writes/${id}`);
      if (write.state === state) return write;
      assert.ok(Date.now() < deadline, `write ${id} never got to ${state}: ${JSON.stringify(write)}`);
      await new Promise((r) => setTimeout(r, 250));
    }
  };

  /** Run `zocrates ARGS` as a script does (no terminal); its exit code, stdout, stderr and the JSON
   *  records it printed (with --json). */
  zocrates = (...args) => new Promise((resolve, reject) => {
    const { zotero, env } = this.current();
    const proc = spawn(python(), ["-m", "zocrates_client.cli", ...args, "--zotero-data-dir", zotero.dataDir], {
      cwd: REPO, env, stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    proc.stdout.on("data", (c) => { stdout += c; });
    proc.stderr.on("data", (c) => { stderr += c; });
    const timer = setTimeout(() => proc.kill("SIGKILL"), CALL_TIMEOUT_MS);
    proc.once("error", reject);
    proc.once("close", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr, records: stdout.split("\n").filter((l) => l.startsWith("{")).map((l) => JSON.parse(l)) });
    });
  });

  /** `zocrates ARGS --json`, which must succeed with each write applied through `path`; the writes. */
  written = async (path, ...args) => {
    const out = await this.zocrates(...args, "--json");
    assert.equal(out.code, 0, `zocrates ${args.join(" ")}: ${out.stderr}`);
    assert.ok(out.records.length >= 1, out.stdout);
    for (const w of out.records) {
      assert.equal(w.state, "applied", JSON.stringify(w));
      assert.equal(w.path, path, `written by ${w.path}, not through ${path}`);
    }
    return out.records;
  };

  /** An MCP client on the official TypeScript SDK, on `zocratesd mcp`; with `elicit`, it declares
   *  elicitation and answers each request with it. `call(name, args)` fails on a tool error and
   *  gives the structured result with its text. */
  mcpClient = async (elicit) => {
    const { zotero, env } = this.current();
    const client = new McpClient({ name: "zocrates-real-zotero-test", version: "1.0.0" }, { capabilities: elicit ? { elicitation: { form: {} } } : {} });
    const asked = [];
    if (elicit) {
      client.setRequestHandler("elicitation/create", async (request) => {
        asked.push(request.params);
        return elicit(request.params);
      });
    }
    await client.connect(new StdioClientTransport({ command: python(), args: ["-m", "zocratesd", "mcp", "--zotero-data-dir", zotero.dataDir],
      env, cwd: REPO, stderr: "ignore" }));
    const call = async (name, args) => {
      const result = await client.callTool({ name, arguments: args }, { timeout: CALL_TIMEOUT_MS });
      assert.ok(!result.isError, `${name}: ${JSON.stringify(result.content)}`);
      return { ...result.structuredContent, text: result.content[0].text };
    };
    return { client, call, asked };
  };
}
