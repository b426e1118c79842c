// What the real-Zotero test needs around Zotero itself: finding an installed Zotero, a virtual
// screen (Xvfb), a fresh profile and data directory, starting Zotero with Marionette on, running
// chrome JavaScript in its main window, screenshots, and stopping it with everything it started.
//
// Nothing here builds Zotero. The test runs against a Zotero installation that is already on the
// machine: $ZOCRATES_ZOTERO_APP, else ~/.cache/zocrates/zotero-9.0.6 (a directory holding the
// `zotero` launcher, as Zotero's Linux tarball unpacks). README ("The plugin in a real Zotero")
// says how such an installation comes about.
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { closeSync, existsSync, openSync } from "node:fs";
import { copyFile, mkdir, readFile, rm, writeFile } from "node:fs/promises";
import { homedir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { zip } from "../plugin/build.mjs";
import { Marionette, STEP_TIMEOUT_MS } from "../testkit.mjs";

const HERE = dirname(fileURLToPath(import.meta.url));

export const ZOTERO_APP = process.env.ZOCRATES_ZOTERO_APP || join(homedir(), ".cache", "zocrates", "zotero-9.0.6");
/** A Zotero 10, for its local API (the writes a daemon makes without the plugin). */
export const ZOTERO10_APP = process.env.ZOCRATES_ZOTERO10_APP || join(homedir(), ".cache", "zocrates", "zotero-10.0.0");
/** Zotero's first start on a fresh profile (schema, translators and styles installed) on a loaded
 *  2-core machine: ~20 s measured, with room for a busy CI. */
export const ZOTERO_START_TIMEOUT_MS = 120_000;
/** A chrome script that waits for Zotero (an import, the indexer, a reader tab) may take this long. */
export const SCRIPT_TIMEOUT_MS = 120_000;
/** The screen, and Zotero's window on it: wide enough for the collection tree, the item list, the
 *  item pane and the chat pane side by side, as on a laptop. */
export const SCREEN = { width: 1600, height: 1000 };

/** The `zotero` launcher of the installation the test uses; fails loudly (never skips) without one. */
export function requireZotero(app = ZOTERO_APP) {
  const launcher = join(app, "zotero");
  if (!existsSync(launcher)) {
    const variable = app === ZOTERO10_APP ? "ZOCRATES_ZOTERO10_APP" : "ZOCRATES_ZOTERO_APP";
    throw new Error(`the real-Zotero test needs a Zotero installation at ${app} (a directory with the 'zotero' launcher: `
      + `Zotero's Linux tarball unpacked, or a build of Zotero's source); set ${variable} to use another one`);
  }
  for (const tool of ["Xvfb"]) {
    if (spawnSync("sh", ["-c", `command -v ${tool}`]).status !== 0) throw new Error(`the real-Zotero test needs ${tool} (apt-get install xvfb)`);
  }
  return launcher;
}

/** The Zotero version and Gecko version an installation declares (app/application.ini, platform.ini). */
export async function installedVersions(app = ZOTERO_APP) {
  const ini = async (path, key) => {
    try {
      return new RegExp(`^${key}=(.*)$`, "m").exec(await readFile(path, "utf8"))?.[1] ?? null;
    } catch {
      return null;
    }
  };
  return { zotero: await ini(join(app, "app", "application.ini"), "Version"), gecko: await ini(join(app, "platform.ini"), "Milestone") };
}

/** A virtual screen: `{display, proc}`; Xvfb picks a free display number and tells us (-displayfd). */
export async function startXvfb() {
  const proc = spawn("Xvfb", ["-displayfd", "3", "-screen", "0", `${SCREEN.width}x${SCREEN.height}x24`, "-nolisten", "tcp", "-noreset"], {
    stdio: ["ignore", "ignore", "pipe", "pipe"], detached: true,
  });
  let errors = "";
  proc.stderr.on("data", (chunk) => { errors += chunk; });
  const display = await new Promise((resolve, reject) => {
    let out = "";
    const timer = setTimeout(() => reject(new Error(`Xvfb did not start: ${errors.slice(-500)}`)), 20_000);
    proc.stdio[3].on("data", (chunk) => {
      out += chunk;
      if (out.includes("\n")) {
        clearTimeout(timer);
        resolve(`:${out.trim()}`);
      }
    });
    proc.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`Xvfb exited ${code}: ${errors.slice(-500)}`));
    });
  });
  return { display, proc };
}

/** Kill a process group we started (detached), and wait for its leader. */
async function killGroup(proc, signal = "SIGTERM") {
  if (!proc || proc.exitCode !== null || proc.signalCode !== null) return;
  const exited = new Promise((r) => proc.once("exit", r));
  try {
    process.kill(-proc.pid, signal);
  } catch {
    proc.kill(signal); // not a group leader (not started detached)
  }
  await exited;
}

/** The test profile's prefs: the sideloaded helper enabled without a prompt, Marionette on a free
 *  port (written to MarionetteActivePort), nothing that reaches out to the network, and none of
 *  Zotero's first-run banners (upgrade notice, sync reminder) over the screenshots. */
const USER_JS = `
user_pref("extensions.autoDisableScopes", 0);
user_pref("extensions.enabledScopes", 15);
user_pref("marionette.port", 0);
user_pref("extensions.zotero.sync.autoSync", false);
user_pref("extensions.zotero.automaticScraperUpdates", false);
user_pref("extensions.zotero.firstRunGuidance", false);
user_pref("extensions.zotero.showPostUpgradeBanner", false);
user_pref("extensions.zotero.sync.reminder.setUp.enabled", false);
user_pref("app.update.enabled", false);
`;

/** A running Zotero on a fresh profile and data directory under `root`, driven by Marionette: the
 *  installation at `app`, with `prefs` (name to value) added to the test profile's. */
export class RealZotero {
  /** @param {{root: string, display: string, app?: string, prefs?: Record<string, string | number | boolean>}} options */
  constructor({ root, display, app = ZOTERO_APP, prefs = {} }) {
    this.root = root;
    this.display = display;
    this.app = app;
    this.prefs = prefs;
    this.home = join(root, "home");
    this.profile = join(root, "profile");
    this.log = join(root, "zotero.log");
    this.proc = null;
    /** @type {Marionette | null} */
    this.marionette = null;
  }

  /** Zotero's data directory (zotero.sqlite, storage/): the default one, in the fresh home. */
  get dataDir() {
    return join(this.home, "Zotero");
  }

  async #writeProfile() {
    await mkdir(join(this.profile, "extensions"), { recursive: true });
    await mkdir(this.home, { recursive: true });
    const extra = Object.entries(this.prefs).map(([name, value]) => `user_pref(${JSON.stringify(name)}, ${JSON.stringify(value)});\n`);
    await writeFile(join(this.profile, "user.js"), USER_JS + extra.join(""));
    const helper = join(HERE, "ready-signal");
    const manifest = JSON.parse(await readFile(join(helper, "manifest.json"), "utf8"));
    const entries = [];
    for (const name of ["manifest.json", "bootstrap.js"]) entries.push({ name, data: await readFile(join(helper, name)) });
    await writeFile(join(this.profile, "extensions", `${manifest.applications.zotero.id}.xpi`), zip(entries));
  }

  /** Start Zotero and connect; resolves once its main window and UI are ready. */
  async start() {
    const launcher = requireZotero(this.app);
    await this.#writeProfile();
    const env = { ...process.env, HOME: this.home, DISPLAY: this.display, XDG_CONFIG_HOME: join(this.home, ".config"),
      XDG_CACHE_HOME: join(this.home, ".cache"), XDG_DATA_HOME: join(this.home, ".local", "share") };
    // An empty MOZ_HEADLESS still means headless to Gecko: the test wants the real window on Xvfb.
    delete env.MOZ_HEADLESS;
    delete env.WAYLAND_DISPLAY;
    const fd = openSync(this.log, "a");
    try {
      this.proc = spawn(launcher, ["-profile", this.profile, "-marionette", "-remote-allow-system-access", "-ZoteroDebugText", "-no-remote"], {
        env, detached: true, stdio: ["ignore", fd, fd],
      });
    } finally {
      closeSync(fd);
    }
    const exited = new Promise((_, reject) => this.proc.once("exit", (code) => reject(new Error(`Zotero exited ${code} while starting; see ${this.log}`))));
    // A dialog Zotero shows is the test's to answer, never Marionette's: by default Marionette
    // dismisses an open one before a command, which for Zotero's local API dialog means Always Allow.
    this.marionette = await Promise.race([Marionette.connect(this.profile, { timeoutMs: ZOTERO_START_TIMEOUT_MS,
      capabilities: { alwaysMatch: { unhandledPromptBehavior: "ignore" } } }), exited]);
    await this.marionette.command("Marionette:SetContext", { value: "chrome" });
    await this.marionette.command("WebDriver:SetTimeouts", { script: SCRIPT_TIMEOUT_MS });
    await this.run(`
      await Zotero.uiReadyPromise;
      window.resizeTo(${SCREEN.width}, ${SCREEN.height});
      window.moveTo(0, 0);
      await ZoteroPane.itemsView.waitForLoad();
      return true;`);
    await this.until(`return window.outerWidth >= ${SCREEN.width - 50}`, "Zotero's window at full size");
  }

  /** Run `body` (an async function body; `arguments` are `args`) in Zotero's main window. */
  run(body, args = []) {
    return this.marionette.script(`return (async function () {\n${body}\n}).apply(null, arguments);`, args);
  }

  /** Poll `body` (as for run) until it returns something truthy; that value. */
  until(body, what, { timeoutMs = STEP_TIMEOUT_MS, args = [] } = {}) {
    return this.marionette.until(`return (async function () {\n${body}\n}).apply(null, arguments);`, what, { timeoutMs, args });
  }

  /** The handles of Zotero's windows now; asking does not touch a dialog that is open. */
  windows() {
    return this.marionette.command("WebDriver:GetWindowHandles", {});
  }

  /** Have the next common dialog Zotero shows (Services.prompt, a window of its own) answered as a
   *  person does, by a click on its button labelled `label`; `dialogAnswered()` then gives its text.
   *  An observer inside Zotero clicks it: while such a dialog is open Zotero's event loop spins
   *  inside it, and a Marionette command arriving then may wait for the dialog to close. */
  answerNextDialog(label) {
    return this.run(`
      const label = arguments[0];
      const topic = "common-dialog-loaded";
      window.zocratesTestDialog = null;
      const observer = { observe(dialogWindow) {
        Services.obs.removeObserver(observer, topic);
        const click = () => {
          const doc = dialogWindow.document;
          const dialog = doc.getElementById("commonDialog");
          let button = null;
          try {
            button = ["accept", "cancel", "extra1", "extra2"].map((name) => dialog.getButton(name))
              .find((b) => b && !b.hidden && b.label === label);
          } catch {}
          if (!button) return dialogWindow.setTimeout(click, 50); // its buttons not built yet
          window.zocratesTestDialog = { text: doc.getElementById("infoBody")?.textContent ?? "" };
          button.click();
        };
        dialogWindow.setTimeout(click, 0);
      } };
      Services.obs.addObserver(observer, topic);
      return true;`, [label]);
  }

  /** The dialog answerNextDialog() answered: its text; null while none was. */
  dialogAnswered() {
    return this.run(`return window.zocratesTestDialog;`);
  }

  /** A PNG of the current chrome window (Marionette draws it; the chat's content process included). */
  async screenshot(path) {
    const b64 = await this.marionette.command("WebDriver:TakeScreenshot", { full: false, hash: false });
    await mkdir(dirname(path), { recursive: true });
    await writeFile(path, Buffer.from(b64, "base64"));
  }

  /** Quit Zotero (as File > Quit does), then make sure its whole process group is gone. */
  async stop() {
    if (!this.proc) return;
    try {
      await Promise.race([
        this.marionette?.command("Marionette:Quit", { flags: ["eForceQuit"] }),
        new Promise((r) => setTimeout(r, 10_000)),
      ]);
    } catch {
      /* the connection closes as Zotero quits */
    }
    this.marionette?.close();
    const late = setTimeout(() => killGroup(this.proc, "SIGKILL"), 15_000);
    await killGroup(this.proc, "SIGTERM");
    clearTimeout(late);
    this.proc = null;
  }
}

export { killGroup };

/** After a real-Zotero test file: Zotero quit, the daemon stopped, the virtual screen closed and
 *  the scratch directory removed; with ZOCRATES_KEEP_ZOTERO set, all left running to look at (and
 *  with ZOCRATES_KEEP_ROOT, the files kept). */
export async function tearDown({ zotero, daemon, xvfb, root }) {
  if (process.env.ZOCRATES_KEEP_ZOTERO) {
    console.log(`# kept: Zotero on DISPLAY=${xvfb?.display}, profile ${zotero?.profile}, data ${zotero?.dataDir}`);
    return;
  }
  await zotero?.stop();
  await daemon?.stop({ killAfterMs: 20_000 }).catch(() => {});
  await killGroup(xvfb?.proc);
  if (root && !process.env.ZOCRATES_KEEP_ROOT) await rm(root, { recursive: true, force: true });
}

export const PLUGIN_ID = "zocrates@zocratesd.org";
/** The chat page's browser in Zotero's main window, and in its Settings window. */
export const PANE_BROWSER = `document.querySelector("#zocrates-pane browser.zocrates-frame")`;
export const PREFS_BROWSER = `Services.wm.getMostRecentWindow("zotero:pref")?.document.querySelector("#zocrates-prefs-host browser.zocrates-frame")`;
/** An offline turn, on a machine running other tests: seconds; the indexer's 30 s poll included. */
export const TURN_TIMEOUT_MS = 90_000;
/** The daemon rereads Zotero's database every 30 s (LIBRARY_POLL); a first index takes a few more. */
export const INDEX_TIMEOUT_MS = 120_000;

/** Install the plugin's XPI as the Add-ons window's "Install Add-on From File..." does with the
 *  file the user picks; the add-on as Zotero lists it. */
export function installPlugin(zotero, xpi) {
  return zotero.run(`
    const { AddonManager } = ChromeUtils.importESModule("resource://gre/modules/AddonManager.sys.mjs");
    const install = await AddonManager.getInstallForFile(Zotero.File.pathToFile(arguments[0]), null, { source: "file-url" });
    const addon = await install.install();
    const listed = (await AddonManager.getAddonsByTypes(["extension"])).map((a) => ({ id: a.id, name: a.name, active: a.isActive }));
    return { id: addon.id, version: addon.version, active: addon.isActive, listed, temporary: addon.temporarilyInstalled };`, [xpi]);
}

/** Evaluate `expression` in the chat page (the pane's content process, or `browser`'s) through a
 *  frame script; its value. With `wait`, until the value is truthy. */
export function inPage(zotero, expression, { wait = false, what = expression, timeoutMs = STEP_TIMEOUT_MS, browser = PANE_BROWSER } = {}) {
  const body = `
    const browser = ${browser};
    if (!browser || !browser.messageManager) return null;
    const mm = browser.messageManager;
    const name = "zocrates-test-" + Math.random().toString(36).slice(2);
    return await new Promise((resolve) => {
      const timer = setTimeout(() => { mm.removeMessageListener(name, listener); resolve(null); }, 5000);
      const listener = (m) => { clearTimeout(timer); mm.removeMessageListener(name, listener); resolve(m.data); };
      mm.addMessageListener(name, listener);
      mm.loadFrameScript("data:application/javascript," + encodeURIComponent(
        "(async () => { try { const document = content.document; const window = content; sendAsyncMessage("
        + JSON.stringify(name) + ", await (" + arguments[0] + ")); } catch (e) { sendAsyncMessage(" + JSON.stringify(name) + ", null); } })();"), false);
    });`;
  return wait ? zotero.until(body, what, { timeoutMs, args: [expression] }) : zotero.run(body, [expression]);
}

/** Ask through the pane, as a user types; resolves to the answer's text and links, once the
 *  conversation ends with this question and its finished answer (a plan and the answer may come
 *  as separate messages). */
export async function askInPane(zotero, question) {
  // Sent once the page has its chat session (until then the page keeps the text in the box).
  await inPage(zotero, `(() => {
    const ta = document.getElementById("prompt");
    if (!ta || document.querySelector("#messages .msg.live")) return false;
    ta.value = ${JSON.stringify(question)};
    ta.dispatchEvent(new window.Event("input", { bubbles: true }));
    document.getElementById("composer").requestSubmit();
    return ta.value === "";
  })()`, { wait: true, what: `the page taking the question "${question}"` });
  const answer = await inPage(zotero, `(() => {
    const msgs = Array.from(document.querySelectorAll("#messages .msg"));
    const asked = msgs.findLastIndex((m) => m.classList.contains("user") && m.textContent.includes(${JSON.stringify(question)}));
    const replies = msgs.slice(asked + 1);
    if (asked < 0 || !replies.length || replies.some((m) => !m.classList.contains("assistant") || m.classList.contains("live"))) return null;
    const answers = replies.map((m) => m.querySelector(".answer")).filter(Boolean);
    if (!answers.length) return null;
    return { text: answers.map((a) => a.textContent).join(" "),
      stray: replies.flatMap((m) => Array.from(m.childNodes).filter((n) => n.nodeType === 3 && n.textContent.trim()).map((n) => n.textContent)),
      links: replies.flatMap((m) => Array.from(m.querySelectorAll("a[href^='zotero:']"), (a) => ({ href: a.getAttribute("href"), text: a.textContent }))) };
  })()`, { wait: true, what: `the answer to "${question}"`, timeoutMs: TURN_TIMEOUT_MS });
  // Every word of a message sits in one of its blocks: loose text beside them is a rendering slip.
  assert.deepEqual(answer.stray, [], `loose text in the answer to "${question}"`);
  return answer;
}

/** Poll the daemon's /library/status until `check(status)` holds; the status. */
export async function daemonLibrary(daemon, check) {
  const deadline = Date.now() + INDEX_TIMEOUT_MS;
  for (;;) {
    const info = JSON.parse(await readFile(daemon.daemonJsonPath, "utf8"));
    const r = await fetch(`http://127.0.0.1:${info.http.port}/library/status`, { headers: { Authorization: `Bearer ${info.token}` } });
    const last = await r.json();
    const s = last.library ?? last;
    if (check(s)) return s;
    assert.ok(Date.now() < deadline, `the daemon's library never got there: ${JSON.stringify(last)}`);
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
}

/** Run `sql` (one SELECT; `params` bound) on a copy of Zotero's database, as Zotero wrote it to
 *  disk (a copy: Zotero holds the file), its write-ahead log included (Zotero 10 keeps one); its rows. */
export async function zoteroRows(zotero, scratch, sql, params = []) {
  const copy = join(scratch, `zotero-copy-${process.hrtime.bigint()}.sqlite`);
  await copyFile(join(zotero.dataDir, "zotero.sqlite"), copy);
  if (existsSync(join(zotero.dataDir, "zotero.sqlite-wal"))) await copyFile(join(zotero.dataDir, "zotero.sqlite-wal"), `${copy}-wal`);
  const read = spawnSync("python3", ["-c", `
import json, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
print(json.dumps(db.execute(sys.argv[2], json.loads(sys.argv[3])).fetchall()))`, copy, sql, JSON.stringify(params)], { encoding: "utf8" });
  assert.equal(read.status, 0, read.stderr);
  return JSON.parse(read.stdout);
}
