"""The running instance of a daemon: its lock, its socket path and its daemon.json.

`zocratesd/locations.py` says where these files are and how a client reads them; this module is
the daemon's side: it takes the lock, claims (or adopts) the socket path, writes daemon.json once
the daemon serves, and on the way out removes what it made, in reverse order, the lock last.

Two locks, taken in this order: the data dir's (`zocratesd.lock`: one daemon per data dir) and the
socket path's (`<socket>.lock`: one daemon per socket, whatever its data dir). The second is held
from before we look at the socket path until after we removed our socket, so a daemon never
removes a socket another daemon serves on.
"""

from __future__ import annotations

import logging
import os
import socket
import stat
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from zocratesd import __version__, locations
from zocratesd.process.logs import PROCESS_LOGGER

log = logging.getLogger(PROCESS_LOGGER)

# How long a connect() may take to tell whether something listens on a leftover socket file. A live
# listener answers at once; only a full backlog makes it wait, and that too means "in use".
SOCKET_PROBE_TIMEOUT_S: Final = 1.0
# The listen() backlog of our socket: the kernel caps it (net.core.somaxconn, kern.ipc.somaxconn),
# so this asks for as many waiting connections as the system allows, as anyio's listener does.
LISTEN_BACKLOG: Final = 65536


class Instance:
    """The files of the one daemon serving a data dir, removed in reverse order by `close()`."""

    def __init__(self, data_dir: Path):
        self.data_dir = data_dir
        self.state = locations.state_dir(data_dir)
        self.lock = locations.InstanceLock(self.state / locations.LOCK_NAME)
        self.info_path = self.state / locations.INFO_NAME
        self.socket_path: Path | None = None
        # True once we bound the socket file: then it is ours to remove (a manager's never is).
        self.owns_socket = False
        self.socket_lock: locations.InstanceLock | None = None
        self.activated_by: str | None = None

    def acquire(self) -> None:
        """Take the instance lock; raises locations.AlreadyRunning (naming the holder's pid)."""
        locations.ensure_private_dir(self.state)
        self.lock.acquire()

    def claim_socket(self, path: Path, *, private_dir: bool = False) -> None:
        """Make `path` ours to bind (`bind()`): take its lock, then remove a dead daemon's socket
        there; refuse anything else. `private_dir`: the directory is our own (the default location,
        made private if need be), else the user's (`--socket`), created if missing, never changed."""
        locations.check_socket_path(path)
        locations.ensure_socket_dir(path.parent, ours=private_dir)
        lock = locations.InstanceLock(Path(f"{path}.lock"), what=f"the socket {path}", remove_on_release=True)
        try:
            lock.acquire()
        except locations.AlreadyRunning as exc:
            raise locations.RuntimeFileError(f"{exc}; stop it or pass another --socket") from None
        self.socket_lock = lock
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            pass
        else:
            if not stat.S_ISSOCK(st.st_mode):
                raise locations.RuntimeFileError(
                    f"{path} exists and is not a socket; remove it or pass another --socket"
                )
            if st.st_uid != os.geteuid():
                raise locations.RuntimeFileError(
                    f"{path} is a socket of uid {st.st_uid}, not yours; pass another --socket"
                )
            # We hold its lock, so no zocratesd listens here. Something listening anyway is a
            # service manager's socket (zocratesd.socket, the LaunchAgent): unlinking it would cut
            # every client off from autostart. (Our probe makes the manager start its daemon; that
            # one waits for our lock, which we release right away, and then serves.)
            if is_listening(path):
                raise locations.RuntimeFileError(
                    f"{path} is already listening: the zocratesd.socket unit or the launchd agent holds it "
                    "(`zocratesd service status`), and clients reach the daemon through it. To run one by hand, "
                    "stop it first (`systemctl --user stop zocratesd.socket`, or `launchctl bootout "
                    "gui/$UID/org.zocrates.zocratesd`), or pass another --socket"
                )
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise locations.RuntimeFileError(f"cannot remove the stale socket {path}: {exc.strerror}") from None
            log.info("removed a stale socket left by a previous daemon: %s", path)
        self.socket_path = path

    def bind(self) -> socket.socket:
        """A listening socket (0600, non-blocking) at the path `claim_socket` made ours.

        Bound here rather than by anyio's create_unix_listener, which first removes whatever socket
        is at the path, a live one too: a file that appeared since the claim makes this fail instead.
        """
        path, lock = self.socket_path, self.socket_lock
        assert path is not None and lock is not None, "claim_socket() first"
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(str(path))
            self.owns_socket = True  # our file from here on: close() removes it
            os.chmod(path, 0o600)  # the umask (0077, boot.py) already left no one else in meanwhile
            sock.listen(LISTEN_BACKLOG)
            sock.setblocking(False)
        except OSError as exc:
            sock.close()
            raise locations.RuntimeFileError(f"cannot listen on {path}: {exc.strerror or exc}") from None
        return sock

    def adopt_socket(self, sock: socket.socket, manager: str) -> None:
        """Serve on a socket a service manager created; it stays the manager's."""
        self.socket_path = _socket_name(sock)
        self.owns_socket = False
        self.activated_by = manager

    def write_info(self, http: dict[str, Any] | None = None, token: str | None = None, plugin_token: str | None = None) -> None:
        """Write daemon.json: from now on a client that finds it can connect at once."""
        locations.write_private_json(
            self.info_path,
            {
                "pid": os.getpid(),
                "socket": str(self.socket_path) if self.socket_path else None,
                "protocol_version": locations.PROTOCOL_VERSION,
                "version": __version__,
                "started_at": datetime.now(UTC).isoformat(),
                "http": http,
                "token": token,
                "plugin_token": plugin_token,
                "activated_by": self.activated_by,
            },
        )

    def close(self) -> None:
        """Remove our daemon.json and the socket we bound (a manager's is its own), then release the lock."""
        info = locations.read_daemon_info(self.data_dir)
        if info is not None and info.pid == os.getpid():
            self.info_path.unlink(missing_ok=True)
        if self.socket_path is not None and self.owns_socket:
            self.socket_path.unlink(missing_ok=True)
        if self.socket_lock is not None:
            self.socket_lock.release()  # only now: until the socket is gone, the path is still ours
        self.lock.release()


def is_listening(path: Path) -> bool:
    """Whether a process accepts connections on the Unix socket file `path`."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(SOCKET_PROBE_TIMEOUT_S)
    try:
        probe.connect(str(path))
    except ConnectionRefusedError:
        return False  # a file nobody listens on: what a killed daemon leaves
    except OSError:
        return True  # a full backlog (EAGAIN, timeout) or no permission: in use, not ours to remove
    finally:
        probe.close()
    return True


def _socket_name(sock: socket.socket) -> Path:
    name = sock.getsockname()
    if isinstance(name, bytes):  # Linux abstract namespace: b"\0name", written the systemd way
        name = "@" + name[1:].decode(errors="replace") if name.startswith(b"\0") else os.fsdecode(name)
    return Path(name)
