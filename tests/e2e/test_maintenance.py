"""Maintenance against real processes and real filesystems: SIGKILL at every step of the VACUUM
swap, then a restart that finds every committed session and event; a disk that is really full.

The JSON-RPC methods are not wired yet, so the process under test is this file run as a script: it
starts the daemon core (`Daemon` + `Maintenance`, what `zocratesd serve` will run at startup),
commits a chat, and runs a maintenance pass with `ZOCRATES_FAULT_AT=<step>` set, which SIGKILLs it
at that step. To keep the loop fast, one helper process imports everything once and forks one
child per step (all single-threaded at the fork); each child is a process of its own that dies
by SIGKILL.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC
from pathlib import Path
from typing import Any

import anyio
import pytest

from zocratesd.config import ZocratesConfig
from zocratesd.core.daemon import Daemon
from zocratesd.maintenance import FAULT_ENV, FAULT_STEPS, Maintenance, _swap
from zocratesd.store.database import db_path, integrity_check

pytestmark = pytest.mark.e2e

DAY = 86400.0
CHILD_TIMEOUT_S = 60.0


def sql_time(epoch: float) -> str:
    from datetime import datetime

    return datetime.fromtimestamp(epoch, tz=UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


def snapshot(db: Path) -> dict[str, tuple[str, list[tuple[str, str]]]]:
    conn = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)
    try:
        out = {}
        for sid, state in conn.execute("SELECT id, state FROM sessions").fetchall():
            evs = conn.execute("SELECT id, event_data FROM events WHERE session_id = ? ORDER BY id", (sid,)).fetchall()
            out[sid] = (state, evs)
        return out
    finally:
        conn.close()


def maintenance_for(daemon: Daemon, **kw: Any) -> Maintenance:
    """A Maintenance with test seams, installed as the daemon's own (one per store: a second would
    hold a connection of its own and make every VACUUM "busy")."""
    m = Maintenance(daemon.db, daemon.locks, daemon.config, **kw)
    daemon.maintenance = m
    return m


async def open_store(daemon: Daemon) -> None:
    """The first half of Daemon.start(): the tests run the maintenance half themselves."""
    await daemon.db.prepare_tables()


async def chat(daemon: Daemon, title: str, chars: int) -> str:
    from google.adk.events import Event
    from google.genai import types

    from zocratesd.store import APP_NAME, USER_ID

    row = await daemon.create_session(title=title)
    svc = daemon.db.service
    session = await svc.get_session(app_name=APP_NAME, user_id=USER_ID, session_id=row.id)
    for author, role in (("user", "user"), ("coordinator", "model"), ("user", "user"), ("coordinator", "model")):
        ev = Event(author=author, invocation_id=f"{row.id}-inv", content=types.Content(role=role, parts=[types.Part(text=title[0] * chars)]))
        await svc.append_event(session, ev)
    return row.id


async def build_template(data_dir: Path) -> dict[str, Any]:
    """Chats to keep, chats past retention, old empty sessions: a pass deletes and then VACUUMs."""
    daemon = Daemon(data_dir, ZocratesConfig())
    await daemon.start()
    try:
        kept = [await chat(daemon, f"keep {i}", 8000) for i in range(6)]
        stale = [await chat(daemon, f"stale {i}", 8000) for i in range(8)]
        empty = [(await daemon.create_session(title=f"empty {i}")).id for i in range(3)]
        young_empty = (await daemon.create_session(title="opened just now")).id
    finally:
        await daemon.aclose()
    import time

    now = time.time()
    conn = sqlite3.connect(db_path(data_dir))
    with conn:
        for sid in stale:
            conn.execute("UPDATE sessions SET update_time = ? WHERE id = ?", (sql_time(now - 200 * DAY), sid))
        for sid in empty:
            conn.execute("UPDATE sessions SET create_time = ? WHERE id = ?", (sql_time(now - 2 * DAY), sid))
    conn.close()
    return {"kept": kept + [young_empty], "deleted": stale + empty}


# --- the process under test ----------------------------------------------------------------------


async def child_main(data_dir: Path, out: Path) -> None:
    """What a daemon start does: open the store, then maintenance before any turn. Before that it
    commits one more chat (left in the -wal) and records it in `out`, so the test can look for it."""
    daemon = Daemon(data_dir, ZocratesConfig())
    await open_store(daemon)
    m = maintenance_for(daemon)
    try:
        sid = await chat(daemon, "committed just before maintenance", 3000)
        out.write_text(json.dumps({"committed": sid}))
        report = await m.run(startup=True)
        out.write_text(json.dumps({"committed": sid, "report": report}))
    finally:
        await m.aclose()
        await daemon.aclose()


def zygote(jobs: list[tuple[str, str]]) -> None:
    """Fork one child per (data_dir, step), all at once; print {step: wait status} as JSON."""
    pids = {}
    for data_dir, step in jobs:
        pid = os.fork()
        if pid == 0:  # the child: a process of its own from here on
            code = 0
            try:
                os.environ[FAULT_ENV] = step
                anyio.run(child_main, Path(data_dir), Path(data_dir) / "child.json")
            except BaseException:
                import traceback

                traceback.print_exc()
                code = 1
            finally:
                os._exit(code)
        pids[pid] = step
    statuses = {}
    for pid, step in pids.items():
        _, status = os.waitpid(pid, 0)
        statuses[step] = status
    print(json.dumps(statuses), flush=True)


# --- tests ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    data_dir = tmp_path_factory.mktemp("template")
    ids = anyio.run(build_template, data_dir)
    return data_dir, ids


def test_sigkill_at_every_step_of_the_swap_loses_nothing(template: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    src, ids = template
    expected = {sid: v for sid, v in snapshot(db_path(src)).items() if sid in ids["kept"]}
    jobs, inodes = [], {}
    for step in FAULT_STEPS:
        d = tmp_path / step
        shutil.copytree(src, d)
        jobs.append((str(d), step))
        inodes[step] = db_path(d).stat().st_ino
    proc = subprocess.run(
        [sys.executable, __file__, "zygote", json.dumps(jobs)],
        capture_output=True, text=True, timeout=CHILD_TIMEOUT_S * 2,
        env={k: v for k, v in os.environ.items() if not k.startswith("ZOCRATES_")},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    statuses = json.loads(proc.stdout.strip().splitlines()[-1])
    renamed_at, partial_at = FAULT_STEPS.index("renamed"), FAULT_STEPS.index("vacuum_partial")
    for n, step in enumerate(FAULT_STEPS):
        d = tmp_path / step
        status = statuses[step]
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (
            f"the child was to die at {step!r} but exited with status {status}: {proc.stderr[-3000:]}"
        )
        committed = json.loads((d / "child.json").read_text())["committed"]
        db = db_path(d)
        # At the path: the original until the rename, the complete copy from then on; a temp
        # copy (partial, then complete) in between.
        assert (db.stat().st_ino == inodes[step]) == (n < renamed_at), step
        assert _swap.temp_path(db).exists() == (partial_at <= n < renamed_at), step
        anyio.run(restart_and_check, d, step, expected, ids["deleted"], committed)


async def restart_and_check(data_dir: Path, step: str, expected: dict[str, Any], deleted: list[str], committed: str) -> None:
    daemon = Daemon(data_dir, ZocratesConfig())
    try:
        await daemon.start()  # the real restart: its startup pass cleans up what the kill left
        report = daemon.startup_maintenance
        assert report is not None
        db = db_path(data_dir)
        assert integrity_check(db) == "ok", step
        assert not _swap.temp_path(db).exists(), step
        now = snapshot(db)
        for sid, rows in expected.items():
            assert now.get(sid) == rows, f"after SIGKILL at {step}: session {sid} differs"
        assert committed in now and len(now[committed][1]) == 5, f"after SIGKILL at {step}: the last chat is lost"
        assert not set(deleted) & set(now), step  # deletions committed before the kill stay done
        assert set(now) == set(expected) | {committed}, step
        assert report["vacuum"]["skipped_reason"] in (None, "not_needed"), (step, report)
        # Serving: reads through both paths and a new write.
        assert len((await daemon.get_session(committed))["messages"]) == 4
        new = await chat(daemon, "after the restart", 100)
        assert len(snapshot(db)[new][1]) == 5
        conn = sqlite3.connect(db)
        try:
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal", step
        finally:
            conn.close()
    finally:
        await daemon.aclose()


# --- a really full disk --------------------------------------------------------------------------


@pytest.fixture
def small_fs(short_tmp: Path) -> Iterator[Path]:
    """A 3 MiB tmpfs (needs root, or CAP_SYS_ADMIN; skipped otherwise: the unit tests cover the
    disk check through its seam)."""
    mnt = short_tmp / "fs"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m,mode=0700", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


class _Plenty:
    free = 1 << 40


def fill_disk(path: Path, leave: int) -> Path:
    """A file that takes all the free space of `path`'s filesystem but `leave` bytes."""
    filler = path / "filler"
    free = shutil.disk_usage(path).free
    with open(filler, "wb") as f:
        f.write(b"\0" * max(0, free - leave))
    return filler


def test_a_small_disk_skips_vacuum_and_a_full_one_fails_open(small_fs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    anyio.run(_small_disk, small_fs, monkeypatch)


async def _small_disk(mnt: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import zocratesd.maintenance.runner as engine

    data_dir = mnt / "zotero"
    ids = await build_template(data_dir)
    db = db_path(data_dir)
    expected = {sid: v for sid, v in snapshot(db).items() if sid in ids["kept"]}
    inode = db.stat().st_ino

    # 1. The real check on a partition with less than 1.5x the file free. The disk fills up just
    # before the check, once the deletions (which need room in the -wal) are done.
    def fill_then_measure(path: Path) -> Any:
        fill_disk(mnt, leave=int(sum(_swap.file_bytes(db)) * 1.2))
        return shutil.disk_usage(path)

    daemon = Daemon(data_dir, ZocratesConfig())
    await open_store(daemon)
    m = maintenance_for(daemon, disk_usage=fill_then_measure)
    try:
        report = await m.run(startup=True)
        assert (report["empty_deleted"], report["retention_deleted"]) == (3, 8)
        assert report["vacuum"]["skipped_reason"] == "insufficient_disk", report
        assert shutil.disk_usage(mnt).free < 1.5 * report["vacuum"]["bytes_before"]
        assert db.stat().st_ino == inode
        assert snapshot(db) == expected
        await m.aclose()

        # 2. The check passes (the seam says the disk is huge) but the disk is really full when the
        # copy is written: VACUUM INTO fails with SQLITE_FULL half way.
        (mnt / "filler").unlink()
        m = maintenance_for(daemon, disk_usage=lambda p: _Plenty())
        monkeypatch.setattr(engine, "VACUUM_MIN_FILE_BYTES", 0)  # nothing left to delete: consider VACUUM anyway
        stats = await m.stats()
        copy_bytes = (stats["page_count"] - stats["freelist_count"]) * stats["page_size"]
        leave = 96 * 1024
        assert copy_bytes > 2 * leave
        real_take_alone = _swap._take_alone

        def take_alone_then_fill(conn: Any, path: Path) -> None:
            real_take_alone(conn, path)  # this folds and deletes the -wal, freeing its space: fill after
            fill_disk(mnt, leave=leave)

        monkeypatch.setattr(_swap, "_take_alone", take_alone_then_fill)
        report = await m.run(startup=False)
        assert report["vacuum"]["skipped_reason"] == "insufficient_disk", report
        assert db.stat().st_ino == inode
        assert not _swap.temp_path(db).exists()
        assert integrity_check(db) == "ok"
        assert snapshot(db) == expected
        # Still serving on the full disk: a read, and a small write.
        assert (await daemon.get_session(ids["kept"][0]))["title"] == "keep 0"
        await daemon.create_session(title="written on a full disk")
        assert len(snapshot(db)) == len(expected) + 1
    finally:
        await m.aclose()
        await daemon.aclose()


if __name__ == "__main__":
    if sys.argv[1:2] == ["zygote"]:
        zygote([tuple(j) for j in json.loads(sys.argv[2])])
    else:  # pragma: no cover
        sys.exit("usage: test_maintenance.py zygote JOBS_JSON")
