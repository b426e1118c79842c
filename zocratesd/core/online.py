"""The core's search beyond the library (`daemon.online`): a person's explicit search from a face
(the MCP `search_online` tool, `zocrates online`, `_zocrates/online/search`), under `online.mode`,
with each work the library already holds marked as that library item, so it is cited as the item
and not twice. The providers' client (httpx) is loaded by the first search, not with the daemon.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final

import msgspec

from zocratesd import deferred
from zocratesd.config import OnlineConfig
from zocratesd.errors import InvalidInput, OnlineOff
from zocratesd.limits import DEFAULT_ONLINE_RESULTS, MAX_ONLINE_QUERY_CHARS, MAX_ONLINE_RESULTS
from zocratesd.online.works import OnlineWork

if TYPE_CHECKING:
    from zocratesd.online.service import OnlineResult, OnlineSearch

OFF_MESSAGE: Final = ("online search is off (online.mode = off in the config): nothing left this machine; "
                      "set online.mode to ask or on to search OpenAlex, arXiv and Crossref")

InLibrary = Callable[[Sequence[OnlineWork]], Awaitable[dict[int, tuple[str, str]]]]


class Online:
    def __init__(self, config: OnlineConfig, state_dir: Path, in_library: InLibrary):
        self.config = config
        self._state_dir = state_dir
        self._in_library = in_library
        self._search: OnlineSearch | None = None

    @property
    def searcher(self) -> OnlineSearch:
        if self._search is None:
            self._search = deferred.load("zocratesd.online.service").OnlineSearch(self.config, self._state_dir)
        return self._search

    async def aclose(self) -> None:
        if self._search is not None:
            await self._search.aclose()

    async def search(
        self, query: str, *, limit: int = DEFAULT_ONLINE_RESULTS, year_from: int | None = None, year_to: int | None = None,
    ) -> dict[str, object]:
        """Works the providers find, merged; OnlineOff when online search is off (nothing sent)."""
        if self.config.mode == "off":
            raise OnlineOff(OFF_MESSAGE)
        terms = " ".join(str(query).split())
        if not terms:
            raise InvalidInput("give the search terms")
        if len(terms) > MAX_ONLINE_QUERY_CHARS:
            raise InvalidInput(f"search terms are at most {MAX_ONLINE_QUERY_CHARS} characters (got {len(terms)}): "
                               "only the terms leave the machine, not a pasted text")
        if not 1 <= limit <= MAX_ONLINE_RESULTS:
            raise InvalidInput(f"limit is 1 to {MAX_ONLINE_RESULTS}")
        years = None
        if year_from is not None or year_to is not None:
            years = (year_from or 1000, year_to or 2999)
            if years[0] > years[1]:
                raise InvalidInput("yearFrom is after yearTo")
        result = await self.searcher.search(terms, limit=limit, years=years)
        return to_json(result, await self._in_library(result.works))


def to_json(result: OnlineResult, held: dict[int, tuple[str, str]]) -> dict[str, object]:
    """The shape every face sends (protocol/README.md, `_zocrates/online/search`)."""
    works = []
    for i, w in enumerate(result.works):
        out: dict[str, object] = {k: v for k, v in msgspec.structs.asdict(w).items() if k != "provider"}
        out["authors"], out["providers"] = list(w.authors), list(w.providers)
        if i in held:
            library, key = held[i]
            where = "library" if library == "user" else library
            out["in_library"] = {"library": library, "item_key": key, "link": f"zotero://select/{where}/items/{key}"}
        works.append(out)
    line = None
    if result.offline:
        line = "offline: no provider could be reached, so nothing was found online"
    elif result.failures:
        line = "; ".join(result.failures)
    return {"query": result.query, "works": works, "failures": list(result.failures), "offline": result.offline,
            "cached": result.cached, "message": line}
