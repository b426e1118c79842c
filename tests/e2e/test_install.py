"""A Zotero user's first ten minutes, from the built wheel: `zocratesd plugin`, `setup`, `doctor`.

The wheel is built once per session as a user's tools build it, `python -m build` (an sdist, then the
wheel from that sdist), from a copy of this checkout's tracked files, without network: no build
isolation, the backend is the test venv's setuptools (the test extras install it and `build`). It is
installed with `--no-deps` into a bare venv; that venv finds the dependencies through a path file
naming the test venv's site-packages (their `.pth` files, the editable install's among them, are not
processed there), so the `zocratesd` it runs is the wheel's, not this clone's (checked). Every
command runs as a subprocess with a fresh HOME laid out as Zotero lays out its profile (profiles.ini,
prefs.js with a custom data dir, compatibility.ini, extensions.json) and client config files holding
the user's own entries; systemctl is a script that records its arguments.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import sysconfig
import tarfile
import threading
import time
import urllib.error
import urllib.request
import venv
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from zoterofixture import build_zotero_dir, sample_library

REPO = Path(__file__).resolve().parents[2]
PLUGIN_SRC = REPO / "clients" / "zotero" / "plugin"
PLUGIN_ID = "zocrates@zocratesd.org"
# Where each package directory's tracked files land in the wheel (zocratesd/install/zotero_plugin is a
# link to the plugin's directory, which the sdist holds as files).
PACKAGE_DIRS = {
    "zocratesd/": "zocratesd/",
    "zocrates_wire/": "zocrates_wire/",
    "clients/python/zocrates_client/": "zocrates_client/",
    "clients/zotero/plugin/": "zocratesd/install/zotero_plugin/",
}
PLUGIN_LINK = "zocratesd/install/zotero_plugin"
CLAUDE_OTHER = {"command": "/opt/other/server", "args": ["--fast"]}


@dataclass(frozen=True)
class Installed:
    venv: Path
    wheel: Path

    @property
    def zocratesd(self) -> Path:
        return self.venv / "bin" / "zocratesd"

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"


def tracked_files() -> list[str]:
    """This checkout's git-tracked files that exist in its work tree (what a clone of it holds)."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout.decode().split("\0")
    return [name for name in listed if name and os.path.lexists(REPO / name)]


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    root = tmp_path_factory.mktemp("wheel")
    # The sdist's build writes into its source tree (*.egg-info): a copy of the tracked files, links
    # kept as links, so that two test workers (or a developer's build) never share that directory.
    src = root / "src"
    for name in tracked_files():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        if (REPO / name).is_symlink():
            (src / name).symlink_to(os.readlink(REPO / name))
        else:
            shutil.copy2(REPO / name, src / name)
    built = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(root / "dist"), str(src)],
        capture_output=True, text=True, timeout=600,
    )
    assert built.returncode == 0, f"python -m build failed (the test extras install build, setuptools and wheel):\n{built.stdout}\n{built.stderr}"
    (sdist,) = (root / "dist").glob("zocrates-*.tar.gz")
    # build's default, as a user runs it: the wheel is made from the unpacked sdist, not from the tree.
    assert "Building wheel from sdist" in built.stderr, built.stderr
    with tarfile.open(sdist) as tf:
        linked = [m.name for m in tf.getmembers() if m.issym() or m.islnk()]
        plugin_in_sdist = [m.name for m in tf.getmembers() if m.isfile() and f"/{PLUGIN_LINK}/" in m.name]
    assert linked == [], f"the sdist holds links, which an unpacked sdist may not resolve: {linked}"
    assert any(name.endswith(f"/{PLUGIN_LINK}/manifest.json") for name in plugin_in_sdist), plugin_in_sdist
    (wheel,) = (root / "dist").glob("zocrates-*.whl")
    bare = root / "venv"
    venv.EnvBuilder(with_pip=False).create(bare)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(bare / "bin" / "python"), "install", "--no-deps",
         "--disable-pip-version-check", "-q", str(wheel)],
        capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr
    site = subprocess.run([str(bare / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "test-deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return Installed(bare, wheel)


def run(inst: Installed, env: dict[str, str], *args: str, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(inst.zocratesd), *args], env=env, cwd=cwd or Path(env["HOME"]), capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def xpi_contents(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as zf:
        assert zf.testzip() is None
        return {name: zf.read(name) for name in zf.namelist()}


def test_the_wheel_carries_the_plugin_and_writes_the_xpi_the_repository_builds(installed: Installed, short_tmp: Path) -> None:
    # The package's files are there: the plugin's, the unit templates, the web app.
    with zipfile.ZipFile(installed.wheel) as zf:
        names = set(zf.namelist())
    # Every tracked file of the package directories, the plugin's through the link.
    expected = {wheel_dir + name.removeprefix(src_dir) for name in tracked_files() for src_dir, wheel_dir in PACKAGE_DIRS.items()
                if name.startswith(src_dir) and name != PLUGIN_LINK}
    assert len(expected) > 100 and "zocratesd/install/zotero_plugin/manifest.json" in expected
    assert sorted(expected - names) == []
    assert {"zocratesd/service_manager/templates/zocratesd.socket", "zocratesd/webui/index.html"} <= names

    home = short_tmp / "home"
    home.mkdir()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home)}
    where = subprocess.run([str(installed.python), "-c", "import zocratesd; print(zocratesd.__file__, zocratesd.__version__)"],
                           env=env, cwd=home, capture_output=True, text=True, check=True).stdout.split()
    assert where[0].startswith(str(installed.venv)), f"zocratesd imported from {where[0]}, not the installed wheel"
    version = where[1]

    out = short_tmp / "z.xpi"
    done = run(installed, env, "plugin", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert f"wrote the Zocrates plugin {version} to {out}" in done.stdout
    assert "Tools → Plugins" in done.stdout and "Install Plugin From File" in done.stdout
    ours = xpi_contents(out)
    manifest = json.loads(ours["manifest.json"])
    assert manifest["version"] == version
    assert manifest["applications"]["zotero"]["id"] == PLUGIN_ID
    assert list(ours)[0] == "manifest.json"

    # The same entries, byte for byte, as the repository's JS build.
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the JS build cannot be compared")
    js_out = short_tmp / "js.xpi"
    script = f"const m = await import({json.dumps((PLUGIN_SRC / 'build.mjs').as_uri())}); await m.buildXpi({{out: {json.dumps(str(js_out))}}});"
    subprocess.run([node, "--input-type=module", "-e", script], check=True, timeout=120)
    theirs = xpi_contents(js_out)
    assert list(ours) == list(theirs)
    assert ours == theirs
    for skipped in ("build.mjs", "tsconfig.json", "globals.d.ts", "xpi-contents.json"):
        assert skipped not in ours

    # Without --out, into ~/Downloads when there is one.
    (home / "Downloads").mkdir()
    done = run(installed, env, "plugin")
    assert done.returncode == 0, done.stderr
    assert (home / "Downloads" / f"zocrates-{version}.xpi").is_file()


# --- a user's machine: Zotero's profile, a custom data dir, clients -------------------------------


@dataclass(frozen=True)
class Machine:
    root: Path
    home: Path
    data_dir: Path
    profile: Path
    env: dict[str, str]

    @property
    def claude(self) -> Path:
        return self.home / ".config" / "Claude" / "claude_desktop_config.json"

    @property
    def cursor(self) -> Path:
        return self.home / ".cursor" / "mcp.json"

    @property
    def gemini(self) -> Path:
        return self.home / ".gemini" / "settings.json"

    @property
    def calls(self) -> list[str]:
        log = self.root / "systemctl.calls"
        return log.read_text().splitlines() if log.exists() else []

    def set_plugin(self, version: str | None, active: bool = True) -> None:
        addons: list[dict[str, Any]] = [{"id": "zotero-other@example.org", "version": "2.0", "active": True}]
        if version is not None:
            addons.append({"id": PLUGIN_ID, "version": version, "type": "extension", "active": active,
                           "userDisabled": not active, "appDisabled": False})
        (self.profile / "extensions.json").write_text(json.dumps({"schemaVersion": 36, "addons": addons}))


@pytest.fixture
def machine(short_tmp: Path) -> Machine:
    home = short_tmp / "home"
    data_dir = short_tmp / "my papers"  # not ~/Zotero: only Zotero's prefs.js says where
    items, collections = sample_library()
    build_zotero_dir(data_dir, items, collections, version=125)
    root = home / ".zotero" / "zotero"
    profile = root / "k3j2h1g0.default"
    profile.mkdir(parents=True)
    (root / "profiles.ini").write_text(
        "[Install4F96D1932A9F858E]\nDefault=k3j2h1g0.default\nLocked=1\n\n"
        "[Profile0]\nName=default\nIsRelative=1\nPath=k3j2h1g0.default\nDefault=1\n\n"
        "[General]\nStartWithLastProfile=1\nVersion=2\n"
    )
    (profile / "prefs.js").write_text(
        "// Mozilla User Preferences\n\n"
        'user_pref("extensions.zotero.dataDir", ' + json.dumps(str(data_dir)) + ");\n"
        'user_pref("extensions.zotero.firstRun2", false);\n'
        'user_pref("extensions.zotero.lastViewedFolder", "L1");\n'
        'user_pref("extensions.zotero.useDataDir", true);\n'
    )
    (profile / "compatibility.ini").write_text("[Compatibility]\nLastVersion=9.0.6_20261101120000/20261101120000\nLastOSABI=Linux_x86_64-gcc3\n")
    run_dir = short_tmp / "user-run"  # not daemon_factory's "run": a daemon here gets this one
    run_dir.mkdir(mode=0o700)
    fake = short_tmp / "systemctl"
    fake.write_text(
        "#!/bin/sh\n"
        'echo "$*" >> "$FAKE_SYSTEMCTL_LOG"\n'
        'case "$2" in\n'
        '  is-enabled) echo "${FAKE_IS_ENABLED:-enabled}" ;;\n'
        '  is-active) echo "${FAKE_IS_ACTIVE:-active}"; [ "${FAKE_IS_ACTIVE:-active}" = active ] ;;\n'
        "esac\n"
    )
    fake.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ZOCRATES", "XDG_", "ZOTERO_"))}
    env.update(HOME=str(home), XDG_RUNTIME_DIR=str(run_dir), ZOCRATESD_SYSTEMCTL=str(fake),
               FAKE_SYSTEMCTL_LOG=str(short_tmp / "systemctl.calls"), ZOCRATES_LIBRARY__LOCAL_API_URL="http://127.0.0.1:9")
    m = Machine(short_tmp, home, data_dir.resolve(), profile, env)
    m.set_plugin(None)
    m.claude.parent.mkdir(parents=True)
    m.claude.write_text(json.dumps({"mcpServers": {"other": CLAUDE_OTHER}, "globalShortcut": "Ctrl+Space"}, indent=4))
    m.cursor.parent.mkdir(parents=True)
    m.cursor.write_text('{"mcpServers": {}}')
    m.gemini.parent.mkdir(parents=True)
    m.gemini.write_text('// my Gemini settings\n{\n  "theme": "GitHub", // light\n}\n')
    return m


def test_setup_dry_run_changes_nothing_and_yes_sets_up_every_piece(installed: Installed, machine: Machine) -> None:
    m = machine
    before = {p: p.read_bytes() for p in (m.claude, m.cursor, m.gemini)}
    xpi_dir = m.root / "xpi"
    xpi_dir.mkdir()

    dry = run(installed, m.env, "setup", "--dry-run", "--plugin-out", str(xpi_dir))
    assert dry.returncode == 0, dry.stderr
    out = dry.stdout
    assert f"Zotero data dir: {m.data_dir} (from Zotero's settings ({m.profile / 'prefs.js'}))" in out
    assert "Zotero 9 (userdata schema 125); Zotero 9.0.6 last ran the profile" in out
    assert f"# would write {m.home}/.config/systemd/user/zocratesd.socket" in out
    assert f"would write the plugin to {xpi_dir}/zocrates-" in out
    # Each client's file is shown in full as it would be written: theirs as it was (its layout too), ours added.
    claude_lines = before[m.claude].decode().splitlines()
    shown = out.split(f"Claude Desktop: would add zocrates to {m.claude}; the file would read, in full:\n")[1].splitlines()
    assert [line for line in shown[: len(claude_lines) + 1] if '"zocrates"' not in line] == claude_lines
    assert f'"command": "{installed.zocratesd}"' in out
    assert "Zed" not in out.split("== Assistants")[1]
    assert {p: p.read_bytes() for p in before} == before
    assert list(xpi_dir.iterdir()) == []
    assert not (m.home / ".config" / "systemd").exists()
    assert all(c.split()[1] in ("is-enabled", "is-active") for c in m.calls), m.calls
    assert not list(m.claude.parent.glob("*.zocrates-backup-*"))

    done = run(installed, m.env, "setup", "--yes", "--plugin-out", str(xpi_dir))
    assert done.returncode == 0, done.stdout + done.stderr
    # The service, for the data dir Zotero's prefs.js names.
    unit = (m.home / ".config" / "systemd" / "user" / "zocratesd.service").read_text()
    assert f"--zotero-data-dir \"{m.data_dir}\"" in unit
    assert "--user enable --now zocratesd.socket" in m.calls
    # The plugin.
    (xpi,) = xpi_dir.glob("zocrates-*.xpi")
    assert f"wrote the plugin to {xpi}" in done.stdout
    # The clients: ours added, theirs kept, a backup of each file first.
    entry = {"command": str(installed.zocratesd), "args": ["mcp", "--zotero-data-dir", str(m.data_dir)]}
    claude = json.loads(m.claude.read_text())
    assert claude == {"mcpServers": {"other": CLAUDE_OTHER, "zocrates": entry}, "globalShortcut": "Ctrl+Space"}
    (backup,) = m.claude.parent.glob("claude_desktop_config.json.zocrates-backup-*")
    assert backup.read_bytes() == before[m.claude]
    assert json.loads(m.cursor.read_text()) == {"mcpServers": {"zocrates": entry}}
    gemini = m.gemini.read_text()
    assert gemini.startswith("// my Gemini settings\n{") and '"theme": "GitHub", // light' in gemini
    from zocratesd.install.client_configs import parse_config

    assert parse_config(gemini) == {"mcpServers": {"zocrates": entry}, "theme": "GitHub"}
    assert not (m.home / ".config" / "zed").exists()

    # Again: everything is in place, nothing is rewritten.
    m.set_plugin(installed_version(installed))
    again = run(installed, m.env, "setup", "--yes", "--plugin-out", str(xpi_dir))
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("already runs zocrates") == 3
    assert "already installed" in again.stdout
    assert len(list(m.claude.parent.glob("*.zocrates-backup-*"))) == 1

    # Without a terminal and without --yes, every question is answered no.
    m.claude.write_text(json.dumps({"mcpServers": {"other": CLAUDE_OTHER}}))
    asked = run(installed, m.env, "setup")
    assert "run with --yes to accept" in asked.stdout
    assert json.loads(m.claude.read_text()) == {"mcpServers": {"other": CLAUDE_OTHER}}


@contextlib.contextmanager
def wheel_daemon(inst: Installed, m: Machine) -> Iterator[subprocess.Popen[str]]:
    """`zocratesd serve` from the wheel, told nothing: it finds the data dir as setup did. Yields
    once its daemon.json names it; stopped (by its pid) on the way out."""
    daemon = subprocess.Popen([str(inst.zocratesd), "serve"], env=m.env, cwd=m.home, stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        info = m.data_dir / "zocrates-data" / "daemon.json"
        deadline = time.monotonic() + 120  # a daemon serving another dir never writes this file
        while not info.exists():
            assert daemon.poll() is None, daemon.communicate()[1]
            assert time.monotonic() < deadline, f"no daemon.json in {m.data_dir} (the daemon serves another data dir)"
            threading.Event().wait(0.05)
        assert json.loads(info.read_text())["pid"] == daemon.pid
        yield daemon
    finally:
        daemon.terminate()
        try:
            daemon.wait(timeout=30)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()


def mcp_tools(entry: dict[str, Any], env: dict[str, str]) -> list[str]:
    """The tools an MCP client gets from `entry` (a client config's server entry): initialize,
    initialized, tools/list over stdio, as Claude Desktop sends them."""
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "claude-ai", "version": "0.1.0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    ]
    done = subprocess.run([entry["command"], *entry["args"]], input="".join(json.dumps(msg) + "\n" for msg in messages),
                          env=env, cwd=env["HOME"], capture_output=True, text=True, timeout=120)
    replies = {r["id"]: r for r in map(json.loads, done.stdout.splitlines()) if "id" in r}
    assert "result" in replies.get(2, {}), (done.stdout, done.stderr)
    return [tool["name"] for tool in replies[2]["result"]["tools"]]


def installed_version(inst: Installed) -> str:
    return subprocess.run([str(inst.python), "-c", "import zocratesd; print(zocratesd.__version__)"],
                          capture_output=True, text=True, check=True).stdout.strip()


def doctor(inst: Installed, m: Machine, *args: str, env: dict[str, str] | None = None) -> tuple[int, dict[str, dict[str, str]], str]:
    text = run(inst, env or m.env, "doctor", *args)
    js = run(inst, env or m.env, "doctor", "--json", *args)
    report = json.loads(js.stdout)
    assert (js.returncode == 0) == report["passed"] and (text.returncode == 0) == report["passed"], text.stdout
    return text.returncode, {c["name"]: c for c in report["checks"]}, text.stdout


@pytest.fixture
def set_up(installed: Installed, machine: Machine) -> Iterator[Machine]:
    done = run(installed, machine.env, "setup", "--yes", "--plugin-out", str(machine.root))
    assert done.returncode == 0, done.stdout + done.stderr
    machine.set_plugin(installed_version(installed))
    yield machine


def test_doctor_passes_on_a_healthy_set_up_and_names_each_broken_piece(installed: Installed, set_up: Machine) -> None:
    m = set_up
    # No daemon yet, and no service socket listening (systemctl here only records).
    code, checks, out = doctor(installed, m)
    assert code == 1
    assert checks["daemon"]["status"] == "fail" and "zocratesd service install" in checks["daemon"]["fix"]
    assert checks["library index"]["status"] == "skip"
    with wheel_daemon(installed, m):
        healthy_and_broken(installed, m)


def healthy_and_broken(installed: Installed, m: Machine) -> None:
    # The entry setup gave Claude Desktop works: an MCP client gets the library's tools through it.
    entry = json.loads(m.claude.read_text())["mcpServers"]["zocrates"]
    assert entry["command"] == str(installed.zocratesd)
    assert {"search_library", "ask", "find_quote", "export_citations"} <= set(mcp_tools(entry, m.env))
    code, checks, out = doctor(installed, m)
    assert code == 0, out
    assert out.rstrip().endswith("all checks passed")
    assert checks["Zotero version"]["summary"].startswith("Zotero 9 (userdata schema 125)")
    assert checks["daemon"]["status"] == "ok" and checks["HTTP shim"]["status"] == "ok"
    assert checks["Zotero plugin"]["status"] == "ok"
    assert checks["client Claude Desktop"]["status"] == "ok" and checks["client Zed"]["status"] == "skip"
    for line in out.splitlines()[:-1]:
        assert line.startswith(("ok   ", "--   ")), line

    # The pane's report: the daemon runs the same checks (GET /doctor, with the token).
    info = json.loads((m.data_dir / "zocrates-data" / "daemon.json").read_text())
    req = urllib.request.Request(f"http://127.0.0.1:{info['http']['port']}/doctor", headers={"Authorization": f"Bearer {info['token']}"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        served = json.loads(resp.read())["report"]
    served_checks = {c["name"]: c for c in served["checks"]}
    assert served["data_dir"] == str(m.data_dir)
    assert served_checks["daemon"]["status"] == "ok" and served_checks["HTTP shim"]["status"] == "ok"
    assert list(served_checks)[:6] == list(checks)[:6]
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"http://127.0.0.1:{info['http']['port']}/doctor", timeout=60)
    assert refused.value.code == 401

    # The service stopped.
    code, checks, _ = doctor(installed, m, env={**m.env, "FAKE_IS_ACTIVE": "inactive"})
    assert code == 1 and checks["service"]["summary"] == "installed but not active (inactive)"
    # The service installed for another data dir.
    unit = m.home / ".config" / "systemd" / "user" / "zocratesd.service"
    kept = unit.read_text()
    unit.write_text(kept.replace(str(m.data_dir), str(m.root / "another")))
    code, checks, _ = doctor(installed, m)
    assert code == 1 and checks["service"]["summary"] == f"{unit} is installed for another data dir, socket or Python than this zocratesd's"
    unit.write_text(kept)
    # A stale plugin.
    m.set_plugin("0.0.9")
    code, checks, _ = doctor(installed, m)
    assert code == 1 and checks["Zotero plugin"]["summary"].startswith("version 0.0.9 is installed, this zocratesd is")
    assert "zocratesd plugin" in checks["Zotero plugin"]["fix"]
    m.set_plugin(installed_version(installed), active=False)
    code, checks, _ = doctor(installed, m)
    assert code == 1 and "disabled" in checks["Zotero plugin"]["summary"]
    m.set_plugin(installed_version(installed))
    # A client config pointing at a binary that is gone.
    cursor = json.loads(m.cursor.read_text())
    cursor["mcpServers"]["zocrates"]["command"] = "/opt/gone/bin/zocratesd"
    m.cursor.write_text(json.dumps(cursor))
    code, checks, _ = doctor(installed, m)
    assert code == 1 and checks["client Cursor"]["summary"] == "its entry runs /opt/gone/bin/zocratesd, which does not exist"
    assert checks["client Claude Desktop"]["status"] == "ok"


class OpenAIModels:
    """`GET /v1/models` as OpenAI answers it: the list with the right key, 401 without."""

    def __init__(self, key: str) -> None:
        key_ = key

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                ok = self.path == "/v1/models" and self.headers.get("Authorization") == f"Bearer {key_}"
                body = json.dumps({"object": "list", "data": [{"id": "gpt-test", "object": "model"}]} if ok else
                                  {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error", "code": "invalid_api_key"}})
                self.send_response(200 if ok else 401)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body.encode())

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_doctor_checks_the_model_endpoint_and_never_prints_the_key(installed: Installed, machine: Machine) -> None:
    m = machine
    api = OpenAIModels("sk-right-key-123")
    try:
        state = m.data_dir / "zocrates-data"
        state.mkdir(exist_ok=True)
        (state / "zocrates_config.json").write_text(json.dumps(
            {"model": {"provider": "openai", "name": "gpt-test", "base_url": api.base_url, "api_key_env": "TEST_MODEL_KEY"}}))
        _, checks, out = doctor(installed, m, env={**m.env, "TEST_MODEL_KEY": "sk-right-key-123"})
        assert checks["model"]["status"] == "ok" and checks["model"]["summary"] == f"openai gpt-test at {api.base_url} answers (HTTP 200)"
        _, checks, out = doctor(installed, m, env={**m.env, "TEST_MODEL_KEY": "sk-wrong-key-456"})
        assert checks["model"]["status"] == "fail"
        assert checks["model"]["summary"] == f"{api.base_url} refused the key ($TEST_MODEL_KEY, HTTP 401)"
        assert "sk-wrong" not in out
    finally:
        api.close()
    _, checks, _ = doctor(installed, m, env={**m.env, "TEST_MODEL_KEY": "sk-right-key-123"})
    assert checks["model"]["status"] == "fail" and "cannot be reached" in checks["model"]["summary"]


class GeminiModels:
    """`GET /v1beta/models/<name>` as Gemini's API answers it (key in `x-goog-api-key`): the model with
    the right key, 400 API_KEY_INVALID with a wrong one, 403 with none, 404 for a model it lacks."""

    def __init__(self, key: str, model: str) -> None:
        key_, model_ = key, model

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                self.server.paths.append(self.path)  # type: ignore[attr-defined]
                given = self.headers.get("x-goog-api-key")
                body: dict[str, Any]
                if given is None:
                    code, body = 403, {"error": {"code": 403, "status": "PERMISSION_DENIED",
                                                 "message": "Method doesn't allow unregistered callers (callers without established identity)."}}
                elif given != key_:
                    code, body = 400, {"error": {"code": 400, "status": "INVALID_ARGUMENT", "message": "API key not valid. Please pass a valid API key.",
                                                 "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID",
                                                              "domain": "googleapis.com"}]}}
                elif self.path != f"/v1beta/models/{model_}":
                    name = self.path.removeprefix("/v1beta/")
                    code, body = 404, {"error": {"code": 404, "status": "NOT_FOUND",
                                                 "message": f"{name} is not found for API version v1beta, or is not supported for generateContent."}}
                else:
                    code, body = 200, {"name": f"models/{model_}", "displayName": "Gemini Test", "inputTokenLimit": 1048576,
                                       "supportedGenerationMethods": ["generateContent", "countTokens"]}
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json; charset=UTF-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.paths = []  # type: ignore[attr-defined]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}"

    @property
    def paths(self) -> list[str]:
        return list(self.server.paths)  # type: ignore[attr-defined]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_doctor_asks_gemini_for_its_model_and_never_prints_the_key(installed: Installed, machine: Machine) -> None:
    m = machine
    api = GeminiModels("AIza-right-key-123", "gemini-test")
    state = m.data_dir / "zocrates-data"
    state.mkdir(exist_ok=True)
    config_file = state / "zocrates_config.json"
    config_file.write_text(json.dumps({"model": {"provider": "gemini", "name": "gemini-test"}}))
    # google-genai, which the daemon's Gemini runs on, goes where GOOGLE_GEMINI_BASE_URL says.
    env = {k: v for k, v in m.env.items() if k not in ("GOOGLE_API_KEY", "GEMINI_API_KEY")}
    env["GOOGLE_GEMINI_BASE_URL"] = api.base_url
    try:
        _, checks, out = doctor(installed, m, env={**env, "GEMINI_API_KEY": "AIza-right-key-123"})
        assert checks["model"]["status"] == "ok", checks["model"]
        assert checks["model"]["summary"] == f"gemini gemini-test at {api.base_url} answers (HTTP 200)"
        assert "/v1beta/models/gemini-test" in api.paths and "AIza-right" not in out
        # A wrong key: Gemini's 400 API_KEY_INVALID, the variable named, the key never printed.
        code, checks, out = doctor(installed, m, env={**env, "GEMINI_API_KEY": "AIza-wrong-key-456"})
        assert code == 1 and checks["model"]["status"] == "fail"
        assert checks["model"]["summary"] == f"{api.base_url} refused the key ($GEMINI_API_KEY, HTTP 400)"
        assert "check the key" in checks["model"]["fix"] and "AIza-wrong" not in out
        # A model Gemini does not have.
        config_file.write_text(json.dumps({"model": {"provider": "gemini", "name": "gemini-9-nonesuch", "api_key_env": "MY_GEMINI"}}))
        _, checks, out = doctor(installed, m, env={**env, "MY_GEMINI": "AIza-right-key-123"})
        assert checks["model"]["status"] == "fail"
        assert checks["model"]["summary"] == f"{api.base_url} has no model gemini-9-nonesuch (HTTP 404)"
        assert "model.name" in checks["model"]["fix"]
    finally:
        api.close()
    # Nothing answers there any more.
    _, checks, out = doctor(installed, m, env={**env, "MY_GEMINI": "AIza-right-key-123"})
    assert checks["model"]["status"] == "fail" and "cannot be reached" in checks["model"]["summary"]
    assert "GOOGLE_GEMINI_BASE_URL" in checks["model"]["fix"] and "AIza-right" not in out


def test_doctor_names_the_service_not_installed_and_a_runtime_dir_it_cannot_use(installed: Installed, machine: Machine) -> None:
    m = machine
    # Before setup: nothing installed.
    code, checks, _ = doctor(installed, m)
    units = m.home / ".config" / "systemd" / "user"
    assert code == 1 and checks["service"]["status"] == "fail"
    assert checks["service"]["summary"] in (f"not installed ({units / name} is missing)" for name in ("zocratesd.socket", "zocratesd.service"))
    assert "`zocratesd service install`" in checks["service"]["fix"]
    # The socket's directory is a link to somewhere else: the service could not listen there.
    elsewhere = m.root / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (Path(m.env["XDG_RUNTIME_DIR"]) / "zocrates").symlink_to(elsewhere)
    code, checks, out = doctor(installed, m)
    assert code == 1 and checks["service"]["status"] == "fail"
    assert "the service could not listen there" in checks["service"]["summary"]
    assert checks["service"]["fix"].startswith("once that is fixed, `zocratesd service install` installs it"), checks["service"]
    assert "FAIL service: " in out


def test_doctor_on_a_data_dir_without_zotero_sqlite_and_on_an_unsupported_schema(installed: Installed, machine: Machine) -> None:
    m = machine
    empty = m.root / "empty"
    empty.mkdir()
    code, checks, _ = doctor(installed, m, "--zotero-data-dir", str(empty))
    assert code == 1 and checks["data dir"]["summary"] == f"{empty} (from --zotero-data-dir) has no zotero.sqlite"
    assert "Files and Folders" in checks["data dir"]["fix"]

    old = m.root / "old"
    old.mkdir()
    db = sqlite3.connect(old / "zotero.sqlite")
    db.executescript("CREATE TABLE version (schema TEXT PRIMARY KEY, version INT NOT NULL); INSERT INTO version VALUES ('userdata', 98);")
    db.close()
    code, checks, _ = doctor(installed, m, "--zotero-data-dir", str(old))
    assert code == 1 and checks["Zotero version"]["summary"].startswith("zotero.sqlite has userdata schema 98, older than Zotero 7")
    # setup stops there, before changing anything.
    done = run(installed, m.env, "setup", "--yes", "--zotero-data-dir", str(old))
    assert done.returncode == 1 and "older than Zotero 7" in done.stderr
    assert "zocrates" not in m.claude.read_text()


def test_a_zotero_newer_than_zocratesd_knows_is_a_warning_doctor_and_setup_show(installed: Installed, machine: Machine) -> None:
    m = machine
    newer = m.root / "newer"
    newer.mkdir()
    shutil.copy2(m.data_dir / "zotero.sqlite", newer / "zotero.sqlite")
    db = sqlite3.connect(newer / "zotero.sqlite")
    db.execute("UPDATE version SET version = 131 WHERE schema = 'userdata'")
    db.commit()
    db.close()
    code, checks, out = doctor(installed, m, "--zotero-data-dir", str(newer))
    made = checks["Zotero version"]
    assert made["status"] == "warn", made
    assert made["summary"].startswith("zotero.sqlite has userdata schema 131 (newer than this zocratesd knows); reading it as Zotero 10's")
    assert made["summary"].endswith("; Zotero 9.0.6 last ran the profile")
    assert "read on trust" in made["fix"] and "pipx upgrade zocrates" in made["fix"]
    assert "WARN Zotero version: zotero.sqlite has userdata schema 131" in out
    # A warning is not a failure: the closing line counts the failed checks only.
    failed = sum(c["status"] == "fail" for c in checks.values())
    assert out.rstrip().endswith(f"{failed} checks failed"), out
    # setup shows it and goes on.
    dry = run(installed, m.env, "setup", "--dry-run", "--zotero-data-dir", str(newer), "--plugin-out", str(m.root))
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert "Zotero: zotero.sqlite has userdata schema 131 (newer than this zocratesd knows)" in dry.stdout
    assert "read on trust" in dry.stdout


ZED_SETTINGS = """// Zed settings
//
// For information on how to configure Zed, see the Zed documentation: https://zed.dev/docs/configuring-zed
{
  "theme": "One Dark", /* a block comment */
  "languages": { "Python": { "formatter": { "external": { "command": "ruff", "arguments": ["format", "-"] } } } },
  "agent_servers": {
    "Gemini": { "command": "gemini", "args": ["--experimental-acp"] }, // theirs
  },
}
"""


def test_setup_merges_into_a_zed_settings_file_with_comments_and_leaves_a_broken_file_alone(installed: Installed, machine: Machine) -> None:
    m = machine
    zed = m.home / ".config" / "zed" / "settings.json"
    zed.parent.mkdir(parents=True)
    zed.write_text(ZED_SETTINGS)
    m.cursor.write_text('{"mcpServers": {"mine": {"command": "x"}')  # cut short: not JSON
    done = run(installed, m.env, "setup", "--yes", "--plugin-out", str(m.root))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"Cursor: {m.cursor} is left alone: it is not valid JSON" in done.stdout
    assert m.cursor.read_text() == '{"mcpServers": {"mine": {"command": "x"}'
    text = zed.read_text()
    # Every line of theirs is still there, comments included; ours is one more member.
    assert [line for line in text.splitlines() if "Zocrates" not in line] == ZED_SETTINGS.splitlines()
    from zocratesd.install.client_configs import parse_config

    ours = {"type": "custom", "command": str(installed.zocratesd), "args": ["stdio", "--zotero-data-dir", str(m.data_dir)]}
    assert parse_config(text)["agent_servers"] == {"Zocrates": ours, "Gemini": {"command": "gemini", "args": ["--experimental-acp"]}}
    (backup,) = zed.parent.glob("settings.json.zocrates-backup-*")
    assert backup.read_text() == ZED_SETTINGS

    # Our entry there but different (an older install), in a file with comments: replaced in place.
    old = text.replace(str(installed.zocratesd), "/opt/old/zocratesd")
    zed.write_text(old)
    again = run(installed, m.env, "setup", "--yes", "--plugin-out", str(m.root))
    assert f"Zed: would update the zocrates entry in {zed}" in again.stdout
    assert zed.read_text() == text
    assert len(list(zed.parent.glob("settings.json.zocrates-backup-*"))) == 2


def test_the_daemon_and_its_client_find_the_data_dir_zoteros_settings_name(installed: Installed, machine: Machine) -> None:
    m = machine
    # Neither is told where the library is; ~/Zotero does not exist. Both read Zotero's own prefs.js.
    assert not (m.home / "Zotero").exists()
    with wheel_daemon(installed, m):
        client = subprocess.run([str(installed.venv / "bin" / "zocrates"), "library", "status", "--json"], env=m.env,
                                cwd=m.home, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        assert client.returncode == 0, client.stderr
        assert json.loads(client.stdout)["data_dir"] == str(m.data_dir)
