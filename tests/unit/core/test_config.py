from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from msgspec.structs import asdict

from zocratesd.config import ConfigError, HttpConfig, ModelConfig, ZocratesConfig, config_path, load_config


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.upper().startswith("ZOCRATES_"):
            monkeypatch.delenv(key)


def write(data_dir: Path, content: str) -> None:
    path = config_path(data_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content)


def test_missing_file_gives_every_spec_default(tmp_path: Path) -> None:
    c = load_config(tmp_path)
    assert (c.session_retention_days, c.max_saved_sessions) == (180, 100)
    assert asdict(c.compaction) == {
        "min_turns": 4,
        "token_floor": 30000,
        "hard_backstop_tokens": 100000,
        "keep_recent_turns": 2,
        "decision_threshold": 0.75,
        "probe_timeout_s": 10,
        "probe_model": "inception/mercury-decide:free",
    }
    assert asdict(c.research) == {"initial_budget": 3, "max_extensions": 3}
    assert c.model.provider == "offline"
    assert asdict(c.http) == {"enabled": True, "base_port": 8765, "port": None, "allowed_origins": [],
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
        ('{"compaction": {"min_turnz": 3}}', "compaction.min_turnz: unknown key (got 3)"),
        ('{"max_saved_sessions": "many"}', "max_saved_sessions: expected an integer or null (got 'many')"),
        ('{"model": {"provider": "cloud"}}', "model.provider: must be one of 'offline', 'openai', 'gemini' (got 'cloud')"),
        ('{"research": {"initial_budget": 0}}', "research.initial_budget: expected an integer >= 1 (got 0)"),
        ('{"compaction": {"decision_threshold": 2}}', "compaction.decision_threshold: expected a number <= 1.0 (got 2)"),
        ('{"session_retention_days": -1}', "session_retention_days: expected an integer >= 0 (got -1)"),
        ('{"http": {"allowed_origins": ["a", 1]}}', "http.allowed_origins.1: expected a string (got 1)"),
        ('{"library": {"local_api_url": "http://example.org"}}', "library.local_api_url: the local API is Zotero's own server"),
        ('{"zz": 1}', "zz: unknown key (got 1)"),
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


# The environment as pydantic-settings read it (config.py used it until issue 22): each case is a
# behaviour a user's ZOCRATES_* variables may rely on, checked against the old reader when the
# reader became ours.
@pytest.mark.parametrize(
    "env, expected",
    [
        # names in any case
        ({"zocrates_max_saved_sessions": "21"}, {"max_saved_sessions": 21}),
        ({"Zocrates_Compaction__Min_Turns": "7"}, {"compaction.min_turns": 7}),
        # a section as JSON (its keys in any case), merged under its `__` variables, which win
        ({"ZOCRATES_COMPACTION": '{"MIN_TURNS": 3, "token_floor": 4}'}, {"compaction.min_turns": 3, "compaction.token_floor": 4}),
        ({"ZOCRATES_COMPACTION": '{"min_turns": 3}', "ZOCRATES_COMPACTION__MIN_TURNS": "5"}, {"compaction.min_turns": 5}),
        # a JSON null section leaves the section alone
        ({"ZOCRATES_COMPACTION": "null"}, {"compaction.min_turns": 4}),
        # a list is JSON, alone or inside its section
        ({"ZOCRATES_HTTP__ALLOWED_ORIGINS": '["http://a", "http://b"]'}, {"http.allowed_origins": ["http://a", "http://b"]}),
        ({"ZOCRATES_HTTP": '{"allowed_origins": ["http://x"]}'}, {"http.allowed_origins": ["http://x"]}),
        # other values are strings, converted as pydantic's lax mode converted them
        ({"ZOCRATES_HTTP__ENABLED": "false", "ZOCRATES_LIBRARY__LOCAL_API": "0", "ZOCRATES_HTTP__PORT": "1"},
         {"http.enabled": False, "library.local_api": False, "http.port": 1}),
        ({"ZOCRATES_COMPACTION__DECISION_THRESHOLD": "0.5", "ZOCRATES_SESSION_RETENTION_DAYS": " 5 "},
         {"compaction.decision_threshold": 0.5, "session_retention_days": 5}),
        ({"ZOCRATES_HTTP__ENABLED": "Off", "ZOCRATES_MODEL__ALLOW_INSECURE_HTTP": "yes", "ZOCRATES_MAX_SAVED_SESSIONS": "1_000",
          "ZOCRATES_RPC__MAX_FRAME_BYTES": "2048.0", "ZOCRATES_MODEL__NAME": "null"},
         {"http.enabled": False, "model.allow_insecure_http": True, "max_saved_sessions": 1000, "rpc.max_frame_bytes": 2048,
          "model.name": "null"}),
        # a ZOCRATES_ variable that names no key (the test hooks, a typo without `__`) is ignored
        ({"ZOCRATES_BOGUS": "1", "ZOCRATES_TEST_HOLD_ENGINE_UNTIL": "/x", "ZOCRATES_HTTP_PORT": "1",
          "ZOCRATES_MAX_SAVED_SESSIONS__X": "1", "ZOCRATES_": "1"}, {"max_saved_sessions": 100, "http.port": None}),
    ],
)
def test_environment_is_read_as_before(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, env: dict[str, str], expected: dict[str, Any]) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    c = load_config(tmp_path)
    for key, value in expected.items():
        obj: Any = c
        for part in key.split("."):
            obj = getattr(obj, part)
        assert obj == value, key


@pytest.mark.parametrize(
    "env, expected",
    [
        # an unknown key inside a section is an unknown key, as in the file
        ({"ZOCRATES_COMPACTION__BOGUS": "1"}, "compaction.bogus: unknown key (got '1')"),
        ({"ZOCRATES_COMPACTION": '{"bogus": 1}'}, "compaction.bogus: unknown key (got 1)"),
        ({"ZOCRATES_COMPACTION__MIN_TURNS__X": "1"}, "compaction.min_turns: expected an integer (got {'x': '1'})"),
        # "null" is not null: it would quietly lift the limit
        ({"ZOCRATES_MAX_SAVED_SESSIONS": "null"}, "max_saved_sessions: expected an integer or null (got 'null')"),
        ({"ZOCRATES_HTTP__PORT": ""}, "http.port: expected an integer or null (got '')"),
        ({"ZOCRATES_HTTP__ENABLED": "maybe"}, "http.enabled: expected true or false (got 'maybe')"),
        ({"ZOCRATES_COMPACTION": "[1]"}, "compaction: expected an object (got [1])"),
        ({"ZOCRATES_HTTP__ALLOWED_ORIGINS": ""}, "http.allowed_origins: expected a list (got '')"),
        # a value that must be JSON and is not names its variable (pydantic-settings raised a
        # SettingsError that named neither, and the daemon died with a traceback)
        ({"ZOCRATES_COMPACTION": "min_turns=3"}, "$ZOCRATES_COMPACTION: a section or a list is set as JSON, and this is not JSON"),
        ({"zocrates_http__allowed_origins": "http://a"}, "$zocrates_http__allowed_origins: a section or a list is set as JSON"),
        # the password in a URL stays out of the message
        ({"ZOCRATES_MODEL": '{"base_url": "http://u:hunter2@example.com/v1"'}, "$ZOCRATES_MODEL: a section"),
    ],
)
def test_invalid_environment_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, env: dict[str, str], expected: str) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path)
    assert expected in str(info.value)
    assert "hunter2" not in str(info.value)


def test_sources_merge_section_by_section(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, json.dumps({"compaction": {"min_turns": 6}, "http": {"port": 2, "enabled": False, "allowed_origins": ["http://b"]}}))
    monkeypatch.setenv("ZOCRATES_COMPACTION", '{"token_floor": 1}')
    monkeypatch.setenv("ZOCRATES_HTTP__PORT", "3")
    monkeypatch.setenv("ZOCRATES_HTTP__ALLOWED_ORIGINS", '["http://a"]')
    c = load_config(tmp_path, {"HTTP": {"base_port": 1}})  # a flag's key in any case, as before
    assert (c.compaction.min_turns, c.compaction.token_floor) == (6, 1)
    assert (c.http.port, c.http.enabled, c.http.base_port, c.http.allowed_origins) == (3, False, 1, ["http://a"])  # a list is replaced


def test_only_load_config_reads_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZOCRATES_MAX_SAVED_SESSIONS", "3")
    assert ZocratesConfig().max_saved_sessions == 100  # tests build configs that no variable changes
    assert load_config(tmp_path).max_saved_sessions == 3
    with pytest.raises(ConfigError, match="nope: unknown key"):
        load_config(tmp_path, {"nope": 1})


def test_file_values_convert_as_before(tmp_path: Path) -> None:
    """A file that loaded when the config was pydantic's (lax mode) still loads the same."""
    write(tmp_path, json.dumps({"max_saved_sessions": 5.0, "session_retention_days": "30", "http": {"enabled": 0, "port": True},
                                "compaction": {"probe_timeout_s": "2.5", "token_floor": 7}, "library": {"local_api_url": "http://localhost:1/"}}))
    c = load_config(tmp_path)
    assert (c.max_saved_sessions, c.session_retention_days, c.http.enabled, c.http.port) == (5, 30, False, 1)
    assert (c.compaction.probe_timeout_s, c.compaction.token_floor, c.library.local_api_url) == (2.5, 7, "http://localhost:1")
    for bad in ({"max_saved_sessions": 5.5}, {"http": {"enabled": 2}}, {"model": {"name": 5}}):
        write(tmp_path, json.dumps(bad))
        with pytest.raises(ConfigError):
            load_config(tmp_path)


def test_a_config_made_in_code_is_checked_as_a_file_is() -> None:
    """msgspec checks types and bounds when it converts, not when a struct is made: made in code
    (the tests, `HttpConfig(port=0)`), a config is checked all the same, its sections may be dicts."""
    assert ZocratesConfig(research={"initial_budget": 1}).research.initial_budget == 1
    assert ZocratesConfig(library={"local_api_url": "http://127.0.0.1:9/"}).library.local_api_url == "http://127.0.0.1:9"
    for make in (lambda: HttpConfig(port=-1), lambda: ZocratesConfig(max_saved_sessions=-1),
                 lambda: ZocratesConfig(compaction={"min_turnz": 1}),
                 lambda: ZocratesConfig(research={"initial_budget": 0}),
                 lambda: ModelConfig(provider="openai"), lambda: ModelConfig(provider="cloud")):
        with pytest.raises(ValueError):
            make()


def test_import_stays_cheap() -> None:
    """Every cold start imports config.py before it can answer; pydantic-settings brought asyncio
    and dotenv with it (~50 ms of the 300 ms budget of issue 22), pydantic itself ~100 ms (issue 31)."""
    probe = "import sys, zocratesd.config; print(sorted(m for m in sys.modules if m.split('.')[0] in ('asyncio', 'dotenv', 'pydantic_settings', 'pydantic', 'pydantic_core')))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"
