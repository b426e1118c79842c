"""Answer quality of the offline model: does it cite what answers, answer every part, and abstain?

    ./dev bench bench/bench_answers.py                 # all cases of bench/answers_cases.json (~10 s)
    ./dev bench bench/bench_answers.py --show s05      # also print the answers of some cases
    ./dev bench bench/bench_answers.py --sweep         # the evidence threshold's trade-off, measured
    ./dev bench bench/bench_answers.py --retriever memory   # BM25 in memory instead of the real index
    ./dev bench bench/bench_answers.py --baseline bench/out/offline_before.py --out bench/out/bench_answers_before.json

The library of bench/answers_cases.json (realistic abstracts, some pages long; distractors that share
a common word with a question) is written as a Zotero data dir (tests/zoterofixture.py) and indexed
by the daemon's own indexer (`Library`: SQLite FTS5, Porter stemming, title weights, the per-item cap),
so retrieval is exactly a running daemon's. Each question then goes through the `search_library`
pipeline without ADK (engine/research.py: aspects, one search per aspect, rank fusion, numbering as
engine/tools.py does; the budget large enough that no checkpoint stops it), and the offline model's
composer (`compose_answer`) writes the answer. The answer is scored from its text alone:

- citation precision: cited items that are relevant (or acceptable) to the question / cited items;
- citation recall: relevant items cited / relevant items;
- parts addressed (multi-part and comparison questions): a part is addressed when a relevant item
  of it is cited, or, for a part the library cannot answer, when a line says so and names it;
- parts in place: the same, counted only under the part's own heading, in the order asked;
- wrong-subject quotes: quotes of an item that do not name what the case says the reader needs
  (e.g. a result quoted without the sentence saying it is about RNP delivery) / such quotes;
- cut quotes: quotes that end inside a sentence at an abbreviation or initial ("C.", "et al.");
- abstention: unanswerable questions answered with no citation at all.

Targets (issue 21): precision >= 0.95, abstention >= 0.95, parts addressed >= 0.9. Writes
bench/out/bench_answers.json (with every answer).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import sys
from pathlib import Path
from typing import Any

from _paths import BENCH_DIR, OUT_DIR
from _procs import short_tmpdir
from _report import env_info, markdown_table, timer, write_json

from zocratesd.engine.models.offline import compose_answer
from zocratesd.engine.research import MAX_ASPECTS, Research
from zocratesd.library.retrieval import DEFAULT_TOP_K, InMemoryRetriever, Passage, Retriever, Scope

CASES = BENCH_DIR / "answers_cases.json"
TARGETS = {"precision": 0.95, "abstention": 0.95, "parts_addressed": 0.9}

_CITE = re.compile(r"\[(\d+)(?:,[^\]]*)?\]")
_SOURCE = re.compile(r"^\[(\d+)\].*?/items/([A-Z0-9]{8})")
_MISSING = re.compile(r"\b(nothing|not|no|none|cannot|can't|doesn't|does not|found no)\b", re.I)
_CUT = re.compile(r"(?:\b[A-Z]|\bet al|\be\.g|\bi\.e|\bFig|\bvs|\bcf|\bsp)\.$")


# --- the library --------------------------------------------------------------------------------


def load_cases(path: Path = CASES) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    data = json.loads(path.read_text())
    return data["items"], data["cases"]


def _pages_text(pages: dict[str, str]) -> list[str]:
    last = max(int(p) for p in pages)
    return [pages.get(str(n), "") for n in range(1, last + 1)]


def memory_retriever(items: dict[str, Any]) -> InMemoryRetriever:
    passages = []
    for key, it in items.items():
        for n, text in enumerate(_pages_text(it["pages"]), start=1):
            if text:
                passages.append(Passage(item_key=key, title=it["title"], text=text, creators=tuple(it["creators"]),
                                        year=it["year"], attachment_key=f"{key[:4]}PDF0", page=n))
    return InMemoryRetriever(passages)


def _creator(name: str) -> tuple[str, str] | str:
    if "(" in name or len(name.split()) > 4:
        return name  # an institution: one field
    first, _, last = name.rpartition(" ")
    return (first, last)


def index_retriever(items: dict[str, Any], tmp: Path) -> Retriever:
    """The library as a Zotero data dir, indexed by the daemon's indexer (what a daemon searches)."""
    from zoterofixture import PAGE_BREAK, FixtureAttachment, FixtureItem, build_zotero_dir

    from zocratesd.library.service import Library

    fixture = [
        FixtureItem(key, it["title"], creators=[_creator(c) for c in it["creators"]], date=str(it["year"]),
                    attachments=[FixtureAttachment(f"{key[:4]}PDF0", text=PAGE_BREAK.join(_pages_text(it["pages"])))])
        for key, it in items.items()
    ]
    data_dir, state = tmp / "zotero", tmp / "zotero" / "zocrates-data"
    build_zotero_dir(data_dir, fixture, [])
    state.mkdir(parents=True, exist_ok=True)
    lib = Library(data_dir, state, local_api_url=None)
    lib.indexer.refresh(None)
    st = lib.status()
    if st["state"] != "ready" or st["items_indexed"] != len(items):
        raise SystemExit(f"the bench library did not index: {st}")
    return lib


# --- one answer ---------------------------------------------------------------------------------


COMPOSE = compose_answer  # --baseline swaps in another one


def load_baseline(path: Path) -> Any:
    """`compose_answer` from a Python file (e.g. a saved copy of an earlier offline.py)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("baseline_compose", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.compose_answer


async def answer(retriever: Retriever, question: str) -> tuple[str, dict[str, Any]]:
    """The search_library pipeline (engine/tools.py, without ADK), then the offline composer."""
    from zocratesd.engine import tools

    scope = Scope()
    research = Research.start(invocation_id="bench", branch=None, query=question, scope=scope,
                              initial_budget=MAX_ASPECTS, max_extensions=0)
    while (aspect := research.next_aspect()) is not None:
        research.record_round(aspect, await retriever.search(aspect, scope, DEFAULT_TOP_K))
    ranked: list[tuple[Passage, float | None]] = [(p, s) for p, s in research.synthesis()]
    passages = tools._numbered(ranked)
    result: dict[str, Any] = {"query": question, "scope": scope.mode, "passages": passages, "research": research.report()}
    facts = getattr(tools, "search_facts", None)  # the causes of "found nothing" (issue 21), when present
    if facts is not None:
        result["library"] = await facts(retriever, research.scope, research.query, research.aspects, passages)
    return COMPOSE(question, result), result


# --- scoring ------------------------------------------------------------------------------------


def parse(text: str) -> dict[str, Any]:
    body, _, sources = text.partition("# Cited Sources")
    key_of = {}
    for line in sources.splitlines():
        m = _SOURCE.match(line.strip())
        if m:
            key_of[int(m.group(1))] = m.group(2)
    sections: list[tuple[str, list[str]]] = [("", [])]
    for line in body.splitlines():
        if line.startswith("#"):
            sections.append((line.lstrip("#").strip(), []))
        else:
            sections[-1][1].append(line)
    return {"body": body, "key_of": key_of, "sections": sections}


def cited_keys(lines: list[str], key_of: dict[int, str]) -> set[str]:
    return {key_of[int(n)] for line in lines for n in _CITE.findall(line) if int(n) in key_of}


def quotes(lines: list[str], key_of: dict[int, str]) -> list[tuple[str, set[str]]]:
    """(quote text, the items it cites) for every bullet that cites something."""
    out = []
    for line in lines:
        s = line.strip()
        if not s.startswith("- "):
            continue
        keys = {key_of[int(n)] for n in _CITE.findall(s) if int(n) in key_of}
        if keys:
            out.append((_CITE.sub("", s[2:]).strip(), keys))
    return out


def part_addressed(part: dict[str, Any], lines: list[str], key_of: dict[int, str]) -> bool:
    if part["relevant"]:
        return bool(cited_keys(lines, key_of) & set(part["relevant"]))
    hint = part["missing_hint"].casefold()
    return any(hint in line.casefold() and _MISSING.search(line) for line in lines)


def score_case(case: dict[str, Any], text: str) -> dict[str, Any]:
    p = parse(text)
    key_of, body_lines = p["key_of"], p["body"].splitlines()
    cited = cited_keys(body_lines, key_of) | set(key_of.values())
    relevant = {k for part in case["parts"] for k in part["relevant"]}
    ok = relevant | {k for part in case["parts"] for k in part.get("acceptable", [])}
    s: dict[str, Any] = {
        "id": case["id"], "kind": case["kind"], "held_out": bool(case.get("held_out")), "cited": sorted(cited), "cited_ok": len(cited & ok),
        "cited_n": len(cited), "relevant_n": len(relevant), "relevant_cited": len(cited & relevant),
    }
    if len(case["parts"]) > 1:
        s["parts_n"] = len(case["parts"])
        s["parts_addressed"] = sum(part_addressed(part, body_lines, key_of) for part in case["parts"])
        # In place: each part under a heading of its own, in order (a heading may be skipped, e.g.
        # a "compared directly" section, but never revisited).
        placed, i = 0, 1
        for part in case["parts"]:
            for j in range(i, len(p["sections"])):
                if part_addressed(part, p["sections"][j][1], key_of):
                    placed, i = placed + 1, j + 1
                    break
        s["parts_in_place"] = placed
    if case["kind"] == "unanswerable":
        s["abstained"] = not cited
    subjects = case.get("subjects") or {}
    qs = quotes(body_lines, key_of)
    checked = [(q, keys) for q, keys in qs if keys & subjects.keys()]
    s["subject_quotes"] = len(checked)
    s["wrong_subject"] = sum(
        1 for q, keys in checked
        if not any(w.casefold() in q.casefold() for k in keys & subjects.keys() for w in subjects[k])
    )
    s["quotes"] = len(qs)
    s["cut_quotes"] = sum(1 for q, _ in qs if any(_CUT.search(f.strip().rstrip("…").strip()) for f in q.split(" … ")))
    return s


def totals(scores: list[dict[str, Any]]) -> dict[str, Any]:
    def ratio(a: float, b: float) -> float | None:
        return round(a / b, 3) if b else None

    un = [s for s in scores if "abstained" in s]
    multi = [s for s in scores if "parts_n" in s]
    return {
        "cases": len(scores),
        "precision": ratio(sum(s["cited_ok"] for s in scores), sum(s["cited_n"] for s in scores)),
        "recall": ratio(sum(s["relevant_cited"] for s in scores), sum(s["relevant_n"] for s in scores)),
        "parts_addressed": ratio(sum(s["parts_addressed"] for s in multi), sum(s["parts_n"] for s in multi)),
        "parts_in_place": ratio(sum(s["parts_in_place"] for s in multi), sum(s["parts_n"] for s in multi)),
        "wrong_subject": ratio(sum(s["wrong_subject"] for s in scores), sum(s["subject_quotes"] for s in scores)),
        "cut_quotes": ratio(sum(s["cut_quotes"] for s in scores), sum(s["quotes"] for s in scores)),
        "abstention": ratio(sum(s["abstained"] for s in un), len(un)),
    }


async def run(retriever: Retriever, cases: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, str], list[float]]:
    scores, answers, times = [], {}, []
    for case in cases:
        t = timer()
        text, _ = await answer(retriever, case["question"])
        times.append(timer() - t)
        answers[case["id"]] = text
        scores.append(score_case(case, text))
    return scores, answers, times


def fmt(x: float | None) -> str:
    return "—" if x is None else f"{x:.3f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", type=Path, default=CASES)
    ap.add_argument("--retriever", choices=["index", "memory"], default="index")
    ap.add_argument("--show", nargs="*", default=None, help="print the answers of these case ids (none: all)")
    ap.add_argument("--sweep", action="store_true", help="rerun at other evidence thresholds (issue 21: a measured threshold)")
    ap.add_argument("--out", type=Path, default=OUT_DIR / "bench_answers.json")
    ap.add_argument("--baseline", type=Path, help="score the compose_answer of this Python file instead")
    ap.add_argument("--quick", action="store_true", help="the same run (it takes seconds); accepted for run_all")
    args = ap.parse_args()

    global COMPOSE
    if args.baseline is not None:
        COMPOSE = load_baseline(args.baseline)
    items, cases = load_cases(args.cases)
    with short_tmpdir() as tmp:
        retriever = index_retriever(items, tmp) if args.retriever == "index" else memory_retriever(items)
        scores, answers, times = asyncio.run(run(retriever, cases))
        sweep: list[dict[str, Any]] = []
        if args.sweep:
            from zocratesd.engine.answer import evidence

            keep = evidence.MIN_COVERAGE
            for th in (0.3, 0.4, 0.5, 0.55, 0.6, 0.65, 0.7, 0.8, 0.9, 1.0):
                evidence.MIN_COVERAGE = th
                sweep.append({"threshold": th, **totals(asyncio.run(run(retriever, cases))[0])})
            evidence.MIN_COVERAGE = keep
        closer = getattr(retriever, "aclose", None)
        if closer is not None:
            asyncio.run(closer())

    t = totals(scores)
    kinds = sorted({s["kind"] for s in scores})
    rows = [["all", *(fmt(t[k]) for k in ("precision", "recall", "parts_addressed", "parts_in_place", "wrong_subject",
                                          "cut_quotes", "abstention")), t["cases"]]]
    held = {c["id"] for c in cases if c.get("held_out")}
    groups = [(kind, [s for s in scores if s["kind"] == kind]) for kind in kinds]
    if held:
        groups.append(("held out", [s for s in scores if s["id"] in held]))
    for kind, group in groups:
        k = totals(group)
        rows.append([kind, *(fmt(k[m]) for m in ("precision", "recall", "parts_addressed", "parts_in_place",
                                                 "wrong_subject", "cut_quotes", "abstention")), k["cases"]])
    print(markdown_table(["cases", "cit. precision", "cit. recall", "parts addressed", "parts in place",
                          "wrong-subject quotes", "cut quotes", "abstention", "n"], rows))
    print()
    verdicts = [f"{m} {fmt(t[m])} (target ≥ {v}: {'met' if (t[m] or 0) >= v else 'NOT met'})" for m, v in TARGETS.items()]
    print("; ".join(verdicts))
    print(f"compose + search per question: median {statistics.median(times) * 1000:.1f} ms, max {max(times) * 1000:.1f} ms "
          f"({args.retriever} retriever)")
    if sweep:
        print()
        print(markdown_table(["MIN_COVERAGE", "precision", "recall", "parts addressed", "abstention"],
                             [[s["threshold"], fmt(s["precision"]), fmt(s["recall"]), fmt(s["parts_addressed"]),
                               fmt(s["abstention"])] for s in sweep]))
    bad = [s["id"] for s in scores if s["cited_n"] > s["cited_ok"] or s["relevant_cited"] < s["relevant_n"]
           or s.get("abstained") is False or s.get("parts_addressed", 0) < s.get("parts_n", 0) or s["wrong_subject"]
           or s["cut_quotes"]]
    print(f"\ncases with a miss: {', '.join(bad) or 'none'}")
    if args.show is not None:
        for case in cases:
            if not args.show or case["id"] in args.show:
                print(f"\n=== {case['id']}: {case['question']}\n{answers[case['id']]}")
    write_json(args.out, {"env": env_info(), "retriever": args.retriever, "baseline": str(args.baseline or ""),
                          "totals": t, "targets": TARGETS,
                          "by_kind": {kind: totals([s for s in scores if s["kind"] == kind]) for kind in kinds},
                          "sweep": sweep, "cases": scores, "answers": answers,
                          "median_ms": round(statistics.median(times) * 1000, 2)})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    sys.exit(main())
