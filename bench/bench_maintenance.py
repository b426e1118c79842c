"""Maintenance: reclaiming a ~200 MB sessions.db with ~50% free pages, and the pass with nothing to do.

    ./dev bench bench/bench_maintenance.py            # full run (~2 min on 2 cores)
    ./dev bench bench/bench_maintenance.py --quick    # smoke run (~20 s; targets not judged)

What it does:
1. builds a data dir of `--sessions` research chats (`--events` events each, rows as ADK writes them,
   bulk-inserted: bench/_stores.py `build_bulk_store`) and deletes every other session, so about
   half the pages are free; the file is in WAL mode, as the daemon keeps it;
2. per round, on two fresh copies of that file, alternating which goes first:
   - zocratesd: the daemon core in this process (`Daemon` + `Maintenance.run(startup=True)`, the
     pass `zocratesd serve` runs before serving): nothing to delete, the file is >= 30 MB with a
     freelist >= 25%, so it VACUUMs through the atomic swap (pause, checkpoint, VACUUM INTO, fsync,
     integrity_check, rename, fsync dir, WAL);
   - peer: ADK has no maintenance at all; the reference is what one would do by hand on the same
     file: a plain `VACUUM` in-process, plus the `wal_checkpoint(TRUNCATE)` without which a WAL
     file does not shrink (research/zotero_ops.md section 5);
   both results are checked (integrity_check, same session and event counts and bytes) before the
   timings count;
3. times the pass with nothing to do (DESIGN.md budget: <= 1 ms): on a 100-session store with the
   default policy (the steady state the cap of 100 keeps), and on the vacuumed big store with the
   cap off;
4. prints a markdown table and writes bench/out/bench_maintenance.json.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import shutil
import signal
import sqlite3
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _paths import OUT_DIR  # noqa: E402
from _procs import short_tmpdir  # noqa: E402
from _report import env_info, fmt_ms, markdown_table, summarize, timer, write_json  # noqa: E402
from _stores import build_bulk_store  # noqa: E402

TARGET_NOOP_MS = 1.0  # DESIGN.md, "Performance budget"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sessions", type=int, default=1600, help="sessions built, half then deleted (default 1600: ~200 MB)")
    p.add_argument("--events", type=int, default=85, help="events per session, seed included (default 85)")
    p.add_argument("--rounds", type=int, default=3, help="timed VACUUM rounds per side (default 3)")
    p.add_argument("--noop-rounds", type=int, default=300, help="timed passes with nothing to do (default 300)")
    p.add_argument("--quick", action="store_true",
                   help="smoke run: 260 sessions (~34 MB, just above the 30 MB rule), 1 round, 50 no-op passes")
    p.add_argument("--seed", type=int, default=20260101, help="data generator seed")
    p.add_argument("--out", type=Path, default=OUT_DIR / "bench_maintenance.json", help="where the JSON results go")
    p.add_argument("--keep-data", action="store_true", help="keep the temp data dir (path printed at the end)")
    a = p.parse_args(argv)
    if a.quick:
        a.sessions, a.rounds, a.noop_rounds = min(a.sessions, 260), 1, 50
    if a.rounds < 1 or a.noop_rounds < 1 or a.sessions < 4 or a.events < 2:
        p.error("--rounds and --noop-rounds must be >= 1, --sessions >= 4, --events >= 2")
    return a


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def file_bytes(db: Path) -> int:
    wal = Path(f"{db}-wal")
    return db.stat().st_size + (wal.stat().st_size if wal.exists() else 0)


def fingerprint(db: Path) -> tuple[str, int, int, int]:
    """(integrity_check, sessions, events, total event bytes): equal on both sides, and to the input."""
    conn = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)
    try:
        return (
            conn.execute("PRAGMA integrity_check").fetchone()[0],
            conn.execute("SELECT count(*) FROM sessions").fetchone()[0],
            conn.execute("SELECT count(*) FROM events").fetchone()[0],
            conn.execute("SELECT total(length(event_data)) FROM events").fetchone()[0],
        )
    finally:
        conn.close()


def copy_data_dir(src: Path, dst: Path) -> Path:
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst)
    return dst


# --- the two sides -------------------------------------------------------------------------------


async def _zocratesd(data_dir: Path, config: Any, noop_rounds: int = 0) -> dict[str, Any]:
    from zocratesd.core.daemon import Daemon

    daemon = Daemon(data_dir, config)
    # Daemon.start() is prepare_tables() then this very pass: open the store, and time the pass.
    await daemon.db.prepare_tables()
    m = daemon.maintenance
    try:
        t0 = timer()
        report = await m.run(startup=True)
        elapsed = timer() - t0
        noop: list[float] = []
        for _ in range(noop_rounds):
            t1 = timer()
            r = await m.run(startup=False)
            noop.append(timer() - t1)
            if r["empty_deleted"] or r["retention_deleted"] or r["vacuum"]["skipped_reason"] != "not_needed":
                raise AssertionError(f"a pass with nothing to do did something: {r}")
        return {"report": report, "elapsed": elapsed, "noop": noop}
    finally:
        await daemon.aclose()


def run_zocratesd(data_dir: Path, config: Any, noop_rounds: int = 0) -> dict[str, Any]:
    return asyncio.run(_zocratesd(data_dir, config, noop_rounds))


def run_peer(db: Path) -> dict[str, Any]:
    before = file_bytes(db)
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        t0 = timer()
        conn.execute("VACUUM")
        t_vacuum = timer() - t0
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        elapsed = timer() - t0
    finally:
        conn.close()
    return {"elapsed": elapsed, "vacuum_only": t_vacuum, "bytes_before": before, "bytes_after": file_bytes(db)}


# --- the run -------------------------------------------------------------------------------------


def _exit_on_signal(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _exit_on_signal)
    signal.signal(signal.SIGINT, _exit_on_signal)
    started = timer()
    with short_tmpdir("zm", keep=args.keep_data) as tmp:
        return run(args, tmp, started)


def run(args: argparse.Namespace, tmp: Path, started: float) -> int:
    from zocratesd.config import ZocratesConfig
    from zocratesd.store.database import db_path

    log(f"building {args.sessions} sessions of {args.events} events, then deleting every other one ...")
    template = tmp / "template"
    big = build_bulk_store(template, sessions=args.sessions, events_per_session=args.events, drop_every=2, seed=args.seed)
    log(f"  built in {big.build_s:.1f} s: {big.db_bytes / 1e6:.0f} MB, {big.sessions} sessions and {big.events} events"
        f" left, freelist {big.freelist_ratio:.0%} of {big.page_count} pages")
    source = fingerprint(big.db_path)
    if source[0] != "ok":
        raise AssertionError(f"the built database is not sound: {source[0]}")
    # The cap would delete most of the big store's sessions: this measures reclamation alone.
    big_config = ZocratesConfig(max_saved_sessions=None)

    z_times: list[float] = []
    z_swap: list[float] = []
    p_times: list[float] = []
    p_vacuum: list[float] = []
    z_bytes: tuple[int, int] = (0, 0)
    p_bytes: tuple[int, int] = (0, 0)
    noop_big: list[float] = []
    for rnd in range(args.rounds):
        order = ("z", "p") if rnd % 2 == 0 else ("p", "z")
        for side in order:
            d = copy_data_dir(template, tmp / f"round-{side}")
            gc.collect()
            if side == "z":
                last = rnd == args.rounds - 1
                res = run_zocratesd(d, big_config, noop_rounds=args.noop_rounds if last else 0)
                vac = res["report"]["vacuum"]
                if not vac["ran"]:
                    raise AssertionError(f"zocratesd did not VACUUM the big store: {res['report']}")
                if fingerprint(db_path(d)) != source:
                    raise AssertionError("zocratesd's vacuumed file differs from the input")
                z_times.append(res["elapsed"])
                z_swap.append(vac["duration_ms"] / 1000.0)
                z_bytes = (vac["bytes_before"], vac["bytes_after"])
                if last:
                    noop_big = res["noop"]
            else:
                res = run_peer(db_path(d))
                if fingerprint(db_path(d)) != source:
                    raise AssertionError("the plain VACUUM's file differs from the input")
                p_times.append(res["elapsed"])
                p_vacuum.append(res["vacuum_only"])
                p_bytes = (res["bytes_before"], res["bytes_after"])
            log(f"  round {rnd + 1} {side}: {res['elapsed'] * 1000:.0f} ms")
            shutil.rmtree(d)

    log("no-op passes on a 100-session store with the default policy ...")
    small = build_bulk_store(tmp / "small", sessions=100, events_per_session=args.events, seed=args.seed + 7)
    res = run_zocratesd(tmp / "small", ZocratesConfig(), noop_rounds=args.noop_rounds)
    if res["report"]["empty_deleted"] or res["report"]["retention_deleted"]:
        raise AssertionError(f"the default policy deleted sessions of the small store: {res['report']}")
    noop_small = res["noop"]

    results = {
        "z_pass": summarize(z_times), "z_swap": summarize(z_swap), "p_vacuum_ckpt": summarize(p_times),
        "p_vacuum": summarize(p_vacuum), "noop_small": summarize(noop_small), "noop_big": summarize(noop_big),
    }
    report(args, big, small, results, z_bytes, p_bytes, started)
    return 0


def report(args: argparse.Namespace, big: Any, small: Any, r: dict[str, Any], z_bytes: tuple[int, int],
           p_bytes: tuple[int, int], started: float) -> None:
    def ratio(peer: dict[str, Any], ours: dict[str, Any]) -> str:
        return f"{peer['median_ms'] / ours['median_ms']:.2f}x" if ours["median_ms"] else "—"

    def mb(n: int) -> str:
        return f"{n / 1e6:.1f} MB"

    noop_ok = r["noop_small"]["median_ms"] <= TARGET_NOOP_MS
    rows = [
        [f"maintenance pass, {mb(big.db_bytes)} file, {big.freelist_ratio:.0%} free pages", fmt_ms(r["z_pass"]),
         fmt_ms(r["p_vacuum_ckpt"]), ratio(r["p_vacuum_ckpt"], r["z_pass"]), "—"],
        ["  of which the VACUUM swap (store paused)", fmt_ms(r["z_swap"]), f"{fmt_ms(r['p_vacuum'])} (VACUUM alone)",
         ratio(r["p_vacuum"], r["z_swap"]), "—"],
        ["  file + WAL before → after", f"{mb(z_bytes[0])} → {mb(z_bytes[1])}", f"{mb(p_bytes[0])} → {mb(p_bytes[1])}",
         "—", "—"],
        ["pass with nothing to do, 100 sessions, default policy", fmt_ms(r["noop_small"]), "— (ADK has none)", "—",
         f"≤ {TARGET_NOOP_MS:g} ms{'' if args.quick else (' ✓' if noop_ok else ' ✗')}"],
        [f"pass with nothing to do, {big.sessions} sessions, cap off", fmt_ms(r["noop_big"]), "— (ADK has none)", "—", "—"],
    ]
    print()
    print(markdown_table(["operation", "zocratesd", "peer: plain VACUUM + checkpoint", "peer/zocratesd", "target"], rows))
    print()
    print(f"Medians (p95). {args.rounds} round(s) per side, alternating; {args.noop_rounds} no-op passes. "
          f"Both results checked: integrity_check ok, same sessions/events/bytes as the input. "
          f"Run took {timer() - started:.0f} s.")
    write_json(args.out, {
        "env": env_info(),
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "big_store": {"db_bytes": big.db_bytes, "sessions": big.sessions, "dropped": big.dropped, "events": big.events,
                      "page_count": big.page_count, "freelist_count": big.freelist_count, "build_s": round(big.build_s, 2)},
        "small_store": {"db_bytes": small.db_bytes, "sessions": small.sessions},
        "bytes": {"zocratesd": list(z_bytes), "peer": list(p_bytes)},
        "results": r,
    })
    print(f"(results written to {args.out})")


if __name__ == "__main__":
    sys.exit(main())
