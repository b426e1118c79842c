"""A world for `zocratesd mcp` tests: a Zotero data dir written as Zotero makes it
(zocratesd/demo/zotero_dir.py) with a config, a private runtime dir and the environment; the
daemon a test's `zocratesd mcp` starts is stopped at the end."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from daemonproc import daemon_env
from zoterofixture import Library

from zocratesd.demo.zotero_dir import write


@contextmanager
def mcp_world(tmp: Path, library: Library, config: dict[str, Any]) -> Iterator[Any]:
    """The world in `tmp`: `.data_dir` (the library, `config` as its zocrates_config.json) and `.env`."""
    run = tmp / "run"
    run.mkdir(mode=0o700)
    data = tmp / "zotero"
    write(data, library)
    state = data / "zocrates-data"
    state.mkdir()
    (state / "zocrates_config.json").write_text(json.dumps(config))

    class World:
        data_dir = data
        env = daemon_env(run)

    try:
        yield World
    finally:
        subprocess.run([sys.executable, "-m", "zocratesd", "stop", "--zotero-data-dir", str(data)], env=World.env, timeout=60,
                       capture_output=True, check=False)
