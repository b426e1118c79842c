"""Limits on what a client may send, shared by the core (which enforces them) and the faces (which
declare them in their schemas). protocol/README.md ("Limits") lists them for clients.

A leaf module: nothing from zocratesd, so any layer may import it.
"""

from __future__ import annotations

import re
from typing import Final

# Identifiers from outside, as JSON Schema patterns (the wire models', the MCP tools'): there `$`
# is the end of the input (ECMA-262, pydantic's Rust regex). Python's `$` also matches before a
# final newline, so Python code matches them through `whole()`.
#
# Session ids we mint look like "session-1733190000123-a1b2c3"; ids from other tools (ADK's
# uuid4s) are accepted too. Anything else is refused before it reaches SQL or a path.
SESSION_ID_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$"
# Zotero item and collection keys: 8 characters of [23456789A-Z] (any A-Z0-9 is accepted). A key
# names a folder under Zotero's storage/, so anything else is refused.
ITEM_KEY: Final = r"[A-Z0-9]{8}"
ITEM_KEY_PATTERN: Final = rf"^{ITEM_KEY}$"
# A library, as in zotero:// links: the user's own, or a group by its numeric id.
GROUP_LIBRARY: Final = r"groups/[1-9][0-9]{0,11}"
LIBRARY_PATTERN: Final = rf"^(user|{GROUP_LIBRARY})$"
# An item's zotero:// link (an MCP resource's URI, a resource link in a prompt, a cited source):
# its library (group 1), its key (group 2).
ITEM_URI: Final = rf"zotero://select/(library|{GROUP_LIBRARY})/items/({ITEM_KEY})"
ITEM_URI_PATTERN: Final = rf"^{ITEM_URI}$"


def whole(pattern: str) -> re.Pattern[str]:
    """A JSON Schema pattern compiled for Python, its final `$` the end of the input (`\\Z`)."""
    if pattern.endswith("$") and not pattern.endswith("\\$"):
        pattern = pattern[:-1] + r"\Z"
    return re.compile(pattern)


# The patterns above for Python code (`ITEM_KEY_RE.match(key)`).
SESSION_ID_RE: Final = whole(SESSION_ID_PATTERN)
ITEM_KEY_RE: Final = whole(ITEM_KEY_PATTERN)
LIBRARY_RE: Final = whole(LIBRARY_PATTERN)
ITEM_URI_RE: Final = whole(ITEM_URI_PATTERN)
# An answer's `# Cited Sources` entry: "[2] Lewis et al. (2020). Title. p. 4. (zotero://select/library/items/KEY)":
# its number (group 1), link (2), library (3) and key (4).
CITED_SOURCE_RE: Final = re.compile(rf"^\[(\d+)\] .*\(({ITEM_URI})\)\s*$", re.M)


# A title is a sidebar row and a `session/list` entry, not a paragraph.
MAX_TITLE_CHARS: Final = 200
# A prompt longer than this is refused: ~25k tokens of question is a pasted paper, which belongs in
# Zotero (and comes in as snippets), not in one chat message.
MAX_PROMPT_CHARS: Final = 100_000
# Invocation ids (ADK's "e-" + uuid4) and interrupt ids ("interrupt_ext_2") are ours; a longer one
# cannot be, and is refused before it is looked up.
MAX_INTERRUPT_ID_CHARS: Final = 256
# Guidance with a checkpoint answer becomes a search query: a paragraph, not a document.
MAX_GUIDANCE_CHARS: Final = 2000

# The Zotero context of one prompt. Zotero selections of hundreds of items happen (a whole
# collection selected); 500 keeps the header readable and the state delta small.
MAX_ACTIVE_ITEMS: Final = 500
MAX_SNIPPETS: Final = 50
MAX_SNIPPET_CHARS: Final = 20_000
# Titles of active items and snippets: a paper's title, with room for a long subtitle.
MAX_ITEM_TITLE_CHARS: Final = 1000

# A library search's query (`_zocrates/library/search`): a question, keywords, or a pasted
# abstract or page of a paper (what a researcher looks up "papers like this" with); longer is a
# document, not a query.
MAX_QUERY_CHARS: Final = 20_000
# A query with more content words than this is searched by its most distinctive ones
# (core/catalogue.py `key_terms`): the index matches on at most this many (library/index.py
# MAX_QUERY_TERMS), which would otherwise be the first words of a pasted abstract.
QUERY_KEY_TERMS: Final = 24
# Passages one library search returns: a page of results a model can read.
MAX_SEARCH_TOP_K: Final = 50
# Passages a library search returns when the caller does not say (the daemon's `topK`, the MCP
# `search_library`'s `top_k`): what a turn's own search reads.
DEFAULT_SEARCH_TOP_K: Final = 6
# A collection named by a client (its key, name or "Parent / Child" path): a deep path fits.
MAX_COLLECTION_REF_CHARS: Final = 500
# The text a tag list is filtered by: a word or two.
MAX_TAG_FILTER_CHARS: Final = 200
# List pages (tags, items): the most one call returns (a client pages past it with `offset`),
# and what it returns when it does not say.
MAX_LIST: Final = 500
DEFAULT_LIST: Final = 50
# Questions drawn from the library for a client's first screen.
MAX_SUGGESTIONS: Final = 8
DEFAULT_SUGGESTIONS: Final = 4
# Research rounds a turn may take before it asks (a session's `research_budget` option).
MAX_RESEARCH_BUDGET: Final = 10
# Content blocks of one ACP prompt: a question and the papers linked to it, not an archive.
MAX_PROMPT_BLOCKS: Final = 1000
# A config option's id (`scope`, `model`, ...): anything longer is no option of ours.
MAX_CONFIG_ID_CHARS: Final = 64
# ACP protocol versions are 16-bit unsigned integers (the ACP schema's `ProtocolVersion`).
MAX_PROTOCOL_VERSION: Final = 65535
# An origin as a browser sends it in `Origin` (scheme, host, optional port; no path): what
# `http.allowed_origins` lists, and what the web app's CSP `frame-ancestors` may name. No wildcard,
# and nothing that could end a CSP source or directive (space, `;`, `,`, a quote). Match it whole
# (`re.fullmatch`), ignoring case.
ORIGIN_PATTERN: Final = r"[a-z][a-z0-9+.-]*://[^\s/?#*@;,'\"]+"


# Where a page of a list starts (`offset`, get_item's `fulltext_offset`, an MCP resource cursor):
# no list comes near it, and a larger integer is no longer exact in JavaScript (the web app's and
# many MCP hosts' language) nor, past 2**63, an integer SQLite can bind.
MAX_OFFSET: Final = 2**53 - 1

# How often the library indexer looks for changes in Zotero (library.poll_interval_s): a look is
# two stat() calls, and an edit is searchable within about this plus the time it takes to index.
DEFAULT_POLL_INTERVAL_S: Final = 2.0

# Writes into Zotero (zocratesd/writes). Zotero's API takes at most 50 objects per write request,
# so one write touches at most that many items and is one request (its undo too).
MAX_WRITE_ITEMS: Final = 50
# Zotero's sync server refuses tags over 255 characters (a tag written locally would never sync).
MAX_TAG_CHARS: Final = 255
# Tags one write adds or removes: a handful, not a vocabulary.
MAX_WRITE_TAGS: Final = 20
# A note is an answer or a summary; this is a book.
MAX_NOTE_CHARS: Final = 200_000
MAX_COLLECTION_NAME_CHARS: Final = 255
# A new item's field (an abstract is the longest) and its creators.
MAX_FIELD_CHARS: Final = 10_000
MAX_CREATORS: Final = 100
# A write's id as the journal makes it ("w-" and 12 hex digits); a longer one is no write of ours.
WRITE_ID_PATTERN: Final = r"^w-[0-9a-f]{12}$"
WRITE_ID_RE: Final = whole(WRITE_ID_PATTERN)

# A search beyond the library (zocratesd/online): its terms are what leaves the machine, so a
# pasted text is refused; works per provider a person reads in one answer.
MAX_ONLINE_QUERY_CHARS: Final = 500
MAX_ONLINE_RESULTS: Final = 25
DEFAULT_ONLINE_RESULTS: Final = 10

# Items one bibliography export takes (`_zocrates/citations/export`, MCP `export_citations`): a
# session of long answers cites a few hundred at most.
MAX_EXPORT_ITEMS: Final = 2000

# How an answer cites in its text (a session's `citation_style` setting): "[2, p. 4]", "(Lewis et
# al., 2020, p. 4)", or Pandoc's "[@lewis2020retrieval, p. 4]" for Markdown and LaTeX writers.
CITATION_STYLES: Final = ("numbered", "author-year", "pandoc")
# A quote looked up in the library (zocratesd/quotes/find.py): fewer words are a phrase found
# everywhere, more characters a passage rather than a quote; matches a person compares at once.
MIN_FIND_QUOTE_WORDS: Final = 3
MAX_FIND_QUOTE_CHARS: Final = 4000
MAX_QUOTE_MATCHES: Final = 20
DEFAULT_QUOTE_MATCHES: Final = 5
