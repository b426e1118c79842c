"""The REST surface of spec section 6 (plus /chat, /register, /health, /settings, /library/status,
and the web app's files under /ui/) as adapters over the core.

Starlette's own shape: one endpoint function per route, the `ROUTES` list, and what the endpoints
share (the core, the turns' task group, the token and its one-time codes) in `request.app.state`
as one typed `Shim` (`build_app` puts it there). Success bodies are `{"status": "success", ...}`;
errors are shaped by `errors.py`. Routes take the already-bounded body from `guard.py`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.abc
import msgspec
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from zocratesd import deferred
from zocratesd.core.context import PromptContext
from zocratesd.core.daemon import Daemon, TurnResult, check_resume_response, check_session_id
from zocratesd.errors import InvalidInput, ZocratesError
from zocratesd.locations import PROTOCOL_VERSION, RuntimeFileError
from zocratesd.shim.codes import OneTimeCodes
from zocratesd.shim.errors import HttpError, JSONResponse, core_error_response, error_response
from zocratesd.shim.openpage import OpenPages
from zocratesd.shim.proof import challenge_problem, health_proof
from zocratesd.shim.turns import start_turn
from zocratesd.shim.webapp import WebApp
from zocratesd.updates import Json
from zocratesd.weblink import web_app_url

# After a code's lifetime, its page is looked at again this much later (the clock's own slack).
PAGE_SWEEP_SLACK_S = 0.5
SSE_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
CAPABILITIES: Json = {
    "sessions": True,
    "chat": True,
    "chat_resume": True,
    "rewind": True,
    "storage_stats": True,
    "maintenance": True,
    "rename": True,
    "cancel": True,
    "library_status": True,
    "library_suggestions": True,
    "doctor": True,
    "find_quote": True,
    "writes": True,
    "settings": True,
    "session_settings": True,
    "web_app": True,
    "one_time_codes": True,
    "sse_types": ["parts", "progress", "request_input", "done", "error"],
}


def success(**fields: Any) -> JSONResponse:
    return JSONResponse({"status": "success", **fields})


async def json_body(request: Request, *, required: bool = True) -> Json:
    raw = await request.body()
    if not raw.strip():
        if required:
            raise HttpError(400, "bad_request", "this route needs a JSON object body")
        return {}
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: nesting deeper than the parser goes
        raise HttpError(400, "bad_request", "the body is not valid JSON") from None
    if not isinstance(body, dict):
        raise HttpError(400, "bad_request", "the body must be a JSON object")
    return body


def field(body: Json, name: str, kind: type, *, required: bool = True) -> Any:
    value = body.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise InvalidInput(f"{name!r} must be a {kind.__name__}", field=name)
    return value


def row_json(row: Any) -> Json:
    return {"id": row.id, "title": row.title, "created_at": row.created_at, "updated_at": row.updated_at}


@dataclass
class Shim:
    """What the routes of one daemon share. `turns()` is the task group turns run in (they outlive
    requests); `opened`/`closed` count a turn's stream as an open connection; `codes` are exchanged
    for `token` (shim/codes.py; without a token no code is ever minted); `pages` hold the files
    that open the web app with a code (shim/openpage.py)."""

    daemon: Daemon
    turns: Callable[[], anyio.abc.TaskGroup]
    opened: Callable[[], None]
    closed: Callable[[], None]
    web: WebApp
    token: str
    codes: OneTimeCodes
    pages: OpenPages
    plugin_token: str = ""  # the write channel's (shim/writes.py); "" closes the channel


def shim_of(request: Request) -> Shim:
    shim = request.app.state.shim
    assert isinstance(shim, Shim)
    return shim


async def health(request: Request) -> Response:
    # Public and cheap; with ?challenge=, proof that this daemon holds daemon.json's token (proof.py).
    if "challenge" not in request.query_params:
        return success()
    problem = challenge_problem(request.query_params.getlist("challenge"))
    if problem is not None:
        raise HttpError(400, "bad_request", problem)
    token = shim_of(request).token
    if not token:
        raise HttpError(400, "bad_request", "this daemon has no token to prove")
    return success(proof=health_proof(token, request.query_params["challenge"]))


async def register(request: Request) -> Response:
    await json_body(request, required=False)  # the plugin may say who it is; nothing is kept yet
    daemon = shim_of(request).daemon
    return success(
        protocol_version=PROTOCOL_VERSION,
        version=daemon.version,
        model=daemon.session_config.defaults.model,  # what a new session runs on (the sidebar's preferences show it)
        capabilities=CAPABILITIES,
        startup_maintenance=daemon.startup_maintenance,
    )


async def list_sessions(request: Request) -> Response:
    rows = sorted(await shim_of(request).daemon.list_sessions(), key=lambda r: (r.created_at, r.id))
    return success(sessions=[row_json(r) for r in rows])


async def create_session(request: Request) -> Response:
    body = await json_body(request, required=False)
    title = field(body, "title", str, required=False)
    daemon = shim_of(request).daemon
    row = await daemon.create_session(title=title)
    return success(session=await daemon.get_session(row.id))


async def get_session(request: Request) -> Response:
    return success(session=await shim_of(request).daemon.get_session(request.path_params["session_id"]))


async def rename_session(request: Request) -> Response:
    body = await json_body(request)
    session_id = request.path_params["session_id"]
    daemon = shim_of(request).daemon
    await daemon.rename_session(session_id, field(body, "title", str))
    return success(session=await daemon.get_session(session_id))


async def delete_session(request: Request) -> Response:
    await shim_of(request).daemon.delete_session(request.path_params["session_id"])
    return success()


async def cancel(request: Request) -> Response:
    await json_body(request, required=False)
    return success(cancelled=await shim_of(request).daemon.cancel_turn(request.path_params["session_id"]))


async def rewind(request: Request) -> Response:
    body = await json_body(request)
    result = await shim_of(request).daemon.rewind(request.path_params["session_id"], field(body, "invocation_id", str))
    return success(**result)


async def bibliography(request: Request) -> Response:
    """The bibliography of what a session (or one answer of it) cites: `_zocrates/citations/export`."""
    q = request.query_params
    return success(**await shim_of(request).daemon.export_citations(
        session_id=request.path_params["session_id"], invocation_id=q.get("invocation_id"),
        format=q.get("format", "text"), style=q.get("style"),
    ))


async def session_settings(request: Request) -> Response:
    """A session's settings (scope, model, research budget, compaction, citation style) with their
    choices: `session/set_config_option`'s options, for the sidebar."""
    options = await shim_of(request).daemon.config_options(request.path_params["session_id"])
    return success(options=msgspec.to_builtins(options))


async def patch_session_settings(request: Request) -> Response:
    """Change settings of a session (`{"citation_style": "pandoc"}`), each as ACP's
    `session/set_config_option` does, in the body's order; its options after."""
    body = await json_body(request)
    if not body:
        raise InvalidInput("name a setting to change, e.g. {\"citation_style\": \"pandoc\"}")
    daemon, session_id = shim_of(request).daemon, request.path_params["session_id"]
    for config_id, value in body.items():
        await daemon.set_config_option(session_id, config_id, value)
    return success(options=msgspec.to_builtins(await daemon.config_options(session_id)))


async def storage_stats(request: Request) -> Response:
    return success(**await shim_of(request).daemon.storage_stats())


async def maintenance(request: Request) -> Response:
    return success(**await shim_of(request).daemon.run_maintenance())


async def library_status(request: Request) -> Response:
    refresh = request.query_params.get("refresh", "false").lower()
    if refresh not in ("true", "false", "1", "0"):
        raise InvalidInput("refresh is true or false", field="refresh")
    return success(library=shim_of(request).daemon.library_status(refresh=refresh in ("true", "1")))


async def doctor_report(request: Request) -> Response:
    # The checks block (files, a socket, HTTP to this very shim): a worker thread, while the loop
    # answers them. Imported on first use: no reply of the start-up path needs it.
    doctor = deferred.load("zocratesd.install.doctor")
    daemon = shim_of(request).daemon
    ctx = doctor.daemon_context(daemon.data_dir)
    status = daemon.library_status(refresh=False)  # this daemon's own, read here on its loop
    report = await anyio.to_thread.run_sync(doctor.run, ctx, lambda _socket, _timeout: status)
    return success(report=msgspec.to_builtins(report))


async def library_suggestions(request: Request) -> Response:
    raw = request.query_params.get("limit")
    if raw is not None and not (raw.isascii() and raw.isdigit() and len(raw) <= 3):
        raise InvalidInput("limit is a whole number", field="limit")
    return success(**await shim_of(request).daemon.library_suggestions(None if raw is None else int(raw)))


async def find_quote(request: Request) -> Response:
    body = await json_body(request)
    quote, library, limit = body.get("quote"), body.get("library"), body.get("limit")
    if not isinstance(quote, str):
        raise InvalidInput("quote is the quoted text", field="quote")
    if library is not None and not isinstance(library, str):
        raise InvalidInput('library is "user" or "groups/<id>"', field="library")
    return success(**await shim_of(request).daemon.catalogue.find_quote(quote, library=library, limit=limit))


async def get_settings(request: Request) -> Response:
    return success(**shim_of(request).daemon.settings.view())


async def patch_settings(request: Request) -> Response:
    return success(**await shim_of(request).daemon.settings.update(await json_body(request)))


async def mint_code(request: Request) -> Response:
    body = await json_body(request, required=False)
    want_page = field(body, "page_file", bool, required=False)
    shim = shim_of(request)
    if not shim.token:
        raise HttpError(404, "not_found", "this shim hands out no codes")
    code = shim.codes.mint()
    if not want_page:
        return success(code=code, expires_in_s=shim.codes.ttl_s)
    try:
        page = shim.pages.write(code, web_app_url(request.scope["server"][1], code))
    except (OSError, RuntimeFileError) as exc:
        shim.codes.redeem(code)  # worthless without its page
        raise HttpError(500, "page_file", f"cannot write the page that opens the web app: {exc}") from None
    # The page goes when its code expires, even if nothing else asks for codes meanwhile.
    asyncio.get_running_loop().call_later(shim.codes.ttl_s + PAGE_SWEEP_SLACK_S, shim.codes.outstanding)
    return success(code=code, expires_in_s=shim.codes.ttl_s, page_file=str(page))


async def exchange_code(request: Request) -> Response:
    # No bearer token here (the guard lets it through): the code is the credential.
    given = (await json_body(request)).get("code")
    shim = shim_of(request)
    if not shim.token or not isinstance(given, str) or not shim.codes.redeem(given):
        raise HttpError(403, "code_refused", "this link was used already or has expired (a link of `zocrates open` "
                        "opens the page once, within two minutes); run `zocrates open` again for a new one")
    return JSONResponse({"status": "success", "token": shim.token}, headers={"Cache-Control": "no-store"})


async def to_webapp(request: Request) -> Response:
    return RedirectResponse("/ui/", status_code=308)


async def webapp_file(request: Request) -> Response:
    return await shim_of(request).web.serve(request, request.path_params["path"])


async def chat(request: Request) -> Response:
    body = await json_body(request)
    session_id = check_session_id(body.get("session_id"))
    text = field(body, "prompt", str)
    context = PromptContext.build(
        mode=body.get("mode"), items=body.get("active_items"), collection=body.get("collection"),
        snippets=body.get("snippets"), library=body.get("library"), online=body.get("online"),
    )
    daemon = shim_of(request).daemon
    return await sse_turn(request, session_id, lambda started: daemon.prompt(session_id, text, context, started=started))


async def chat_resume(request: Request) -> Response:
    body = await json_body(request)
    session_id = check_session_id(body.get("session_id"))
    invocation_id = field(body, "invocation_id", str)
    interrupt_id = field(body, "interrupt_id", str)
    answer = check_resume_response(body.get("response"))
    daemon = shim_of(request).daemon
    return await sse_turn(
        request, session_id, lambda started: daemon.resume(session_id, invocation_id, interrupt_id, answer, started=started)
    )


async def sse_turn(request: Request, session_id: str, turn: Callable[[Callable[[], None]], Awaitable[TurnResult]]) -> Response:
    """The turn as Server-Sent Events (shim/turns.py), or the plain error that refused it."""
    shim = shim_of(request)
    stream = await start_turn(shim.daemon, shim.turns(), session_id, turn, opened=shim.opened, closed=shim.closed)
    if stream.refused is not None:
        stream.close()
        return core_error_response(stream.refused)
    return StreamingResponse(stream.events(), media_type="text/event-stream", headers=SSE_HEADERS)


async def on_core_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ZocratesError)
    return core_error_response(exc)


async def on_http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HttpError)
    return error_response(exc.status, exc.code, exc.message, headers=exc.headers)


async def on_starlette_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    return error_response(exc.status_code, code, str(exc.detail), headers=exc.headers)


ROUTES = [
    Route("/health", health, methods=["GET"]),
    Route("/", to_webapp, methods=["GET"]),
    Route("/ui", to_webapp, methods=["GET"]),
    Route("/ui/{path:path}", webapp_file, methods=["GET"]),
    Route("/register", register, methods=["POST"]),
    Route("/auth/code", mint_code, methods=["POST"]),
    Route("/auth/exchange", exchange_code, methods=["POST"]),
    Route("/sessions", list_sessions, methods=["GET"]),
    Route("/sessions", create_session, methods=["POST"]),
    Route("/sessions/storage_stats", storage_stats, methods=["GET"]),
    Route("/sessions/maintenance", maintenance, methods=["POST"]),
    Route("/sessions/{session_id}", get_session, methods=["GET"]),
    Route("/sessions/{session_id}", rename_session, methods=["PATCH"]),
    Route("/sessions/{session_id}", delete_session, methods=["DELETE"]),
    Route("/sessions/{session_id}/cancel", cancel, methods=["POST"]),
    Route("/sessions/{session_id}/rewind", rewind, methods=["POST"]),
    Route("/sessions/{session_id}/bibliography", bibliography, methods=["GET"]),
    Route("/sessions/{session_id}/settings", session_settings, methods=["GET"]),
    Route("/sessions/{session_id}/settings", patch_session_settings, methods=["PATCH"]),
    Route("/chat", chat, methods=["POST"]),
    Route("/chat/resume", chat_resume, methods=["POST"]),
    Route("/library/status", library_status, methods=["GET"]),
    Route("/library/suggestions", library_suggestions, methods=["GET"]),
    Route("/doctor", doctor_report, methods=["GET"]),
    Route("/library/find_quote", find_quote, methods=["POST"]),
    Route("/settings", get_settings, methods=["GET"]),
    Route("/settings", patch_settings, methods=["PATCH"]),
]
EXCEPTION_HANDLERS: dict[Any, Callable[[Request, Exception], Awaitable[Response]]] = {
    ZocratesError: on_core_error, HttpError: on_http_error, HTTPException: on_starlette_error,
}


def build_app(
    daemon: Daemon,
    turns: Callable[[], anyio.abc.TaskGroup],
    *,
    opened: Callable[[], None],
    closed: Callable[[], None],
    web: WebApp | None = None,
    token: str = "",
    codes: OneTimeCodes | None = None,
    pages: OpenPages | None = None,
    more_routes: Sequence[BaseRoute] = (),
    plugin_token: str = "",
) -> Starlette:
    """The routes of one daemon (and `more_routes`, other modules' routes over the same `Shim`),
    sharing a `Shim` of these (its doc says what each is)."""
    codes = codes or OneTimeCodes()
    pages = pages or OpenPages(codes.ttl_s)
    codes.on_drop = pages.drop
    app = Starlette(routes=[*ROUTES, *more_routes], exception_handlers=EXCEPTION_HANDLERS)
    app.state.shim = Shim(daemon, turns, opened, closed, web or WebApp([]), token, codes, pages, plugin_token)
    return app
