"""A session's settings: the search scope, the model, the research budget and compaction.

They live in the session's state under `session_config` (written with a bookkeeping state delta,
like a title), so they survive restarts, every face reads the same values, and a rewind keeps them
(`Daemon.rewind`: settings are the user's, not a turn's). A change goes to the session's watchers
as a `ConfigOptions` update (ACP: `config_option_update`).

- `scope`: where a prompt searches when it does not say so itself: the whole library, the papers
  the session's last prompt linked (`session_papers`, remembered from each prompt that links
  items), or a collection (`collection:KEY`, listed by name from the library index). A prompt that
  names its scope (`_meta.zocrates.mode`, the shim's `mode`) or links papers wins for its turn.
- `model`: the configured model or `offline` (engine/models: `model_choices`); the coordinator
  picks it per turn from the state (engine/agent.py).
- `research_budget`: search rounds before a research checkpoint (engine/tools.py reads it).
- `compaction`: whether post-turn compaction runs (`Compactor.after_turn(enabled=...)`).
- `citation_style`: how answers cite in their text: `numbered` ("[2]"), `author-year` ("(Lewis et
  al., 2020)") or `pandoc` ("[@lewis2020retrieval]", the item's citation key) for Markdown and
  LaTeX writers (engine/tools.py passes it to the answerer, engine/agent.py to a model).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import msgspec
from msgspec.structs import replace

from zocratesd.config import ZocratesConfig
from zocratesd.core.context import PromptContext
from zocratesd.engine import SESSION_CONFIG_KEY
from zocratesd.engine.models import model_choices, model_id
from zocratesd.errors import InvalidInput
from zocratesd.limits import CITATION_STYLES, ITEM_KEY_RE
from zocratesd.store import SessionLocks, SessionsDb
from zocratesd.updates import ConfigChoice, ConfigOption, ConfigOptions, Update

# The papers of the session's last prompt that linked any (`[{item_key, title}]`): the "papers" scope.
PAPERS_KEY = "session_papers"

SCOPE, MODEL, RESEARCH_BUDGET, COMPACTION = "scope", "model", "research_budget", "compaction"
CITATION_STYLE = "citation_style"
OPTION_IDS = (SCOPE, MODEL, RESEARCH_BUDGET, COMPACTION, CITATION_STYLE)
LIBRARY, PAPERS, COLLECTION_PREFIX = "library", "papers", "collection:"
# The stored keys each setting writes.
_FIELDS = {SCOPE: ("scope", "collection"), MODEL: ("model",), RESEARCH_BUDGET: ("research_budget",),
           COMPACTION: ("compaction",), CITATION_STYLE: ("citation_style",)}
# A budget is rounds per turn (one search each, in a few milliseconds offline; a model call each
# on a real model): ten covers any question the planner splits (engine/research.py MAX_ASPECTS is
# 8) plus guidance, and keeps the list an editor shows short.
MAX_RESEARCH_BUDGET = 10
# Collections listed in the scope setting. The whole list goes out with every change to every
# attached editor; a library with more gets the first ones by name (`/collection NAME` reaches all).
MAX_LISTED_COLLECTIONS = 500
# A collection's name in the list shows this many ancestors ("Parent / Child"), enough to tell
# same-named subcollections apart without a path longer than a dropdown.
MAX_PATH_DEPTH = 4

STYLE_NAMES = {"numbered": "Numbered [1]", "author-year": "Author-year (Lewis, 2020)", "pandoc": "Pandoc [@key]"}

Collections = Callable[[], Awaitable[list[tuple[str, str, str | None]]]]
Publish = Callable[[str, Update], Awaitable[None]]


class SessionSettings(msgspec.Struct, frozen=True):
    scope: str  # "library" | "papers" | "collection"
    collection: str | None
    model: str
    research_budget: int
    compaction: bool
    citation_style: str = "numbered"

    def to_state(self) -> dict[str, object]:
        return {
            "scope": self.scope, "collection": self.collection, "model": self.model,
            "research_budget": self.research_budget, "compaction": self.compaction, "citation_style": self.citation_style,
        }

    @property
    def scope_value(self) -> str:
        return f"{COLLECTION_PREFIX}{self.collection}" if self.scope == "collection" else self.scope


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class SessionConfig:
    """Reads, validates, stores and announces sessions' settings (one per daemon)."""

    def __init__(
        self, db: SessionsDb, locks: SessionLocks, config: ZocratesConfig, *, collections: Collections,
        publish: Publish,
    ) -> None:
        self.db = db
        self.locks = locks
        self.config = config  # read at each use: the research budget may change live (core/settings.py)
        self.models = model_choices(config.model)
        self._collections = collections
        self._publish = publish

    @property
    def defaults(self) -> SessionSettings:
        """What a session that never changed a setting runs with: the daemon's config."""
        return SessionSettings(
            scope=LIBRARY, collection=None, model=model_id(self.config.model),
            research_budget=max(1, min(self.config.research.initial_budget, MAX_RESEARCH_BUDGET)), compaction=True,
        )

    def from_state(self, state: Mapping[str, Any]) -> SessionSettings:
        """The session's settings; defaults for what it never set (or what is no longer valid:
        a model the config no longer has runs on the configured one)."""
        raw = state.get(SESSION_CONFIG_KEY)
        d = self.defaults
        if not isinstance(raw, dict):
            return d
        scope: str = raw["scope"] if raw.get("scope") in (LIBRARY, PAPERS, "collection") else d.scope
        collection = raw.get("collection") if isinstance(raw.get("collection"), str) else None
        if scope == "collection" and (collection is None or not ITEM_KEY_RE.match(collection)):
            scope, collection = d.scope, None
        model: str = raw["model"] if raw.get("model") in self.models else d.model
        budget = _int(raw.get("research_budget"))
        compaction = raw.get("compaction")
        style = raw.get("citation_style")
        return SessionSettings(
            scope=scope, collection=collection if scope == "collection" else None, model=model,
            research_budget=budget if budget is not None and 1 <= budget <= MAX_RESEARCH_BUDGET else d.research_budget,
            compaction=compaction if isinstance(compaction, bool) else d.compaction,
            citation_style=style if style in CITATION_STYLES else d.citation_style,
        )

    def view(self, settings: SessionSettings) -> dict[str, object]:
        """The settings as a UI session shows them: `{scope, model, research_budget, compaction}`,
        `scope` as the option's value (`library`, `papers`, `collection:KEY`)."""
        return {SCOPE: settings.scope_value, MODEL: settings.model, RESEARCH_BUDGET: settings.research_budget,
                COMPACTION: settings.compaction, CITATION_STYLE: settings.citation_style}

    async def settings(self, session_id: str) -> SessionSettings:
        return self.from_state(await self.db.reader.session_state(session_id))  # SessionNotFound if gone

    # --- the option set -----------------------------------------------------------------------

    async def options(self, settings: SessionSettings) -> tuple[ConfigOption, ...]:
        """Every setting with its choices and current value, in the order editors show them."""
        scopes = [ConfigChoice(LIBRARY, "Whole library", "Search every item outside the trash"),
                  ConfigChoice(PAPERS, "Linked papers", "The papers the last prompt linked")]
        listed = await self.collection_names()
        scopes += [ConfigChoice(f"{COLLECTION_PREFIX}{key}", f"Collection: {name}") for key, name in listed.items()]
        if settings.scope == "collection" and settings.collection not in listed:
            # Chosen earlier, gone from the library (or past the list's cap): still shown as current.
            scopes.append(ConfigChoice(settings.scope_value, f"Collection {settings.collection}"))
        budgets = [ConfigChoice(str(n), f"{n} round{'s' if n > 1 else ''}") for n in range(1, MAX_RESEARCH_BUDGET + 1)]
        return (
            ConfigOption(SCOPE, "Scope", "Where questions are searched: the library, linked papers or a collection",
                         "mode", settings.scope_value, tuple(scopes)),
            ConfigOption(MODEL, "Model", "The model answers run on", "model", settings.model,
                         tuple(ConfigChoice(k, v) for k, v in self.models.items())),
            ConfigOption(RESEARCH_BUDGET, "Research budget", "Search rounds per turn before asking to go on",
                         "model_config", str(settings.research_budget), tuple(budgets)),
            ConfigOption(COMPACTION, "Compaction", "Summarise older turns when the conversation grows long",
                         "model_config", settings.compaction),
            ConfigOption(CITATION_STYLE, "Citation style", "How answers cite: [1], (Author, Year) or Pandoc's [@key]",
                         "model_config", settings.citation_style, tuple(ConfigChoice(k, v) for k, v in STYLE_NAMES.items())),
        )

    async def collection_names(self) -> dict[str, str]:
        """Key -> display name ("Parent / Child") of the library's collections, sorted by name."""
        rows = await self._collections()
        by_key = {k: (n, p) for k, n, p in rows}

        def path(key: str) -> str:
            names: list[str] = []
            seen: set[str] = set()
            cur: str | None = key
            while cur is not None and cur in by_key and cur not in seen and len(names) < MAX_PATH_DEPTH:
                seen.add(cur)
                name, cur = by_key[cur]
                names.append(name)
            return " / ".join(reversed(names))

        named = sorted(((path(k), k) for k in by_key), key=lambda nk: (nk[0].casefold(), nk[1]))
        return {k: n for n, k in named[:MAX_LISTED_COLLECTIONS]}

    # --- changing them ------------------------------------------------------------------------

    async def validate(self, settings: SessionSettings, config_id: str, value: Any) -> SessionSettings:
        """`settings` with one setting changed; InvalidInput naming the choices if `value` is not one.
        A boolean setting also takes "on"/"off", for clients without boolean options."""
        if config_id == SCOPE:
            if value in (LIBRARY, PAPERS):
                return replace(settings, scope=value, collection=None)
            if isinstance(value, str) and value.startswith(COLLECTION_PREFIX):
                key = value[len(COLLECTION_PREFIX):]
                if key in await self.collection_names() or key == settings.collection:
                    return replace(settings, scope="collection", collection=key)
                raise InvalidInput(f"no collection with key {key[:40]!r} in the library", configId=config_id)
            raise InvalidInput('scope is "library", "papers" or "collection:KEY"', configId=config_id)
        if config_id == MODEL:
            if value in self.models:
                return replace(settings, model=value)
            raise InvalidInput(f"model is one of {', '.join(self.models)}", configId=config_id)
        if config_id == RESEARCH_BUDGET:
            n = _int(value) if not isinstance(value, str) else (int(value) if re.fullmatch(r"\d{1,3}", value) else None)
            if n is None or not 1 <= n <= MAX_RESEARCH_BUDGET:
                raise InvalidInput(f"research_budget is a number of rounds from 1 to {MAX_RESEARCH_BUDGET}", configId=config_id)
            return replace(settings, research_budget=n)
        if config_id == COMPACTION:
            on = {True: True, False: False, "on": True, "off": False, "true": True, "false": False}.get(value)
            if on is None or (not isinstance(value, (bool, str))):
                raise InvalidInput('compaction is true or false ("on" or "off")', configId=config_id)
            return replace(settings, compaction=on)
        if config_id == CITATION_STYLE:
            if value in CITATION_STYLES:
                return replace(settings, citation_style=value)
            raise InvalidInput(f"citation_style is one of {', '.join(CITATION_STYLES)}", configId=config_id)
        raise InvalidInput(f"unknown setting {str(config_id)[:40]!r}; the settings are {', '.join(OPTION_IDS)}",
                           configId=str(config_id)[:40])

    async def initial(self, changes: Mapping[str, Any]) -> dict[str, object]:
        """What a new session stores of the settings it starts with (`{config_id: value}`, each
        checked as `set` checks it); InvalidInput naming the choices of the first that is not one."""
        settings, stored = self.defaults, {}
        for config_id, value in changes.items():
            settings = await self.validate(settings, config_id, value)
            stored.update({k: v for k, v in settings.to_state().items() if k in _FIELDS[config_id]})
        return stored

    async def set(self, session_id: str, config_id: str, value: Any, *, origin: str | None = None) -> tuple[ConfigOption, ...]:
        """Change one setting of a session, store it and tell the session's watchers (all but
        `origin`, the client that asked, which gets the options in its answer). SessionBusy while
        a turn holds the session (its writes would race this one); SessionNotFound if it is gone."""
        with self.locks.hold(session_id, "settings"):
            state = await self.db.reader.session_state(session_id)  # SessionNotFound if gone
            settings = await self.validate(self.from_state(state), config_id, value)
            # Only what the user set is stored: the rest follows the daemon's config as it changes.
            stored = dict(state.get(SESSION_CONFIG_KEY) or {})
            stored.update({k: v for k, v in settings.to_state().items() if k in _FIELDS[config_id]})
            await self.db.append_state(session_id, {SESSION_CONFIG_KEY: stored})
        options = await self.options(settings)
        await self._publish(session_id, ConfigOptions(options, origin))
        return options

    async def find_collection(self, name: str) -> str:
        """The key of the collection called `name` (its key, its name or its "Parent / Child" path,
        case-insensitively; else the one name that contains it). InvalidInput, with the candidates,
        when none or several match."""
        wanted = " ".join(name.split())
        if not wanted:
            raise InvalidInput("name a collection: /collection NAME")
        names = await self.collection_names()
        if wanted in names:
            return wanted
        folded = wanted.casefold()
        exact = [k for k, n in names.items() if folded in (n.casefold(), n.rsplit(" / ", 1)[-1].casefold())]
        found = exact or [k for k, n in names.items() if folded in n.casefold()]
        if len(found) == 1:
            return found[0]
        if not found:
            raise InvalidInput(f"no collection called {wanted[:80]!r} in the library", name=wanted[:80])
        shown = "; ".join(names[k] for k in found[:8])
        raise InvalidInput(f"{len(found)} collections match {wanted[:80]!r}: {shown}", name=wanted[:80])

    # --- a turn's scope -----------------------------------------------------------------------

    def turn_context(self, state: Mapping[str, Any], context: PromptContext) -> tuple[PromptContext, dict[str, object]]:
        """The context a turn runs with, and what it adds to the turn's state delta.

        A prompt that chose its scope (or linked papers) keeps it, and its papers become the
        session's "linked papers"; one that did not searches where the session's scope says.
        InvalidInput when that is "papers" and no prompt of the session has linked any yet."""
        if context.scope_given:
            extra: dict[str, object] = {PAPERS_KEY: [{"item_key": k, "title": t} for k, t in context.items]} if context.items else {}
            return context, extra
        settings = self.from_state(state)
        if settings.scope == PAPERS:
            papers = state.get(PAPERS_KEY)
            if not papers:
                raise InvalidInput(
                    'the scope is "papers" (linked papers), and no prompt of this session has linked a paper yet: '
                    "link papers to the prompt, or choose another scope (/library, /collection NAME)"
                )
            return PromptContext.build(mode=PAPERS, items=papers, snippets=context.snippets), {}
        if settings.scope == "collection":
            return PromptContext.build(mode="collection", collection=settings.collection, snippets=context.snippets), {}
        return context, {}
