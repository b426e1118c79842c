"""The README's quick start, run verbatim: its commands are read from README.md (so the test fails
when the README drifts) and run one by one in one bash, from this clone, on a clean HOME whose PATH
has neither the venv nor ~/.local/bin (the README's own `export PATH=...` line must bring them).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from daemonproc import daemon_env

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
SECTION = "## Quick start"
# `./dev install` may have to (re)install the venv when pyproject.toml changed: pip takes a while.
INSTALL_TIMEOUT_S = 600.0
# Everything after the install: a daemon start (ADK's import), four questions, a stop.
AFTER_INSTALL_BUDGET_S = 120.0
STEP_TIMEOUT_S = 120.0


def quickstart_commands() -> list[str]:
    """The command lines of the `sh` blocks of the README's quick-start section, comments included."""
    text = (ROOT / "README.md").read_text()
    headings = re.findall(r"^## .*", text, re.M)
    assert headings[0].startswith("## For Zotero users"), "the README starts with the Zotero users' path"
    assert headings[1].startswith(SECTION), "the quick start comes right after it, first for developers"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    assert blocks, "the quick start has no sh block"
    return [line for block in blocks for line in block.splitlines() if line.strip()]


def test_the_readme_quick_start_runs_verbatim_on_a_clean_home() -> None:
    commands = quickstart_commands()
    assert commands[0].startswith("./dev install")
    root = Path(tempfile.mkdtemp(prefix="zs", dir="/tmp"))  # short: socket paths are capped
    home, run = root / "home", root / "run"
    home.mkdir()
    run.mkdir(mode=0o700)
    env = daemon_env(run)
    env.update(HOME=str(home), PATH="/usr/local/bin:/usr/bin:/bin")
    # The venv of the Python running this test exists; `./dev install` links that one.
    env["ZOCRATES_PYTHONS"] = f"{sys.version_info[0]}.{sys.version_info[1]}"
    for key in ("VIRTUAL_ENV", "PYTHONPATH", "XDG_STATE_HOME", "XDG_DATA_HOME", "XDG_CONFIG_HOME"):
        env.pop(key, None)
    # One bash for all the lines (an `export` carries over); each line's output and status apart.
    script = [f"cd {ROOT}"]
    for n, line in enumerate(commands):
        script.append(f"{{ {line}\n}} >{root}/out.{n} 2>{root}/err.{n} </dev/null; echo $? >{root}/rc.{n}; date +%s.%N >{root}/t.{n}")
    try:
        proc = subprocess.run(
            ["bash", "-c", "\n".join(script)], env=env, capture_output=True, text=True,
            timeout=INSTALL_TIMEOUT_S + STEP_TIMEOUT_S * len(commands),
        )
        assert proc.returncode == 0, proc.stderr

        def result(n: int) -> tuple[int, str, str]:
            return (int((root / f"rc.{n}").read_text()), (root / f"out.{n}").read_text(), (root / f"err.{n}").read_text())

        report = "\n".join(f"$ {c}\n-> {result(n)}" for n, c in enumerate(commands))
        for n, line in enumerate(commands):
            rc, out, err = result(n)
            if line.startswith("zocrates ask --new"):  # four parts, three rounds: paused, exit 4
                assert rc == 4, report
                assert "research checkpoint left pending" in err and "zocrates resume" in err, report
            else:
                assert rc == 0, report
            if line.startswith("zocrates ask \""):
                assert "started zocratesd" in err, report  # it says it started a daemon
                assert "# Cited Sources" in out and "zotero://select/library/items/" in out, report
            if line.startswith("zocrates resume"):
                assert "# Cited Sources" in out, report
            if line.startswith("zocratesd stop"):
                assert "stopped zocratesd" in out, report
        assert os.path.islink(home / ".local" / "bin" / "zocrates"), report
        assert (home / "Zotero-demo" / "zotero.sqlite").is_file(), report
        install_done = float((root / "t.0").read_text())
        last = float((root / f"t.{len(commands) - 1}").read_text())
        assert last - install_done < AFTER_INSTALL_BUDGET_S, f"the quick start took {last - install_done:.0f} s after the install"
    finally:
        subprocess.run(
            [sys.executable, "-m", "zocratesd", "stop", "--zotero-data-dir", str(home / "Zotero-demo")],
            env=env, capture_output=True, timeout=60,
        )
        shutil.rmtree(root, ignore_errors=True)
