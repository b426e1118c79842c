"""Text from outside (a model endpoint, a client) made safe to log and to show: escaped, cut, and
without credentials.

A log line is trusted by whoever reads it: a newline in a model's error message could forge a
whole `ERROR zocratesd: ...` record, an ESC sequence could rewrite a terminal, and a URL such as
`http://user:secret@host/v1` would leave its password in a file that is kept for weeks. Anything
that did not come from the daemon's own code goes through `escape_for_log` before a log call (or
into an exception message that ADK or the daemon logs with its traceback), and every endpoint is
shown through `redact_url`.

A leaf module (stdlib only), so any layer may import it.
"""

from __future__ import annotations

import logging
import re
from typing import Final
from urllib.parse import SplitResult, parse_qsl, urlencode, urlsplit, urlunsplit

# One piece of outside text in a log line: enough to recognise an error message, short enough that
# a hostile endpoint cannot fill the log's 25 MiB with a few answers.
MAX_LOG_TEXT_CHARS: Final = 1000
REDACTED: Final = "***"

# Everything a terminal or a log reader may act on: C0 controls (newline, carriage return, ESC,
# backspace...), DEL, C1 controls (U+0085 is a "next line" to some readers), the Unicode line and
# paragraph separators, and the bidirectional overrides that reorder what a reader sees.
_UNSAFE = [*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0), 0x2028, 0x2029, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape_of(code: int) -> str:
    ch = chr(code)
    if ch in _NAMED:
        return _NAMED[ch]
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


# A backslash is escaped too (as repr does), so `\n` in the output always means an escaped newline
# and never two characters the outside sent to imitate one.
_TABLE: Final = {code: _escape_of(code) for code in _UNSAFE} | {ord("\\"): "\\\\"}
# In a formatted record, newlines are kept (tracebacks need them) and tabs are harmless.
_RECORD_TABLE: Final = {code: esc for code, esc in _TABLE.items() if chr(code) not in "\n\t\\"}


def escape_for_log(text: object, limit: int = MAX_LOG_TEXT_CHARS) -> str:
    """`text` as one printable line: control characters escaped repr-style (`\\n`, `\\x1b`), a
    backslash doubled, and anything past `limit` characters replaced by a count."""
    s = text if isinstance(text, str) else str(text)
    if len(s) > limit:
        s = f"{s[:limit]}...[{len(s) - limit} more chars]"
    return s.translate(_TABLE)


def escape_for_terminal(text: object) -> str:
    """`text` (a model's answer, a title from the library) safe to print: newlines and tabs kept,
    every other control character (ESC sequences, OSC 52 clipboard writes, carriage returns,
    bidirectional overrides) escaped as `\\x1b`, `\\r`, `\\u202e`. Not cut."""
    # As in a log record: an answer is paragraphs, and no reader parses the text back, so the
    # backslashes need no doubling.
    s = text if isinstance(text, str) else str(text)
    return s.translate(_RECORD_TABLE)


def redact_url(url: str) -> str:
    """`url` with its user info (`user:password@`) and the values of its query string replaced by
    `***` (an API key sometimes travels as `?key=...`). What is shown of an endpoint: in the log,
    in error messages and in `error.data.endpoint`."""
    try:
        parts = urlsplit(url)
        _ = parts.port  # a malformed port raises here rather than later
    except ValueError:
        return _redact_userinfo(url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{REDACTED}@{netloc.rpartition('@')[2]}"
    query = parts.query
    if query:
        query = urlencode([(k, REDACTED) for k, _ in parse_qsl(query, keep_blank_values=True)], safe="*")
    return urlunsplit(SplitResult(parts.scheme, netloc, parts.path, query, parts.fragment))


# `scheme://userinfo@`: the part of any URL inside free text that may hold a password.
_USERINFO_RE = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/?#\s@]+@")


def _redact_userinfo(text: str) -> str:
    return _USERINFO_RE.sub(lambda m: f"{m.group('scheme')}{REDACTED}@", text)


def redact_credentials(text: str) -> str:
    """Free text (an exception message, a validation error) with the user info of every URL in it
    replaced by `***`."""
    return _redact_userinfo(text)


class EscapingFormatter(logging.Formatter):
    """A formatter whose every record is unambiguous: control characters escaped, and every line
    after a record's first (a traceback, a message with a newline) indented, so no text inside a
    record can begin a line that looks like a record of its own."""

    CONTINUATION: Final = "    "

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record).translate(_RECORD_TABLE)
        return text.replace("\n", "\n" + self.CONTINUATION)
