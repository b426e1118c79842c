"""A path into Zotero: one way a consented write reaches Zotero's own API. The service tries them in
order (the plugin inside Zotero, Zotero 10's local API, the connector for new items) and uses the
first that can apply the write now; with none, the write waits.

A path reads before it writes (`plan`: what the write will change, which the journal records
before anything is sent) and writes idempotently (`apply`): tags and collection memberships are
set as the union or difference of what Zotero holds at that moment, created objects carry the key
chosen when the write was proposed (or, where Zotero chooses it, an earlier attempt's object is
looked for first). So a write applied twice (a crash after Zotero's answer and before the journal's
record) changes Zotero once.
"""

from __future__ import annotations

from typing import Final, Protocol

from zocratesd.writes.operations import Change, Operation

# What a path says when Zotero itself is closed: the one reason a person needs then.
NOT_RUNNING: Final = "Zotero is not running"


class NotNow(Exception):
    """The path cannot apply the write now (Zotero closed, no plugin, a dialog unanswered): it waits
    and is tried again. The message says what it waits for, in the user's terms."""


class Refused(Exception):
    """Zotero refused the write for good (the user chose Deny, an item no longer exists): the write
    fails with this message and is not tried again."""


class WritePath(Protocol):
    name: str

    async def ready(self, op: Operation) -> None:
        """Return when this path can apply `op` now; NotNow (with why) when it cannot."""

    async def plan(self, op: Operation) -> Change:
        """What `op` would change in Zotero as it is now (read only)."""

    async def apply(self, op: Operation, change: Change) -> Change | None:
        """Make the change; NotNow when Zotero went away meanwhile (retried), Refused when it said no.
        The change as made when it is more than the plan knew (the keys Zotero chose), else None."""
