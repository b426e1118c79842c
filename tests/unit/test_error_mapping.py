"""Every core error is defined once (zocratesd/errors.py), mapped by each face's one table, and
documented for clients.

- every `ZocratesError` subclass lives in `zocratesd.errors` (the one hierarchy);
- each one resolves, along its MRO, to an entry of its own or of a base other than the root in the
  JSON-RPC table (`rpc/errors.py`) and the HTTP table (`shim/errors.py`): the root's entry (internal
  error, 500) is the net for a class someone forgot, never its mapping;
- its JSON-RPC (code, message, kind) is a row of protocol/README.md's "Errors" table, and its HTTP
  (status, code) a row of protocol/http.md's; the HTTP code is the class's kind;
- every code of `zocrates_wire/jsonrpc.py`'s table is documented, and no undocumented code is documented.
"""

from __future__ import annotations

import gc
import importlib
import pkgutil
import re
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

import zocratesd
from zocrates_wire import jsonrpc
from zocratesd import errors
from zocratesd.rpc.errors import RPC_CODES, code_of, to_rpc_error
from zocratesd.shim.errors import HTTP_STATUSES, HttpStatus, core_error_response, http_status_of

REPO = Path(__file__).resolve().parents[2]
README = REPO / "protocol" / "README.md"
HTTP_MD = REPO / "protocol" / "http.md"


def _import_every_module() -> None:
    """Import all of zocratesd, so every error class that exists is a subclass we can walk."""
    for info in pkgutil.walk_packages(zocratesd.__path__, "zocratesd."):
        if info.name.rsplit(".", 1)[-1] != "__main__":
            importlib.import_module(info.name)


def _subclasses(cls: type[errors.ZocratesError]) -> Iterator[type[errors.ZocratesError]]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


@pytest.fixture(scope="module")
def error_classes() -> list[type[errors.ZocratesError]]:
    _import_every_module()
    found: list[type[errors.ZocratesError]] = [errors.ZocratesError, *_subclasses(errors.ZocratesError)]
    assert errors.ModelError in found and errors.SessionNotFound in found
    return found


def _table_rows(section: str) -> list[list[str]]:
    """The cells of each body row of the markdown tables in `section`."""
    rows = []
    for line in section.splitlines():
        if line.startswith("|") and not re.match(r"^\|[-| ]+\|$", line):
            rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def readme_errors() -> set[tuple[int, str, str]]:
    """(code, message, kind) of each row of protocol/README.md's "Errors" table."""
    section = README.read_text(encoding="utf-8").split("\n## Errors\n", 1)[1].split("\n## ", 1)[0]
    out = set()
    for cells in _table_rows(section):
        if re.fullmatch(r"-?\d+", cells[0]):
            out.add((int(cells[0]), cells[1], cells[3].strip("`")))
    assert out, "protocol/README.md: no rows found in the Errors table"
    return out


def http_md_errors() -> set[tuple[int, str]]:
    """(status, code) of each row of protocol/http.md's errors table."""
    out = set()
    for cells in _table_rows(HTTP_MD.read_text(encoding="utf-8")):
        if re.fullmatch(r"\d{3}", cells[0]) and re.fullmatch(r"`[a-z_]+`", cells[1]):
            out.add((int(cells[0]), cells[1].strip("`")))
    assert out, "protocol/http.md: no rows found in the errors table"
    return out


def _mapped_by(table: Mapping[type[errors.ZocratesError], object], cls: type[errors.ZocratesError]) -> type | None:
    return next((base for base in cls.__mro__ if base in table), None)


def problems(classes: list[type[errors.ZocratesError]]) -> list[str]:
    """What is wrong with the mapping and documentation of `classes`; empty when all is well."""
    documented_rpc, documented_http = readme_errors(), http_md_errors()
    out = []
    for cls in classes:
        name = f"{cls.__module__}.{cls.__qualname__}"
        if cls.__module__ != "zocratesd.errors":
            out.append(f"{name}: define it in zocratesd/errors.py, the one error hierarchy")
        kind = cls.kind
        if not isinstance(kind, str) or not re.fullmatch(r"[a-z_]+", kind):
            out.append(f"{name}: kind {kind!r} is not a stable snake_case string")
        for face, table in (("rpc/errors.py RPC_CODES", RPC_CODES), ("shim/errors.py HTTP_STATUSES", HTTP_STATUSES)):
            base = _mapped_by(table, cls)
            if base is None or (base is errors.ZocratesError and cls is not errors.ZocratesError):
                out.append(f"{name}: not mapped in {face} (only the root's fallback catches it)")
        rpc = code_of(cls)
        if (rpc.code, rpc.message, kind) not in documented_rpc:
            out.append(f"{name}: protocol/README.md's Errors table has no row | {rpc.code} | {rpc.message} | ... | `{kind}` |")
        http = http_status_of(cls)
        if http.code != kind:
            out.append(f"{name}: its HTTP code {http.code!r} is not its kind {kind!r}")
        if (http.status, http.code) not in documented_http:
            out.append(f"{name}: protocol/http.md's errors table has no row | {http.status} | `{http.code}` |")
    return out


def test_every_core_error_is_mapped_on_both_faces_and_documented(error_classes: list[type[errors.ZocratesError]]) -> None:
    found = problems(error_classes)
    assert not found, "\n".join(found)


def test_an_unmapped_or_undocumented_error_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    class Unmapped(errors.ZocratesError):
        kind = "unmapped_thing"

    class Undocumented(errors.NotFound):
        kind = "gone_elsewhere"

    class Teapot(errors.ZocratesError):
        kind = "teapot"

    monkeypatch.setitem(RPC_CODES, Teapot, jsonrpc.OVERLOADED)
    monkeypatch.setitem(HTTP_STATUSES, Teapot, HttpStatus(418, "teapot"))
    try:
        found = "\n".join(problems([Unmapped, Undocumented, Teapot]))
        assert "Unmapped: define it in zocratesd/errors.py" in found
        assert "Unmapped: not mapped in rpc/errors.py RPC_CODES" in found
        assert "Unmapped: not mapped in shim/errors.py HTTP_STATUSES" in found
        assert "Unmapped: protocol/README.md's Errors table has no row | -32603 | Internal error" in found
        assert "Unmapped: its HTTP code 'internal' is not its kind 'unmapped_thing'" in found
        # Mapped through its base, but its own kind is on neither face's documentation.
        assert "Undocumented: not mapped" not in found
        missing_row = "protocol/README.md's Errors table has no row | -32002 | Resource not found | ... | `gone_elsewhere` |"
        assert f"Undocumented: {missing_row}" in found
        assert "Undocumented: its HTTP code 'not_found' is not its kind 'gone_elsewhere'" in found
        # Mapped in both tables, to codes the docs do not give it.
        assert "Teapot: not mapped" not in found and "Teapot: its HTTP code" not in found
        assert "Teapot: protocol/README.md's Errors table has no row | 1002 | Overloaded | ... | `teapot` |" in found
        assert "Teapot: protocol/http.md's errors table has no row | 418 | `teapot` |" in found
    finally:
        monkeypatch.undo()
        del Unmapped, Undocumented, Teapot
        gc.collect()  # classes live in cycles: drop them from ZocratesError.__subclasses__() now


def test_a_subclass_answers_as_its_base() -> None:
    assert errors.SessionNotFound not in RPC_CODES and errors.SessionNotFound not in HTTP_STATUSES
    exc = errors.SessionNotFound("session-x")
    rpc = to_rpc_error(exc)
    assert (rpc.code, rpc.message) == (-32002, "Resource not found")
    assert rpc.data == {"kind": "not_found", "message": "no session with id 'session-x'", "sessionId": "session-x"}
    response = core_error_response(exc)  # JSON-RPC keeps ACP's camelCase; the HTTP face is snake_case throughout
    assert response.status_code == 404
    assert response.body == (
        b'{"status":"error","error":{"code":"not_found","message":"no session with id \'session-x\'","session_id":"session-x"}}'
    )


def test_wire_codes_of_each_core_error() -> None:
    """The codes clients branch on (protocol/README.md, protocol/http.md): these must not move."""
    expected: dict[type[errors.ZocratesError], tuple[int, int, str]] = {
        errors.ZocratesError: (-32603, 500, "internal"),
        errors.NotFound: (-32002, 404, "not_found"),
        errors.SessionNotFound: (-32002, 404, "not_found"),
        errors.SessionBusy: (1001, 409, "session_busy"),
        errors.InvalidInput: (-32602, 422, "invalid_input"),
        errors.ModelError: (1003, 502, "model_error"),
        errors.CheckpointNotPending: (1004, 409, "checkpoint_not_pending"),
    }
    for cls, (code, status, kind) in expected.items():
        assert (code_of(cls).code, http_status_of(cls).status, http_status_of(cls).code, cls.kind) == (code, status, kind, kind)


def test_every_json_rpc_code_is_documented_and_every_documented_code_exists() -> None:
    documented = readme_errors()
    for record in jsonrpc.ERROR_CODES.values():
        assert (record.code, record.message, record.kind) in documented, record
    for code, message, _ in documented:
        assert code in jsonrpc.ERROR_CODES and jsonrpc.ERROR_CODES[code].message == message, (code, message)
