"""The sidebar web app's static files (`GET /ui/...`), served from the package (zocratesd/webui/).

They hold no data, so the guard lets them through without a token (the page receives it in its
URL fragment). Still careful, because they come from the daemon's origin, which the API trusts:
- only regular files under WEBUI_DIR with an extension of `CONTENT_TYPES`, no dot-file or
  dot-directory; a path with `..`, an empty segment, a backslash or NUL, or one that resolves
  (through a symlink) outside the directory is 404, whatever encoding it arrived in (the server
  has decoded it already);
- content types come from that table, never from the platform's mimetypes or from sniffing
  (`nosniff`);
- HTML carries a Content-Security-Policy (`html_csp`) that lets the page run only its own scripts,
  talk only to its own origin, and be framed only by itself and `http.allowed_origins`; Zotero's
  window is not an http origin (see protocol/http.md, "The web app", for why it may still frame it);
- `Cache-Control: no-cache` with an ETag: an upgraded daemon serves new files under the same names,
  so the browser revalidates each time (one loopback round trip, answered 304).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Final

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import Response

from zocratesd.limits import ORIGIN_PATTERN
from zocratesd.shim.errors import error_response

WEBUI_DIR: Final = Path(__file__).resolve().parent.parent / "webui"

CONTENT_TYPES: Final = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
    ".json": "application/json",
    ".map": "application/json",
    ".woff2": "font/woff2",
    ".txt": "text/plain; charset=utf-8",
}
# A web app's file is a few hundred KiB at most; this keeps one request from reading a huge file
# someone dropped into the package into memory.
MAX_FILE_BYTES: Final = 8 * 1024 * 1024
COMMON_HEADERS: Final = {
    "Cache-Control": "no-cache",
    "X-Content-Type-Options": "nosniff",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Referrer-Policy": "no-referrer",
}


# The config refuses any other origin already; a CSP built from one must not gain a directive all the same.
_ORIGIN = re.compile(ORIGIN_PATTERN, re.IGNORECASE)


def html_csp(allowed_origins: list[str]) -> str:
    ancestors = " ".join(["'self'", *(o for o in allowed_origins if _ORIGIN.fullmatch(o))])
    return (
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
        "connect-src 'self'; object-src 'none'; base-uri 'self'; form-action 'self'; "
        f"frame-ancestors {ancestors}"
    )


def resolve(relative: str, root: Path = WEBUI_DIR) -> Path | None:
    """The file `relative` (the path after /ui/) names, or None when it may not be served."""
    if relative == "":
        relative = "index.html"
    if "\\" in relative or "\x00" in relative:
        return None
    parts = relative.split("/")
    if any(part in ("", ".", "..") or part.startswith(".") for part in parts):
        return None
    if Path(parts[-1]).suffix.lower() not in CONTENT_TYPES:
        return None
    root = root.resolve()
    try:
        path = root.joinpath(*parts).resolve(strict=True)
    except (OSError, RuntimeError):  # missing, or a symlink loop
        return None
    if not path.is_relative_to(root) or not path.is_file():
        return None
    return path


def _read(path: Path) -> bytes | None:
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            return None
        return path.read_bytes()
    except OSError:
        return None


class WebApp:
    def __init__(self, allowed_origins: list[str], root: Path = WEBUI_DIR):
        self.root = root
        self.csp = html_csp(allowed_origins)

    async def serve(self, request: Request, relative: str) -> Response:
        path = resolve(relative, self.root)
        data = await anyio.to_thread.run_sync(_read, path) if path is not None else None
        if path is None or data is None:
            return error_response(404, "not_found", "no such file of the web app", headers=COMMON_HEADERS)
        etag = '"' + hashlib.sha256(data).hexdigest()[:32] + '"'
        headers = {**COMMON_HEADERS, "ETag": etag}
        media_type = CONTENT_TYPES[path.suffix.lower()]
        if media_type.startswith("text/html"):
            headers["Content-Security-Policy"] = self.csp
        if etag in [tag.strip() for tag in request.headers.get("if-none-match", "").split(",")]:
            return Response(status_code=304, headers=headers)
        return Response(data, media_type=media_type, headers=headers)
