"""Finding the daemon: an explicit socket, or the daemon.json of a Zotero data dir, started on request.

Discovery is the daemon's own (`zocratesd.locations`): daemon.json names the socket, and it is
trusted only while its pid is alive and the instance lock is held. Starting a daemon is
`zocratesd stdio`'s logic (`zocratesd.rpc.pump.connect_to_daemon`), run in a worker thread because
it polls with blocking sleeps.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.abc
import anyio.to_thread

from zocrates_client.errors import ConnectError, DaemonNotRunning
from zocratesd import locations
from zocratesd.rpc import pump


@dataclass(frozen=True, slots=True)
class Endpoint:
    """An open stream and where it leads."""

    stream: anyio.abc.SocketStream
    socket_path: str
    data_dir: Path | None


async def _connect_unix(path: str) -> anyio.abc.SocketStream:
    """Connect, or raise OSError."""
    return await anyio.connect_unix(path)


def _start_and_wait(data_dir: Path, on_start: Callable[[int, Path], None] | None, serve_args: list[str] | None = None) -> None:
    """Start `zocratesd serve` unless one runs, and return once it accepts connections.

    The probe socket the pump logic hands back is closed here, in the worker thread, so a caller
    cancelled meanwhile (the thread is then abandoned) leaks nothing.
    """
    pump.connect_to_daemon(data_dir, start=True, serve_args=serve_args, on_start=on_start).close()


async def open_endpoint(
    data_dir: str | os.PathLike[str] | None,
    socket_path: str | os.PathLike[str] | None,
    start_daemon: bool,
    on_start: Callable[[int, Path], None] | None = None,
    serve_args: list[str] | None = None,
) -> Endpoint:
    """Connect to the daemon; raises DaemonNotRunning, ConnectError or ValueError.

    - `socket_path` given: connect to it; a missing or refusing socket is DaemonNotRunning.
      `start_daemon` cannot be combined with it (a daemon is started per data dir, not per socket).
    - otherwise the data dir is `locations.resolve_data_dir(data_dir)` (the flag, $ZOTERO_DATA_DIR,
      ~/Zotero, or the per-user default) and its live daemon.json gives the socket. With no live
      daemon: `start_daemon` starts one and waits (up to `pump.START_TIMEOUT_S`), else
      DaemonNotRunning names the data dir and the command to run. `on_start(pid, log_path)` is
      called (in a worker thread) when a daemon is started; `serve_args` are given to the
      `zocratesd serve` it starts (e.g. `["--model", "openai"]`).
    """
    if socket_path is not None:
        if start_daemon:
            raise ValueError("start_daemon needs a data dir: a daemon cannot be started for a bare socket path")
        path = os.fspath(socket_path)
        try:
            return Endpoint(await _connect_unix(path), path, None)
        except (FileNotFoundError, ConnectionRefusedError):
            raise DaemonNotRunning(None, path) from None
        except OSError as exc:
            raise ConnectError(f"cannot connect to zocratesd at {path}: {exc.strerror or exc}") from None

    resolved = locations.resolve_data_dir(data_dir)
    info = locations.live_daemon(resolved)
    if info is not None:
        try:
            return Endpoint(await _connect_unix(info.socket), info.socket, resolved)
        except OSError as exc:
            if not start_daemon:
                # Alive but not accepting: it is still starting or already stopping.
                raise ConnectError(
                    f"zocratesd (pid {info.pid}) serves {resolved} but refused a connection on "
                    f"{info.socket} ({exc.strerror or exc}); it may be starting or stopping, try again"
                ) from None
    elif not start_daemon:
        raise DaemonNotRunning(resolved)

    try:
        # abandon_on_cancel: a cancelled caller (Ctrl-C, a timeout) must not wait out the pump's
        # 60 s start timeout; the thread finishes on its own and closes its probe socket.
        await anyio.to_thread.run_sync(_start_and_wait, resolved, on_start, serve_args, abandon_on_cancel=True)
    except (pump.PumpError, locations.RuntimeFileError) as exc:
        raise ConnectError(f"could not start zocratesd for {resolved}: {exc}") from None
    info = locations.live_daemon(resolved)
    if info is None:
        log_file = locations.state_dir(resolved) / locations.LOG_NAME
        raise ConnectError(f"zocratesd for {resolved} exited right after it started; see {log_file}")
    try:
        return Endpoint(await _connect_unix(info.socket), info.socket, resolved)
    except OSError as exc:
        raise ConnectError(f"cannot connect to zocratesd at {info.socket}: {exc.strerror or exc}") from None
