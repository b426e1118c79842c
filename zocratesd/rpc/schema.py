"""`protocol/schema/*.json`: JSON Schema files generated from the wire models of `rpc/models.py`.

    python -m zocratesd.rpc.schema --write [DIR]   # (re)generate; DIR defaults to <repo>/protocol/schema
    python -m zocratesd.rpc.schema --check [DIR]   # exit 1 and list the files that drifted

One file per method and direction, named after the method with every `/` replaced by `.`:

    initialize            -> initialize.params.json, initialize.result.json
    session/new           -> session.new.params.json, session.new.result.json
    _zocrates/session/get -> _zocrates.session.get.params.json, _zocrates.session.get.result.json
    session/update        -> session.update.params.json   (a notification: params only)

The mapping is reversible and collision-free because a method name is checked to hold no `.` (and
nothing but letters, digits, `_` and `/`-separated segments) before it becomes a file name; a name
that would break that rule, or one that is both a method and a notification, is refused rather than
written. `index.json` maps every method and notification to its files.

Params are described as the daemon validates them (pydantic mode "validation"); results as the
daemon writes them (mode "serialization"); both by alias, i.e. with the camelCase names of the wire.
The text is stable: keys sorted, two-space indent, a trailing newline, so a change to a model shows
up as a small diff of the file, and `tests/unit/rpc/test_schema.py` fails until it is regenerated.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema

from zocratesd.locations import PROTOCOL_VERSION
from zocratesd.rpc.models import METHODS, NOTIFICATIONS

JSON_SCHEMA_DIALECT: Final = "https://json-schema.org/draft/2020-12/schema"
INDEX_NAME: Final = "index.json"
WRITE_COMMAND: Final = "python -m zocratesd.rpc.schema --write"

# A method name that maps to a file name and back without ambiguity: `/`-separated segments of
# letters, digits and `_` (ACP's `session/set_mode`, our `_zocrates/session/get`). `$/...`
# protocol notifications carry no model here and are refused if one is ever added.
_METHOD_RE: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:/[A-Za-z_][A-Za-z0-9_]*)*$")

Mode = Literal["validation", "serialization"]


class _SchemaGenerator(GenerateJsonSchema):
    """pydantic's generator without per-field titles ("Protocolversion" and the like): they repeat
    the property name, badly capitalised, and only add noise to the diffs. Model titles stay."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False


def file_stem(method: str) -> str:
    """`_zocrates/session/get` -> `_zocrates.session.get`; ValueError for a name that cannot map."""
    if not _METHOD_RE.match(method):
        raise ValueError(
            f"method name {method!r} cannot become a schema file name: use `/`-separated segments of "
            "letters, digits and `_` (see zocratesd/rpc/schema.py)"
        )
    return method.replace("/", ".")


def model_schema(model: type[BaseModel], mode: Mode, comment: str) -> dict[str, Any]:
    schema = model.model_json_schema(by_alias=True, mode=mode, schema_generator=_SchemaGenerator)
    return {"$schema": JSON_SCHEMA_DIALECT, "$comment": comment, **schema}


def dump(obj: Any) -> str:
    return json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def _comment(model: type[BaseModel], what: str) -> str:
    return (
        f"{what}. Generated from zocratesd.rpc.models.{model.__name__} by `{WRITE_COMMAND}`; "
        "do not edit. The contract is protocol/README.md."
    )


def render() -> dict[str, str]:
    """Every schema file as `{file name: text}`, `index.json` included. Writes nothing."""
    both = sorted(set(METHODS) & set(NOTIFICATIONS))
    if both:
        raise ValueError(f"{both} are both methods and notifications; their schema files would collide")
    files: dict[str, str] = {}
    methods: dict[str, dict[str, str]] = {}
    notifications: dict[str, dict[str, str]] = {}
    for method, (params_model, result_model) in METHODS.items():
        stem = file_stem(method)
        params_file, result_file = f"{stem}.params.json", f"{stem}.result.json"
        files[params_file] = dump(
            model_schema(params_model, "validation", _comment(params_model, f"`{method}` request params"))
        )
        files[result_file] = dump(
            model_schema(result_model, "serialization", _comment(result_model, f"`{method}` result"))
        )
        methods[method] = {"params": params_file, "result": result_file}
    for method, params_model in NOTIFICATIONS.items():
        stem = file_stem(method)
        params_file = f"{stem}.params.json"
        files[params_file] = dump(
            model_schema(params_model, "validation", _comment(params_model, f"`{method}` notification params"))
        )
        notifications[method] = {"params": params_file}
    files[INDEX_NAME] = dump(
        {
            "$comment": (
                f"The schema file of every method and notification. Generated by `{WRITE_COMMAND}`; "
                "do not edit. File names: the method name with each `/` replaced by `.`."
            ),
            "jsonSchemaDialect": JSON_SCHEMA_DIALECT,
            "methods": methods,
            "notifications": notifications,
            "protocolVersion": PROTOCOL_VERSION,
        }
    )
    return files


def default_dir() -> Path:
    """`<repo>/protocol/schema`, found from this file (zocratesd/rpc/schema.py) in a source checkout."""
    return Path(__file__).resolve().parents[2] / "protocol" / "schema"


def drift(directory: Path, expected: dict[str, str] | None = None) -> list[str]:
    """What differs between `directory` and the models, one line per file; empty when in sync."""
    expected = render() if expected is None else expected
    problems: list[str] = []
    present = {p.name for p in directory.glob("*.json")} if directory.is_dir() else set()
    for name in sorted(expected):
        if name not in present:
            problems.append(f"missing: {name}")
        elif (directory / name).read_text(encoding="utf-8") != expected[name]:
            problems.append(f"changed: {name}")
    for name in sorted(present - set(expected)):
        problems.append(f"extra:   {name}")
    return problems


def write(directory: Path) -> list[str]:
    """Make `directory` hold exactly the generated files (stale `*.json` removed); returns what changed."""
    expected = render()
    changes = drift(directory, expected)
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in expected.items():
        path = directory / name
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
    for path in directory.glob("*.json"):
        if path.name not in expected:
            path.unlink()
    return changes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m zocratesd.rpc.schema",
        description="Generate protocol/schema/*.json from zocratesd/rpc/models.py, or check them.",
    )
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", action="store_true", help="write the schema files (removes stale *.json)")
    action.add_argument("--check", action="store_true", help="exit 1 if the files differ from the models")
    parser.add_argument("dir", nargs="?", type=Path, help="schema directory (default: <repo>/protocol/schema)")
    args = parser.parse_args(argv)
    directory: Path = args.dir if args.dir is not None else default_dir()
    if args.dir is None and not (directory.parent.parent / "pyproject.toml").is_file():
        print(
            f"error: {directory} is not in a source checkout of zocrates (zocratesd is installed "
            "elsewhere); pass the schema directory explicitly",
            file=sys.stderr,
        )
        return 2
    if args.write:
        changes = write(directory)
        for line in changes:
            print(f"  fixed {line}")
        print(f"{directory}: {len(changes)} file(s) written or removed")
        return 0
    problems = drift(directory)
    if problems:
        print(f"{directory} has drifted from zocratesd/rpc/models.py:", file=sys.stderr)
        for line in problems:
            print(f"  {line}", file=sys.stderr)
        print(f"run `{WRITE_COMMAND}` and commit the result", file=sys.stderr)
        return 1
    print(f"{directory}: in sync with zocratesd/rpc/models.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
