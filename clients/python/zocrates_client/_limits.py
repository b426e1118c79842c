"""The client library's named limits, shared by the async client (client.py) and the blocking one
(blocking.py) without importing either."""

from __future__ import annotations

from typing import Final

from zocrates_wire.framing import DEFAULT_MAX_FRAME_BYTES

# What we send is capped at the daemon's default frame cap: a larger frame would be answered with
# an `id: null` error that no pending call could be matched to, so the call would wait forever.
MAX_OUTGOING_FRAME_BYTES: Final = DEFAULT_MAX_FRAME_BYTES

# What we accept. Answers grow with a session (`_zocrates/session/get` returns every message) while
# requests stay small, and the daemon is trusted more than its clients are: 4x the daemon's inbound
# cap. A larger frame cannot be matched to its call, so it ends the connection with a
# ConnectionLost that says so, instead of leaving a call waiting forever.
DEFAULT_MAX_INCOMING_FRAME_BYTES: Final = 4 * DEFAULT_MAX_FRAME_BYTES
