"""A note's text as Zotero stores it: Markdown rendered to the HTML Zotero's note editor reads, and
the cited sources listed under it with links that select each one in Zotero.

CommonMark through markdown-it-py with raw HTML off: whatever a model or a pasted text put in the
Markdown (a `<script>`, an `onerror=`) arrives in the note as visible text, never as markup. Links
keep only the schemes a reader of a note follows (web pages, mail, Zotero's own).
"""

from __future__ import annotations

import html
from urllib.parse import urlsplit

from markdown_it import MarkdownIt

from zocratesd.writes.operations import Citation

LINK_SCHEMES = frozenset({"http", "https", "mailto", "zotero"})
# Zotero's note editor writes this wrapper around every note it saves (note-editor's schema
# version); a note without it is read the same, with it Zotero does not rewrite it on first open.
NOTE_WRAPPER = '<div data-schema-version="9">{}</div>'


def _link_allowed(url: str) -> bool:
    try:
        scheme = urlsplit(url.strip()).scheme.lower()
    except ValueError:
        return False
    return scheme in LINK_SCHEMES


_markdown = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
_markdown.validateLink = _link_allowed  # type: ignore[method-assign]


def item_uri(library: str, key: str) -> str:
    where = "library" if library == "user" else library
    return f"zotero://select/{where}/items/{key}"


def note_html(markdown: str, citations: tuple[Citation, ...] = ()) -> str:
    """The note: the Markdown as HTML, then a Sources list of the citations its text does not link already."""
    body = _markdown.render(markdown)
    listed = []
    for c in citations:
        uri = item_uri(c.library, c.key)
        if uri in body:
            continue
        label = html.escape(c.title or c.key)
        page = f", p. {html.escape(c.page)}" if c.page else ""
        listed.append(f'<li><a href="{html.escape(uri)}">{label}</a>{page}</li>')
    if listed:
        body += "<h3>Sources</h3>\n<ul>\n" + "\n".join(listed) + "\n</ul>\n"
    return NOTE_WRAPPER.format(body)

