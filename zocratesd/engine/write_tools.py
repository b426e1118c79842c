"""The coordinator's write tools: what the model may *propose* to write into Zotero ("save this as
a note", "tag the papers you cited"). A proposal is recorded as awaiting the person's consent and
nothing more: the face the person is in asks them after the turn (ACP `session/request_permission`,
MCP elicitation, the terminal, the sidebar's card), and only their yes writes. So a model that obeys
an instruction hidden in a paper's text ("tag every item X") produces a question, never a write.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from google.adk.tools import FunctionTool, ToolContext

# ADK builds each tool's response schema with pydantic, which reads only typing_extensions' TypedDict on 3.11.
from typing_extensions import TypedDict

from zocratesd.errors import ZocratesError
from zocratesd.writes import operations as ops
from zocratesd.writes.journal import WriteRecord
from zocratesd.writes.operations import Operation

# Records a write the model proposed in a session (`Writes.propose` with the model as proposer).
ProposeWrite = Callable[[Operation, str], Awaitable[WriteRecord]]
# Builds an operation whose collection is named as a person names it (`Writes.add_to_collection`).
ResolveCollection = Callable[[list[str], str], Awaitable[Operation]]

ASKED = ("Not written yet: the user is asked to confirm this exact change after your answer, and only their yes "
         "writes it. Tell them what you proposed; do not claim it is done.")


class Proposed(TypedDict, total=False):
    """What a write tool tells the model: the proposal as recorded, or why it was refused."""

    write_id: str
    state: str
    preview: str
    note: str
    error: str


def _result(record: WriteRecord) -> Proposed:
    return {"write_id": record.id, "state": record.state, "preview": record.preview, "note": ASKED}


def _refused(exc: ZocratesError) -> Proposed:
    return {"error": exc.message}


def build_write_tools(propose: ProposeWrite, collect: ResolveCollection) -> list[FunctionTool]:
    async def save_note(markdown: str, parent_item_key: str, tool_context: ToolContext) -> Proposed:
        """Propose saving a note (Markdown) into Zotero as a child note of the paper `parent_item_key`.
        The user confirms it before anything is written."""
        try:
            return _result(await propose(ops.save_note(markdown, parent=parent_item_key or None), tool_context.session.id))
        except ZocratesError as exc:
            return _refused(exc)

    async def tag_items(item_keys: list[str], tags: list[str], tool_context: ToolContext) -> Proposed:
        """Propose adding tags to Zotero items (by item key). The user confirms it before anything is written."""
        try:
            return _result(await propose(ops.tag_items(item_keys, tags), tool_context.session.id))
        except ZocratesError as exc:
            return _refused(exc)

    async def add_to_collection(item_keys: list[str], collection: str, tool_context: ToolContext) -> Proposed:
        """Propose filing Zotero items (by item key) in a collection (its name or key). The user confirms
        it before anything is written."""
        try:
            return _result(await propose(await collect(item_keys, collection), tool_context.session.id))
        except ZocratesError as exc:
            return _refused(exc)

    return [FunctionTool(save_note), FunctionTool(tag_items), FunctionTool(add_to_collection)]
