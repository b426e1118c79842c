"""The answer to `GET /health?challenge=<nonce>`: proof that this daemon holds daemon.json's token.

daemon.json outlives a daemon that is killed (SIGKILL, the OOM killer), and once its port is free
any local user can listen there and answer `/health` and `/ui/` like us. A client that read the
token from daemon.json (0600) sends a fresh random nonce; only the token's holder can answer with
HMAC-SHA256(token, PROOF_LABEL + nonce). The Zotero plugin frames the page (and hands it the token)
only after checking that answer (clients/zotero/plugin/bridge.js, `proveDaemon`).

The route stays public and cheap: one HMAC of at most `MAX_CHALLENGE_CHARS`. It is no oracle beyond
the HMAC itself: the key never leaves the daemon, the message is labelled so it can never equal
anything else keyed by the token, and a caller learns only the MAC of a nonce it chose. A client's
nonce is random and new at each check, so answers collected from a live daemon prove nothing to it
once that daemon is gone.
"""

from __future__ import annotations

import hashlib
import hmac
import re

# 16 characters: 64 bits even as hex, too many to precompute answers for; 128: a 96-byte nonce as
# base64url, more than any client needs, and the whole cost of a public request stays tiny.
MIN_CHALLENGE_CHARS = 16
MAX_CHALLENGE_CHARS = 128
# Hex or base64url: nothing that needs escaping in a URL, a log line or the label's message.
CHALLENGE_RE = re.compile(rf"[A-Za-z0-9_-]{{{MIN_CHALLENGE_CHARS},{MAX_CHALLENGE_CHARS}}}")
# Domain separation: a MAC made here never equals one the token could key for another purpose.
PROOF_LABEL = "zocratesd-health-proof:"


def challenge_problem(values: list[str]) -> str | None:
    """Why the `challenge` query values cannot be answered (None: exactly one, well formed)."""
    if len(values) != 1:
        return "give one challenge"
    value = values[0]
    if len(value) > MAX_CHALLENGE_CHARS or not CHALLENGE_RE.fullmatch(value):
        return f"a challenge is {MIN_CHALLENGE_CHARS}-{MAX_CHALLENGE_CHARS} characters of A-Z, a-z, 0-9, '_' and '-'"
    return None


def health_proof(token: str, challenge: str) -> str:
    """HMAC-SHA256 of the labelled challenge under the token, as lowercase hex."""
    return hmac.new(token.encode(), (PROOF_LABEL + challenge).encode(), hashlib.sha256).hexdigest()
