"""Processes for the benchmarks: the daemon, its command line (optionally under a profiler), and the
short temp dir they run in.

The daemon is the tests' own `DaemonProc` (tests/daemonproc.py): one way to start, find and stop a
daemon, with one environment (`daemon_env`: a private XDG_RUNTIME_DIR, none of the user's
ZOCRATES_* settings). A benchmark times its `start()` and puts a profiler in its `command`.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import _paths  # noqa: F401 (sys.path first: tests/ holds daemonproc)
from daemonproc import DaemonProc, daemon_env

__all__ = ["PROFILE_ALL_THREADS", "DaemonProc", "daemon_env", "short_tmpdir", "zocratesd_cmd"]


@contextmanager
def short_tmpdir(prefix: str = "zb", keep: bool = False) -> Iterator[Path]:
    """A short temp dir under /tmp: Unix socket paths must stay under ~104 bytes."""
    d = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    try:
        yield d
    finally:
        if keep:
            print(f"(kept {d})", file=sys.stderr)
        else:
            shutil.rmtree(d, ignore_errors=True)


def zocratesd_cmd(*args: str, profile_to: Path | None = None, all_threads: bool = False) -> list[str]:
    """`python -m zocratesd ARGS`; with `profile_to`, under cProfile writing there: the main thread
    only (`python -m cProfile`), or with `all_threads` every thread (PROFILE_ALL_THREADS)."""
    if profile_to is None:
        return [sys.executable, "-m", "zocratesd", *args]
    if all_threads:
        return [sys.executable, "-c", PROFILE_ALL_THREADS, str(profile_to), *args]
    return [sys.executable, "-m", "cProfile", "-o", str(profile_to), "-m", "zocratesd", *args]


# Run `python -m zocratesd ...` under cProfile in *every* thread (aiosqlite's worker, anyio's
# threads), not just the main one as `python -m cProfile` does: that is where SQLite's execute and
# commit (and their fsyncs) run. Usage: python -c PROFILE_ALL_THREADS OUTFILE serve ...
# - SIGUSR2 clears every profile gathered so far (send it after the warm-up: only what follows
#   counts; start-up and first-turn imports do not).
# - aiosqlite hands its worker thread `functools.partial` objects, whose C calls cProfile cannot
#   see; a Python-level stand-in makes `sqlite3.Cursor.execute`, `Connection.commit` etc. appear
#   with their own (wall) time. Nothing else of the daemon is changed.
PROFILE_ALL_THREADS = r"""
import cProfile, pstats, runpy, signal, sys, threading
out = sys.argv.pop(1)
profiles = []
lock = threading.Lock()
_boot = threading.Thread._bootstrap_inner
def _profiled_boot(self):
    p = cProfile.Profile()
    with lock:
        profiles.append(p)
    p.enable()
    try:
        _boot(self)
    finally:
        p.disable()
threading.Thread._bootstrap_inner = _profiled_boot
try:
    import aiosqlite.core as _aiosqlite_core
    def _visible_partial(fn, *args, **kwargs):
        def call():
            return fn(*args, **kwargs)
        return call
    _aiosqlite_core.partial = _visible_partial
except ImportError:
    pass
def _reset(_signum, _frame):
    with lock:
        for p in profiles:
            p.clear()
signal.signal(signal.SIGUSR2, _reset)
main = cProfile.Profile()
profiles.insert(0, main)
main.enable()
try:
    runpy.run_module("zocratesd", run_name="__main__", alter_sys=True)
except SystemExit:
    pass
finally:
    main.disable()
    class _Snap:
        def create_stats(self):
            pass
    stats = None
    with lock:
        for p in profiles:
            p.snapshot_stats()  # not create_stats: that would disable another thread's profiler from here
            s = _Snap()
            s.stats = p.stats
            if not s.stats:
                continue
            if stats is None:
                stats = pstats.Stats(s)
            else:
                stats.add(s)
    if stats is not None:
        stats.dump_stats(out)
"""
