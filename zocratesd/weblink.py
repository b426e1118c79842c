"""The address `zocrates open` and `zocratesd open` give a browser: the web app and a one-time code.

Not the token: an address with `#token=` stays in the browser's saved history (shim/codes.py). The
running daemon mints the code (`POST /auth/code`, with the token from daemon.json, over loopback);
the page exchanges it for the token at once. Nor the address itself on the browser's command line,
which every local user can read: the daemon also writes a private page that redirects to it
(shim/openpage.py), and the browser is started on that file. Standard library only: both commands
start fast.
"""

from __future__ import annotations

import http.client
import json
import webbrowser
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zocratesd.logtext import escape_for_terminal

# The daemon answers a code from memory; this only bounds a daemon that hangs.
MINT_TIMEOUT_S = 10.0
# How long a code lives (shim/codes.py's CODE_TTL_S, not imported: that module's package loads the
# HTTP server), said to a user who opens the address by hand.
CODE_TTL_WORDS = "2 minutes"


class WebLinkError(Exception):
    """The running daemon gave no code (not answering, too old, or refused). Raised only in the
    commands that ask for one, never inside the daemon: not part of errors.py's tree, which is
    what the daemon answers with."""


@dataclass(frozen=True)
class WebLink:
    url: str  # the web app with the code, to print
    page_file: Path | None  # the daemon's private page that redirects to `url`, to open in a browser


def web_app_url(port: int, code: str) -> str:
    return f"http://127.0.0.1:{port}/ui/#code={code}"


def web_app_link(info: Mapping[str, Any], *, page_file: bool = False) -> WebLink | None:
    """The web app's address with a fresh one-time code, from a running daemon's daemon.json, and
    with `page_file` the page that opens it; None when the daemon serves no HTTP. WebLinkError when
    it gives no code, or no page when one was asked for."""
    http_info, token = info.get("http"), info.get("token")
    if not isinstance(http_info, dict) or not isinstance(token, str) or not token:
        return None
    port = int(http_info["port"])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=MINT_TIMEOUT_S)
    try:
        conn.request("POST", "/auth/code", body=json.dumps({"page_file": True} if page_file else {}).encode(),
                     headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
        response = conn.getresponse()
        status, body = response.status, response.read(64 * 1024)
    except (OSError, http.client.HTTPException) as exc:
        raise WebLinkError(f"zocratesd's web face on 127.0.0.1:{port} did not answer ({exc})") from None
    finally:
        conn.close()
    if status == 404:
        raise WebLinkError("this zocratesd is older than this command (it hands out no one-time codes); "
                           "restart it (`zocratesd stop`, then start it again)")
    try:
        answer = json.loads(body)
        code = answer["code"] if status == 200 else None
    except (ValueError, KeyError, TypeError):
        answer, code = None, None
    if not isinstance(code, str) or not code:
        detail = _error_message(answer)
        raise WebLinkError(f"zocratesd on 127.0.0.1:{port} refused a one-time code (HTTP {status})"
                           + (f": {detail}" if detail else ""))
    page = answer.get("page_file") if page_file else None
    if page_file and not isinstance(page, str):
        raise WebLinkError("this zocratesd is older than this command (it writes no page to open the web app with); "
                           "restart it (`zocratesd stop`, then start it again)")
    return WebLink(web_app_url(port, code), Path(page) if isinstance(page, str) else None)


def _error_message(answer: Any) -> str | None:
    """The message of the daemon's error body, escaped for a terminal."""
    error = answer.get("error") if isinstance(answer, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    return escape_for_terminal(message[:500]) if isinstance(message, str) else None


def open_in_browser(link: WebLink) -> bool:
    """Start a browser on the link's page file (never on the address: see the module doc); False
    when there is no page or no browser could be started."""
    if link.page_file is None:
        return False
    return webbrowser.open(link.page_file.as_uri())
