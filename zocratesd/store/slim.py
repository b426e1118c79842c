"""Stored events decoded only as far as the UI view reads them (`SessionReader.ui_session`).

Showing a long session parsed every stored event whole: Python objects built from megabytes of
JSON and freed again to read a dozen keys per event (bench/PROFILE.md section 2); most of the bytes
are tool results, evidence and bookkeeping the view never shows. msgspec decodes each event into
the keys declared below and skips the rest in C without building it. SQLite's JSON functions
(3.40) were measured for the same job and cost more than they save (bench/PROFILE.md section 2).

A slim event is a plain dict: the stored event's dict (as orjson parses it) with only the keys
below, at every level, and the same values; so the view's code (`apply_rewinds`, `_scan`,
`updates.is_shown`) runs unchanged on it. What makes the values the same:
- keys the view shows or compares are typed as ADK writes them (strings, booleans); a row that
  does not fit (not an event as ADK writes them) raises `DecodeError`, and the reader then parses
  the session whole, so it fails, or not, exactly as before;
- the timestamp: integers within int64 only (a larger one, which orjson may turn into a float,
  does not fit), and floats parsed to the same double by both (correct rounding; the test checks);
- values kept whole (`compaction`, tested for truth only; a call's `args`, of which the view shows
  a checkpoint's message and payload) decode as orjson decodes them but for integers beyond
  64 bits, which orjson turns into floats: `has_wide_int` finds them in what the view shows, and
  the reader then parses the session whole.
A key the view starts to read must be declared here (tests/unit/store/test_slim_view.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, TypedDict, cast

import msgspec

from zocratesd.updates import StoredEvent

DecodeError = msgspec.DecodeError  # ValidationError (a value the types refuse) is a subclass

_Int64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]


class _FunctionCall(TypedDict, total=False):
    id: str | None
    name: str | None
    args: Any  # read for a checkpoint's call only (small), kept whole


class _FunctionResponse(TypedDict, total=False):
    id: str | None  # the response itself (tool results, evidence) is skipped


class _Part(TypedDict, total=False):
    text: str | None
    thought: bool | None
    function_call: _FunctionCall | None
    function_response: _FunctionResponse | None


class _Content(TypedDict, total=False):
    parts: list[_Part] | None


class _Actions(TypedDict, total=False):
    rewind_before_invocation_id: str | None
    compaction: Any  # tested for truth only; one event per compaction


class _Metadata(TypedDict, total=False):
    zocrates_citations: Any  # an answer's citation checks (store/ui.py CHECKS_METADATA_KEY), kept whole


class SlimEvent(TypedDict, total=False):
    id: str | None
    author: str | None
    invocation_id: str | None
    timestamp: _Int64 | float | None
    branch: str | None
    isolation_scope: str | None
    partial: bool | None
    actions: _Actions | None
    content: _Content | None
    custom_metadata: _Metadata | None


_decode = msgspec.json.Decoder(SlimEvent).decode


def decode_events(rows: Sequence[Any]) -> list[StoredEvent]:
    """The `event_data` (first column) of `rows`, slim; NULL rows are skipped, as the whole parse does."""
    decode = _decode
    return cast("list[StoredEvent]", [decode(r[0]) for r in rows if r[0] is not None])


def has_wide_int(value: Any) -> bool:
    """Whether `value` (decoded JSON) holds an integer orjson would have made a float (beyond
    int64 below, uint64 above)."""
    if isinstance(value, int):
        return not -(2**63) <= value < 2**64
    if isinstance(value, dict):
        return any(has_wide_int(v) for v in value.values())
    if isinstance(value, list):
        return any(has_wide_int(v) for v in value)
    return False
