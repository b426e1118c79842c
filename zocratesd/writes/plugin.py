"""The `plugin` path: writes handed to the Zocrates plugin inside Zotero (7-10), which performs them
with Zotero's own API (`saveTx`, `addTag`, `addToCollection`) and answers what changed.

The plugin holds the connection: it long-polls the HTTP shim (`GET /plugin/writes`, protocol/http.md)
with daemon.json's token, and answers each request with a POST. So this side is a mailbox: `call`
puts a request in, the plugin's poll takes it out, its answer resolves the call. The plugin counts
as connected while a poll is open or ended a moment ago; a call it does not answer in time leaves
the write queued (NotNow), to be tried again.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Literal, TypedDict

import anyio
import msgspec

from zocratesd import deferred
from zocratesd.writes import operations as ops
from zocratesd.writes.operations import Change, Operation
from zocratesd.writes.paths import NotNow, Refused

# The plugin polls again within a moment of its last poll's end; past this it is gone (Zotero closed).
CONNECTED_GRACE_S: Final = 5.0
# Zotero saves a note or tags 50 items in well under a second; a plugin silent this long is stuck.
CALL_TIMEOUT_S: Final = 60.0
MAX_POLL_WAIT_S: Final = 25.0
NOT_CONNECTED: Final = "the Zocrates plugin is not connected (Zotero is closed, or the plugin is not installed)"
MAX_ERROR_CHARS: Final = 500

_ids = itertools.count(1)
_change = msgspec.json.Decoder(Change)


class PluginRequest(TypedDict):
    """A request as the plugin reads it (protocol/http.md, "The plugin's write channel")."""

    id: str
    call: Literal["plan", "apply"]
    operation: object
    change: object
    note_html: str | None


@dataclass
class _Call:
    id: str
    call: Literal["plan", "apply"]
    op: Operation
    change: Change | None
    taken: anyio.Event = field(default_factory=anyio.Event)  # a poll took it
    done: anyio.Event = field(default_factory=anyio.Event)
    result: Change | None = None
    error: Exception | None = None

    def request(self) -> PluginRequest:
        return {
            "id": self.id, "call": self.call, "operation": msgspec.to_builtins(self.op),
            "change": msgspec.to_builtins(self.change) if self.change is not None else None,
            "note_html": _note_html(self.op) if isinstance(self.op, ops.SaveNote) else None,
        }


def _note_html(op: ops.SaveNote) -> str:
    notes = deferred.load("zocratesd.writes.notes")  # markdown-it: loaded by the first note, not with the daemon
    html: str = notes.note_html(op.markdown, op.citations)
    return html


class PluginChannel:
    name = "plugin"

    def __init__(self) -> None:
        self._waiting: list[_Call] = []  # not yet taken by a poll
        self._taken: dict[str, _Call] = {}
        self._arrived = anyio.Event()  # set (and replaced) when a call comes: every open poll looks
        self._released = False
        self._polls = 0
        self._last_poll_end = 0.0
        self.plugin_version: str | None = None
        self.zotero_version: str | None = None

    @property
    def released(self) -> bool:
        """Whether the daemon is stopping (`release_polls`)."""
        return self._released

    @property
    def connected(self) -> bool:
        return self._polls > 0 or time.monotonic() - self._last_poll_end < CONNECTED_GRACE_S

    # --- the plugin's side (the shim's routes) --------------------------------------------------

    async def poll(self, wait_s: float, *, plugin_version: str | None, zotero_version: str | None) -> PluginRequest | None:
        """The next request for the plugin, waiting up to `wait_s` for one; None when none came."""
        self.plugin_version, self.zotero_version = plugin_version, zotero_version
        self._polls += 1
        try:
            with anyio.move_on_after(min(max(wait_s, 0.0), MAX_POLL_WAIT_S)):
                while not self._waiting and not self._released:
                    await self._arrived.wait()
            if not self._waiting or self._released:
                return None
            call = self._waiting.pop(0)
            self._taken[call.id] = call
            call.taken.set()
            return call.request()
        finally:
            self._polls -= 1
            self._last_poll_end = time.monotonic()

    def release_polls(self) -> None:
        """The daemon stops: every open poll is answered now, with nothing, instead of holding the
        shutdown's drain for up to a whole poll; the plugin finds the next daemon when it polls again.
        A call still waiting is not handed out: it stays queued in the journal for that daemon."""
        self._released = True
        self._wake_polls()

    def _wake_polls(self) -> None:
        self._arrived.set()
        self._arrived = anyio.Event()

    def answer(self, call_id: str, body: Mapping[str, object]) -> bool:
        """The plugin's answer to a request it took; False for an id it was not given (or given up on)."""
        call = self._taken.pop(call_id, None)
        if call is None:
            return False
        error = body.get("error")
        if isinstance(error, dict):
            message = str(error.get("message") or "the Zocrates plugin could not write")[:MAX_ERROR_CHARS]
            call.error = Refused(message) if error.get("kind") == "refused" else NotNow(message)
        else:
            result = body.get("result")
            change = result.get("change") if isinstance(result, dict) else None
            try:
                call.result = _change.decode(msgspec.json.encode(change)) if isinstance(change, dict) else Change()
            except msgspec.ValidationError as exc:
                call.error = NotNow(f"the Zocrates plugin's answer was not understood ({exc})")
        call.done.set()
        return True

    # --- the path's calls (writes/paths.py) --------------------------------------------------------

    async def ready(self, op: Operation) -> None:
        if not self.connected:
            raise NotNow(NOT_CONNECTED)

    async def plan(self, op: Operation) -> Change:
        return await self._call("plan", op, None)

    async def apply(self, op: Operation, change: Change) -> None:
        await self._call("apply", op, change)

    async def _call(self, kind: Literal["plan", "apply"], op: Operation, change: Change | None) -> Change:
        call = _Call(f"p-{next(_ids)}", kind, op, change)
        self._waiting.append(call)
        self._wake_polls()
        try:
            # A plugin polls again within a moment of its last poll's end: one that does not take the
            # call within that grace is gone (Zotero was closed since), and the write waits for it
            # to come back instead of for the answer timeout.
            with anyio.move_on_after(CONNECTED_GRACE_S):
                await call.taken.wait()
            if call.taken.is_set():
                with anyio.move_on_after(CALL_TIMEOUT_S):
                    await call.done.wait()
        finally:
            if call in self._waiting:
                self._waiting.remove(call)
            self._taken.pop(call.id, None)
        if not call.taken.is_set():
            raise NotNow(NOT_CONNECTED)
        if not call.done.is_set():
            raise NotNow("the Zocrates plugin did not answer; it is tried again")
        if call.error is not None:
            raise call.error
        return call.result or Change()
