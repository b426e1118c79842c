// What the real-Zotero test needs around Zotero itself: finding an installed Zotero, a virtual
// screen (Xvfb), a fresh profile and data directory, starting Zotero with Marionette on, running
// chrome JavaScript in its main window, screenshots, and stopping it with everything it started.
//
// Nothing here builds Zotero. The test runs against a Zotero installation that is already on the
// machine: $ZOCRATES_ZOTERO_APP, else ~/.cache/zocrates/zotero-9.0.6 (a directory holding the
// `zotero` launcher, as Zotero's Linux tarball unpacks). README ("The plugin in a real Zotero")
// says how such an installation comes about.
import { spawn, spawnSync } from "node:child_process";
import { closeSync, existsSync, openSync } from "node:fs";
import { mkdir, readFile, writeFile } from "node:fs/promises";
import { homedir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { zip } from "../plugin/build.mjs";
import { Marionette, STEP_TIMEOUT_MS } from "../testkit.mjs";

const HERE = dirname(fileURLToPath(import.meta.url));

export const ZOTERO_APP = process.env.ZOCRATES_ZOTERO_APP || join(homedir(), ".cache", "zocrates", "zotero-9.0.6");
/** Zotero's first start on a fresh profile (schema, translators and styles installed) on a loaded
 *  2-core machine: ~20 s measured, with room for a busy CI. */
export const ZOTERO_START_TIMEOUT_MS = 120_000;
/** A chrome script that waits for Zotero (an import, the indexer, a reader tab) may take this long. */
export const SCRIPT_TIMEOUT_MS = 120_000;
/** The screen, and Zotero's window on it: wide enough for the collection tree, the item list, the
 *  item pane and the chat pane side by side, as on a laptop. */
export const SCREEN = { width: 1600, height: 1000 };

/** The `zotero` launcher of the installation the test uses; fails loudly (never skips) without one. */
export function requireZotero() {
  const launcher = join(ZOTERO_APP, "zotero");
  if (!existsSync(launcher)) {
    throw new Error(`the real-Zotero test needs a Zotero installation at ${ZOTERO_APP} (a directory with the 'zotero' launcher: `
      + "Zotero's Linux tarball unpacked, or a build of Zotero's source); set ZOCRATES_ZOTERO_APP to use another one");
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

/** A running Zotero on a fresh profile and data directory under `root`, driven by Marionette. */
export class RealZotero {
  /** @param {{root: string, display: string}} options */
  constructor({ root, display }) {
    this.root = root;
    this.display = display;
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
    await writeFile(join(this.profile, "user.js"), USER_JS);
    const helper = join(HERE, "ready-signal");
    const manifest = JSON.parse(await readFile(join(helper, "manifest.json"), "utf8"));
    const entries = [];
    for (const name of ["manifest.json", "bootstrap.js"]) entries.push({ name, data: await readFile(join(helper, name)) });
    await writeFile(join(this.profile, "extensions", `${manifest.applications.zotero.id}.xpi`), zip(entries));
  }

  /** Start Zotero and connect; resolves once its main window and UI are ready. */
  async start() {
    const launcher = requireZotero();
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
    this.marionette = await Promise.race([Marionette.connect(this.profile, { timeoutMs: ZOTERO_START_TIMEOUT_MS }), exited]);
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
