from __future__ import annotations

import json
from pathlib import Path

import pytest

from zocratesd.config import ConfigError, config_path, load_config


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for key in list(os.environ):
        if key.startswith("ZOCRATES_"):
            monkeypatch.delenv(key)


def write(data_dir: Path, content: str) -> None:
    path = config_path(data_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content)


def test_missing_file_gives_every_spec_default(tmp_path: Path) -> None:
    c = load_config(tmp_path)
    assert (c.session_retention_days, c.max_saved_sessions) == (180, 100)
    assert c.compaction.model_dump() == {
        "min_turns": 4,
        "token_floor": 30000,
        "hard_backstop_tokens": 100000,
        "keep_recent_turns": 2,
        "decision_threshold": 0.75,
        "probe_timeout_s": 10,
        "probe_model": "inception/mercury-decide:free",
    }
    assert c.research.model_dump() == {"initial_budget": 3, "max_extensions": 3}
    assert c.model.provider == "offline"
    assert c.http.model_dump() == {"enabled": True, "base_port": 8765, "port": None, "allowed_origins": [],
                                   "max_connections": 512, "head_timeout_s": 10.0, "body_timeout_s": 30.0}
    assert c.rpc.max_frame_bytes == 16 * 1024 * 1024


def test_precedence_file_then_env_then_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, json.dumps({"max_saved_sessions": 10, "compaction": {"min_turns": 6, "token_floor": 5}}))
    c = load_config(tmp_path)
    assert (c.max_saved_sessions, c.compaction.min_turns, c.compaction.token_floor) == (10, 6, 5)
    monkeypatch.setenv("ZOCRATES_COMPACTION__MIN_TURNS", "8")
    monkeypatch.setenv("ZOCRATES_MAX_SAVED_SESSIONS", "20")
    c = load_config(tmp_path)
    assert (c.max_saved_sessions, c.compaction.min_turns, c.compaction.token_floor) == (20, 8, 5)
    c = load_config(tmp_path, {"compaction": {"min_turns": 9}, "model": {"provider": "openai", "name": "m", "base_url": "http://127.0.0.1:1/v1"}})
    # A flag overrides one key of a section and keeps the file's other keys.
    assert (c.compaction.min_turns, c.compaction.token_floor, c.model.name) == (9, 5, "m")


def test_zero_and_null_disable_retention(tmp_path: Path) -> None:
    write(tmp_path, '{"session_retention_days": 0, "max_saved_sessions": null}')
    c = load_config(tmp_path)
    assert c.session_retention_days == 0 and c.max_saved_sessions is None


@pytest.mark.parametrize(
    "content, expected",
    [
        ('{"compaction": {"min_turnz": 3}}', "compaction.min_turnz: unknown key"),
        ('{"max_saved_sessions": "many"}', "max_saved_sessions: Input should be a valid integer"),
        ('{"model": {"provider": "cloud"}}', "model.provider"),
        ('{"research": {"initial_budget": 0}}', "research.initial_budget"),
        ('{"compaction": {"decision_threshold": 2}}', "compaction.decision_threshold"),
        ('{"session_retention_days": -1}', "session_retention_days"),
        ('{"max_saved_sessions": 5,}', "not valid JSON at line 1"),
        ("[1, 2]", "top level must be a JSON object"),
    ],
)
def test_invalid_file_is_a_clear_error_naming_the_key(tmp_path: Path, content: str, expected: str) -> None:
    write(tmp_path, content)
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path)
    assert expected in str(info.value)
    assert str(config_path(tmp_path)) in str(info.value)


def test_invalid_env_value_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZOCRATES_RPC__MAX_FRAME_BYTES", "tiny")
    with pytest.raises(ConfigError, match="rpc.max_frame_bytes"):
        load_config(tmp_path)
