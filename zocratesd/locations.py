"""Where a daemon's files live, and how to find the daemon that owns a Zotero data dir.

One daemon serves one Zotero data dir. Its files:

- `<data>/zocrates-data/sessions.db` the session store (ADK's schema);
- `<data>/zocrates-data/zocratesd.lock` held with `flock` for the daemon's whole life: whoever
  holds it owns the data dir, so a socket or daemon.json left by a dead daemon is known to be stale;
- `<data>/zocrates-data/daemon.json` (0600) written atomically once the daemon is ready, removed on a
  clean exit: how clients find the socket;
- the Unix socket in `platformdirs.user_runtime_dir("zocrates")` (dir 0700, socket 0600), named
  after a hash of the resolved data dir so two Zotero profiles get two daemons. When that path is
  too long for a Unix socket (a deep $XDG_RUNTIME_DIR, a long home on macOS), the socket goes to
  the short `/tmp/zocrates-<uid>/` instead, checked the same way (`default_socket_path`). Beside
  the socket, `<socket>.lock` is held by the daemon bound there (`process/instance.py`). Under
  systemd or launchd (`zocratesd service install`) the service manager owns that socket and starts
  the daemon on the first connection; the daemon writes daemon.json once it runs.

This module is what the daemon and its clients share: paths, the lock primitive, reading daemon.json.
The running daemon's side (taking the lock, claiming the socket, writing and removing daemon.json) is
`zocratesd/process/instance.py`. It is imported by `zocratesd stdio` and by the client library, so
it stays light: the standard library, platformdirs and `zotero_profile.py` (which reads
Zotero's own settings with the standard library).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import stat
import tempfile
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec
import platformdirs

# daemon.json names the protocol its socket speaks (the wire's); its readers import it from here.
from zocrates_wire import PROTOCOL_VERSION as PROTOCOL_VERSION
from zocratesd import zotero_profile

DATA_SUBDIR = "zocrates-data"
DB_NAME = "sessions.db"
LOCK_NAME = "zocratesd.lock"
INFO_NAME = "daemon.json"
LOG_NAME = "zocratesd.log"
INDEX_NAME = "library.db"  # the library index (zocratesd/library/index.py)

# A Unix socket's path must fit in sun_path: 104 bytes on macOS, 108 on Linux, the terminating
# NUL included. A longer one fails at bind() and connect() ("AF_UNIX path too long"), and systemd's
# ListenStream= and launchd's SockPathName have the same limit. 103 bytes fits both.
MAX_SOCKET_PATH_BYTES = 103

# Where the default socket goes when `<runtime dir>/<name>` would not fit: `/tmp/zocrates-<uid>`,
# at most 52 bytes with the socket's name on every system. Not $TMPDIR: on macOS that is a long
# per-user path itself. /tmp is sticky, so once the directory is ours nobody else can rename or
# remove it; but anyone can create the name first, so it is used only when it is ours (a real
# directory with our uid), like the runtime dir. A real short path, rather than binding through a
# directory fd (/proc/self/fd/N/name), because every client can connect to it (systemd's
# ListenStream=, launchd, clients in other languages), on macOS too.
SHORT_SOCKET_PARENT = Path("/tmp")


class RuntimeFileError(Exception):
    """A daemon file is unusable (unsafe permissions, bad path); the message says what to do."""


def resolve_data_dir(flag: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None) -> Path:
    """The Zotero data dir (`zotero_profile.find_data_dir`: the flag, $ZOTERO_DATA_DIR, the dir
    Zotero's own settings name, `~/Zotero`); with no Zotero at all, a per-user dir of ours, so
    sessions still have a home."""
    choice = zotero_profile.find_data_dir(Path.home(), flag, env)
    if choice.source == zotero_profile.ZOTERO_DEFAULT and not choice.path.is_dir():
        return Path(platformdirs.user_data_dir("zocrates")).resolve()
    return choice.path


def state_dir(data_dir: Path) -> Path:
    """`<zotero-data-dir>/zocrates-data`: everything Zocrates writes next to the user's library."""
    return data_dir / DATA_SUBDIR


def runtime_dir() -> Path:
    """`platformdirs.user_runtime_dir("zocrates")`; raises RuntimeFileError when it has none to offer."""
    # Without a usable $XDG_RUNTIME_DIR platformdirs falls back to /run/user/<uid> or
    # $TMPDIR/runtime-<uid> and warns; we check whatever it picks (ensure_socket_dir), so the
    # warning would only be noise on stderr. Recent versions refuse a fallback another user made.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return Path(platformdirs.user_runtime_dir("zocrates"))
        except OSError as exc:
            raise RuntimeFileError(f"no usable runtime dir: {exc}") from None


def short_socket_dir() -> Path:
    """The socket directory used when the runtime dir is too deep (SHORT_SOCKET_PARENT)."""
    return SHORT_SOCKET_PARENT / f"zocrates-{os.geteuid()}"


def socket_path_fits(path: str | os.PathLike[str]) -> bool:
    return len(os.fsencode(path)) <= MAX_SOCKET_PATH_BYTES


def default_socket_path(data_dir: Path) -> Path:
    """The socket of `data_dir`'s daemon unless `--socket` says otherwise. The service installer
    writes this same path into the systemd socket unit and the launchd plist, so clients find a
    socket-activated daemon here before it has ever run (and written daemon.json).

    In the runtime dir when the path fits in a socket address, else in `short_socket_dir()`: the
    daemon and every client compute the same path from the same environment."""
    digest = hashlib.sha256(str(data_dir).encode()).hexdigest()[:12]
    name = f"zocratesd-{digest}.sock"
    preferred = runtime_dir() / name
    return preferred if socket_path_fits(preferred) else short_socket_dir() / name


def activation_socket(data_dir: Path) -> Path | None:
    """`default_socket_path(data_dir)` when a socket of ours is there, else None.

    With no live daemon.json, such a file is either a service manager's socket (zocratesd.socket,
    the LaunchAgent) waiting to start the daemon on the first connection, a daemon still starting,
    or a dead daemon's leftover. Only a connect() tells them apart: refused means leftover. A socket
    or directory of another uid is never one of these (someone squatting the path), so never used.
    """
    path = default_socket_path(data_dir)
    try:
        st, dir_st = os.lstat(path), os.lstat(path.parent)
    except OSError:
        return None
    if not stat.S_ISSOCK(st.st_mode) or st.st_uid != os.geteuid() or _not_our_dir(path.parent, dir_st):
        return None
    return path


# --- directories and socket paths -------------------------------------------------------------


def ensure_private_dir(path: Path, hint: str = "move it away and start again") -> None:
    """Create `path` 0700 (and any missing parent, 0700 too), or check that an existing one is ours:
    a real directory, not a symbolic link (whoever controls one can point our files elsewhere),
    owned by our uid. A group- or world-open one of ours is tightened to 0700. Anything else raises
    RuntimeFileError ending in `hint`, what the user can do; nothing not ours is changed."""
    _make_dirs(path)
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise RuntimeFileError(f"cannot use {path}: {exc.strerror}; {hint}") from None
    if problem := _not_our_dir(path, st):
        raise RuntimeFileError(f"{problem}; {hint}")
    if st.st_mode & 0o077:
        try:
            os.chmod(path, 0o700)
        except OSError as exc:
            raise RuntimeFileError(f"cannot make {path} private (chmod 0700): {exc.strerror}; {hint}") from None


def ensure_socket_dir(path: Path, *, ours: bool) -> None:
    """Make the directory a socket is bound in safe for bind, connect and unlink there.

    - `ours` (the runtime dir, `short_socket_dir()`): a private directory of ours
      (`ensure_private_dir`) in a parent where no other user can rename or replace it.
    - not `ours` (the parent of `--socket PATH`): a missing one is created 0700; an existing one is
      never changed (it may be /tmp, or a directory the user shares on purpose), only refused when
      another user could replace a socket in it (`_open_to_others`). In /tmp (sticky) our 0600
      socket is safe: nobody else can remove or rename it.
    """
    if ours:
        hint = "set XDG_RUNTIME_DIR to a short directory of yours (mode 0700), or pass --socket"
        _make_dirs(path.parent)
        _check_not_open_to_others(path.parent, hint)
        ensure_private_dir(path, hint)
        return
    hint = "pass a --socket in a directory only you can write (a missing one is created, 0700)"
    _make_dirs(path)
    _check_not_open_to_others(path, hint)


def socket_dir_problem(path: Path) -> str | None:
    """Why an existing socket directory of ours cannot be used (someone else's, a symbolic link),
    or None, also when it is missing: a read-only look for `zocratesd service install`, which
    writes the path into a unit whose manager creates the directory later."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"cannot use {path}: {exc.strerror}"
    return _not_our_dir(path, st)


def check_socket_path(path: Path) -> None:
    size = len(os.fsencode(path))
    if size > MAX_SOCKET_PATH_BYTES:
        raise RuntimeFileError(
            f"socket path {path} is {size} bytes, longer than the {MAX_SOCKET_PATH_BYTES} bytes a Unix socket "
            "address can hold; pass a shorter --socket (without --socket the default always fits)"
        )


def _make_dirs(path: Path) -> None:
    """Create `path` and its missing parents, each 0700 (`Path.mkdir(parents=True)` would give
    the parents the umask's mode). Existing ones are left as they are, for the caller to check."""
    missing: list[Path] = []
    p = path
    while not os.path.lexists(p) and p != p.parent:
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            pass  # made meanwhile by someone else: the caller's checks decide whether it will do
        except OSError as exc:
            raise RuntimeFileError(f"cannot create the directory {d}: {exc.strerror}") from None


def _not_our_dir(path: Path, st: os.stat_result) -> str | None:
    """Why `path` (its lstat) is not a directory of ours, or None."""
    if stat.S_ISLNK(st.st_mode):
        return f"{path} is a symbolic link, and zocratesd keeps its files only in a real directory"
    if not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a directory"
    if st.st_uid != os.geteuid():
        return f"{path} belongs to uid {st.st_uid}, not to you (uid {os.geteuid()})"
    return None


def _open_to_others(st: os.stat_result) -> str | None:
    """Why another user could remove or rename entries of a directory (its stat), or None.

    Owned by us or root, and writable by nobody else unless sticky (then only an entry's owner may
    remove or rename it). Group-writable is fine when the group is our own: the user-private-group
    set-up (umask 002) of many Linux systems makes every directory so."""
    if st.st_uid not in (0, os.geteuid()):
        return f"belongs to uid {st.st_uid}"
    mode = stat.S_IMODE(st.st_mode)
    open_to_others = mode & 0o002 or (mode & 0o020 and st.st_gid != os.getegid())
    if open_to_others and not mode & stat.S_ISVTX:
        return f"is writable by other users (mode {mode:04o}) and not sticky"
    return None


def _check_not_open_to_others(path: Path, hint: str) -> None:
    try:
        st = os.stat(path)  # symlinks followed: /tmp is one on macOS; what counts is the directory
    except OSError as exc:
        raise RuntimeFileError(f"cannot use {path}: {exc.strerror}; {hint}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise RuntimeFileError(f"{path} is not a directory; {hint}")
    if problem := _open_to_others(st):
        raise RuntimeFileError(f"{path} {problem}, so another user could replace a socket in it; {hint}")


# --- the single-instance lock ------------------------------------------------------------------


# How often InstanceLock.acquire tries again when the file it locked was removed meanwhile (a
# `<socket>.lock` released by a daemon just exiting); each retry means another process won a race.
LOCK_ATTEMPTS = 10


class AlreadyRunning(Exception):
    def __init__(self, lock_path: Path, pid: int | None, what: str = "this data dir"):
        self.lock_path, self.pid = lock_path, pid
        who = f"pid {pid}" if pid else "another process"
        super().__init__(f"a zocratesd ({who}) already serves {what} (lock {lock_path})")


class InstanceLock:
    """An exclusive `flock` on a lock file of ours, released by the kernel when the process dies.

    `zocratesd.lock` in the state dir (who serves a data dir) stays in place. `<socket>.lock` (who
    serves on a socket path, maybe in /tmp) is removed on release (`remove_on_release`), so after
    locking, `acquire` checks that the file it locked is still the one at the path: a process that
    locked a file just removed would otherwise think it holds the lock next to a newer holder.
    """

    def __init__(self, path: Path, *, what: str = "this data dir", remove_on_release: bool = False):
        self.path = path
        self.what = what  # for AlreadyRunning's message
        self.remove_on_release = remove_on_release
        self._fd: int | None = None

    def acquire(self) -> None:
        for _ in range(LOCK_ATTEMPTS):
            fd = self._open()
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise AlreadyRunning(self.path, read_lock_pid(self.path), self.what) from None
                raise
            if _same_file(fd, self.path):
                break
            os.close(fd)  # removed (and maybe made again) while we locked it: lock what is there now
        else:
            raise RuntimeFileError(f"{self.path} keeps being replaced while zocratesd locks it; try again")
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def _open(self) -> int:
        """The lock file, created 0600 if missing; never through a symbolic link, never another uid's."""
        flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
        try:
            fd = os.open(self.path, flags, 0o600)
        except OSError as exc:
            why = "is a symbolic link" if exc.errno == errno.ELOOP else f"cannot be opened ({exc.strerror})"
            raise RuntimeFileError(f"the lock file {self.path} {why}; remove it and start again") from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            os.close(fd)
            what = f"belongs to uid {st.st_uid}" if stat.S_ISREG(st.st_mode) else "is not a regular file"
            raise RuntimeFileError(f"the lock file {self.path} {what}; remove it or choose another path")
        return fd

    def release(self) -> None:
        if self._fd is not None:
            if self.remove_on_release and _same_file(self._fd, self.path):
                # Removed while still locked: whoever opened it before sees it gone once it locks.
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.path)
            os.close(self._fd)  # closing drops the flock
            self._fd = None


def _same_file(fd: int, path: Path) -> bool:
    try:
        st = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (held.st_dev, held.st_ino)


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


class DaemonInfo(msgspec.Struct, frozen=True):
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
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
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
