"""Session-store reads: zocratesd over its Unix socket against in-process ADK on the same data.

    ./dev bench bench/bench_store.py              # full run (~1-2 min on 2 cores)
    ./dev bench bench/bench_store.py --quick      # smoke run (a few seconds of timing)

What it does (see bench/README.md for the details):
1. builds a data dir: `--sessions` sessions (each with the daemon's seed bookkeeping event), the newest
   of which is a research chat of `--events` events, rows written through ADK's own ORM classes;
   checks that ADK's `get_session`/`list_sessions` read it all back; copies the DB for the peer;
2. starts the real daemon (`python -m zocratesd serve`) on it and checks that `_zocrates/session/get`
   equals `format_session_for_ui` of ADK's session, that `session/load` replays exactly the updates
   of ADK's events, and that `session/list` lists ADK's sessions;
3. times, alternating the two systems round by round: `session/list`, `_zocrates/session/get` and
   `session/load` over the socket (client-side JSON parse included) against ADK's `list_sessions` and
   `get_session` + `format_session_for_ui` in this process; and `zocratesd stdio` to its first
   `initialize` reply (daemon up) against a cold `zocratesd serve` to its first reply;
4. prints a markdown table and writes bench/out/bench_store.json.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _paths import OUT_DIR, REPO_DIR  # noqa: E402
from _procs import DaemonProc, daemon_env, short_tmpdir, zocratesd_cmd  # noqa: E402
from _report import env_info, fmt_ms, markdown_table, summarize, timer, write_json  # noqa: E402
from _rpc import INITIALIZE_PARAMS, RpcClient  # noqa: E402
from _stores import build_store, copy_db  # noqa: E402

# DESIGN.md, "Performance budget" (milliseconds).
TARGET_GET_MS = 60.0
TARGET_LIST_MS = 15.0
TARGET_STDIO_MS = 150.0
STDIO_TIMEOUT_S = 30.0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=15, help="timed rounds per operation (default 15)")
    p.add_argument("--warmup", type=int, default=2, help="untimed rounds first (default 2)")
    p.add_argument("--events", type=int, default=5000, help="events in the big session, its seed included (default 5000)")
    p.add_argument("--sessions", type=int, default=1000, help="sessions in all, the big one included (default 1000)")
    p.add_argument("--cold-rounds", type=int, default=None,
                   help="timed cold starts of `zocratesd serve` (default: --rounds; each costs ~1.5 s)")
    p.add_argument("--quick", action="store_true",
                   help="smoke run: 500 events, 100 sessions, 3 rounds, 1 warm-up, 1 cold start (targets not judged)")
    p.add_argument("--seed", type=int, default=20260101, help="data generator seed")
    p.add_argument("--out", type=Path, default=OUT_DIR / "bench_store.json", help="where the JSON results go")
    p.add_argument("--keep-data", action="store_true", help="keep the temp data dir (path printed at the end)")
    p.add_argument("--profile-daemon", type=Path, metavar="FILE",
                   help="run the daemon under cProfile and write its stats to FILE (timings then include profiler overhead)")
    a = p.parse_args(argv)
    if a.quick:
        a.events, a.sessions, a.rounds, a.warmup = min(a.events, 500), min(a.sessions, 100), 3, 1
        if a.cold_rounds is None:
            a.cold_rounds = 1
    if a.cold_rounds is None:
        a.cold_rounds = a.rounds
    if a.rounds < 1 or a.warmup < 0 or a.cold_rounds < 0:
        p.error("--rounds must be >= 1, --warmup and --cold-rounds >= 0")
    return a


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --- the peer: ADK in this process ---------------------------------------------------------------


class Peer:
    """In-process ADK on its own copy of the DB, on one long-lived event loop (warm pool)."""

    def __init__(self, db: Path):
        from google.adk.sessions import DatabaseSessionService

        self.loop = asyncio.new_event_loop()
        self.svc = DatabaseSessionService(db_url=f"sqlite+aiosqlite:///{db}")

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def close(self) -> None:
        try:
            self.run(self.svc.close())
        finally:
            self.loop.close()

    async def _get(self, session_id: str) -> Any:
        from zocratesd.store import APP_NAME, USER_ID

        return await self.svc.get_session(app_name=APP_NAME, user_id=USER_ID, session_id=session_id)

    async def _list(self) -> Any:
        from zocratesd.store import APP_NAME, USER_ID

        return await self.svc.list_sessions(app_name=APP_NAME, user_id=USER_ID)

    def session(self, session_id: str) -> Any:
        return self.run(self._get(session_id))

    def sessions(self) -> Any:
        return self.run(self._list())

    def time_list(self) -> tuple[float, int]:
        async def go() -> tuple[float, int]:
            t0 = timer()
            resp = await self._list()
            return timer() - t0, len(resp.sessions)

        return self.run(go())

    def time_get_formatted(self, session_id: str) -> tuple[float, int]:
        from zocratesd.store.writer import format_session_for_ui

        async def go() -> tuple[float, int]:
            t0 = timer()
            session = await self._get(session_id)
            ui = format_session_for_ui(session)
            return timer() - t0, len(ui["messages"])

        return self.run(go())


# --- zocratesd over the socket -------------------------------------------------------------------


def time_call(client: RpcClient, method: str, params: dict[str, Any] | None = None) -> tuple[float, Any, int]:
    t0 = timer()
    result, notes = client.call(method, params)
    return timer() - t0, result, notes


def stdio_first_reply(data_dir: Path, env: dict[str, str]) -> float:
    """Spawn `zocratesd stdio`, send `initialize`, time until its reply line is on stdout; then close
    stdin and check the pump exits 0."""
    request = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INITIALIZE_PARAMS}).encode() + b"\n"
    t0 = timer()
    proc = subprocess.Popen(
        zocratesd_cmd("stdio", "--zotero-data-dir", str(data_dir)),
        env=env,
        cwd=str(REPO_DIR),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(request)
        proc.stdin.flush()
        fd = proc.stdout.fileno()
        buf = b""
        deadline = time.monotonic() + STDIO_TIMEOUT_S
        while b"\n" not in buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise RuntimeError(f"zocratesd stdio gave no reply within {STDIO_TIMEOUT_S:.0f} s")
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
                raise RuntimeError(f"zocratesd stdio closed stdout before replying (exit {proc.wait(5)}): {err[-2000:]}")
            buf += chunk
        reply = json.loads(buf.split(b"\n", 1)[0])
        elapsed = timer() - t0
        if reply.get("id") != 1 or "result" not in reply:
            raise RuntimeError(f"unexpected initialize reply through stdio: {reply}")
        proc.stdin.close()
        code = proc.wait(10)
        if code != 0:
            err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
            raise RuntimeError(f"zocratesd stdio exited {code} after stdin EOF: {err[-2000:]}")
        return elapsed
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        for s in (proc.stdin, proc.stdout, proc.stderr):
            if s is not None and not s.closed:
                s.close()


def cold_start_first_reply(data_dir: Path, runtime_dir: Path, env: dict[str, str]) -> tuple[float, float]:
    """A fresh `zocratesd serve` on `data_dir`: (seconds until its socket accepts, seconds until its
    first `initialize` reply), both from spawn. Stops it (SIGTERM) before returning."""
    d = DaemonProc(data_dir=data_dir, runtime_dir=runtime_dir, env=env)
    t0 = timer()
    try:
        ready = d.start()
        with RpcClient(d.socket_path) as c:
            c.call("initialize", INITIALIZE_PARAMS)
            first = timer() - t0
        return ready, first
    finally:
        code = d.stop()
        if code not in (0, None):
            raise RuntimeError(f"cold-start daemon exited {code} on SIGTERM:\n{d.stderr_tail()}")


# --- checks --------------------------------------------------------------------------------------


def verify_adk_reads(peer: Peer, big_id: str, n_sessions: int, n_events: int) -> Any:
    session = peer.session(big_id)
    if session is None:
        raise AssertionError(f"ADK cannot find the big session {big_id}")
    if len(session.events) != n_events:
        raise AssertionError(f"ADK read {len(session.events)} events of {big_id}, expected {n_events}")
    listed = peer.sessions().sessions
    if len(listed) != n_sessions:
        raise AssertionError(f"ADK lists {len(listed)} sessions, expected {n_sessions}")
    return session


def verify_daemon(client: RpcClient, peer_session: Any, peer_listing: list[Any]) -> dict[str, Any]:
    """The daemon's answers equal what the reference path computes from ADK's own objects."""
    from google.adk.events._rewind_events import _apply_rewinds

    from zocratesd.rpc.updates import to_acp
    from zocratesd.store.writer import format_session_for_ui
    from zocratesd.updates import history_updates

    sid = peer_session.id
    # JSON round trip: the reference as a client would receive it.
    reference = json.loads(json.dumps(format_session_for_ui(peer_session)))
    got, _ = client.call("_zocrates/session/get", {"sessionId": sid})
    got.pop("settings", None)  # the session's settings (core/session_config.py): the daemon's, not ADK's
    if got != reference:
        diff = [k for k in set(reference) | set(got) if reference.get(k) != got.get(k)]
        detail = ""
        if "messages" in diff:
            ref_m, got_m = reference["messages"], got.get("messages") or []
            first = next((i for i, (a, b) in enumerate(zip(ref_m, got_m, strict=False)) if a != b), min(len(ref_m), len(got_m)))
            detail = f"; messages {len(got_m)} vs {len(ref_m)}, first difference at index {first}"
        raise AssertionError(f"_zocrates/session/get differs from format_session_for_ui in {sorted(diff)}{detail}")

    live = [ev.model_dump(exclude_none=True, mode="json") for ev in _apply_rewinds(peer_session.events)]
    expected_updates = json.loads(json.dumps([a for a in map(to_acp, history_updates(live)) if a]))
    _, notes = client.call("session/load", {"sessionId": sid, "cwd": "/", "mcpServers": []}, keep_notifications=True)
    updates = [n["params"]["update"] for n in notes if n.get("method") == "session/update"]
    if updates[:-1] != expected_updates or updates[-1].get("sessionUpdate") != "session_info_update":
        raise AssertionError(
            f"session/load replayed {len(updates)} updates; expected {len(expected_updates)} + session_info_update"
        )

    listed, _ = client.call("session/list", {})
    ids = [s["sessionId"] for s in listed["sessions"]]
    adk = {s.id: s for s in peer_listing}
    if sorted(ids) != sorted(adk):
        raise AssertionError(f"session/list gives {len(ids)} sessions, ADK {len(adk)}, or other ids")
    for s in listed["sessions"]:
        if s["title"] != adk[s["sessionId"]].state.get("title"):
            raise AssertionError(f"session/list title of {s['sessionId']} differs from ADK's state")
    return {
        "messages": len(reference["messages"]),
        "load_updates": len(updates),
        "listed": len(ids),
        "get_reply_bytes": len(json.dumps(got, separators=(",", ":"))),
    }


# --- the run -------------------------------------------------------------------------------------


def _exit_on_signal(signum: int, _frame: Any) -> None:
    # SystemExit unwinds through every `finally`: the daemons get their SIGTERM, temp dirs go away.
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = timer()
    # A background job in a non-interactive shell ignores SIGINT; take both back, and SIGTERM.
    signal.signal(signal.SIGTERM, _exit_on_signal)
    signal.signal(signal.SIGINT, _exit_on_signal)
    with short_tmpdir("zb", keep=args.keep_data) as tmp:
        return run(args, tmp, started)


def run(args: argparse.Namespace, tmp: Path, started: float) -> int:
    runtime_dir = tmp / "run"
    runtime_dir.mkdir(mode=0o700)
    env = daemon_env(runtime_dir)
    data_dir = tmp / "zotero"

    log(f"building {args.sessions} sessions, one of {args.events} events ...")
    store = build_store(data_dir, sessions=args.sessions, events=args.events, seed=args.seed)
    log(f"  built in {store.build_s:.1f} s: {store.total_events} events, DB {store.db_bytes / 1e6:.1f} MB")
    peer_db = tmp / "peer" / "sessions.db"
    copy_db(store.db_path, peer_db)

    peer = Peer(peer_db)
    profile_to = args.profile_daemon.resolve() if args.profile_daemon else None
    daemon = DaemonProc(data_dir=data_dir, runtime_dir=runtime_dir, env=env, command=zocratesd_cmd(profile_to=profile_to))
    client: RpcClient | None = None
    results: dict[str, Any] = {}
    try:
        peer_session = verify_adk_reads(peer, store.big_session_id, args.sessions, args.events)
        peer_listing = peer.sessions().sessions
        log(f"ADK reads the data back: {len(peer_listing)} sessions, {len(peer_session.events)} events in the big one")

        log("starting zocratesd ...")
        start_s = daemon.start()
        log(f"  ready in {start_s * 1000:.0f} ms")
        client = RpcClient(daemon.socket_path)
        client.call("initialize", INITIALIZE_PARAMS)
        checks = verify_daemon(client, peer_session, peer_listing)
        print(
            f"correctness: _zocrates/session/get == format_session_for_ui(ADK get_session) "
            f"({checks['messages']} messages, {checks['get_reply_bytes'] / 1e6:.2f} MB reply); "
            f"session/load replays the same {checks['load_updates'] - 1} updates + session_info_update; "
            f"session/list lists ADK's {checks['listed']} sessions"
        )
        del peer_session, peer_listing
        gc.collect()

        results = measure(args, client, peer, store.big_session_id, data_dir, env, tmp)
    except BaseException:
        if daemon.running():
            log("daemon stderr (tail):\n" + daemon.stderr_tail())
        raise
    finally:
        if client is not None:
            client.close()
        code = daemon.stop()
        peer.close()
        if code not in (0, None):
            log(f"zocratesd exited {code} on SIGTERM:\n{daemon.stderr_tail()}")
    if code not in (0, None):
        return 1

    report(args, results, store, start_s, checks, started)
    if args.profile_daemon:
        print_profile(args.profile_daemon)
    return 0


def measure(
    args: argparse.Namespace, client: RpcClient, peer: Peer, big_id: str, data_dir: Path, env: dict[str, str], tmp: Path
) -> dict[str, Any]:
    samples: dict[str, list[float]] = {k: [] for k in (
        "z_list", "z_get", "z_load", "p_list", "p_get", "stdio", "cold_ready", "cold_first")}
    sizes: dict[str, int] = {}
    breakdown: dict[str, dict[str, list[float]]] = {}
    total = args.warmup + args.rounds
    cold_dir = tmp / "cold"
    cold_run = tmp / "run"
    cold_left = args.cold_rounds
    if cold_left:
        log("cold start warm-up (creates the tables of an empty data dir) ...")
        cold_start_first_reply(cold_dir, cold_run, env)

    def z_round(record: bool) -> None:
        for key, method, params in (
            ("z_list", "session/list", {}),
            ("z_get", "_zocrates/session/get", {"sessionId": big_id}),
            ("z_load", "session/load", {"sessionId": big_id, "cwd": "/", "mcpServers": []}),
        ):
            gc.collect()
            dt, result, notes = time_call(client, method, params)
            if record:
                samples[key].append(dt)
                for part, secs in client.last_timing.items():
                    if part != "total":
                        breakdown.setdefault(key, {}).setdefault(part, []).append(secs)
            if key == "z_list":
                sizes["z_list"] = len(result["sessions"])
            elif key == "z_get":
                sizes["z_get"] = len(result["messages"])
            else:
                sizes["z_load"] = notes

    def p_round(record: bool) -> None:
        gc.collect()
        dt, n = peer.time_list()
        if record:
            samples["p_list"].append(dt)
        sizes["p_list"] = n
        gc.collect()
        dt, n = peer.time_get_formatted(big_id)
        if record:
            samples["p_get"].append(dt)
        sizes["p_get"] = n

    for r in range(total):
        record = r >= args.warmup
        label = f"round {r - args.warmup + 1}/{args.rounds}" if record else f"warm-up {r + 1}/{args.warmup}"
        t0 = timer()
        # Alternate who goes first, so a drift in machine load hits both sides alike.
        if r % 2 == 0:
            z_round(record)
            p_round(record)
        else:
            p_round(record)
            z_round(record)
        gc.collect()
        dt = stdio_first_reply(data_dir, env)
        if record:
            samples["stdio"].append(dt)
        if record and cold_left > 0:
            ready, first = cold_start_first_reply(cold_dir, cold_run, env)
            samples["cold_ready"].append(ready)
            samples["cold_first"].append(first)
            cold_left -= 1
        log(f"  {label} done in {timer() - t0:.1f} s")

    for key, want in (("z_list", args.sessions), ("p_list", args.sessions)):
        if sizes.get(key) != want:
            raise AssertionError(f"{key} saw {sizes.get(key)} sessions, expected {want}")
    if sizes["z_get"] != sizes["p_get"]:
        raise AssertionError(f"zocratesd got {sizes['z_get']} messages, ADK {sizes['p_get']}")
    return {"samples": samples, "sizes": sizes, "breakdown": breakdown}


def _ms(summary: dict[str, Any]) -> str:
    return "—" if summary.get("median_ms") is None else f"{summary['median_ms']:.1f}"


def _ratio(peer: dict[str, Any], ours: dict[str, Any]) -> float | None:
    if not peer.get("median_ms") or not ours.get("median_ms"):
        return None
    return peer["median_ms"] / ours["median_ms"]


def report(args: argparse.Namespace, results: dict[str, Any], store: Any, start_s: float, checks: dict[str, Any], started: float) -> None:
    s = {k: summarize(v) for k, v in results["samples"].items()}
    sizes = results["sizes"]
    n_ev, n_ss = args.events, args.sessions
    judged = not args.quick
    ops = [
        # name, ours, peer, peer label, target_ms
        (f"get session, {n_ev} events", "z_get", "p_get", "ADK get_session + format_session_for_ui", TARGET_GET_MS),
        (f"list sessions, {n_ss}", "z_list", "p_list", "ADK list_sessions", TARGET_LIST_MS),
        (f"session/load, {n_ev} events ({sizes.get('z_load', 0)} notifications)", "z_load", "p_get",
         "ADK get_session + format_session_for_ui", None),
        ("stdio to first initialize reply, daemon up", "stdio", "cold_first", "cold `zocratesd serve` to first reply",
         TARGET_STDIO_MS),
    ]
    rows = []
    out_ops = []
    for name, ours_key, peer_key, peer_label, target in ops:
        ours, peer = s[ours_key], s[peer_key]
        ratio = _ratio(peer, ours)
        met: bool | None = None
        if target is not None and ours["median_ms"] is not None:
            met = ours["median_ms"] <= target
        met_txt = "—" if met is None else ("yes" if met else "NO")
        if met is not None and not judged:
            met_txt += " (quick run: not judged)"
        rows.append([
            name,
            fmt_ms(ours),
            fmt_ms(peer),
            f"{ratio:.1f}x" if ratio else "—",
            f"<= {target:.0f} ms" if target else "—",
            met_txt,
        ])
        out_ops.append({
            "operation": name, "zocratesd": ours, "peer": peer, "peer_is": peer_label,
            "ratio_peer_over_zocratesd": ratio, "target_ms": target, "met": met if judged else None,
        })

    print()
    print(f"## bench_store: {n_ss} sessions, big session {n_ev} events; {args.rounds} rounds "
          f"(after {args.warmup} warm-up), cold starts {s['cold_first']['n']}; medians (p95)")
    print()
    print(markdown_table(
        ["operation", "zocratesd median (p95)", "peer median (p95)", "ratio (peer/zocratesd)", "target", "met?"], rows))
    print()
    bd = {key: {part: summarize(v) for part, v in parts.items()} for key, parts in results["breakdown"].items()}
    names = {"z_get": "_zocrates/session/get", "z_list": "session/list", "z_load": "session/load"}
    print("where zocratesd's time goes, seen from the client (medians, ms from sending the request):")
    print()
    print(markdown_table(
        ["request", "first byte", "reply line received", "client JSON parse of the reply", "total"],
        [[names[k], _ms(bd[k]["first_byte"]), _ms(bd[k]["reply_received"]), _ms(bd[k]["reply_parse"]), _ms(s[k])]
         for k in ("z_get", "z_list", "z_load") if k in bd],
    ))
    print()
    print("peer: in-process ADK 2.13 DatabaseSessionService on a copy of the same DB; for session/load it is")
    print("ADK get_session + format_session_for_ui (the least an ADK-based replay must do); for stdio it is a")
    print("cold `zocratesd serve` to its first initialize reply "
          f"(socket accepting after {fmt_ms(s['cold_ready'])}).")
    if not judged:
        print("quick run: smaller data and few rounds; targets are for the full sizes and are not judged.")
    wall = timer() - started
    print(f"total wall time {wall:.0f} s; JSON in {args.out}")

    write_json(args.out, {
        "benchmark": "bench_store",
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "env": env_info(),
        "data": store.as_json(),
        "daemon_start_ms": round(start_s * 1000, 1),
        "checks": checks,
        "operations": out_ops,
        "raw": s,
        "zocratesd_client_breakdown": bd,
        "sizes": sizes,
        "wall_s": round(wall, 1),
    })


def print_profile(path: Path, top: int = 25) -> None:
    import pstats

    if not path.exists():
        log(f"no profile written at {path}")
        return
    print(f"\n## daemon profile ({path}), top {top} by cumulative time\n")
    pstats.Stats(str(path)).sort_stats("cumulative").print_stats(top)


if __name__ == "__main__":
    sys.exit(main())
