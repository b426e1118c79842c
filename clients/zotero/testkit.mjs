// What the JavaScript tests under clients/ share: the Python to run zocratesd with, a real
// `zocratesd serve` process (start, wait for its daemon.json, stop with SIGTERM) and headless
// Firefox ESR. Not a test itself: `node --test` runs only files named like *.test.mjs.
import { spawn } from "node:child_process";
import { closeSync, existsSync, openSync, readFileSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

export const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
export const FIREFOX = process.env.ZOCRATES_FIREFOX || "/usr/bin/firefox-esr";
// A daemon's start (engine import, startup maintenance) on a loaded 2-core machine.
export const READY_TIMEOUT_MS = 60_000;

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
 *  `stderr` is "ignore", "inherit" or a file path (appended to; quoted in errors). */
export class Zocratesd {
  constructor({ dataDir, env, port = 0, stderr = "ignore" }) {
    this.dataDir = dataDir;
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
      this.proc = spawn(python(), ["-m", "zocratesd", "serve", "--zotero-data-dir", this.dataDir, "--http-port", String(this.port)], {
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
