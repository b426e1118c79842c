"""`zocratesd serve`, `zocratesd stdio --standalone` and `zocratesd mcp --standalone`: the daemon
process around the core.

Both run the one `boot()` below; they differ only in their transport (process/transports.py):
`serve` takes connections on a Unix socket (its own, or a service manager's) and runs the HTTP
shim; `stdio --standalone` serves exactly one connection, the editor on fds 0/1, with no socket
and no daemon.json (and takes fd 1 for frames before anything else, process/fdstream.py).

Start-up order matters, and each step says why:
1. the state dir (`zocrates-data`) must be a real directory of ours (a symbolic link or another
   user's ends the start, exit 1); the config is loaded next, so a broken zocrates_config.json
   fails (exit 2) before anything is touched; then the umask (the store and logs are the user's
   alone), logging (process/logs.py) and the open-file limit (process/fdlimit.py);
2. sockets passed by a service manager (systemd, launchd) are taken before anything else runs, and
   the variables that named them removed (service_manager/activation.py);
3. the instance lock is taken before the socket is touched: whoever holds it knows any socket or
   daemon.json on disk is stale (a crashed daemon), so removing them cannot hurt a live one
   (process/instance.py); the socket path is claimed (under its own lock, `<socket>.lock`, which
   keeps a daemon of another data dir off the same --socket);
4. the core is made without its engine (`Daemon(..., load_engine=False)` reads sessions.db with
   sqlite3 alone), then the socket bound (or the manager's socket adopted) and the HTTP shim's
   loopback port bound (zocratesd/shim/), and only then daemon.json is written (with the port and
   a fresh bearer token) and READY=1 sent: a client that finds daemon.json can connect at once;
   its `initialize` and the library's status are answered at once (rpc/handshake.py), every other
   request once the wire stack is loaded, a moment later; the shim's port answers once its stage is loaded, after that;
5. meanwhile the root task group brings the engine up (`lifecycle.bring_up`): the start-up plan's
   stages loaded in a daemon thread (process/startup.py), the runner built, the store's tables
   prepared, start-up maintenance run, and only then any write: a new session or a turn asked
   for earlier waits for it (`Daemon.start`). The garbage collector stays off until then (cli.py;
   `lifecycle.freeze_startup_heap` says why).
   If that fails, the daemon stops (exit 1). A shutdown meanwhile does not wait for the imports
   (seconds on a loaded machine): the thread is a daemon thread, left behind at exit.
Shutdown (SIGTERM, SIGINT, --idle-exit-after when socket-activated, or stdin closed for stdio)
stops accepting, sends STOPPING=1, stops the HTTP shim accepting, lets requests in flight (HTTP
turns too) finish (bounded: lifecycle.SHUTDOWN_GRACE_S), then cancels the root task group;
daemon.json and a socket we bound are removed (a manager's socket is its own), the store closed,
the lock released last. A failure to start is one line on stderr and exit 1.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import signal
import socket
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import msgspec

from zocratesd import __version__, deferred, locations
from zocratesd.config import ConfigError, ZocratesConfig, load_config
from zocratesd.core.daemon import Daemon
from zocratesd.process.connections import Connections
from zocratesd.process.fdlimit import raise_fd_limit
from zocratesd.process.fdstream import FdStream
from zocratesd.process.instance import Instance
from zocratesd.process.lifecycle import (
    SHUTDOWN_GRACE_S,
    STOP_SIGNALS,
    bring_up,
    stop_on_signal,
    stop_when_idle,
    watchdog,
)
from zocratesd.process.logs import PROCESS_LOGGER, setup_logging
from zocratesd.process.startup import WIRE, Plan, StageHook, daemon_plan
from zocratesd.process.transports import PairTransport, SocketTransport, StdioTransport, Transport
from zocratesd.rpc.handshake import StagedMethods
from zocratesd.service_manager.activation import ActivationError
from zocratesd.service_manager.notify import Notifier
from zocratesd.store.database import StoreDamaged, check_intact, db_path

log = logging.getLogger(PROCESS_LOGGER)


class ServeOptions(msgspec.Struct):
    data_dir: Path
    socket_path: Path | None = None
    overrides: dict[str, Any] = msgspec.field(default_factory=dict)
    log_level: str = "INFO"
    # Socket-activated only: exit 0 once no connection has been open for this long (the manager
    # keeps the socket and starts a new daemon on the next connection).
    idle_exit_after: float | None = None
    # Called before each stage of the start-up plan loads (process/startup.py); tests only.
    before_stage: StageHook | None = None


async def serve(opts: ServeOptions) -> int:
    """Run the daemon on its Unix socket until SIGTERM/SIGINT (or idle exit). Returns the exit code."""
    return await boot(opts, SocketTransport(opts.socket_path))


async def serve_stdio_standalone(opts: ServeOptions) -> int:
    """ACP on this process's stdin/stdout with the core in-process (no socket, no other daemon)."""
    stream = FdStream.take_stdio()  # first: from here on nothing but frames can reach fd 1
    return await boot(opts, StdioTransport(stream))


async def serve_face_standalone(opts: ServeOptions, face: Callable[[socket.socket], Awaitable[int]]) -> int:
    """The core in this process for a face in this process (`zocratesd mcp --standalone`): `face`
    gets one end of a socket pair and speaks the daemon's JSON-RPC over it, the core serves the
    other end. When the face ends (its client left) the core's connection closes and the core
    stops; when the core ends first (a failed start, a signal) the face is cancelled. The exit
    code is the core's when it failed, else the face's."""
    core_end, face_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    face_code = 0
    try:
        async with anyio.create_task_group() as tg:

            async def run_face() -> None:
                nonlocal face_code
                face_code = await face(face_end)

            tg.start_soon(run_face)
            code = await boot(opts, PairTransport(core_end))
            tg.cancel_scope.cancel()
    finally:
        core_end.close()
        face_end.close()
    return code or face_code


async def boot(opts: ServeOptions, transport: Transport) -> int:
    """Steps 1-3 of the module docstring, then `_run`; returns the process exit code."""
    try:
        # Before the config is read from it and the log opened in it: a real directory of ours
        # (never through a symbolic link, never another user's), else one line and exit 1.
        locations.ensure_private_dir(locations.state_dir(opts.data_dir))
    except locations.RuntimeFileError as exc:
        print(f"zocratesd: {exc}", file=sys.stderr)
        return 1
    config = _load_config_or_exit(opts)
    os.umask(0o077)  # the store, logs and temp files hold the user's conversations: theirs alone
    setup_logging(opts.data_dir, opts.log_level)
    for warning in config.model.warnings():
        log.warning("%s", warning)
    raise_fd_limit()  # every connection takes a descriptor: 1,024 is a desktop's default (process/fdlimit.py)
    # `kill -USR1 <pid>` prints every thread's stack to stderr: how to see where a stuck daemon is.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    notifier = Notifier.from_environ()
    try:
        transport.prepare()
    except ActivationError as exc:
        print(f"zocratesd: socket activation failed: {exc}", file=sys.stderr)
        return 1
    instance = Instance(opts.data_dir)
    try:
        instance.acquire()
    except locations.AlreadyRunning as exc:
        print(f"zocratesd: {exc}; {transport.already_running_hint}", file=sys.stderr)
        return 1
    except locations.RuntimeFileError as exc:
        print(f"zocratesd: {exc}", file=sys.stderr)
        return 1
    try:
        return await _run(opts, config, instance, transport, notifier)
    except (locations.RuntimeFileError, ActivationError) as exc:
        print(f"zocratesd: {exc}", file=sys.stderr)
        return 1
    finally:
        instance.close()
        notifier.close()
        log.info("stopped")


async def _run(
    opts: ServeOptions, config: ZocratesConfig, instance: Instance, transport: Transport, notifier: Notifier
) -> int:
    """Step 4 and the shutdown, with the instance lock held."""
    transport.claim(instance)  # before the store is opened, so a socket in the way fails at once
    try:
        check_intact(db_path(opts.data_dir))  # before anything opens it to write (store/database.py)
    except StoreDamaged as exc:
        log.error("%s", exc)  # to stderr and the log file, where a daemon a client started is seen
        return 1

    idle_exit = opts.idle_exit_after
    if idle_exit is not None and not transport.restarts_on_demand:
        log.warning("--idle-exit-after ignored: it needs socket activation (nothing would start the daemon again)")
        idle_exit = None
    daemon = Daemon(opts.data_dir, config, load_engine=False)  # its engine loads in bring_up
    # The handshake at once, the rest once the wire stack has loaded (rpc/handshake.py).
    methods = StagedMethods(daemon.version, config.rpc.max_frame_bytes, daemon.library_status)
    failed: list[BaseException] = []
    try:
        conns = Connections(methods, max_frame_bytes=config.rpc.max_frame_bytes)
        await transport.open(instance, daemon, conns)
        plan = daemon_plan(http=transport.serves_http, before_stage=opts.before_stage)
        async with anyio.create_task_group() as root:
            root.start_soon(bring_up, daemon, plan, root.cancel_scope, failed)
            root.start_soon(daemon.run_writes)  # writes consented before a restart are applied then
            root.start_soon(_serve_full_table, plan, daemon, methods)
            if notifier.watchdog_interval_s:
                root.start_soon(watchdog, notifier, notifier.watchdog_interval_s)
            async with anyio.create_task_group() as connections:
                # Signals are caught from here on, before READY=1: a manager may stop us right after.
                with anyio.open_signal_receiver(*STOP_SIGNALS) as signals:
                    async with anyio.create_task_group() as accepting:
                        transport.start(accepting, connections, conns, plan)
                        accepting.start_soon(stop_on_signal, signals, accepting.cancel_scope)
                        if idle_exit is not None:
                            accepting.start_soon(stop_when_idle, conns, idle_exit, accepting.cancel_scope)
                        where = transport.publish(instance)
                        log.info(
                            "zocratesd %s serving %s on %s (pid %d, model %s)",
                            __version__, opts.data_dir, where, os.getpid(), config.model.provider,
                        )
                        notifier.ready(f"serving {opts.data_dir}")
                notifier.stopping("shutting down")
                await transport.close()
                await conns.drain(SHUTDOWN_GRACE_S)
                connections.cancel_scope.cancel()
            root.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await transport.close()
            await daemon.aclose()
    return 1 if failed else 0


async def _serve_full_table(plan: Plan, daemon: Daemon, methods: StagedMethods) -> None:
    """Once the wire stack is loaded: every request to the ACP table (the held ones first)."""
    wire = plan.stage(WIRE.name)
    assert wire is not None
    await wire.done.wait()
    methods.serve(deferred.load("zocratesd.rpc.acp").build_methods(daemon))


def _load_config_or_exit(opts: ServeOptions) -> ZocratesConfig:
    try:
        return load_config(opts.data_dir, opts.overrides)
    except ConfigError as exc:
        print(f"zocratesd: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
