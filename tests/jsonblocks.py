"""The JSON values of one ```json block of a Markdown document (the protocol docs' examples)."""

from __future__ import annotations

import json
from typing import Any

import pytest


def json_values(body: str, where: str) -> list[Any]:
    """Every JSON value in `body`, in order (a block may hold several, one after another);
    a block that is not JSON fails the test, naming `where`."""
    decoder = json.JSONDecoder()
    values: list[Any] = []
    pos = 0
    while True:
        while pos < len(body) and body[pos].isspace():
            pos += 1
        if pos == len(body):
            return values
        try:
            value, pos = decoder.raw_decode(body, pos)
        except json.JSONDecodeError as exc:
            pytest.fail(f"{where}: a ```json block is not JSON: {exc}")
        values.append(value)
