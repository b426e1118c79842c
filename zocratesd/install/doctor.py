"""`zocratesd doctor`: every check a support thread would ask for, one line each with what to do.

The checks, in order: the Zotero data dir and its `zotero.sqlite`; the Zotero that made it (its
userdata schema, and the version that last ran the profile); the daemon answering on its socket; the
library index's state; the HTTP shim proving it is this daemon (`/health` challenge); the service
installed and active; the Zotero plugin installed in the profile, enabled and of this version; each
MCP/ACP client's entry pointing at a `zocratesd` that exists; the model configured and reachable.

Each check is `ok`, `warn` (it works, on trust: the line says what to watch; a Zotero database newer
than this zocratesd knows), `fail` (with what to do) or `skip` (nothing to check: a client that is
not installed, the index when no daemon runs). `run` returns them all; the report passes when none
failed. The same report is what the daemon's shim serves to the plugin's preferences pane
(`GET /doctor`), computed by the daemon for its own data dir.

Nothing here writes anything; the database is opened read-only and immutable (never a -wal or -shm
beside the user's file). No secret reaches the report: a model's key is named by its variable only.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import sqlite3
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Final, Literal
from urllib.parse import quote

import msgspec

from zocratesd import __version__, config, locations, zotero_profile
from zocratesd.install import client_configs, plugin
from zocratesd.library import zotero_db
from zocratesd.logtext import escape_for_log, redact_url
from zocratesd.service_manager import installer

Status = Literal["ok", "warn", "fail", "skip"]
# How the checks get a daemon's library status (`_zocrates/library/status`): given by the face that
# runs them (the CLI asks the socket, rpc/library_status.py `fetch`; the daemon's shim has its own
# status at hand), so this core module imports no face. Raises OSError or ValueError. What it returns
# is the daemon's JSON, read here only through `IndexState.of`.
StatusFetch = Callable[[str, float], object]

# Each network look (the shim, the model's endpoint) answers within this on a healthy machine; a
# longer wait is itself the finding.
PROBE_TIMEOUT_S: Final = 5.0
# /health's answer is ~100 bytes, a model list a few hundred KB: read no more than this of either.
MAX_PROBE_BYTES: Final = 1024 * 1024
PROOF_LABEL: Final = "zocratesd-health-proof:"
CHALLENGE_BYTES: Final = 16
# Where ADK's Gemini client (google-genai) sends its requests: its default endpoint, or the one this
# variable names. The daemon gives it no base URL of its own, so the variable moves both alike.
GEMINI_URL: Final = "https://generativelanguage.googleapis.com"
GEMINI_URL_VAR: Final = "GOOGLE_GEMINI_BASE_URL"
GEMINI_API_VERSION: Final = "v1beta"
# The indexer looks at Zotero every `library.poll_interval_s` (2 s by default), a look through a
# private copy at most every 20 times that copy's cost: ten minutes without a look is a stuck indexer.
STALE_LOOK_S: Final = 600.0


class Check(msgspec.Struct, frozen=True):
    name: str
    status: Status
    summary: str
    fix: str = ""

    def line(self) -> str:
        mark = {"ok": "ok  ", "warn": "WARN", "fail": "FAIL", "skip": "--  "}[self.status]
        text = f"{mark} {self.name}: {self.summary}"
        return f"{text}; {self.fix}" if self.fix else text


class Report(msgspec.Struct, frozen=True):
    """The report as `--json` prints it and `GET /doctor` serves it (`msgspec.to_builtins`)."""

    version: str
    data_dir: str
    passed: bool  # no check failed
    checks: list[Check]

    @classmethod
    def of(cls, data_dir: Path, checks: list[Check]) -> Report:
        return cls(__version__, str(data_dir), all(c.status != "fail" for c in checks), checks)


class IndexState(msgspec.Struct, frozen=True):
    """What the checks read of a daemon's library status (protocol/README.md, `_zocrates/library/status`)."""

    state: str
    summary: str
    message: str
    last_look: str

    @classmethod
    def of(cls, raw: object) -> IndexState:
        if not isinstance(raw, dict):
            raise ValueError("the daemon's library status is not an object")
        text = {k: raw.get(k) for k in ("state", "summary", "message", "last_look")}
        return cls(**{k: v if isinstance(v, str) else "" for k, v in text.items()})


@dataclass(frozen=True)
class Context:
    home: Path
    data_dir: Path
    data_dir_source: str
    profile: zotero_profile.ZoteroProfile | None
    environ: Mapping[str, str]


def _open_readonly(db: Path) -> sqlite3.Connection:
    # immutable=1: no lock taken, no -wal/-shm made beside the user's file, whatever Zotero does.
    return sqlite3.connect(f"file:{quote(str(db))}?mode=ro&immutable=1", uri=True)


def check_data_dir(ctx: Context) -> Check:
    db = ctx.data_dir / "zotero.sqlite"
    where = f"{ctx.data_dir} (from {ctx.data_dir_source})"
    if not ctx.data_dir.is_dir():
        return Check("data dir", "fail", f"{where} does not exist",
                     "Zotero → Settings → Advanced → Files and Folders shows the data directory; pass it as --zotero-data-dir")
    if not db.is_file():
        return Check("data dir", "fail", f"{where} has no zotero.sqlite",
                     "is it Zotero's data directory? Zotero → Settings → Advanced → Files and Folders shows it; "
                     "pass it as --zotero-data-dir")
    try:
        with db.open("rb") as f:
            f.read(16)
    except OSError as exc:
        return Check("data dir", "fail", f"{db} cannot be read ({exc.strerror})", "check its owner and permissions")
    return Check("data dir", "ok", f"{where}, zotero.sqlite readable")


def check_schema(ctx: Context) -> Check:
    db = ctx.data_dir / "zotero.sqlite"
    last = zotero_profile.last_zotero_version(ctx.profile) if ctx.profile else None
    ran = f"; Zotero {last} last ran the profile" if last else ""
    if not db.is_file():
        return Check("Zotero version", "skip", "no zotero.sqlite to read")
    try:
        conn = _open_readonly(db)
        try:
            version = zotero_db.schema_version(conn)
            warnings = zotero_db.check_schema(conn, version)
        finally:
            conn.close()
    except zotero_db.ZoteroDbError as exc:
        return Check("Zotero version", "fail", str(exc), "update Zotero (7 or later) or zocrates (`pipx upgrade zocrates`)")
    except sqlite3.Error as exc:
        return Check("Zotero version", "fail", f"zotero.sqlite cannot be read as a database ({exc})",
                     "is it a Zotero database? Zotero checks it at Help → Troubleshooting → Check Database Integrity")
    made_by = zotero_db.KNOWN_SCHEMAS.get(version)
    if made_by is None:
        # Read as the newest Zotero we know: it works unless that Zotero changed what we read.
        return Check("Zotero version", "warn", "; ".join(warnings) + ran,
                     "read on trust: if items or fields are missing from answers, `pipx upgrade zocrates` may know this Zotero")
    return Check("Zotero version", "ok", f"{made_by} (userdata schema {version}){ran}")


def _daemon(ctx: Context, fetch: StatusFetch) -> tuple[locations.DaemonInfo | None, IndexState | str | None]:
    live = locations.live_daemon(ctx.data_dir)
    if live is None:
        return None, None
    try:
        return live, IndexState.of(fetch(live.socket, PROBE_TIMEOUT_S))
    except (OSError, ValueError) as exc:
        return live, f"it did not answer on {live.socket} ({exc})"


def check_daemon(ctx: Context, live: locations.DaemonInfo | None, status: IndexState | str | None) -> Check:
    if live is None:
        try:
            waiting = locations.activation_socket(ctx.data_dir)
        except locations.RuntimeFileError:
            waiting = None
        if waiting is not None:
            return Check("daemon", "ok", f"not running; the service starts it on the first connection to {waiting}")
        return Check("daemon", "fail", f"no zocratesd runs for {ctx.data_dir}",
                     "run `zocratesd service install` (it then starts on demand), or `zocratesd serve`")
    if isinstance(status, str):
        return Check("daemon", "fail", f"zocratesd (pid {live.pid}) runs but {status}",
                     f"see {locations.state_dir(ctx.data_dir) / locations.LOG_NAME}; `zocratesd stop` and start it again")
    if live.version != __version__:
        return Check("daemon", "fail", f"zocratesd {live.version} runs (pid {live.pid}), but this one is {__version__}",
                     "`zocratesd stop`: the next connection (or `zocratesd serve`) starts this version")
    return Check("daemon", "ok", f"zocratesd {live.version} answers on {live.socket} (pid {live.pid})")


def _age_s(stamp: str, now: float | None) -> float | None:
    """Seconds since an ISO 8601 UTC time of the status (None when it has none)."""
    try:
        when = datetime.fromisoformat(stamp)
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (time.time() if now is None else now) - when.timestamp())


def check_index(status: IndexState | str | None, now: float | None = None) -> Check:
    if not isinstance(status, IndexState):
        return Check("library index", "skip", "no daemon to ask")
    # The daemon's own words for its state (the line it logs), else the state and its message.
    words = status.summary.strip() or status.state + (f": {status.message}" if status.message else "")
    line = escape_for_log(" ".join(words.split()))
    state = status.state
    look = _age_s(status.last_look, now)
    if state == "ready" and look is not None and look > STALE_LOOK_S:
        return Check("library index", "fail", f"{line}; it last looked at Zotero for changes {look / 60:.0f} min ago",
                     "see the daemon's log (zocrates-data/zocratesd.log); `zocrates library refresh` looks now")
    if state in ("ready", "indexing", "starting"):
        return Check("library index", "ok", line + (f"; last looked for changes {look:.0f} s ago" if look is not None else ""))
    return Check("library index", "fail", line, "see `zocrates library status`; `zocrates library refresh` reads Zotero again")


def _get(url: str, headers: Mapping[str, str] | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers=dict(headers or {}))
    try:
        with urllib.request.urlopen(request, timeout=PROBE_TIMEOUT_S) as response:
            return int(response.status), response.read(MAX_PROBE_BYTES)
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read(MAX_PROBE_BYTES)


def check_shim(live: locations.DaemonInfo | None) -> Check:
    if live is None:
        return Check("HTTP shim", "skip", "no daemon to ask")
    http = live.raw.get("http")
    token = live.raw.get("token")
    if not isinstance(http, dict) or not isinstance(http.get("port"), int):
        return Check("HTTP shim", "fail", "the daemon serves no HTTP, which the Zotero pane needs",
                     "start it without --no-http (and without http.enabled false in zocrates_config.json)")
    origin = f"http://127.0.0.1:{http['port']}"
    nonce = secrets.token_hex(CHALLENGE_BYTES)
    try:
        code, body = _get(f"{origin}/health?challenge={nonce}")
        proof = json.loads(body).get("proof")
    except (OSError, ValueError, AttributeError) as exc:
        return Check("HTTP shim", "fail", f"{origin} does not answer ({escape_for_log(exc)})",
                     "`zocratesd stop` and start it again; see its log")
    expected = hmac.new(str(token).encode(), (PROOF_LABEL + nonce).encode(), hashlib.sha256).hexdigest()
    if code != 200 or not isinstance(proof, str) or not hmac.compare_digest(proof, expected):
        return Check("HTTP shim", "fail", f"what answers on {origin} is not this daemon (its /health proof is wrong)",
                     "stop whatever listens there; `zocratesd stop` and start zocratesd again (it takes another port)")
    return Check("HTTP shim", "ok", f"{origin} answers and proves it holds daemon.json's token")


def check_service(ctx: Context) -> Check:
    settings = installer.Settings(data_dir=ctx.data_dir, home=ctx.home)
    manager = installer.manager_for(settings, environ=ctx.environ)
    try:
        files = manager.files()
    except installer.ServiceError as exc:
        return Check("service", "fail", escape_for_log(exc),
                     "once that is fixed, `zocratesd service install` installs it; until then `zocratesd serve` runs zocratesd by hand")
    states = {p: installer.file_state(p, content) for p, content in files.items()}
    missing = [p for p, s in states.items() if s == "new"]
    foreign = [p for p, s in states.items() if s == "foreign"]
    changed = [p for p, s in states.items() if s == "changed"]
    if foreign:
        return Check("service", "fail", f"{foreign[0]} is not zocratesd's", "move it away, then `zocratesd service install`")
    if missing:
        return Check("service", "fail", f"not installed ({missing[0]} is missing)",
                     "`zocratesd service install` starts zocratesd whenever Zotero or a client asks for it")
    if changed:
        return Check("service", "fail", f"{changed[0]} is installed for another data dir, socket or Python than this zocratesd's",
                     "`zocratesd service install` updates it")
    if manager.platform == "systemd":
        done = manager.query("--user", "is-active", installer.SOCKET_UNIT)
    else:
        done = manager.query("print", f"gui/{os.getuid()}/{installer.LAUNCHD_LABEL}")
    if done is None:
        return Check("service", "fail", f"installed, but {manager.tool} does not answer", "is the service manager running?")
    active = done.returncode == 0 and (manager.platform != "systemd" or done.stdout.strip() == "active")
    if not active:
        state = escape_for_log(done.stdout.strip() or done.stderr.strip() or f"exit {done.returncode}")
        return Check("service", "fail", f"installed but not active ({state})", "`zocratesd service install` starts it again")
    return Check("service", "ok", f"installed as {manager.label} and active")


def check_plugin(ctx: Context) -> Check:
    try:
        info = plugin.plugin_info()
    except plugin.PluginError as exc:
        return Check("Zotero plugin", "fail", exc.problem, exc.fix)
    get_it = "`zocratesd plugin` writes it; " + plugin.INSTALL_CLICKS.format(path="that file")
    if ctx.profile is None:
        root = zotero_profile.profiles_root(ctx.home)
        return Check("Zotero plugin", "fail", f"no Zotero profile in {root}", "start Zotero once (7 or later), then check again")
    addon = zotero_profile.installed_addon(ctx.profile, info.id)
    if addon is None:
        return Check("Zotero plugin", "fail", f"not installed in the Zotero profile {ctx.profile.path}", get_it)
    if addon.version != __version__:
        return Check("Zotero plugin", "fail", f"version {addon.version} is installed, this zocratesd is {__version__}", get_it)
    if not addon.active:
        return Check("Zotero plugin", "fail", f"{addon.version} is installed but disabled",
                     "enable it in Zotero: Tools → Plugins")
    return Check("Zotero plugin", "ok", f"{addon.version} installed and enabled in {ctx.profile.path}")


def check_clients(ctx: Context) -> list[Check]:
    out = []
    for client in client_configs.known_clients(ctx.home, ctx.environ):
        name = f"client {client.name}"
        if not client.present():
            out.append(Check(name, "skip", "not installed"))
            continue
        entry = client_configs.read_entry(client)
        if entry is None:
            out.append(Check(name, "skip", f"no zocrates entry in {client.path}", "`zocratesd setup` offers to add it"))
        elif entry.problem:
            out.append(Check(name, "fail", entry.problem, "fix the file (the client cannot read it either)"))
        elif not entry.command or not os.path.isabs(entry.command):
            out.append(Check(name, "fail", f"its entry runs {entry.command!r}, not an absolute path (clients start servers "
                             "with a short PATH)", "`zocratesd setup` rewrites it"))
        elif not (os.path.isfile(entry.command) and os.access(entry.command, os.X_OK)):
            out.append(Check(name, "fail", f"its entry runs {entry.command}, which does not exist", "`zocratesd setup` rewrites it"))
        else:
            out.append(Check(name, "ok", f"{client.path} runs {entry.command} {' '.join(entry.args)}"))
    return out


def _key_source(model: config.ModelConfig) -> str:
    """The variable the model's key comes from, for a message (never the key)."""
    if model.api_key_env:
        return f"${model.api_key_env}"
    if model.provider == "gemini":
        return next((f"${v}" for v in config.GEMINI_KEY_VARS if os.environ.get(v)), "no key")
    return "no key"


def check_model(ctx: Context) -> Check:
    try:
        model = config.load_config(ctx.data_dir).model
    except config.ConfigError as exc:
        return Check("model", "fail", escape_for_log(exc), f"fix {config.config_path(ctx.data_dir)}")
    if model.provider == "offline":
        return Check("model", "ok", "offline (answers are built from your library's passages; no model API)")
    if model.provider == "gemini":
        return _check_gemini(model, ctx.environ)
    base = (model.base_url or "").rstrip("/")
    key = model.api_key()
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    shown = redact_url(base)
    try:
        code, _ = _get(f"{base}/models", headers)
    except (OSError, ValueError) as exc:
        return Check("model", "fail", f"openai {model.name} at {shown} cannot be reached ({escape_for_log(exc)})",
                     "check model.base_url and the network")
    if code in (401, 403):
        return Check("model", "fail", f"{shown} refused the key ({_key_source(model)}, HTTP {code})", "check the key it names")
    return Check("model", "ok", f"openai {model.name} at {shown} answers (HTTP {code})")


def _check_gemini(model: config.ModelConfig, environ: Mapping[str, str]) -> Check:
    """The model's own entry in Gemini's API (`GET /v1beta/models/<name>`), asked with the key the daemon sends."""
    name = (model.name or config.DEFAULT_GEMINI_MODEL).removeprefix("models/")
    base = (environ.get(GEMINI_URL_VAR) or GEMINI_URL).rstrip("/")
    key = model.api_key()
    shown = redact_url(base)
    try:
        # The key in a header, as google-genai sends it: never in the URL, which errors may quote.
        code, body = _get(f"{base}/{GEMINI_API_VERSION}/models/{quote(name, safe='')}", {"x-goog-api-key": key} if key else {})
    except (OSError, ValueError) as exc:
        where = f"${GEMINI_URL_VAR} and the network" if environ.get(GEMINI_URL_VAR) else "the network"
        return Check("model", "fail", f"gemini {name} at {shown} cannot be reached ({escape_for_log(exc)})", f"check {where}")
    # Gemini answers a wrong key with 400 INVALID_ARGUMENT, reason API_KEY_INVALID; no key with 403.
    if code in (401, 403) or (code == 400 and b"API_KEY_INVALID" in body):
        return Check("model", "fail", f"{shown} refused the key ({_key_source(model)}, HTTP {code})",
                     "check the key it names (Google AI Studio lists your keys)")
    if code == 404:
        return Check("model", "fail", f"{shown} has no model {name} (HTTP 404)",
                     f"set model.name to a Gemini model id, such as {config.DEFAULT_GEMINI_MODEL}")
    return Check("model", "ok", f"gemini {name} at {shown} answers (HTTP {code})")


def context(home: Path, flag: str | None, environ: Mapping[str, str] | None = None) -> Context:
    env = dict(os.environ if environ is None else environ)
    choice = zotero_profile.find_data_dir(home, flag, env)
    return Context(home=home, data_dir=choice.path, data_dir_source=choice.source, profile=choice.profile, environ=env)


def daemon_context(data_dir: Path) -> Context:
    """The checks as the daemon serving `data_dir` runs them for the plugin's pane (its own HOME)."""
    home = Path.home()
    return Context(home=home, data_dir=data_dir, data_dir_source="the running zocratesd",
                   profile=zotero_profile.default_profile(home), environ=dict(os.environ))


def run(ctx: Context, fetch_status: StatusFetch) -> Report:
    live, status = _daemon(ctx, fetch_status)
    checks = [
        check_data_dir(ctx),
        check_schema(ctx),
        check_daemon(ctx, live, status),
        check_index(status),
        check_shim(live),
        check_service(ctx),
        check_plugin(ctx),
        *check_clients(ctx),
        check_model(ctx),
    ]
    return Report.of(ctx.data_dir, checks)


def render(report: Report) -> str:
    # Paths, a client's command, an error's text: from the user's files, escaped before a terminal.
    lines = [escape_for_log(c.line()) for c in report.checks]
    failed = sum(c.status == "fail" for c in report.checks)
    warned = sum(c.status == "warn" for c in report.checks)
    if not report.passed:
        lines.append(f"{failed} check{'s' if failed != 1 else ''} failed")
    else:
        lines.append("all checks passed" + (f", {warned} with a warning" if warned else ""))
    return "\n".join(lines)
