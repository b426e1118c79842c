"""The core's search beyond the library (`daemon.online`): a person's explicit search from a face
(the MCP `search_online` tool, `zocrates online`, `_zocrates/online/search`), under `online.mode`,
with each work the library already holds marked as that library item, so it is cited as the item
and not twice. The providers' client (httpx) is loaded by the first search, not with the daemon.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal

import msgspec

from zocratesd import deferred
from zocratesd.config import OnlineConfig
from zocratesd.errors import InvalidInput, NotFound, OnlineFailed, OnlineOff, ZocratesError
from zocratesd.limits import DEFAULT_ONLINE_RESULTS, MAX_ONLINE_QUERY_CHARS, MAX_ONLINE_RESULTS
from zocratesd.online.works import OnlineWork, bare_doi
from zocratesd.writes.operations import Creator, ItemFields

if TYPE_CHECKING:
    from zocratesd.online.service import OnlineResult, OnlineSearch

OFF_MESSAGE: Final = ("online search is off (online.mode = off in the config): nothing left this machine; "
                      "set online.mode to ask or on to search OpenAlex, arXiv and Crossref")

InLibrary = Callable[[Sequence[OnlineWork]], Awaitable[dict[int, tuple[str, str]]]]
# The person's answer, in their face, to "may this turn search online for <terms>?": this turn,
# always from now on (online.mode = on, written to the config), no, or never (online.mode = off);
# None: no answer.
OnlineAnswer = Literal["once", "always", "no", "never"]
AskOnline = Callable[[str], Awaitable[OnlineAnswer | None]]
# Whether a turn may go online: yes; no (the mode, or the person said so); unasked (online.mode ask
# and nobody could be asked: the face cannot ask, or did not answer).
OnlineDecision = Literal["yes", "no", "unasked"]

log = logging.getLogger(__name__)


class _TurnAsk:
    """One turn's question about going online: asked once a turn, its answer kept for the turn."""

    def __init__(self, ask: AskOnline) -> None:
        self.ask = ask
        self.answer: OnlineAnswer | None = None
        self.asked = False


class Online:
    def __init__(
        self, config: OnlineConfig, state_dir: Path, in_library: InLibrary,
        remember: Callable[[str], Awaitable[object]] | None = None,
    ):
        self.config = config
        self._state_dir = state_dir
        self._in_library = in_library
        self._search: OnlineSearch | None = None
        self._remember = remember  # "always" / "never": online.mode = on / off, in the config file and now
        self._asking: dict[str, _TurnAsk] = {}  # session id -> the running turn's way to ask its person

    @property
    def mode(self) -> str:
        return self.config.mode

    @contextlib.contextmanager
    def turn(self, session_id: str, ask: AskOnline | None) -> Iterator[None]:
        """While a turn runs: how its face asks the person whether it may go online (None: the face
        cannot ask; under `ask` the turn then stays in the library unless it was allowed for it)."""
        if ask is None:
            yield
            return
        self._asking[session_id] = _TurnAsk(ask)
        try:
            yield
        finally:
            self._asking.pop(session_id, None)

    async def decide(self, session_id: str, choice: object, terms: str) -> OnlineDecision:
        """Whether the running turn of `session_id` may search online for `terms`: never when the
        mode is off or the person said no for the turn (`--no-online`); under `on`, or when they said
        yes for it (`--online`), yes; under `ask`, their face asks them, once a turn."""
        if self.config.mode == "off" or choice is False:
            return "no"
        if self.config.mode == "on" or choice is True:
            return "yes"
        turn = self._asking.get(session_id)
        if turn is None:
            return "unasked"
        if not turn.asked:
            turn.asked = True
            try:
                turn.answer = await turn.ask(terms)
            except Exception as exc:  # the face failed to ask: the turn stays in the library
                log.info("session %s: asking about online search failed (%s)", session_id, type(exc).__name__)
                turn.answer = None
            if turn.answer in ("always", "never") and self._remember is not None:
                try:
                    await self._remember("on" if turn.answer == "always" else "off")
                except ZocratesError as exc:  # e.g. $ZOCRATES_ONLINE__MODE decides: this turn's answer still holds
                    log.warning("the answer about online search holds for this turn, but is not remembered: %s", exc.message)
        if turn.answer is None:
            return "unasked"
        return "yes" if turn.answer in ("once", "always") else "no"

    @property
    def searcher(self) -> OnlineSearch:
        if self._search is None:
            self._search = deferred.load("zocratesd.online.service").OnlineSearch(self.config, self._state_dir)
        return self._search

    async def aclose(self) -> None:
        if self._search is not None:
            await self._search.aclose()

    async def item_for_doi(self, doi: str) -> ItemFields:
        """A new item's fields from a DOI, as Crossref records it (only the DOI leaves the machine);
        OnlineOff when online search is off, NotFound for a DOI Crossref does not know."""
        if self.config.mode == "off":
            raise OnlineOff(OFF_MESSAGE.replace("online search is off", "looking a DOI up online is off"))
        bare = bare_doi(doi)
        if bare is None:
            raise InvalidInput("a DOI looks like 10.1234/abc (or https://doi.org/10.1234/abc)", doi=str(doi)[:80])
        failed = deferred.load("zocratesd.online.service").ProviderFailed
        try:
            work = await self.searcher.by_doi(bare)
        except failed as exc:
            raise OnlineFailed(f"could not look up {bare} at Crossref: {exc}", doi=bare) from None
        if work is None:
            raise NotFound(f"Crossref knows no work with the DOI {bare}", doi=bare)
        return item_from_work(work)

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


def item_from_work(work: OnlineWork) -> ItemFields:
    """A new Zotero item from an online work: its title, authors, year, venue, DOI, link and
    abstract, in Zotero's own fields (a preprint for an arXiv-only work)."""
    creators = []
    for name in work.authors:
        first, _, last = name.rpartition(" ")
        creators.append(Creator("author", first, last) if first else Creator("author", name=name))
    fields = {"DOI": work.doi, "url": work.url or (f"https://doi.org/{work.doi}" if work.doi else None),
              "date": str(work.year) if work.year else None, "abstractNote": work.abstract}
    item_type = "preprint" if work.arxiv_id and not work.doi else "journalArticle"
    if work.venue:
        fields["publicationTitle" if item_type == "journalArticle" else "repository"] = work.venue
    return ItemFields(item_type, work.title, tuple(creators), {k: v for k, v in fields.items() if v})


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
