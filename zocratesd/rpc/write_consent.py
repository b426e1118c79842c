"""Writes the model proposed during a turn, put to the person in their editor before anything is
written: one `session/request_permission` per write, its preview as the tool call's content, with
ACP's three answers (allow once, allow always for this kind, reject). No answer (declined dialog,
cancelled turn, time out) leaves the write waiting for consent; any face can answer it later.

A client that asks its person itself (zocrates' own CLI and MCP face: `_meta.zocrates.asksAboutWrites`
in its client capabilities) is not asked here: it reads the session's pending writes after the turn.
"""

from __future__ import annotations

import logging
from typing import Final, Literal

import anyio

from zocrates_wire.errors import ConnectionLost, RpcError
from zocratesd.logtext import escape_for_log
from zocratesd.rpc.peer import Peer
from zocratesd.writes import WriteRecord

log = logging.getLogger(__name__)

Answer = Literal["write", "write_always", "dont_write"]
WRITE_OPTIONS: Final = [
    {"optionId": "write", "name": "Write it to Zotero", "kind": "allow_once"},
    {"optionId": "write_always", "name": "Always allow this kind of write", "kind": "allow_always"},
    {"optionId": "dont_write", "name": "Don't write", "kind": "reject_once"},
]
# A question left open this long stops holding the turn's answer; the write stays waiting.
WRITE_ANSWER_TIMEOUT_S: Final = 600.0


def write_call_id(record: WriteRecord) -> str:
    return f"zotero-write-{record.id}"


async def ask_write(peer: Peer, session_id: str, record: WriteRecord) -> Answer | None:
    """The person's answer to one proposed write, or None (no answer: it stays waiting)."""
    title = record.preview.splitlines()[0] if record.preview else record.kind
    params = {
        "sessionId": session_id,
        "toolCall": {
            "toolCallId": write_call_id(record), "title": title, "kind": "edit", "status": "pending",
            "rawInput": {"writeId": record.id, "kind": record.kind},
            "content": [{"type": "content", "content": {"type": "text", "text": record.preview}}],
        },
        "options": WRITE_OPTIONS,
        "_meta": {"zocrates": {"writeId": record.id}},
    }
    with anyio.move_on_after(WRITE_ANSWER_TIMEOUT_S):
        try:
            result = await peer.request("session/request_permission", params)
        except (RpcError, ConnectionLost) as exc:
            log.info("%s: no answer about write %s (%s); it waits for consent", peer.name, record.id, escape_for_log(exc))
            return None
        outcome = result.get("outcome") if isinstance(result, dict) else None
        chosen = outcome.get("optionId") if isinstance(outcome, dict) and outcome.get("outcome") == "selected" else None
        return chosen if chosen in ("write", "write_always", "dont_write") else None
    return None


def outcome_text(record: WriteRecord) -> str:
    """What the editor shows after the answer: the write's fate in one line."""
    head = record.preview.splitlines()[0] if record.preview else record.kind
    match record.state:
        case "applied":
            return f"\n\nWritten into Zotero ({record.id}): {head}"
        case "queued":
            return f"\n\nWill be written into Zotero when it can take it ({record.id}): {head}"
        case "discarded":
            return f"\n\nNot written: {head}"
        case "failed":
            return f"\n\nNot written ({record.error or 'Zotero refused it'}): {head}"
        case _:
            return f"\n\nWaiting for your consent ({record.id}): {head}"
