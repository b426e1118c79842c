"""`zocrates ask`, `chat`, `resume`, `rewind`, `library status` as subprocesses against a real daemon
serving the demo library (`zocratesd.demo`), and the client library's turn methods on asyncio and trio.

The interactive paths run in a pseudo-terminal (the stdlib `pty`): the checkpoint question answered
each way, Ctrl-C during a turn, the chat loop. One daemon serves the whole module; every test makes
sessions of its own (`--new`), so their order does not matter.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from daemonproc import DaemonProc
from rawrpc import RawConn
from test_cli import zocrates_command
from test_library import indexed_daemon

from zocrates_client import Checkpoint, RpcError, connect
from zocratesd import demo
from zocratesd.demo.papers import PAPERS, REEF

pytestmark = pytest.mark.e2e

CLI_TIMEOUT_S = 60.0
PTY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0
SIMPLE = "How do hypothetical document embeddings help zero-shot retrieval?"
# Four parts: one more than the default research budget of three rounds, so the turn pauses.
FOUR = (
    "What is retrieval-augmented generation? How does slow-wave sleep consolidate memories? "
    "What drives mass coral bleaching? How long do reefs need to recover?"
)
SESSION_RE = re.compile(r"session (session-\d+-[0-9a-f]+)")
CHECKPOINT_ASK = "[Enter] search further"


@pytest.fixture(scope="module")
def shared() -> Iterator[DaemonProc]:
    root = Path(tempfile.mkdtemp(prefix="za", dir="/tmp"))  # short: socket paths are capped
    assert demo.write_demo(root / "demo")
    # The tests ask about the demo's papers: the index must be built first.
    with indexed_daemon(root, root / "demo", STOP_TIMEOUT_S) as d:
        yield d


def zocrates(d: DaemonProc, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*zocrates_command(), "--zotero-data-dir", str(d.data_dir), *args],
        env=d.env, input=stdin, stdin=None if stdin is not None else subprocess.DEVNULL,
        capture_output=True, text=True, timeout=CLI_TIMEOUT_S,
    )


def session_of(stderr: str) -> str:
    found = SESSION_RE.findall(stderr)
    assert found, stderr
    return str(found[-1])


def ui_session(d: DaemonProc, session_id: str) -> dict[str, Any]:
    with RawConn(d.socket_path) as c:
        return c.result("_zocrates/session/get", {"sessionId": session_id})  # type: ignore[no-any-return]


def user_turns(d: DaemonProc, session_id: str) -> int:
    return sum(1 for m in ui_session(d, session_id)["messages"] if m["role"] == "user")


def assert_cited_answer(stdout: str) -> None:
    assert "# Cited Sources" in stdout, stdout
    assert "zotero://select/library/items/HYDE9ZRT" in stdout, stdout  # the HyDE paper of the demo


# --- plain (no terminal) ---------------------------------------------------------------------------


def test_ask_streams_a_cited_answer_and_names_the_session(shared: DaemonProc) -> None:
    out = zocrates(shared, "ask", "--new", SIMPLE)
    assert out.returncode == 0, out.stderr
    assert_cited_answer(out.stdout)
    assert "Round 1: searched" in out.stderr  # progress lines on stderr, not stdout
    sid = session_of(out.stderr)
    assert "Round 1" not in out.stdout
    # Without --session it continues the most recent session.
    again = zocrates(shared, "ask", "And what does it cost?")
    assert again.returncode == 0, again.stderr
    assert session_of(again.stderr) == sid
    assert [m["text"] for m in ui_session(shared, sid)["messages"] if m["role"] == "user"] == [SIMPLE, "And what does it cost?"]


def test_ask_reads_the_question_from_stdin(shared: DaemonProc) -> None:
    out = zocrates(shared, "ask", "--new", "-", stdin=SIMPLE + "\n")
    assert out.returncode == 0, out.stderr
    assert_cited_answer(out.stdout)
    assert ui_session(shared, session_of(out.stderr))["messages"][0]["text"] == SIMPLE


def test_ask_scopes_a_collection_or_papers(shared: DaemonProc) -> None:
    reef = {p.key for p in PAPERS if REEF in p.collections}
    out = zocrates(shared, "ask", "--new", "--collection", REEF, "How does heat stress affect corals and memory?")
    assert out.returncode == 0, out.stderr
    cited = set(re.findall(r"zotero://select/library/items/([A-Z0-9]{8})", out.stdout))
    assert cited and cited <= reef, out.stdout
    out = zocrates(shared, "ask", "--new", "--papers", "DPR4KRPN,COLB5TKN", "How are passages encoded?")
    assert out.returncode == 0, out.stderr
    cited = set(re.findall(r"zotero://select/library/items/([A-Z0-9]{8})", out.stdout))
    assert cited and cited <= {"DPR4KRPN", "COLB5TKN"}, out.stdout


def test_chat_reads_questions_from_a_pipe(shared: DaemonProc) -> None:
    out = zocrates(shared, "chat", stdin=f"{SIMPLE}\n/sessions\n/bogus\n")
    assert out.returncode == 0, out.stderr
    assert "# Cited Sources" in out.stdout and session_of(out.stderr) in out.stdout  # the answer, then /sessions
    assert "unknown command /bogus" in out.stderr


def test_ask_json_is_one_object_per_update_then_done(shared: DaemonProc) -> None:
    out = zocrates(shared, "ask", "--new", "--json", SIMPLE)
    assert out.returncode == 0, out.stderr
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert lines[-1]["type"] == "done" and lines[-1]["stop_reason"] == "end_turn", lines[-1]
    assert lines[-1]["invocation_id"].startswith("e-") and lines[-1]["pending_hitl"] is None
    updates = [x["update"] for x in lines[:-1]]
    assert all(x["type"] == "update" and x["session_id"] == lines[-1]["session_id"] for x in lines[:-1])
    text = "".join(u["content"]["text"] for u in updates if u["sessionUpdate"] == "agent_message_chunk")
    assert_cited_answer(text)
    assert {"tool_call", "tool_call_update", "usage_update"} <= {u["sessionUpdate"] for u in updates}


def test_a_four_part_question_pauses_and_exit_4_names_the_checkpoint(shared: DaemonProc) -> None:
    out = zocrates(shared, "ask", "--new", FOUR)
    assert out.returncode == 4, out
    sid = session_of(out.stderr)
    hitl = ui_session(shared, sid)["pending_hitl"]
    assert hitl is not None and hitl["interrupt_id"] == "interrupt_ext_1"
    assert hitl["invocation_id"] in out.stderr and "interrupt_ext_1" in out.stderr
    assert f"zocrates resume {sid} --synthesize" in out.stderr
    assert "Round 3: searched" in out.stderr and "Round 4" not in out.stderr
    # Answered later, from another process: the turn goes on and answers.
    done = zocrates(shared, "resume", sid, "--synthesize")
    assert done.returncode == 0, done.stderr
    assert "# Cited Sources" in done.stdout
    assert ui_session(shared, sid)["pending_hitl"] is None
    # Nothing is pending any more: resume says so.
    again = zocrates(shared, "resume", sid, "--synthesize")
    assert again.returncode == 1 and "no research checkpoint" in again.stderr


@pytest.mark.parametrize("choice", ["extend", "synthesize"])
def test_on_checkpoint_decides_without_a_terminal(shared: DaemonProc, choice: str) -> None:
    out = zocrates(shared, "ask", "--new", "--on-checkpoint", choice, FOUR)
    assert out.returncode == 0, out.stderr
    assert "# Cited Sources" in out.stdout
    assert ("Round 4: searched" in out.stderr) == (choice == "extend"), out.stderr
    assert ui_session(shared, session_of(out.stderr))["pending_hitl"] is None


def test_resume_extend_with_guidance_then_rewind_and_rename(shared: DaemonProc) -> None:
    sid = session_of(zocrates(shared, "ask", "--new", FOUR).stderr)
    out = zocrates(shared, "resume", sid, "--extend", "reef recovery time")
    assert out.returncode == 0, out.stderr
    assert "# Cited Sources" in out.stdout
    renamed = zocrates(shared, "sessions", "rename", sid, "Reefs \x1b[31mand sleep")
    assert renamed.returncode == 0 and "\x1b" not in renamed.stdout, renamed
    assert ui_session(shared, sid)["title"] == "Reefs  [31mand sleep"
    rewound = zocrates(shared, "rewind", sid)
    assert rewound.returncode == 0, rewound.stderr
    assert "0 messages left" in rewound.stdout and "What is retrieval-augmented generation?" in rewound.stdout
    assert ui_session(shared, sid)["messages"] == []
    gone = zocrates(shared, "rewind", sid)
    assert gone.returncode == 1 and "no turn to rewind" in gone.stderr


def test_terminal_output_escapes_control_characters(shared: DaemonProc) -> None:
    hostile = "What is HyDE? \x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J\x1b[31m red \u202e"
    out = zocrates(shared, "ask", "--new", "--on-checkpoint", "synthesize", hostile)  # ";" splits it in parts
    assert out.returncode == 0, out.stderr
    sid = session_of(out.stderr)
    shown = zocrates(shared, "sessions", "show", sid)
    assert shown.returncode == 0, shown.stderr
    for raw in ("\x1b", "\x07", "\u202e"):
        assert raw not in shown.stdout and raw not in out.stdout and raw not in out.stderr
    assert "\\x1b]52;c;cm0gLXJmIH4=\\x07\\x1b[2J" in shown.stdout and "\\u202e" in shown.stdout


def test_library_status_and_open(shared: DaemonProc) -> None:
    # Waits until the index settles (this may be the module's first test on its worker): a line per
    # change of the headline, the daemon's own summary, the last one "library ready". The summary
    # counts the standalone note as a note, not as a 31st item.
    watch = zocrates(shared, "library", "status", "--watch")
    assert watch.returncode == 0, watch
    assert watch.stdout.splitlines()[-1].startswith("library ready: 30 items, 16 full texts, 5 notes (from "), watch.stdout
    out = zocrates(shared, "library", "status")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("library ready: 30 items, 16 full texts, 5 notes (from "), out.stdout
    assert "collections" in out.stdout and "sqlite" in out.stdout
    assert "(from " in out.stdout.splitlines()[0] and "\n  summary" not in out.stdout  # said once, as the headline
    watch = zocrates(shared, "library", "status", "--watch")  # settled already: one line, then exit
    assert watch.returncode == 0 and watch.stdout.startswith("library ready"), watch
    status = subprocess.run(
        [sys.executable, "-m", "zocratesd", "status", "--zotero-data-dir", str(shared.data_dir)],
        env=shared.env, capture_output=True, text=True, timeout=CLI_TIMEOUT_S,
    )
    assert status.returncode == 0 and "library ready: 30 items, 16 full texts, 5 notes (from " in status.stdout, status
    url = zocrates(shared, "open", "--print")
    info = shared.info
    assert url.returncode == 0, url.stderr
    # A one-time code, not the token (which a browser's history would keep); the page trades it once.
    prefix = f"http://127.0.0.1:{info['http']['port']}/ui/#code="
    assert url.stdout.startswith(prefix) and info["token"] not in url.stdout, url.stdout
    code = url.stdout.strip()[len(prefix):]
    exchange = f"http://127.0.0.1:{info['http']['port']}/auth/exchange"
    assert httpx.post(exchange, json={"code": code}, timeout=10).json()["token"] == info["token"]
    assert httpx.post(exchange, json={"code": code}, timeout=10).status_code == 403


# --- in a terminal -----------------------------------------------------------------------------------


class Terminal:
    """A command in a pseudo-terminal: what it printed so far, what to type, how it ended."""

    def __init__(self, argv: list[str], env: dict[str, str]):
        env = {**env, "TERM": "dumb", "COLUMNS": "200", "LINES": "50"}
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # pragma: no cover - the child
            try:
                os.execvpe(argv[0], argv, env)
            finally:
                os._exit(127)
        self.output = ""
        self.status: int | None = None

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return True
        try:
            data = os.read(self.fd, 65536)
        except OSError:  # EIO: the child is gone and the terminal closed
            return False
        if not data:
            return False
        self.output += data.decode(errors="replace")
        return True

    def expect(self, text: str, after: int = 0, timeout: float = PTY_TIMEOUT_S) -> int:
        """Wait until `text` appears after position `after`; returns where it ends."""
        deadline = time.monotonic() + timeout
        while True:
            at = self.output.find(text, after)
            if at >= 0:
                return at + len(text)
            if time.monotonic() > deadline or not self._read(min(0.2, max(0.0, deadline - time.monotonic()))):
                at = self.output.find(text, after)
                if at >= 0:
                    return at + len(text)
                raise AssertionError(f"{text!r} did not appear; the terminal shows:\n{self.output[-3000:]}")

    def type(self, text: str) -> None:
        os.write(self.fd, text.encode())

    def wait(self, timeout: float = PTY_TIMEOUT_S) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._read(0.1)
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                while self._read(0.05):
                    if not select.select([self.fd], [], [], 0)[0]:
                        break
                self.status = os.waitstatus_to_exitcode(status)
                os.close(self.fd)
                return self.status
        self.kill()
        raise AssertionError(f"still running after {timeout} s:\n{self.output[-3000:]}")

    def kill(self) -> None:
        if self.status is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except OSError:
                pass
            self.status = -9


@pytest.fixture
def terminal(shared: DaemonProc) -> Iterator[Any]:
    made: list[Terminal] = []

    def start(*args: str) -> Terminal:
        t = Terminal([*zocrates_command(), "--zotero-data-dir", str(shared.data_dir), *args], shared.env)
        made.append(t)
        return t

    yield start
    for t in made:
        t.kill()


@pytest.mark.parametrize(
    ("answer", "status", "extended"),
    [("a\n", 0, False), ("reef recovery time\n", 0, True), ("l\n", 4, False)],
    ids=["answer-now", "extend-with-guidance", "leave"],
)
def test_a_checkpoint_is_asked_on_a_terminal(
    shared: DaemonProc, terminal: Any, answer: str, status: int, extended: bool
) -> None:
    t = terminal("ask", "--new", FOUR)
    at = t.expect(CHECKPOINT_ASK)
    assert "Not yet searched" in t.output
    t.type(answer)
    assert t.wait() == status, t.output
    tail = t.output[at:]
    assert ("# Cited Sources" in tail) == (status == 0), tail
    assert ("Round 4: searched" in tail) == extended, tail
    sid = session_of(t.output)
    assert (ui_session(shared, sid)["pending_hitl"] is not None) == (status == 4)


def test_ctrl_c_cancels_the_turn_and_the_session_stays_usable(shared: DaemonProc, terminal: Any) -> None:
    t = terminal("ask", "--new", FOUR)
    t.expect(CHECKPOINT_ASK)
    t.type("\x03")  # the terminal's interrupt character: SIGINT to the foreground process
    assert t.wait() == 130, t.output
    assert "cancelling the turn" in t.output and "Traceback" not in t.output
    sid = session_of(t.output)
    after = ui_session(shared, sid)
    assert after["pending_hitl"] is not None  # a cancelled checkpoint stays pending
    out = zocrates(shared, "ask", "--session", sid, SIMPLE)  # a new prompt supersedes it
    assert out.returncode == 0, out.stderr
    assert_cited_answer(out.stdout)


def test_chat_loop_with_commands_and_a_checkpoint(shared: DaemonProc, terminal: Any, tmp_path: Path) -> None:
    shared.env["XDG_STATE_HOME"] = str(tmp_path)  # the readline history goes here
    try:
        t = terminal("chat")
    finally:
        del shared.env["XDG_STATE_HOME"]
    at = t.expect("you> ")
    t.type(SIMPLE + "\n")
    at = t.expect("# Cited Sources", at)
    at = t.expect("you> ", at)
    sid = session_of(t.output)
    t.type(FOUR + "\n")
    at = t.expect(CHECKPOINT_ASK, at)
    t.type("a\n")
    at = t.expect("# Cited Sources", at)
    at = t.expect("you> ", at)
    assert user_turns(shared, sid) == 2
    t.type("/sessions\n")
    at = t.expect(sid, at)
    at = t.expect("you> ", at)
    t.type("/rewind\n")
    at = t.expect("rewound turn", at)
    at = t.expect("you> ", at)
    assert user_turns(shared, sid) == 1
    t.type(FOUR + "\n")  # Ctrl-C at the checkpoint: the turn is cancelled, the chat goes on
    at = t.expect(CHECKPOINT_ASK, at)
    t.type("\x03")
    at = t.expect("cancelling the turn", at)
    at = t.expect("you> ", at)
    t.type("/scope papers DPR4KRPN\n")
    at = t.expect("searching papers DPR4KRPN", at)
    t.type("/new\n")
    at = t.expect("new session", at)
    t.type("/quit\n")
    assert t.wait() == 0, t.output
    assert (tmp_path / "zocrates" / "chat_history").read_text().count("/rewind") == 1


# --- the client library ------------------------------------------------------------------------------


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.mark.anyio
async def test_client_streams_a_turn_answers_a_checkpoint_and_rewinds(shared: DaemonProc) -> None:
    asked: list[Checkpoint] = []

    async def on_request(method: str, params: dict[str, Any]) -> Any:
        assert method == "session/request_permission"
        asked.append(Checkpoint.from_request(params))
        return Checkpoint.answer(None)  # leave it pending

    with anyio.fail_after(CLI_TIMEOUT_S):
        async with connect(shared.data_dir, on_request=on_request) as client:
            sid = await client.new_session()
            async with client.stream_prompt(sid, FOUR) as turn:
                kinds = [item.kind async for item in turn]
            assert turn.result.stop_reason == "cancelled" and turn.result.pending_hitl is not None
            assert "agent_message_chunk" not in kinds and "tool_call" in kinds
            cp = asked[0]
            assert (cp.invocation_id, cp.interrupt_id) == (turn.result.invocation_id, "interrupt_ext_1")
            async with client.stream_resume(sid, cp.invocation_id, cp.interrupt_id, "synthesize") as resumed:
                text = "".join([i.update["content"]["text"] async for i in resumed if i.kind == "agent_message_chunk"])
            assert resumed.result.stop_reason == "end_turn" and "# Cited Sources" in text
            plain = await client.prompt(sid, SIMPLE, items=["HYDE9ZRT"])
            assert plain.stop_reason == "end_turn" and plain.invocation_id
            summary = await client.rename(sid, "Client turns")
            assert summary["title"] == "Client turns"
            rewound = await client.rewind(sid, plain.invocation_id)
            assert rewound["restored"]["text"] == SIMPLE and rewound["restored"]["mode"] == "papers"
            with pytest.raises(RpcError) as err:
                await client.rewind(sid, plain.invocation_id)
            assert err.value.code == -32002
            status = await client.library_status()
            assert status["state"] == "ready"


@pytest.mark.anyio
async def test_client_cancel_ends_a_turn_cancelled(shared: DaemonProc) -> None:
    paused = anyio.Event()

    async def on_request(method: str, params: dict[str, Any]) -> Any:
        paused.set()
        await anyio.sleep_forever()  # the user thinks; cancel() comes first

    with anyio.fail_after(CLI_TIMEOUT_S):
        async with connect(shared.data_dir, on_request=on_request) as client:
            sid = await client.new_session()
            async with client.stream_prompt(sid, FOUR) as turn:
                await paused.wait()
                await client.cancel(sid)
                result = await turn.wait()
            assert result.stop_reason == "cancelled"
            assert (await client.prompt(sid, SIMPLE)).stop_reason == "end_turn"  # usable again
