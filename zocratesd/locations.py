"""Where a daemon's files live, and how to find the daemon that owns a Zotero data dir.

One daemon serves one Zotero data dir. Its files:

- `<data>/zocrates-data/sessions.db` the session store (ADK's schema);
- `<data>/zocrates-data/zocratesd.lock` held with `flock` for the daemon's whole life: whoever
  holds it owns the data dir, so a socket or daemon.json left by a dead daemon is known to be stale;
- `<data>/zocrates-data/daemon.json` (0600) written atomically once the daemon is ready, removed on a
  clean exit: how clients find the socket;
- the Unix socket in `platformdirs.user_runtime_dir("zocrates")` (dir 0700, socket 0600), named
  after a hash of the resolved data dir so two Zotero profiles get two daemons. Under systemd or
  launchd (`zocratesd service install`) the service manager owns that socket and starts the
  daemon on the first connection; the daemon writes daemon.json once it runs.

This module is imported by `zocratesd stdio` and by the client library, so it stays light: the
standard library and platformdirs only.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

PROTOCOL_VERSION = 1
DATA_SUBDIR = "zocrates-data"
DB_NAME = "sessions.db"
LOCK_NAME = "zocratesd.lock"
INFO_NAME = "daemon.json"
LOG_NAME = "zocratesd.log"

# macOS caps sun_path at 104 bytes (Linux at 108); a longer path fails at bind with
# "AF_UNIX path too long", so we refuse it up front with a message that says what to do.
MAX_SOCKET_PATH_BYTES = 103


class RuntimeFileError(Exception):
    """A daemon file is unusable (unsafe permissions, bad path); the message says what to do."""


def resolve_data_dir(flag: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None) -> Path:
    """The Zotero data dir: the flag, else $ZOTERO_DATA_DIR, else ~/Zotero if it exists, else ours."""
    env = os.environ if env is None else env
    if flag:
        return Path(flag).expanduser().resolve()
    if env.get("ZOTERO_DATA_DIR"):
        return Path(env["ZOTERO_DATA_DIR"]).expanduser().resolve()
    home_zotero = Path.home() / "Zotero"
    if home_zotero.is_dir():
        return home_zotero.resolve()
    import platformdirs

    return Path(platformdirs.user_data_dir("zocrates")).resolve()


def state_dir(data_dir: Path) -> Path:
    """`<zotero-data-dir>/zocrates-data`: everything Zocrates writes next to the user's library."""
    return data_dir / DATA_SUBDIR


def runtime_dir() -> Path:
    import warnings

    import platformdirs

    # Without a usable $XDG_RUNTIME_DIR platformdirs falls back to /run/user/<uid> or
    # $TMPDIR/runtime-<uid> and warns; we check whatever it picks (ensure_private_dir), so the
    # warning would only be noise on stderr.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Path(platformdirs.user_runtime_dir("zocrates"))


def default_socket_path(data_dir: Path) -> Path:
    """The socket of `data_dir`'s daemon unless `--socket` says otherwise. The service installer
    writes this same path into the systemd socket unit and the launchd plist, so clients find a
    socket-activated daemon here before it has ever run (and written daemon.json)."""
    digest = hashlib.sha256(str(data_dir).encode()).hexdigest()[:12]
    return runtime_dir() / f"zocratesd-{digest}.sock"


def activation_socket(data_dir: Path) -> Path | None:
    """`default_socket_path(data_dir)` when a socket file is there, else None.

    With no live daemon.json, such a file is either a service manager's socket (zocratesd.socket,
    the LaunchAgent) waiting to start the daemon on the first connection, a daemon still starting,
    or a dead daemon's leftover. Only a connect() tells them apart: refused means leftover.
    """
    path = default_socket_path(data_dir)
    try:
        return path if stat.S_ISSOCK(os.stat(path).st_mode) else None
    except OSError:
        return None


def ensure_private_dir(path: Path) -> None:
    """Create `path` (0700) or check that an existing one is ours, a real dir, and not group/world-open."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise RuntimeFileError(f"{path} is not a directory; remove it and start again")
    if st.st_uid != os.getuid():
        raise RuntimeFileError(f"{path} belongs to uid {st.st_uid}, not to you; choose another --socket")
    if st.st_mode & 0o077:
        os.chmod(path, 0o700)


def check_socket_path(path: Path) -> None:
    if len(os.fsencode(path)) > MAX_SOCKET_PATH_BYTES:
        raise RuntimeFileError(
            f"socket path {path} is longer than {MAX_SOCKET_PATH_BYTES} bytes; pass a shorter --socket"
        )


# --- the single-instance lock ------------------------------------------------------------------


class AlreadyRunning(Exception):
    def __init__(self, lock_path: Path, pid: int | None):
        self.lock_path, self.pid = lock_path, pid
        who = f"pid {pid}" if pid else "another process"
        super().__init__(f"a zocratesd ({who}) already serves this data dir (lock {lock_path})")


class InstanceLock:
    """An exclusive `flock` on `zocratesd.lock`, released by the kernel when the process dies."""

    def __init__(self, path: Path):
        self.path = path
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise AlreadyRunning(self.path, read_lock_pid(self.path)) from None
            raise
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock
            self._fd = None


def read_lock_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip() or 0) or None
    except (OSError, ValueError):
        return None


def lock_is_held(path: Path) -> bool:
    """True when some live process holds the instance lock (the daemon is up or starting)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


# --- daemon.json -------------------------------------------------------------------------------


@dataclass(frozen=True)
class DaemonInfo:
    """The parsed daemon.json; `raw` keeps every field, including ones a later version adds."""

    pid: int
    socket: str
    protocol_version: int
    version: str
    raw: dict[str, Any]


def write_private_json(path: Path, payload: Mapping[str, Any]) -> None:
    """Atomically replace `path` with `payload` as JSON, mode 0600 from the first byte."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(payload, f, indent=2)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def read_daemon_info(data_dir: Path) -> DaemonInfo | None:
    """daemon.json of `data_dir`, or None when it is missing or unreadable."""
    try:
        raw = json.loads((state_dir(data_dir) / INFO_NAME).read_text())
        return DaemonInfo(
            pid=int(raw["pid"]),
            socket=str(raw["socket"]),
            protocol_version=int(raw["protocol_version"]),
            version=str(raw["version"]),
            raw=raw,
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def live_daemon(data_dir: Path) -> DaemonInfo | None:
    """daemon.json of a daemon that is still alive, else None (a stale file is ignored, not trusted)."""
    info = read_daemon_info(data_dir)
    if info is None or not pid_alive(info.pid):
        return None
    if not lock_is_held(state_dir(data_dir) / LOCK_NAME):
        return None
    return info
