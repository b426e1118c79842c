"""The library as a catalogue: what `search_library` searches (the retriever), the library index's
status and suggestions, and browsing it (search, one item, collections, tags, items) without a
turn. The MCP face's tools, `_zocrates/library/*` and the shim's library routes read it here.

The retriever is the one a caller gave, else the user's Zotero library index (zocratesd/library),
else, for a data dir with no zotero.sqlite but a `library_passages.jsonl` (tests, demos,
benchmarks), those passages. It is made once, on first use: the index's modules are loaded then,
through the library package's own lazy names, so a daemon answers its first requests without them.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, NamedTuple

import anyio
import msgspec

from zocratesd import deferred, locations
from zocratesd.config import ZocratesConfig
from zocratesd.core.validation import (
    check_fulltext_offset,
    check_item_key,
    check_item_keys,
    check_library,
    check_order,
    check_page,
    check_query,
    check_suggestion_limit,
)
from zocratesd.errors import InvalidInput, NotFound
from zocratesd.library import catalog, dense
from zocratesd.library.retrieval import DEFAULT_TOP_K, Hit, InMemoryRetriever, PassageJson, Retriever, Scope, tokens
from zocratesd.library.status import disabled_status, starting_status
from zocratesd.library.suggestions import DEFAULT_SUGGESTIONS, MAX_SUGGESTIONS, Suggestion
from zocratesd.limits import (
    DEFAULT_QUOTE_MATCHES,
    MAX_FIND_QUOTE_CHARS,
    MAX_QUOTE_MATCHES,
    MIN_FIND_QUOTE_WORDS,
    QUERY_KEY_TERMS,
)
from zocratesd.online.works import OnlineWork, title_key
from zocratesd.quotes import sources, verify
from zocratesd.quotes.text import words

if TYPE_CHECKING:
    from zocratesd.library.service import Library

# Where a daemon without a Zotero library index reads passages from, one JSON object per line
# ({item_key, title, text, creators?, year?, page?, collections?}), when its data dir has no
# zotero.sqlite to index: tests, demos and benchmarks use it.
LIBRARY_PASSAGES_FILE: Final = "library_passages.jsonl"
_FIXED_PASSAGES: Final = "this daemon searches a fixed set of passages, not a Zotero library index"

Collection = tuple[str, str, str | None]  # (key, name, parent key)

# The library index's states while it is still reading the library (its first pass, or a later
# pass over what changed): what is indexed so far is only part of it.
READING_STATES: Final = frozenset({"starting", "indexing"})
# A search on a library still being read waits this long at most for the pass to end: a small
# library is read in a second or two, and a first question right after the daemon started would
# otherwise find nothing. A large one takes minutes: the search then answers from what is there,
# and the searches after it do not wait again during that pass.
INDEX_WAIT_S: Final = 5.0
INDEX_POLL_S: Final = 0.05  # how often the waiting search looks at the index's state
# Words of a long query that say little about its topic (beyond the index's own stop words): the
# glue of a pasted abstract, which would otherwise outrank its subject by repetition.
_QUERY_GLUE: Final = frozenset(
    "also all although among any because been before being between both but could during each either et al "
    "further here however if included including less may might more most much no nor not only other over "
    "per same should since so some such through thus under upon using used very were whereas whether which "
    "while within without would".split()
)


def key_terms(query: str, most: int = QUERY_KEY_TERMS) -> str:
    """`query` itself when it has at most `most` distinct content words; else its `most` most
    distinctive ones (repeated and long words first: a pasted abstract's subject repeats, its glue
    is short), in the order they first appear."""
    words = [t for t in tokens(query) if t not in _QUERY_GLUE]
    counts = Counter(words)
    if len(counts) <= most:
        return query
    first = {w: i for i, w in reversed(list(enumerate(words)))}
    kept = sorted(counts, key=lambda w: (-counts[w] * len(w), first[w]))[:most]
    return " ".join(sorted(kept, key=first.__getitem__))


class LibrarySource(NamedTuple):
    retriever: Retriever
    library: Library | None = None  # the Zotero library index, when it is the retriever


class SearchScope(msgspec.Struct, frozen=True):
    mode: str
    collection: str | None
    item_keys: tuple[str, ...]
    library: str | None


class SearchResult(msgspec.Struct, frozen=True):
    """What a turn's `search_library` would find, without a turn, and the index's state then."""

    query: str
    scope: SearchScope
    hits: tuple[Hit, ...]
    library_state: str | None
    library_message: str | None

    def to_json(self) -> dict[str, object]:
        scope = self.scope
        return {
            "query": self.query,
            "scope": {"mode": scope.mode, "collection": scope.collection, "item_keys": list(scope.item_keys),
                      "library": scope.library},
            "passages": [h.as_json() for h in self.hits],
            "library_state": self.library_state,
            "library_message": self.library_message,
        }


def _empty_page(key: str, offset: int | None) -> dict[str, object]:
    return {key: [], "total": 0, "offset": offset or 0, "next_offset": None}


class Catalogue:
    def __init__(
        self, data_dir: Path, config: ZocratesConfig, retriever: Retriever | None,
        find_collection: Callable[[str], Awaitable[str]],
    ) -> None:
        self.data_dir = data_dir
        self.config = config
        # Set once the source is made; the lock keeps two first uses (the import thread and a read
        # on the event loop) from each opening the index.
        self._lock = threading.Lock()
        self._source: LibrarySource | None = LibrarySource(retriever) if retriever is not None else None
        self._find_collection = find_collection  # a key or a name to its key (core/session_config.py)
        # The index pass (its `refreshes` count) during which a search's wait ran out.
        self._waited_out: object = None

    @property
    def source(self) -> LibrarySource:
        made = self._source
        if made is None:
            with self._lock:
                if self._source is None:
                    self._source = self.make_source()
                made = self._source
        return made

    @property
    def made(self) -> LibrarySource | None:
        """The source if made already (what closing needs: nothing to close otherwise)."""
        return self._source

    def make_source(self) -> LibrarySource:
        dense.set_enabled(self.config.library.dense)
        state = locations.state_dir(self.data_dir)
        passages = state / LIBRARY_PASSAGES_FILE
        # The index's modules are the start-up plan's (process/startup.py), loaded by now.
        zotero_db, service = deferred.load("zocratesd.library.zotero_db"), deferred.load("zocratesd.library.service")
        if passages.exists() and not (self.data_dir / zotero_db.ZOTERO_DB).exists():
            return LibrarySource(deferred.load("zocratesd.library.passages").PassagesFile(passages))  # reloaded when it changes
        cfg = self.config.library
        if not cfg.enabled:
            return LibrarySource(InMemoryRetriever([]))
        index = service.Library(
            self.data_dir, state, local_api_url=cfg.local_api_url if cfg.local_api else None,
            poll_interval_s=cfg.poll_interval_s, include_groups=cfg.include_group_libraries,
        )
        return LibrarySource(index, index)

    @property
    def retriever(self) -> Retriever:
        return self.source.retriever

    @property
    def library(self) -> Library | None:
        """The Zotero library index; None when the daemon searches something else."""
        return self.source.library

    async def collections(self) -> list[Collection]:
        """The library's collections: the index's, else (a passages file) the keys its passages name."""
        if self.library is not None:
            return await self.library.collections()
        passages = getattr(self.retriever, "passages", None) or ()
        keys = sorted({c for p in passages for c in p.collections})
        return [(k, k, None) for k in keys]

    def status(self, refresh: bool = False) -> dict[str, Any]:
        made = self._source
        if made is None:
            # The daemon makes the source once the index's modules are loaded (Daemon.start): until
            # then the library has not been looked at, and the status is answered without them.
            return starting_status(self.data_dir, locations.state_dir(self.data_dir) / locations.INDEX_NAME).as_dict()
        if made.library is None:
            return disabled_status(_FIXED_PASSAGES)
        return made.library.status(refresh)

    async def suggestions(self, limit: int | None) -> list[Suggestion]:
        limit = check_suggestion_limit(DEFAULT_SUGGESTIONS if limit is None else limit, MAX_SUGGESTIONS)
        if self.library is None:
            return []
        return list(await self.library.suggestions(limit))

    async def search(
        self, query: str, *, top_k: int = DEFAULT_TOP_K, collection: str | None = None,
        item_keys: tuple[str, ...] = (), library: str | None = None,
    ) -> SearchResult:
        """The passages a turn's search would find. A long query is searched by its key terms
        (`key_terms`; the result's `query` is what was searched). A library still being read is
        waited for (`wait_for_index`); an unknown library or item key is NotFound."""
        query = key_terms(check_query(query, top_k))
        lib = check_library(library)
        if collection is not None and item_keys:
            raise InvalidInput("give a collection or item keys, not both")
        await self.wait_for_index()
        if collection is not None:
            key = await self._find_collection(str(collection))
            scope = Scope(mode="collection", collection=key, library=lib)
        elif item_keys:
            scope = Scope(mode="papers", item_keys=check_item_keys(item_keys), library=lib)
        else:
            scope = Scope(library=lib)
        await self._check_known(lib, scope.item_keys)
        hits = await self.retriever.search(query, scope, top_k)
        status = self.status()
        return SearchResult(
            query, SearchScope(scope.mode, scope.collection, tuple(scope.item_keys), lib), tuple(hits),
            status.get("state"), status.get("message"),
        )

    async def wait_for_index(self) -> None:
        """Until the library index has read the library, at most INDEX_WAIT_S; once a wait has run
        out, no other waits again until that pass is over (its `refreshes` count moves on)."""
        status = self.status()
        if status.get("state") not in READING_STATES or self._waited_out == status.get("refreshes"):
            return
        deadline = time.monotonic() + INDEX_WAIT_S
        while status.get("state") in READING_STATES:
            if time.monotonic() >= deadline:
                self._waited_out = status.get("refreshes")
                return
            await anyio.sleep(INDEX_POLL_S)
            status = self.status()

    async def _check_known(self, library: str | None, item_keys: Sequence[str]) -> None:
        """NotFound naming the library or the item keys the index does not hold (a search there
        would find nothing, and say so as if the library had no passage on it)."""
        if self.library is None or (library is None and not item_keys):
            return

        def unknown(conn: sqlite3.Connection) -> tuple[bool, list[str]]:
            known_lib = library is None or conn.execute(
                "SELECT 1 FROM libraries WHERE library = ?", (library,)).fetchone() is not None
            return known_lib, [k for k in item_keys if catalog.find_uid(conn, k, library) is None]

        found = await self.library.read(unknown)
        if found is None:  # nothing indexed yet: nothing to tell apart
            return
        known_lib, missing = found
        if not known_lib:
            raise NotFound(f"no library {library} in the library index" + self._no_index_hint(), library=library)
        if missing:
            where = f" in {library}" if library else ""
            raise NotFound(f"no item {', '.join(missing[:10])}{'...' if len(missing) > 10 else ''}{where} in the library "
                           "index" + self._no_index_hint(), itemKeys=missing[:10])

    async def item(
        self, key: str, *, library: str | None = None, fulltext: bool = False, fulltext_offset: int = 0
    ) -> dict[str, object]:
        key = check_item_key(key)
        offset = check_fulltext_offset(fulltext_offset)
        lib = check_library(library)
        found = None
        if self.library is not None:
            def read(conn: sqlite3.Connection) -> dict[str, object] | None:
                uid = catalog.find_uid(conn, key, lib)
                return None if uid is None else catalog.get_item(conn, uid, fulltext=fulltext, fulltext_offset=offset)

            found = await self.library.read(read)
        if found is None:
            where = f" in {lib}" if lib else ""
            raise NotFound(f"no item {key}{where} in the library index" + self._no_index_hint(), itemKey=key)
        return found

    async def titles(self, library: str, keys: Sequence[str]) -> dict[str, str]:
        """The titles of items about to be written to; NotFound for keys the library index does not hold."""
        lib = check_library(library) or "user"
        await self._check_known(lib, keys)
        if self.library is None:
            return {}
        return await self.library.read(lambda conn: catalog.titles(conn, lib, keys)) or {}

    async def collection_name(self, library: str, key: str) -> str | None:
        """The name of a collection of the library index (None when it holds none with that key)."""
        lib = check_library(library) or "user"
        if self.library is None:
            return None
        return await self.library.read(lambda conn: catalog.collection_name(conn, lib, key))

    async def in_library(self, works: Sequence[OnlineWork]) -> dict[int, tuple[str, str]]:
        """Which online works the library holds already (same DOI, or same title and year within
        one): index -> (library, item key)."""
        if self.library is None or not works:
            return {}
        dois = [w.doi for w in works if w.doi]
        titles = [w.title for w in works]
        rows = await self.library.read(lambda conn: catalog.items_by_doi_or_title(conn, dois, titles)) or []
        found: dict[int, tuple[str, str]] = {}
        for i, w in enumerate(works):
            for lib, key, title, year, doi in rows:
                same_doi = bool(w.doi and doi and w.doi == doi.lower())
                same_title = title_key(title) == title_key(w.title) and (w.year is None or year is None or abs(w.year - year) <= 1)
                if same_doi or same_title:
                    found[i] = (lib, key)
                    break
        return found

    async def collection_list(self, library: str | None = None) -> list[dict[str, object]]:
        lib = check_library(library)
        if self.library is None:
            return [{"key": k, "name": n, "path": n, "parent_key": p, "library": "user", "library_name": "user",
                     "items": 0, "items_with_subcollections": 0} for k, n, p in await self.collections()]
        return await self.library.read(lambda conn: catalog.collections(conn, lib)) or []

    async def tags(
        self, library: str | None = None, *, limit: int | None = None, offset: int | None = None,
        contains: str | None = None,
    ) -> dict[str, object]:
        lib = check_library(library)
        check_page(limit, offset)
        if self.library is None:
            return _empty_page("tags", offset)
        found = await self.library.read(lambda conn: catalog.tags(conn, lib, limit=limit, offset=offset, contains=contains))
        return found if found is not None else _empty_page("tags", offset)

    async def items(
        self, library: str | None = None, *, limit: int | None = None, offset: int | None = None, order: str = "added"
    ) -> dict[str, object]:
        lib = check_library(library)
        check_page(limit, offset)
        order = check_order(order)
        if self.library is None:
            return _empty_page("items", offset)
        found = await self.library.read(lambda conn: catalog.items(conn, lib, limit=limit, offset=offset, order=order))
        return found if found is not None else _empty_page("items", offset)

    async def check_answer(self, answer: str, passages: Sequence[PassageJson]) -> verify.AnswerCheck:
        """The answer's citations checked against the text of the items they cite (quotes/verify.py);
        `passages`: the turn's last search result, by which a model may cite."""
        if self.library is not None:
            checked = await self.library.read(
                lambda conn: verify.check_answer(answer, passages, lambda key, lib: sources.index_text(conn, key, lib)))
            return checked if checked is not None else verify.check_answer(answer, passages, lambda key, lib: None)
        held = list(getattr(self.retriever, "passages", None) or ())
        return await anyio.to_thread.run_sync(
            lambda: verify.check_answer(answer, passages, lambda key, lib: sources.passages_text(held, key, lib)))

    async def find_quote(self, quote: str, *, library: str | None = None, limit: int | None = None) -> dict[str, object]:
        """The items and pages that have `quote`, exact matches first (quotes/find.py)."""
        find = deferred.load("zocratesd.quotes.find")
        if not isinstance(quote, str) or len(words(quote)) < MIN_FIND_QUOTE_WORDS:
            raise InvalidInput(f"give a quote of at least {MIN_FIND_QUOTE_WORDS} words")
        if len(quote) > MAX_FIND_QUOTE_CHARS:
            raise InvalidInput(f"a quote is at most {MAX_FIND_QUOTE_CHARS} characters", length=len(quote))
        n = DEFAULT_QUOTE_MATCHES if limit is None else limit
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_QUOTE_MATCHES:
            raise InvalidInput(f"limit is a whole number from 1 to {MAX_QUOTE_MATCHES}")
        lib = check_library(library)
        await self.wait_for_index()
        if self.library is not None:
            found = await self.library.read(lambda conn: find.find_in_index(conn, quote, lib, n)) or []
        else:
            held = list(getattr(self.retriever, "passages", None) or ())
            found = await anyio.to_thread.run_sync(lambda: find.find_in_passages(held, quote, lib, n))
        return {"quote": quote, "matches": [m.to_json() for m in found]}

    def _no_index_hint(self) -> str:
        status = self.status()
        state, message = status.get("state"), status.get("message")
        if state == "ready":
            return ""
        return f" (library {state}" + (f": {message}" if message else "") + ")"

    def start(self) -> None:
        """The index's background indexer (a thread of its own): the daemon is ready at once."""
        if self.library is not None:
            self.library.start()

    async def aclose(self) -> None:
        made = self._source  # not made (or being made, left behind by a stop): nothing to close
        if made is not None and made.library is not None:
            await made.library.aclose()
