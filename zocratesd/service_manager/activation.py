"""Socket activation: listening sockets handed to us by systemd or launchd, instead of our own bind.

With socket activation the service manager owns the daemon's Unix socket: it creates it at login,
starts the daemon on the first connection, and keeps it listening while the daemon restarts or
exits when idle, so no client ever sees "connection refused".

- systemd (sd_listen_fds(3), `src/libsystemd/sd-daemon/sd-daemon.c`): the fds are 3 .. 3+N-1 where
  N is `$LISTEN_FDS`, valid only when `$LISTEN_PID` is our pid; `$LISTEN_FDNAMES` names them
  (colon-separated, one per fd: `FileDescriptorName=` of the socket unit). The variables are removed
  whatever they say, so our children never mistake our sockets for theirs, and the fds get
  FD_CLOEXEC for the same reason. The fds are duplicates the manager keeps: closing ours is fine.
- launchd: `launch_activate_socket(name, &fds, &count)` from libSystem, through ctypes, for the
  `Sockets` entry of our LaunchAgent plist. It answers ESRCH when launchd did not start us and
  ENOENT when the plist has no entry of that name; both mean "bind your own socket".

Both return an `Activation` or None (not activated); an `ActivationError` means the manager did hand
us something, but it is unusable, and the daemon must stop rather than bind over the manager's
socket. Everything here is standard library and runs before the event loop starts.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import fcntl
import logging
import os
import socket
from collections.abc import MutableMapping
from typing import Any

import msgspec

log = logging.getLogger(__name__)

# sd_listen_fds(3): passed fds start right after stdin, stdout and stderr.
SD_LISTEN_FDS_START = 3
# The name of the daemon's socket in both managers: `FileDescriptorName=` in zocratesd.socket and
# the key under `Sockets` in the LaunchAgent plist. Kept in step with the templates by a test.
SOCKET_NAME = "zocratesd"
# Names systemd gives an fd whose socket unit sets no FileDescriptorName= ("unknown" when the
# manager passes no names at all, e.g. an old systemd-socket-activate); such fds are ours too.
_UNNAMED = ("unknown",)
# A sanity bound on $LISTEN_FDS: a per-user daemon listens on one or two sockets, so a huge number
# is a corrupt environment, not thousands of descriptors to wrap.
MAX_LISTEN_FDS = 64

ENV_LISTEN_PID = "LISTEN_PID"
ENV_LISTEN_FDS = "LISTEN_FDS"
ENV_LISTEN_FDNAMES = "LISTEN_FDNAMES"
ENV_LISTEN_PIDFDID = "LISTEN_PIDFDID"  # systemd >= 256; we match on LISTEN_PID alone, as sd_listen_fds may
_LISTEN_ENV = (ENV_LISTEN_PID, ENV_LISTEN_FDS, ENV_LISTEN_FDNAMES, ENV_LISTEN_PIDFDID)


class ActivationError(Exception):
    """The manager passed sockets we cannot serve on; the message says what to check."""


class Activation(msgspec.Struct):
    """Sockets a service manager passed us, by name (several fds may share one name)."""

    manager: str  # "systemd" or "launchd"
    sockets: dict[str, list[socket.socket]] = msgspec.field(default_factory=dict)

    def take(self, name: str = SOCKET_NAME) -> list[socket.socket]:
        """Remove and return the sockets of `name` (plus unnamed ones, which can only be ours)."""
        taken = self.sockets.pop(name, [])
        for unnamed in _UNNAMED:
            taken += self.sockets.pop(unnamed, [])
        return taken

    def close_rest(self) -> None:
        """Close sockets nobody took (the manager keeps its own copies)."""
        for name, socks in self.sockets.items():
            log.warning("%s passed a socket named %r that this daemon does not serve; ignoring it", self.manager, name)
            for s in socks:
                s.close()
        self.sockets.clear()


def check_unix_listener(sock: socket.socket, what: str) -> None:
    """Raise ActivationError unless `sock` is a listening AF_UNIX stream socket."""
    try:
        listening = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
    except (OSError, AttributeError):  # SO_ACCEPTCONN is missing on some BSDs: trust the manager
        listening = 1
    if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_STREAM or not listening:
        raise ActivationError(
            f"{what} is not a listening Unix stream socket ({sock.family.name}, {sock.type.name}); "
            "the daemon serves only a Unix socket: check ListenStream= in zocratesd.socket "
            "or SockPathName in the LaunchAgent plist"
        )


def _wrap_fd(fd: int, what: str) -> socket.socket:
    try:
        fcntl.fcntl(fd, fcntl.F_SETFD, fcntl.fcntl(fd, fcntl.F_GETFD) | fcntl.FD_CLOEXEC)
        return socket.socket(fileno=fd)  # family and type are read from the fd itself
    except OSError as exc:
        raise ActivationError(f"{what} is not a usable socket: {exc.strerror or exc}") from None


# --- systemd -------------------------------------------------------------------------------------


def from_systemd(
    environ: MutableMapping[str, str] | None = None,
    pid: int | None = None,
    *,
    first_fd: int = SD_LISTEN_FDS_START,
) -> Activation | None:
    """The sockets systemd passed to this process, or None when it passed none.

    `first_fd` is the protocol's 3; tests pass another so they need not take over fd 3.
    """
    env = os.environ if environ is None else environ
    values = {key: env.pop(key, None) for key in _LISTEN_ENV}
    listen_pid, listen_fds, names_raw = values[ENV_LISTEN_PID], values[ENV_LISTEN_FDS], values[ENV_LISTEN_FDNAMES]
    if not listen_pid or not listen_fds:
        return None
    pid = os.getpid() if pid is None else pid
    try:
        if int(listen_pid) != pid:
            return None  # meant for a parent that did not clear them: not ours
        count = int(listen_fds)
    except ValueError:
        raise ActivationError(f"{ENV_LISTEN_PID}={listen_pid!r} / {ENV_LISTEN_FDS}={listen_fds!r} are not numbers") from None
    if count <= 0:
        return None
    if count > MAX_LISTEN_FDS:
        raise ActivationError(f"{ENV_LISTEN_FDS}={count} is more than the {MAX_LISTEN_FDS} a daemon can be passed")
    names = names_raw.split(":") if names_raw is not None else ["unknown"] * count
    if len(names) != count:
        raise ActivationError(f"{ENV_LISTEN_FDNAMES}={names_raw!r} names {len(names)} fds but {ENV_LISTEN_FDS}={count}")
    activation = Activation("systemd")
    for offset, name in enumerate(names):
        fd = first_fd + offset
        activation.sockets.setdefault(name or "unknown", []).append(_wrap_fd(fd, f"fd {fd} ({name or 'unnamed'})"))
    return activation


# --- launchd -------------------------------------------------------------------------------------


def load_libc() -> Any:
    """The C library that holds launch_activate_socket on macOS (libSystem); raises OSError."""
    return ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def from_launchd(name: str = SOCKET_NAME, libc: Any | None = None) -> Activation | None:
    """The sockets of `name` from our LaunchAgent's `Sockets`, or None when launchd did not start us.

    `libc` is the seam: anything with `launch_activate_socket` (a ctypes function) and `free`.
    Without it the real C library is loaded; where the symbol does not exist (Linux) that is None.
    """
    try:
        lib = load_libc() if libc is None else libc
        activate = lib.launch_activate_socket
        free = lib.free
    except (OSError, AttributeError):
        return None  # no launchd here
    activate.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.POINTER(ctypes.c_int)), ctypes.POINTER(ctypes.c_size_t)]
    activate.restype = ctypes.c_int
    free.argtypes = [ctypes.c_void_p]
    free.restype = None
    fds_ptr = ctypes.POINTER(ctypes.c_int)()
    count = ctypes.c_size_t(0)
    rc = activate(name.encode(), ctypes.byref(fds_ptr), ctypes.byref(count))
    if rc == errno.ESRCH:
        return None  # not started by launchd (a manual `zocratesd serve`)
    if rc == errno.ENOENT:
        # Started by launchd through a plist without our Sockets entry (a hand-written agent):
        # binding our own socket is what such a plist expects.
        log.info("launchd started this daemon without a %r socket; binding one instead", name)
        return None
    if rc != 0:
        raise ActivationError(f"launch_activate_socket({name!r}) failed: {os.strerror(rc)} (errno {rc})")
    try:
        fds = [fds_ptr[i] for i in range(count.value)]
    finally:
        if fds_ptr:
            free(ctypes.cast(fds_ptr, ctypes.c_void_p))
    if not fds:
        return None
    activation = Activation("launchd")
    activation.sockets[name] = [_wrap_fd(fd, f"launchd socket {name!r} (fd {fd})") for fd in fds]
    return activation


def activated_sockets() -> Activation | None:
    """systemd's sockets if it passed any (on any OS), else launchd's on macOS, else None."""
    found = from_systemd()
    if found is None and os.uname().sysname == "Darwin":
        found = from_launchd()
    return found
