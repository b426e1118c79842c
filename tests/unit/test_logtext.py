"""Outside text made safe to log and to show: escaping, cutting, redacting credentials."""

from __future__ import annotations

import io
import logging

import pytest

from zocratesd.logtext import MAX_LOG_TEXT_CHARS, EscapingFormatter, escape_for_log, redact_credentials, redact_url

FORGED = "2099-01-01 00:00:00,000 ERROR zocratesd: forged"


def test_escape_for_log_leaves_one_printable_line() -> None:
    evil = f"boom\n{FORGED}\r\x1b[2J\x1b]0;title\x07\x00\x7f\x85\u2028\u202e\\n"
    out = escape_for_log(evil)
    assert out == (
        "boom\\n" + FORGED + "\\r\\x1b[2J\\x1b]0;title\\x07\\x00\\x7f\\x85\\u2028\\u202e\\\\n"
    )
    assert out.isprintable()
    assert escape_for_log("naïve 文字 ok") == "naïve 文字 ok"  # printable text stays as it is
    assert escape_for_log(ValueError("a\nb")) == "a\\nb"


def test_escape_for_log_cuts_at_its_limit() -> None:
    out = escape_for_log("x" * (MAX_LOG_TEXT_CHARS + 500))
    assert out == "x" * MAX_LOG_TEXT_CHARS + "...[500 more chars]"
    assert escape_for_log("\n" * 10, limit=4) == "\\n" * 4 + "...[6 more chars]"


@pytest.mark.parametrize(
    "url, shown",
    [
        ("http://u:pass@host:8080/v1", "http://***@host:8080/v1"),
        ("https://token@host/v1", "https://***@host/v1"),
        ("http://u:p%40ss@[::1]:1/v1", "http://***@[::1]:1/v1"),
        ("https://host/v1?key=sk-123&mode=x", "https://host/v1?key=***&mode=***"),
        ("https://openrouter.ai/api/v1", "https://openrouter.ai/api/v1"),
        ("http://u:pass@host:notaport/v1", "http://***@host:notaport/v1"),
    ],
)
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_redact_credentials_in_free_text() -> None:
    text = "input {'base_url': 'http://me:hunter2@models.example.org/v1', 'other': 'https://ok.example/x'}"
    assert redact_credentials(text) == "input {'base_url': 'http://***@models.example.org/v1', 'other': 'https://ok.example/x'}"


def test_the_escaping_formatter_keeps_every_record_unambiguous() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(EscapingFormatter("%(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger("zocratesd.test_logtext")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        try:
            raise RuntimeError(f"model said\n{FORGED}\x1b[31m")
        except RuntimeError:
            logger.exception("turn failed: %s", f"x\n{FORGED}")
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
    lines = stream.getvalue().splitlines()
    assert lines[0] == "ERROR zocratesd.test_logtext: turn failed: x"
    assert all(line.startswith(EscapingFormatter.CONTINUATION) for line in lines[1:])  # traceback and the rest
    assert not any(line.startswith(FORGED) for line in lines)
    assert "\x1b" not in stream.getvalue() and "\\x1b[31m" in stream.getvalue()
