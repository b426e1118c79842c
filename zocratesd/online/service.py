"""`OnlineSearch`: one search of the three providers at once, bounded and polite, their answers
merged into one list of works.

Bounded: each request has its timeout and the whole search its deadline; an answer is read as a
stream and refused past `online.max_response_bytes`; a turn makes at most `max_requests_per_turn`
requests (a `Budget` per turn, retries included). Polite: `Retry-After` on 429 is waited when it
fits the deadline (once), a 5xx is tried again once after a short pause, the polite pool's `mailto`
is sent where the provider has one. Cancelling the search cancels the requests in flight. A provider
that fails is named in `failures` with a line a person understands; the others' works still count.
Only the search terms leave the machine.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Final

import anyio
import httpx
import msgspec

from zocratesd import __version__
from zocratesd.config import OnlineConfig
from zocratesd.logtext import escape_for_log
from zocratesd.online import providers
from zocratesd.online.cache import OnlineCache, request_key
from zocratesd.online.providers import BadAnswer, Search
from zocratesd.online.works import PROVIDER_ORDER, OnlineWork, Provider, merge

log = logging.getLogger(__name__)

# A 5xx is tried again once, after this pause.
RETRY_PAUSE_S: Final = 0.5
# A Retry-After longer than this is not waited for within a search: the provider is skipped this time.
MAX_RETRY_AFTER_S: Final = 10.0
CHUNK_BYTES: Final = 64 * 1024
# What a provider asks of its users between two requests (arXiv's terms of use: one every three seconds).
MIN_INTERVAL_S: Final[dict[Provider, float]] = {"arxiv": 3.0}


class Budget:
    """The requests one turn may still make (shared by its searches)."""

    def __init__(self, requests: int):
        self.left = requests

    def take(self) -> bool:
        if self.left <= 0:
            return False
        self.left -= 1
        return True


class OnlineResult(msgspec.Struct, frozen=True):
    query: str
    works: tuple[OnlineWork, ...]
    failures: tuple[str, ...] = ()  # one line per provider that failed, for the person
    cached: bool = False  # every answer came from the cache

    @property
    def offline(self) -> bool:
        return not self.works and bool(self.failures) and all("could not be reached" in f for f in self.failures)


class ProviderFailed(Exception):
    """One provider's search failed; the message says why, in a line a person understands."""


class NoSuchWork(ProviderFailed):
    """The provider has no record at that address (HTTP 404): a DOI it does not know."""


class OnlineSearch:
    def __init__(self, config: OnlineConfig, state_dir: Path):
        self.config = config
        self._state_dir = state_dir
        self._cache: OnlineCache | None = None
        self._client: httpx.AsyncClient | None = None
        self._pacing = {p: anyio.Lock() for p in PROVIDER_ORDER}
        self._last = dict.fromkeys(PROVIDER_ORDER, -1e9)

    @property
    def cache(self) -> OnlineCache:
        if self._cache is None:
            self._cache = OnlineCache(self._state_dir)
        return self._cache

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(
                follow_redirects=True, max_redirects=3, trust_env=True,
                headers={"User-Agent": f"zocrates/{__version__} (research assistant for Zotero; "
                         f"{'mailto:' + self.config.mailto if self.config.mailto else 'no contact set'})",
                         "Accept-Encoding": "identity"},
            )
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
        if self._cache is not None:
            self._cache.close()

    async def search(
        self, query: str, *, limit: int = 10, years: tuple[int, int] | None = None, budget: Budget | None = None,
        only: Sequence[Provider] = PROVIDER_ORDER,
    ) -> OnlineResult:
        """The works the providers find for `query` (at most `limit` from each), merged and ranked."""
        budget = budget or Budget(self.config.max_requests_per_turn)
        answers: dict[Provider, list[OnlineWork]] = {}
        failures: dict[Provider, str] = {}
        cached: list[bool] = []

        async def one(provider: Provider) -> None:
            try:
                works, from_cache = await self._search_one(provider, query, limit, years, budget)
                answers[provider] = works
                cached.append(from_cache)
            except ProviderFailed as exc:
                failures[provider] = f"{provider}: {exc}"

        with anyio.move_on_after(self.config.search_timeout_s) as scope:
            async with anyio.create_task_group() as tg:
                for provider in only:
                    tg.start_soon(one, provider)
        if scope.cancelled_caught:
            for provider in only:
                if provider not in answers and provider not in failures:
                    failures[provider] = f"{provider}: no answer within {self.config.search_timeout_s:.0f} s"
        works = merge(answers[p] for p in PROVIDER_ORDER if p in answers)
        works.sort(key=lambda w: -len(w.providers))  # stable: a work several providers found comes first
        return OnlineResult(query, tuple(works), tuple(failures[p] for p in PROVIDER_ORDER if p in failures),
                            bool(cached) and all(cached) and not failures)

    async def by_doi(self, doi: str) -> OnlineWork | None:
        """Crossref's record of one DOI (cached as a search is); None when Crossref knows no such DOI."""
        request = providers.crossref_work(doi, self.config.mailto)
        try:
            body, _ = await self._get("crossref", self.config.crossref_url, request, Budget(2))
        except NoSuchWork:
            return None
        try:
            return providers.crossref_single(json.loads(body))
        except (ValueError, BadAnswer) as exc:
            raise ProviderFailed(f"crossref: its answer was not understood ({str(exc)[:120]})") from None

    async def _search_one(
        self, provider: Provider, query: str, limit: int, years: tuple[int, int] | None, budget: Budget,
    ) -> tuple[list[OnlineWork], bool]:
        c = self.config
        if provider == "openalex":
            request, base = providers.openalex_search(query, limit, years, c.mailto), c.openalex_url
        elif provider == "crossref":
            request, base = providers.crossref_search(query, limit, years, c.mailto), c.crossref_url
        else:
            request, base = providers.arxiv_search(query, limit, years), c.arxiv_url
        body, from_cache = await self._get(provider, base, request, budget)
        try:
            if provider == "arxiv":
                return providers.arxiv_works(body, years), from_cache
            payload = json.loads(body)
            works = providers.openalex_works(payload) if provider == "openalex" else providers.crossref_works(payload)
            return works, from_cache
        except (ValueError, BadAnswer) as exc:
            raise ProviderFailed(f"its answer was not understood ({str(exc)[:120]})") from None

    async def _get(self, provider: Provider, base: str, request: Search, budget: Budget) -> tuple[bytes, bool]:
        url = base + request.path
        key = request_key(url, request.params)
        hit = await anyio.to_thread.run_sync(self.cache.get, key)
        if hit is not None:
            return hit, True
        waited = False
        for attempt in range(2):
            if not budget.take():
                raise ProviderFailed("this turn's online requests are spent")
            await self._pace(provider)
            status, headers, body = await self._fetch(url, request.params)
            if status == 200:
                await anyio.to_thread.run_sync(self.cache.put, key, body)
                return body, False
            if status == 429 and not waited:
                pause = _retry_after(headers.get("retry-after"))
                if pause is None or pause > MAX_RETRY_AFTER_S:
                    raise ProviderFailed("it limits how often it is asked; try again later")
                log.info("online: %s asked to wait %.1f s (429)", provider, pause)
                waited = True
                await anyio.sleep(pause)
                continue
            if status >= 500 and attempt == 0:
                await anyio.sleep(RETRY_PAUSE_S)
                continue
            raise (NoSuchWork if status == 404 else ProviderFailed)(f"it answered HTTP {status}")
        raise ProviderFailed("it did not answer usefully")

    async def _pace(self, provider: Provider) -> None:
        """Keep a provider's asked spacing between this daemon's requests (arXiv: one every 3 s)."""
        gap = MIN_INTERVAL_S.get(provider, 0.0)
        async with self._pacing[provider]:
            wait = self._last[provider] + gap - time.monotonic()
            if wait > 0:
                await anyio.sleep(wait)
            self._last[provider] = time.monotonic()

    async def _fetch(self, url: str, params: dict[str, str]) -> tuple[int, httpx.Headers, bytes]:
        limit = self.config.max_response_bytes
        try:
            with anyio.fail_after(self.config.request_timeout_s):
                async with self._http().stream("GET", url, params=params, timeout=self.config.request_timeout_s) as r:
                    declared = r.headers.get("content-length")
                    if declared and declared.isdigit() and int(declared) > limit:
                        raise ProviderFailed(f"its answer is too large ({int(declared):,} bytes)")
                    body = bytearray()
                    async for chunk in r.aiter_raw(CHUNK_BYTES):
                        body += chunk
                        if len(body) > limit:
                            raise ProviderFailed(f"its answer is too large (over {limit:,} bytes)")
                    return r.status_code, r.headers, bytes(body)
        except TimeoutError:
            raise ProviderFailed(f"no answer within {self.config.request_timeout_s:.0f} s") from None
        except httpx.ConnectError:
            raise ProviderFailed("it could not be reached (no network?)") from None
        except httpx.HTTPError as exc:
            log.info("online: %s failed: %s", escape_for_log(url), escape_for_log(exc))
            raise ProviderFailed(f"the request failed ({type(exc).__name__})") from None


def _retry_after(value: str | None) -> float | None:
    """Retry-After as seconds (a number; an HTTP date is read too)."""
    if not value:
        return None
    value = value.strip()
    if value.replace(".", "", 1).isdigit():
        return float(value)
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None
