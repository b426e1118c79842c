"""`zocrates sessions show`: an assistant message with only a thought (the offline model's plan
before its search) shows as a thought, never as a bare "assistant:" line (issue 21)."""

from __future__ import annotations

from typing import Any

import pytest

from zocrates_client.cli import _print_session


def message(role: str, text: str, thought: str | None = None) -> dict[str, Any]:
    return {"id": "e", "role": role, "text": text, "thought": thought, "author": "coordinator", "timestamp": 1.0,
            "invocation_id": "i"}


def test_a_thought_only_message_is_shown_as_a_thought(capsys: pytest.CaptureFixture[str]) -> None:
    session: Any = {"id": "s1", "title": "HyDE", "created_at": 0.0, "updated_at": 0.0, "pending_hitl": None, "messages": [
        message("user", "What does HyDE do?"),
        message("assistant", "", "Plan: search your library for this question."),
        message("assistant", "", None),
        message("assistant", "HyDE writes a hypothetical document. [1]"),
    ]}
    _print_session(session, as_json=False)
    lines = capsys.readouterr().out.splitlines()
    assert lines[3:] == [
        "user: What does HyDE do?",
        "assistant (thought): Plan: search your library for this question.",
        "assistant: HyDE writes a hypothetical document. [1]",
    ]
    assert "assistant:" not in [line.strip() for line in lines]
