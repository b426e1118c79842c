"""The HTTP routes of writes into Zotero (protocol/http.md, "Writes into Zotero"), as adapters over
the core's `Writes`: the sidebar's proposals, its consent card's answers, undo and the list; and the
plugin's write channel, the long poll through which the daemon hands consented writes to the
Zocrates plugin running inside Zotero.

Every route sits behind the shim's guard (the bearer token of daemon.json), so only the user's own
clients can propose or confirm a write; the params are the JSON-RPC methods' (rpc/models.py).
"""

from __future__ import annotations

import hmac
from typing import Final, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from zocratesd.errors import InvalidInput
from zocratesd.limits import WRITE_ID_RE
from zocratesd.rpc.models import (
    AddItemParams,
    CollectParams,
    ConfirmWriteParams,
    CreateCollectionParams,
    ListWritesParams,
    SaveNoteParams,
    TagItemsParams,
    UndoWriteParams,
    UntagItemsParams,
    WriteParams,
)
from zocratesd.shim.errors import HttpError
from zocratesd.shim.routes import json_body, shim_of, success
from zocratesd.writes import write_json

# The face a write from the sidebar is recorded as coming from.
FACE: Final = "zotero-sidebar"
PROPOSALS: Final[dict[str, type[WriteParams]]] = {
    "save_note": SaveNoteParams, "tag": TagItemsParams, "untag": UntagItemsParams,
    "add_to_collection": CollectParams, "create_collection": CreateCollectionParams, "add_item": AddItemParams,
}
# The plugin says who it is on each poll: shown in the status, checked against this daemon's version.
MAX_VERSION_CHARS: Final = 40
DEFAULT_POLL_WAIT_S: Final = 25.0
PLUGIN_TOKEN_HEADER: Final = "X-Zocrates-Plugin-Token"


P = TypeVar("P", bound=BaseModel)


def _params(model: type[P], body: dict[str, object]) -> P:
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        raise InvalidInput(f"{where}: {first['msg']}", field=where) from None


def _write_id(request: Request) -> str:
    wid = request.path_params["write_id"]
    if not WRITE_ID_RE.match(wid):
        raise InvalidInput(f"{wid[:40]!r} is not a write id (they look like w-1a2b3c4d5e6f)", field="write_id")
    return str(wid)


async def propose(request: Request) -> Response:
    model = PROPOSALS.get(request.path_params["kind"])
    if model is None:
        raise HttpError(404, "not_found", f"no such write: the kinds are {', '.join(PROPOSALS)}")
    params = _params(model, await json_body(request))
    writes = shim_of(request).daemon.writes
    record = await writes.submit(await params.operation(writes), session_id=params.session_id, face=FACE,
                                 consented=params.confirm)
    return success(write=write_json(record, writes.waiting_for))


async def confirm(request: Request) -> Response:
    params = _params(ConfirmWriteParams, {**await json_body(request, required=False), "writeId": _write_id(request)})
    writes = shim_of(request).daemon.writes
    return success(write=write_json(await writes.confirm(params.write_id, always=params.always), writes.waiting_for))


async def discard(request: Request) -> Response:
    writes = shim_of(request).daemon.writes
    return success(write=write_json(await writes.discard(_write_id(request)), writes.waiting_for))


async def get_write(request: Request) -> Response:
    writes = shim_of(request).daemon.writes
    return success(write=write_json(await writes.get(_write_id(request)), writes.waiting_for))


async def undo(request: Request) -> Response:
    params = _params(UndoWriteParams, await json_body(request, required=False))
    writes = shim_of(request).daemon.writes
    record = await writes.undo(params.write_id, session_id=params.session_id, face=FACE)
    return success(write=write_json(record, writes.waiting_for))


async def list_writes(request: Request) -> Response:
    q = request.query_params
    params = _params(ListWritesParams, {k: v for k, v in (
        ("pending", q.get("pending", "false").lower() in ("true", "1")), ("sessionId", q.get("sessionId")),
        ("limit", int(q["limit"]) if q.get("limit", "").isdigit() else None)) if v is not None})
    writes = shim_of(request).daemon.writes
    records = await writes.list(limit=params.limit, pending=params.pending, session_id=params.session_id)
    return success(writes=[write_json(r, writes.waiting_for) for r in records], waiting_for=writes.waiting_for)


# --- the plugin's write channel ---------------------------------------------------------------------


def _header(request: Request, name: str) -> str | None:
    value = request.headers.get(name)
    return value.strip()[:MAX_VERSION_CHARS] if value else None


def _check_plugin(request: Request) -> None:
    """Only the plugin, which reads daemon.json, holds the channel's own token: the web page (which
    has the shim's token only) can neither take the plugin's writes nor answer for it."""
    expected = shim_of(request).plugin_token
    given = request.headers.get(PLUGIN_TOKEN_HEADER, "")
    if not expected or not hmac.compare_digest(given.encode(), expected.encode()):
        raise HttpError(403, "forbidden", f"the write channel is the Zocrates plugin's: {PLUGIN_TOKEN_HEADER} "
                        "must carry daemon.json's plugin_token")


async def plugin_poll(request: Request) -> Response:
    _check_plugin(request)
    raw = request.query_params.get("wait", str(DEFAULT_POLL_WAIT_S))
    try:
        wait = float(raw)
    except ValueError:
        raise InvalidInput("wait is a number of seconds (0-25)", field="wait") from None
    channel = shim_of(request).daemon.plugin
    found = await channel.poll(wait, plugin_version=_header(request, "X-Zocrates-Plugin"),
                               zotero_version=_header(request, "X-Zotero-Version"))
    response = success(request=found)
    if channel.released:  # the daemon stops: the plugin's next poll goes to the next daemon
        response.headers["Connection"] = "close"
    return response


async def plugin_answer(request: Request) -> Response:
    _check_plugin(request)
    body = await json_body(request)
    if not shim_of(request).daemon.plugin.answer(str(request.path_params["call_id"]), body):
        raise HttpError(404, "not_found", "no such write request (answered already, or given up on)")
    return success()


ROUTES: Final = [
    Route("/writes", list_writes, methods=["GET"]),
    Route("/writes/undo", undo, methods=["POST"]),
    Route("/writes/{kind}", propose, methods=["POST"]),
    Route("/writes/{write_id}", get_write, methods=["GET"]),
    Route("/writes/{write_id}/confirm", confirm, methods=["POST"]),
    Route("/writes/{write_id}/discard", discard, methods=["POST"]),
    Route("/plugin/writes", plugin_poll, methods=["GET"]),
    Route("/plugin/writes/{call_id}", plugin_answer, methods=["POST"]),
]
