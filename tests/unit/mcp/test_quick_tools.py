"""The quick tools as call generators (zocratesd/mcp/tools.py), driven by hand: the calls they
yield, what they make of the answers and of the daemon's errors; and the server's dispatch with
calls.py's async driver over a fake link (bad calls refused before any daemon call, a lost
connection retried for a read, not for a write)."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest
from fences import fenced_body

from zocrates_client import ConnectionLost, RpcError
from zocratesd.mcp import tools
from zocratesd.mcp.server import ZocratesMcp
from zocratesd.mcp.tools import DaemonCall, ToolError
from zocratesd.untrusted import NOTE


def run(name: str, args: dict[str, Any]) -> Generator[DaemonCall, Any, dict[str, Any]]:
    """A quick tool's `tools/call` result (as JSON), its calls answered by whoever drives it."""
    try:
        made = yield from tools.QUICK[name](tools.arguments(name, args))
    except (ToolError, RpcError) as exc:
        return _json(tools.failure_result(name, exc))
    return _json(tools.tool_result(made))


def _json(result: Any) -> dict[str, Any]:
    return dict(result.model_dump(by_alias=True, mode="json", exclude_none=True))


def drive(run: Generator[DaemonCall, Any, dict[str, Any]], answers: dict[str, Any]) -> tuple[list[DaemonCall], dict[str, Any]]:
    """Run a tool to its end, answering each call by its method (an RpcError is thrown in)."""
    calls: list[DaemonCall] = []
    try:
        call = next(run)
        while True:
            calls.append(call)
            answer = answers[call.method]
            call = run.throw(answer) if isinstance(answer, RpcError) else run.send(answer)
    except StopIteration as stop:
        return calls, stop.value


def test_search_library_maps_its_arguments_and_returns_text_and_structured_content() -> None:
    found = {"query": "attention", "passages": [{"item_key": "ANNPAPER", "title": "Heads", "kind": "metadata"}],
             "library_state": "ready"}
    calls, result = drive(run("search_library", {"query": "attention", "top_k": 3, "collection": "Field",
                                                         "item_keys": ["ANNPAPER"]}),
                          {"_zocrates/library/search": found})
    assert calls == [DaemonCall("_zocrates/library/search", {"query": "attention", "topK": 3, "collection": "Field",
                                                             "itemKeys": ["ANNPAPER"]})]
    # The daemon's result as it came, marked untrusted; its text fenced as untrusted library text.
    assert result["structuredContent"] == {**found, "untrusted": NOTE} and not result["isError"]
    assert "Heads" in fenced_body(result["content"][0]["text"])


def test_browse_results_say_how_far_a_library_still_being_read_is() -> None:
    status = {"state": "indexing", "items_done": 200, "items_to_index": 800, "items_total": 800, "percent": 25.0,
              "summary": "indexing 200 of 800 items"}
    calls, result = drive(run("list_collections", {}), {"_zocrates/library/collections": {"collections": []},
                                                        "_zocrates/library/status": status})
    assert [c.method for c in calls] == ["_zocrates/library/collections", "_zocrates/library/status"]
    text = fenced_body(result["content"][0]["text"])
    assert text.startswith("(The Zotero library is still being read (indexing): 200 of 800 items indexed so far (25%)")
    assert result["structuredContent"]["library_status"]["items_done"] == 200
    _, ready = drive(run("list_collections", {}), {"_zocrates/library/collections": {"collections": []},
                                                   "_zocrates/library/status": {"state": "ready"}})
    assert fenced_body(ready["content"][0]["text"]) == "No collections." and "library_status" not in ready["structuredContent"]


def test_a_daemon_error_is_a_tool_error_with_its_detail() -> None:
    refused = RpcError(-32002, "Not found", {"kind": "not_found", "message": "no item ABCDEFGH"})
    calls, result = drive(run("get_item", {"item_key": "ABCDEFGH"}), {"_zocrates/library/item": refused})
    assert calls[0].params == {"itemKey": "ABCDEFGH", "fulltext": False, "fulltextOffset": 0}
    assert result == _json(tools.error_result("get_item: no item ABCDEFGH"))


@pytest.mark.parametrize(("name", "args", "says"), [
    ("no_such_tool", {}, "unknown tool 'no_such_tool'"),
    ("search_library", {"top_k": 0}, "invalid arguments for search_library"),
    ("sessions", {"action": "show"}, "needs a session_id"),
    ("sessions", {"action": "rename", "session_id": "s1"}, "needs a title"),
])
@pytest.mark.anyio
async def test_bad_calls_are_tool_errors_before_any_daemon_call(name: str, args: dict[str, Any], says: str) -> None:
    link = FakeLink([])
    result = _json(await ZocratesMcp(link).call(name, args, None))  # type: ignore[arg-type]
    assert link.asked == 0 and result["isError"] and says in result["content"][0]["text"]


def test_sessions_writes_are_not_retried_and_reads_are() -> None:
    calls, result = drive(run("sessions", {"action": "rename", "session_id": "s1", "title": "T"}),
                          {"_zocrates/session/rename": {"session_id": "s1", "title": "T"}})
    assert [c.retry for c in calls] == [False] and result["structuredContent"]["session"]["title"] == "T"
    calls, result = drive(run("sessions", {"action": "list"}), {"session/list": {"sessions": []}})
    assert [c.retry for c in calls] == [True] and result["structuredContent"] == {"action": "list", "sessions": [], "untrusted": NOTE}


def test_collection_key_by_name_path_or_key() -> None:
    cols = {"collections": [{"key": "FIELDCOL", "name": "Field", "path": "Field"},
                            {"key": "SUBCOL01", "name": "Retrieval", "path": "Field / Retrieval"}]}

    def key(wanted: str) -> str:
        gen = tools.collection_key(wanted)
        assert next(gen) == DaemonCall("_zocrates/library/collections", {})
        with pytest.raises(StopIteration) as stop:
            gen.send(cols)
        return str(stop.value.value)

    assert key("retrieval") == key("SUBCOL01") == "SUBCOL01"
    assert key("Field") == "FIELDCOL"  # the exact match, not the path that contains it
    with pytest.raises(tools.ToolError, match="no collection"):
        key("nothing")


class FakeClient:
    def __init__(self, answers: list[Any]) -> None:
        self.answers = answers
        self.closed = False

    async def call(self, method: str, params: dict[str, Any]) -> Any:
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


class FakeLink:
    def __init__(self, answers: list[Any]) -> None:
        self.answers = answers
        self.losses = 0
        self.asked = 0

    async def client(self) -> FakeClient:
        self.asked += 1
        return FakeClient(self.answers)

    def lost(self) -> None:
        self.losses += 1


@pytest.mark.anyio
async def test_the_async_driver_retries_a_lost_read_once() -> None:
    link = FakeLink([ConnectionLost("gone"), {"tags": [], "total": 0}, {"state": "ready"}])
    result = _json(await ZocratesMcp(link).call("list_tags", {}, None))  # type: ignore[arg-type]
    assert not result["isError"] and link.losses == 1 and not link.answers
    link = FakeLink([ConnectionLost("gone"), ConnectionLost("gone again")])
    result = _json(await ZocratesMcp(link).call("list_tags", {}, None))  # type: ignore[arg-type]
    assert result["isError"] and "connection to zocratesd was lost" in result["content"][0]["text"]


@pytest.mark.anyio
async def test_the_async_driver_does_not_retry_a_lost_write() -> None:
    link = FakeLink([ConnectionLost("gone"), {"session_id": "s1"}])
    result = _json(await ZocratesMcp(link).call("sessions", {"action": "delete", "session_id": "s1"}, None))  # type: ignore[arg-type]
    assert result["isError"] and link.answers == [{"session_id": "s1"}]
