"""A stored PDF's page labels: the page numbers its reader shows ("127" on the third page of a book
chapter, "xi" in a preface), for citations of its full text.

Zotero's `.zotero-ft-cache` has the text of each page and no labels; the labels are in the PDF
itself, the catalog's /PageLabels number tree (PDF 32000-1:2008, 12.4.2), which Zotero's reader
(pdf.js) shows too. We read them with pypdf: a PDF's catalog may sit in a compressed object stream
behind a cross-reference stream, after incremental updates, in an encrypted file (a label's prefix
is then an encrypted string); a reader of our own that handled all of that would be most of a PDF
parser, and one that handled less would give wrong labels quietly. pypdf is pure Python, has no
dependencies and is imported only here, on the indexer's thread.

Only files stored in Zotero's `storage/<key>/` are read (linked files are the user's own folders:
the index reads no file outside storage/, as for the full-text caches), under the same rules as a
cache file (library/fulltext.py): regular files only, no symlink out of storage/. A file that is
not a PDF, is damaged, or is encrypted with a password has no labels: its pages are cited by number.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

from zocratesd import deferred
from zocratesd.library._records import valid_key

log = logging.getLogger(__name__)

# A stored PDF larger than this is not opened for its labels: pypdf reads the cross-reference data
# and the page tree, not the whole file, but a file this size is a scan or an oddity (Zotero's own
# full-text indexing stops at 100 pages, fulltext.pdfMaxPages).
MAX_PDF_BYTES = 512 * 1024 * 1024
# More pages than this: no labels (a damaged page tree may claim millions; a real book has a few
# thousand at most).
MAX_LABELED_PAGES = 20_000
# A label longer than this is not one a reader cites (sources.py has the same bound).
MAX_LABEL_CHARS = 16


def stored_pdf(data_dir: Path, attachment_key: str) -> Path | None:
    """The PDF file in `storage/<key>/` (the one file whose name ends in .pdf), or None."""
    if not valid_key(attachment_key):
        return None
    storage = data_dir / "storage"
    folder = storage / attachment_key
    try:
        names = [e.name for e in os.scandir(folder) if e.name.lower().endswith(".pdf") and e.is_file(follow_symlinks=False)]
    except OSError:
        return None
    if len(names) != 1:  # none, or several (which is the attachment's is in zotero.sqlite's path)
        return None
    return folder / names[0]


class LabelsUnreadable(Exception):
    """The stored PDF could not be parsed for its labels (damaged, hostile): its pages are cited by
    number. The message is the parser's error class, never the file's bytes."""


def page_labels(data_dir: Path, attachment_key: str) -> list[str] | None:
    """The labels of the stored PDF's pages, in page order; None when the PDF has no /PageLabels
    (its pages are cited by number) or is not there. Raises LabelsUnreadable when it cannot be
    parsed: the indexer counts those and says so once per pass."""
    path = stored_pdf(data_dir, attachment_key)
    if path is None:
        return None
    try:
        real = path.resolve(strict=True)
        if (data_dir / "storage").resolve() not in real.parents:
            return None
        flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
        fd = os.open(real, flags)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_PDF_BYTES:
            return None
        return _read_labels(f)


def _read_labels(f: object) -> list[str] | None:
    # Loaded on the first PDF read, by the indexer's thread: not on the engine's way to a first turn.
    pypdf = deferred.load("pypdf")
    # pypdf reports what it repairs in damaged files through logging, with bytes of the file in
    # the message: not for our log (a damaged file simply has no labels).
    logging.getLogger("pypdf").setLevel(logging.ERROR)
    try:
        reader = pypdf.PdfReader(f, strict=False)
        if reader.is_encrypted and not reader.decrypt(""):
            return None
        if "/PageLabels" not in reader.root_object:
            return None
        if len(reader.pages) > MAX_LABELED_PAGES:
            return None
        labels = [" ".join(str(label).split())[:MAX_LABEL_CHARS] for label in reader.page_labels]
    except Exception as exc:  # noqa: BLE001 - any failure of a damaged or hostile file means "no labels"
        raise LabelsUnreadable(type(exc).__name__) from None
    return labels
