// What the JavaScript tests under clients/ share: the Python to run zocratesd with, a real
// `zocratesd serve` process (start, wait for its daemon.json, stop with SIGTERM) and headless
// Firefox ESR. Not a test itself: `node --test` runs only files named like *.test.mjs.
import { spawn } from "node:child_process";
import net from "node:net";
import { closeSync, existsSync, openSync, readFileSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

export const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
export const FIREFOX = process.env.ZOCRATES_FIREFOX || "/usr/bin/firefox-esr";
// Hang guards, not measures. A daemon's start (engine import, startup maintenance) on a 2-core
// machine that also runs other work, where each process gets a fraction of a core.
export const READY_TIMEOUT_MS = 180_000;
/** One step of a browser test (a page reacting, a pane appearing, a turn) on that machine. */
export const STEP_TIMEOUT_MS = 90_000;

/** The Python that runs zocratesd: $ZOCRATES_TEST_PYTHON, else the repo's venv, else python3. */
export function python() {
  if (process.env.ZOCRATES_TEST_PYTHON) return process.env.ZOCRATES_TEST_PYTHON;
  for (const v of ["3.12", "3.11"]) {
    const p = join(REPO, `.venv-${v}`, "bin", "python");
    if (existsSync(p)) return p;
  }
  return "python3";
}

/** The environment of a test daemon: the runtime dir under `root` (so its socket is the test's),
 *  none of the caller's ZOCRATES_* settings or socket activation, then `extra`. */
export function daemonEnv(root, extra = {}) {
  const env = { ...process.env };
  for (const k of Object.keys(env)) if (k.startsWith("ZOCRATES_") || k.startsWith("LISTEN_") || k === "NOTIFY_SOCKET") delete env[k];
  return { ...env, XDG_RUNTIME_DIR: join(root, "run"), PYTHONPATH: REPO, ...extra };
}

/** The last 2000 characters of a stderr file, for an error message ("" for no file). */
function tail(stderrPath) {
  return stderrPath ? `: ${readFileSync(stderrPath, "utf8").slice(-2000)}` : "";
}

/** Poll `daemonJsonPath` until it names `proc` and its HTTP shim; its contents. `ready(info)`,
 *  when given, must also resolve (a rejection means "not yet"). Fails when `proc` exits first or
 *  after READY_TIMEOUT_MS; with `stderrPath`, the message ends with the daemon's stderr. */
export async function waitForDaemon(proc, daemonJsonPath, { ready, stderrPath } = {}) {
  const deadline = Date.now() + READY_TIMEOUT_MS;
  while (Date.now() < deadline) {
    if (proc.exitCode !== null) throw new Error(`zocratesd exited ${proc.exitCode}${tail(stderrPath)}`);
    try {
      const info = JSON.parse(await readFile(daemonJsonPath, "utf8"));
      if (info.pid === proc.pid && info.http) {
        if (ready) await ready(info);
        return info;
      }
    } catch {
      /* not yet */
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`zocratesd did not become ready${tail(stderrPath)}`);
}

/** SIGTERM `proc` (if it still runs) and wait for it to exit; its exit code. With `killAfterMs`, one
 *  still running then is SIGKILLed (its `signalCode` says so): the test fails instead of hanging. */
export async function stopProcess(proc, { killAfterMs } = {}) {
  if (!proc || proc.exitCode !== null || proc.signalCode !== null) return proc?.exitCode ?? null;
  const exited = new Promise((r) => proc.once("exit", r));
  proc.kill("SIGTERM");
  const late = killAfterMs === undefined ? null : setTimeout(() => proc.kill("SIGKILL"), killAfterMs);
  const code = await exited;
  clearTimeout(late);
  return code;
}

/** A real `zocratesd serve` on `dataDir`, HTTP on `port` (0: a free one, new at each start).
 *  `stderr` is "ignore", "inherit" or a file path (appended to; quoted in errors). With `testHooks`
 *  it runs through tests/daemon_entry.py, which injects the hooks its `env` names (a stage or the
 *  indexer held until a file exists). */
export class Zocratesd {
  constructor({ dataDir, env, port = 0, stderr = "ignore", testHooks = false }) {
    this.dataDir = dataDir;
    this.entry = testHooks ? [join(REPO, "tests", "daemon_entry.py")] : ["-m", "zocratesd"];
    this.stateDir = join(dataDir, "zocrates-data");
    this.env = env;
    this.port = port;
    this.stderr = stderr;
    this.proc = null;
  }

  get daemonJsonPath() {
    return join(this.stateDir, "daemon.json");
  }

  get #stderrPath() {
    return this.stderr === "ignore" || this.stderr === "inherit" ? undefined : this.stderr;
  }

  /** Spawn the daemon and wait until it is ready (see waitForDaemon); its daemon.json. */
  async start({ ready } = {}) {
    const stderrPath = this.#stderrPath;
    const fd = stderrPath ? openSync(stderrPath, "a") : this.stderr;
    try {
      this.proc = spawn(python(), [...this.entry, "serve", "--zotero-data-dir", this.dataDir, "--http-port", String(this.port)], {
        cwd: REPO, env: this.env, stdio: ["ignore", "ignore", fd],
      });
    } finally {
      if (stderrPath) closeSync(fd);
    }
    return waitForDaemon(this.proc, this.daemonJsonPath, { ready, stderrPath });
  }

  /** Stop it with SIGTERM (see stopProcess); its exit code. One that had to be SIGKILLed is an error. */
  async stop({ killAfterMs } = {}) {
    const code = await stopProcess(this.proc, { killAfterMs });
    if (this.proc?.signalCode === "SIGKILL") throw new Error(`zocratesd ignored SIGTERM${tail(this.#stderrPath)}`);
    return code;
  }
}

/** Fail loudly when Firefox ESR is missing (the browser tests never skip). */
export function requireFirefox() {
  if (!existsSync(FIREFOX)) {
    throw new Error(`the browser tests need Firefox ESR at ${FIREFOX} (apt-get install firefox-esr, or set ZOCRATES_FIREFOX)`);
  }
}

/** Headless Firefox ESR under puppeteer-core (WebDriver BiDi); `options` add to puppeteer.launch's.
 *  puppeteer-core is imported here, on first use, so a test file's other tests load without it. */
export async function launchFirefox(options = {}) {
  requireFirefox();
  const { default: puppeteer } = await import("puppeteer-core");
  return puppeteer.launch({ browser: "firefox", executablePath: FIREFOX, headless: true, ...options });
}

/** Chrome JavaScript (to put in a Marionette script) defining `pluginSandbox(name, Zotero)`: a sandbox
 *  as Zotero.Plugins makes a plugin's (plugins.js, _loadScope: its global properties and the globals
 *  it copies in), with IOUtils and PathUtils (which the plugin's scripts use) and `Zotero` the stand-in. */
export const PLUGIN_SANDBOX = `
function pluginSandbox(name, Zotero) {
  const sandbox = Cu.Sandbox(Services.scriptSecurityManager.getSystemPrincipal(), {
    sandboxName: name,
    wantGlobalProperties: ["atob", "btoa", "Blob", "crypto", "CSS", "ChromeUtils", "DOMParser", "fetch", "File",
      "FileReader", "TextDecoder", "TextEncoder", "URL", "URLSearchParams", "XMLHttpRequest"],
  });
  Object.assign(sandbox, { Zotero, ChromeWorker, IOUtils, Localization, PathUtils, Services, Worker, XMLSerializer,
    setTimeout, clearTimeout, setInterval, clearInterval, requestIdleCallback, cancelIdleCallback });
  return sandbox;
}
`;

/** A minimal Marionette client (Gecko's own remote protocol, in Firefox and in Zotero alike): the
 *  only way to run code in a chrome window, where Zotero runs plugins. Frames are `<length>:<json>`. */
export class Marionette {
  /** Connect to the Marionette of the Gecko app using `profileDir` (its MarionetteActivePort file),
   *  and open a session with `capabilities`; `timeoutMs` bounds both (NewSession waits for the
   *  app's startup to end). */
  static async connect(profileDir, { timeoutMs = READY_TIMEOUT_MS, capabilities = {} } = {}) {
    const portFile = join(profileDir, "MarionetteActivePort");
    const deadline = Date.now() + timeoutMs;
    while (!existsSync(portFile)) {
      if (Date.now() > deadline) throw new Error(`no Marionette port in ${profileDir} after ${timeoutMs} ms`);
      await new Promise((r) => setTimeout(r, 100));
    }
    const port = Number((await readFile(portFile, "utf8")).trim());
    const m = new Marionette(net.connect(port, "127.0.0.1"));
    await m._next(); // the server's greeting
    const timer = setTimeout(() => m.socket.destroy(new Error(`Marionette's NewSession did not answer in ${timeoutMs} ms`)), Math.max(0, deadline - Date.now()));
    try {
      await m.command("WebDriver:NewSession", { capabilities });
    } finally {
      clearTimeout(timer);
    }
    return m;
  }

  /** @param {net.Socket} socket */
  constructor(socket) {
    this.socket = socket;
    this.buffer = Buffer.alloc(0);
    this.waiting = [];
    this.id = 0;
    socket.on("data", (chunk) => {
      this.buffer = Buffer.concat([this.buffer, chunk]);
      for (;;) {
        const colon = this.buffer.indexOf(":");
        if (colon < 0) break;
        const length = Number(this.buffer.subarray(0, colon).toString());
        if (this.buffer.length < colon + 1 + length) break;
        const message = JSON.parse(this.buffer.subarray(colon + 1, colon + 1 + length).toString());
        this.buffer = this.buffer.subarray(colon + 1 + length);
        this.waiting.shift()?.resolve(message);
      }
    });
    // A closed connection fails every waiting command instead of leaving it hanging.
    const fail = (/** @type {Error | undefined} */ err) => {
      for (const w of this.waiting.splice(0)) w.reject(err || new Error("Marionette connection closed"));
    };
    socket.on("error", fail);
    socket.on("close", () => fail(undefined));
  }

  _next() {
    return new Promise((resolve, reject) => this.waiting.push({ resolve, reject }));
  }

  async command(name, params) {
    const reply = this._next();
    const body = JSON.stringify([0, ++this.id, name, params]);
    this.socket.write(`${Buffer.byteLength(body)}:${body}`);
    const [, , error, result] = await reply;
    if (error) throw new Error(`${name}: ${error.error}: ${error.message}${error.stacktrace ? `\n${error.stacktrace}` : ""}`);
    // Most commands answer {value}; a few (GetWindowHandles) answer the value itself.
    return result && typeof result === "object" && !Array.isArray(result) && "value" in result ? result.value : result;
  }

  /** Run `body` (a function body; may return a promise) in the current window (chrome after SetContext). */
  script(body, args = []) {
    return this.command("WebDriver:ExecuteScript", { script: body, args });
  }

  /** Poll `body` until it returns something truthy; that value. */
  async until(body, what, { timeoutMs = STEP_TIMEOUT_MS, args = [] } = {}) {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const value = await this.script(body, args);
      if (value) return value;
      if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
      await new Promise((r) => setTimeout(r, 200));
    }
  }

  close() {
    this.socket.destroy();
  }
}
