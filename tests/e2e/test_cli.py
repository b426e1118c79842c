"""The `zocrates` console script, run as a subprocess against the real daemon."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from adkevents import append_to_db, research_chat
from daemonproc import DaemonProc, daemon_env
from rawrpc import RawConn

from zocratesd import locations

pytestmark = pytest.mark.e2e

CHAT_TITLE = "RAG reading group"
CLI_TIMEOUT_S = 60.0  # generous: the tests that start a daemon wait for ADK's import
STOP_TIMEOUT_S = 15.0


def zocrates_command() -> list[str]:
    """The installed console script (so its entry point is tested too), else the module."""
    script = Path(sys.executable).with_name("zocrates")
    return [str(script)] if script.exists() else [sys.executable, "-m", "zocrates_client.cli"]


def zocrates(d: DaemonProc, *args: str, data_dir: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*zocrates_command(), *args, "--zotero-data-dir", str(data_dir or d.data_dir)],
        env=d.env, capture_output=True, text=True, timeout=CLI_TIMEOUT_S,
    )


def assert_one_line_error(out: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert out.returncode == 1, out
    assert out.stdout == ""
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("zocrates: "), out.stderr
    assert "Traceback" not in out.stderr
    for needle in needles:
        assert needle in out.stderr, out.stderr


@pytest.fixture(scope="module")
def shared() -> Iterator[DaemonProc]:
    root = Path(tempfile.mkdtemp(prefix="zc", dir="/tmp"))  # short: socket paths are capped
    run = root / "run"
    run.mkdir(mode=0o700)
    d = DaemonProc(data_dir=root / "zotero", runtime_dir=run, env=daemon_env(run))
    d.data_dir.mkdir()
    d.start()
    try:
        yield d
    finally:
        d.stop(STOP_TIMEOUT_S)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def chat(shared: DaemonProc) -> str:
    """A session with a two-turn conversation written through ADK. Tests must not change it."""
    with RawConn(shared.socket_path) as c:
        sid = c.result("session/new", {"cwd": "/home/u/notes", "_meta": {"zocrates": {"title": CHAT_TITLE}}})["sessionId"]
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, append_to_db(shared.db_path, sid, research_chat())).result()
    return str(sid)


def new_session(d: DaemonProc, title: str) -> str:
    with RawConn(d.socket_path) as c:
        return str(c.result("session/new", {"cwd": "/tmp", "_meta": {"zocrates": {"title": title}}})["sessionId"])


def test_list_prints_a_table_of_sessions(shared: DaemonProc, chat: str) -> None:
    out = zocrates(shared, "sessions", "list")
    assert out.returncode == 0, out.stderr
    header, *rows = out.stdout.splitlines()
    assert header.split() == ["ID", "TITLE", "CREATED", "UPDATED"]
    row = next(r for r in rows if r.startswith(chat))
    assert CHAT_TITLE in row
    # Columns line up: every title starts where the header's TITLE does.
    assert row.index(CHAT_TITLE) == header.index("TITLE")


def test_list_json_parses(shared: DaemonProc, chat: str) -> None:
    out = zocrates(shared, "sessions", "list", "--json")
    assert out.returncode == 0, out.stderr
    sessions = {s["id"]: s for s in json.loads(out.stdout)}
    assert sessions[chat]["title"] == CHAT_TITLE and sessions[chat]["cwd"] == "/home/u/notes"
    assert isinstance(sessions[chat]["created_at"], float) and sessions[chat]["updated_at"] >= sessions[chat]["created_at"]


def test_options_work_before_the_subcommand_too(shared: DaemonProc, chat: str) -> None:
    out = subprocess.run(
        [*zocrates_command(), "--zotero-data-dir", str(shared.data_dir), "--json", "sessions", "list"],
        env=shared.env, capture_output=True, text=True, timeout=CLI_TIMEOUT_S,
    )
    assert out.returncode == 0, out.stderr
    assert chat in {s["id"] for s in json.loads(out.stdout)}


def test_show_prints_the_title_and_the_messages(shared: DaemonProc, chat: str) -> None:
    out = zocrates(shared, "sessions", "show", chat)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == CHAT_TITLE
    assert chat in lines[1]
    messages = [line for line in lines if line.startswith(("user: ", "assistant: "))]
    assert messages == [
        "user: What is retrieval-augmented generation?",
        "assistant: Let me search your library.",
        "assistant: RAG grounds answers in retrieved passages [1].",
        "user: And HyDE?",
        "assistant: HyDE embeds a hypothetical answer [2].",
    ]


def test_show_json_is_the_ui_session(shared: DaemonProc, chat: str) -> None:
    out = zocrates(shared, "sessions", "show", chat, "--json")
    assert out.returncode == 0, out.stderr
    session = json.loads(out.stdout)
    assert session["id"] == chat and session["title"] == CHAT_TITLE
    assert [m["role"] for m in session["messages"]] == ["user", "assistant", "assistant", "user", "assistant"]
    assert session["pending_hitl"] is None


def test_rm_deletes_and_confirms(shared: DaemonProc) -> None:
    sid = new_session(shared, "to be deleted")
    out = zocrates(shared, "sessions", "rm", sid)
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"deleted session {sid} (to be deleted)\n"
    listed = json.loads(zocrates(shared, "sessions", "list", "--json").stdout)
    assert sid not in {s["id"] for s in listed}
    # A second rm: the session is gone, and the message says how to find the ids.
    assert_one_line_error(zocrates(shared, "sessions", "rm", sid), f"no session with id {sid!r}", "zocrates sessions list")


def test_rm_json(shared: DaemonProc) -> None:
    sid = new_session(shared, "json delete")
    out = zocrates(shared, "sessions", "rm", sid, "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"deleted": sid, "title": "json delete"}


def test_unknown_and_invalid_ids_fail_with_one_helpful_line(shared: DaemonProc) -> None:
    assert_one_line_error(zocrates(shared, "sessions", "show", "session-0-000000"), "no session with id 'session-0-000000'")
    assert_one_line_error(zocrates(shared, "sessions", "show", "../etc/passwd"), "'../etc/passwd' is not a session id")


def test_usage_errors_exit_2(shared: DaemonProc) -> None:
    out = zocrates(shared, "sessions", "show")
    assert out.returncode == 2 and "ID" in out.stderr


def test_no_start_without_a_daemon_says_how_to_start_one(shared: DaemonProc, short_tmp: Path) -> None:
    data_dir = short_tmp / "elsewhere"
    data_dir.mkdir()
    out = zocrates(shared, "sessions", "list", "--no-start", data_dir=data_dir)
    assert_one_line_error(out, str(data_dir.resolve()), "zocratesd serve")
    assert locations.read_daemon_info(data_dir.resolve()) is None  # nothing was started


def test_read_only_commands_never_start_a_daemon_ask_does_and_says_so(short_tmp: Path) -> None:
    env = daemon_env(short_tmp / "run")
    (short_tmp / "run").mkdir(mode=0o700, exist_ok=True)
    data_dir = (short_tmp / "fresh").resolve()
    data_dir.mkdir()
    try:
        for args in (["sessions", "list"], ["sessions", "show", "session-1-abcdef"], ["library", "status"]):
            out = subprocess.run([*zocrates_command(), *args, "--zotero-data-dir", str(data_dir)],
                                 env=env, capture_output=True, text=True, timeout=CLI_TIMEOUT_S)
            assert_one_line_error(out, f"zocratesd is not running for {data_dir}", "zocratesd serve --zotero-data-dir")
            assert locations.read_daemon_info(data_dir) is None  # nothing was started
        out = subprocess.run([*zocrates_command(), "ask", "--new", "What is HyDE?", "--zotero-data-dir", str(data_dir)],
                             env=env, capture_output=True, text=True, timeout=CLI_TIMEOUT_S)
        assert out.returncode == 0, out.stderr
        info = locations.live_daemon(data_dir)
        assert info is not None  # started, and still serving for the next command
        assert out.stderr.count("started zocratesd") == 1 and f"(pid {info.pid})" in out.stderr, out.stderr
        assert "zocratesd stop --zotero-data-dir" in out.stderr
        again = subprocess.run([*zocrates_command(), "sessions", "list", "--zotero-data-dir", str(data_dir)],
                               env=env, capture_output=True, text=True, timeout=CLI_TIMEOUT_S)
        assert again.returncode == 0 and "What is HyDE?" in again.stdout and again.stderr == "", again
    finally:
        subprocess.run(
            [sys.executable, "-m", "zocratesd", "stop", "--zotero-data-dir", str(data_dir)],
            env=env, capture_output=True, timeout=CLI_TIMEOUT_S,
        )


def test_a_daemon_that_cannot_start_is_one_line_naming_its_log(short_tmp: Path) -> None:
    env = daemon_env(short_tmp / "run")
    (short_tmp / "run").mkdir(mode=0o700, exist_ok=True)
    data_dir = (short_tmp / "broken").resolve()
    state = locations.state_dir(data_dir)
    state.mkdir(parents=True)
    (state / "zocrates_config.json").write_text("{not json")
    out = subprocess.run(
        [*zocrates_command(), "ask", "hello", "--zotero-data-dir", str(data_dir)],
        env=env, capture_output=True, text=True, timeout=CLI_TIMEOUT_S,
    )
    assert_one_line_error(out, "could not start zocratesd", str(state / locations.LOG_NAME))
    assert not os.path.exists(state / locations.INFO_NAME)


# --- issue 16: a runtime dir too deep for a socket; hostile directories are one line ---------------


def test_starts_the_daemon_when_the_runtime_dir_is_too_deep_for_a_socket(short_tmp: Path) -> None:
    run = short_tmp / "run" / ("r" * (150 - len(str(short_tmp / "run")) - 1))
    run.mkdir(mode=0o700, parents=True)
    env = daemon_env(run)
    data_dir = (short_tmp / "fresh").resolve()
    cmd = [*zocrates_command(), "ask", "--new", "hello", "--zotero-data-dir", str(data_dir)]
    try:
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=CLI_TIMEOUT_S)
        assert out.returncode == 0 and "started zocratesd" in out.stderr, out.stderr
        info = locations.live_daemon(data_dir)
        assert info is not None and Path(info.socket).parent == Path(f"/tmp/zocrates-{os.geteuid()}")
        again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=CLI_TIMEOUT_S)
        assert again.returncode == 0 and locations.live_daemon(data_dir).pid == info.pid  # type: ignore[union-attr]
    finally:
        subprocess.run(
            [sys.executable, "-m", "zocratesd", "stop", "--zotero-data-dir", str(data_dir)],
            env=env, capture_output=True, timeout=CLI_TIMEOUT_S,
        )


def test_a_symlinked_state_dir_or_a_hostile_runtime_dir_is_one_line(short_tmp: Path) -> None:
    run = short_tmp / "run"
    run.mkdir(mode=0o700)
    data_dir = (short_tmp / "zotero").resolve()
    data_dir.mkdir()
    (short_tmp / "target").mkdir()
    (data_dir / "zocrates-data").symlink_to(short_tmp / "target")
    cmd = [*zocrates_command(), "ask", "hello", "--zotero-data-dir", str(data_dir)]
    out = subprocess.run(cmd, env=daemon_env(run), capture_output=True, text=True, timeout=CLI_TIMEOUT_S)
    assert_one_line_error(out, f"{data_dir / 'zocrates-data'} is a symbolic link")

    (data_dir / "zocrates-data").unlink()
    (run / "zocrates").write_text("")
    out = subprocess.run(cmd, env=daemon_env(run), capture_output=True, text=True, timeout=CLI_TIMEOUT_S)
    assert_one_line_error(out, f"{run / 'zocrates'} is not a directory")


@pytest.mark.skipif(os.geteuid() != 0, reason="making a directory of another uid (chown) needs root")
def test_a_runtime_dir_fallback_of_another_uid_is_one_line(short_tmp: Path) -> None:
    """No $XDG_RUNTIME_DIR and no /run/user/<uid>: platformdirs falls back to $TMPDIR/runtime-<uid>,
    which uid 65534 made first."""
    if os.path.exists(f"/run/user/{os.geteuid()}"):
        pytest.skip("platformdirs uses /run/user/<uid> here, not the temporary fallback")
    tmp = short_tmp / "tmp"
    tmp.mkdir(mode=0o700)
    squatted = tmp / f"runtime-{os.geteuid()}"
    squatted.mkdir(mode=0o700)
    os.chown(squatted, 65534, 65534)
    env = daemon_env(short_tmp)
    del env["XDG_RUNTIME_DIR"]
    env["TMPDIR"] = str(tmp)
    data_dir = (short_tmp / "zotero").resolve()
    data_dir.mkdir()
    out = subprocess.run(
        [*zocrates_command(), "ask", "hello", "--zotero-data-dir", str(data_dir)],
        env=env, capture_output=True, text=True, timeout=CLI_TIMEOUT_S,
    )
    assert_one_line_error(out, str(squatted), "65534")
