"""The code's shape, checked on the source: what a newcomer relies on to find their way.

- no function in zocratesd/ is longer than a screenful and a half (100 lines), data tables aside;
- `Daemon` stays a facade over the core's services;
- imports sit at the top of modules (ruff's PLC0415, with its allow-list in pyproject.toml);
- each pattern is declared once, in `zocratesd/limits.py`;
- the untyped `dict[str, Any]` stays the exception (typed structs inside, dicts at the edges).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "zocratesd"
MAX_FUNCTION_LINES = 100
# Functions that are data tables (a reader scans them, nothing branches): Zotero's own table
# definitions for the demo's data dir.
DATA_TABLES = frozenset({"zocratesd/demo/zotero_dir.py:_ddl"})
MAX_DAEMON_LINES = 250
# A ceiling, not a goal: lower it when a change removes some.
MAX_UNTYPED_DICTS = 200
# Pieces of the item-key and library patterns: written anywhere but limits.py, they drift.
PATTERN_PIECES = ("[A-Z0-9]{8}", "groups/[1-9]")


def _sources() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def _functions(tree: ast.AST) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def test_no_function_over_100_lines() -> None:
    long = []
    for path in _sources():
        for fn in _functions(ast.parse(path.read_text(encoding="utf-8"))):
            lines = (fn.end_lineno or fn.lineno) - fn.lineno + 1
            where = f"{path.relative_to(PACKAGE.parent)}:{fn.name}"
            if lines > MAX_FUNCTION_LINES and where not in DATA_TABLES:
                long.append(f"{path.relative_to(PACKAGE.parent)}:{fn.lineno} {fn.name} ({lines} lines)")
    assert not long, "functions over 100 lines:\n" + "\n".join(long)


def test_the_daemon_is_a_facade() -> None:
    tree = ast.parse((PACKAGE / "core" / "daemon.py").read_text(encoding="utf-8"))
    (daemon,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Daemon"]
    assert (daemon.end_lineno or 0) - daemon.lineno + 1 < MAX_DAEMON_LINES


def test_patterns_are_declared_once() -> None:
    found = []
    for path in _sources():
        if path.name == "limits.py":
            continue
        text = path.read_text(encoding="utf-8")
        found += [f"{path.relative_to(PACKAGE.parent)}: {piece}" for piece in PATTERN_PIECES if piece in text]
    assert not found, "patterns written outside limits.py:\n" + "\n".join(found)


def test_the_data_tables_exist() -> None:
    for entry in DATA_TABLES:
        file, name = entry.split(":")
        tree = ast.parse((PACKAGE.parent / file).read_text(encoding="utf-8"))
        assert name in {fn.name for fn in _functions(tree)}, entry


def test_untyped_dicts_stay_the_exception() -> None:
    # `Json` is the alias of dict[str, Any] (zocratesd/updates.py): each use counts as one.
    count = sum(len(re.findall(r"dict\[str, Any\]|\bJson\b", p.read_text(encoding="utf-8"))) for p in _sources())
    assert count < MAX_UNTYPED_DICTS, f"{count} dict[str, Any] annotations, Json included (ceiling {MAX_UNTYPED_DICTS})"
