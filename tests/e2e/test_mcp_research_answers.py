"""Checkpoints and follow-ups through the official MCP SDK client (`zocratesd mcp`, the `ask` and
`resume` tools) on a Zotero library: "answer now" after guidance says which parts were answered,
searched without an answer, or not searched yet; a follow-up in the same session stays on the
previous question's topic."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from mcpworld import mcp_world
from test_checkpoint_synthesis import EIGHT, PARTS
from test_checkpoint_synthesis import LIBRARY as FERROPTOSIS
from test_conversation_followups import LIBRARY as DESMOND
from test_library import cited
from test_mcp import call, mcp, ok
from zoterofixture import Library

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def world(short_tmp: Path) -> Any:
    library = Library(items=[it.to_writer() for it in [*FERROPTOSIS, *DESMOND]])
    config = {"research": {"initial_budget": 2, "max_extensions": 3}, "http": {"enabled": False}, "library": {"local_api": False}}
    with mcp_world(short_tmp, library, config) as made:
        yield made


async def test_answer_now_and_a_follow_up_through_the_mcp_sdk(world: Any) -> None:
    async with mcp(world) as s:
        with anyio.fail_after(60):  # the daemon indexes the library in the background after it starts
            while ok(await call(s, "search_library", {"query": "DESMOND programme"}))["library_state"] != "ready":
                await anyio.sleep(0.2)

        paused = ok(await call(s, "ask", {"question": EIGHT}))
        assert paused["status"] == "checkpoint"
        assert paused["checkpoint"]["message"].startswith("I searched 2 of the 8 parts of your question,")
        sid = paused["session_id"]
        again = ok(await call(s, "resume", {"session_id": sid, "action": "extend", "guidance": "TFRC1 iron import"}))
        # Guidance naming a part's topic (TFRC1) is that part's search: still eight parts.
        assert again["status"] == "checkpoint"
        assert again["checkpoint"]["message"].startswith("I searched 4 of the 8 parts of your question,")
        done = ok(await call(s, "resume", {"session_id": sid, "action": "synthesize"}))
        assert done["status"] == "answered"
        answer = done["answer"]
        assert answer.startswith("Your question has 8 parts. I had searched 4 of 8 when you asked for the answer."), answer
        assert "- Searched, but nothing in your library answers: “What does TFRC1 import?”." in answer
        assert "- Not searched yet: " + "; ".join(f"“{p}”" for p in PARTS[4:]) in answer
        assert "Not answered" not in answer

        first = ok(await call(s, "ask", {"question": "What were the outcomes of the DESMOND programme?", "session_id": sid}))
        assert "DESMOND1" in cited(first["answer"])
        follow = ok(await call(s, "ask", {"question": "And what about lifestyle?", "session_id": sid}))
        assert follow["status"] == "answered" and follow["answer"].startswith("As a follow-up on “outcomes DESMOND programme”")
        assert cited(follow["answer"]) and set(cited(follow["answer"])) <= {"DESMOND1", "DESMOND3"}, follow["answer"]
