// build.mjs: write the Zotero plugin as clients/zotero/build/zocrates.xpi (a zip), no dependencies.
//
//   node clients/zotero/plugin/build.mjs            # prints the path it wrote
//
// An XPI is a plain zip. Entries are deflated with node's zlib (raw deflate, as zip's method 8
// wants) and carry a CRC-32 computed here; timestamps are fixed so the same sources give the same
// bytes. Only the files Zotero loads go in (not the type-checking setup or this script): which ones
// is said once, in xpi-contents.json, which zocratesd/install/plugin.py (`zocratesd plugin`) reads too.

import { mkdir, readFile, readdir, writeFile } from "node:fs/promises";
import { dirname, join, relative, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";
import { deflateRawSync } from "node:zlib";

export const PLUGIN_DIR = dirname(fileURLToPath(import.meta.url));
export const DEFAULT_OUT = resolve(PLUGIN_DIR, "..", "build", "zocrates.xpi");

/** Files of the plugin directory that are not part of the plugin (xpi-contents.json's `exclude`). */
async function excluded() {
  const contents = JSON.parse(await readFile(join(PLUGIN_DIR, "xpi-contents.json"), "utf8"));
  return new Set(contents.exclude);
}

// CRC-32 (IEEE 802.3, reflected, polynomial 0xEDB88320): the checksum every zip entry carries.
const CRC_TABLE = (() => {
  const table = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    table[n] = c >>> 0;
  }
  return table;
})();

/** @param {Uint8Array} bytes */
export function crc32(bytes) {
  let c = 0xffffffff;
  for (let i = 0; i < bytes.length; i++) c = CRC_TABLE[(c ^ bytes[i]) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

// 1980-01-01 00:00 in MS-DOS date/time (the zip epoch): reproducible archives.
const DOS_TIME = 0;
const DOS_DATE = (0 << 9) | (1 << 5) | 1;
const UTF8_NAMES = 0x0800;

/** A zip archive of `entries` ([{name, data}]), deflated where that is smaller. */
export function zip(entries) {
  const locals = [];
  const centrals = [];
  let offset = 0;
  for (const { name, data } of entries) {
    const nameBytes = Buffer.from(name, "utf8");
    const deflated = deflateRawSync(data, { level: 9 });
    const method = deflated.length < data.length ? 8 : 0;
    const body = method === 8 ? deflated : data;
    const crc = crc32(data);

    const local = Buffer.alloc(30);
    local.writeUInt32LE(0x04034b50, 0);
    local.writeUInt16LE(20, 4); // version needed: 2.0 (deflate)
    local.writeUInt16LE(UTF8_NAMES, 6);
    local.writeUInt16LE(method, 8);
    local.writeUInt16LE(DOS_TIME, 10);
    local.writeUInt16LE(DOS_DATE, 12);
    local.writeUInt32LE(crc, 14);
    local.writeUInt32LE(body.length, 18);
    local.writeUInt32LE(data.length, 22);
    local.writeUInt16LE(nameBytes.length, 26);
    local.writeUInt16LE(0, 28); // no extra field
    locals.push(local, nameBytes, body);

    const central = Buffer.alloc(46);
    central.writeUInt32LE(0x02014b50, 0);
    central.writeUInt16LE(20, 4); // made by: 2.0, MS-DOS attributes
    central.writeUInt16LE(20, 6);
    central.writeUInt16LE(UTF8_NAMES, 8);
    central.writeUInt16LE(method, 10);
    central.writeUInt16LE(DOS_TIME, 12);
    central.writeUInt16LE(DOS_DATE, 14);
    central.writeUInt32LE(crc, 16);
    central.writeUInt32LE(body.length, 20);
    central.writeUInt32LE(data.length, 24);
    central.writeUInt16LE(nameBytes.length, 28);
    // extra, comment, disk number, internal and external attributes: all 0
    central.writeUInt32LE(offset, 42);
    centrals.push(central, nameBytes);

    offset += local.length + nameBytes.length + body.length;
  }
  const directory = Buffer.concat(centrals);
  const end = Buffer.alloc(22);
  end.writeUInt32LE(0x06054b50, 0);
  end.writeUInt16LE(entries.length, 8);
  end.writeUInt16LE(entries.length, 10);
  end.writeUInt32LE(directory.length, 12);
  end.writeUInt32LE(offset, 16);
  return Buffer.concat([...locals, directory, end]);
}

async function listFiles(dir) {
  const out = [];
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) out.push(...(await listFiles(path)));
    else if (entry.isFile()) out.push(path);
  }
  return out;
}

/** Build the XPI; resolves to `{path, entries}` (entry names in archive order). */
export async function buildXpi({ out = DEFAULT_OUT } = {}) {
  const manifest = JSON.parse(await readFile(join(PLUGIN_DIR, "manifest.json"), "utf8"));
  if (!manifest.applications?.zotero?.id) throw new Error("manifest.json has no applications.zotero.id");
  const skip = await excluded();
  const names = (await listFiles(PLUGIN_DIR))
    .map((p) => relative(PLUGIN_DIR, p).split(sep).join("/"))
    .filter((name) => !skip.has(name) && !name.split("/").some((part) => part.startsWith(".")))
    // manifest.json first (what a reader looks for), the rest in a stable order.
    .sort((a, b) => (a === "manifest.json" ? -1 : b === "manifest.json" ? 1 : a < b ? -1 : a > b ? 1 : 0));
  const entries = [];
  for (const name of names) entries.push({ name, data: await readFile(join(PLUGIN_DIR, name)) });
  await mkdir(dirname(out), { recursive: true });
  await writeFile(out, zip(entries));
  return { path: out, entries: names };
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const { path, entries } = await buildXpi();
  console.log(`${path} (${entries.length} files)`);
}
