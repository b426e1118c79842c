"""PromptContext.build: the core's validating constructor, and the ACP face's mapping onto it."""

from __future__ import annotations

from typing import Any

import pytest

from zocratesd.core.context import PromptContext, Snippet
from zocratesd.errors import InvalidInput
from zocratesd.rpc.agent import prompt_input


def test_plain_values_and_wire_objects_build_the_same_context() -> None:
    from_pairs = PromptContext.build(
        items=[("KARPDPR1", "DPR")],
        snippets=[Snippet(kind="text", item_key="KARPDPR1", text="two encoders", page=3, key="ANNOT001")],
    )
    from_objects = PromptContext.build(
        mode="papers",
        items=[{"item_key": "KARPDPR1", "title": "DPR"}],
        snippets=[{"item_key": "KARPDPR1", "text": "two encoders", "page": 3, "key": "ANNOT001"}],
    )
    assert from_pairs == from_objects
    assert from_pairs.mode == "papers"  # items given, no mode: papers
    assert from_pairs.state_delta()["snippets"] == [
        {"kind": "text", "item_key": "KARPDPR1", "text": "two encoders", "page": 3, "key": "ANNOT001"}
    ]


def test_defaults_and_collection_scope() -> None:
    assert PromptContext.build() == PromptContext()
    assert PromptContext.build(mode="library", collection="ABCD1234").collection is None  # only in collection mode
    ctx = PromptContext.build(mode="collection", collection="ABCD1234")
    assert (ctx.mode, ctx.collection, ctx.scope().collection) == ("collection", "ABCD1234", "ABCD1234")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"mode": "galaxy"}, "mode must be"),
        ({"mode": "papers"}, 'mode "papers" needs at least one active item'),
        ({"mode": "collection"}, "collection must be a Zotero key"),
        ({"items": "ABCD1234"}, "active items must be a list"),
        ({"items": [["ABCD1234", "t"]]}, "each active item is an object"),
        ({"items": [{"item_key": "../etc"}]}, "item_key must be a Zotero key"),
        ({"items": [("ABCD1234", "x" * 1001)]}, "title is longer than 1000 characters"),
        ({"items": [("ABCD1234", "")] * 501}, "at most 500 active items"),
        ({"snippets": [{"item_key": "ABCD1234", "kind": "video"}]}, 'a snippet kind is "text" or "image"'),
        ({"snippets": [{"item_key": "ABCD1234", "page": -1}]}, "a snippet page is a non-negative integer"),
        ({"snippets": [{"item_key": "ABCD1234", "page": True}]}, "a snippet page is a non-negative integer"),
        ({"snippets": [{"item_key": "ABCD1234", "text": "x" * 20_001}]}, "snippet text is longer than 20000"),
        ({"snippets": [{"item_key": "ABCD1234"}] * 51}, "at most 50 snippets"),
        ({"snippets": ["text"]}, "each snippet is an object"),
    ],
)
def test_bad_values_are_refused_with_a_message(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidInput, match=message.replace("(", r"\(")):
        PromptContext.build(**kwargs)


def test_acp_maps_meta_zocrates_and_zotero_links() -> None:
    blocks = [
        {"type": "text", "text": "What is DPR?"},
        {"type": "resource_link", "uri": "zotero://select/library/items/KARPDPR1", "name": "DPR"},
        {"type": "resource_link", "uri": "zotero://select/library/items/GAOHYDE1", "name": "HyDE"},
        {"type": "resource_link", "uri": "https://example.org/x", "name": "elsewhere"},
    ]
    meta = {"zocrates": {"activeItems": [{"item_key": "KARPDPR1", "title": "Dense Passage Retrieval"}],
                         "snippets": [{"kind": "image", "item_key": "KARPDPR1", "page": 2}]}}
    text, ctx = prompt_input(blocks, meta)
    assert text == "What is DPR?\n[elsewhere](https://example.org/x)"
    assert ctx.mode == "papers"
    assert ctx.items == (("KARPDPR1", "Dense Passage Retrieval"), ("GAOHYDE1", "HyDE"))  # a link adds, never repeats
    assert ctx.snippets == (Snippet(kind="image", item_key="KARPDPR1", page=2),)
    # An explicit mode wins over the links' "papers".
    assert prompt_input(blocks[:2], {"zocrates": {"mode": "library"}})[1].mode == "library"
    assert prompt_input([{"type": "text", "text": "x"}], None)[1] == PromptContext()
    with pytest.raises(InvalidInput, match='"_meta.zocrates" must be an object'):
        prompt_input([{"type": "text", "text": "x"}], {"zocrates": "papers"})
    with pytest.raises(InvalidInput, match="active items must be a list"):
        prompt_input(blocks[:2], {"zocrates": {"activeItems": "KARPDPR1"}})
