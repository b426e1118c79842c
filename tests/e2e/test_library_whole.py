"""Notes, annotations, group libraries, Chinese text and unprocessed full text through a real
`zocratesd serve` over the socket, from a schema-true Zotero 10 data dir (zocratesd/demo/zotero_dir.py):
each question's only answer is in one of them, and the answer cites that item. One daemon for all."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest
from rawrpc import RawConn
from zoterofixture import rich_library

from zocratesd.demo.zotero_dir import ZOTERO_10, write

pytestmark = pytest.mark.e2e

_ITEMS_RE = re.compile(r"/items/([A-Z0-9]{8})")
READY_TIMEOUT_S = 60.0


def wait_ready(c: RawConn) -> dict[str, Any]:
    deadline = time.monotonic() + READY_TIMEOUT_S
    st: dict[str, Any] = {}
    while time.monotonic() < deadline:
        st = c.result("_zocrates/library/status", {})
        if st["state"] in ("ready", "error", "unavailable"):
            return st
        time.sleep(0.05)
    raise AssertionError(f"the library index was not ready in {READY_TIMEOUT_S} s: {st}")


class Turn:
    def __init__(self, answer: str, passages: list[dict[str, Any]]):
        self.answer = answer
        self.passages = passages  # what search_library returned (tool_call_update rawOutput), in order


def _passages(value: Any) -> list[dict[str, Any]]:
    if isinstance(value, dict):
        if "item_key" in value and "link" in value:
            return [value]
        return [p for v in value.values() for p in _passages(v)]
    if isinstance(value, list):
        return [p for v in value for p in _passages(v)]
    return []


def ask(c: RawConn, sid: str, text: str, prompt_extra: list[dict[str, Any]] | None = None, **meta: Any) -> Turn:
    blocks = [{"type": "text", "text": text}, *(prompt_extra or [])]
    reply = c.call("session/prompt", {"sessionId": sid, "prompt": blocks, "_meta": {"zocrates": meta}})
    assert reply["result"]["stopReason"] == "end_turn", reply
    ups = [n["params"]["update"] for n in c.notifications if n["method"] == "session/update"]
    c.notifications.clear()
    answer = "".join(u["content"]["text"] for u in ups if u["sessionUpdate"] == "agent_message_chunk")
    found = [p for u in ups if u["sessionUpdate"] == "tool_call_update" for p in _passages(u.get("rawOutput"))]
    return Turn(answer, found)


def cited(turn: Turn) -> set[str]:
    """The item keys the answer links to (zotero://.../items/KEY), whatever its layout."""
    return set(_ITEMS_RE.findall(turn.answer))


def first(turn: Turn) -> dict[str, Any]:
    """The best passage search_library returned."""
    assert turn.passages, turn.answer
    return turn.passages[0]


def test_every_kind_of_text_is_found_and_cited(daemon_factory: Any) -> None:
    d = daemon_factory()
    write(d.data_dir, rich_library(), version=ZOTERO_10)
    d.state_dir.mkdir(parents=True, exist_ok=True)
    (d.state_dir / "zocrates_config.json").write_text(json.dumps({"library": {"local_api": False}}))
    d.start()
    with RawConn(d.socket_path) as c:
        st = wait_ready(c)
        assert st["state"] == "ready", st
        assert st["kinds"] == {"items": 10, "notes": 2, "annotations": 2, "texts": 6}
        assert [(lib["library"], lib["name"]) for lib in st["libraries"]] == [("user", "My Library"), ("groups/4242", "Lab Group")]
        assert st["summary"].startswith("library ready: 10 items, 6 full texts, 2 notes, 2 annotations in 2 libraries (from ")
        sid = c.result("session/new", {"cwd": "/tmp"})["sessionId"]

        t = ask(c, sid, "What does axolotl regeneration depend on?")  # a child note
        assert "NOTEPAR1" in cited(t)
        assert (first(t)["item_key"], first(t)["kind"], first(t)["source_key"]) == ("NOTEPAR1", "note", "NOTECHL1")
        t = ask(c, sid, "How many animals did the quokka census count?")  # a standalone note
        assert "NOTESOL1" in cited(t) and first(t)["link"] == "zotero://select/library/items/NOTESOL1"
        t = ask(c, sid, "What did I compare with bioluminescent plankton?")  # an annotation's comment
        assert "ANNPAPER" in cited(t)
        assert (first(t)["source_key"], first(t)["page_label"], first(t)["link"]) == (
            "ANNOTCM1", "xi", "zotero://open-pdf/library/items/ANNPDF01?page=2&annotation=ANNOTCM1")
        t = ask(c, sid, "How does tardigrade cryptobiosis work?")  # a group library
        assert "GRPPAPR1" in cited(t) and first(t)["library"] == "groups/4242"
        assert first(t)["link"] == "zotero://select/groups/4242/items/GRPPAPR1"
        t = ask(c, sid, "什么是机器学习中的神经网络训练方法？")  # Chinese text: found by the CJK bigram index
        assert first(t)["item_key"] == "ZHPAPER1" and first(t)["link"].startswith("zotero://open-pdf/library/items/ZHPDF001?page=")
        assert cited(t) == {"ZHPAPER1"} and "本文研究机器学习中的神经网络训练方法。" in t.answer, t.answer  # and answered from it
        t = ask(c, sid, "What are pangolin scales made of?")  # only in .zotero-ft-unprocessed
        assert "SYNCPAPR" in cited(t) and first(t)["link"] == "zotero://open-pdf/library/items/SYNCPDF1?page=1"
        t = ask(c, sid, "salt route of Lubeck")  # accents fold, in the search and in the answer
        assert first(t)["item_key"] == "LUBECK01" and cited(t) == {"LUBECK01"}, t.answer
        assert "\n- Merchants of Lübeck and the Baltic salt route. [1]\n" in t.answer, t.answer  # the abstract, no header
        t = ask(c, sid, "narwhal tusk sensing")  # feeds are never searched
        assert "FEEDITM1" not in t.answer and all(p["item_key"] != "FEEDITM1" for p in t.passages)

        # Group scope: only that library; a group item linked as zotero://select/groups/<id>/items/KEY.
        t = ask(c, sid, "tardigrade cryptobiosis", library="user")
        assert cited(t) == set() and t.passages == []
        t = ask(c, sid, "okapi stripes", library="groups/4242")
        assert cited(t) == {"LEWIS202"} and {p["library"] for p in t.passages} == {"groups/4242"}
        link = {"type": "resource_link", "uri": "zotero://select/groups/4242/items/GRPPAPR1", "name": "Surviving extremes"}
        t = ask(c, sid, "How do they survive desiccation?", [link])
        assert cited(t) == {"GRPPAPR1"} and {p["library"] for p in t.passages} == {"groups/4242"}
    d.stop()
    log = d.stderr_text()
    assert log.count("library: library ready: 10 items, 6 full texts") == 1  # logged once, not at every poll
