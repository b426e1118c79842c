"""`zocratesd service install|uninstall|status`: autostart through the OS service manager.

- Linux: `zocratesd.socket` and `zocratesd.service` go to `$XDG_CONFIG_HOME/systemd/user/` (else
  `~/.config/systemd/user/`, the directory the user manager reads), then `systemctl --user
  daemon-reload` and `systemctl --user enable --now zocratesd.socket`. The socket unit listens at
  once; the daemon starts on the first connection.
- macOS: `org.zocrates.zocratesd.plist` goes to `~/Library/LaunchAgents/`, then `launchctl bootstrap
  gui/<uid> <plist>`. launchd does not create the socket's directory, so we do (0700).

The templates are `systemd/` and `launchd/` at the top of the repository; the package ships
byte-identical copies in `zocratesd/service_manager/templates/` (a test keeps them so) because an installed
wheel has no repository around it. Placeholders `@NAME@` are filled here, escaped for the format.

The rules that make it safe to run twice or by mistake:
- every file we write carries MARKER; a file at one of our paths without it (the user's own unit, a
  packager's) is never overwritten or removed: install stops before writing anything;
- identical content is not rewritten, and when the manager already has the unit enabled and
  running nothing is run either: a re-install is a no-op;
- `--dry-run` prints every file it would write, in full, and every command it would run, and only
  ever runs read-only queries (`systemctl --user is-enabled`, `launchctl print`).

`ZOCRATESD_SYSTEMCTL` / `ZOCRATESD_LAUNCHCTL` name another binary for the OS tool (tests, or a
systemctl outside PATH).
"""

from __future__ import annotations

import os
import plistlib
import re
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import xml.sax.saxutils
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import IO, Final, Literal

from zocratesd import locations

# Every file we write carries this; its absence marks a file as someone else's.
MARKER = "Written by `zocratesd service install`"
SOCKET_UNIT = "zocratesd.socket"
SERVICE_UNIT = "zocratesd.service"
LAUNCHD_LABEL = "org.zocrates.zocratesd"
PLIST_NAME = f"{LAUNCHD_LABEL}.plist"
TEMPLATE_DIRS = {SOCKET_UNIT: "systemd", SERVICE_UNIT: "systemd", PLIST_NAME: "launchd"}

ENV_SYSTEMCTL = "ZOCRATESD_SYSTEMCTL"
ENV_LAUNCHCTL = "ZOCRATESD_LAUNCHCTL"
# Unit files and agents are configuration, readable like the rest of ~/.config.
UNIT_FILE_MODE = 0o644
# `systemctl --user enable --now` waits for the socket to be listening: seconds at most. A minute
# covers a loaded machine and still ends a hang on a wedged manager with a message.
TOOL_TIMEOUT_S = 60.0
# `launchctl bootout` returns before launchd has finished removing the job, and a bootstrap right
# after it fails with "5: Input/output error"; a few short retries cover that window.
BOOTSTRAP_ATTEMPTS = 5
BOOTSTRAP_RETRY_S = 0.5
# Arguments that need no quoting in an ExecStart= line (after % and $ are doubled).
_SYSTEMD_PLAIN_WORD = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")

FileState = Literal["new", "changed", "unchanged", "foreign"]
Platform = Literal["systemd", "launchd"]


class ServiceError(Exception):
    """The service cannot be installed or removed; the message says what to do."""


# --- what gets installed ----------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    """Everything the filled templates depend on."""

    data_dir: Path
    home: Path
    python: str = field(default_factory=lambda: sys.executable)
    idle_exit_after: float | None = None
    socket_path: Path | None = None  # None: locations.default_socket_path(data_dir), as clients compute it

    def resolved_socket_path(self) -> Path:
        # The default fits in a socket address whatever the runtime dir (else it is in
        # /tmp/zocrates-<uid>, locations.SHORT_SOCKET_PARENT): ListenStream= and SockPathName
        # have the same 104/108-byte limit as bind().
        try:
            path = self.socket_path or locations.default_socket_path(self.data_dir)
            locations.check_socket_path(path)
        except locations.RuntimeFileError as exc:
            raise ServiceError(str(exc)) from None
        if problem := locations.socket_dir_problem(path.parent):
            raise ServiceError(
                f"{problem}: the service could not listen there; move it away, or set XDG_RUNTIME_DIR to a short directory of yours"
            )
        return path

    def serve_argv(self) -> list[str]:
        """The daemon's command line: this very Python, so the service runs the zocratesd installed here."""
        if not self.python or not os.path.isabs(self.python):
            raise ServiceError(f"cannot tell which Python runs zocratesd (sys.executable is {self.python!r})")
        argv = [self.python, "-m", "zocratesd", "serve", "--zotero-data-dir", str(self.data_dir)]
        if self.idle_exit_after is not None:
            argv += ["--idle-exit-after", f"{self.idle_exit_after:g}"]
        return argv


# The zocratesd package this module belongs to (zocratesd/service_manager/installer.py).
PACKAGE_DIR: Final = Path(__file__).resolve().parent.parent


def source_tree_of(python: str, package_dir: Path) -> Path | None:
    """The source checkout the service would run from, if any: the venv of `python` sits in one
    (`./dev` makes `.venv-3.11` inside the clone), or zocratesd itself is imported from one (an
    editable install). None for an installed package (pipx, `pip install`), which stays put."""
    package_root = package_dir.resolve().parent
    if (package_root / "pyproject.toml").is_file() and (package_root / "zocratesd").is_dir():
        return package_root
    venv = Path(python).parent.parent  # not resolved: a venv's python links to the base interpreter
    if (venv / "pyvenv.cfg").is_file():
        for parent in venv.parents:
            if (parent / "pyproject.toml").is_file() and (parent / "zocratesd").is_dir():
                return parent
    return None


def source_tree_warning(settings: Settings) -> str | None:
    """What to tell the user when the units would run zocratesd out of a clone they may delete."""
    tree = source_tree_of(settings.python, PACKAGE_DIR)
    if tree is None:
        return None
    return (
        f"warning: the service will run {settings.python} with zocratesd from the source tree {tree}; "
        "moving or deleting that directory breaks the service (re-run `zocratesd service install` from wherever "
        f"zocratesd is installed then, or install it for good first: `pipx install {tree}`)"
    )


def template_text(name: str) -> str:
    """A template: the package's copy (installed wheels), else the repository's top-level one."""
    packaged = resources.files("zocratesd.service_manager").joinpath("templates", name)
    if packaged.is_file():
        return packaged.read_text(encoding="utf-8")
    repo_copy = Path(__file__).resolve().parents[2] / TEMPLATE_DIRS[name] / name
    if repo_copy.is_file():
        return repo_copy.read_text(encoding="utf-8")
    raise ServiceError(f"the {name} template is missing from this installation; reinstall zocrates")


def fill(template: str, values: Mapping[str, str]) -> str:
    """Replace every `@NAME@`; a placeholder left over is a bug in the template or here."""
    out = template
    for key, value in values.items():
        out = out.replace(f"@{key}@", value)
    left = re.findall(r"@[A-Z_]+@", out)
    if left:
        raise ServiceError(f"template placeholders not filled: {', '.join(sorted(set(left)))}")
    return out


def _check_line_safe(value: str, what: str) -> str:
    if any(ord(c) < 32 for c in value):
        raise ServiceError(f"{what} {value!r} contains a control character (a newline?); choose another path")
    return value


def systemd_word(arg: str) -> str:
    """One ExecStart= argument: specifiers (%) and variables ($) doubled, quoted when needed."""
    text = _check_line_safe(arg, "argument").replace("%", "%%").replace("$", "$$")
    if _SYSTEMD_PLAIN_WORD.fullmatch(text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def systemd_value(value: str) -> str:
    """A whole-line value (ListenStream=): only specifiers need escaping."""
    return _check_line_safe(value, "path").replace("%", "%%")


def _xml(value: str) -> str:
    return xml.sax.saxutils.escape(_check_line_safe(value, "path"))


# --- the two managers ---------------------------------------------------------------------------


@dataclass
class Step:
    """A command to run; `attempts` > 1 retries a command known to fail transiently."""

    argv: list[str]
    attempts: int = 1

    def __str__(self) -> str:
        return shlex.join(self.argv)


class _Manager:
    platform: Platform
    tool_env: str
    tool_default: str
    label: str

    def __init__(self, settings: Settings, environ: Mapping[str, str]):
        self.settings = settings
        self.environ = environ
        self.tool = environ.get(self.tool_env) or self.tool_default

    def files(self) -> dict[Path, str]:
        raise NotImplementedError

    def prepare(self) -> list[tuple[str, Path]]:
        """Directories to create (description, path) before the files are written."""
        return []

    def install_steps(self, states: Mapping[Path, FileState]) -> list[Step]:
        raise NotImplementedError

    def uninstall_steps(self) -> tuple[list[Step], list[Step]]:
        """(steps before the files are removed, steps after)."""
        raise NotImplementedError

    def status_lines(self) -> list[str]:
        raise NotImplementedError

    def installed_socket_path(self, path: Path, text: str) -> str | None:
        return None

    # -- running the OS tool --

    def tool_path(self) -> str | None:
        return shutil.which(self.tool)

    def require_tool(self) -> None:
        if self.tool_path() is None:
            raise ServiceError(
                f"{self.tool} not found: `zocratesd service` needs the {self.platform} service manager. "
                "`zocratesd service install --dry-run` shows the files and commands to set it up by hand."
            )

    def query(self, *args: str) -> subprocess.CompletedProcess[str] | None:
        """A read-only query; None when the tool is missing or does not answer."""
        if self.tool_path() is None:
            return None
        try:
            return subprocess.run(
                [self.tool, *args], capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, stdin=subprocess.DEVNULL
            )
        except (OSError, subprocess.TimeoutExpired):
            return None

    def run(self, step: Step) -> None:
        for attempt in range(1, step.attempts + 1):
            try:
                done = subprocess.run(
                    step.argv, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, stdin=subprocess.DEVNULL
                )
            except FileNotFoundError:
                raise ServiceError(f"{step.argv[0]} not found") from None
            except subprocess.TimeoutExpired:
                raise ServiceError(f"`{step}` did not finish within {TOOL_TIMEOUT_S:.0f} s") from None
            if done.returncode == 0:
                return
            if attempt < step.attempts:
                time.sleep(BOOTSTRAP_RETRY_S)
        detail = (done.stderr or done.stdout).strip()
        raise ServiceError(f"`{step}` failed (exit {done.returncode}): {detail}\n{self.failure_hint()}")

    def failure_hint(self) -> str:
        return ""


class SystemdUser(_Manager):
    platform: Platform = "systemd"
    tool_env = ENV_SYSTEMCTL
    tool_default = "systemctl"
    label = "systemd user units"

    def unit_dir(self) -> Path:
        # The user manager reads $XDG_CONFIG_HOME/systemd/user, ~/.config/systemd/user without it.
        config = self.environ.get("XDG_CONFIG_HOME", "")
        base = Path(config) if os.path.isabs(config) else self.settings.home / ".config"
        return base / "systemd" / "user"

    def files(self) -> dict[Path, str]:
        s = self.settings
        values = {
            "DATA_DIR": _check_line_safe(str(s.data_dir), "data dir"),
            "SOCKET_PATH": systemd_value(str(s.resolved_socket_path())),
            "EXEC_START": " ".join(systemd_word(a) for a in s.serve_argv()),
        }
        return {self.unit_dir() / name: fill(template_text(name), values) for name in (SOCKET_UNIT, SERVICE_UNIT)}

    def _socket_enabled_and_active(self) -> bool:
        enabled = self.query("--user", "is-enabled", SOCKET_UNIT)
        active = self.query("--user", "is-active", SOCKET_UNIT)
        return (
            enabled is not None and enabled.returncode == 0 and enabled.stdout.strip() == "enabled"
            and active is not None and active.returncode == 0 and active.stdout.strip() == "active"
        )

    def install_steps(self, states: Mapping[Path, FileState]) -> list[Step]:
        ctl = [self.tool, "--user"]
        values = set(states.values())
        if values == {"unchanged"}:
            return [] if self._socket_enabled_and_active() else [Step([*ctl, "enable", "--now", SOCKET_UNIT])]
        steps = [Step([*ctl, "daemon-reload"])]
        if "changed" in values:
            # An update (another data dir, socket path or Python): restart the socket so it listens
            # where the new unit says; Requires= stops a running daemon with it, and the next
            # connection starts the new one.
            steps += [Step([*ctl, "enable", SOCKET_UNIT]), Step([*ctl, "restart", SOCKET_UNIT])]
        else:
            steps.append(Step([*ctl, "enable", "--now", SOCKET_UNIT]))
        return steps

    def uninstall_steps(self) -> tuple[list[Step], list[Step]]:
        ctl = [self.tool, "--user"]
        return [Step([*ctl, "disable", "--now", SOCKET_UNIT, SERVICE_UNIT])], [Step([*ctl, "daemon-reload"])]

    def failure_hint(self) -> str:
        return (
            "Is a systemd user manager running for you? Check `systemctl --user status`; run this from your "
            "login session (on a server: `loginctl enable-linger $USER`)."
        )

    def installed_socket_path(self, path: Path, text: str) -> str | None:
        for line in text.splitlines():
            if line.startswith("ListenStream="):
                return line.partition("=")[2].strip().replace("%%", "%")
        return None

    def status_lines(self) -> list[str]:
        lines = []
        for args, what in (
            (("is-enabled", SOCKET_UNIT), SOCKET_UNIT),
            (("is-active", SOCKET_UNIT), SOCKET_UNIT),
            (("is-active", SERVICE_UNIT), SERVICE_UNIT),
        ):
            done = self.query("--user", *args)
            answer = (done.stdout.strip() or done.stderr.strip()) if done is not None else f"unknown ({self.tool} not available)"
            lines.append(f"  {args[0]:<11} {what}: {answer}")
        return lines


class Launchd(_Manager):
    platform: Platform = "launchd"
    tool_env = ENV_LAUNCHCTL
    tool_default = "launchctl"
    label = "a launchd LaunchAgent"

    @property
    def domain(self) -> str:
        return f"gui/{os.getuid()}"

    @property
    def service_target(self) -> str:
        return f"{self.domain}/{LAUNCHD_LABEL}"

    def plist_path(self) -> Path:
        return self.settings.home / "Library" / "LaunchAgents" / PLIST_NAME

    def log_path(self) -> Path:
        # ~/Library/Logs/<app>: where Console.app looks (platformdirs.user_log_dir on macOS).
        return self.settings.home / "Library" / "Logs" / "zocrates" / "zocratesd.log"

    def files(self) -> dict[Path, str]:
        s = self.settings
        values = {
            "PROGRAM_ARGUMENTS": "\n".join(f"        <string>{_xml(a)}</string>" for a in s.serve_argv()),
            "SOCKET_PATH": _xml(str(s.resolved_socket_path())),
            "LOG_PATH": _xml(str(self.log_path())),
        }
        return {self.plist_path(): fill(template_text(PLIST_NAME), values)}

    def prepare(self) -> list[tuple[str, Path]]:
        # launchd creates neither the socket's directory nor the log's: without them the agent
        # loads but never listens, or dies writing its log.
        return [
            ("socket directory (0700)", self.settings.resolved_socket_path().parent),
            ("log directory (0700)", self.log_path().parent),
        ]

    def _loaded(self) -> bool:
        done = self.query("print", self.service_target)
        return done is not None and done.returncode == 0

    def install_steps(self, states: Mapping[Path, FileState]) -> list[Step]:
        loaded = self._loaded()
        if set(states.values()) == {"unchanged"} and loaded:
            return []
        steps = [Step([self.tool, "bootout", self.service_target])] if loaded else []
        steps.append(Step([self.tool, "bootstrap", self.domain, str(self.plist_path())], attempts=BOOTSTRAP_ATTEMPTS))
        return steps

    def uninstall_steps(self) -> tuple[list[Step], list[Step]]:
        return ([Step([self.tool, "bootout", self.service_target])] if self._loaded() else []), []

    def installed_socket_path(self, path: Path, text: str) -> str | None:
        try:
            return str(plistlib.loads(text.encode())["Sockets"]["zocratesd"]["SockPathName"])
        except Exception:  # a hand-edited or broken plist: status just cannot tell
            return None

    def status_lines(self) -> list[str]:
        done = self.query("print", self.service_target)
        if done is None:
            return [f"  launchd: unknown ({self.tool} not available)"]
        return [f"  launchd: {'loaded as ' + self.service_target if done.returncode == 0 else 'not loaded'}"]


def manager_for(
    settings: Settings, platform: Platform | None = None, environ: Mapping[str, str] | None = None
) -> _Manager:
    platform = platform or ("launchd" if sys.platform == "darwin" else "systemd")
    env = os.environ if environ is None else environ
    return Launchd(settings, env) if platform == "launchd" else SystemdUser(settings, env)


# --- files --------------------------------------------------------------------------------------


def file_state(path: Path, content: str) -> FileState:
    """Whether `path` is missing, ours and equal to `content`, ours and different, or someone else's."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "new"
    if not stat.S_ISREG(st.st_mode):  # a symlink (`systemctl link`), a directory: not ours
        return "foreign"
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return "foreign"
    if MARKER not in text:
        return "foreign"
    return "unchanged" if text == content else "changed"


def write_file(path: Path, content: str) -> None:
    """Atomically replace `path`: the manager never reads half a unit."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(content)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, UNIT_FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _refuse_foreign(paths: Sequence[Path]) -> None:
    if paths:
        names = ", ".join(str(p) for p in paths)
        raise ServiceError(
            f"{names} exists and was not written by `zocratesd service install` (no {MARKER!r} line); "
            "it is left alone. Move it away (or remove it) and run this again."
        )


# --- the commands ---------------------------------------------------------------------------------


def install(manager: _Manager, *, dry_run: bool = False, out: IO[str] | None = None) -> int:
    out = out or sys.stdout
    files = manager.files()
    states = {path: file_state(path, content) for path, content in files.items()}
    _refuse_foreign([p for p, s in states.items() if s == "foreign"])
    if not dry_run:
        manager.require_tool()
    if manager.platform == "systemd" and not manager.environ.get("XDG_RUNTIME_DIR"):
        print(
            "warning: XDG_RUNTIME_DIR is not set, so the socket path was computed without it; clients in "
            "your login session may look elsewhere. Run this from your login session.",
            file=sys.stderr,
        )
    if warning := source_tree_warning(manager.settings):
        print(warning, file=sys.stderr)
    steps = manager.install_steps(states)
    verb = "would " if dry_run else ""
    for description, directory in manager.prepare():
        if not directory.is_dir():
            print(f"# {verb}create {description}: {directory}", file=out)
            if not dry_run:
                locations.ensure_private_dir(directory)
    for path, content in files.items():
        if states[path] == "unchanged":
            print(f"# unchanged: {path}", file=out)
            continue
        print(f"# {verb}write {path} ({states[path]})", file=out)
        if dry_run:
            out.write(content if content.endswith("\n") else content + "\n")
        else:
            write_file(path, content)
    for step in steps:
        print(f"# {verb}run: {step}", file=out)
        if not dry_run:
            try:
                manager.run(step)
            except ServiceError as exc:
                raise ServiceError(f"{exc}\nThe files are in place; once that is fixed, run this again.") from None
    if not dry_run:
        if not steps and set(states.values()) == {"unchanged"}:
            print(f"zocratesd service is already installed for {manager.settings.data_dir}; nothing to do", file=out)
        else:
            print(
                f"installed zocratesd as {manager.label} for {manager.settings.data_dir}; it starts on the first "
                f"connection to {manager.settings.resolved_socket_path()}",
                file=out,
            )
    return 0


def uninstall(manager: _Manager, *, dry_run: bool = False, out: IO[str] | None = None) -> int:
    out = out or sys.stdout
    paths = list(manager.files())
    ours = [p for p in paths if file_state(p, "") in ("changed", "unchanged")]
    for p in paths:
        if file_state(p, "") == "foreign":
            print(f"warning: {p} was not written by `zocratesd service install`; leaving it", file=sys.stderr)
    if not ours:
        print(f"zocratesd service is not installed ({manager.label}); nothing to do", file=out)
        return 0
    if not dry_run:
        manager.require_tool()
    before, after = manager.uninstall_steps()
    verb = "would " if dry_run else ""
    failed = False
    for step in before:
        print(f"# {verb}run: {step}", file=out)
        if not dry_run:
            try:
                manager.run(step)
            except ServiceError as exc:  # a unit the manager never loaded: remove the files anyway
                print(f"warning: {exc}", file=sys.stderr)
                failed = True
    for p in ours:
        print(f"# {verb}remove {p}", file=out)
        if not dry_run:
            p.unlink(missing_ok=True)
    for step in after:
        print(f"# {verb}run: {step}", file=out)
        if not dry_run:
            try:
                manager.run(step)
            except ServiceError as exc:
                print(f"warning: {exc}", file=sys.stderr)
                failed = True
    if not dry_run:
        print(f"uninstalled zocratesd ({manager.label})", file=out)
    return 1 if failed else 0


def status(manager: _Manager, *, out: IO[str] | None = None) -> int:
    """Print what is installed and running; 0 when our files are installed, else 3."""
    out = out or sys.stdout
    s = manager.settings
    expected_socket = str(s.resolved_socket_path())
    print(f"zocratesd service ({manager.label}) for {s.data_dir}", file=out)
    installed = True
    for path in manager.files():
        state = file_state(path, "")
        if state == "new":
            installed = False
            print(f"  not installed  {path}", file=out)
        elif state == "foreign":
            installed = False
            print(f"  not ours       {path} (not written by `zocratesd service install`)", file=out)
        else:
            print(f"  installed      {path}", file=out)
            found = manager.installed_socket_path(path, path.read_text(encoding="utf-8"))
            if found is not None and found != expected_socket:
                print(
                    f"  warning: it listens on {found}, but clients of {s.data_dir} look for {expected_socket}; "
                    f"run `zocratesd service install --zotero-data-dir {shlex.quote(str(s.data_dir))}`",
                    file=out,
                )
    if installed:
        for line in manager.status_lines():
            print(line, file=out)
    live = locations.live_daemon(s.data_dir)
    if live is not None:
        print(f"  daemon: running (pid {live.pid}) on {live.socket}", file=out)
    else:
        print("  daemon: not running" + (" (starts on the first connection)" if installed else ""), file=out)
    return 0 if installed else 3
