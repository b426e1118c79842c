"""The Zotero context a prompt comes with, as the session state keys of spec 2.3.

A client sends the scope (papers, a collection, or the whole library), the selected items and any
focal snippets (passages or images the user pointed at). They become, on the user event's
`state_delta` (so a rewind restores them exactly):

- `active_mode`: "papers" | "collection" | "library";
- `active_context_items`: `[{item_key, title}]`, or None for the whole library;
- `active_collection`: the collection key in "collection" mode, else None;
- `active_library`: "user" or "groups/<groupID>" to search one library only, else None (all);
- `active_context_items_str`: the markdown header injected into the coordinator's prompt;
- `focal_snippets_str`: the snippets as XML for prompts, with `key="..."` stripped (the model needs
  the text, not our keys; the keys stay in `snippets` for the retrieval tools);
- `snippets`: this turn's snippets with full provenance.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal, cast, get_args

import msgspec

from zocratesd.errors import InvalidInput
from zocratesd.library.retrieval import Mode, Scope
from zocratesd.limits import ITEM_KEY_RE, LIBRARY_RE, MAX_ACTIVE_ITEMS, MAX_ITEM_TITLE_CHARS, MAX_SNIPPET_CHARS, MAX_SNIPPETS

KEY_ATTR_RE = re.compile(r'\s+key="[^"]*"')


class Snippet(msgspec.Struct, frozen=True):
    kind: Literal["text", "image"]
    item_key: str
    text: str = ""
    title: str = ""
    page: int | None = None
    key: str | None = None  # the annotation's or attachment's key: provenance for retrieval tools

    def as_json(self) -> dict[str, object]:
        return {k: v for k, v in msgspec.structs.asdict(self).items() if v not in (None, "")}


class PromptContext(msgspec.Struct, frozen=True):
    mode: Mode = "library"
    items: tuple[tuple[str, str], ...] = ()  # (item_key, title)
    collection: str | None = None
    snippets: tuple[Snippet, ...] = ()
    # The prompt named its scope (a mode, or items): False lets the session's `scope` setting
    # choose (core/session_config.py); a "library" setting changes nothing either way.
    scope_given: bool = False
    library: str | None = None  # "user" or "groups/<groupID>": search that library only
    # The person's choice for this turn's search beyond the library: True allows it (their consent
    # under online.mode = ask), False forbids it, None leaves it to online.mode.
    online: bool | None = None

    @classmethod
    def build(
        cls,
        *,
        mode: str | None = None,
        items: Sequence[tuple[str, str] | Mapping[str, Any]] | None = None,
        collection: str | None = None,
        snippets: Sequence[Snippet | Mapping[str, Any]] | None = None,
        library: str | None = None,
        online: bool | None = None,
    ) -> PromptContext:
        """The context of one prompt, validated; InvalidInput (naming the problem) if it is not one.

        Each face maps its own wire format onto these arguments; the values may come straight from
        a client's JSON, so every type is checked here. `items` are `(item_key, title)` pairs or
        `{"item_key", "title"}` objects; `snippets` are Snippets or `{"kind"?, "item_key", "text"?,
        "title"?, "page"?, "key"?}` objects. `mode` defaults to "papers" when items are given, else
        "library"; a `collection` counts only in "collection" mode; `library` ("user" or
        "groups/<groupID>") narrows any mode to one library.
        """
        chosen = mode or ("papers" if items else "library")
        if chosen not in get_args(Mode):
            raise InvalidInput('mode must be "papers", "collection" or "library"', mode=chosen)
        checked = cast(Mode, chosen)
        active = tuple(_item(it) for it in _list(items, "active items", MAX_ACTIVE_ITEMS))
        collection = _key(collection, "collection") if checked == "collection" else None
        if checked == "papers" and not active:
            raise InvalidInput('mode "papers" needs at least one active item')
        focal = tuple(_snippet(sn) for sn in _list(snippets, "snippets", MAX_SNIPPETS))
        if library is not None and (not isinstance(library, str) or not LIBRARY_RE.match(library)):
            raise InvalidInput('library must be "user" or "groups/<groupID>"', value=str(library)[:40])
        if online is not None and not isinstance(online, bool):
            raise InvalidInput("online must be true or false")
        return cls(mode=checked, items=active, collection=collection, snippets=focal, scope_given=bool(mode or items),
                   library=library, online=online)

    def scope(self) -> Scope:
        return Scope(mode=self.mode, item_keys=tuple(k for k, _ in self.items), collection=self.collection, library=self.library)

    def state_delta(self) -> dict[str, object]:
        return {
            "active_mode": self.mode,
            "active_context_items": [{"item_key": k, "title": t} for k, t in self.items] or None,
            "active_collection": self.collection,
            "active_library": self.library,
            "online_allowed": self.online,
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


def escape(text: str) -> str:
    """XML character data: `&`, `<` and `>` escaped (as xml.sax.saxutils.escape, whose import
    pulls in xml.sax and urllib.request before the daemon's first reply: bench/PROFILE.md)."""
    return text.replace("&", "&amp;").replace(">", "&gt;").replace("<", "&lt;")


_ATTR_ENTITIES: Final = str.maketrans({"\n": "&#10;", "\r": "&#13;", "\t": "&#9;"})


def quoteattr(text: str) -> str:
    """An XML attribute value, quoted, exactly as xml.sax.saxutils.quoteattr makes it: escaped,
    line breaks and tabs as character references, in single quotes when it holds only `"`."""
    data = escape(text).translate(_ATTR_ENTITIES)
    if '"' not in data:
        return f'"{data}"'
    if "'" in data:
        return '"' + data.replace('"', "&quot;") + '"'
    return f"'{data}'"


def strip_keys(xml: str) -> str:
    return KEY_ATTR_RE.sub("", xml)


def _list(value: Any, name: str, limit: int) -> Sequence[Any]:
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)):
        raise InvalidInput(f"{name} must be a list")
    if len(value) > limit:
        raise InvalidInput(f"at most {limit} {name}", count=len(value))
    return value


def _item(value: Any) -> tuple[str, str]:
    if isinstance(value, tuple) and len(value) == 2:
        key, title = value
    elif isinstance(value, Mapping):
        key, title = value.get("item_key"), value.get("title", "")
    else:
        raise InvalidInput("each active item is an object {item_key, title}")
    return _key(key, "item_key"), _text(title, "title", MAX_ITEM_TITLE_CHARS)


def _snippet(value: Any) -> Snippet:
    if isinstance(value, Snippet):
        value = msgspec.structs.asdict(value)
    if not isinstance(value, Mapping):
        raise InvalidInput("each snippet is an object")
    kind = value.get("kind", "text")
    if kind not in ("text", "image"):
        raise InvalidInput('a snippet kind is "text" or "image"')
    page = value.get("page")
    if page is not None and (not isinstance(page, int) or isinstance(page, bool) or page < 0):
        raise InvalidInput("a snippet page is a non-negative integer")
    key = value.get("key")
    return Snippet(
        kind=kind,
        item_key=_key(value.get("item_key"), "snippet item_key"),
        text=_text(value.get("text", ""), "snippet text", MAX_SNIPPET_CHARS),
        title=_text(value.get("title", ""), "snippet title", MAX_ITEM_TITLE_CHARS),
        page=page,
        key=_key(key, "snippet key") if key is not None else None,
    )


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
