"""`zocratesd serve` and `zocratesd stdio --standalone`: the daemon process around the core.

Start-up order matters, and each step says why:
1. the config is loaded first, so a broken zocrates_config.json fails before anything is touched;
2. sockets passed by a service manager (systemd, launchd) are taken before anything else runs, and
   the variables that named them removed (service/activation.py);
3. the instance lock is taken before the socket is touched: whoever holds it knows any socket or
   daemon.json on disk is stale (a crashed daemon), so removing them cannot hurt a live one;
4. the store is prepared, then the socket bound (or the manager's socket adopted) and the HTTP
   shim's loopback port bound (zocratesd/shim/), and only then daemon.json is written (with the
   port and a fresh bearer token) and READY=1 sent: a client that finds daemon.json can connect at once.
Shutdown (SIGTERM, SIGINT, or --idle-exit-after when socket-activated) stops accepting, sends
STOPPING=1, stops the HTTP shim accepting, lets requests in flight (HTTP turns too) finish
(bounded), then cancels the root task group; daemon.json and a socket we bound are removed (a
manager's socket is its own), the store closed, the lock released last.
"""

from __future__ import annotations

import errno
import faulthandler
import gc
import logging
import logging.handlers
import os
import signal
import socket
import stat
import struct
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from zocratesd import __version__, locations
from zocratesd.config import ConfigError, ZocratesConfig, load_config
from zocratesd.service_manager.activation import Activation, ActivationError, activated_sockets, check_unix_listener
from zocratesd.service_manager.notify import Notifier

log = logging.getLogger("zocratesd")

# The log file beside the store: 5 files of 5 MiB keep weeks of a daemon's life in 25 MiB.
LOG_FILE_BYTES = 5 * 1024 * 1024
LOG_FILE_COUNT = 5
# On SIGTERM, requests in flight get this long to finish before they are cancelled. systemd's
# default TimeoutStopSec is 90 s; 10 s keeps `zocratesd stop` snappy and still lets any write end.
SHUTDOWN_GRACE_S = 10.0
# accept() failing for lack of descriptors or memory is transient: wait and retry instead of dying.
# 100 ms is Trio's choice in serve_listeners (ACCEPT_CAPACITY_ERRNOS, SLEEP_TIME).
ACCEPT_CAPACITY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
ACCEPT_RETRY_S = 0.1
# How long a connect() may take to tell whether something listens on a leftover socket file. A live
# listener answers at once; only a full backlog makes it wait, and that too means "in use".
SOCKET_PROBE_TIMEOUT_S = 1.0


@dataclass
class ServeOptions:
    data_dir: Path
    socket_path: Path | None = None
    overrides: dict[str, Any] = field(default_factory=dict)
    log_level: str = "INFO"
    # Socket-activated only: exit 0 once no connection has been open for this long (the manager
    # keeps the socket and starts a new daemon on the next connection).
    idle_exit_after: float | None = None


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
        locations.ensure_private_dir(locations.state_dir(data_dir))
        fileh = logging.handlers.RotatingFileHandler(
            locations.state_dir(data_dir) / locations.LOG_NAME, maxBytes=LOG_FILE_BYTES, backupCount=LOG_FILE_COUNT
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
        self.state = locations.state_dir(data_dir)
        self.lock = locations.InstanceLock(self.state / locations.LOCK_NAME)
        self.info_path = self.state / locations.INFO_NAME
        self.socket_path: Path | None = None
        # False when a service manager owns the socket: it must outlive us, so we never unlink it.
        self.owns_socket = False
        self.activated_by: str | None = None

    def acquire(self) -> None:
        locations.ensure_private_dir(self.state)
        self.lock.acquire()

    def claim_path(self, path: Path) -> None:
        """Make `path` free for our bind: remove a dead daemon's socket, refuse anything else."""
        locations.ensure_private_dir(path.parent)
        locations.check_socket_path(path)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            pass
        else:
            if not stat.S_ISSOCK(st.st_mode):
                raise locations.RuntimeFileError(f"{path} exists and is not a socket; remove it or pass another --socket")
            # We hold the lock, so no zocratesd listens here. Something listening anyway is a
            # service manager's socket (zocratesd.socket, the LaunchAgent): unlinking it would cut
            # every client off from autostart. (Our probe makes the manager start its daemon; that
            # one waits for our lock, which we release right away, and then serves.)
            if _is_listening(path):
                raise locations.RuntimeFileError(
                    f"{path} is already listening: the zocratesd.socket unit or the launchd agent holds it "
                    "(`zocratesd service status`), and clients reach the daemon through it. To run one by hand, "
                    "stop it first (`systemctl --user stop zocratesd.socket`, or `launchctl bootout "
                    "gui/$UID/org.zocrates.zocratesd`), or pass another --socket"
                )
            os.unlink(path)
            log.info("removed a stale socket left by a previous daemon: %s", path)
        self.socket_path = path
        self.owns_socket = True

    def adopt(self, path: Path, manager: str) -> None:
        """Serve on a socket a service manager created; it stays the manager's."""
        self.socket_path = path
        self.owns_socket = False
        self.activated_by = manager

    def write_info(self, http: dict[str, Any] | None = None, token: str | None = None) -> None:
        locations.write_private_json(
            self.info_path,
            {
                "pid": os.getpid(),
                "socket": str(self.socket_path) if self.socket_path else None,
                "protocol_version": locations.PROTOCOL_VERSION,
                "version": __version__,
                "started_at": datetime.now(timezone.utc).isoformat(),
                "http": http,
                "token": token,
                "activated_by": self.activated_by,
            },
        )

    def cleanup(self) -> None:
        info = locations.read_daemon_info(self.data_dir)
        if info is not None and info.pid == os.getpid():
            self.info_path.unlink(missing_ok=True)
        if self.socket_path is not None and self.owns_socket:
            try:
                self.socket_path.unlink()
            except FileNotFoundError:
                pass
        self.lock.release()


def _is_listening(path: Path) -> bool:
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


async def _wait_for_signal() -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            log.info("received %s; shutting down", signal.Signals(signum).name)
            return


class Connections:
    """The live connections of a daemon: served, counted for idle exit, drained at shutdown.

    A connection counts from the moment accept() returns it (`opened()`, called before its task
    starts) until its peer has answered or cancelled every request (`Peer.run` returns only then).
    So "no connection open" also means "no request in flight", and the idle check, which runs in
    the same event loop, can never see a connection that is accepted but not yet counted.
    """

    def __init__(self, methods: dict[str, Any], config: ZocratesConfig):
        self.methods = methods
        self.config = config
        self.peers: set[Any] = set()
        self.open = 0
        self.idle = anyio.Event()
        self.idle.set()
        self.idle_since = anyio.current_time()
        self.draining = False
        self._activity = anyio.Event()

    def opened(self) -> None:
        self.open += 1
        if self.idle.is_set():
            self.idle = anyio.Event()
        self._activity.set()

    def closed(self) -> None:
        self.open -= 1
        if self.open == 0:
            self.idle_since = anyio.current_time()
            self.idle.set()

    async def serve_socket(self, stream: anyio.abc.SocketStream) -> None:
        """Serve an accepted connection; the caller has already counted it with `opened()`."""
        try:
            raw = stream.extra(anyio.abc.SocketAttribute.raw_socket)
            uid = peer_uid(raw)
            if uid != os.getuid():
                log.warning("refused a connection from uid %s (this daemon serves uid %s)", uid, os.getuid())
                await stream.aclose()
                return
            await self._run_peer(stream, f"socket:{raw.fileno()}")
        finally:
            self.closed()

    async def serve(self, stream: anyio.abc.ByteStream, name: str) -> None:
        self.opened()
        try:
            await self._run_peer(stream, name)
        finally:
            self.closed()

    async def _run_peer(self, stream: anyio.abc.ByteStream, name: str) -> None:
        from zocratesd.rpc.peer import Peer

        if self.draining:  # accepted in the last instant before shutdown: nothing read yet, close it
            await stream.aclose()
            return
        peer = Peer(stream, self.methods, max_frame_bytes=self.config.rpc.max_frame_bytes, name=name)
        self.peers.add(peer)
        try:
            await peer.run()
        except Exception:  # one broken connection must never take the daemon down
            log.exception("%s: connection failed", name)
        finally:
            self.peers.discard(peer)

    async def wait_idle_for(self, seconds: float) -> None:
        """Return once no connection has been open for `seconds` in a row.

        It returns without awaiting after its last check, so a caller that stops accepting right
        away (same event-loop step) cannot lose a connection accepted in between.
        """
        while True:
            if self.open:
                await self.idle.wait()
                continue
            remaining = self.idle_since + seconds - anyio.current_time()
            if remaining <= 0:
                return
            self._activity = anyio.Event()
            with anyio.move_on_after(remaining):
                await self._activity.wait()

    async def drain(self, grace_s: float) -> None:
        """Stop reading from every peer and give their requests in flight `grace_s` to finish."""
        self.draining = True
        for peer in list(self.peers):
            peer.stop_reading()
        with anyio.move_on_after(grace_s) as scope:
            await self.idle.wait()
        if scope.cancelled_caught:
            log.warning("%d connection(s) still busy after %.0f s; cancelling them", self.open, grace_s)


async def _accept_loop(listener: anyio.abc.SocketListener, conns: Connections, tg: anyio.abc.TaskGroup) -> None:
    """Accept until cancelled; each connection is counted before anything else can run."""
    while True:
        try:
            stream = await listener.accept()
        except anyio.ClosedResourceError:
            return
        except anyio.BrokenResourceError as exc:
            cause = exc.__cause__
            if isinstance(cause, OSError) and cause.errno in ACCEPT_CAPACITY_ERRNOS:
                log.warning("accept failed (%s); retrying in %.1f s", cause.strerror, ACCEPT_RETRY_S)
                await anyio.sleep(ACCEPT_RETRY_S)
                continue
            raise
        conns.opened()
        tg.start_soon(conns.serve_socket, stream)


async def _stop_on_signal(signals: Any, scope: anyio.CancelScope) -> None:
    async for signum in signals:
        log.info("received %s; shutting down", signal.Signals(signum).name)
        scope.cancel()
        return


async def _stop_when_idle(conns: Connections, seconds: float, scope: anyio.CancelScope) -> None:
    await conns.wait_idle_for(seconds)
    scope.cancel()  # same step as the idle check: no accept can slip in between
    log.info("no connection for %g s; exiting (the service manager starts a daemon on the next one)", seconds)


async def _watchdog(notifier: Notifier, interval_s: float) -> None:
    """WATCHDOG=1 from the event loop itself: if the loop hangs, the pings stop and systemd restarts us."""
    while True:
        notifier.watchdog()
        await anyio.sleep(interval_s)


async def _warm_up() -> None:
    """Pay ADK's lazy imports now, in the background, not on the user's first turn."""
    from zocratesd.engine import warm_up

    started = time.monotonic()
    try:
        await warm_up()
    except Exception:  # a failed warm-up only means a slower first turn
        log.debug("warm-up turn failed", exc_info=True)
    else:
        log.debug("warmed up in %.0f ms", (time.monotonic() - started) * 1000)


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
    """Run the daemon until SIGTERM/SIGINT (or idle exit). Returns the process exit code."""
    config = _load_config_or_exit(opts)
    os.umask(0o077)  # the store, logs and temp files hold the user's conversations: theirs alone
    setup_logging(opts.data_dir, opts.log_level)
    # `kill -USR1 <pid>` prints every thread's stack to stderr: how to see where a stuck daemon is.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    notifier = Notifier.from_environ()
    try:
        activation = activated_sockets()
    except ActivationError as exc:
        print(f"zocratesd: socket activation failed: {exc}", file=sys.stderr)
        return 1
    rt = _Runtime(opts.data_dir)
    try:
        rt.acquire()
    except locations.AlreadyRunning as exc:
        print(f"zocratesd: {exc}; use `zocratesd status` or `zocratesd stop`", file=sys.stderr)
        return 1
    except locations.RuntimeFileError as exc:
        print(f"zocratesd: {exc}", file=sys.stderr)
        return 1
    try:
        return await _serve_locked(opts, config, rt, activation, notifier)
    except (locations.RuntimeFileError, ActivationError) as exc:
        print(f"zocratesd: {exc}", file=sys.stderr)
        return 1
    finally:
        rt.cleanup()
        notifier.close()
        log.info("stopped")


async def _open_listeners(
    opts: ServeOptions, rt: _Runtime, activation: Activation | None
) -> list[anyio.abc.SocketListener]:
    """The manager's sockets when activated, else our own socket at the path claimed earlier."""
    if activation is None:
        assert rt.socket_path is not None
        return [await anyio.create_unix_listener(rt.socket_path, mode=0o600)]
    socks = activation.take()
    activation.close_rest()
    if not socks:
        raise ActivationError(f"{activation.manager} passed no socket named zocratesd (FileDescriptorName=zocratesd)")
    for sock in socks:
        check_unix_listener(sock, f"the socket {activation.manager} passed")
        sock.setblocking(False)  # anyio's listener accepts without blocking the event loop
    if opts.socket_path is not None:
        log.warning("--socket %s ignored: serving on the socket %s passed", opts.socket_path, activation.manager)
    rt.adopt(_socket_name(socks[0]), activation.manager)
    return [await anyio.abc.SocketListener.from_socket(sock) for sock in socks]


async def _serve_locked(
    opts: ServeOptions, config: ZocratesConfig, rt: _Runtime, activation: Activation | None, notifier: Notifier
) -> int:
    if activation is None:
        # Checked before the core is even imported, so a socket in the way fails at once.
        rt.claim_path(opts.socket_path or locations.default_socket_path(opts.data_dir))

    from zocratesd.core.daemon import Daemon
    from zocratesd.rpc.acp import build_methods

    idle_exit = opts.idle_exit_after
    if idle_exit is not None and activation is None:
        log.warning("--idle-exit-after ignored: it needs socket activation (nothing would start the daemon again)")
        idle_exit = None
    daemon = Daemon(opts.data_dir, config)
    listeners: list[anyio.abc.SocketListener] = []
    try:
        await daemon.start()
        methods = build_methods(daemon)
        _freeze_startup_heap()
        listeners = await _open_listeners(opts, rt, activation)
        conns = Connections(methods, config)
        http_face = _http_face(opts, config, daemon, conns)
        async with anyio.create_task_group() as root:
            if notifier.watchdog_interval_s:
                root.start_soon(_watchdog, notifier, notifier.watchdog_interval_s)
            async with anyio.create_task_group() as tg:
                if http_face is not None:
                    tg.start_soon(http_face.run)
                # Signals are caught from here on, before READY=1: a manager may stop us right after.
                with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                    async with anyio.create_task_group() as accepting:
                        for listener in listeners:
                            accepting.start_soon(_accept_loop, listener, conns, tg)
                        accepting.start_soon(_stop_on_signal, signals, accepting.cancel_scope)
                        if idle_exit is not None:
                            accepting.start_soon(_stop_when_idle, conns, idle_exit, accepting.cancel_scope)
                        rt.write_info(
                            http=http_face.info if http_face else None, token=http_face.token if http_face else None
                        )
                        how = f" (socket-activated by {rt.activated_by})" if rt.activated_by else ""
                        log.info(
                            "zocratesd %s serving %s on %s%s (pid %d, model %s)",
                            __version__, opts.data_dir, rt.socket_path, how, os.getpid(), config.model.provider,
                        )
                        notifier.ready(f"serving {opts.data_dir}")
                        root.start_soon(_warm_up)
                notifier.stopping("shutting down")
                # Closing our listener leaves a manager's copy listening: connections that arrive
                # from now on wait there for the next daemon instead of being refused.
                for listener in listeners:
                    await listener.aclose()
                if http_face is not None:
                    http_face.stop()  # stops accepting; its requests and turns are drained below
                await conns.drain(SHUTDOWN_GRACE_S)
                tg.cancel_scope.cancel()
            root.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            for listener in listeners:
                await listener.aclose()
            await daemon.aclose()
    return 0


def _http_face(opts: ServeOptions, config: ZocratesConfig, daemon: Any, conns: Connections) -> Any:
    """The HTTP shim for the Zotero plugin, bound now so daemon.json can name its port (None: off).
    Its requests and turns count as open connections (idle exit, drain at shutdown)."""
    if not config.http.enabled:
        return None
    from zocratesd.shim import HttpFace

    face = HttpFace(daemon, config.http, opened=conns.opened, closed=conns.closed, grace_s=SHUTDOWN_GRACE_S)
    try:
        face.bind(opts.data_dir)
    except OSError as exc:
        raise locations.RuntimeFileError(f"cannot serve HTTP on 127.0.0.1: {exc}; pass --http-port N or --no-http") from None
    log.info("HTTP shim on http://127.0.0.1:%d", face.port)
    return face


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
    from zocratesd.core.daemon import Daemon
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
    except locations.AlreadyRunning as exc:
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
