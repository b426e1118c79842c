"""How clients find a socket-activated daemon (rpc/pump.py): the manager's socket before daemon.json."""

from __future__ import annotations

import select
import socket
import threading
from pathlib import Path
from typing import Any

import pytest

from zocratesd import locations
from zocratesd.rpc import pump


@pytest.fixture
def data_dir(short_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    run = short_tmp / "run"
    run.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(run))
    d = short_tmp / "zotero"
    d.mkdir()
    locations.ensure_private_dir(locations.default_socket_path(d).parent)
    return d


def in_thread(fn: Any, *args: Any, **kwargs: Any) -> tuple[threading.Thread, dict[str, Any]]:
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            result["value"] = fn(*args, **kwargs)
        except BaseException as exc:  # handed to the test
            result["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, result


def test_activation_socket_only_names_a_socket_file(data_dir: Path) -> None:
    path = locations.default_socket_path(data_dir)
    assert locations.activation_socket(data_dir) is None
    path.write_text("not a socket")
    assert locations.activation_socket(data_dir) is None
    path.unlink()
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    try:
        assert locations.activation_socket(data_dir) == path
    finally:
        s.close()


def test_a_dead_socket_file_is_not_taken_for_a_manager(data_dir: Path) -> None:
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(locations.default_socket_path(data_dir)))  # bound, never listening: what a crash leaves
    try:
        with pytest.raises(pump.PumpError, match="no zocratesd is running"):
            pump.connect_to_daemon(data_dir, start=False)
    finally:
        s.close()


def test_the_manager_giving_up_is_reported_not_waited_out(data_dir: Path) -> None:
    """A manager whose daemon keeps failing closes its socket: the pump says so at once."""
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(locations.default_socket_path(data_dir)))
    listener.listen(4)
    t, result = in_thread(pump.connect_to_daemon, data_dir, start=False)
    assert select.select([listener], [], [], 10)[0], "the pump did not connect to the manager's socket"
    listener.close()
    t.join(10)
    assert not t.is_alive()
    assert isinstance(result.get("error"), pump.PumpError)
    assert "closed the connection" in str(result["error"])
