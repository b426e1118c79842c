// writes.js: the write channel: the daemon hands consented writes (notes, tags, collections, new
// items) to the plugin, which performs them with Zotero's own API and answers what changed
// (protocol/http.md, "The plugin's write channel").
//
// A classic script that defines one global, `ZocratesWrites`; bootstrap.js loads it after bridge.js
// (whose daemon finding it reuses), starts the channel at startup and stops it at shutdown. It runs
// whether or not the chat pane is open: a write proposed from the terminal or an MCP client reaches
// Zotero too.
//
//   ZocratesWrites.start({ version });   // finds the daemon, long-polls GET /plugin/writes, answers each request
//   await ZocratesWrites.stop();         // ends the poll and every timer
//
// The token goes only to a listener that has just proved it holds daemon.json's token (bridge.js,
// proveDaemon): before every request that carries it. What the daemon sends is untrusted input
// (a model's output, a library's text): each request is checked against the operations and limits
// below before Zotero is touched, and a note's HTML is sanitised as the bridge sanitises the page's.

/* global ZocratesBridge */
/* exported ZocratesWrites */
var ZocratesWrites = (function () {
  "use strict";

  /** How long the daemon may hold a poll open with nothing to do (its maximum). */
  const POLL_WAIT_S = 25;
  /** A poll not answered this long after its wait is a hung connection: it is dropped and retried. */
  const POLL_GRACE_MS = 15_000;
  const POST_TIMEOUT_MS = 15_000;
  /** After a failure (nothing listening, an error answer), wait this long, doubling up to the maximum. */
  const BACKOFF_FIRST_MS = 1000;
  const BACKOFF_MAX_MS = 30_000;
  /** How often daemon.json is reread while there is none, while waiting and while a poll is open:
   *  a restarted daemon (new pid, port or token) is found within this. A small local read. */
  const DAEMON_JSON_RECHECK_MS = 3000;
  /** An empty answer sooner than this is a daemon not holding the poll: back off, never spin. */
  const MIN_EMPTY_POLL_MS = 1000;
  /** A note is at most as long as the page may send (bridge.js), and a request is one operation. */
  const { MAX_NOTE_HTML_CHARS } = ZocratesBridge;
  /** A request's note in UTF-8 (up to 4 bytes a character), and room for its operation. */
  const MAX_POLL_BYTES = 4 * MAX_NOTE_HTML_CHARS + 1_000_000;
  /** Zotero's Web API writes at most 50 objects per request; the daemon splits larger writes. */
  const MAX_ITEMS = 50;
  const MAX_TAGS = 50;
  /** Zotero's sync server refuses longer tags (one written here would never sync). */
  const MAX_TAG_CHARS = 255;
  const MAX_NAME_CHARS = 255;
  const MAX_FIELDS = 100;
  const MAX_FIELD_CHARS = 10_000;
  const MAX_CREATORS = 100;
  /** Outside text in a debug line: escaped, and cut to this. */
  const MAX_LOG_CHARS = 200;

  /** A key the daemon names, as the bridge takes one (the lookup decides whether it exists). */
  const { KEY_RE } = ZocratesBridge;
  /** A key for a new object: Zotero's own alphabet (Zotero.Utilities.isValidObjectKey), or Zotero refuses it. */
  const NEW_KEY_RE = /^[23456789ABCDEFGHIJKLMNPQRSTUVWXYZ]{8}$/;
  const GROUP_LIBRARY_RE = /^groups\/([1-9][0-9]{0,11})$/;
  /** The daemon's request ids ("p-12"); the id goes into the answer's URL path. */
  const REQUEST_ID_RE = /^[A-Za-z0-9._:-]{1,128}$/;
  /** Item type, field and creator type names: Zotero's are camelCase words. */
  const NAME_RE = /^[A-Za-z]{1,64}$/;
  const CONTROL_RE = /[\u0000-\u001f\u007f]/;
  /** Zotero's item types that are not a reference: add_item makes only regular items. */
  const NOT_REGULAR_TYPES = new Set(["note", "attachment", "annotation"]);

  /** The request will never work (bad input, a key Zotero does not have, a read-only library). */
  class Refused extends Error {}

  /** @param {string} message @returns {never} */
  function refuse(message) {
    throw new Refused(message);
  }

  /** Outside text as it may appear in a debug line: quoted, escaped, cut. */
  function quoted(/** @type {unknown} */ text) {
    return JSON.stringify(String(text).slice(0, MAX_LOG_CHARS));
  }

  function log(/** @type {string} */ message) {
    Zotero.debug(`Zocrates: write channel: ${message}`);
  }

  function errorMessage(/** @type {unknown} */ err) {
    return err instanceof Error ? err.message : String(err);
  }

  function isObject(/** @type {unknown} */ value) {
    return value !== null && typeof value === "object" && !Array.isArray(value);
  }

  // ---- checking what the daemon sends ---------------------------------------------------------

  /** @typedef {[string, string[]][]} TagsPerItem */
  /** @typedef {{firstName: string, lastName: string, fieldMode: 0 | 1, creatorType: string}} CreatorInput */
  /**
   * One operation, checked (keys, lengths, counts), in the plugin's terms.
   * @typedef {{type: "tag_items" | "untag_items" | "retag", library: string, add: TagsPerItem, remove: TagsPerItem}
   *   | {type: "add_to_collection" | "remove_from_collection", library: string, items: string[], collection: string}
   *   | {type: "create_collection", library: string, name: string, newKey: string, parent: string | null}
   *   | {type: "save_note", library: string, newKey: string, html: string, parent: string | null, collection: string | null}
   *   | {type: "add_item", library: string, newKey: string, itemType: string, title: string, fields: [string, string][], creators: CreatorInput[], collection: string | null}
   *   | {type: "trash", library: string, items: string[], collections: string[]}} Operation
   */

  /** A line of text: a string, trimmed, not empty, at most `max` characters, no control characters. */
  function line(/** @type {unknown} */ value, /** @type {string} */ what, /** @type {number} */ max) {
    if (typeof value !== "string") refuse(`${what} is not text`);
    const text = value.trim();
    if (!text) refuse(`${what} is empty`);
    if (text.length > max) refuse(`${what} is longer than ${max} characters`);
    if (CONTROL_RE.test(text)) refuse(`${what} contains control characters`);
    return text;
  }

  function key(/** @type {unknown} */ value, /** @type {string} */ what) {
    if (typeof value !== "string" || !KEY_RE.test(value)) refuse(`${what} is not a Zotero key: ${quoted(value)}`);
    return value;
  }

  function optionalKey(/** @type {unknown} */ value, /** @type {string} */ what) {
    return value === null || value === undefined ? null : key(value, what);
  }

  function newKey(/** @type {unknown} */ value) {
    if (typeof value !== "string" || !NEW_KEY_RE.test(value)) refuse(`new_key is not a key Zotero accepts: ${quoted(value)}`);
    return value;
  }

  /** Distinct keys, at most MAX_ITEMS (at least one unless `allowEmpty`). */
  function keyList(/** @type {unknown} */ value, /** @type {string} */ what, allowEmpty = false) {
    if (!Array.isArray(value)) refuse(`${what} is not a list`);
    const keys = [...new Set(value.map((k) => key(k, `each of ${what}`)))];
    if (!keys.length && !allowEmpty) refuse(`${what} is empty`);
    if (keys.length > MAX_ITEMS) refuse(`${what} names more than ${MAX_ITEMS} objects`);
    return keys;
  }

  function tagList(/** @type {unknown} */ value) {
    if (!Array.isArray(value)) refuse("tags is not a list");
    const tags = [...new Set(value.map((t) => line(t, "a tag", MAX_TAG_CHARS)))];
    if (!tags.length) refuse("no tags named");
    if (tags.length > MAX_TAGS) refuse(`more than ${MAX_TAGS} tags`);
    return tags;
  }

  function libraryName(/** @type {unknown} */ value) {
    if (value === "user" || (typeof value === "string" && GROUP_LIBRARY_RE.test(value))) return value;
    refuse(`not a library: ${quoted(value)}`);
  }

  /** `{KEY: [tags]}` as [key, tags] pairs. */
  function tagsPerItem(/** @type {unknown} */ value, /** @type {string} */ what) {
    if (value === undefined) return [];
    if (!isObject(value)) refuse(`${what} is not an object of tags per item`);
    return Object.entries(/** @type {object} */ (value)).map(([k, tags]) => /** @type {[string, string[]]} */ ([key(k, `an item of ${what}`), tagList(tags)]));
  }

  /** @type {Map<string, (raw: any, noteHTML: unknown, scope: any) => Operation>} */
  const PARSERS = new Map([
    ["tag_items", (raw) => ({ type: "tag_items", library: raw.library, add: sameTags(raw), remove: [] })],
    ["untag_items", (raw) => ({ type: "untag_items", library: raw.library, add: [], remove: sameTags(raw) })],
    ["retag", parseRetag],
    ["add_to_collection", (raw) => ({ type: "add_to_collection", library: raw.library, items: keyList(raw.items, "items"), collection: key(raw.collection, "collection") })],
    ["remove_from_collection", (raw) => ({ type: "remove_from_collection", library: raw.library, items: keyList(raw.items, "items"), collection: key(raw.collection, "collection") })],
    ["create_collection", (raw) => ({ type: "create_collection", library: raw.library, name: line(raw.name, "the collection's name", MAX_NAME_CHARS), newKey: newKey(raw.new_key), parent: optionalKey(raw.parent, "parent") })],
    ["save_note", parseSaveNote],
    ["add_item", parseAddItem],
    ["trash", parseTrash],
  ]);

  /** tag_items and untag_items: the same tags for each item. */
  function sameTags(/** @type {any} */ raw) {
    const tags = tagList(raw.tags);
    return keyList(raw.items, "items").map((k) => /** @type {[string, string[]]} */ ([k, tags]));
  }

  function parseRetag(/** @type {any} */ raw) {
    const add = tagsPerItem(raw.add, "add");
    const remove = tagsPerItem(raw.remove, "remove");
    const items = new Set([...add, ...remove].map(([k]) => k));
    if (!items.size) refuse("retag names no items");
    if (items.size > MAX_ITEMS) refuse(`retag names more than ${MAX_ITEMS} items`);
    return /** @type {Operation} */ ({ type: "retag", library: raw.library, add, remove });
  }

  function parseSaveNote(/** @type {any} */ raw, /** @type {unknown} */ noteHTML, /** @type {any} */ scope) {
    if (typeof noteHTML !== "string" || !noteHTML.trim()) refuse("the request has no note");
    if (noteHTML.length > MAX_NOTE_HTML_CHARS) refuse("the note is too long to save");
    const parent = optionalKey(raw.parent, "parent");
    const collection = optionalKey(raw.collection, "collection");
    if (parent && collection) refuse("a note goes on a paper or into a collection, not both");
    const html = ZocratesBridge.sanitizeNoteHTML(scope, noteHTML);
    if (!html.trim()) refuse("the note is empty once sanitised");
    return /** @type {Operation} */ ({ type: "save_note", library: raw.library, newKey: newKey(raw.new_key), html, parent, collection });
  }

  function parseCreator(/** @type {unknown} */ raw) {
    if (!isObject(raw)) refuse("a creator is not an object");
    const c = /** @type {any} */ (raw);
    const part = (/** @type {unknown} */ v, /** @type {string} */ what) => (v === undefined || v === "" ? "" : line(v, what, MAX_NAME_CHARS));
    const creatorType = c.creator_type === undefined ? "author" : c.creator_type;
    if (typeof creatorType !== "string" || !NAME_RE.test(creatorType)) refuse(`not a creator type: ${quoted(creatorType)}`);
    const name = part(c.name, "a creator's name");
    if (name) return { firstName: "", lastName: name, fieldMode: /** @type {1} */ (1), creatorType };
    const firstName = part(c.first_name, "a creator's first name");
    const lastName = part(c.last_name, "a creator's last name");
    if (!firstName && !lastName) refuse("a creator has no name");
    return { firstName, lastName, fieldMode: /** @type {0} */ (0), creatorType };
  }

  function parseAddItem(/** @type {any} */ raw) {
    if (!isObject(raw.item)) refuse("add_item has no item");
    const item = raw.item;
    if (typeof item.item_type !== "string" || !NAME_RE.test(item.item_type)) refuse(`not an item type: ${quoted(item.item_type)}`);
    const fields = item.fields === undefined ? {} : item.fields;
    if (!isObject(fields)) refuse("fields is not an object");
    const entries = Object.entries(fields);
    if (entries.length > MAX_FIELDS) refuse(`more than ${MAX_FIELDS} fields`);
    for (const [name, value] of entries) {
      if (!NAME_RE.test(name)) refuse(`not a field name: ${quoted(name)}`);
      if (typeof value !== "string" || value.length > MAX_FIELD_CHARS) refuse(`the field ${name} is not text of at most ${MAX_FIELD_CHARS} characters`);
    }
    const creators = item.creators === undefined ? [] : item.creators;
    if (!Array.isArray(creators) || creators.length > MAX_CREATORS) refuse(`creators is not a list of at most ${MAX_CREATORS}`);
    return /** @type {Operation} */ ({
      type: "add_item", library: raw.library, newKey: newKey(raw.new_key), itemType: item.item_type,
      title: line(item.title, "the title", MAX_FIELD_CHARS), fields: entries, creators: creators.map(parseCreator),
      collection: optionalKey(raw.collection, "collection"),
    });
  }

  function parseTrash(/** @type {any} */ raw) {
    const items = keyList(raw.items === undefined ? [] : raw.items, "items", true);
    const collections = keyList(raw.collections === undefined ? [] : raw.collections, "collections", true);
    if (!items.length && !collections.length) refuse("trash names nothing");
    if (items.length + collections.length > MAX_ITEMS) refuse(`trash names more than ${MAX_ITEMS} objects`);
    return /** @type {Operation} */ ({ type: "trash", library: raw.library, items, collections });
  }

  /** The request's id, or null when it has none the answer could be posted to. */
  function requestID(/** @type {unknown} */ raw) {
    const id = isObject(raw) ? /** @type {any} */ (raw).id : undefined;
    return typeof id === "string" && REQUEST_ID_RE.test(id) ? id : null;
  }

  /** `{call, op}` of a request, checked; Refused when it is not one this plugin performs. */
  function parseRequest(/** @type {any} */ raw, /** @type {any} */ scope) {
    if (raw.call !== "plan" && raw.call !== "apply") refuse(`unknown call ${quoted(raw.call)}`);
    const operation = raw.operation;
    if (!isObject(operation)) refuse("the request has no operation");
    const parse = typeof operation.type === "string" ? PARSERS.get(operation.type) : undefined;
    if (!parse) refuse(`unknown operation ${quoted(operation.type)}`);
    const op = parse({ ...operation, library: libraryName(operation.library) }, raw.note_html, scope);
    return { call: /** @type {"plan" | "apply"} */ (raw.call), op };
  }

  // ---- Zotero -------------------------------------------------------------------------------

  /** Zotero's libraryID for "user" or "groups/N", if it can be written, once Zotero has loaded its
   *  objects (a group library's may load only when first used; an item's tags read before then throw). */
  async function writableLibraryID(/** @type {string} */ library) {
    let libraryID;
    if (library === "user") {
      libraryID = Zotero.Libraries.userLibraryID;
    } else {
      const groupID = Number(library.slice("groups/".length));
      libraryID = Zotero.Groups.getLibraryIDFromGroupID(groupID);
      if (!libraryID) refuse(`group ${groupID} is not in this Zotero`);
    }
    const found = Zotero.Libraries.get(libraryID);
    if (!found || !found.editable) refuse(`the library ${library} is read-only in Zotero`);
    await found.waitForDataLoad("collection");
    await found.waitForDataLoad("item");
    return libraryID;
  }

  async function itemByKey(/** @type {number} */ libraryID, /** @type {string} */ k) {
    const item = await Zotero.Items.getByLibraryAndKeyAsync(libraryID, k);
    if (!item) refuse(`item ${k} is not in this Zotero library`);
    return item;
  }

  async function collectionByKey(/** @type {number} */ libraryID, /** @type {string} */ k) {
    const collection = await Zotero.Collections.getByLibraryAndKeyAsync(libraryID, k);
    if (!collection) refuse(`collection ${k} is not in this Zotero library`);
    return collection;
  }

  async function itemsByKey(/** @type {number} */ libraryID, /** @type {string[]} */ keys) {
    const items = [];
    for (const k of keys) items.push(await itemByKey(libraryID, k));
    return items;
  }

  async function exists(/** @type {"Items" | "Collections"} */ kind, /** @type {number} */ libraryID, /** @type {string} */ k) {
    return !!(await Zotero[kind].getByLibraryAndKeyAsync(libraryID, k));
  }

  /**
   * What an operation changes, read from Zotero now (nothing is written), and `perform`, which writes
   * exactly that. Every key is looked up first: one Zotero does not have refuses the whole operation
   * before anything is written. Performing what is already there does nothing (a retried apply), and
   * its change says so, except that a creation always names its key: the object the write made, by
   * this attempt or an earlier one.
   * @typedef {{tags_added?: Record<string, string[]>, tags_removed?: Record<string, string[]>, collection_added?: string[], created_items?: string[], created_collections?: string[]}} Change
   * @typedef {{change: Change, perform: () => Promise<void>}} Prepared
   * @param {Operation} op
   * @returns {Promise<Prepared>}
   */
  async function prepare(op) {
    const libraryID = await writableLibraryID(op.library);
    switch (op.type) {
      case "tag_items":
      case "untag_items":
      case "retag":
        return prepareTags(op, libraryID);
      case "add_to_collection":
      case "remove_from_collection":
        return prepareMembership(op, libraryID);
      case "create_collection":
        return prepareCollection(op, libraryID);
      case "save_note":
        return prepareNote(op, libraryID);
      case "add_item":
        return prepareItem(op, libraryID);
      case "trash":
        return prepareTrash(op, libraryID);
    }
  }

  /** Per item, the tags of `wanted` it has (`present`) or lacks: what removing (or adding) them changes. */
  async function tagDelta(/** @type {number} */ libraryID, /** @type {TagsPerItem} */ wanted, /** @type {boolean} */ present) {
    /** @type {Map<string, {item: any, tags: string[]}>} */
    const delta = new Map();
    for (const [k, tags] of wanted) {
      const item = await itemByKey(libraryID, k);
      const touched = tags.filter((t) => item.hasTag(t) === present);
      if (touched.length) delta.set(k, { item, tags: touched });
    }
    return delta;
  }

  /** @param {Extract<Operation, {add: TagsPerItem}>} op @param {number} libraryID @returns {Promise<Prepared>} */
  async function prepareTags(op, libraryID) {
    const added = await tagDelta(libraryID, op.add, false);
    const removed = await tagDelta(libraryID, op.remove, true);
    const asRecord = (/** @type {Map<string, {tags: string[]}>} */ delta) => Object.fromEntries([...delta].map(([k, d]) => [k, d.tags]));
    // Undos (retag) answer nothing: there is no undo of an undo.
    const change = op.type === "tag_items" ? { tags_added: asRecord(added) } : op.type === "untag_items" ? { tags_removed: asRecord(removed) } : {};
    const perform = async () => {
      const items = new Map();
      for (const [k, { item, tags }] of added) {
        for (const t of tags) item.addTag(t);
        items.set(k, item);
      }
      for (const [k, { item, tags }] of removed) {
        for (const t of tags) item.removeTag(t);
        items.set(k, item);
      }
      for (const item of items.values()) await item.saveTx();
    };
    return { change, perform };
  }

  /** @param {Extract<Operation, {type: "add_to_collection" | "remove_from_collection"}>} op @param {number} libraryID @returns {Promise<Prepared>} */
  async function prepareMembership(op, libraryID) {
    const collection = await collectionByKey(libraryID, op.collection);
    const items = await itemsByKey(libraryID, op.items);
    const adding = op.type === "add_to_collection";
    if (adding) {
      const child = items.find((item) => !item.isTopLevelItem());
      if (child) refuse(`item ${child.key} is an attachment or note of a paper: Zotero files it with its paper, not in collections`);
    }
    const touched = items.filter((item) => item.inCollection(collection.id) !== adding);
    const perform = async () => {
      for (const item of touched) {
        if (adding) item.addToCollection(collection.id);
        else item.removeFromCollection(collection.id);
        await item.saveTx();
      }
    };
    return { change: adding ? { collection_added: touched.map((item) => item.key) } : {}, perform };
  }

  /** `object`, new and empty, as the new object with key `k` in the library. Zotero takes a key only
   *  before any other data, and treats the object as new, all its data loaded, once loadPrimaryData
   *  has found no row for that key (as Zotero's sync does with a key the server chose).
   *  @template {Zotero.Item | Zotero.Collection} T @param {T} object @param {number} libraryID @param {string} k @returns {Promise<T>} */
  async function keyedObject(object, libraryID, k) {
    const settable = /** @type {any} */ (object); // zotero-types has both read-only
    settable.libraryID = libraryID;
    settable.key = k;
    await object.loadPrimaryData(false);
    return object;
  }

  /** @param {Extract<Operation, {type: "create_collection"}>} op @param {number} libraryID @returns {Promise<Prepared>} */
  async function prepareCollection(op, libraryID) {
    const parent = op.parent ? await collectionByKey(libraryID, op.parent) : null;
    const already = await exists("Collections", libraryID, op.newKey);
    const perform = async () => {
      if (already) return;
      const collection = await keyedObject(new Zotero.Collection(), libraryID, op.newKey);
      collection.name = op.name;
      if (parent) collection.parentKey = parent.key;
      await collection.saveTx();
    };
    return { change: { created_collections: [op.newKey] }, perform };
  }

  /** @param {Extract<Operation, {type: "save_note"}>} op @param {number} libraryID @returns {Promise<Prepared>} */
  async function prepareNote(op, libraryID) {
    const parent = op.parent ? await itemByKey(libraryID, op.parent) : null;
    if (parent && !parent.isRegularItem()) refuse(`item ${parent.key} is not a paper a note can be attached to`);
    const collection = op.collection ? await collectionByKey(libraryID, op.collection) : null;
    const already = await exists("Items", libraryID, op.newKey);
    const perform = async () => {
      if (already) return;
      // Under the write's key: a retry finds it, and makes no second note.
      const note = await keyedObject(new Zotero.Item(), libraryID, op.newKey);
      note.setType(/** @type {number} */ (Zotero.ItemTypes.getID("note")));
      if (parent) note.parentID = parent.id;
      note.setNote(op.html);
      if (collection) note.addToCollection(collection.id);
      await note.saveTx();
    };
    return { change: { created_items: [op.newKey] }, perform };
  }

  /** Whether Zotero keeps field `name` for items of `itemTypeID` (a base field such as `title` counts
   *  where the type has its own, as `caseName`: Zotero's setField maps it). */
  function fieldValidForType(/** @type {string} */ name, /** @type {number} */ itemTypeID) {
    const fieldID = Zotero.ItemFields.getID(name);
    if (!fieldID) return false;
    const own = Zotero.ItemFields.getFieldIDFromTypeAndBase(itemTypeID, fieldID) || fieldID;
    return Zotero.ItemFields.isValidForType(own, itemTypeID);
  }

  /** Zotero's creator as setCreators takes it; a type the item type lacks becomes its primary one. */
  function zoteroCreator(/** @type {CreatorInput} */ c, /** @type {number} */ itemTypeID) {
    const typeID = Zotero.CreatorTypes.getID(c.creatorType);
    const valid = typeID && Zotero.CreatorTypes.isValidForItemType(typeID, itemTypeID);
    return { firstName: c.firstName, lastName: c.lastName, fieldMode: c.fieldMode,
      creatorTypeID: valid ? typeID : Zotero.CreatorTypes.getPrimaryIDForType(itemTypeID) };
  }

  /** @param {Extract<Operation, {type: "add_item"}>} op @param {number} libraryID @returns {Promise<Prepared>} */
  async function prepareItem(op, libraryID) {
    const itemTypeID = Zotero.ItemTypes.getID(op.itemType);
    if (!itemTypeID || NOT_REGULAR_TYPES.has(op.itemType)) refuse(`Zotero has no item type ${quoted(op.itemType)} for a new reference`);
    const fields = [["title", op.title], ...op.fields.filter(([name]) => name !== "title")]
      .filter(([name, value]) => value.trim() && fieldValidForType(name, itemTypeID));
    const creators = /** @type {any[]} */ (op.creators.map((c) => zoteroCreator(c, itemTypeID)));
    const collection = op.collection ? await collectionByKey(libraryID, op.collection) : null;
    const already = await exists("Items", libraryID, op.newKey);
    const perform = async () => {
      if (already) return;
      const item = await keyedObject(new Zotero.Item(), libraryID, op.newKey);
      item.setType(itemTypeID);
      for (const [name, value] of fields) item.setField(name, value);
      if (creators.length) item.setCreators(creators);
      if (collection) item.addToCollection(collection.id);
      await item.saveTx();
    };
    return { change: { created_items: [op.newKey] }, perform };
  }

  /** @param {Extract<Operation, {type: "trash"}>} op @param {number} libraryID @returns {Promise<Prepared>} */
  async function prepareTrash(op, libraryID) {
    /** @type {any[]} */
    const objects = [...(await itemsByKey(libraryID, op.items))];
    for (const k of op.collections) objects.push(await collectionByKey(libraryID, k));
    const perform = async () => {
      for (const object of objects) {
        if (object.deleted) continue;
        object.deleted = true; // Zotero's trash: the user can restore it there
        await object.saveTx();
      }
    };
    return { change: {}, perform };
  }

  /** Only the change's non-empty parts (every field of a change is optional). */
  function compact(/** @type {Change} */ change) {
    return Object.fromEntries(Object.entries(change).filter(([, v]) => (Array.isArray(v) ? v.length : Object.keys(v).length)));
  }

  /**
   * Perform one request (plan: only read) and the body of its answer; null for a request without a
   * usable id (nothing is done for it: its answer could not be given).
   * @param {unknown} raw @param {any} scope where DOMParser is (sanitising a note)
   */
  async function answer(raw, scope) {
    const id = requestID(raw);
    if (id === null) {
      log(`a request without a usable id was ignored (${quoted(isObject(raw) ? /** @type {any} */ (raw).id : raw)})`);
      return null;
    }
    let what = "a request";
    try {
      const { call, op } = parseRequest(raw, scope);
      what = `${call} ${op.type}`;
      const prepared = await prepare(op);
      if (call === "apply") await prepared.perform();
      log(`${what} ${quoted(id)}: done`);
      return { id, body: { result: { change: compact(prepared.change) } } };
    } catch (err) {
      const refused = err instanceof Refused;
      if (!refused) Zotero.logError(err instanceof Error ? err : new Error(String(err)));
      log(`${what} ${quoted(id)}: ${refused ? "refused" : "failed"}: ${quoted(errorMessage(err))}`);
      return { id, body: { error: refused
        ? { kind: "refused", message: errorMessage(err) }
        : { kind: "not_now", message: `Zotero could not do it: ${errorMessage(err)}` } } };
    }
  }

  // ---- the channel ----------------------------------------------------------------------------

  /** fetch, AbortController, crypto and DOMParser for the channel, and the plugin's timers (what
   *  bridge.js takes from a window). A plugin's scope (Zotero.Plugins' sandbox) has no AbortController,
   *  and the channel runs with no window open. The timers are called through closures: a window's
   *  setTimeout refuses to run as a method of another object. */
  function networkScope() {
    const sandbox = /** @type {any} */ (Components.utils).Sandbox(Services.scriptSecurityManager.getSystemPrincipal(), {
      sandboxName: "zocrates-writes",
      wantGlobalProperties: ["AbortController", "crypto", "DOMParser", "fetch"],
    });
    sandbox.setTimeout = (/** @type {() => void} */ fn, /** @type {number} */ ms) => setTimeout(fn, ms);
    sandbox.clearTimeout = (/** @type {number} */ id) => clearTimeout(id);
    return sandbox;
  }

  /** daemon.json's signature (pid, port, token), or null when there is none to use. */
  async function currentSignature() {
    try {
      return (await ZocratesBridge.readDaemonInfo()).signature;
    } catch {
      return null;
    }
  }

  class WriteChannel {
    /** @param {{version: string, scope: any}} options */
    constructor({ version, scope }) {
      this.version = version;
      this.scope = scope;
      this.stopped = false;
      this.backoffMs = BACKOFF_FIRST_MS;
      /** @type {Promise<void> | null} */
      this.loop = null;
      /** @type {AbortController | null} */
      this.controller = null;
      /** @type {any} */
      this.timer = 0;
      /** @type {(() => void) | null} */
      this.wake = null;
      this.lastSaid = "";
      this.lastSignature = "";
    }

    start() {
      if (!this.loop) this.loop = this.run();
    }

    /** End the open request and every timer; resolves once the loop has ended. */
    async stop() {
      this.stopped = true;
      this.controller?.abort();
      clearTimeout(this.timer);
      this.wake?.();
      await this.loop;
    }

    async run() {
      while (!this.stopped) {
        try {
          await this.step();
        } catch (err) {
          if (this.stopped) break;
          Zotero.logError(err instanceof Error ? err : new Error(String(err)));
          await this.pause(this.nextBackoff());
        }
      }
      this.say("stopped");
    }

    /** One round: the proven daemon, one poll, and the answer to what it brought. */
    async step() {
      const daemon = await this.provenDaemon();
      if (!daemon) return;
      const request = await this.poll(daemon);
      if (!request || this.stopped) return; // once stopped, nothing more is written
      const answered = await answer(request, this.scope);
      // A request that cannot be answered is not asked again at once by a daemon that works: wait.
      if (!answered) await this.pause(this.nextBackoff(), daemon.signature);
      else if (!this.stopped) await this.post(daemon, answered.id, answered.body);
    }

    /** Log a state once, not at every retry. */
    say(/** @type {string} */ message) {
      if (message !== this.lastSaid) log(message);
      this.lastSaid = message;
    }

    nextBackoff() {
      const ms = this.backoffMs;
      this.backoffMs = Math.min(BACKOFF_MAX_MS, this.backoffMs * 2);
      return ms;
    }

    /** Wait `ms` (less once stopped, or once daemon.json no longer has `signature`, when given). */
    async pause(/** @type {number} */ ms, /** @type {string | null} */ signature = null) {
      const end = Date.now() + ms;
      while (!this.stopped && Date.now() < end) {
        await new Promise((resolve) => {
          this.wake = () => resolve(undefined);
          this.timer = setTimeout(this.wake, Math.min(end - Date.now(), DAEMON_JSON_RECHECK_MS));
        });
        this.wake = null;
        if (signature !== null && !this.stopped && (await currentSignature()) !== signature) return;
      }
    }

    /** The daemon of daemon.json once it has proved itself (the proof carries no token); null after a pause. */
    async provenDaemon() {
      let daemon;
      try {
        daemon = await ZocratesBridge.readDaemonInfo();
      } catch (err) {
        if (!(err instanceof ZocratesBridge.NoDaemon)) throw err;
        this.say(`waiting for zocratesd: ${err.message}`);
        await this.pause(DAEMON_JSON_RECHECK_MS);
        return null;
      }
      if (daemon.signature !== this.lastSignature) {
        // Another daemon (restarted: new pid, port or token): no reason to wait as for the last one.
        this.lastSignature = daemon.signature;
        this.backoffMs = BACKOFF_FIRST_MS;
      }
      try {
        await ZocratesBridge.proveDaemon(this.scope, daemon);
      } catch (err) {
        if (!(err instanceof ZocratesBridge.NoDaemon)) throw err;
        this.say(`not connected: ${err.message}`);
        await this.pause(this.nextBackoff(), daemon.signature);
        return null;
      }
      return daemon;
    }

    headers(/** @type {any} */ daemon) {
      return { Authorization: `Bearer ${daemon.token}`, "X-Zocrates-Plugin-Token": daemon.pluginToken || "",
               "X-Zocrates-Plugin": this.version, "X-Zotero-Version": String(Zotero.version) };
    }

    /**
     * fetch `url` of the proven daemon, given up after `timeoutMs`, or at once when daemon.json
     * changes (`watch`) or the channel stops; `{response}`, or `{failure}` saying why not.
     * @param {string} url @param {RequestInit} init @param {number} timeoutMs @param {string | null} watch
     */
    async request(url, init, timeoutMs, watch) {
      const scope = this.scope;
      const controller = new scope.AbortController();
      this.controller = controller;
      let why = `no answer in ${timeoutMs / 1000} s`;
      const timer = setTimeout(() => controller.abort(), timeoutMs);
      const watcher = watch === null ? 0 : setInterval(async () => {
        if ((await currentSignature()) !== watch) {
          why = "daemon.json changed";
          controller.abort();
        }
      }, DAEMON_JSON_RECHECK_MS);
      try {
        // No cookies, no redirects: the token goes to this one URL only.
        const response = await scope.fetch(url, { ...init, cache: "no-store", credentials: "omit", redirect: "error", signal: controller.signal });
        return { response, failure: null };
      } catch (err) {
        const name = err && /** @type {any} */ (err).name;
        return { response: null, failure: name === "AbortError" ? why : `${name || "error"}: ${errorMessage(err)}` };
      } finally {
        clearTimeout(timer);
        clearInterval(watcher);
        this.controller = null;
      }
    }

    /** The next request (an object), or null after nothing came or a failure (then paused). */
    async poll(/** @type {any} */ daemon) {
      const started = Date.now();
      const { response, failure } = await this.request(`${daemon.origin}/plugin/writes?wait=${POLL_WAIT_S}`,
        { headers: this.headers(daemon) }, POLL_WAIT_S * 1000 + POLL_GRACE_MS, daemon.signature);
      if (this.stopped) return null;
      let problem = failure;
      let request = null;
      if (response) {
        const text = response.status === 200 ? await ZocratesBridge.boundedText(response, MAX_POLL_BYTES).catch(() => null) : null;
        let body = null;
        try {
          body = text === null ? null : JSON.parse(text);
        } catch {
          /* not JSON */
        }
        request = body && body.request;
        if (response.status !== 200) problem = `the daemon answered HTTP ${response.status}`;
        else if (!isObject(body) || (request !== null && !isObject(request))) problem = "the daemon's answer is not a poll's answer";
      }
      if (problem === "daemon.json changed") {
        this.say("the daemon changed, connecting again");
        return null;
      }
      if (problem === null && !request && Date.now() - started < MIN_EMPTY_POLL_MS) problem = "the daemon did not hold the poll";
      if (problem !== null) {
        this.say(`poll failed (${problem}), retrying`);
        await this.pause(this.nextBackoff(), daemon.signature);
        return null;
      }
      this.say(`connected to zocratesd at ${daemon.origin}`);
      this.backoffMs = BACKOFF_FIRST_MS;
      return request;
    }

    /** Post an answer, to the daemon that sent the request if it still proves itself. */
    async post(/** @type {any} */ daemon, /** @type {string} */ id, /** @type {object} */ body) {
      if ((await currentSignature()) !== daemon.signature) {
        log(`the daemon changed before ${quoted(id)} was answered; it asks again`);
        return;
      }
      try {
        await ZocratesBridge.proveDaemon(this.scope, daemon);
      } catch (err) {
        if (!(err instanceof ZocratesBridge.NoDaemon)) throw err;
        log(`the answer to ${quoted(id)} was not sent: ${err.message}`);
        return;
      }
      const { response, failure } = await this.request(`${daemon.origin}/plugin/writes/${encodeURIComponent(id)}`,
        { method: "POST", headers: { ...this.headers(daemon), "Content-Type": "application/json" }, body: JSON.stringify(body) },
        POST_TIMEOUT_MS, null);
      if (response && response.status === 200) return;
      // The daemon asks again for what it did not hear about; applying again changes nothing.
      log(`the answer to ${quoted(id)} was not taken (${failure || `HTTP ${response && response.status}`})`);
      if (failure) await this.pause(this.nextBackoff(), daemon.signature);
    }
  }

  /** @type {WriteChannel | null} */
  let channel = null;

  /** Start the channel (bootstrap startup); a second call does nothing. */
  function start(/** @type {{version: string}} */ { version }) {
    if (channel) return;
    channel = new WriteChannel({ version, scope: networkScope() });
    channel.start();
  }

  /** Stop it (bootstrap shutdown); resolves once it has stopped. */
  async function stop() {
    const running = channel;
    channel = null;
    if (running) await running.stop();
  }

  return { start, stop, answer, parseRequest, Refused, WriteChannel, networkScope };
})();
