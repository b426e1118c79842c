"""The Zotero context a prompt comes with, as the session state keys of spec 2.3.

A client sends the scope (papers, a collection, or the whole library), the selected items and any
focal snippets (passages or images the user pointed at). They become, on the user event's
`state_delta` (so a rewind restores them exactly):

- `active_mode`: "papers" | "collection" | "library";
- `active_context_items`: `[{item_key, title}]`, or None for the whole library;
- `active_collection`: the collection key in "collection" mode, else None;
- `active_context_items_str`: the markdown header injected into the coordinator's prompt;
- `focal_snippets_str`: the snippets as XML for prompts, with `key="..."` stripped (the model needs
  the text, not our keys; the keys stay in `snippets` for the retrieval tools);
- `snippets`: this turn's snippets with full provenance.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal
from xml.sax.saxutils import escape, quoteattr

from zocratesd.engine.retrieval import Mode, Passage, Scope
from zocratesd.errors import InvalidInput

# Limits on what a client may attach to one prompt. Zotero selections of hundreds of items happen
# (a whole collection selected); 500 keeps the header readable and the state delta small.
MAX_ACTIVE_ITEMS = 500
MAX_SNIPPETS = 50
MAX_SNIPPET_CHARS = 20_000
ITEM_KEY_RE = re.compile(r"^[A-Z0-9]{8}$")  # Zotero item and collection keys: 8 chars of [23456789A-Z]
KEY_ATTR_RE = re.compile(r'\s+key="[^"]*"')


@dataclass(frozen=True)
class Snippet:
    kind: Literal["text", "image"]
    item_key: str
    text: str = ""
    title: str = ""
    page: int | None = None
    key: str | None = None  # the annotation's or attachment's key: provenance for retrieval tools

    def as_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v not in (None, "")}


@dataclass(frozen=True)
class PromptContext:
    mode: Mode = "library"
    items: tuple[tuple[str, str], ...] = ()  # (item_key, title)
    collection: str | None = None
    snippets: tuple[Snippet, ...] = field(default_factory=tuple)

    @classmethod
    def from_wire(cls, raw: Any) -> PromptContext:
        """Validate `_meta.zocrates` of a prompt (or the shim's body fields); InvalidInput if bad."""
        if raw is None:
            return cls()
        if not isinstance(raw, dict):
            raise InvalidInput('"_meta.zocrates" must be an object')
        mode = raw.get("mode") or ("papers" if raw.get("activeItems") else "library")
        if mode not in ("papers", "collection", "library"):
            raise InvalidInput('mode must be "papers", "collection" or "library"', mode=mode)
        items = []
        for it in _list(raw.get("activeItems"), "activeItems", MAX_ACTIVE_ITEMS):
            if not isinstance(it, dict):
                raise InvalidInput("each active item is an object {item_key, title}")
            items.append((_key(it.get("item_key"), "item_key"), _text(it.get("title", ""), "title", 1000)))
        collection = raw.get("collection")
        if mode == "collection":
            collection = _key(collection, "collection")
        elif collection is not None:
            collection = None
        if mode == "papers" and not items:
            raise InvalidInput('mode "papers" needs at least one active item')
        snippets = []
        for sn in _list(raw.get("snippets"), "snippets", MAX_SNIPPETS):
            if not isinstance(sn, dict):
                raise InvalidInput("each snippet is an object")
            kind = sn.get("kind", "text")
            if kind not in ("text", "image"):
                raise InvalidInput('a snippet kind is "text" or "image"')
            page = sn.get("page")
            if page is not None and (not isinstance(page, int) or isinstance(page, bool) or page < 0):
                raise InvalidInput("a snippet page is a non-negative integer")
            key = sn.get("key")
            snippets.append(
                Snippet(
                    kind=kind,
                    item_key=_key(sn.get("item_key"), "snippet item_key"),
                    text=_text(sn.get("text", ""), "snippet text", MAX_SNIPPET_CHARS),
                    title=_text(sn.get("title", ""), "snippet title", 1000),
                    page=page,
                    key=_key(key, "snippet key") if key is not None else None,
                )
            )
        return cls(mode=mode, items=tuple(items), collection=collection, snippets=tuple(snippets))

    def scope(self) -> Scope:
        return Scope(mode=self.mode, item_keys=tuple(k for k, _ in self.items), collection=self.collection)

    def state_delta(self) -> dict[str, Any]:
        return {
            "active_mode": self.mode,
            "active_context_items": [{"item_key": k, "title": t} for k, t in self.items] or None,
            "active_collection": self.collection,
            "active_context_items_str": self.items_header(),
            "focal_snippets_str": strip_keys(self.snippets_xml()),
            "snippets": [s.as_json() for s in self.snippets],
        }

    def items_header(self) -> str:
        if self.mode == "library":
            return "# Active Zotero Selection Context\nScope: the whole library."
        if self.mode == "collection":
            return f"# Active Zotero Selection Context\nScope: the collection {self.collection}."
        lines = ["# Active Zotero Selection Context", f"Scope: {len(self.items)} selected item(s):"]
        lines += [f"- {title or '(untitled)'} [{key}]" for key, title in self.items]
        return "\n".join(lines)

    def snippets_xml(self) -> str:
        out = []
        for s in self.snippets:
            attrs = f' key={quoteattr(s.key)}' if s.key else ""
            attrs += f" item_key={quoteattr(s.item_key)}"
            if s.title:
                attrs += f" title={quoteattr(s.title)}"
            if s.page is not None:
                attrs += f' page="{s.page}"'
            if s.kind == "image":
                out.append(f"<image_snippet{attrs}/>")
            else:
                out.append(f"<text_snippet{attrs}>{escape(s.text)}</text_snippet>")
        return "\n".join(out)

    def snippet_passages(self) -> list[Passage]:
        """Focal text snippets as evidence: the user pointed at them, so they rank first."""
        return [
            Passage(item_key=s.item_key, title=s.title or s.item_key, text=s.text, page=s.page, attachment_key=s.key)
            for s in self.snippets
            if s.kind == "text" and s.text
        ]


def strip_keys(xml: str) -> str:
    return KEY_ATTR_RE.sub("", xml)


def _list(value: Any, name: str, limit: int) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise InvalidInput(f"{name} must be a list")
    if len(value) > limit:
        raise InvalidInput(f"at most {limit} {name}", count=len(value))
    return value


def _key(value: Any, name: str) -> str:
    if not isinstance(value, str) or not ITEM_KEY_RE.match(value):
        raise InvalidInput(f"{name} must be a Zotero key (8 characters, A-Z and 0-9)", value=str(value)[:40])
    return value


def _text(value: Any, name: str, limit: int) -> str:
    if not isinstance(value, str):
        raise InvalidInput(f"{name} must be a string")
    if len(value) > limit:
        raise InvalidInput(f"{name} is longer than {limit} characters")
    return value
