"""Builders for real ADK events, so tests write histories through ADK itself."""

from __future__ import annotations

from typing import Any

from google.adk.events import Event
from google.genai import types

from zocratesd.store import APP_NAME, USER_ID


def text(author: str, inv: str, body: str, *, thought: str | None = None, **kw: Any) -> Event:
    parts = []
    if thought:
        parts.append(types.Part(text=thought, thought=True))
    parts.append(types.Part(text=body))
    role = "user" if author == "user" else "model"
    return Event(author=author, invocation_id=inv, content=types.Content(role=role, parts=parts), **kw)


def call(inv: str, call_id: str, name: str, args: dict[str, Any], *, with_text: str | None = None, **kw: Any) -> Event:
    parts = [types.Part(text=with_text)] if with_text else []
    parts.append(types.Part(function_call=types.FunctionCall(id=call_id, name=name, args=args)))
    return Event(author="coordinator", invocation_id=inv, content=types.Content(role="model", parts=parts), **kw)


def answer(inv: str, call_id: str, name: str, response: dict[str, Any], author: str = "coordinator", **kw: Any) -> Event:
    part = types.Part(function_response=types.FunctionResponse(id=call_id, name=name, response=response))
    return Event(author=author, invocation_id=inv, content=types.Content(role="user", parts=[part]), **kw)


def research_chat() -> list[Event]:
    """A two-turn chat with a thought and a search_library round trip."""
    return [
        text("user", "inv-1", "What is retrieval-augmented generation?"),
        call("inv-1", "fc-1", "search_library", {"query": "RAG"}, with_text="Let me search your library."),
        answer("inv-1", "fc-1", "search_library", {"result": "3 passages"}),
        text("coordinator", "inv-1", "RAG grounds answers in retrieved passages [1].", thought="Define it first."),
        text("user", "inv-2", "And HyDE?"),
        text("coordinator", "inv-2", "HyDE embeds a hypothetical answer [2]."),
    ]


async def append_all(svc: Any, session_id: str, events: list[Event]) -> None:
    session = await svc.get_session(app_name=APP_NAME, user_id=USER_ID, session_id=session_id)
    for ev in events:
        await svc.append_event(session, ev)


async def append_to_db(db_path: Any, session_id: str, events: list[Event]) -> None:
    """Append through a separate ADK service on the same file (as a second process would)."""
    from google.adk.sessions import DatabaseSessionService

    svc = DatabaseSessionService(db_url=f"sqlite+aiosqlite:///{db_path}", connect_args={"timeout": 30})
    try:
        await append_all(svc, session_id, events)
    finally:
        await svc.close()
