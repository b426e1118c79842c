"""protocol/schema/*.json and protocol/README.md against the models and the daemon's real answers.

- The committed schema files must equal what `python -m zocratesd.rpc.schema --write` generates.
- Every schema must be a valid JSON Schema (checked with its own metaschema, draft 2020-12).
- Every JSON-RPC example in protocol/README.md must validate against the schemas, so the README
  cannot rot: requests and their results against the method's files, notifications against theirs,
  errors against the documented error shape.
- The real daemon core, driven over a real connection peer, must answer what the schemas describe.
"""

from __future__ import annotations

import json
import re
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from adkevents import append_all, call, research_chat, text
from jsonblocks import json_values
from jsonschema import Draft202012Validator, validators
from memstream import MemoryByteStream, pipe

from zocratesd.rpc import models, schema
from zocratesd.rpc.models import METHODS, NOTIFICATIONS

# Online search off: these tests are about other things, and no face here asks about it.
OFFLINE = {"mode": "off"}

REPO = Path(__file__).resolve().parents[3]
SCHEMA_DIR = REPO / "protocol" / "schema"
README = REPO / "protocol" / "README.md"

# The shape of each `session/update` kind the daemon emits (zocratesd/rpc/updates.py), as the README's
# "Notifications" section documents it. `session.update.params.json` only knows `update` is an object.
_CHUNK = {
    "type": "object",
    "required": ["sessionUpdate", "content", "messageId"],
    "properties": {
        "content": {
            "type": "object",
            "required": ["type", "text"],
            "properties": {"type": {"const": "text"}, "text": {"type": "string"}},
        },
        "messageId": {"type": "string", "minLength": 1},
    },
}
TOOL_KINDS = ["read", "edit", "delete", "move", "search", "execute", "think", "fetch", "other"]
UPDATE_SHAPES: dict[str, dict[str, Any]] = {
    "user_message_chunk": _CHUNK,
    "agent_message_chunk": _CHUNK,
    "agent_thought_chunk": _CHUNK,
    "tool_call": {
        "type": "object",
        "required": ["sessionUpdate", "toolCallId", "title", "kind", "status", "rawInput"],
        "properties": {
            "toolCallId": {"type": "string"},
            "title": {"type": "string"},
            "kind": {"enum": TOOL_KINDS},
            # in_progress: a tool call; pending: a research checkpoint waiting on the user.
            "status": {"enum": ["in_progress", "pending"]},
            "rawInput": {"type": "object"},
        },
        "not": {"required": ["messageId"]},
    },
    "tool_call_update": {
        "type": "object",
        "required": ["sessionUpdate", "toolCallId"],
        "properties": {
            "toolCallId": {"type": "string"},
            "status": {"enum": ["completed", "failed"]},
            "content": {"type": "array", "items": {
                "type": "object", "required": ["type", "content"],
                "properties": {"type": {"const": "content"}, "content": _CHUNK["properties"]["content"]},
            }},
        },
        # Either the call's end (status + rawOutput) or its progress so far (content).
        "anyOf": [{"required": ["status", "rawOutput"]}, {"required": ["content"]}],
        "not": {"required": ["messageId"]},
    },
    "session_info_update": {
        "type": "object",
        "required": ["sessionUpdate", "title"],
        "properties": {"title": {"type": "string"}, "updatedAt": {"type": "string"}},
        "not": {"required": ["messageId"]},
    },
    "usage_update": {
        "type": "object",
        "required": ["sessionUpdate", "used", "size", "_meta"],
        "properties": {
            "used": {"type": "integer", "minimum": 0},
            "size": {"type": "integer", "minimum": 1},
            "_meta": {
                "type": "object",
                "required": ["zocrates"],
                "properties": {"zocrates": {
                    "type": "object",
                    "required": ["compactionMs", "compacted"],
                    "properties": {"compactionMs": {"type": "number", "minimum": 0}, "compacted": {"type": "boolean"}},
                }},
            },
        },
        "not": {"required": ["messageId"]},
    },
    "available_commands_update": {
        "type": "object",
        "required": ["sessionUpdate", "availableCommands"],
        "properties": {"availableCommands": {"type": "array", "minItems": 1, "items": {
            "type": "object", "required": ["name", "description"],
            "properties": {"name": {"type": "string"}, "description": {"type": "string"},
                           "input": {"type": "object", "required": ["hint"]}},
        }}},
        "not": {"required": ["messageId"]},
    },
    "config_option_update": {
        "type": "object",
        "required": ["sessionUpdate", "configOptions"],
        "properties": {"configOptions": {"type": "array", "minItems": 4, "items": {
            "type": "object", "required": ["id", "name", "type", "currentValue"],
            "properties": {"type": {"enum": ["select", "boolean"]}},
        }}},
        "not": {"required": ["messageId"]},
    },
}
# Never in a session/load replay: the end of a live turn; what follows an answer (the commands); a
# change of a setting.
LIVE_ONLY_KINDS = {"usage_update", "available_commands_update", "config_option_update"}

ERROR_SHAPE = {
    "type": "object",
    "required": ["jsonrpc", "id", "error"],
    "properties": {
        "jsonrpc": {"const": "2.0"},
        "id": {"type": ["string", "integer", "null"]},
        "error": {
            "type": "object",
            "required": ["code", "message", "data"],
            "properties": {
                "code": {"type": "integer"},
                "message": {"type": "string", "minLength": 1},
                "data": {"type": "object", "required": ["kind"], "properties": {"kind": {"type": "string"}}},
            },
        },
    },
}


@pytest.fixture(scope="module")
def rendered() -> dict[str, str]:
    return schema.render()


@pytest.fixture(scope="module")
def schemas(rendered: dict[str, str]) -> dict[str, dict[str, Any]]:
    return {name: json.loads(text) for name, text in rendered.items()}


def validate(instance: Any, schema_doc: dict[str, Any], what: str) -> None:
    errors = sorted(Draft202012Validator(schema_doc).iter_errors(instance), key=lambda e: list(e.absolute_path))
    if errors:
        lines = [f"  at /{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors[:10]]
        lines.append(f"  instance: {json.dumps(instance)[:500]}")
        pytest.fail(f"{what} does not match its schema:\n" + "\n".join(lines))


def params_schema(schemas: dict[str, dict[str, Any]], method: str) -> dict[str, Any]:
    index = schemas[schema.INDEX_NAME]
    entry = index["methods"].get(method) or index["notifications"].get(method)
    assert entry is not None, f"{method} has no schema file in index.json"
    return schemas[entry["params"]]


def result_schema(schemas: dict[str, dict[str, Any]], method: str) -> dict[str, Any]:
    return schemas[schemas[schema.INDEX_NAME]["methods"][method]["result"]]


def readme_errors_section() -> str:
    return README.read_text(encoding="utf-8").split("\n## Errors\n", 1)[1].split("\n## ", 1)[0]


def check_update(update: Any, what: str) -> None:
    assert isinstance(update, dict), f"{what}: update is not an object"
    kind = update.get("sessionUpdate")
    assert kind in UPDATE_SHAPES, f"{what}: sessionUpdate {kind!r} is not a kind the daemon emits"
    validate(update, UPDATE_SHAPES[kind], f"{what} ({kind})")


# --- the files ----------------------------------------------------------------------------------


def test_committed_schema_files_match_the_models(rendered: dict[str, str]) -> None:
    problems = schema.drift(SCHEMA_DIR, rendered)
    assert not problems, (
        "protocol/schema/ has drifted from zocratesd/rpc/models.py:\n  "
        + "\n  ".join(problems)
        + f"\nRun `{schema.WRITE_COMMAND}` and commit the result."
    )


def test_check_command_reports_drift(
    tmp_path: Path, rendered: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert schema.main(["--write", str(tmp_path)]) == 0
    assert schema.main(["--check", str(tmp_path)]) == 0
    name = "session.new.params.json"
    (tmp_path / name).write_text(rendered[name].replace('"cwd"', '"cwdx"', 1))
    (tmp_path / "initialize.result.json").unlink()
    (tmp_path / "stale.params.json").write_text("{}\n")
    capsys.readouterr()
    assert schema.main(["--check", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert f"changed: {name}" in err
    assert "missing: initialize.result.json" in err
    assert "extra:   stale.params.json" in err
    assert schema.WRITE_COMMAND in err
    assert schema.main(["--write", str(tmp_path)]) == 0
    assert schema.drift(tmp_path, rendered) == []


def test_rendering_is_deterministic_and_diff_friendly(rendered: dict[str, str]) -> None:
    assert schema.render() == rendered
    for name, text_ in rendered.items():
        assert text_.endswith("}\n") and not text_.endswith("\n\n"), name
        assert text_ == json.dumps(json.loads(text_), indent=2, sort_keys=True, ensure_ascii=False) + "\n", name


def test_file_names_map_method_names_without_collisions(schemas: dict[str, dict[str, Any]]) -> None:
    assert schema.file_stem("initialize") == "initialize"
    assert schema.file_stem("session/new") == "session.new"
    assert schema.file_stem("_zocrates/session/get") == "_zocrates.session.get"
    assert schema.file_stem("session/set_config_option") == "session.set_config_option"
    for bad in ["a.b", "$/cancel_request", "session//new", "/session", "session/", "", "x y"]:
        with pytest.raises(ValueError):
            schema.file_stem(bad)
    index = schemas[schema.INDEX_NAME]
    assert set(index["methods"]) == set(METHODS)
    assert set(index["notifications"]) == set(NOTIFICATIONS)
    listed = [f for entry in [*index["methods"].values(), *index["notifications"].values()] for f in entry.values()]
    assert len(listed) == len(set(listed)), "two methods share a schema file"
    assert set(listed) | {schema.INDEX_NAME} == set(schemas)
    for method, entry in index["methods"].items():
        assert entry["params"].removesuffix(".params.json").replace(".", "/") == method


def test_every_schema_is_a_valid_json_schema(schemas: dict[str, dict[str, Any]]) -> None:
    for name, doc in schemas.items():
        if name == schema.INDEX_NAME:
            continue
        assert doc["$schema"] == schema.JSON_SCHEMA_DIALECT, name
        cls = validators.validator_for(doc)
        assert cls is Draft202012Validator, name
        cls.check_schema(doc)  # raises SchemaError, naming the problem
        assert doc["type"] == "object", name


def test_params_and_results_use_the_wire_names(schemas: dict[str, dict[str, Any]]) -> None:
    assert "protocolVersion" in schemas["initialize.params.json"]["properties"]
    assert "_meta" in schemas["session.new.params.json"]["properties"]
    assert "sessionId" in schemas["session.load.params.json"]["properties"]
    assert "sessionId" in schemas["session.load.params.json"]["required"]
    assert "agentCapabilities" in schemas["initialize.result.json"]["properties"]
    # The UI session object keeps the spec's snake_case names.
    ui_fields = set(schemas["_zocrates.session.get.result.json"]["properties"])
    assert {"created_at", "updated_at", "pending_hitl"} <= ui_fields


# --- the README's examples ----------------------------------------------------------------------


def readme_blocks() -> Iterator[tuple[int, list[Any]]]:
    """Each ```json block of the README as (line number, [the JSON values in it, in order])."""
    text_ = README.read_text(encoding="utf-8")
    for m in re.finditer(r"^```json\n(.*?)^```$", text_, re.S | re.M):
        line = text_.count("\n", 0, m.start()) + 1
        yield line, json_values(m.group(1), f"protocol/README.md line {line}")


def test_readme_examples_match_the_schemas(schemas: dict[str, dict[str, Any]]) -> None:
    errors_section = readme_errors_section()
    answered: set[str] = set()
    notified: set[str] = set()
    kinds_seen: set[str] = set()
    blocks = list(readme_blocks())
    assert blocks, "protocol/README.md has no ```json examples"
    for line, values in blocks:
        messages = [v for v in values if isinstance(v, dict) and "jsonrpc" in v]
        requests = {m["id"]: m for m in messages if "method" in m and "id" in m}
        answers = {m["id"]: m for m in messages if "method" not in m and "id" in m}
        for msg in messages:
            where = f"protocol/README.md, block at line {line}: {json.dumps(msg)[:120]}"
            daemon_request = requests.get(msg.get("id"), {}).get("method") in models.DAEMON_REQUESTS
            if daemon_request:
                continue  # the daemon's own request and its answer: test_protocol_doc checks them
            if "method" in msg and "id" in msg:
                answer = answers.get(msg["id"])
                if answer is not None and "error" in answer:
                    continue  # an example of a request the daemon refuses
                assert msg["method"] in METHODS, f"{where}: not a method the daemon serves"
                validate(msg.get("params") or {}, params_schema(schemas, msg["method"]), where)
            elif "method" in msg:
                assert msg["method"] in NOTIFICATIONS, f"{where}: not a notification the daemon sends"
                validate(msg.get("params") or {}, params_schema(schemas, msg["method"]), where)
                if msg["method"] == "session/update":
                    check_update(msg["params"]["update"], where)
                    kinds_seen.add(msg["params"]["update"]["sessionUpdate"])
                notified.add(msg["method"])
            elif "error" in msg:
                validate(msg, ERROR_SHAPE, where)
                err = msg["error"]
                row = f"| {err['code']} | {err['message']} |"
                assert row in errors_section, f"{where}: code/message not in the Errors table"
                assert f"`{err['data']['kind']}`" in errors_section, f"{where}: data.kind not in the Errors table"
            else:
                request = requests.get(msg["id"])
                assert request is not None, f"{where}: a result without its request in the same block"
                validate(msg["result"], result_schema(schemas, request["method"]), where)
                answered.add(request["method"])
    assert answered == set(METHODS), f"methods without a request/result example: {sorted(set(METHODS) - answered)}"
    assert notified == set(NOTIFICATIONS)
    missing_kinds = sorted(set(UPDATE_SHAPES) - kinds_seen)
    assert not missing_kinds, f"update kinds without an example: {missing_kinds}"


def test_readme_documents_every_method_and_update_kind() -> None:
    readme = README.read_text(encoding="utf-8")
    for method in METHODS:
        assert f"### `{method}`" in readme, f"protocol/README.md has no section for {method}"
    for method in NOTIFICATIONS:
        assert f"### `{method}`" in readme
    for kind in UPDATE_SHAPES:
        assert f"| `{kind}` |" in readme, f"protocol/README.md does not document the update kind {kind}"
    assert "python -m zocratesd.rpc.schema --write" in readme


# --- the daemon's real answers ------------------------------------------------------------------


class _Client:
    def __init__(self, stream: MemoryByteStream):
        self.stream, self.buf, self.ids = stream, b"", 0
        # How this client answers session/request_permission (a research checkpoint).
        self.permission: dict[str, Any] = {"outcome": {"outcome": "cancelled"}}

    async def call(self, method: str, params: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Send one request; return its answer and the notifications that came before it."""
        self.ids += 1
        msg = {"jsonrpc": "2.0", "id": self.ids, "method": method, "params": params}
        await self.stream.send(json.dumps(msg).encode() + b"\n")
        notes: list[dict[str, Any]] = []
        with anyio.fail_after(30):
            while True:
                while b"\n" not in self.buf:
                    self.buf += await self.stream.receive()
                line, _, self.buf = self.buf.partition(b"\n")
                msg = json.loads(line)
                if msg.get("id") == self.ids and "method" not in msg:
                    return msg, notes
                if msg.get("method") == "session/request_permission":
                    reply = {"jsonrpc": "2.0", "id": msg["id"], "result": self.permission}
                    await self.stream.send(json.dumps(reply).encode() + b"\n")
                notes.append(msg)


@pytest.fixture
async def live(tmp_path: Path) -> AsyncIterator[tuple[_Client, Any]]:
    from zocratesd.config import ZocratesConfig
    from zocratesd.core.daemon import Daemon
    from zocratesd.rpc.acp import build_methods
    from zocratesd.rpc.peer import Peer

    # A budget of one round: a two-part question stops at a research checkpoint.
    # Zotero's port is a closed one: a Zotero running on the test machine is not written to.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    nowhere = f"http://127.0.0.1:{closed}"  # no provider answers: an online search is offline, fast
    daemon = Daemon(tmp_path, ZocratesConfig(
        research={"initial_budget": 1}, library={"local_api_url": nowhere},
        online={"mode": "on", "openalex_url": nowhere, "arxiv_url": nowhere, "crossref_url": nowhere}))
    await daemon.start()
    server_end, client_end = pipe()
    peer = Peer(server_end, build_methods(daemon), name="schema-test")
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(peer.run)
            yield _Client(client_end), daemon
            await client_end.send_eof()
    finally:
        await daemon.aclose()


async def plugin_in_zotero(daemon: Any) -> None:
    """What the Zocrates plugin does inside Zotero (which cannot run here): take the daemon's write
    requests from its channel and answer that they were made (clients/zotero/plugin has the real one)."""
    while True:
        request = await daemon.plugin.poll(1.0, plugin_version="test", zotero_version="9.0.6")
        if request is None:
            continue
        op = request["operation"]
        change: dict[str, Any] = {}
        if request["call"] == "plan" and op["type"] == "tag_items":
            change = {"tags_added": {k: op["tags"] for k in op["items"]}}
        elif request["call"] == "plan" and op.get("new_key"):
            change = {"created_collections" if op["type"] == "create_collection" else "created_items": [op["new_key"]]}
        daemon.plugin.answer(request["id"], {"result": {"change": change}})


async def exercise_writes(ok: Any, daemon: Any) -> None:
    """Every `_zocrates/writes/*` method, first with Zotero out of reach, then through the plugin."""
    waiting, _ = await ok("_zocrates/writes/tag", {"itemKeys": ["LEWIS202"], "tags": ["review"]})
    assert waiting["state"] == "awaiting_consent"
    async with anyio.create_task_group() as tg:
        tg.start_soon(daemon.writes.run)
        queued, _ = await ok("_zocrates/writes/untag", {"itemKeys": ["LEWIS202"], "tags": ["old"], "confirm": True})
        assert queued["state"] == "queued" and queued["error"], queued
        listed, _ = await ok("_zocrates/writes/list", {"pending": True})
        assert [w["id"] for w in listed["writes"]] == [queued["id"], waiting["id"]]
        await ok("_zocrates/writes/discard", {"writeId": queued["id"]})
        collection, _ = await ok("_zocrates/writes/create_collection", {"name": "Thesis"})
        await ok("_zocrates/writes/add_to_collection", {"itemKeys": ["LEWIS202"], "collection": "Thesis"})
        await ok("_zocrates/writes/save_note", {"markdown": "# Notes\n\nOn *RAG*.", "parentItem": "LEWIS202"})
        await ok("_zocrates/writes/add_item", {"csl": {"type": "book", "title": "Bees", "issued": {"date-parts": [[2018]]}}})
        tg.start_soon(plugin_in_zotero, daemon)
        applied, _ = await ok("_zocrates/writes/confirm", {"writeId": waiting["id"]})
        assert applied["state"] == "applied" and applied["path"] == "plugin", applied
        made, _ = await ok("_zocrates/writes/get", {"writeId": collection["id"]})
        assert made["state"] == "awaiting_consent"
        undone, _ = await ok("_zocrates/writes/undo", {"writeId": waiting["id"]})
        assert undone["state"] == "applied" and undone["undoes"] == waiting["id"], undone
        tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_real_answers_match_the_schemas_and_models(live: Any, schemas: dict[str, dict[str, Any]]) -> None:
    client, daemon = live
    results: dict[str, Any] = {}

    async def ok(method: str, params: dict[str, Any]) -> tuple[Any, list[dict[str, Any]]]:
        validate(params, params_schema(schemas, method), f"{method} params (test input)")
        answer, notes = await client.call(method, params)
        assert "result" in answer, f"{method} failed: {answer}"
        validate(answer["result"], result_schema(schemas, method), f"{method} result")
        METHODS[method][1].model_validate(answer["result"])
        results[method] = answer["result"]
        return answer["result"], notes

    init, _ = await ok("initialize", {"protocolVersion": 1, "clientInfo": {"name": "t", "version": "1"}})
    extensions = init["agentCapabilities"]["_meta"]["zocrates"]["extensions"]
    assert extensions == sorted(m for m in METHODS if m.startswith("_zocrates/"))
    new, _ = await ok("session/new", {"cwd": "/home/u/papers", "mcpServers": []})
    sid = new["sessionId"]
    await ok("session/new", {"cwd": "", "_meta": {"zocrates": {"title": "Second"}}})

    history = research_chat() + [
        text("user", "inv-3", "Deep search, please."),
        call("inv-3", "ri-1", "adk_request_input", {"message": "Extend?", "payload": {"offer": {"rounds": 3}}}),
    ]
    await append_all(daemon.db.service, sid, history)  # written through ADK, as a turn would

    listed, _ = await ok("session/list", {"cwd": "/elsewhere"})
    assert [s["cwd"] for s in listed["sessions"]] == ["/home/u/papers", str(daemon.data_dir)]

    _, notes = await ok("session/load", {"sessionId": sid, "cwd": "/home/u/papers", "mcpServers": []})
    assert notes, "session/load replayed nothing"
    kinds = set()
    for note in notes:
        assert note.get("method") == "session/update" and "id" not in note
        validate(note["params"], params_schema(schemas, "session/update"), "session/update params")
        models.SessionUpdateParams.model_validate(note["params"])
        check_update(note["params"]["update"], "session/update")
        kinds.add(note["params"]["update"]["sessionUpdate"])
    assert kinds == set(UPDATE_SHAPES) - LIVE_ONLY_KINDS
    assert notes[-1]["params"]["update"]["sessionUpdate"] == "session_info_update"

    ui, _ = await ok("_zocrates/session/get", {"sessionId": sid})
    assert ui["pending_hitl"]["interrupt_id"] == "ri-1"
    chunk_ids = {n["params"]["update"].get("messageId") for n in notes} - {None}
    assert chunk_ids == {m["id"] for m in ui["messages"]}

    set_option, _ = await ok("session/set_config_option", {"sessionId": sid, "configId": "compaction", "value": "off"})
    assert {o["id"]: o["currentValue"] for o in set_option["configOptions"]}["compaction"] == "off"
    _, notes = await ok("session/resume", {"sessionId": sid, "cwd": "/home/u/papers"})
    assert not [n for n in notes if n.get("params", {}).get("sessionId") == sid and
                n["params"]["update"]["sessionUpdate"].endswith("_chunk")], "session/resume replays nothing"
    await ok("_zocrates/session/rename", {"sessionId": sid, "title": "  Renamed\tchat "})
    assert results["_zocrates/session/rename"]["title"] == "Renamed chat"
    turn, notes = await ok("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "One more question"}]})
    assert turn["stopReason"] == "end_turn" and notes
    for note in notes:
        validate(note["params"], params_schema(schemas, "session/update"), "session/update params")
        check_update(note["params"]["update"], "session/update")
    inv = turn["_meta"]["zocrates"]["invocationId"]

    # A checkpoint the client declines stays pending; _zocrates/chat/resume answers it.
    paused, notes = await ok("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "What is RAG? What is HyDE?"}]})
    asked = [n for n in notes if n.get("method") == "session/request_permission"]
    assert paused["stopReason"] == "cancelled" and len(asked) == 1
    for note in notes:
        if note.get("method") == "session/update":
            check_update(note["params"]["update"], "session/update")
    hitl = paused["_meta"]["zocrates"]["pendingHitl"]
    assert hitl["interrupt_id"] == "interrupt_ext_1" and asked[0]["params"]["toolCall"]["kind"] == "think"
    resumed, notes = await ok("_zocrates/chat/resume", {
        "sessionId": sid, "invocationId": hitl["invocation_id"], "interruptId": hitl["interrupt_id"],
        "response": {"action": "synthesize"},
    })
    assert resumed["stopReason"] == "end_turn" and resumed["pendingHitl"] is None
    for note in notes:
        validate(note["params"], params_schema(schemas, "session/update"), "session/update params")
        check_update(note["params"]["update"], "session/update")
    rewound, _ = await ok("_zocrates/session/rewind", {"sessionId": sid, "invocationId": inv})
    assert rewound["session"]["title"] == "Renamed chat"
    await ok("session/close", {"sessionId": sid})
    await ok("session/delete", {"sessionId": sid})
    stats, _ = await ok("_zocrates/storage/stats", {})
    assert stats["session_count"] == 1  # the "Second" session
    report, _ = await ok("_zocrates/storage/maintenance", {})
    assert report["empty_deleted"] == 0  # the remaining session is younger than 24 h
    library, _ = await ok("_zocrates/library/status", {"refresh": True})
    assert library["state"] in ("disabled", "starting", "unavailable", "ready")
    suggested, _ = await ok("_zocrates/library/suggestions", {"limit": 2})
    assert isinstance(suggested["suggestions"], list) and len(suggested["suggestions"]) <= 2
    await exercise_writes(ok, daemon)
    offline, _ = await ok("_zocrates/online/search", {"query": "hypothetical document embeddings", "limit": 3})
    assert offline["offline"] and offline["works"] == [] and len(offline["failures"]) == 3
    # The library catalogue needs a library: test_library_answers_match_the_schemas_and_models.
    assert set(results) | set(LIBRARY_CATALOGUE) == set(METHODS), "every method must be exercised here"

    readme_errors = readme_errors_section()
    for method, params in [
        ("session/delete", {"sessionId": sid}),
        ("_zocrates/session/get", {"sessionId": "no/such"}),
        ("session/list", {"cursor": "x"}),
        ("no/such/method", {}),
    ]:
        answer, _ = await client.call(method, params)
        validate(answer, ERROR_SHAPE, f"{method} error")
        err = answer["error"]
        assert f"| {err['code']} | {err['message']} |" in readme_errors, err
        assert f"`{err['data']['kind']}`" in readme_errors, err


# The `_zocrates/library/*` reads of the catalogue (library/catalog.py), exercised on a real library.
LIBRARY_CATALOGUE = {
    "_zocrates/library/search": {"query": "axolotl regeneration", "topK": 3, "collection": "Field notes"},
    "_zocrates/library/item": {"itemKey": "ANNPAPER", "fulltext": True, "fulltextOffset": 1},
    "_zocrates/library/find_quote": {"quote": "The transformer attention heads specialise in syntax", "limit": 2},
    "_zocrates/library/collections": {"library": "user"},
    "_zocrates/library/tags": {"limit": 5},
    "_zocrates/library/items": {"limit": 3, "order": "modified"},
    "_zocrates/citations/export": {"items": [{"itemKey": "ANNPAPER"}, {"itemKey": "GRPPAPR1", "library": "groups/4242"}],
                                   "format": "csl-json"},
}


@pytest.mark.anyio
async def test_library_answers_match_the_schemas_and_models(tmp_path: Path, schemas: dict[str, dict[str, Any]]) -> None:
    from zoterofixture import rich_library

    from zocratesd.config import ZocratesConfig
    from zocratesd.core.daemon import Daemon
    from zocratesd.demo.zotero_dir import write
    from zocratesd.rpc.acp import build_methods
    from zocratesd.rpc.peer import Peer

    write(tmp_path, rich_library())
    daemon = Daemon(tmp_path, ZocratesConfig(library={"local_api": False}, online=OFFLINE))
    await daemon.start()
    server_end, client_end = pipe()
    peer = Peer(server_end, build_methods(daemon), name="schema-test")
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(peer.run)
            client = _Client(client_end)
            with anyio.fail_after(30):
                while daemon.library_status()["state"] != "ready":
                    await anyio.sleep(0.05)
            for method, params in LIBRARY_CATALOGUE.items():
                validate(params, params_schema(schemas, method), f"{method} params (test input)")
                answer, _ = await client.call(method, params)
                assert "result" in answer, f"{method} failed: {answer}"
                validate(answer["result"], result_schema(schemas, method), f"{method} result")
                METHODS[method][1].model_validate(answer["result"])
                assert answer["result"], method
            item, _ = await client.call("_zocrates/library/item", {"itemKey": "ANNPAPER", "fulltext": True, "fulltextOffset": 1})
            assert [c["page"] for c in item["result"]["fulltext"]["chunks"]] == [2, 3]
            missing, _ = await client.call("_zocrates/library/item", {"itemKey": "NOPE0000"})
            assert missing["error"]["code"] == -32002 and missing["error"]["data"]["kind"] == "not_found"
            bad, _ = await client.call("_zocrates/library/search", {"query": "x", "topK": 500})
            assert bad["error"]["code"] == -32602
            await client_end.send_eof()
    finally:
        await daemon.aclose()
