"""Attachment text: reading `.zotero-ft-cache` safely, splitting it into pages and chunks.

The cache holds the plain text Zotero extracted (pdftotext separates PDF pages with a form feed,
which we keep as page markers). Files are the user's and may be anything: oversized, binary,
not UTF-8, a symlink out of the storage folder, a FIFO or a device in the cache's place. None of
that may crash or block the indexer: only a regular file is opened, never blocking, and read up to
a bound.
"""

from __future__ import annotations

import html
import json
import logging
import os
import re
import stat
from pathlib import Path

from zocratesd.library._records import valid_key
from zocratesd.textnorm import MAX_HEADING_CHARS, is_heading_line

log = logging.getLogger(__name__)

CACHE_NAME = ".zotero-ft-cache"
# Full text that arrived by sync and Zotero has not processed yet (fulltextItems.synced = 2): JSON
# {indexedChars, totalChars, indexedPages, totalPages, version, text} (Zotero.FullText.setItemContent).
# Read until the cache appears; Zotero deletes it when it writes the cache.
UNPROCESSED_NAME = ".zotero-ft-unprocessed"
PAGE_BREAK = "\f"
# Zotero stops extracting at fulltext.textMaxLength = 500,000 characters; 4 MiB of UTF-8 holds
# that with room to spare, and bounds what one odd file can make us read.
MAX_CACHE_BYTES = 4 * 1024 * 1024
# A chunk is what one search hit quotes. ~1,200 characters is a long paragraph: enough context to
# answer from, and 6 hits stay ~2k tokens inside a small local model's prompt.
CHUNK_CHARS = 1200
# A chunk shorter than this is merged into its neighbour (headers, page numbers, stray lines).
MIN_CHUNK_CHARS = 200
# More than this share of control characters means the file is not text (a binary blob in the
# cache's place); we index nothing rather than garbage.
MAX_CONTROL_SHARE = 0.10

_CONTROL_RE = re.compile(r"[\x00-\x08\x0b\x0e-\x1f\x7f]")
# Runs of blanks to collapse into one space: a run that is one space already is not matched
# (most of them: a page has hundreds, and replacing each with itself was most of the cost).
_SPACE_RE = re.compile(r"[\t\r\u00a0][ \t\r\u00a0]*| [ \t\r\u00a0]+")
# A sentence's end and the spaces after it. Found from the stop (see `_sentences`): a pattern that
# starts with a lookbehind is tried at every position of the text.
_SENTENCE_END_RE = re.compile(r"[.!?]\s+")
_PARAGRAPH_RE = re.compile(r" ?\n\n[\s]*")
# A line that may be a heading (short, a capital or a section number first), matched whole: the
# lines of prose (most of a page) never reach is_heading_line.
_SHORT_LINE_RE = re.compile(rf"[ \t]*[A-Z0-9][^\n]{{0,{MAX_HEADING_CHARS}}}")


def cache_path(data_dir: Path, attachment_key: str, name: str = CACHE_NAME) -> Path | None:
    """`storage/<key>/.zotero-ft-cache`, or None for a key that is not a Zotero key (never a path)."""
    if not valid_key(attachment_key):
        return None
    return data_dir / "storage" / attachment_key / name


def cache_stamp(data_dir: Path, attachment_key: str) -> str:
    """'size:mtime_ns' of the cache file (or 'u' and the unprocessed file's), '' when there is
    none (cheap: a stat or two; string paths, as this runs for every attachment at every refresh)."""
    if not valid_key(attachment_key):
        return ""
    for prefix, name in (("", CACHE_NAME), ("u", UNPROCESSED_NAME)):
        try:
            st = os.stat(os.path.join(data_dir, "storage", attachment_key, name))
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            return f"{prefix}{st.st_size}:{st.st_mtime_ns}"
    return ""


def read_cache(data_dir: Path, attachment_key: str) -> str | None:
    """The attachment's extracted text, cleaned: the cache, else the unprocessed synced text;
    None when there is none or it is not text."""
    data = _read_storage_file(data_dir, attachment_key, CACHE_NAME)
    if data is None:
        raw = _read_storage_file(data_dir, attachment_key, UNPROCESSED_NAME)
        if raw is None:
            return None
        try:
            doc = json.loads(raw.decode("utf-8", errors="replace"))
        except ValueError:
            log.info("library: storage/%s/%s is not JSON; skipped", attachment_key, UNPROCESSED_NAME)
            return None
        text = doc.get("text") if isinstance(doc, dict) else None
        if not isinstance(text, str):
            return None
        return clean_text(text[: MAX_CACHE_BYTES], source=str(cache_path(data_dir, attachment_key, UNPROCESSED_NAME)))
    return clean_text(data.decode("utf-8", errors="replace"), source=str(cache_path(data_dir, attachment_key)))


def _read_storage_file(data_dir: Path, attachment_key: str, name: str) -> bytes | None:
    """A file of the attachment's storage folder, read safely (see the module doc), at most
    MAX_CACHE_BYTES (+ the unprocessed file's JSON overhead); None if absent or unreadable."""
    p = cache_path(data_dir, attachment_key, name)
    if p is None:
        return None
    storage = (data_dir / "storage").resolve()
    try:
        real = p.resolve(strict=True)
        if storage not in real.parents:  # a symlink out of storage/: not Zotero's
            log.warning("library: %s points outside the storage folder; skipped", p)
            return None
        # A FIFO would block open() until someone writes to it (forever: the indexer stalls), a
        # device could be anything: regular files only, checked before opening, and opened with
        # O_NONBLOCK in case it was swapped in between (fstat then refuses it).
        if not stat.S_ISREG(os.lstat(real).st_mode):
            log.info("library: %s is not a regular file; skipped", p)
            return None
        flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
        fd = os.open(real, flags)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            with os.fdopen(fd, "rb", closefd=False) as f:
                # The unprocessed file is JSON: escapes can double its size; unparseable beyond that.
                data = f.read((MAX_CACHE_BYTES if name == CACHE_NAME else 2 * MAX_CACHE_BYTES) + 1)
        finally:
            os.close(fd)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        log.warning("library: cannot read %s: %s", p, exc)
        return None
    if len(data) > MAX_CACHE_BYTES and name == CACHE_NAME:
        log.info("library: %s is larger than %d bytes; indexing its beginning", p, MAX_CACHE_BYTES)
        data = data[:MAX_CACHE_BYTES]
    return data


def clean_text(text: str, source: str = "text") -> str | None:
    """Strip control characters (form feeds stay: they mark pages); None if it is not text."""
    if not text.strip():
        return None
    cleaned, controls = _CONTROL_RE.subn(" ", text.replace("\ufffd", " "))  # one pass counts and replaces
    if controls > MAX_CONTROL_SHARE * len(text):
        log.warning("library: %s does not look like text (%d control characters); skipped", source, controls)
        return None
    return cleaned


def pages(text: str) -> list[tuple[int | None, str]]:
    """[(page number or None, page text)]: numbered from 1 when the text has form feeds."""
    if PAGE_BREAK not in text:
        return [(None, text)]
    return [(n, t) for n, t in enumerate(text.split(PAGE_BREAK), start=1) if t.strip()]


def chunks(text: str, size: int = CHUNK_CHARS) -> list[tuple[int | None, str]]:
    """[(page, chunk text)]: each page cut into ~`size`-character chunks at sentence ends, never
    across a page; whitespace collapsed, paragraph breaks kept as single spaces, except around a
    line that is only a section heading ("Introduction", "2.1 Training Details"): it stays a
    paragraph of its own ("\\n\\n" before and after), so the answerer never quotes it as the
    start of the sentence after it (textnorm.is_heading_line)."""
    out: list[tuple[int | None, str]] = []
    for page, body in pages(text):
        # Line by line: a `^...$` pattern over the whole page (re.M) is tried at every position of it.
        heads = {line for line in body.split("\n") if _SHORT_LINE_RE.fullmatch(line) and is_heading_line(line)} if "\n" in body else None
        if heads:
            body = " ".join(f"\n\n{line.strip()}\n\n" if line in heads else line for line in body.split("\n"))
            body = _PARAGRAPH_RE.sub("\n\n", _SPACE_RE.sub(" ", body)).strip()
        else:
            body = _SPACE_RE.sub(" ", body.replace("\n", " ")).strip()
        if not body:
            continue
        current = ""
        for sentence in _sentences(body):
            while len(sentence) > size:  # one giant "sentence" (tables, no punctuation)
                cut = sentence.rfind(" ", 0, size)
                cut = cut if cut > size // 2 else size
                if current:
                    out.append((page, current))
                    current = ""
                out.append((page, sentence[:cut].strip()))
                sentence = sentence[cut:].strip()
            if current and len(current) + len(sentence) + 1 > size:
                out.append((page, current))
                current = ""
            current = f"{current} {sentence}" if current else sentence
        if current:
            if out and out[-1][0] == page and len(current) < MIN_CHUNK_CHARS and len(out[-1][1]) + len(current) < 2 * size:
                out[-1] = (page, f"{out[-1][1]} {current}")
            else:
                out.append((page, current))
    return out


def _sentences(body: str) -> list[str]:
    """`body` cut after each ".", "!" or "?" that spaces follow; the spaces dropped."""
    out: list[str] = []
    start = 0
    for m in _SENTENCE_END_RE.finditer(body):
        out.append(body[start : m.start() + 1])
        start = m.end()
    out.append(body[start:])
    return out


_BLOCK_END_RE = re.compile(r"</(?:p|div|h[1-6]|li|blockquote|pre|tr|table|ul|ol)\s*>|<br\s*/?>", re.IGNORECASE)
_TAG_RE = re.compile(r"<[^>]*>")
_SCRIPT_RE = re.compile(r"<(script|style)\b.*?</\1\s*>", re.IGNORECASE | re.DOTALL)


def html_to_text(note: str) -> str:
    """A note's HTML (Zotero's note editor) as plain text: blocks become lines, tags go, entities
    are decoded, control characters removed."""
    text = _SCRIPT_RE.sub(" ", note)
    text = _BLOCK_END_RE.sub("\n", text)
    text = html.unescape(_TAG_RE.sub("", text))
    text = _CONTROL_RE.sub(" ", text.replace("\f", " "))
    lines = [_SPACE_RE.sub(" ", line).strip() for line in text.split("\n")]
    return "\n".join(line for line in lines if line)


def page_numbers(text: str) -> int:
    """How many pages the text has (form feeds + 1)."""
    return text.count(PAGE_BREAK) + 1
