"""`zocratesd serve` and `zocratesd stdio --standalone`: the daemon process around the core.

Start-up order matters, and each step says why:
1. the config is loaded first, so a broken zocrates_config.json fails before anything is touched;
2. the instance lock is taken before the socket is touched: whoever holds it knows any socket or
   daemon.json on disk is stale (a crashed daemon), so removing them cannot hurt a live one;
3. the store is prepared, then the socket bound, and only then daemon.json is written: a client
   that finds daemon.json can connect at once.
Shutdown (SIGTERM, SIGINT) cancels the root task group; daemon.json and the socket are removed,
the store closed, the lock released last.
"""

from __future__ import annotations

import faulthandler
import gc
import logging
import logging.handlers
import os
import signal
import socket
import struct
import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from zocratesd import __version__, runtime
from zocratesd.config import ConfigError, ZocratesConfig, load_config

log = logging.getLogger("zocratesd")

# The log file beside the store: 5 files of 5 MiB keep weeks of a daemon's life in 25 MiB.
LOG_FILE_BYTES = 5 * 1024 * 1024
LOG_FILE_COUNT = 5
# On SIGTERM, requests in flight get this long to finish before they are cancelled. systemd's
# default TimeoutStopSec is 90 s; 10 s keeps `zocratesd stop` snappy and still lets any write end.
SHUTDOWN_GRACE_S = 10.0


@dataclass
class ServeOptions:
    data_dir: Path
    socket_path: Path | None = None
    overrides: dict[str, Any] = field(default_factory=dict)
    log_level: str = "INFO"


def setup_logging(data_dir: Path, level: str) -> None:
    """Logs go to stderr and to `zocrates-data/zocratesd.log`; never to stdout (stdio carries frames)."""
    root = logging.getLogger()
    root.setLevel(level)
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    for h in list(root.handlers):
        root.removeHandler(h)
    err = logging.StreamHandler(sys.stderr)
    err.setFormatter(fmt)
    root.addHandler(err)
    try:
        runtime.ensure_private_dir(runtime.state_dir(data_dir))
        fileh = logging.handlers.RotatingFileHandler(
            runtime.state_dir(data_dir) / runtime.LOG_NAME, maxBytes=LOG_FILE_BYTES, backupCount=LOG_FILE_COUNT
        )
        fileh.setFormatter(fmt)
        root.addHandler(fileh)
    except OSError as exc:  # a read-only data dir still gets a daemon, logging to stderr only
        log.warning("cannot write the log file: %s", exc)


def peer_uid(sock: socket.socket) -> int | None:
    """The uid of the process at the other end of a Unix socket (Linux SO_PEERCRED, BSD/macOS getpeereid)."""
    if hasattr(socket, "SO_PEERCRED"):
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _pid, uid, _gid = struct.unpack("3i", creds)
        return uid
    try:  # pragma: no cover - macOS/BSD
        import ctypes
        import ctypes.util

        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        uid_t, gid_t = ctypes.c_uint32(), ctypes.c_uint32()
        if libc.getpeereid(sock.fileno(), ctypes.byref(uid_t), ctypes.byref(gid_t)) == 0:
            return int(uid_t.value)
    except (OSError, AttributeError):
        pass
    return None


class _Runtime:
    """The files of a running daemon, removed in reverse order on the way out."""

    def __init__(self, data_dir: Path):
        self.data_dir = data_dir
        self.state = runtime.state_dir(data_dir)
        self.lock = runtime.InstanceLock(self.state / runtime.LOCK_NAME)
        self.info_path = self.state / runtime.INFO_NAME
        self.socket_path: Path | None = None

    def acquire(self) -> None:
        runtime.ensure_private_dir(self.state)
        self.lock.acquire()

    def bind_path(self, path: Path) -> None:
        runtime.ensure_private_dir(path.parent)
        runtime.check_socket_path(path)
        # We hold the lock: a socket file here was left by a daemon that died. Remove it, but
        # never something that is not a socket (a user's file at a mistyped --socket path).
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            pass
        else:
            import stat as _stat

            if not _stat.S_ISSOCK(st.st_mode):
                raise runtime.RuntimeFileError(f"{path} exists and is not a socket; remove it or pass another --socket")
            os.unlink(path)
            log.info("removed a stale socket left by a previous daemon: %s", path)
        self.socket_path = path

    def write_info(self, http: dict[str, Any] | None = None, token: str | None = None) -> None:
        runtime.write_private_json(
            self.info_path,
            {
                "pid": os.getpid(),
                "socket": str(self.socket_path) if self.socket_path else None,
                "protocol_version": runtime.PROTOCOL_VERSION,
                "version": __version__,
                "started_at": datetime.now(timezone.utc).isoformat(),
                "http": http,
                "token": token,
            },
        )

    def cleanup(self) -> None:
        info = runtime.read_daemon_info(self.data_dir)
        if info is not None and info.pid == os.getpid():
            self.info_path.unlink(missing_ok=True)
        if self.socket_path is not None:
            try:
                self.socket_path.unlink()
            except FileNotFoundError:
                pass
        self.lock.release()


async def _wait_for_signal() -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            log.info("received %s; shutting down", signal.Signals(signum).name)
            return


class Connections:
    """The live peers of a daemon, so shutdown can drain them."""

    def __init__(self, methods: dict[str, Any], config: ZocratesConfig):
        self.methods = methods
        self.config = config
        self.peers: set[Any] = set()
        self.idle = anyio.Event()
        self.idle.set()

    async def serve_socket(self, stream: anyio.abc.SocketStream) -> None:
        raw = stream.extra(anyio.abc.SocketAttribute.raw_socket)
        uid = peer_uid(raw)
        if uid != os.getuid():
            log.warning("refused a connection from uid %s (this daemon serves uid %s)", uid, os.getuid())
            await stream.aclose()
            return
        await self.serve(stream, f"socket:{raw.fileno()}")

    async def serve(self, stream: anyio.abc.ByteStream, name: str) -> None:
        from zocratesd.rpc.peer import Peer

        peer = Peer(stream, self.methods, max_frame_bytes=self.config.rpc.max_frame_bytes, name=name)
        self.peers.add(peer)
        self.idle = anyio.Event() if self.idle.is_set() else self.idle
        try:
            await peer.run()
        except Exception:  # one broken connection must never take the daemon down
            log.exception("%s: connection failed", name)
        finally:
            self.peers.discard(peer)
            if not self.peers:
                self.idle.set()

    async def drain(self, grace_s: float) -> None:
        """Stop reading from every peer and give their requests in flight `grace_s` to finish."""
        for peer in list(self.peers):
            peer.stop_reading()
        with anyio.move_on_after(grace_s) as scope:
            await self.idle.wait()
        if scope.cancelled_caught:
            log.warning("%d connection(s) still busy after %.0f s; cancelling them", len(self.peers), grace_s)


def _freeze_startup_heap() -> None:
    """Move everything allocated so far (ADK, SQLAlchemy, pydantic: ~100 MiB of long-lived
    objects) out of the garbage collector's sight. Without it, the ~300k short-lived objects of
    showing one long session trigger full collections that rescan that whole heap: measured
    185 ms -> 122 ms for a 5000-event session (bench/bench_store.py)."""
    gc.collect()
    gc.freeze()


def _load_config_or_exit(opts: ServeOptions) -> ZocratesConfig:
    try:
        return load_config(opts.data_dir, opts.overrides)
    except ConfigError as exc:
        print(f"zocratesd: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


async def serve(opts: ServeOptions) -> int:
    """Run the daemon until SIGTERM/SIGINT. Returns the process exit code."""
    config = _load_config_or_exit(opts)
    os.umask(0o077)  # the store, logs and temp files hold the user's conversations: theirs alone
    setup_logging(opts.data_dir, opts.log_level)
    # `kill -USR1 <pid>` prints every thread's stack to stderr: how to see where a stuck daemon is.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    rt = _Runtime(opts.data_dir)
    try:
        rt.acquire()
    except runtime.AlreadyRunning as exc:
        print(f"zocratesd: {exc}; use `zocratesd status` or `zocratesd stop`", file=sys.stderr)
        return 1
    except runtime.RuntimeFileError as exc:
        print(f"zocratesd: {exc}", file=sys.stderr)
        return 1
    try:
        return await _serve_locked(opts, config, rt)
    except runtime.RuntimeFileError as exc:
        print(f"zocratesd: {exc}", file=sys.stderr)
        return 1
    finally:
        rt.cleanup()
        log.info("stopped")


async def _serve_locked(opts: ServeOptions, config: ZocratesConfig, rt: _Runtime) -> int:
    from zocratesd.daemon import Daemon
    from zocratesd.rpc.acp import build_methods

    daemon = Daemon(opts.data_dir, config)
    try:
        await daemon.start()
        methods = build_methods(daemon)
        _freeze_startup_heap()
        rt.bind_path(opts.socket_path or runtime.default_socket_path(opts.data_dir))
        assert rt.socket_path is not None
        listener = await anyio.create_unix_listener(rt.socket_path, mode=0o600)
        conns = Connections(methods, config)
        async with anyio.create_task_group() as tg:
            async with anyio.create_task_group() as accepting:
                accepting.start_soon(listener.serve, conns.serve_socket, tg)
                rt.write_info()
                log.info(
                    "zocratesd %s serving %s on %s (pid %d, model %s)",
                    __version__, opts.data_dir, rt.socket_path, os.getpid(), config.model.provider,
                )
                await _wait_for_signal()
                accepting.cancel_scope.cancel()
            await listener.aclose()
            await conns.drain(SHUTDOWN_GRACE_S)
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await daemon.aclose()
    return 0


# --- stdio, in-process ------------------------------------------------------------------------


class _FdStream(anyio.abc.ByteStream):
    """stdin/stdout as one anyio byte stream; blocking fd I/O runs in worker threads."""

    def __init__(self, rfd: int, wfd: int):
        self._rfd, self._wfd = rfd, wfd

    async def receive(self, max_bytes: int = 65536) -> bytes:
        data = await anyio.to_thread.run_sync(os.read, self._rfd, max_bytes, abandon_on_cancel=True)
        if not data:
            raise anyio.EndOfStream
        return data

    async def send(self, item: bytes) -> None:
        view = memoryview(item)
        while view:
            n = await anyio.to_thread.run_sync(os.write, self._wfd, view)
            view = view[n:]

    async def send_eof(self) -> None:
        os.close(self._wfd)

    async def aclose(self) -> None:
        pass


async def serve_stdio_standalone(opts: ServeOptions) -> int:
    """ACP on this process's stdin/stdout with the core in-process (no socket, no other daemon)."""
    from zocratesd.daemon import Daemon
    from zocratesd.rpc.acp import build_methods
    from zocratesd.rpc.peer import Peer

    # fd 1 carries frames only: keep a private handle on it, and point sys.stdout at stderr so a
    # stray print() anywhere (ours or a library's) cannot corrupt the stream.
    out_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    config = _load_config_or_exit(opts)
    os.umask(0o077)
    setup_logging(opts.data_dir, opts.log_level)
    rt = _Runtime(opts.data_dir)
    try:
        rt.acquire()
    except runtime.AlreadyRunning as exc:
        print(f"zocratesd: {exc}; drop --standalone to talk to it", file=sys.stderr)
        return 1
    daemon = Daemon(opts.data_dir, config)
    try:
        await daemon.start()
        conns = Connections(build_methods(daemon), config)
        _freeze_startup_heap()
        async with anyio.create_task_group() as tg:

            async def on_signal() -> None:
                await _wait_for_signal()
                await conns.drain(SHUTDOWN_GRACE_S)
                tg.cancel_scope.cancel()

            tg.start_soon(on_signal)
            await conns.serve(_FdStream(0, out_fd), "stdio")
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await daemon.aclose()
        rt.cleanup()
    return 0
