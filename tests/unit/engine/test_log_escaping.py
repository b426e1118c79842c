"""What a client sends back to a checkpoint (an error reply, a bad answer) is logged escaped and cut."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from zocratesd.config import ZocratesConfig
from zocratesd.core.daemon import Daemon
from zocratesd.library.retrieval import InMemoryRetriever, Passage
from zocratesd.logtext import MAX_LOG_TEXT_CHARS

pytestmark = pytest.mark.anyio

PASSAGES = [
    Passage("LEWIS202", "Retrieval-Augmented Generation", "RAG combines parametric and non-parametric memory.", ("Patrick Lewis",), 2020),
    Passage("GAOHYDE1", "HyDE", "HyDE writes a hypothetical document and embeds it to retrieve real ones.", ("Luyu Gao",), 2022),
]
THREE = "What does RAG combine? How does HyDE retrieve? Which encoders does DPR use?"
FORGED = "2099-01-01 00:00:00,000 ERROR zocratesd: forged by a client"


async def test_a_clients_reply_to_a_checkpoint_is_logged_escaped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    d = Daemon(tmp_path, ZocratesConfig(research={"initial_budget": 1}), retriever=InMemoryRetriever(list(PASSAGES)))
    await d.start()
    try:
        sid = (await d.create_session()).id

        async def error_reply(checkpoint: dict[str, Any]) -> dict[str, Any]:
            raise RuntimeError(f"client says no\n{FORGED}\x1b[2J")

        async def bad_answer(checkpoint: dict[str, Any]) -> dict[str, Any]:
            return {"action": f"launch\n{FORGED}\x1b[2J", "padding": "p" * 100_000}

        for ask in (error_reply, bad_answer):
            result = await d.prompt(sid, THREE, ask=ask)
            assert result.pending_hitl is not None
    finally:
        await d.aclose()
    lines = caplog.text.splitlines()
    assert any("client says no\\n2099" in line for line in lines)  # logged, escaped
    assert not any(line.startswith(FORGED[:30]) for line in lines)
    assert "\x1b" not in caplog.text
    assert all(len(line) < 3 * MAX_LOG_TEXT_CHARS for line in lines)  # the 100 kB answer was cut
