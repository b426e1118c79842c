"""A turn that goes beyond the library, against the providers' own latency, in the same run.

    ./dev bench bench/bench_online.py            # full run (~1 min on 2 cores)
    ./dev bench bench/bench_online.py --quick    # smoke run (~20 s)

1. starts OpenAlex, arXiv and Crossref stand-ins (tests/fake_scholarly.py, real HTTP servers on
   127.0.0.1 answering as the services document) holding one work per round, each on a topic no
   paper of the library (the tests' sample Zotero library, made with Zotero's schema) is about;
2. starts the real daemon (`zocratesd serve`, the offline answerer) with online.mode `on` pointed at
   the stand-ins; arXiv's 3-second pacing (its terms of use) is the daemon's and is left out of the
   providers' latency by giving each round its own topic and timing the search as the floor does;
3. times, alternating round by round: a turn whose question the library leaves unanswered (it goes
   online: one search of the three providers at once), the same kind of turn kept in the library
   (`_meta.zocrates.online: false`), and the floor: the three providers asked the same search
   directly, at once, with httpx (their latency, nothing of ours);
4. prints a markdown table: what going online adds to a turn beyond the providers' latency (target:
   at most 20 ms), and writes bench/out/bench_online.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _paths import OUT_DIR  # noqa: E402
from _procs import DaemonProc, daemon_env, short_tmpdir  # noqa: E402
from _report import env_info, fmt_ms, markdown_table, summarize, write_json  # noqa: E402
from _rpc import INITIALIZE_PARAMS, RpcClient  # noqa: E402
from fake_scholarly import FakeArxiv, FakeCrossref, FakeOpenAlex, ScholarlyWork  # noqa: E402
from zoterofixture import build_zotero_dir, sample_library  # noqa: E402

TARGET_ADDED_MS = 20.0  # issue: a turn with online search adds at most the providers' latency + 20 ms
# Made-up organisms: the generated library has nothing on them, the stand-ins one work each.
TOPICS = ["quokkasaur", "velvetmoth", "glimmerfin", "ashwhisker", "dunepiper", "frostwren", "marshlynx", "cinderbat",
          "tidecrawler", "mossgecko", "reefhopper", "skylark", "thornback", "dewbeetle", "stormfinch", "sandviper",
          "pinebadger", "coralmoth", "brookeel", "emberfox", "fogheron", "glacierant", "hazelmole", "ironcrab"]


def work(topic: str, i: int) -> ScholarlyWork:
    return ScholarlyWork(f"Desiccation tolerance in the {topic}", authors=(("Ada", f"Writer{i}"),), year=2020 + i % 5,
                         venue="Journal of Made-up Zoology", doi=f"10.5555/bench.{i}",
                         abstract=f"The {topic} survives desiccation by vitrifying its cells with disordered proteins.")


def serve_standins(rounds: int) -> None:
    """In a process of its own (`--serve N`): the stand-ins, their URLs on one line, until stdin ends.
    Apart from the process that times the floor, so neither slows the other (one GIL each)."""
    works = [work(t, i) for i, t in enumerate(TOPICS[: rounds * 2 + 1])]  # the last: the warm-up's
    with FakeOpenAlex(works) as oa, FakeArxiv(works) as ax, FakeCrossref(works) as cr:
        print(oa.base_url, ax.base_url, cr.base_url, flush=True)
        sys.stdin.read()


def question(topic: str) -> str:
    return f"How does the {topic} survive desiccation?"


def turn(c: RpcClient, text: str, online: bool) -> tuple[float, str]:
    sid = c.call("session/new", {"cwd": "/", "mcpServers": []})[0]["sessionId"]
    t0 = time.perf_counter()
    c.call("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": text}],
                              "_meta": {"zocrates": {"online": online}}})
    took = time.perf_counter() - t0
    answer = c.call("_zocrates/session/get", {"sessionId": sid})[0]["messages"][-1]["text"]
    return took, answer


async def floor(urls: tuple[str, ...], terms: str, client: httpx.AsyncClient) -> float:
    """The providers' latency for one search: the three asked at once, as the daemon asks them."""
    openalex, arxiv, crossref = urls
    t0 = time.perf_counter()
    await asyncio.gather(
        client.get(f"{openalex}/works", params={"search": terms, "per-page": "5"}),
        client.get(f"{arxiv}/api/query", params={"search_query": " AND ".join(f"all:{w}" for w in terms.split()),
                                                  "max_results": "5"}),
        client.get(f"{crossref}/works", params={"query.bibliographic": terms, "rows": "5"}),
    )
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="a smoke run: 4 rounds")
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--serve", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    rounds = min(args.rounds or (4 if args.quick else 11), (len(TOPICS) - 1) // 2)
    if args.serve is not None:
        serve_standins(args.serve)
        return 0
    topics = TOPICS[: rounds * 2]
    results: dict[str, list[float]] = {"online": [], "library": [], "floor": []}
    standins = subprocess.Popen([sys.executable, __file__, "--serve", str(rounds)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
    assert standins.stdout is not None and standins.stdin is not None
    urls = tuple(standins.stdout.readline().split())
    with short_tmpdir("zbo") as root:
        run = root / "run"
        run.mkdir(mode=0o700)
        d = DaemonProc(data_dir=root / "zotero", runtime_dir=run, env=daemon_env(run))
        d.env.pop("ZOCRATES_ONLINE__MODE", None)
        d.data_dir.mkdir()
        build_zotero_dir(d.data_dir, *sample_library(), version=129)
        d.state_dir.mkdir(parents=True, exist_ok=True)
        (d.state_dir / "zocrates_config.json").write_text(json.dumps({"library": {"local_api": False}, "online": {
            "mode": "on", "openalex_url": urls[0], "arxiv_url": urls[1], "crossref_url": urls[2]}}))
        d.start()
        try:
            with RpcClient(d.socket_path) as c:
                c.call("initialize", INITIALIZE_PARAMS)
                deadline = time.monotonic() + 120
                while c.call("_zocrates/library/status", {})[0]["state"] not in ("ready", "error"):
                    if time.monotonic() > deadline:
                        raise SystemExit("the library was not indexed in 120 s")
                    time.sleep(0.1)
                # Warm: the first online search loads its client (httpx, the providers' readers) and opens its cache.
                turn(c, question("warmup"), online=False)
                turn(c, question(TOPICS[rounds * 2]), online=True)
                time.sleep(3.1)
                http = httpx.AsyncClient()
                loop = asyncio.new_event_loop()
                try:
                    for r in range(rounds):
                        online_topic, library_topic = topics[2 * r], topics[2 * r + 1]
                        took, answer = turn(c, question(online_topic), online=True)
                        if f"Desiccation tolerance in the {online_topic}" not in answer:
                            raise SystemExit(f"round {r}: the online turn did not cite its online work:\n{answer}")
                        results["online"].append(took)
                        took, answer = turn(c, question(library_topic), online=False)
                        results["library"].append(took)
                        # A fresh search of the providers (another round's topic: nothing cached on their side either).
                        results["floor"].append(loop.run_until_complete(floor(urls, f"{library_topic} survive desiccation", http)))
                        time.sleep(3.1)  # arXiv's pacing: the next online turn's request goes at once
                finally:
                    loop.run_until_complete(http.aclose())
                    loop.close()
        finally:
            d.stop()
            standins.stdin.close()
            standins.wait(timeout=30)
    summary = {k: summarize(v) for k, v in results.items()}
    added_ms = (statistics.median(results["online"]) - statistics.median(results["library"])
                - statistics.median(results["floor"])) * 1000.0
    rows = [
        ["turn, library left it unanswered: searched online", fmt_ms(summary["online"]), ""],
        ["turn, same kind, kept in the library (online: false)", fmt_ms(summary["library"]), ""],
        ["floor: the three providers asked at once (httpx)", fmt_ms(summary["floor"]), ""],
        ["going online adds beyond the providers' latency (medians)", f"{added_ms:.1f} ms",
         f"target <= {TARGET_ADDED_MS:.0f} ms: {'met' if added_ms <= TARGET_ADDED_MS else 'NOT met'}"],
    ]
    print(markdown_table(["row", "median (p95)", "judged"], rows))
    write_json(OUT_DIR / "bench_online.json", {"env": env_info(), "rounds": rounds, "summary": summary, "added_ms": added_ms,
                                               "target_added_ms": TARGET_ADDED_MS})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
