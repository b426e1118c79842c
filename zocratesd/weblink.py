"""The address `zocrates open` and `zocratesd open` give a browser: the web app and a one-time code.

Not the token: an address with `#token=` stays in the browser's saved history (shim/codes.py). The
running daemon mints the code (`POST /auth/code`, with the token from daemon.json, over loopback);
the page exchanges it for the token at once. Standard library only: both commands start fast.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Mapping
from typing import Any

# The daemon answers a code from memory; this only bounds a daemon that hangs.
MINT_TIMEOUT_S = 10.0
# How long a code lives (shim/codes.py's CODE_TTL_S, not imported: that module's package loads the
# HTTP server), said to a user who opens the address by hand.
CODE_TTL_WORDS = "2 minutes"


class WebLinkError(Exception):
    """The running daemon gave no code (not answering, too old, or refused). Raised only in the
    commands that ask for one, never inside the daemon: not part of errors.py's tree, which is
    what the daemon answers with."""


def web_app_link(info: Mapping[str, Any]) -> str | None:
    """The web app's address with a fresh one-time code, from a running daemon's daemon.json; None
    when it serves no HTTP. WebLinkError when it gives no code."""
    http_info, token = info.get("http"), info.get("token")
    if not isinstance(http_info, dict) or not isinstance(token, str) or not token:
        return None
    port = int(http_info["port"])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=MINT_TIMEOUT_S)
    try:
        conn.request("POST", "/auth/code", body=b"{}",
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
        code = json.loads(body)["code"] if status == 200 else None
    except (ValueError, KeyError, TypeError):
        code = None
    if not isinstance(code, str) or not code:
        raise WebLinkError(f"zocratesd on 127.0.0.1:{port} refused a one-time code (HTTP {status})")
    return f"http://127.0.0.1:{port}/ui/#code={code}"
