"""protocol/README.md against what the daemon really serves and sends (issue 16, item 8).

tests/unit/rpc/test_schema.py checks the README's top-level examples against the JSON Schemas. This
file checks the README's claims against the daemon itself, where the README once contradicted it:

- the method table lists exactly the methods the daemon serves (and which run as notifications);
- the "Requests from the daemon" table lists exactly the requests the daemon's code sends, and the
  "Notifications" section exactly the notifications it sends (read from the code, so a new one
  cannot go undocumented);
- the `initialize` example is what the daemon answers, extensions and all;
- every JSON example, indented ones included, validates against its pydantic model of
  `zocratesd/rpc/models.py` (methods, notifications, and the daemon's own requests with their
  answers);
- the checkpoint ids are what the daemon uses (`toolCallId` is `<interrupt_id>@<invocation_id>`,
  never `pending_hitl.interrupt_id` itself), and a rename and a loaded session reach the attached
  connections as the README says.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from jsonblocks import json_values
from memstream import MemoryByteStream, pipe
from pydantic import BaseModel, ValidationError

from zocratesd.rpc.models import DAEMON_REQUESTS, METHODS, NOTIFICATIONS
from zocratesd.rpc.updates import checkpoint_call_id

# Online search off: these tests are about other things, and no face here asks about it.
OFFLINE = {"mode": "off"}

REPO = Path(__file__).resolve().parents[3]
README = REPO / "protocol" / "README.md"
# The JSON-RPC face: the only code that writes to a client's connection (rpc/peer.py, rpc/acp.py).
RPC_SOURCES = REPO / "zocratesd" / "rpc"

# --- reading the README -------------------------------------------------------------------------

_FENCE = re.compile(r"^([ \t]*)```json[ \t]*\n(.*?)^\1```[ \t]*$", re.S | re.M)
_FIRST_CELL = re.compile(r"^\|\s*\[?`([^`]+)`\]?(?:\([^)]*\))?\s*([^|]*)\|")


def readme() -> str:
    return README.read_text(encoding="utf-8")


def section(heading: str, text: str | None = None) -> str:
    """The text under `heading` (a whole heading line) up to the next heading of its level or above."""
    lines = (text if text is not None else readme()).splitlines()
    assert heading in lines, f"protocol/README.md has no heading {heading!r}"
    level = len(heading) - len(heading.lstrip("#"))
    out: list[str] = []
    fenced = False
    for line in lines[lines.index(heading) + 1:]:
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            if len(line) - len(line.lstrip("#")) <= level:
                break
        out.append(line)
    return "\n".join(out)


def table_names(text: str) -> dict[str, str]:
    """The first column of every table row whose first cell is a backticked name: name -> the rest
    of that cell (e.g. "(notification)")."""
    rows: dict[str, str] = {}
    for line in text.splitlines():
        m = _FIRST_CELL.match(line)
        if m:
            rows[m.group(1)] = m.group(2).strip()
    return rows


def json_blocks(text: str) -> Iterator[tuple[int, list[Any]]]:
    """Every ```json block (indented ones too, as in a list item) as (line, [its JSON values])."""
    for m in _FENCE.finditer(text):
        indent = m.group(1)
        body = "\n".join(line[len(indent):] if line.startswith(indent) else line for line in m.group(2).splitlines())
        line_no = text.count("\n", 0, m.start()) + 1
        yield line_no, json_values(body, f"protocol/README.md line {line_no}")


def messages_of(heading: str) -> list[dict[str, Any]]:
    return [v for _, values in json_blocks(section(heading)) for v in values if isinstance(v, dict) and "jsonrpc" in v]


# --- what the daemon serves and sends -----------------------------------------------------------


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The method table the daemon serves (a daemon built, not started: the table is all we read)."""
    from zocratesd.config import ZocratesConfig
    from zocratesd.core.daemon import Daemon
    from zocratesd.rpc.acp import build_methods

    return build_methods(Daemon(tmp_path_factory.mktemp("served"), ZocratesConfig(online=OFFLINE)))


def sent_by_code(pattern: str) -> set[str]:
    """Method names the JSON-RPC face sends with a literal name (`peer.request("x"`, `notify("x"`)."""
    found: set[str] = set()
    for path in RPC_SOURCES.rglob("*.py"):
        found.update(re.findall(pattern, path.read_text(encoding="utf-8")))
    return found


def test_the_method_table_lists_exactly_what_the_daemon_serves(served: Any) -> None:
    rows = table_names(section("## Methods").split("\n### ", 1)[0])  # the table, not the methods' own
    assert set(rows) == set(served), (
        f"documented but not served: {sorted(set(rows) - set(served))}; "
        f"served but not documented: {sorted(set(served) - set(rows))}"
    )
    assert {name for name, rest in rows.items() if "notification" in rest} == set(served.notifications)
    for name in rows:
        assert f"### `{name}`" in readme(), f"the method table links {name}, which has no section"
    # The models describe every method: what is served as a request, and what runs as a notification.
    assert set(METHODS) == set(served) - set(served.notifications)
    assert set(served.notifications) <= set(NOTIFICATIONS)


def test_each_method_is_validated_by_the_model_its_schema_is_generated_from() -> None:
    """The table validates a method's params with the model its agent method is annotated with
    (rpc/agent.py, rpc/acp.py); protocol/schema/ is generated from models.METHODS: the same model."""
    from zocratesd.rpc.acp import PARAMS

    generated = {name: params for name, (params, _result) in METHODS.items()} | NOTIFICATIONS
    assert {name: generated.get(name) for name in PARAMS} == PARAMS


def test_the_daemons_own_requests_are_documented_and_none_else_is_sent() -> None:
    rows = table_names(section("## Requests from the daemon"))
    sent = sent_by_code(r"\.request\(\s*\"([^\"]+)\"")
    assert sent, "found no request the daemon sends: has the call changed shape? fix this test's pattern"
    assert set(rows) == sent == set(DAEMON_REQUESTS)
    for name in rows:
        assert f"### `{name}`" in section("## Requests from the daemon")
    messages = section("## Messages")
    assert "none today" not in messages
    for name in rows:
        assert f"`{name}`" in messages


def test_the_notifications_the_daemon_sends_are_documented() -> None:
    sent = sent_by_code(r"(?:notification|notify)\(\s*\"([^\"]+)\"")
    documented = set(re.findall(r"^### `([^`]+)`", section("## Notifications"), re.M))
    assert sent == documented == {"session/update"}
    assert documented <= set(NOTIFICATIONS)
    # `$/cancel_request` is the one other notification the daemon sends (a constant, not a literal).
    assert "`$/cancel_request" in section("## Requests from the daemon")


def test_every_example_validates_against_its_model() -> None:
    """Indented examples too (the daemon's request sits in a list item of session/prompt)."""
    counts = {"params": 0, "result": 0, "notification": 0, "daemon request": 0, "daemon answer": 0}
    for line, values in json_blocks(readme()):
        messages = [v for v in values if isinstance(v, dict) and "jsonrpc" in v]
        requests = {m["id"]: m for m in messages if "method" in m and "id" in m}
        answers = {m["id"]: m for m in messages if "method" not in m and "id" in m}
        for msg in messages:
            where = f"protocol/README.md, block at line {line}: {json.dumps(msg)[:140]}"
            method = msg.get("method")
            if method is not None and "id" in msg:
                answer = answers.get(msg["id"])
                if answer is not None and "error" in answer:
                    continue  # an example of a request the daemon refuses
                if method in DAEMON_REQUESTS:
                    assert isinstance(msg["id"], str) and msg["id"].startswith("z:"), where
                    _valid(DAEMON_REQUESTS[method][0], msg.get("params"), where)
                    counts["daemon request"] += 1
                else:
                    assert method in METHODS, f"{where}: not a method of the protocol"
                    _valid(METHODS[method][0], msg.get("params") or {}, where)
                    counts["params"] += 1
            elif method is not None:
                assert method in NOTIFICATIONS, f"{where}: not a notification of the protocol"
                _valid(NOTIFICATIONS[method], msg.get("params") or {}, where)
                counts["notification"] += 1
            elif "result" in msg:
                request = requests.get(msg["id"])
                assert request is not None, f"{where}: a result without its request in the same block"
                if request["method"] in DAEMON_REQUESTS:
                    _valid(DAEMON_REQUESTS[request["method"]][1], msg["result"], where)
                    counts["daemon answer"] += 1
                else:
                    _valid(METHODS[request["method"]][1], msg["result"], where)
                    counts["result"] += 1
    assert all(counts.values()), f"some kind of example is missing: {counts}"


def _valid(model: type[BaseModel], value: Any, where: str) -> None:
    try:
        model.model_validate(value)
    except ValidationError as exc:
        pytest.fail(f"{where}\ndoes not validate against {model.__name__}:\n{exc}")


def test_the_checkpoint_ids_of_the_examples_are_the_daemons() -> None:
    """`pending_hitl.interrupt_id` is what chat/resume takes; the checkpoint's `toolCallId` (live,
    in a replay, in session/request_permission) is `<interrupt_id>@<invocation_id>`."""
    [ui] = [m["result"] for m in messages_of("### `_zocrates/session/get`") if "result" in m]
    hitl = ui["pending_hitl"]
    expected = checkpoint_call_id(hitl["interrupt_id"], hitl["invocation_id"])
    replayed = [
        m["params"]["update"] for m in messages_of("### `session/load`")
        if m.get("method") == "session/update" and m["params"]["update"].get("status") == "pending"
    ]
    assert [u["toolCallId"] for u in replayed] == [expected]
    assert replayed[0]["title"] == hitl["message"] and replayed[0]["rawInput"] == hitl["payload"]
    [asked] = [m for m in messages_of("### `session/prompt`") if m.get("method") == "session/request_permission"]
    call_id = asked["params"]["toolCall"]["toolCallId"]
    interrupt, _, invocation = call_id.partition("@")
    assert call_id == checkpoint_call_id(interrupt, invocation) and interrupt.startswith("interrupt_ext_")
    row = next(line for line in section("## The UI session object").splitlines() if line.startswith("| `interrupt_id`"))
    assert "`<interrupt_id>@<invocation_id>`" in row


# --- against a running daemon core --------------------------------------------------------------


class _Conn:
    """One client connection of the test: requests with their answers, notifications kept."""

    def __init__(self, stream: MemoryByteStream) -> None:
        self.stream, self.buf, self.ids = stream, b"", 0
        self.notes: list[dict[str, Any]] = []

    async def next(self) -> dict[str, Any]:
        while b"\n" not in self.buf:
            self.buf += await self.stream.receive()
        line, _, self.buf = self.buf.partition(b"\n")
        message: dict[str, Any] = json.loads(line)
        return message

    async def call(self, method: str, params: dict[str, Any]) -> Any:
        self.ids += 1
        await self.stream.send(json.dumps({"jsonrpc": "2.0", "id": self.ids, "method": method, "params": params}).encode() + b"\n")
        with anyio.fail_after(30):
            while True:
                msg = await self.next()
                if msg.get("id") == self.ids and "method" not in msg:
                    assert "result" in msg, msg
                    return msg["result"]
                self.notes.append(msg)

    async def update(self, kind: str, **fields: Any) -> dict[str, Any]:
        """Wait for a `session/update` of that kind (and those fields) not yet seen."""
        with anyio.fail_after(30):
            while True:
                for i, note in enumerate(self.notes):
                    update = note.get("params", {}).get("update", {})
                    if update.get("sessionUpdate") == kind and all(update.get(k) == v for k, v in fields.items()):
                        del self.notes[: i + 1]
                        return dict(update)
                self.notes.append(await self.next())


@pytest.fixture
async def two_clients(tmp_path: Path) -> AsyncIterator[tuple[_Conn, _Conn, Any]]:
    from zocratesd.config import ZocratesConfig
    from zocratesd.core.daemon import Daemon
    from zocratesd.rpc.acp import build_methods
    from zocratesd.rpc.peer import Peer

    daemon = Daemon(tmp_path, ZocratesConfig(research={"initial_budget": 1}, online=OFFLINE))
    await daemon.start()
    methods = build_methods(daemon)
    ends = [pipe(), pipe()]
    try:
        async with anyio.create_task_group() as tg:
            for i, (server_end, _) in enumerate(ends):
                tg.start_soon(Peer(server_end, methods, name=f"doc-test-{i}").run)
            yield _Conn(ends[0][1]), _Conn(ends[1][1]), daemon
            for _, client_end in ends:
                await client_end.send_eof()
    finally:
        await daemon.aclose()


@pytest.mark.anyio
async def test_the_initialize_example_is_what_the_daemon_answers(two_clients: Any, served: Any) -> None:
    a, _, daemon = two_clients
    [request] = [m for m in messages_of("### `initialize`") if m.get("method") == "initialize"]
    [example] = [m["result"] for m in messages_of("### `initialize`") if "result" in m]
    documented = example["agentCapabilities"]["_meta"]["zocrates"]["extensions"]
    assert documented == sorted(name for name in served if name.startswith("_zocrates/"))
    real = await a.call("initialize", request["params"])
    # Only the version differs from release to release (and the frame cap is the default's).
    assert real["agentCapabilities"]["_meta"]["zocrates"].pop("version") == daemon.version
    assert real["agentInfo"].pop("version") == daemon.version
    example["agentCapabilities"]["_meta"]["zocrates"].pop("version")
    example["agentInfo"].pop("version")
    assert real == example


@pytest.mark.anyio
async def test_a_rename_and_later_turns_reach_the_connections_attached_to_the_session(two_clients: Any) -> None:
    """What `_zocrates/session/rename` and `session/load` document: the attached connections get
    the rename's `session_info_update` and the updates of turns run after the load."""
    a, b, _ = two_clients
    sid = (await b.call("session/new", {"cwd": "/home/u", "mcpServers": []}))["sessionId"]
    await a.call("session/load", {"sessionId": sid, "cwd": "/home/u", "mcpServers": []})
    a.notes.clear()

    await b.call("_zocrates/session/rename", {"sessionId": sid, "title": "Renamed"})
    assert (await a.update("session_info_update"))["title"] == "Renamed"
    assert "`session_info_update`" in section("### `_zocrates/session/rename`")

    turn = await b.call("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "Hello there"}]})
    assert turn["stopReason"] == "end_turn"
    assert (await a.update("user_message_chunk"))["content"]["text"] == "Hello there"
    await a.update("usage_update")  # the last update of the turn
    assert "attached" in section("### `session/load`")


@pytest.mark.anyio
async def test_a_real_checkpoint_is_replayed_with_the_documented_ids(two_clients: Any) -> None:
    a, _, _ = two_clients
    sid = (await a.call("session/new", {"cwd": "/home/u", "mcpServers": []}))["sessionId"]
    # A budget of one round and two aspects: the turn asks; this client declines.
    turn = await _prompt_declining(a, sid, "What is RAG? What is HyDE?")
    hitl = turn["_meta"]["zocrates"]["pendingHitl"]
    assert turn["stopReason"] == "cancelled" and hitl["interrupt_id"] == "interrupt_ext_1"
    a.notes.clear()
    await a.call("session/load", {"sessionId": sid, "cwd": "/home/u", "mcpServers": []})
    pending = [n["params"]["update"] for n in a.notes if n["params"]["update"].get("status") == "pending"]
    assert [u["toolCallId"] for u in pending] == [checkpoint_call_id(hitl["interrupt_id"], hitl["invocation_id"])]
    assert pending[0]["toolCallId"] != hitl["interrupt_id"]


async def _prompt_declining(conn: _Conn, session_id: str, text: str) -> Any:
    """A prompt whose checkpoint question this client answers `cancelled`; the asked params are
    checked against the model the README documents."""
    conn.ids += 1
    request_id = conn.ids
    await conn.stream.send(json.dumps({
        "jsonrpc": "2.0", "id": request_id, "method": "session/prompt",
        "params": {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]},
    }).encode() + b"\n")
    asked = 0
    with anyio.fail_after(30):
        while True:
            msg = await conn.next()
            if msg.get("method") == "session/request_permission":
                DAEMON_REQUESTS["session/request_permission"][0].model_validate(msg["params"])
                asked += 1
                answer = {"jsonrpc": "2.0", "id": msg["id"], "result": {"outcome": {"outcome": "cancelled"}}}
                await conn.stream.send(json.dumps(answer).encode() + b"\n")
            elif msg.get("id") == request_id:
                assert asked == 1
                return msg["result"]
