"""Shared fixtures. `daemon` starts the real `zocratesd serve` as a subprocess on a fresh data dir."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from daemonproc import DaemonProc, daemon_env
from fake_zotero_api import FakeZoteroApi
from zoterofixture import sample_library


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A short temporary dir: Unix socket paths must stay under 104 bytes, pytest's tmp_path may not."""
    d = Path(tempfile.mkdtemp(prefix="zq", dir="/tmp"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def daemon_factory(short_tmp: Path) -> Iterator[Any]:
    """Make (not start) daemons on a fresh data dir; all are stopped at teardown."""
    made: list[DaemonProc] = []
    runtime_dir = short_tmp / "run"
    runtime_dir.mkdir(mode=0o700)

    def make(data_dir: Path | None = None, args: list[str] | None = None) -> DaemonProc:
        d = DaemonProc(
            data_dir=data_dir or (short_tmp / "zotero"),
            runtime_dir=runtime_dir,
            env=daemon_env(runtime_dir),
            args=list(args or []),
        )
        d.data_dir.mkdir(parents=True, exist_ok=True)
        made.append(d)
        return d

    yield make
    for d in made:
        if d.proc is not None and d.proc.poll() is None:
            d.stop(60)


@pytest.fixture
def daemon(daemon_factory: Any) -> DaemonProc:
    """A started daemon on a fresh, empty data dir."""
    d = daemon_factory()
    d.start()
    return d


@pytest.fixture
def anyio_backend() -> str:
    """ADK and the daemon run on asyncio; client-library tests override this to add trio."""
    return "asyncio"


@pytest.fixture
def zotero10() -> Iterator[FakeZoteroApi]:
    """A Zotero 10 stand-in (tests/fake_zotero_api.py) holding the sample library, its write dialog
    answered "Always Allow"; a test changes `dialog_answer` for the other answers."""
    api = FakeZoteroApi(*sample_library(), zotero_version=10)
    api.dialog_answer = "always"
    yield api
    api.close()
