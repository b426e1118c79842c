"""Where the daemon's log records go (process/logs.py): the log file and stderr, each record once
in the file, also when stderr is that file (a daemon started in the background: rpc/pump.py
appends its stderr to the log)."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from zocratesd import locations
from zocratesd.process.logs import setup_logging


@pytest.fixture
def root_handlers() -> Iterator[None]:
    root = logging.getLogger()
    kept, level = list(root.handlers), root.level
    yield
    for h in list(root.handlers):
        root.removeHandler(h)
        h.close()
    for h in kept:
        root.addHandler(h)
    root.setLevel(level)


def _log_file(data_dir: Path) -> Path:
    return locations.state_dir(data_dir) / locations.LOG_NAME


def test_a_stderr_that_is_the_log_file_gets_each_record_once(tmp_path: Path, root_handlers: None,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    locations.ensure_private_dir(locations.state_dir(tmp_path))
    with open(_log_file(tmp_path), "a") as err:  # as rpc/pump.py starts a daemon: O_APPEND onto its log
        monkeypatch.setattr(sys, "stderr", err)
        setup_logging(tmp_path, "INFO")
        logging.getLogger("zocratesd").info("one line")
        for h in logging.getLogger().handlers:
            h.flush()
    assert _log_file(tmp_path).read_text().count("one line") == 1


def test_a_stderr_elsewhere_gets_the_records_as_well(tmp_path: Path, root_handlers: None,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    with open(tmp_path / "terminal", "w") as err:
        monkeypatch.setattr(sys, "stderr", err)
        setup_logging(tmp_path, "INFO")
        logging.getLogger("zocratesd").info("one line")
        for h in logging.getLogger().handlers:
            h.flush()
    assert (tmp_path / "terminal").read_text().count("one line") == 1
    assert _log_file(tmp_path).read_text().count("one line") == 1
