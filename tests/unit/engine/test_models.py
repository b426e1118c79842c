from __future__ import annotations

from pathlib import Path

import pytest

from zocratesd.config import ConfigError, load_config
from zocratesd.engine.models import build_model
from zocratesd.engine.models.offline import STREAM_MAX_WORDS, OfflineLlm, stream_pieces
from zocratesd.engine.models.openai import OpenAICompatLlm


@pytest.fixture(autouse=True)
def no_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("GOOGLE_API_KEY", "GEMINI_API_KEY", "ZQ_KEY"):
        monkeypatch.delenv(var, raising=False)


def test_offline_is_the_default(tmp_path: Path) -> None:
    assert isinstance(build_model(load_config(tmp_path).model), OfflineLlm)


@pytest.mark.parametrize(
    "model, message",
    [
        ({"provider": "openai", "name": "m"}, "needs base_url"),
        ({"provider": "openai", "name": "m", "base_url": "ftp://x"}, "needs base_url"),
        ({"provider": "openai", "base_url": "http://127.0.0.1:1/v1"}, "needs name"),
        ({"provider": "openai", "name": "m", "base_url": "http://127.0.0.1:1/v1", "api_key_env": "ZQ_KEY"}, "$ZQ_KEY, which is not set"),
        ({"provider": "gemini"}, "needs a Google API key"),
        ({"provider": "gemini", "api_key_env": "ZQ_KEY"}, "$ZQ_KEY, which is not set"),
    ],
)
def test_a_misconfigured_model_stops_the_start(tmp_path: Path, model: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path, {"model": model})
    assert "model" in str(info.value) and message in str(info.value)


def test_openai_and_gemini_build_with_their_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZQ_KEY", "sk-1")
    m = build_model(load_config(tmp_path, {"model": {"provider": "openai", "name": "llama3", "base_url": "http://127.0.0.1:11434/v1", "api_key_env": "ZQ_KEY"}}).model)
    assert isinstance(m, OpenAICompatLlm) and m.model == "llama3" and m.api_key == "sk-1"
    m = build_model(load_config(tmp_path, {"model": {"provider": "openai", "name": "llama3", "base_url": "http://127.0.0.1:11434/v1"}}).model)
    assert m.api_key is None  # Ollama and friends need no key

    from google.adk.models.google_llm import Gemini

    monkeypatch.setenv("GEMINI_API_KEY", "g-1")
    g = build_model(load_config(tmp_path, {"model": {"provider": "gemini"}}).model)
    assert isinstance(g, Gemini) and g.model == "gemini-2.5-flash"


def test_the_offline_answer_streams_a_paragraph_at_a_time() -> None:
    answer = (
        "Here is what your library says:\n\n- A quote. [1]\n\n## Part two\n- See above [1].\n- And more [2].\n\n"
        "# Cited Sources\n[1] A (2020). T.\n[2] B (2021). U."
    )
    pieces = stream_pieces(answer)
    assert "".join(pieces) == answer
    # Each piece is a markdown block with the blank lines after it: never half a heading or item.
    assert pieces == [
        "Here is what your library says:\n\n", "- A quote. [1]\n\n", "## Part two\n- See above [1].\n- And more [2].\n\n",
        "# Cited Sources\n[1] A (2020). T.\n[2] B (2021). U.",
    ]
    # A long block goes a few whole lines at a time; a long line is cut between words; leading
    # blank lines go with the first block; everything joins back exactly.
    line = " ".join(f"w{i}" for i in range(STREAM_MAX_WORDS * 2 + 3)) + "\n"
    short = "a b c d e\n"
    text = "\n\n" + short * 4 + line + short + "\n" + "end"
    pieces = stream_pieces(text)
    assert "".join(pieces) == text
    assert [len(p.split()) for p in pieces] == [20, STREAM_MAX_WORDS, STREAM_MAX_WORDS, 3 + 5, 1]
    assert pieces[0].startswith("\n\na b") and pieces[3].endswith("a b c d e\n\n")
    assert all(len(p.split()) <= STREAM_MAX_WORDS for p in pieces)
    assert stream_pieces("") == [] and stream_pieces("one") == ["one"]
