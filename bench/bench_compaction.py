"""Post-turn compaction (issue 6): turn overhead with compaction enabled vs ADK defaults, and the
compaction step's own cost.

    .venv-3.12/bin/python bench/bench_compaction.py            # 1000 and 5000 events, 15 rounds
    .venv-3.12/bin/python bench/bench_compaction.py --quick    # 5 rounds

In one process and one event loop (no socket: this isolates the engine and store cost, which is
what compaction changes; bench_turns.py measures the socket path):
1. builds research-chat sessions of 1000 and 5000 events (bench/_stores.build_chat_sessions, no
   compaction yet) and a library; copies the DB for the peer;
2. ours: a real `Daemon` (offline model) with compaction enabled, thresholds low enough that it
   runs every turn (min_turns 4, token_floor 0, a probe that always says yes: the worst case, a
   rolling consolidation each turn); the first turn on each session compacts its whole history;
3. the peer: ADK's `Runner` on `DatabaseSessionService` over the copy, ADK defaults (full loads,
   no compaction), same coordinator name, model and tool;
4. alternates peer and ours turn by turn for each size; reports medians and p95 of the turn
   (`Daemon.prompt`, compaction included) and of `compaction_ms` (the usage update's own timing),
   plus the one-off first compaction. Writes bench/out/bench_compaction.json.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _data import library_passages, write_library  # noqa: E402
from _paths import OUT_DIR  # noqa: E402
from _procs import short_tmpdir  # noqa: E402
from _report import env_info, markdown_table, summarize, timer, write_json  # noqa: E402
from _stores import build_chat_sessions, copy_db  # noqa: E402

SIZES = (1000, 5000)
# The target for a turn at 5000 events of history, compaction enabled.
TARGET_MS_AT_5000 = 40.0


def fmt(s: dict[str, Any] | None) -> str:
    if not s:
        return "-"
    return f"{s['median_ms']:.1f} / {s['p95_ms']:.1f}"


def stats(samples_s: list[float]) -> dict[str, Any]:
    s = summarize(samples_s)
    return {"n": len(samples_s), "median_ms": s["median_ms"], "p95_ms": s["p95_ms"]}


def build(tmp: Path) -> tuple[dict[str, Any], float, Path]:
    """The sessions (built synchronously: build_chat_sessions runs its own event loop)."""
    from zocratesd.store.database import db_path

    ours_dir, peer_dir = tmp / "ours", tmp / "peer"
    chats, build_s = build_chat_sessions(ours_dir, [(str(n), n, False) for n in SIZES])
    library = write_library(ours_dir, library_passages())
    copy_db(db_path(ours_dir), peer_dir / "sessions.db")
    return chats, build_s, library


async def run(tmp: Path, rounds: int, chats: dict[str, Any], build_s: float, library: Path) -> dict[str, Any]:
    from google.adk.agents import LlmAgent
    from google.adk.agents.run_config import RunConfig, StreamingMode
    from google.adk.apps import App
    from google.adk.runners import Runner
    from google.adk.sessions import DatabaseSessionService
    from google.genai import types

    from zocratesd.compaction import FixedProbe
    from zocratesd.config import ZocratesConfig
    from zocratesd.core.daemon import Daemon
    from zocratesd.engine.models.offline import OfflineLlm
    from zocratesd.engine.tools import build_search_tool
    from zocratesd.library.passages import load_passages
    from zocratesd.library.retrieval import InMemoryRetriever
    from zocratesd.store import APP_NAME, USER_ID
    from zocratesd.updates import Usage

    ours_dir, peer_dir = tmp / "ours", tmp / "peer"

    daemon = Daemon(ours_dir, ZocratesConfig(compaction={"min_turns": 4, "token_floor": 0}))
    await daemon.start()
    daemon.compactor.probe = FixedProbe(1.0)
    watching = {chat.session_id: daemon.watch(chat.session_id) for chat in chats.values()}

    peer_svc = DatabaseSessionService(db_url=f"sqlite+aiosqlite:///{peer_dir / 'sessions.db'}")
    agent = LlmAgent(name="coordinator", model=OfflineLlm(),
                     tools=[build_search_tool(InMemoryRetriever(load_passages(library)))])
    peer = Runner(app=App(name=APP_NAME, root_agent=agent), session_service=peer_svc)

    async def peer_turn(sid: str, text: str) -> float:
        t0 = timer()
        async for _ in peer.run_async(user_id=USER_ID, session_id=sid,
                                      new_message=types.Content(role="user", parts=[types.Part(text=text)]),
                                      run_config=RunConfig(streaming_mode=StreamingMode.SSE)):
            pass
        return timer() - t0

    async def our_turn(sid: str, text: str) -> tuple[float, Usage]:
        t0 = timer()
        await daemon.prompt(sid, text)
        elapsed = timer() - t0
        (usage,) = [u for u in watching[sid].take_nowait() if isinstance(u, Usage)]  # the turn's last update
        return elapsed, usage

    results: dict[str, Any] = {"build_s": build_s, "rounds": rounds, "sizes": {}}
    try:
        for n in SIZES:
            sid = chats[str(n)].session_id
            first_turn, first = await our_turn(sid, "What does dense retrieval improve over BM25?")
            assert first.compacted, first
            await peer_turn(sid, "What does dense retrieval improve over BM25?")
            peer_s, ours_s, comp_ms, compacted = [], [], [], 0
            for r in range(rounds):
                text = f"Round {r}: how does HyDE build its hypothetical document?"
                peer_s.append(await peer_turn(sid, text))
                t, u = await our_turn(sid, text)
                ours_s.append(t)
                comp_ms.append(u.compaction_ms / 1000)
                compacted += u.compacted
            results["sizes"][n] = {
                "events": chats[str(n)].events, "turns": chats[str(n)].turns,
                "peer_turn": stats(peer_s), "ours_turn": stats(ours_s),
                "ours_turn_without_compaction": stats([a - b for a, b in zip(ours_s, comp_ms, strict=True)]),
                "compaction_step": stats(comp_ms), "compacted_rounds": compacted,
                "first_turn_ms": first_turn * 1000, "first_compaction_ms": first.compaction_ms,
            }
    finally:
        await peer_svc.close()
        await daemon.aclose()
    return results


def report(results: dict[str, Any]) -> str:
    rows = []
    for n, r in results["sizes"].items():
        rows.append([
            f"{n} events ({r['turns']} turns)", fmt(r["peer_turn"]), fmt(r["ours_turn"]),
            fmt(r["ours_turn_without_compaction"]), fmt(r["compaction_step"]),
            f"{r['first_compaction_ms']:.1f} (turn {r['first_turn_ms']:.1f})",
        ])
    return markdown_table(
        ["history", "ADK defaults turn", "zocrates turn (compaction on)", "of which turn w/o compaction",
         "compaction step", "first compaction of the whole history"],
        rows,
    ) + f"\n\nms, median / p95 over {results['rounds']} rounds; target <= {TARGET_MS_AT_5000:.0f} ms at 5000 events."


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--quick", action="store_true", help="5 rounds")
    args = ap.parse_args(argv)
    rounds = 5 if args.quick else args.rounds
    started = time.time()
    with short_tmpdir("zc") as tmp:
        chats, build_s, library = build(tmp)
        results = asyncio.run(run(tmp, rounds, chats, build_s, library))
    results["env"] = env_info()
    results["wall_s"] = time.time() - started
    print(report(results))
    write_json(OUT_DIR / "bench_compaction.json", results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
