"""Timing samples and their report: a clock, medians and percentiles, markdown tables, the machine
a run was on, and the JSON file each benchmark writes (bench/README.md)."""

from __future__ import annotations

import json
import math
import os
import platform
import sqlite3
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from _paths import REPO_DIR


def timer() -> float:
    """The clock of every timed section (monotonic, sub-microsecond)."""
    return time.perf_counter()


def percentile(samples: Sequence[float], q: float) -> float:
    """The q-quantile (0..1) with linear interpolation between closest ranks (numpy's default)."""
    if not samples:
        return math.nan
    s = sorted(samples)
    pos = (len(s) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def summarize(samples_s: Sequence[float]) -> dict[str, Any]:
    """Median, p95, min, max (milliseconds) of samples given in seconds."""
    ms = [x * 1000.0 for x in samples_s]
    if not ms:
        return {"n": 0, "median_ms": None, "p95_ms": None, "min_ms": None, "max_ms": None, "samples_ms": []}
    return {
        "n": len(ms),
        "median_ms": statistics.median(ms),
        "p95_ms": percentile(ms, 0.95),
        "min_ms": min(ms),
        "max_ms": max(ms),
        "samples_ms": [round(x, 3) for x in ms],
    }


def fmt_ms(summary: dict[str, Any] | None) -> str:
    """`12.3 ms (14.0)`, median (p95), from a summarize() dict; '—' when there is nothing."""
    if not summary or summary.get("median_ms") is None:
        return "—"
    return f"{_num(summary['median_ms'])} ms ({_num(summary['p95_ms'])})"


def _num(x: float) -> str:
    if x >= 100:
        return f"{x:.0f}"
    if x >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A markdown table with its columns padded to line up in a terminal."""
    cells = [[str(c) for c in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for n, r in enumerate(cells):
        lines.append("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + " |")
        if n == 0:
            lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def env_info() -> dict[str, Any]:
    """The machine, the versions and the commit a run was on, for its JSON file."""
    info: dict[str, Any] = {
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "sqlite": sqlite3.sqlite_version,
        "when_utc": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    try:
        import google.adk
        import sqlalchemy

        info["google_adk"] = google.adk.__version__
        info["sqlalchemy"] = sqlalchemy.__version__
    except Exception:  # pragma: no cover - reporting only
        pass
    try:
        import zocratesd

        info["zocratesd"] = zocratesd.__version__
    except Exception:  # pragma: no cover
        pass
    try:
        info["git_commit"] = subprocess.run(
            ["git", "-C", str(REPO_DIR), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5
        ).stdout.strip()
        info["git_dirty"] = bool(
            subprocess.run(
                ["git", "-C", str(REPO_DIR), "status", "--porcelain", "--untracked-files=no"],
                capture_output=True, text=True, timeout=5,
            ).stdout.strip()
        )
    except (OSError, subprocess.SubprocessError):  # pragma: no cover
        pass
    return info


def write_json(path: Path, payload: Any) -> None:
    """Atomically (a temp file, then a rename): an interrupted run leaves the previous file whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(payload, indent=2, sort_keys=False) + "\n")
    os.replace(tmp, path)
