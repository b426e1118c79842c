"""Retrieval quality on a public benchmark: BEIR SciFact through the daemon's real search path.

    ./dev bench bench/bench_retrieval.py            # every layout, train and test; ~4 min on 2 cores
    ./dev bench bench/bench_retrieval.py --quick    # test queries only, abstract layout + reference; ~1 min

Data: `../shared/data/beir/scifact/` (read in place; `--data DIR` for another copy): 5,183
abstracts, 1,109 claims, relevance judgments `qrels/train.tsv` (809 queries) and `qrels/test.tsv`
(300). Tune on train, report test beside it (the README of the data says the same).

Layouts, each a data dir the daemon reads as a user's would be:
- `abstract`: a Zotero database (demo/zotero_dir.py, Zotero 10's schema) with each paper's title in
  its title field and its abstract in `abstractNote`, indexed by the daemon's own indexer;
- `fulltext`: the same papers with no abstract field, the abstract arriving as a PDF's text (the
  `.zotero-ft-cache` Zotero's PDF worker writes), chunked by the indexer as any PDF is;
- `passages`: no `zotero.sqlite`, a `zocrates-data/library_passages.jsonl` holding each paper
  (title, text) as one passage, given to whatever retriever the daemon itself picks for such a dir
  (`Catalogue.make_source`, core/catalogue.py).

Every query goes through the retriever's `search` (what the `search_library` tool awaits), library
scope. Its passages are folded into a ranking of papers (each paper at its best passage's rank);
nDCG@10 (binary gains, as BEIR's pytrec_eval) and Recall@100 are computed here from the qrels.
`search` is called with top_k = 200 for the ranking (MAX_HITS_PER_ITEM caps two passages per paper,
so at least 100 papers come back); the latency reported is p50 of a separate call with the tool's
own top_k (DEFAULT_TOP_K), over the same queries.

The reference in the same run is `bm25s` (k1 = 0.9, b = 0.4, Lucene's BM25 variant, English
stopwords and the Snowball English stemmer: the configuration the bm25s project reports for BEIR)
over title + abstract, as a plain in-memory index with no chunks. Published nDCG@10 on test, for
orientation: BM25 0.665, BM25 + cross-encoder 0.688, BGE-large 0.746.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import random
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from _paths import OUT_DIR, REPO_DIR
from _procs import short_tmpdir
from _report import env_info, markdown_table, summarize, timer, write_json

from zocratesd.config import ZocratesConfig
from zocratesd.core.catalogue import LIBRARY_PASSAGES_FILE, Catalogue
from zocratesd.demo import zotero_dir as zw
from zocratesd.library import dense
from zocratesd.library.retrieval import DEFAULT_TOP_K, Hit, Scope
from zocratesd.library.service import Library

DATA_DIR = REPO_DIR.parent / "shared" / "data" / "beir" / "scifact"
# Targets on test (issue 20, item 8): both layouts, nDCG@10 and Recall@100.
TARGET_NDCG10 = 0.71
TARGET_RECALL100 = 0.93
FETCH_K = 200
BM25S_K1 = 0.9
BM25S_B = 0.4


# --- data ----------------------------------------------------------------------------------------

def load_scifact(data: Path) -> tuple[dict[str, tuple[str, str]], dict[str, str], dict[str, dict[str, dict[str, int]]]]:
    """(corpus id -> (title, text), query id -> text, split -> query id -> {corpus id: gain})."""
    corpus: dict[str, tuple[str, str]] = {}
    with open(data / "corpus.jsonl", encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            corpus[str(d["_id"])] = (d.get("title") or "", d.get("text") or "")
    queries: dict[str, str] = {}
    with open(data / "queries.jsonl", encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            queries[str(d["_id"])] = d["text"]
    qrels: dict[str, dict[str, dict[str, int]]] = {}
    for split in ("train", "test"):
        rel: dict[str, dict[str, int]] = {}
        with open(data / "qrels" / f"{split}.tsv", encoding="utf-8") as f:
            next(f)  # header
            for line in f:
                qid, did, score = line.rstrip("\n").split("\t")
                if int(score) > 0:
                    rel.setdefault(qid, {})[did] = int(score)
        qrels[split] = rel
    return corpus, queries, qrels


def zotero_keys(ids: Sequence[str], seed: int = 20) -> dict[str, str]:
    """A distinct Zotero key (as Zotero makes them) per corpus id, reproducibly."""
    rng = random.Random(seed)
    out: dict[str, str] = {}
    used: set[str] = set()
    for i in ids:
        k = zw.new_key(rng)
        while k in used:
            k = zw.new_key(rng)
        used.add(k)
        out[i] = k
    return out


# --- the layouts -----------------------------------------------------------------------------------

SearchFn = Callable[[str, int], list[Hit]]


def build_zotero(root: Path, corpus: dict[str, tuple[str, str]], keys: dict[str, str], layout: str) -> tuple[Library, float]:
    """A data dir with a Zotero 10 database of the corpus and the daemon's index of it; (library, build s)."""
    data_dir = root / layout
    items = []
    att_keys = zotero_keys([f"att-{i}" for i in corpus], seed=21)
    for did, (title, text) in corpus.items():
        if layout == "abstract":
            items.append(zw.Item(keys[did], title or "(untitled)", fields={"abstractNote": text} if text else {}))
        else:
            items.append(zw.Item(keys[did], title or "(untitled)",
                                 attachments=[zw.Attachment(att_keys[f"att-{did}"], pages=[text])] if text else []))
    zw.write(data_dir, zw.Library(items=items), version=zw.ZOTERO_10)
    lib = Library(data_dir, data_dir / "zocrates-data", local_api_url=None)
    gc.collect()
    t0 = timer()
    lib.indexer.refresh(None)
    build_s = timer() - t0
    st = lib.status()
    assert st["state"] == "ready" and st["items_indexed"] == len(corpus), st
    return lib, build_s


async def _no_collections(name: str) -> str:
    raise LookupError(name)


def build_passages(root: Path, corpus: dict[str, tuple[str, str]], keys: dict[str, str]) -> tuple[Any, float]:
    """A data dir with only `zocrates-data/library_passages.jsonl`, and the retriever the daemon
    picks for it (the core's own catalogue, `Catalogue.make_source`)."""
    data_dir = root / "passages"
    state = data_dir / "zocrates-data"
    state.mkdir(parents=True)
    with open(state / LIBRARY_PASSAGES_FILE, "w", encoding="utf-8") as f:
        for did, (title, text) in corpus.items():
            f.write(json.dumps({"item_key": keys[did], "title": title or "(untitled)", "text": text or title}) + "\n")
    # `library.dense` as this run has it (--no-dense), which the daemon's code applies.
    config = ZocratesConfig(library={"dense": bool(dense.model_name())})
    catalogue = Catalogue(data_dir, config, None, find_collection=_no_collections)
    t0 = timer()
    # What the daemon's catalogue makes (the retriever, and the Library if it is one): its own code.
    retriever = catalogue.make_source().retriever
    if isinstance(retriever, Library):  # an index the daemon builds: build it now, as its indexer would
        retriever.indexer.refresh(None)
    loop = asyncio.new_event_loop()
    loop.run_until_complete(retriever.search("warm up", Scope(), 1))  # loads (or reloads) the file
    loop.close()
    return retriever, timer() - t0


# --- metrics -----------------------------------------------------------------------------------------

def ndcg_at(ranked: Sequence[str], rel: dict[str, int], k: int = 10) -> float:
    dcg = sum(rel.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranked[:k]))
    ideal = sorted(rel.values(), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg else 0.0


def recall_at(ranked: Sequence[str], rel: dict[str, int], k: int = 100) -> float:
    return len(set(ranked[:k]) & set(rel)) / len(rel) if rel else 0.0


def papers(hits: Sequence[Hit], key_to_id: dict[str, str]) -> list[str]:
    """Passages folded into papers, each at its best passage's rank."""
    out: list[str] = []
    seen: set[str] = set()
    for h in hits:
        did = key_to_id.get(h.passage.item_key)
        if did is not None and did not in seen:
            seen.add(did)
            out.append(did)
    return out


def evaluate(rankings: dict[str, list[str]], qrels: dict[str, dict[str, int]]) -> dict[str, float]:
    qids = [q for q in qrels if q in rankings]
    return {
        "ndcg@10": sum(ndcg_at(rankings[q], qrels[q]) for q in qids) / len(qids),
        "recall@100": sum(recall_at(rankings[q], qrels[q]) for q in qids) / len(qids),
        "queries": len(qids),
    }


def run_ours(retriever: Any, queries: dict[str, str], qids: Sequence[str], key_to_id: dict[str, str],
             top1_kinds: dict[str, int] | None = None) -> tuple[dict[str, list[str]], list[float]]:
    """Each query through `retriever.search` (library scope): the paper ranking, and the latency
    samples of the tool-sized call."""
    loop = asyncio.new_event_loop()
    rankings: dict[str, list[str]] = {}
    lat: list[float] = []
    try:
        for n, qid in enumerate(qids):
            if n % 200 == 0:
                gc.collect()
            q = queries[qid]
            hits = loop.run_until_complete(retriever.search(q, Scope(), FETCH_K))
            rankings[qid] = papers(hits, key_to_id)[:100]
            if top1_kinds is not None and hits:
                top1_kinds[hits[0].passage.kind] = top1_kinds.get(hits[0].passage.kind, 0) + 1
            t = timer()
            loop.run_until_complete(retriever.search(q, Scope(), DEFAULT_TOP_K))
            lat.append(timer() - t)
    finally:
        loop.close()
    return rankings, lat


def run_bm25s(
    corpus: dict[str, tuple[str, str]], queries: dict[str, str], qids: Sequence[str]
) -> tuple[dict[str, list[str]], list[float], float]:
    import bm25s
    import Stemmer

    ids = list(corpus)
    stemmer = Stemmer.Stemmer("english")
    t0 = timer()
    toks = bm25s.tokenize([f"{t} {x}" for t, x in corpus.values()], stopwords="en", stemmer=stemmer, show_progress=False)
    model = bm25s.BM25(k1=BM25S_K1, b=BM25S_B)
    model.index(toks, show_progress=False)
    build_s = timer() - t0
    rankings: dict[str, list[str]] = {}
    lat: list[float] = []
    for qid in qids:
        t = timer()
        qt = bm25s.tokenize([queries[qid]], stopwords="en", stemmer=stemmer, show_progress=False)
        docs, _ = model.retrieve(qt, k=100, show_progress=False, n_threads=1)
        lat.append(timer() - t)
        rankings[qid] = [ids[int(i)] for i in docs[0]]
    return rankings, lat, build_s


# --- main ----------------------------------------------------------------------------------------------

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=DATA_DIR)
    ap.add_argument("--layouts", default="abstract,fulltext,passages")
    ap.add_argument("--splits", default="train,test")
    ap.add_argument("--quick", action="store_true", help="test split, abstract layout and the reference only")
    ap.add_argument("--out", type=Path, default=OUT_DIR / "bench_retrieval.json")
    ap.add_argument("--keep-data", action="store_true")
    ap.add_argument("--no-dense", action="store_true",
                    help="BM25 alone, as a daemon with `library.dense = false` (library/dense.py) searches")
    ap.add_argument("--no-reference", action="store_true",
                    help="skip bm25s (the `test` extra): measure a venv made by `./dev install` alone")
    args = ap.parse_args()
    if args.quick:
        args.layouts, args.splits = "abstract", "test"
    if not (args.data / "corpus.jsonl").exists():
        print(f"bench_retrieval: no SciFact data in {args.data} (corpus.jsonl, queries.jsonl, qrels/)", file=sys.stderr)
        return 2
    if args.no_dense:
        dense.set_enabled(False)  # as the daemon with `library.dense = false`
    dense_model = dense.model_name() or "off"
    print(f"dense stage: {dense_model}", file=sys.stderr)
    layouts = [x for x in args.layouts.split(",") if x]
    splits = [x for x in args.splits.split(",") if x]
    corpus, queries, qrels = load_scifact(args.data)
    keys = zotero_keys(list(corpus))
    key_to_id = {k: d for d, k in keys.items()}
    qids = sorted({q for s in splits for q in qrels[s]}, key=lambda q: int(q) if q.isdigit() else q)
    print(f"SciFact: {len(corpus)} papers, {len(qids)} queries ({', '.join(f'{s} {len(qrels[s])}' for s in splits)})",
          file=sys.stderr)

    results: dict[str, dict[str, Any]] = {}
    if not args.no_reference:
        ref, ref_lat, ref_build = run_bm25s(corpus, queries, qids)
        results["bm25s"] = {"build_s": round(ref_build, 2), "latency": summarize(ref_lat),
                            **{s: evaluate(ref, qrels[s]) for s in splits}}
    with short_tmpdir("zr", keep=args.keep_data) as tmp:
        for layout in layouts:
            if layout == "passages":
                retriever, build_s = build_passages(tmp, corpus, keys)
            else:
                retriever, build_s = build_zotero(tmp, corpus, keys, layout)
            print(f"{layout}: indexed in {build_s:.1f} s ({type(retriever).__name__})", file=sys.stderr)
            kinds: dict[str, int] = {}
            rankings, lat = run_ours(retriever, queries, qids, key_to_id, kinds)
            results[layout] = {"retriever": type(retriever).__name__, "build_s": round(build_s, 2), "dense": dense_model,
                               "latency": summarize(lat), "top1_kinds": kinds,
                               **{s: evaluate(rankings, qrels[s]) for s in splits}}
            if isinstance(retriever, Library):
                loop = asyncio.new_event_loop()
                loop.run_until_complete(retriever.aclose())
                loop.close()

    headers = ["retriever"]
    for s in splits:
        headers += [f"{s} nDCG@10", f"{s} R@100"]
    headers += ["p50 ms", "target (test)"]
    rows = []
    for name, r in results.items():
        row = [name if name == "bm25s" else f"zocratesd, {name}"]
        for s in splits:
            row += [f"{r[s]['ndcg@10']:.3f}", f"{r[s]['recall@100']:.3f}"]
        row.append(f"{r['latency']['median_ms']:.2f}")
        if name == "bm25s" or "test" not in r:
            row.append("—")
        else:
            ok = r["test"]["ndcg@10"] >= TARGET_NDCG10 and r["test"]["recall@100"] >= TARGET_RECALL100
            row.append(f"nDCG@10 ≥ {TARGET_NDCG10}, R@100 ≥ {TARGET_RECALL100}: {'met' if ok else 'MISSED'}")
        rows.append(row)
    table = markdown_table(headers, rows)
    title = (f"BEIR SciFact: {len(corpus):,} papers; {', '.join(f'{s} {len(qrels[s])} queries' for s in splits)}; "
             f"p50 = one search at the tool's top_k ({DEFAULT_TOP_K}), library scope; dense stage: {dense_model}")
    print(f"\n{title}\n\n{table}\n")
    for name, r in results.items():
        if r.get("top1_kinds"):
            print(f"{name}: top passage kinds {r['top1_kinds']}")
    write_json(args.out, {"env": env_info(), "dense": dense_model,
                          "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
                          "results": results, "table": table})
    print(f"(JSON: {args.out})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
