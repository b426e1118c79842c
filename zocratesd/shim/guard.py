"""What every request passes before any route: the shim's security (DESIGN.md, Security).

A browser page can reach 127.0.0.1, so loopback alone protects nothing (research/protocol.md
section 5: Ollama, Jupyter and the MCP SDKs were all open to DNS rebinding). In order:
1. `Host` must be exactly `127.0.0.1:<port>` or `localhost:<port>`: a rebound name
   (`attacker.example:<port>`) or a missing Host is refused with 403;
2. a request carrying an `Origin` other than the shim's own (`http://127.0.0.1:<port>`,
   `http://localhost:<port>`: the web app it serves, whose same-origin POSTs carry one) and not in
   `http.allowed_origins` (empty by default) is refused with 403, and so is every OPTIONS (no CORS
   preflight is ever answered; no Access-Control-* header is ever sent), so no page of another
   origin can read an answer;
3. every route needs `Authorization: Bearer <token>` (the token is in daemon.json, 0600), compared
   in constant time, 401 otherwise; except `GET /health` and the web app's static files
   (`GET`/`HEAD` of `/`, `/ui`, `/ui/...`), which hold no data, and `POST /auth/exchange`, whose
   one-time code is its credential (shim/codes.py; it still passes every other rule here): the
   page gets a code (or, from the Zotero plugin, the token) in its URL fragment, which no request
   carries;
4. a POST with a body must say `Content-Type: application/json` (415): a cross-site form cannot;
5. the body is read here, at most `MAX_BODY_BYTES` (413 beyond; a larger Content-Length is refused
   before reading) and within `body_timeout_s` (408: a client with the token that trickles its body
   would otherwise hold a connection forever), and replayed to the route. A request without the
   token (the routes of rule 3) gets far less: `PUBLIC_MAX_BODY_BYTES` within
   `PUBLIC_BODY_TIMEOUT_S`, since another local user can send it (at 16 MiB each, twenty such
   bodies took 350 MiB); and all the bodies held at once, on every connection, stay within
   `BODY_BUDGET_BYTES` (503 beyond, before reading when Content-Length says so).
A request with the right token marks its connection as the owner's (`trusted`): the connection
table (protocol.py) closes connections that never showed the token first when it runs out of room.
Every response, the refusals above included, says `X-Content-Type-Options: nosniff` and
`Cross-Origin-Resource-Policy: same-origin` (`SECURITY_HEADERS`): without them a page of another
site learns that the daemon is there from an opaque no-cors response (a browser now fails that
fetch instead), and could sniff a JSON body as script or style. One exception, for a configured
trust only: when `http.allowed_origins` names a page on the loopback host (`http://127.0.0.1:N`,
as the plugin's test stand-in for Zotero's window), `GET /health` says `same-site` instead, so
that page can tell whether the daemon runs; CORP cannot name one origin, and a same-site page is
one on this host, never another site. Zotero's own window needs no exception: Gecko does not
apply CORP to a load of the system principal.
How long a request head may take, and how many connections may be open, is protocol.py's business.
Each request also counts as an open connection of the daemon (idle exit, drain at shutdown).
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Callable
from dataclasses import dataclass

import anyio
from starlette.datastructures import MutableHeaders
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from zocratesd.shim.errors import error_response

# 16 MiB, the same cap as one JSON-RPC frame (config rpc.max_frame_bytes): a prompt with many
# snippets fits, and a runaway client cannot make the daemon buffer without bound.
MAX_BODY_BYTES = 16 * 1024 * 1024
# The whole body must arrive within this of its head (config http.body_timeout_s): 16 MiB takes a
# fraction of a second on loopback, so only a stalled or hostile client ever meets it.
BODY_TIMEOUT_S = 30.0
# A request without the token carries at most a one-time code (`{"code": "<43 characters>"}`, ~60
# bytes), or nothing: a body beyond this is refused from its Content-Length, before any is read.
PUBLIC_MAX_BODY_BYTES = 512
# ... and arrives at once; a trickle is another user holding a connection and its buffer.
PUBLIC_BODY_TIMEOUT_S = 5.0
# What the guard holds of request bodies at once, all connections together: four of the largest
# bodies the owner may send. Bodies without the token add at most cap x PUBLIC_MAX_BODY_BYTES.
BODY_BUDGET_BYTES = 4 * MAX_BODY_BYTES
PUBLIC_PATHS = frozenset({"/health"})
# A one-time code instead of the token (shim/codes.py): POST only.
CODE_PATHS = frozenset({"/auth/exchange"})
# Sent with every response (module doc); a route's own value of either is kept.
SECURITY_HEADERS = (("X-Content-Type-Options", "nosniff"), ("Cross-Origin-Resource-Policy", "same-origin"))
# An allowed origin on the loopback host: its pages may probe /health (module doc).
_LOOPBACK_ORIGIN = re.compile(r"http://(127\.0\.0\.1|localhost):\d{1,5}")
# The web app's files (routes.py serves them): public for GET and HEAD only.
STATIC_PATHS = frozenset({"/", "/ui"})
STATIC_PREFIX = "/ui/"


def is_public(method: str, path: str) -> bool:
    if path in PUBLIC_PATHS or method == "POST" and path in CODE_PATHS:
        return True
    return method in ("GET", "HEAD") and (path in STATIC_PATHS or path.startswith(STATIC_PREFIX))


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            decoded: str = value.decode("latin-1")
            return decoded
    return None


@dataclass(frozen=True)
class BodyLimits:
    """How much body one request may send, and how fast."""

    max_bytes: int
    timeout_s: float


class Guard:
    def __init__(
        self,
        app: ASGIApp,
        *,
        port: Callable[[], int],
        token: str,
        allowed_origins: list[str],
        opened: Callable[[], None] = lambda: None,
        closed: Callable[[], None] = lambda: None,
        trusted: Callable[[Scope], None] = lambda scope: None,
        max_body_bytes: int = MAX_BODY_BYTES,
        body_timeout_s: float = BODY_TIMEOUT_S,
        public_body: BodyLimits = BodyLimits(PUBLIC_MAX_BODY_BYTES, PUBLIC_BODY_TIMEOUT_S),
        body_budget_bytes: int = BODY_BUDGET_BYTES,
    ):
        self.app = app
        self.port = port
        self.token = token.encode()
        self.allowed_origins = frozenset(allowed_origins)
        self.health_corp = "same-site" if any(_LOOPBACK_ORIGIN.fullmatch(o) for o in allowed_origins) else "same-origin"
        self.opened, self.closed, self.trusted = opened, closed, trusted
        self.owner_body = BodyLimits(max_body_bytes, body_timeout_s)
        self.public_body = BodyLimits(min(public_body.max_bytes, max_body_bytes), min(public_body.timeout_s, body_timeout_s))
        self.body_budget_bytes = body_budget_bytes
        self.buffered = 0  # bytes of bodies held now, all requests together

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # websockets are not served; lifespan is off
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008})
            return
        self.opened()
        started = False
        held = 0  # of `buffered`, this request's
        corp = self.health_corp if scope["path"] == "/health" else "same-origin"

        async def send_secured(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS:
                    headers.setdefault(name, corp if name == "Cross-Origin-Resource-Policy" else value)
            await send(message)

        def hold(size: int) -> bool:
            """Count `size` more bytes of this request's body in; False: over the budget."""
            nonlocal held
            if self.buffered + size > self.body_budget_bytes:
                return False
            self.buffered += size
            held += size
            return True

        try:
            owner = self._has_token(scope)
            refusal = self._refusal(scope, owner)
            if refusal is not None:
                await refusal(scope, receive, send_secured)
                return
            if owner:
                self.trusted(scope)
            limits = self.owner_body if owner else self.public_body
            body = await self._read_body(scope, receive, send_secured, limits, hold)
            if body is None:
                return
            await self.app(scope, _replay(body, receive), send_secured)
        except Exception:
            # uvicorn's own 500 would lack the headers (Starlette answers a route's exception itself).
            if not started:
                await error_response(500, "internal", "internal error")(scope, receive, send_secured)
            raise
        finally:
            self.buffered -= held
            self.closed()

    def _has_token(self, scope: Scope) -> bool:
        auth = _header(scope, b"authorization") or ""
        scheme, _, given = auth.partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), self.token)

    def _refusal(self, scope: Scope, owner: bool) -> Response | None:
        port = self.port()
        host = _header(scope, b"host")
        if host not in (f"127.0.0.1:{port}", f"localhost:{port}"):
            return error_response(403, "forbidden", "the Host header must be 127.0.0.1:<port> or localhost:<port>")
        origin = _header(scope, b"origin")
        own = (f"http://127.0.0.1:{port}", f"http://localhost:{port}")
        if origin is not None and origin not in own and origin not in self.allowed_origins:
            return error_response(403, "forbidden", f"requests from origin {origin[:200]!r} are refused")
        if scope["method"] == "OPTIONS":
            return error_response(403, "forbidden", "cross-origin requests are not served")
        if not owner and not is_public(scope["method"], scope["path"]):
            return error_response(
                401, "unauthorized", "missing or wrong bearer token (see daemon.json)",
                headers={"WWW-Authenticate": 'Bearer realm="zocratesd"'},
            )
        return None

    async def _read_body(
        self, scope: Scope, receive: Receive, send: Send, limits: BodyLimits, hold: Callable[[int], bool]
    ) -> bytes | None:
        """The whole body, or None once a refusal has been sent."""
        length = _header(scope, b"content-length")
        chunked = _header(scope, b"transfer-encoding") is not None
        if length is not None:
            try:
                declared = int(length)
            except ValueError:
                await error_response(400, "bad_request", "bad Content-Length")(scope, receive, send)
                return None
            if declared > limits.max_bytes:
                await self._too_large(scope, receive, send, limits)
                return None
            if not hold(declared):
                await self._busy(scope, receive, send)
                return None
        else:
            declared = 0
        if scope["method"] in ("POST", "PUT", "PATCH") and (declared > 0 or chunked):
            ctype = (_header(scope, b"content-type") or "").split(";", 1)[0].strip().lower()
            if ctype != "application/json":
                await error_response(415, "unsupported_media", "a request body must be application/json")(scope, receive, send)
                return None
        chunks: list[bytes] = []
        size = 0
        reserved = declared  # of the budget, held for this body so far
        over = busy = False
        with anyio.move_on_after(limits.timeout_s):
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return None
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > limits.max_bytes:
                    over = True
                    break
                if size > reserved:
                    if not hold(size - reserved):
                        busy = True
                        break
                    reserved = size
                chunks.append(chunk)
                if not message.get("more_body", False):
                    return b"".join(chunks)
        # Sent outside the deadline's scope, so that the deadline cannot cut a refusal in half.
        if over:
            await self._too_large(scope, receive, send, limits)
        elif busy:
            await self._busy(scope, receive, send)
        else:
            await error_response(
                408, "request_timeout", f"the request body did not arrive within {limits.timeout_s:g} s",
                headers={"Connection": "close"},
            )(scope, receive, send)
        return None

    async def _too_large(self, scope: Scope, receive: Receive, send: Send, limits: BodyLimits) -> None:
        what = "a request body" if limits is self.owner_body else "a request body without the token"
        await error_response(
            413, "body_too_large", f"{what} has at most {limits.max_bytes} bytes",
            headers={"Connection": "close"},
        )(scope, receive, send)

    async def _busy(self, scope: Scope, receive: Receive, send: Send) -> None:
        await error_response(
            503, "busy", f"the daemon holds {self.body_budget_bytes} bytes of request bodies already; try again",
            headers={"Connection": "close", "Retry-After": "1"},
        )(scope, receive, send)


def _replay(body: bytes, receive: Receive) -> Receive:
    """The body once, then the real receive (a route that waits for the client's disconnect)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
