"""A heavy library, as a user starts the daemon on it, against the floor: plain SQLite FTS5.

    ./dev bench bench/bench_heavy_library.py            # 10,000 items, 4,000 PDFs, ~110,000 pages; ~15 min on 2 cores
    ./dev bench bench/bench_heavy_library.py --quick    # 1,000 items, 400 PDFs; ~2 min
    ./dev bench bench/bench_heavy_library.py --no-dense-off   # skip the dense-off daemon

The library (bench/heavy_library.py: Zotero 10's schema, running headers, page numbers,
hyphenation, notes, highlights) is written once under bench/out/heavy/ and reused; each run works
on a copy of its `zotero.sqlite` (edited below) beside hard links to its files.

In the same run:
1. **the floor**: a plain Python `sqlite3` script, in a process of its own, inserting the same
   texts (each page of each `.zotero-ft-cache`, each item's title and abstract, notes,
   highlights) into one FTS5 table with the daemon's tokenizer, in one transaction: its wall time,
   CPU, peak RSS, file size, and one BM25 query's time for the same queries as below;
2. **zocratesd serve**, started as a user starts it, dense on (the default) and dense off: wall
   time from spawn to `_zocrates/library/status` saying ready, the CPU seconds of the daemon and
   its children, the peak RSS of the process tree (sampled every 0.1 s), `library.db`'s size, and
   the slowest answer of the socket while it builds (a status call every 0.25 s);
3. `_zocrates/library/search` through the socket: a paper's title and a claim-length sentence of
   its text as the query, in the whole library, in one collection (with its subcollections), and
   in a selection of 5 papers (the one the query is from and 4 others, a new selection for every
   query): p50 and p95 for each, and how often the title finds its paper in the top 6;
4. freshness: an item's title edited in `zotero.sqlite` as Zotero writes it, right after the first
   build, timed until a search finds it; then the daemon stopped, another edit, started again,
   timed from spawn until the edit is found.

Targets (the heavy-library issue): build within 4x the floor's wall time, peak RSS within 300 MiB,
`library.db` within 1.3x the floor's file, search p50 <= 20 ms and p95 <= 60 ms, title in the top 6
for >= 95%, an edit searchable within 10 s, the socket answering within 50 ms throughout.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import heavy_library  # noqa: E402
from _paths import OUT_DIR  # noqa: E402
from _procs import DaemonProc, daemon_env, short_tmpdir  # noqa: E402
from _report import env_info, markdown_table, percentile, timer, write_json  # noqa: E402
from _rpc import RpcClient  # noqa: E402

from zocratesd.library.index import INDEX_NAME, match_expression  # noqa: E402

TOP_K = 6
# The papers selected in the Zotero pane for a scoped search (see search_round).
SELECTED_PAPERS = 5
READY_TIMEOUT_S = 3600.0
EDIT_TIMEOUT_S = 600.0
MIB = 1024 * 1024
# The socket's answers are also reported from this long after the spawn on, past the daemon's own start.
STARTED_S = 3.0
TARGETS = {"build_ratio": 4.0, "rss_mib": 300.0, "size_ratio": 1.3, "p50_ms": 20.0, "p95_ms": 60.0, "recall": 0.95,
           "edit_s": 10.0, "socket_ms": 50.0}


def log(msg: str) -> None:
    print(f"[bench_heavy_library] {msg}", file=sys.stderr, flush=True)


# --- the floor -------------------------------------------------------------------------------------

FLOOR = r"""
import json, re, resource, sqlite3, sys, time
from pathlib import Path
zdir, out = Path(sys.argv[1]), sys.argv[2]
t0 = time.perf_counter()
src = sqlite3.connect(f"file:{zdir / 'zotero.sqlite'}?mode=ro", uri=True)
db = sqlite3.connect(out, isolation_level=None)
db.execute("CREATE VIRTUAL TABLE t USING fts5(title, body, tokenize = 'porter unicode61 remove_diacritics 2')")
db.execute("BEGIN")
fields = {name: fid for fid, name in src.execute("SELECT fieldID, fieldName FROM fields")}
def value(field):
    return ("SELECT v.value FROM itemData d JOIN itemDataValues v USING (valueID) WHERE d.itemID = i.itemID AND d.fieldID = "
            + str(fields[field]))
titles = {}
for iid, title, abstract in src.execute(f"SELECT i.itemID, ({value('title')}), ({value('abstractNote')}) FROM items i "
                                         "WHERE i.itemID NOT IN (SELECT itemID FROM deletedItems)"):
    titles[iid] = title or ""
    db.execute("INSERT INTO t VALUES (?, ?)", (title or "", abstract or ""))
tag = re.compile(r"<[^>]+>")
for parent, note in src.execute("SELECT parentItemID, note FROM itemNotes"):
    db.execute("INSERT INTO t VALUES (?, ?)", (titles.get(parent, ""), tag.sub(" ", note)))
for text, comment in src.execute("SELECT text, comment FROM itemAnnotations"):
    db.execute("INSERT INTO t VALUES ('', ?)", ((text or "") + "\n\n" + (comment or ""),))
for parent, key in src.execute("SELECT a.parentItemID, i.key FROM itemAttachments a JOIN items i USING (itemID)"):
    cache = zdir / "storage" / key / ".zotero-ft-cache"
    if cache.exists():
        title = titles.get(parent, "")
        db.executemany("INSERT INTO t VALUES (?, ?)", ((title, page) for page in cache.read_text("utf-8").split("\f") if page.strip()))
db.execute("COMMIT")
db.close()
wall = time.perf_counter() - t0
ru = resource.getrusage(resource.RUSAGE_SELF)
queries = json.loads(sys.argv[3])
db = sqlite3.connect(out)
times = []
for expr in queries:
    q0 = time.perf_counter()
    db.execute("SELECT rowid, bm25(t, 3.0, 1.5) AS s FROM t WHERE t MATCH ? ORDER BY s LIMIT 6", (expr,)).fetchall()
    times.append(time.perf_counter() - q0)
print(json.dumps({"wall_s": wall, "cpu_s": ru.ru_utime + ru.ru_stime, "rss_mib": ru.ru_maxrss / 1024, "query_s": times}))
"""


def warm_cache(zdir: Path) -> float:
    """Read every file of the library once, so that neither side is timed reading a cold disk
    (the first to run would otherwise pay for both); the seconds it took."""
    t0 = timer()
    for path in zdir.rglob("*"):
        if path.is_file():
            with open(path, "rb") as f:
                while f.read(1 << 20):
                    pass
    return timer() - t0


def run_floor(zdir: Path, work: Path, exprs: list[str]) -> dict[str, Any]:
    out = work / "floor.db"
    t0 = timer()
    proc = subprocess.run([sys.executable, "-c", FLOOR, str(zdir), str(out), json.dumps(exprs)], capture_output=True, text=True,
                          check=True)
    spawn_to_exit = timer() - t0
    got: dict[str, Any] = json.loads(proc.stdout)
    # The script's own build time (its queries follow it in the same process): what "start →
    # ready" is compared with.
    got["spawn_to_exit_s"] = spawn_to_exit
    got["size_mib"] = out.stat().st_size / MIB
    out.unlink()
    return got


# --- the daemon's processes ---------------------------------------------------------------------------


def _tree(pid: int) -> list[int]:
    """`pid` and its descendants (from /proc: no dependency for this)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            parents.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += parents.get(p, [])
    return out


def _rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _cpu_s(pid: int) -> float:
    """CPU seconds of `pid`, its live descendants, and the children it has reaped."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for p in _tree(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12]) + (int(fields[13]) + int(fields[14]) if p == pid else 0)
    return total / tick


class TreeSampler:
    """The process tree's summed RSS every 0.1 s, in a thread; `peak_mib` the largest seen."""

    def __init__(self, pid: int):
        self.pid = pid
        self.peak_kib = 0
        self.daemon_peak_kib = 0  # the daemon alone (the rest of the peak: its embedding child)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            self.peak_kib = max(self.peak_kib, sum(_rss_kib(p) for p in _tree(self.pid)))
            self.daemon_peak_kib = max(self.daemon_peak_kib, _rss_kib(self.pid))

    def stop(self) -> float:
        """The peak in MiB; the sampling ends (again: a no-op)."""
        self._stop.set()
        self._thread.join()
        return self.peak_kib / 1024


# --- the library's copy and its edits ---------------------------------------------------------------


def working_copy(zdir: Path, work: Path) -> Path:
    """`work/zotero`: a copy of the database (edited by the run), hard links to the stored files."""
    dst = work / "zotero"
    dst.mkdir()
    shutil.copy2(zdir / "zotero.sqlite", dst / "zotero.sqlite")
    subprocess.run(["cp", "-al", str(zdir / "storage"), str(dst / "storage")], check=True)
    return dst


def edit_title(db_path: Path, item_key: str, word: str) -> None:
    """Append `word` to an item's title as Zotero writes an edit: a new value, both stamps, the version."""
    db = sqlite3.connect(db_path, isolation_level=None)
    try:
        db.execute("BEGIN IMMEDIATE")
        (fid,) = db.execute("SELECT fieldID FROM fields WHERE fieldName = 'title'").fetchone()
        (iid,) = db.execute("SELECT itemID FROM items WHERE key = ? AND libraryID = 1", (item_key,)).fetchone()
        (old,) = db.execute("SELECT v.value FROM itemData d JOIN itemDataValues v USING (valueID) WHERE d.itemID = ? AND d.fieldID = ?",
                            (iid, fid)).fetchone()
        new = f"{old} {word}"
        db.execute("INSERT OR IGNORE INTO itemDataValues (value, valueNormalized) VALUES (?, ?)", (new, new.casefold()))
        (vid,) = db.execute("SELECT valueID FROM itemDataValues WHERE value = ?", (new,)).fetchone()
        db.execute("UPDATE itemData SET valueID = ? WHERE itemID = ? AND fieldID = ?", (vid, iid, fid))
        now = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
        db.execute("UPDATE items SET dateModified = ?, clientDateModified = ?, synced = 0, version = version WHERE itemID = ?",
                   (now, now, iid))
        db.execute("COMMIT")
    finally:
        db.close()


def wait_searchable(socket_path: str, word: str, item_key: str, t0: float) -> float:
    """Seconds from `t0` until searching `word` finds `item_key` (polling every 0.1 s)."""
    deadline = time.monotonic() + EDIT_TIMEOUT_S
    with RpcClient(socket_path) as c:
        while time.monotonic() < deadline:
            found, _ = c.call("_zocrates/library/search", {"query": word, "topK": TOP_K})
            if any(p["item_key"] == item_key for p in found["passages"]):
                return timer() - t0
            time.sleep(0.1)
    raise RuntimeError(f"the edit ({word}) was not searchable within {EDIT_TIMEOUT_S:.0f} s")


# --- one daemon ------------------------------------------------------------------------------------


def build_and_serve(zdir: Path, run: Path, truth: dict[str, Any], *, dense: bool, queries: list[tuple[str, str, str]],
                    freshness: bool) -> dict[str, Any]:
    env = daemon_env(run)
    env["ZOCRATES_LIBRARY__DENSE"] = "true" if dense else "false"
    daemon = DaemonProc(data_dir=zdir, runtime_dir=run, env=env)
    shutil.rmtree(daemon.state_dir, ignore_errors=True)
    t0 = timer()
    daemon.start()
    assert daemon.proc is not None
    sampler = TreeSampler(daemon.proc.pid)
    slowest = 0.0
    slowest_at = ("", 0.0)  # the state and seconds since spawn of the slowest answer
    slowest_building = 0.0  # the slowest once the daemon is up (STARTED_S after spawn)
    status: dict[str, Any] = {}
    percents: list[float] = []
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        with RpcClient(daemon.socket_path) as c:
            while time.monotonic() < deadline:
                c0 = timer()
                status, _ = c.call("_zocrates/library/status", {})
                if timer() - c0 > slowest:
                    slowest, slowest_at = timer() - c0, (f"{status['state']} {status.get('percent') or 0:.0f}%", c0 - t0)
                if c0 - t0 > STARTED_S:
                    slowest_building = max(slowest_building, timer() - c0)
                percents.append(float(status.get("percent") or 0.0))
                if status["state"] == "ready" and status["items_indexed"]:
                    break
                if status["state"] in ("error", "unavailable"):
                    raise RuntimeError(f"the index failed: {status.get('message')}")
                time.sleep(0.25)
            else:
                raise RuntimeError("the library was not indexed in time")
        wall = timer() - t0
        cpu = _cpu_s(daemon.proc.pid)
        peak = sampler.stop()
        index = daemon.state_dir / INDEX_NAME
        size = sum(p.stat().st_size for p in index.parent.glob(INDEX_NAME + "*"))
        log(f"dense {'on' if dense else 'off'}: ready in {wall:.1f} s, {cpu:.1f} CPU s, peak {peak:.0f} MiB "
            f"(the daemon alone {sampler.daemon_peak_kib / 1024:.0f}), {size / MIB:.0f} MiB; {status['items_indexed']} items, "
            f"{status['chunks_indexed']} chunks; slowest answer {slowest * 1000:.0f} ms ({slowest_at[0]}, {slowest_at[1]:.1f} s in)")
        got: dict[str, Any] = {"wall_s": wall, "cpu_s": cpu, "rss_mib": peak, "daemon_rss_mib": sampler.daemon_peak_kib / 1024,
                               "size_mib": size / MIB, "socket_max_ms": slowest * 1000, "socket_max_at": list(slowest_at),
                               "socket_building_max_ms": slowest_building * 1000,
                               "items": status["kinds"], "chunks": status["chunks_indexed"],
                               "progress_seen": len(set(percents))}
        got.update(search_round(daemon.socket_path, truth, queries))
        if freshness:
            got.update(edits(daemon, zdir, truth))
        return got
    finally:
        sampler.stop()
        daemon.stop()


def search_round(socket_path: str, truth: dict[str, Any], queries: list[tuple[str, str, str]]) -> dict[str, Any]:
    times: dict[str, list[float]] = {}
    found_title = 0
    n_title = 0
    papers = [t["item_key"] for t in truth["titles"]]
    rng = random.Random(11)
    with RpcClient(socket_path) as c:
        c.call("_zocrates/library/search", {"query": "warm up the reader and the model", "topK": TOP_K})
        for kind, query, key in queries:
            # A new selection for every question: each search gathers its scope (the worst case).
            selection = [key, *rng.sample(papers, SELECTED_PAPERS - 1)]
            scopes: list[tuple[str, dict[str, Any]]] = [
                ("", {}), (" scoped", {"collection": truth["collection"]}), (" in selected papers", {"itemKeys": selection})]
            for scope, where in scopes:
                params: dict[str, Any] = {"query": query, "topK": TOP_K, **where}
                q0 = timer()
                found, _ = c.call("_zocrates/library/search", params)
                times.setdefault(f"{kind}{scope}", []).append(timer() - q0)
                if kind == "title" and not scope:
                    n_title += 1
                    found_title += any(p["item_key"] == key for p in found["passages"])
    out: dict[str, Any] = {"recall_title": found_title / max(1, n_title)}
    for name, ts in times.items():
        out[f"search {name}"] = {"p50_ms": percentile(ts, 0.5) * 1000, "p95_ms": percentile(ts, 0.95) * 1000, "n": len(ts)}
    return out


def edits(daemon: DaemonProc, zdir: Path, truth: dict[str, Any]) -> dict[str, Any]:
    keys = [t["item_key"] for t in truth["titles"]]
    db_path = zdir / "zotero.sqlite"
    t0 = timer()
    edit_title(db_path, keys[-1], "zqxfreshone")
    after_build = wait_searchable(daemon.socket_path, "zqxfreshone", keys[-1], t0)
    log(f"an edit after the first build: searchable in {after_build:.1f} s")
    daemon.stop()
    edit_title(db_path, keys[-2], "zqxfreshtwo")
    t1 = timer()
    daemon.start()
    after_restart = wait_searchable(daemon.socket_path, "zqxfreshtwo", keys[-2], t1)
    log(f"an edit while stopped: searchable {after_restart:.1f} s after the spawn")
    t2 = timer()
    edit_title(db_path, keys[-3], "zqxfreshthree")
    running = wait_searchable(daemon.socket_path, "zqxfreshthree", keys[-3], t2)
    log(f"an edit after the restart: searchable in {running:.1f} s")
    return {"edit_after_build_s": after_build, "edit_restart_s": after_restart, "edit_after_restart_s": running}


# --- the report ------------------------------------------------------------------------------------


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def report(floor: dict[str, Any], runs: dict[str, dict[str, Any]]) -> str:
    fq = sorted(floor["query_s"])
    floor_p50 = percentile(fq, 0.5) * 1000
    cols = list(runs)
    rows: list[list[Any]] = []

    def row(name: str, fn: Any, floor_cell: str, target: str) -> None:
        rows.append([name, *(fn(runs[c]) for c in cols), floor_cell, target])

    row("start → ready (s)", lambda r: f"{r['wall_s']:.1f} ({r['wall_s'] / floor['wall_s']:.1f}x)",
        f"{floor['wall_s']:.1f}", f"≤ {TARGETS['build_ratio']:.0f}x floor")
    row("CPU s", lambda r: f"{r['cpu_s']:.1f}", f"{floor['cpu_s']:.1f}", "")
    row("peak RSS (MiB)", lambda r: f"{r['rss_mib']:.0f}", f"{floor['rss_mib']:.0f}", f"≤ {TARGETS['rss_mib']:.0f}")
    row("library.db (MiB)", lambda r: f"{r['size_mib']:.0f} ({r['size_mib'] / floor['size_mib']:.2f}x)", f"{floor['size_mib']:.0f}",
        f"≤ {TARGETS['size_ratio']}x floor")
    row("slowest socket answer from spawn to ready (ms)", lambda r: f"{r['socket_max_ms']:.0f}", "", f"≤ {TARGETS['socket_ms']:.0f}")
    row(f"… from {STARTED_S:.0f} s after spawn (ms)", lambda r: f"{r['socket_building_max_ms']:.0f}", "", f"≤ {TARGETS['socket_ms']:.0f}")
    for name in ("title", "title scoped", "title in selected papers", "claim", "claim scoped", "claim in selected papers"):
        row(f"search {name} p50 / p95 (ms)",
            lambda r, n=name: f"{r[f'search {n}']['p50_ms']:.1f} / {r[f'search {n}']['p95_ms']:.1f}",
            f"one FTS5 query p50 {floor_p50:.1f}" if name == "title" else "",
            f"≤ {TARGETS['p50_ms']:.0f} / {TARGETS['p95_ms']:.0f}")
    row("title in the top 6", lambda r: f"{r['recall_title']:.3f}", "", f"≥ {TARGETS['recall']}")
    row("edit → searchable after the first build (s)", lambda r: f"{r['edit_after_build_s']:.1f}" if "edit_after_build_s" in r else "—",
        "", f"≤ {TARGETS['edit_s']:.0f}")
    row("edit while stopped → searchable from spawn (s)", lambda r: f"{r['edit_restart_s']:.1f}" if "edit_restart_s" in r else "—",
        "", "")
    row("edit after a restart → searchable (s)", lambda r: f"{r['edit_after_restart_s']:.1f}" if "edit_after_restart_s" in r else "—",
        "", f"≤ {TARGETS['edit_s']:.0f}")
    return markdown_table(["", *cols, "floor (FTS5 script)", "target"], rows)


def judge(floor: dict[str, Any], r: dict[str, Any]) -> list[str]:
    """The targets a run misses."""
    misses = []
    if r["wall_s"] > TARGETS["build_ratio"] * floor["wall_s"]:
        misses.append("build time")
    if r["rss_mib"] > TARGETS["rss_mib"]:
        misses.append("peak RSS")
    if r["size_mib"] > TARGETS["size_ratio"] * floor["size_mib"]:
        misses.append("library.db size")
    if r["socket_max_ms"] > TARGETS["socket_ms"]:
        misses.append("socket latency while building")
    for k, v in r.items():
        if k.startswith("search ") and (v["p50_ms"] > TARGETS["p50_ms"] or v["p95_ms"] > TARGETS["p95_ms"]):
            misses.append(k)
    if r["recall_title"] < TARGETS["recall"]:
        misses.append("title recall")
    for k in ("edit_after_build_s", "edit_after_restart_s"):
        if k in r and r[k] > TARGETS["edit_s"]:
            misses.append(k)
    return misses


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="1,000 items, 400 PDFs")
    ap.add_argument("--no-dense-off", action="store_true", help="only the default daemon (dense on)")
    ap.add_argument("--queries", type=int, default=200, help="titles and claims each (default 200)")
    ap.add_argument("--keep", action="store_true", help="keep the run's temp dir")
    args = ap.parse_args()
    shape = heavy_library.QUICK if args.quick else heavy_library.HEAVY
    root = OUT_DIR / "heavy" / shape.name
    t0 = timer()
    zsource = heavy_library.build(root, shape)
    log(f"library {shape.name} at {root} ({timer() - t0:.0f} s to make or find)")
    truth = json.loads((root / "truth.json").read_text())
    rng = random.Random(7)
    titles = rng.sample(truth["titles"], min(args.queries, len(truth["titles"])))
    claims = rng.sample(truth["claims"], min(args.queries, len(truth["claims"])))
    queries = [q for pair in zip((("title", t["query"], t["item_key"]) for t in titles),
                                 (("claim", c["query"], c["item_key"]) for c in claims), strict=False) for q in pair]
    exprs = [e for _, q, _ in queries if (e := match_expression(q))]
    runs: dict[str, dict[str, Any]] = {}
    with short_tmpdir("zh", keep=args.keep) as tmp:
        log(f"the library's files read once in {warm_cache(zsource):.1f} s (a warm cache for both sides)")
        floor = run_floor(zsource, tmp, exprs)
        log(f"floor: built in {floor['wall_s']:.1f} s, {floor['cpu_s']:.1f} CPU s, {floor['rss_mib']:.0f} MiB, {floor['size_mib']:.0f} MiB")
        for dense in (True, False) if not args.no_dense_off else (True,):
            work = tmp / ("on" if dense else "off")
            work.mkdir()
            zdir = working_copy(zsource, work)
            run = work / "run"
            run.mkdir()
            runs[f"zocratesd, dense {'on' if dense else 'off'}"] = build_and_serve(
                zdir, run, truth, dense=dense, queries=queries, freshness=dense)
            shutil.rmtree(zdir / "storage")
    table = report(floor, runs)
    print(f"\n## Heavy library: {shape.name}\n\n{table}\n")
    misses = {name: judge(floor, r) for name, r in runs.items()}
    for name, m in misses.items():
        print(f"- {name}: {'every target met' if not m else 'targets missed: ' + ', '.join(m)}")
    write_json(OUT_DIR / f"bench_heavy_library{'_quick' if args.quick else ''}.json",
               {"env": env_info(), "shape": shape.name, "floor": floor, "runs": runs, "misses": misses})
    return 0


if __name__ == "__main__":
    sys.exit(main())
