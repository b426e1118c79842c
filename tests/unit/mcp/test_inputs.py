"""The MCP tools' arguments (zocratesd/mcp/inputs.py): their schemas carry the wire's limits, and
bad arguments are refused with a tool error naming the argument, in the schema's words."""

from __future__ import annotations

from typing import Any

import pytest

from zocratesd import limits
from zocratesd.mcp import schemas, tools
from zocratesd.rpc import models

# Tool arguments that are a daemon call's parameter: (tool, argument) -> (params model, its field).
FROM_THE_WIRE = {
    ("search_library", "query"): (models.LibrarySearchParams, "query"),
    ("search_library", "top_k"): (models.LibrarySearchParams, "top_k"),
    ("search_library", "collection"): (models.LibrarySearchParams, "collection"),
    ("search_library", "library"): (models.LibrarySearchParams, "library"),
    ("get_item", "item_key"): (models.LibraryItemParams, "item_key"),
    ("get_item", "fulltext_offset"): (models.LibraryItemParams, "fulltext_offset"),
    ("list_tags", "offset"): (models.LibraryTagsParams, "offset"),
    ("list_tags", "contains"): (models.LibraryTagsParams, "contains"),
    ("recent_items", "order"): (models.LibraryItemsParams, "order"),
    ("resume", "guidance"): (models.ResumeAnswer, "guidance"),
    ("sessions", "title"): (models.RenameSessionParams, "title"),
}
CONSTRAINTS = ("minLength", "maxLength", "pattern", "minimum", "maximum", "enum", "minItems", "maxItems")


def _constraints(schema: dict[str, Any]) -> dict[str, Any]:
    branches = schema.get("anyOf", [schema])  # the wire's optional fields: the non-null branch
    branch = next(b for b in branches if b.get("type") != "null")
    return {k: v for k, v in branch.items() if k in CONSTRAINTS}


@pytest.mark.parametrize(("tool", "argument"), sorted(FROM_THE_WIRE))
def test_an_argument_that_is_a_wire_parameter_has_its_limits(tool: str, argument: str) -> None:
    model, field = FROM_THE_WIRE[(tool, argument)]
    wire = model.model_json_schema(by_alias=False)["properties"][field]
    ours = schemas.BY_NAME[tool].listing()["inputSchema"]["properties"][argument]
    assert _constraints(ours) == _constraints(wire) and _constraints(ours)


def test_search_top_k_defaults_to_the_one_declared_default() -> None:
    top_k = schemas.BY_NAME["search_library"].listing()["inputSchema"]["properties"]["top_k"]
    assert top_k["default"] == limits.DEFAULT_SEARCH_TOP_K
    assert models.LibrarySearchParams(query="q").top_k == limits.DEFAULT_SEARCH_TOP_K
    assert tools.arguments("search_library", {"query": "q"}).top_k == limits.DEFAULT_SEARCH_TOP_K  # type: ignore[attr-defined]


def test_schemas_offer_no_null_and_no_generated_titles() -> None:
    for spec in schemas.TOOLS:
        schema = spec.listing()["inputSchema"]
        assert schema["type"] == "object" and schema["additionalProperties"] is False and "title" not in schema
        for name, prop in schema["properties"].items():
            assert "anyOf" not in prop and "title" not in prop and prop.get("default", "") is not None, (spec.name, name)


@pytest.mark.parametrize(("tool", "args", "says"), [
    ("search_library", {}, "invalid arguments for search_library: arguments: 'query' is a required property"),
    ("search_library", {"query": "x", "colection": "t"}, "arguments: Additional properties are not allowed ('colection' was unexpected)"),
    ("search_library", {"query": "x", "top_k": "3"}, "top_k: '3' is not of type 'integer'"),
    ("search_library", {"query": "x", "top_k": 0}, "top_k: 0 is less than the minimum of 1"),
    ("search_library", {"query": ""}, "query: '' is too short"),
    ("search_library", {"query": "x", "item_keys": ["ABCD1234", "nope"]}, "item_keys.1: 'nope' does not match"),
    ("search_library", {"query": "x", "library": "user\n"}, "library: 'user\\\\n' does not match"),
    ("get_item", {"item_key": "ABCD1234", "fulltext_offset": 10**30},
     f"fulltext_offset: {10**30} is greater than the maximum of {limits.MAX_OFFSET}"),
    ("get_item", {"item_key": "ABCD1234", "fulltext": 1}, "fulltext: 1 is not of type 'boolean'"),
    ("recent_items", {"order": "random"}, "order: 'random' is not one of"),
    ("resume", {"session_id": "s", "action": "maybe"}, "action: 'maybe' is not one of"),
])
def test_bad_arguments_are_refused_naming_the_argument(tool: str, args: dict[str, Any], says: str) -> None:
    with pytest.raises(tools.ToolError) as refused:
        tools.arguments(tool, args)
    assert says in str(refused.value)


def test_good_arguments_are_typed() -> None:
    parsed = tools.arguments("get_item", {"item_key": "ABCD1234", "fulltext": True, "fulltext_offset": limits.MAX_OFFSET})
    assert parsed.model_dump() == {"item_key": "ABCD1234", "library": None, "fulltext": True, "fulltext_offset": limits.MAX_OFFSET}
