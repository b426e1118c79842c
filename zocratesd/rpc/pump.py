"""`zocratesd stdio`: an editor's ACP stdio, pumped byte for byte to the daemon's Unix socket.

The socket speaks the same NDJSON as stdio, so nothing is parsed here. This module imports only
the standard library and `zocratesd.locations`: an editor starts it for every chat panel, and its
first `initialize` answer must come at once when the daemon is already up (its budget: bench/PROFILE.md).

- The daemon is found through `<data>/zocrates-data/daemon.json`. Without a live one, the data
  dir's socket is tried next: under systemd or launchd (`zocratesd service install`) the service
  manager listens there and starts the daemon on our connection, so we use that connection and
  wait until the daemon has written daemon.json. Only when nothing listens there either is
  `zocratesd serve` started detached (its own session, stdio to /dev/null, logs in its log file)
  and we wait for it to be ready, saying so on stderr (the daemon outlives us: the user must
  hear that it runs, and how to stop it). Two editors starting at once are fine: the second daemon loses
  the instance lock and exits, and both pumps connect to the winner.
- stdin EOF half-closes the socket (SHUT_WR); whatever the daemon still sends is forwarded, and
  the pump exits 0 when the daemon closes its side. That is when nothing more can come: the editor
  can send nothing, and the daemon closes a connection whose input has ended as soon as it has
  answered every request read from it (rpc/peer.py), never asking it anything meanwhile (it could
  not answer: a research checkpoint then ends its turn `cancelled`, the checkpoint left pending).
  The pump parses nothing to know this; only the daemon knows what it still owes.
- If the daemon goes away while the editor still talks, the pump says so on stderr and exits 1,
  so the editor shows an error instead of hanging.
- stdout carries frames only; every message of ours goes to stderr.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from zocratesd import locations

# How long to wait for a daemon we started: importing ADK alone takes 1-2 s on a 2-core machine
# (research/adk.md, cold start); 60 s leaves room for a slow disk and a first-time table set-up.
START_TIMEOUT_S = 60.0
POLL_INTERVAL_S = 0.02
CHUNK_BYTES = 256 * 1024
# How much of the log's end to search for the reason a daemon we started gave for exiting: its
# last lines, not a rotated-in history.
START_FAILURE_READ_BYTES = 64 * 1024


class PumpError(Exception):
    pass


def connect_unix(path: str) -> socket.socket:
    """A connected Unix stream socket (not inherited by children), or the OSError."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError:
        sock.close()
        raise
    return sock


def _start_daemon(data_dir: Path, serve_args: list[str]) -> subprocess.Popen[bytes]:
    """`zocratesd serve` detached. Its stderr is appended to its log file: a daemon that cannot
    start (a broken zocrates_config.json) says why before its logging is set up, and the error we
    report points at that file."""
    cmd = [sys.executable, "-m", "zocratesd", "serve", "--zotero-data-dir", str(data_dir), *serve_args]
    state = locations.state_dir(data_dir)
    locations.ensure_private_dir(state)
    log = state / locations.LOG_NAME
    try:
        # O_NOFOLLOW: the log is ours; a symbolic link in its place must not send the daemon's stderr elsewhere.
        log_fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        raise PumpError(f"cannot open the daemon's log {log}: {exc.strerror}") from None
    try:
        return subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log_fd,
            start_new_session=True,
            close_fds=True,
        )
    except OSError as exc:
        raise PumpError(f"cannot start {sys.executable} -m zocratesd serve: {exc.strerror or exc}") from None
    finally:
        os.close(log_fd)


def _connect_activated(data_dir: Path) -> socket.socket | None:
    """A connection to the socket a service manager holds for `data_dir`, once its daemon runs.

    Returns None when no socket file is there or nothing listens on it (a dead daemon's leftover).
    Our connection is what makes the manager start the daemon; it waits in the socket's backlog and
    is accepted once the daemon serves. We return only after daemon.json says the daemon runs, so
    callers that look daemon.json up next (the client library) find it.
    """
    path = locations.activation_socket(data_dir)
    if path is None:
        return None
    try:
        sock = connect_unix(str(path))
    except OSError:
        return None
    log = locations.state_dir(data_dir) / locations.LOG_NAME
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if locations.live_daemon(data_dir) is not None:
            return sock
        if _closed_by_peer(sock):  # the manager gave up (the daemon failed to start, repeatedly)
            sock.close()
            raise PumpError(f"the service manager closed the connection on {path}: zocratesd failed to start; see {log}")
        time.sleep(POLL_INTERVAL_S)
    sock.close()
    raise PumpError(
        f"{path} accepted the connection, but no zocratesd started for {data_dir} within {START_TIMEOUT_S:.0f} s; "
        f"see `zocratesd service status` and {log}"
    )


def _closed_by_peer(sock: socket.socket) -> bool:
    """Whether the other end closed or reset `sock` (the daemon never speaks first, so any EOF is that)."""
    try:
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def connect_to_daemon(
    data_dir: Path,
    *,
    start: bool = True,
    serve_args: list[str] | None = None,
    on_start: Callable[[int, Path], None] | None = None,
) -> socket.socket:
    """A connected socket to the daemon of `data_dir`: the live one, else a socket-activated one,
    else (when `start`) one we start. `on_start(pid, log)` is called once one we started is ready
    (so the user hears that a daemon now runs in the background, and where it logs)."""
    info = locations.live_daemon(data_dir)
    if info is not None:
        try:
            return connect_unix(info.socket)
        except OSError:
            pass  # alive but not accepting yet (or shutting down): fall through and wait
    activated = _connect_activated(data_dir)
    if activated is not None:
        return activated
    if not start:
        raise PumpError(f"no zocratesd is running for {data_dir}")
    proc = None
    log = locations.state_dir(data_dir) / locations.LOG_NAME
    log_start = _file_size(log)
    lock = locations.state_dir(data_dir) / locations.LOCK_NAME
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        # The lock held: a daemon is starting (ours waits for it), or one is still exiting (killed
        # a moment ago): once its lock is free and none serves, one is started.
        if proc is None and not locations.lock_is_held(lock):
            proc = _start_daemon(data_dir, serve_args or [])
        info = locations.live_daemon(data_dir)
        if info is not None:
            try:
                sock = connect_unix(info.socket)
            except OSError:
                pass
            else:
                if proc is not None and on_start is not None:
                    on_start(info.pid, log)  # ours, or a sibling's that won the start: one runs now
                return sock
        if proc is not None and proc.poll() is not None and not locations.lock_is_held(lock):
            reason = _start_failure_reason(log, log_start)
            raise PumpError(f"zocratesd exited with status {proc.returncode} while starting{reason}; see {log}")
        time.sleep(POLL_INTERVAL_S)
    raise PumpError(f"zocratesd did not become ready within {START_TIMEOUT_S:.0f} s")


def _file_size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _start_failure_reason(log: Path, since: int) -> str:
    """`: <why>` when a daemon we started said why it could not (its one `zocratesd: ...` line on
    stderr, which goes to its log), else ''. Read from where the log ended before the start."""
    try:
        with open(log, "rb") as f:
            f.seek(max(since, _file_size(log) - START_FAILURE_READ_BYTES))
            tail = f.read(START_FAILURE_READ_BYTES).decode(errors="replace")
    except OSError:
        return ""
    said = [line.removeprefix("zocratesd: ") for line in tail.splitlines() if line.startswith("zocratesd: ")]
    if not said:
        return ""
    return ": " + "".join(c if c.isprintable() else "?" for c in said[-1])  # the terminal sees only text


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def pump(sock: socket.socket, in_fd: int = 0, out_fd: int = 1) -> int:
    """Copy in_fd -> sock and sock -> out_fd until the daemon closes. Returns the exit code."""
    stdin_done = threading.Event()

    def upstream() -> None:
        try:
            while True:
                data = os.read(in_fd, CHUNK_BYTES)
                if not data:
                    break
                sock.sendall(data)
        except OSError:
            pass
        finally:
            stdin_done.set()
            try:
                sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    threading.Thread(target=upstream, name="stdin->daemon", daemon=True).start()
    try:
        while True:
            data = sock.recv(CHUNK_BYTES)
            if not data:
                break
            _write_all(out_fd, data)
    except BrokenPipeError:
        return 0  # the editor closed our stdout: it is gone, nothing left to do
    except OSError as exc:
        print(f"zocratesd stdio: connection to the daemon failed: {exc}", file=sys.stderr)
        return 1
    finally:
        sock.close()
    if not stdin_done.is_set():
        print("zocratesd stdio: the daemon closed the connection", file=sys.stderr)
        return 1
    return 0


def announce_start(prog: str, data_dir: Path) -> Callable[[int, Path], None]:
    """An `on_start` that says on stderr, once, that a daemon was started and how to stop it."""

    def say(pid: int, log: Path) -> None:
        print(
            f"{prog}: started zocratesd (pid {pid}) for {data_dir}; it keeps running in the background "
            f"(log: {log}; stop it with `zocratesd stop --zotero-data-dir {data_dir}`)",
            file=sys.stderr,
            flush=True,
        )

    return say


def run(data_dir: Path, serve_args: list[str] | None = None) -> int:
    try:
        sock = connect_to_daemon(data_dir, serve_args=serve_args, on_start=announce_start("zocratesd stdio", data_dir))
    except (PumpError, locations.RuntimeFileError) as exc:
        print(f"zocratesd stdio: {exc}", file=sys.stderr)
        return 1
    return pump(sock)
