"""Library index benchmark: build, incremental refresh and scoped search over a large Zotero library.

    ./dev bench bench/bench_library.py            # 10,000 items, 2,000 full texts of 20 pages; ~2 min on 2 cores
    ./dev bench bench/bench_library.py --quick    # 1,000 items, 200 texts of 5 pages; ~15 s

1. builds a Zotero data dir with tests/zoterofixture.py (`generate_library`: Zipf-distributed
   words, nested collections, 1% trashed items) in Zotero 10's shape (WAL) by default;
2. builds `library.db` with the daemon's own indexer code (`Indexer.refresh`, the body of the
   background thread), through the same snapshot path a running Zotero forces;
3. checks the index before timing anything: item and chunk counts, no trashed item indexed,
   known-item queries (words of an item's title) find the item;
4. times 200 queries (`Library.search`, what `search_library` awaits) in library scope, in one
   collection (with subcollections) and over 5 selected papers, alternating with the peer;
5. edits 10 items in zotero.sqlite as Zotero would and times the incremental refresh, and the
   refresh that finds nothing to do.

The peer is the naive approach in the same run: for queries, a LIKE scan of the same chunks
(`body LIKE '%word%'` for each query word, ranked by how many words match: what a plugin without a
full-text index does); for the refresh, rebuilding the index from scratch (the index build).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import random
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

from _paths import OUT_DIR
from _procs import short_tmpdir
from _report import env_info, fmt_ms, markdown_table, summarize, timer, write_json
from zoterofixture import build_zotero_dir, generate_library, touch_items  # tests/, on sys.path by _paths

from zocratesd.library import dense
from zocratesd.library.index import INDEX_NAME
from zocratesd.library.retrieval import Scope, tokens
from zocratesd.library.service import Library

TARGET_BUILD_S = 120.0
TARGET_REFRESH_S = 1.0
TARGET_QUERY_P50_MS = 20.0
TOP_K = 6


def make_queries(lib: Any, n: int, rng: random.Random) -> list[tuple[str, str | None]]:
    """(query, expected item key or None): half known-item queries (3 words of a live item's title),
    half topical questions of 2-4 content words of middle frequency, as a user would ask."""
    live = [it for it in lib.items if not it.trashed]
    out: list[tuple[str, str | None]] = []
    for i in range(n):
        if i % 2 == 0:
            it = rng.choice(live)
            words = it.title.lower().split()
            out.append(("find the paper on " + " ".join(rng.sample(words, min(3, len(words)))), it.key))
        else:
            words = rng.sample(lib.vocabulary[30:3000], rng.randint(2, 4))
            out.append((f"what is known about {' and '.join(words)}?", None))
    return out


def like_search(conn: sqlite3.Connection, query: str, scope_sql: str, scope_args: list[Any]) -> list[tuple[str, int]]:
    """The peer: every chunk whose title or text contains any query word, ranked by how many words
    it contains (the same chunks and scope tables as ours, no full-text index)."""
    words = list(dict.fromkeys(tokens(query)))[:24]
    if not words:
        return []
    score = " + ".join("(f.title || ' ' || f.body LIKE ?)" for _ in words)
    any_word = " OR ".join("f.title || ' ' || f.body LIKE ?" for _ in words)
    pats = [f"%{w}%" for w in words]
    sql = (f"SELECT c.item_key, {score} AS s FROM chunks_fts f JOIN chunks c ON c.id = f.rowid "
           f"WHERE ({any_word}) {scope_sql} ORDER BY s DESC LIMIT {TOP_K}")
    return conn.execute(sql, pats + pats + scope_args).fetchall()


def peer_scope(scope: Scope) -> tuple[str, list[Any]]:
    if scope.mode == "papers":
        return f"AND c.item_key IN ({','.join('?' * len(scope.item_keys))})", list(scope.item_keys)
    if scope.mode == "collection":
        return ("AND c.uid IN (SELECT uid FROM item_collections WHERE collection_key IN (WITH RECURSIVE sub(k) AS "
                "(SELECT ? UNION SELECT col.key FROM collections col JOIN sub ON col.parent_key = sub.k) SELECT k FROM sub))",
                [scope.collection])
    return "", []


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, default=10_000)
    ap.add_argument("--fulltexts", type=int, default=2_000)
    ap.add_argument("--pages", type=int, default=20)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--peer-queries", type=int, default=40, help="LIKE scans are slow: this many of the queries per scope")
    ap.add_argument("--changed", type=int, default=10)
    ap.add_argument("--refresh-rounds", type=int, default=3)
    ap.add_argument("--zotero-version", type=int, default=129, choices=(123, 125, 129))
    ap.add_argument("--quick", action="store_true", help="1,000 items, 200 texts of 5 pages; targets not judged")
    ap.add_argument("--seed", type=int, default=4)
    ap.add_argument("--out", type=Path, default=OUT_DIR / "bench_library.json")
    ap.add_argument("--keep-data", action="store_true")
    ap.add_argument("--no-dense", action="store_true", help="BM25 alone, as with `library.dense = false` (library/dense.py)")
    args = ap.parse_args()
    if args.no_dense:
        dense._loaded[:] = [None]  # as if wordllama were not installed
    dense_model = dense.model_name() or "off"
    print(f"dense stage: {dense_model}", file=sys.stderr)
    if args.quick:
        args.items, args.fulltexts, args.pages, args.queries, args.peer_queries = 1000, 200, 5, 100, 20

    rng = random.Random(args.seed)
    with short_tmpdir("zl", keep=args.keep_data) as tmp:
        data_dir = tmp / "Zotero"
        t0 = timer()
        gen = generate_library(args.items, args.fulltexts, args.pages, seed=args.seed)
        t_gen = timer() - t0
        t0 = timer()
        build_zotero_dir(data_dir, gen.items, gen.collections, version=args.zotero_version)
        t_write = timer() - t0
        text_mb = sum(len(a.text or "") for it in gen.items for a in it.attachments) / 1e6
        print(f"generated {args.items} items, {args.fulltexts} full texts ({text_mb:.0f} MB of text) in {t_gen:.1f} s; "
              f"wrote the data dir in {t_write:.1f} s", file=sys.stderr)

        state = data_dir / "zocrates-data"
        lib = Library(data_dir, state, local_api_url=None)
        gc.collect()
        t0 = timer()
        lib.indexer.refresh(None)
        t_build = timer() - t0
        st = lib.status()
        index_mb = sum(p.stat().st_size for p in state.glob(INDEX_NAME + "*")) / 1e6
        print(f"index built in {t_build:.1f} s: {st['items_indexed']} items, {st['chunks_indexed']} chunks, {index_mb:.0f} MB",
              file=sys.stderr)

        # --- correctness, before any timing ---------------------------------------------------------
        live = {it.key for it in gen.items if not it.trashed}
        assert st["state"] == "ready" and st["items_indexed"] == len(live), st
        assert st["attachments_with_text"] == sum(1 for it in gen.items if it.attachments and not it.trashed), st
        conn = sqlite3.connect(f"file:{state / INDEX_NAME}?mode=ro", uri=True)
        indexed = {r[0] for r in conn.execute("SELECT item_key FROM items")}
        assert indexed == live, "trashed items indexed, or live ones missing"
        queries = make_queries(gen, args.queries, rng)
        loop = asyncio.new_event_loop()
        found = [q for q, key in queries
                 if key and key in {h.passage.item_key for h in loop.run_until_complete(lib.search(q, Scope(), TOP_K))}]
        known = [q for q, key in queries if key]
        recall = len(found) / len(known)
        peer_found = sum(
            1 for q, key in queries[: args.peer_queries] if key and key in {k for k, _ in like_search(conn, q, "", [])}
        )
        peer_recall = peer_found / max(1, sum(1 for _, key in queries[: args.peer_queries] if key))
        assert recall >= 0.9, f"known-item recall@{TOP_K} is {recall:.2f}"

        # --- queries: three scopes, alternating with the peer -------------------------------------------
        top = next(c for c in gen.collections if c.parent is None)
        papers = tuple(rng.sample(sorted(live), 5))
        scopes = {
            "library": Scope(),
            f"collection ({top.name}, with subcollections)": Scope("collection", (), top.key),
            "papers (5 selected)": Scope("papers", papers),
        }
        query_rows: dict[str, dict[str, Any]] = {}
        for name, scope in scopes.items():
            ours: list[float] = []
            cpu: list[float] = []  # the process's CPU time per search: a proxy that load does not inflate
            peer: list[float] = []
            sql, sargs = peer_scope(scope)
            for i, (q, _) in enumerate(queries):
                gc.collect() if i % 50 == 0 else None
                first_peer = i % 2 == 1
                if first_peer and i < args.peer_queries:
                    t = timer(); like_search(conn, q, sql, sargs); peer.append(timer() - t)  # noqa: E702
                t, c = timer(), time.process_time()
                loop.run_until_complete(lib.search(q, scope, TOP_K))
                ours.append(timer() - t)
                cpu.append(time.process_time() - c)
                if not first_peer and i < args.peer_queries:
                    t = timer(); like_search(conn, q, sql, sargs); peer.append(timer() - t)  # noqa: E702
            query_rows[name] = {"ours": summarize(ours), "ours_cpu": summarize(cpu), "peer": summarize(peer)}

        # --- incremental refresh ------------------------------------------------------------------------
        refresh: list[float] = []
        reindexed: list[int] = []
        candidates = sorted(live)
        for r in range(args.refresh_rounds):
            keys = rng.sample(candidates, args.changed)
            touch_items(data_dir / "zotero.sqlite", keys, title_suffix=f" rev{r}", when=f"2026-0{r + 1}-01 00:00:00")
            gc.collect()
            t = timer()
            lib.indexer.refresh(None)
            refresh.append(timer() - t)
            reindexed.append(lib.status()["items_to_index"])
            assert reindexed[-1] == args.changed, reindexed
        t = timer()
        lib.indexer.refresh(None)
        noop = timer() - t
        assert lib.status()["items_to_index"] == 0
        conn.close()
        loop.run_until_complete(lib.aclose())
        loop.close()
        leftovers = list(state.glob("library-snapshot-*"))
        assert not leftovers, leftovers

    judge = not args.quick
    refresh_s = summarize(refresh)["median_ms"] / 1000

    def ratio(x: float) -> str:
        return f"{x:.0f}x" if x >= 10 else f"{x:.1f}x"

    def verdict(ok: bool) -> str:
        return ("met" if ok else "MISSED") if judge else "(quick)"

    rows = [
        ["index build", f"{t_build:.1f} s", "—", "—", f"≤ {TARGET_BUILD_S:.0f} s: {verdict(t_build <= TARGET_BUILD_S)}"],
        [f"refresh after {args.changed} changed items (median of {args.refresh_rounds})", f"{refresh_s * 1000:.0f} ms",
         f"{t_build:.1f} s (rebuild)", ratio(t_build / refresh_s), f"≤ {TARGET_REFRESH_S:.0f} s: {verdict(refresh_s <= TARGET_REFRESH_S)}"],
        ["refresh, nothing changed", f"{noop * 1000:.0f} ms", "—", "—", "—"],
    ]
    for name, r in query_rows.items():
        o, p = r["ours"], r["peer"]
        target = "—"
        if name == "library":
            target = f"p50 ≤ {TARGET_QUERY_P50_MS:.0f} ms: {verdict(o['median_ms'] <= TARGET_QUERY_P50_MS)}"
        rows.append([f"query, {name}: p50 (p95)", fmt_ms(o), fmt_ms(p), ratio(p["median_ms"] / o["median_ms"]), target])
        rows.append([f"query, {name}: CPU time p50 (p95)", fmt_ms(r["ours_cpu"]), "—", "—", "—"])
    title = (f"{args.items:,} items ({len(live):,} outside the trash), {args.fulltexts:,} full texts x {args.pages} pages "
             f"({text_mb:.0f} MB of text), Zotero schema {args.zotero_version}; {st['chunks_indexed']:,} chunks, "
             f"library.db {index_mb:.0f} MB; {args.queries} queries (peer: first {args.peer_queries}), top {TOP_K}; "
             f"dense stage: {dense_model}")
    table = markdown_table(["", "zocratesd", "peer (naive)", "peer/ours", "target"], rows)
    print(f"\n{title}\n\n{table}\n")
    print(f"known-item recall@{TOP_K}: zocratesd {recall:.2f}, peer {peer_recall:.2f}. "
          f"Generator: {t_gen:.1f} s + {t_write:.1f} s to write the data dir.")
    write_json(args.out, {
        "env": env_info(), "dense": dense_model, "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "library": {"items": args.items, "live_items": len(live), "fulltexts": args.fulltexts, "pages": args.pages,
                    "text_mb": round(text_mb, 1), "chunks": st["chunks_indexed"], "index_mb": round(index_mb, 1)},
        "generate_s": round(t_gen, 2), "write_s": round(t_write, 2), "build_s": round(t_build, 2),
        "refresh": summarize(refresh), "refresh_reindexed": reindexed, "noop_refresh_ms": round(noop * 1000, 1),
        "queries": query_rows, "recall": {"zocratesd": recall, "peer": peer_recall}, "table": table,
    })
    print(f"(JSON: {args.out})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
