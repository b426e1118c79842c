"""Stock ACP clients nobody here wrote, against a real daemon on a Zotero library (issue 19).

- The official TypeScript SDK (@agentclientprotocol/sdk, pinned in package.json) runs
  tests/acp_clients/ts_sdk_driver.mjs: config options set and heard on a second connection, slash
  commands, a checkpoint answered by elicitation, close, resume in a new process without replay.
- The official Python SDK (agent-client-protocol, pinned in pyproject's test extra) does the same
  where it has the methods, on a daemon whose configured model is an OpenAI-compatible endpoint (a
  real HTTP server on 127.0.0.1), so choosing `offline` is seen to take the turn off it; then every
  setting survives a SIGKILL and a restart.
- acpx (npm, pinned) runs a prompt, resumes its session in a second invocation and lists sessions.

Node (>= 20) and the npm packages are required: `./dev test` installs them; without them these
tests fail, they never skip.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from acp import RequestError, spawn_agent_process, text_block
from acp.schema import (
    AcceptElicitationResponse,
    ClientCapabilities,
    ClientSessionCapabilities,
    ElicitationCapabilities,
    ElicitationFormCapabilities,
    SessionConfigOptionsCapabilities,
)
from daemonproc import DaemonProc, daemon_env
from fake_openai import FakeOpenAI
from zoterofixture import build_zotero_dir, sample_library

pytestmark = [pytest.mark.e2e]

ROOT = Path(__file__).resolve().parents[2]
NODE_MODULES = ROOT / "node_modules"
DRIVER = ROOT / "tests" / "acp_clients" / "ts_sdk_driver.mjs"
TWO_PARTS = "What does RAG combine? How does HyDE retrieve documents?"


def node() -> str:
    found = shutil.which("node")
    assert found, "node (>= 20) is needed for the ACP client tests: install Node.js (./dev test does)"
    assert (NODE_MODULES / "@agentclientprotocol" / "sdk").is_dir() and (NODE_MODULES / ".bin" / "acpx").exists(), (
        "node_modules lacks @agentclientprotocol/sdk or acpx: run `npm ci` (./dev test does)"
    )
    return found


def library_daemon(root: Path, config: dict[str, Any] | None = None) -> DaemonProc:
    runtime = root / "run"
    runtime.mkdir(mode=0o700)
    d = DaemonProc(data_dir=root / "zotero", runtime_dir=runtime, env=daemon_env(runtime))
    items, colls = sample_library()
    build_zotero_dir(d.data_dir, items, colls)
    d.state_dir.mkdir(parents=True, exist_ok=True)
    (d.state_dir / "zocrates_config.json").write_text(json.dumps({"library": {"local_api": False}, **(config or {})}))
    return d


@pytest.fixture(scope="module")
def shared() -> Iterator[DaemonProc]:
    """One daemon on the sample library for the TypeScript SDK and acpx tests."""
    root = Path(tempfile.mkdtemp(prefix="zq", dir="/tmp"))
    d = library_daemon(root)
    try:
        d.start()
        yield d
    finally:
        try:
            d.stop()
        finally:
            shutil.rmtree(root, ignore_errors=True)


def stdio_command(d: DaemonProc) -> list[str]:
    return [sys.executable, "-m", "zocratesd", "stdio", "--zotero-data-dir", str(d.data_dir)]


def test_typescript_sdk_drives_config_commands_elicitation_close_and_resume(shared: DaemonProc) -> None:
    cfg = {"command": stdio_command(shared), "env": shared.env}
    proc = subprocess.run(
        [node(), str(DRIVER), json.dumps(cfg)], cwd=ROOT, capture_output=True, text=True, timeout=240,
    )
    assert proc.returncode == 0, f"driver failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}\n{shared.stderr_tail()}"
    facts = json.loads(proc.stdout.strip().splitlines()[-1])
    assert facts["sessionCapabilities"] == ["close", "delete", "list", "resume"]
    assert facts["setOptions"] == ["scope", "model", "research_budget", "compaction", "citation_style"]
    assert facts["checkpoint"]["method"] == "elicitation/create" and facts["checkpoint"]["usage"]["used"] > 0
    assert facts["resumedWithoutReplay"] is True
    # What the driver saw is what is stored: the session's settings as the core reads them.
    state = json.loads(
        subprocess.run(
            [sys.executable, "-c", "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute("
             "'select state from sessions where id=?', (sys.argv[2],)).fetchone()[0])",
             str(shared.db_path), facts["sessionId"]],
            capture_output=True, text=True, check=True,
        ).stdout
    )
    assert state["session_config"] == {
        "scope": "library", "collection": None, "model": "offline", "research_budget": 2, "compaction": False,
        "citation_style": "pandoc",
    }


class Editor:
    """The Python SDK's client side: records updates, answers checkpoints by elicitation."""

    def __init__(self, elicit_action: str = "synthesize") -> None:
        self.updates: list[tuple[str, dict[str, Any]]] = []
        self.elicited: list[dict[str, Any]] = []
        self.elicit_action = elicit_action

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append((session_id, update.model_dump(by_alias=True, exclude_none=True)))

    async def request_permission(self, *args: Any, **kwargs: Any) -> Any:
        raise RequestError.method_not_found("session/request_permission")  # this editor elicits

    async def create_elicitation(self, message: str, mode: Any, **kwargs: Any) -> Any:
        self.elicited.append({"message": message, **mode.model_dump(by_alias=True, exclude_none=True)})
        return AcceptElicitationResponse(action="accept", content={"action": self.elicit_action})

    def kinds(self, sid: str, start: int = 0) -> list[str]:
        return [u["sessionUpdate"] for s, u in self.updates[start:] if s == sid]

    def last(self, sid: str, kind: str) -> dict[str, Any]:
        return next(u for s, u in reversed(self.updates) if s == sid and u["sessionUpdate"] == kind)


CAPS = ClientCapabilities(
    elicitation=ElicitationCapabilities(form=ElicitationFormCapabilities()),
    session=ClientSessionCapabilities(config_options=SessionConfigOptionsCapabilities(boolean={})),
)


def current(options: Any) -> dict[str, Any]:
    """Option id -> current value, from the SDK's models or from a dumped update."""
    out: dict[str, Any] = {}
    for o in options:
        if isinstance(o, dict):
            out[o["id"]] = o["currentValue"]
        else:
            o = getattr(o, "root", o)
            out[o.id] = o.current_value
    return out


async def wait_for(pred: Any, what: str, timeout: float = 30.0) -> None:
    with anyio.fail_after(timeout):
        while not pred():
            await anyio.sleep(0.05)


@pytest.mark.anyio
async def test_python_sdk_sets_every_option_and_they_survive_a_sigkill(short_tmp: Path) -> None:
    fake = FakeOpenAI()
    d = library_daemon(short_tmp, {"model": {"provider": "openai", "name": "fake-model", "base_url": fake.base_url}})
    args = ("-m", "zocratesd", "stdio", "--zotero-data-dir", str(d.data_dir))
    try:
        d.start()
        a_editor, b_editor = Editor(), Editor()
        # Elicitation is stable in ACP since July 2026; SDK 0.12 still files it as unstable.
        async with spawn_agent_process(a_editor, sys.executable, *args, env=d.env, use_unstable_protocol=True) as (a, _), \
                spawn_agent_process(b_editor, sys.executable, *args, env=d.env) as (b, _):
            init = await a.initialize(protocol_version=1, client_capabilities=CAPS)
            caps = init.agent_capabilities.model_dump(by_alias=True, exclude_none=True)["sessionCapabilities"]
            assert caps["resume"] == {} and caps["close"] == {}
            await b.initialize(protocol_version=1)
            for _ in range(300):
                status = await a.ext_method("zocrates/library/status", {})
                if status["state"] == "ready":
                    break
                await anyio.sleep(0.2)
            new = await a.new_session(cwd="/home/u")
            sid = new.session_id
            assert current(new.config_options) == {
                "scope": "library", "model": "openai:fake-model", "research_budget": "3", "compaction": True,
                "citation_style": "numbered",
            }
            await wait_for(lambda: "available_commands_update" in a_editor.kinds(sid), "commands after new")
            resumed = await b.resume_session(session_id=sid, cwd="/home/u")
            assert current(resumed.config_options)["compaction"] == "on"  # B takes no boolean options
            await wait_for(lambda: "available_commands_update" in b_editor.kinds(sid), "commands after resume")
            assert b_editor.kinds(sid) == ["available_commands_update"]  # no replay

            # The configured model answers until the session picks offline.
            await a.prompt(session_id=sid, prompt=[text_block("What is HyDE?")])
            assert len(fake.requests) >= 1
            asked_fake = len(fake.requests)
            for config_id, value in (("model", "offline"), ("scope", "collection:RAG0COLL"), ("research_budget", "1"),
                                     ("compaction", False), ("citation_style", "pandoc")):
                start = len(b_editor.updates)
                answer = await a.set_config_option(config_id=config_id, session_id=sid, value=value)
                assert current(answer.config_options)[config_id] == value
                await wait_for(lambda start=start: "config_option_update" in b_editor.kinds(sid, start), f"{config_id} on B")
                heard = current(b_editor.last(sid, "config_option_update")["configOptions"])
                assert heard[config_id] == ("off" if value is False else value)
            assert "config_option_update" not in a_editor.kinds(sid)  # the setter has it in its answer

            # A checkpoint, asked by elicitation; the editor answers "synthesize".
            result = await a.prompt(session_id=sid, prompt=[text_block(TWO_PARTS)])
            assert result.stop_reason == "end_turn", (a_editor.elicited, d.stderr_text()[-3000:])
            assert len(fake.requests) == asked_fake  # offline: the endpoint was not asked
            assert a_editor.elicited and a_editor.elicited[0]["sessionId"] == sid
            assert a_editor.elicited[0]["requestedSchema"]["required"] == ["action"]
            done = [u for s, u in a_editor.updates if s == sid and u["sessionUpdate"] == "tool_call_update"
                    and u.get("toolCallId", "").startswith("interrupt_ext_1@")]
            assert done and done[-1]["rawOutput"] == {"action": "synthesize"}
            usage = a_editor.last(sid, "usage_update")
            assert usage["used"] > 0 and usage["size"] > 0

            # A slash command; then close.
            start = len(a_editor.updates)
            await a.prompt(session_id=sid, prompt=[text_block("/research 4")])
            await wait_for(lambda: "agent_message_chunk" in a_editor.kinds(sid, start), "the /research reply")
            assert "Research budget: 4 rounds" in a_editor.last(sid, "agent_message_chunk")["content"]["text"]
            assert await a.close_session(session_id=sid) is not None
            sessions = (await b.list_sessions()).sessions
            assert [s.session_id for s in sessions] == [sid]

        d.kill()  # SIGKILL: nothing flushed on the way out
        d.start()
        editor = Editor()
        async with spawn_agent_process(editor, sys.executable, *args, env=d.env) as (c, _):
            await c.initialize(protocol_version=1, client_capabilities=CAPS)
            again = await c.resume_session(session_id=sid, cwd="/home/u")
            assert current(again.config_options) == {
                "scope": "collection:RAG0COLL", "model": "offline", "research_budget": "4", "compaction": False,
                "citation_style": "pandoc",
            }
            loaded = await c.load_session(session_id=sid, cwd="/home/u")
            assert current(loaded.config_options) == current(again.config_options)
    finally:
        d.stop()
        fake.close()


def acpx(shared: DaemonProc, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """acpx with zocratesd as its agent (`--agent`); its own state (session records, the queue
    owner it leaves running) lives under `home`. `--ttl 1`: the queue owner exits a second after."""
    agent = " ".join(stdio_command(shared))
    work = home / "project"
    work.mkdir(exist_ok=True)
    proc = subprocess.run(
        [node(), str(NODE_MODULES / ".bin" / "acpx"), "--agent", agent, "--cwd", str(work), "--ttl", "1",
         "--format", "json", "--approve-all", *args],
        cwd=work, env={**shared.env, "HOME": str(home)}, capture_output=True, text=True, timeout=180,
    )
    assert proc.returncode == 0, f"acpx {' '.join(args)} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def frames(out: str) -> list[dict[str, Any]]:
    """The JSON-RPC traffic `acpx --format json` prints, one message a line."""
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def wait_gone(pid: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while Path(f"/proc/{pid}").exists():
        assert time.monotonic() < deadline, f"acpx's queue owner {pid} still runs after {timeout} s"
        time.sleep(0.1)


def test_acpx_prompts_resumes_and_lists(shared: DaemonProc, tmp_path: Path) -> None:
    node()
    sid = json.loads(acpx(shared, tmp_path, "sessions", "new").stdout.splitlines()[-1])["acpxSessionId"]
    first = acpx(shared, tmp_path, "--verbose", "prompt", "What is HyDE?")
    msgs = frames(first.stdout)
    assert {"stopReason": "end_turn"}.items() <= next(m["result"] for m in msgs if "stopReason" in (m.get("result") or {})).items()
    answer = "".join(m["params"]["update"]["content"]["text"] for m in msgs if m.get("method") == "session/update"
                     and m["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
    assert "GAOHYDE1" in answer
    # acpx keeps the agent in a queue owner process for --ttl seconds: the next invocation starts
    # a new one (a new `zocratesd stdio`) only once it is gone.
    owner = re.search(r"owner pid (\d+)", first.stderr)
    assert owner, first.stderr[-2000:]
    wait_gone(int(owner.group(1)))

    second = acpx(shared, tmp_path, "--verbose", "prompt", "Which paper uses BERT encoders?")
    msgs = frames(second.stdout)
    methods = [m.get("method") for m in msgs if "id" in m and "method" in m]
    assert methods[:3] == ["initialize", "session/resume", "session/prompt"], methods  # resume preferred over load
    resume = next(m for m in msgs if m.get("method") == "session/resume")
    assert resume["params"]["sessionId"] == sid
    prompt_at = next(i for i, m in enumerate(msgs) if m.get("method") == "session/prompt")
    before_prompt = [m["params"]["update"]["sessionUpdate"] for m in msgs[:prompt_at] if m.get("method") == "session/update"]
    assert before_prompt == ["available_commands_update"]  # resumed without a replay
    answer = "".join(m["params"]["update"]["content"]["text"] for m in msgs[prompt_at:] if m.get("method") == "session/update"
                     and m["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
    assert "KARPDPR1" in answer

    listed = json.loads(acpx(shared, tmp_path, "sessions", "list").stdout.splitlines()[-1])
    assert listed["source"] == "agent"
    mine = [s for s in listed["sessions"] if s["sessionId"] == sid]
    assert mine and mine[0]["title"] == "What is HyDE?" and mine[0]["cwd"] == str(tmp_path / "project")
