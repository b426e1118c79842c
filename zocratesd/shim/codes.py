"""One-time codes that a browser exchanges for the shim's token (sans-IO: no clock of its own).

`zocrates open` must hand a browser the web app with a way in. The token itself in the address
(`#token=`) stays in the browser's saved history: the page takes it out of the address at once,
but Firefox has recorded the visit by then, and anyone who reads that history later holds a token
that works until the daemon restarts. So the address carries a code instead: minted by the daemon
on request of a holder of the token (`POST /auth/code`), exchanged by the page for the token once
(`POST /auth/exchange`), and worthless after that or after `CODE_TTL_S`, whichever comes first.
History then holds only a spent code. Nor does the browser's command line hold it (every local user
can read a process's command line): the command opens a private file that redirects to the address
(shim/openpage.py), which goes when its code goes (`on_drop`).
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

# How long a code may wait for its page: `zocrates open` starts the browser at once, and even a
# cold Firefox on a loaded machine loads the page within seconds; a code that lies around longer
# (copied, in a history) should be worthless.
CODE_TTL_S: Final = 120.0
# Codes minted and not yet exchanged: one per `zocrates open` that was never followed. Beyond this
# the oldest is dropped, so nothing grows without bound, and redeeming compares against few.
MAX_OUTSTANDING: Final = 16
# 32 random bytes, as the token: a code cannot be guessed within its lifetime.
CODE_BYTES: Final = 32


@dataclass
class OneTimeCodes:
    ttl_s: float = CODE_TTL_S
    cap: int = MAX_OUTSTANDING
    clock: Callable[[], float] = time.monotonic
    # Told of each code that is no longer live: exchanged, expired or pushed out by newer ones.
    on_drop: Callable[[str], None] = lambda code: None
    # code -> when it expires, oldest first (a dict keeps insertion order)
    _codes: dict[str, float] = field(default_factory=dict)

    def mint(self) -> str:
        self._drop_expired()
        while len(self._codes) >= self.cap:
            self._drop(next(iter(self._codes)))
        code = secrets.token_urlsafe(CODE_BYTES)
        self._codes[code] = self.clock() + self.ttl_s
        return code

    def redeem(self, given: str) -> bool:
        """Whether `given` is a live code; a live code is spent by this. Compared in constant time
        against every live code (no early exit), so the time taken says nothing about how much of
        a guess was right."""
        self._drop_expired()
        candidate = given.encode("utf-8", "surrogatepass")
        found: str | None = None
        for code in list(self._codes):
            if hmac.compare_digest(candidate, code.encode()):
                found = code
        if found is None:
            return False
        self._drop(found)
        return True

    def outstanding(self) -> int:
        self._drop_expired()
        return len(self._codes)

    def _drop_expired(self) -> None:
        now = self.clock()
        for code, expires in list(self._codes.items()):
            if expires <= now:
                self._drop(code)

    def _drop(self, code: str) -> None:
        del self._codes[code]
        self.on_drop(code)
