"""Who hears a session's updates: one `Subscription` per listener, each with a queue of its own.

A face subscribes with `Daemon.watch(session_id)`: every connection attached to the session (ACP),
every open stream (HTTP). `Watchers.publish` (the turn, a rename) appends the update to each
subscription's queue and never waits on a listener, so one editor that stops reading stalls
neither the turn nor the other watchers; each consumer takes its updates at its own pace, in
publish order.

Overflow: a queue holds at most `MAX_QUEUED_UPDATES`. The update that finds it full ends the
subscription: it queues nothing more (it only counts what it drops, `dropped`), its consumer still
gets what was queued and then the end of the stream. What the client then sees is the face's
choice, documented there: ACP aborts the connection (the editor resyncs with `session/load`), SSE
stops sending `parts` and still ends with `done` (which carries `dropped_events`).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from types import TracebackType

import anyio
import anyio.lowlevel

from zocratesd.updates import Update

log = logging.getLogger(__name__)

# Updates one listener may have waiting. A turn publishes one per streamed chunk, so even a long
# answer (a few thousand chunks, tool calls and research rounds included) fits while its client
# reads at all; a client that has stopped reading is cut off here rather than growing the daemon's
# memory for as long as the session keeps talking.
MAX_QUEUED_UPDATES = 4096
# A backlog from which `publish` lets the event loop run at every update, woken consumer or not
# (or a quarter of a smaller limit): the consumer's writes wait on the loop, and a turn that never
# awaits must not overflow a client that reads. A reading client's backlog is a handful.
YIELD_BACKLOG = 64

# Called synchronously from `publish` when a subscription goes from idle to having something for
# its consumer: a first update, or its end by overflow. It must not block (start a task, abort).
OnReady = Callable[[], None]


class Subscription:
    """One listener's updates of one session, queued in publish order.

    A consumer iterates (`async for update in sub`), or takes everything queued at once: `await
    take()` waits for it (a long-lived writer: ACP's SessionFeed), `take_nowait()` does not. The
    iteration ends, and `take()` returns [], once the subscription has ended and its queue is
    empty. An update counts as handled once its consumer comes back for more (or says so:
    `handled()`), which is what `drained()` waits for. `close()` (or leaving the `with` block) unsubscribes; what was queued
    before stays readable.
    """

    def __init__(
        self,
        session_id: str,
        *,
        limit: int,
        on_ready: OnReady | None,
        release: Callable[[Subscription], None],
    ) -> None:
        self.session_id = session_id
        self.limit = limit
        self._lagging = max(1, min(YIELD_BACKLOG, limit // 4))  # a backlog that makes publish yield
        self.offered = 0  # updates published to it, queued or dropped
        self.dropped = 0  # updates refused after an overflow
        self._queue: deque[Update] = deque()
        self._on_ready = on_ready
        self._release = release
        self._handling = False  # the consumer took updates and has not come back for more
        self._closed = False
        self._overflowed = False
        self._arrived: anyio.Event | None = None  # set when a waiting consumer has something
        self._idle: anyio.Event | None = None  # set when everything queued has been handled

    @property
    def overflowed(self) -> bool:
        """The queue was full when an update came: this subscription ended there."""
        return self._overflowed

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def ended(self) -> bool:
        """No more updates will be queued (closed or overflowed)."""
        return self._closed or self._overflowed

    def __len__(self) -> int:
        return len(self._queue)

    # --- the publishing side (Watchers.publish) -------------------------------------------------

    def offer(self, update: Update) -> bool:
        """Queue an update without waiting; on overflow, end the subscription instead. True when
        the consumer should run now: it was waiting for updates, `on_ready` was called, or its
        backlog is long."""
        if self._closed:
            return False
        self.offered += 1
        if self._overflowed:
            self.dropped += 1
            return False
        idle = not self._queue and not self._handling
        if len(self._queue) >= self.limit:
            self._overflowed = True
            self.dropped += 1
            log.warning("a listener of %s has %d updates waiting; it hears no more", self.session_id, self.limit)
            self._wake()
            if self._on_ready is not None:
                self._on_ready()
            return True
        self._queue.append(update)
        run_now = self._wake()
        if idle and self._on_ready is not None:
            self._on_ready()
            run_now = True  # e.g. a task it started
        return run_now or len(self._queue) >= self._lagging

    def _wake(self) -> bool:
        if self._arrived is None:
            return False
        self._arrived.set()
        self._arrived = None
        return True

    # --- the consuming side -------------------------------------------------------------------

    async def take(self) -> list[Update]:
        """Everything queued, once there is something; [] only at the end (ended, queue empty).
        What was taken before counts as handled."""
        self._handling = False
        while not self._queue:
            self._set_idle()
            if self.ended:
                return []
            self._arrived = arrived = anyio.Event()
            await arrived.wait()
        batch = list(self._queue)
        self._queue.clear()
        self._handling = True
        return batch

    def take_nowait(self) -> list[Update]:
        """Everything queued, at once ([] when nothing is); what was taken before counts as handled."""
        batch = list(self._queue)
        self._queue.clear()
        self._handling = bool(batch)
        if not batch:
            self._set_idle()
        return batch

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Update:
        self._handling = False
        while not self._queue:
            self._set_idle()
            if self.ended:
                raise StopAsyncIteration
            self._arrived = arrived = anyio.Event()
            await arrived.wait()
        self._handling = True
        return self._queue.popleft()

    def handled(self) -> None:
        """The consumer is done with what it took, before it comes back for more (ACP's writer,
        once its batch is queued on the connection): `drained()` need not wait for it any longer."""
        self._handling = False
        if not self._queue:
            self._set_idle()

    async def drained(self) -> None:
        """Return once every update queued so far has been handled (see the class docstring).

        Not bounded here: the consumer bounds each of its steps (ACP: a write that takes longer
        than its timeout aborts the connection, after which the rest is dropped at once)."""
        while self._queue or self._handling:
            if self._idle is None:
                self._idle = anyio.Event()
            await self._idle.wait()

    def _set_idle(self) -> None:
        if self._idle is not None:
            self._idle.set()
            self._idle = None

    def close(self) -> None:
        """Unsubscribe (idempotent); a consumer waiting for an update gets the end of the stream."""
        if self._closed:
            return
        self._closed = True
        self._release(self)
        self._wake()

    def __enter__(self) -> Subscription:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class Watchers:
    """The subscriptions of every session, and the one way updates reach them (`publish`)."""

    def __init__(self) -> None:
        self._by_session: dict[str, list[Subscription]] = {}

    def watch(
        self, session_id: str, *, limit: int = MAX_QUEUED_UPDATES, on_ready: OnReady | None = None
    ) -> Subscription:
        sub = Subscription(session_id, limit=limit, on_ready=on_ready, release=self._release)
        self._by_session.setdefault(session_id, []).append(sub)
        return sub

    def _release(self, sub: Subscription) -> None:
        subs = self._by_session.get(sub.session_id)
        if subs and sub in subs:
            subs.remove(sub)
            if not subs:
                del self._by_session[sub.session_id]

    def watching(self, session_id: str) -> int:
        """How many subscriptions a session has."""
        return len(self._by_session.get(session_id, ()))

    async def publish(self, session_id: str, update: Update) -> None:
        """Queue an update for every subscription of the session; never waits on one.

        Then one checkpoint if a consumer was waiting for it, so that it runs now (a model that
        yields its chunks without awaiting anything would otherwise hold them all until the turn's
        next I/O), or one lags (YIELD_BACKLOG). Otherwise every consumer is busy (writing what it
        took): it takes this update with those that follow, in one write, and the turn goes on
        without a trip through the event loop.
        """
        subs = self._by_session.get(session_id)
        if not subs:
            return
        run_now = False
        for sub in tuple(subs):
            try:
                run_now = sub.offer(update) or run_now
            except Exception:  # an on_ready hook failed: that listener goes, the turn does not
                log.exception("dropping a listener of %s that failed", session_id)
                sub.close()
        if run_now:
            await anyio.lowlevel.checkpoint()
