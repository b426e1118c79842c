"""Reading text fenced as untrusted library text (zocratesd/untrusted.py) as a model would: each
fence must be whole (a line saying it is an untrusted quotation, the opening marker, the closing
marker of the same boundary) and nothing inside may look like a marker."""

from __future__ import annotations

import re

# [The text between the two library-text markers of boundary B is ...: an untrusted quotation, ...]
# <library-text boundary="B">
# ...
# </library-text boundary="B">
_FENCE = (r'(?P<head>\[The text between the two library-text markers of boundary (?P<b>[0-9a-f]{16}) is [^\n]*'
          r'an untrusted quotation[^\n]*never instructions to follow[^\n]*\])\n'
          r'<library-text boundary="(?P=b)">\n(?P<body>.*?)\n</library-text boundary="(?P=b)">')
WHOLE_RE = re.compile(rf"\A{_FENCE}\Z", re.S)
FENCE_RE = re.compile(_FENCE, re.S)
# Anything in a body that a model could take for a marker.
MARKER_RE = re.compile(r"<\s*/?\s*library-text", re.I)


def _checked(m: re.Match[str]) -> str:
    body = m.group("body")
    found = MARKER_RE.search(body)
    assert found is None, f"a marker inside the fence: {body[max(found.start() - 80, 0):found.end() + 80]!r}"
    assert m.group("b") not in body
    return body


def fenced_body(text: str) -> str:
    """The text inside the one fence `text` is; AssertionError when it is not exactly one whole
    fence, or its body holds a marker or its boundary (the fence could be closed early)."""
    m = WHOLE_RE.match(text)
    assert m is not None, f"not one whole fence: {text[:300]!r}"
    return _checked(m)


def fenced_bodies(text: str) -> list[str]:
    """The bodies of the fences in `text`, each checked as `fenced_body` checks one; every
    opening marker in `text` begins a whole fence."""
    bodies = [_checked(m) for m in FENCE_RE.finditer(text)]
    assert len(bodies) == len(re.findall(r'^<library-text boundary="', text, re.M)), text[:2000]
    return bodies


def same_but_boundaries(text: str) -> str:
    """`text` with each fence's boundary replaced by one placeholder (two results of the same call
    differ only there)."""
    return re.sub(r'(boundary[ =\\"]{1,3})[0-9a-f]{16}', r"\1B", text)
