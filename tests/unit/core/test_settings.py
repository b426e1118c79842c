"""The settings the sidebar may change (zocratesd/core/settings.py): validation by the config's own
fields, the file written atomically with every other key kept, live application, environment."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from zocratesd.config import load_config
from zocratesd.core.settings import APPLIES, Settings, env_keys
from zocratesd.errors import InvalidInput, ZocratesError


def make(tmp_path: Path, file: dict[str, object] | None = None, environ: dict[str, str] | None = None) -> Settings:
    state = tmp_path / "zocrates-data"
    state.mkdir(exist_ok=True)
    path = state / "zocrates_config.json"
    if file is not None:
        path.write_text(json.dumps(file))
    return Settings(load_config(tmp_path), path, environ or {})


@pytest.mark.anyio
async def test_an_update_is_validated_written_and_applied_now(tmp_path: Path) -> None:
    s = make(tmp_path, {"model": {"provider": "offline"}, "compaction": {"probe_model": "p/q"}})
    s.path.chmod(0o640)
    config = s._config
    out = await s.update({"max_saved_sessions": 7, "compaction": {"token_floor": 10, "probe_timeout_s": 2}})
    assert sorted(out["changed"]) == ["compaction.probe_timeout_s", "compaction.token_floor", "max_saved_sessions"]
    assert config.max_saved_sessions == 7 and config.compaction.token_floor == 10
    assert config.compaction.probe_timeout_s == 10.0  # next start only
    assert out["restart_needed"] == ["compaction.probe_timeout_s"]
    assert json.loads(s.path.read_text()) == {
        "model": {"provider": "offline"}, "compaction": {"probe_model": "p/q", "token_floor": 10, "probe_timeout_s": 2.0},
        "max_saved_sessions": 7}
    # What was written loads as the daemon's config at its next start.
    assert load_config(tmp_path).compaction.probe_timeout_s == 2.0
    assert stat.S_IMODE(s.path.stat().st_mode) == 0o640  # the user's mode, kept


@pytest.mark.anyio
async def test_a_new_file_is_private_and_an_unchanged_value_writes_nothing(tmp_path: Path) -> None:
    s = make(tmp_path)
    assert (await s.update({"session_retention_days": 180}))["changed"] == []
    assert not s.path.exists()
    await s.update({"session_retention_days": 0})
    assert stat.S_IMODE(s.path.stat().st_mode) == 0o600
    assert json.loads(s.path.read_text()) == {"session_retention_days": 0}


@pytest.mark.anyio
@pytest.mark.parametrize("patch, field", [
    ({"max_saved_sessions": -1}, "max_saved_sessions"),
    ({"max_saved_sessions": 1.0}, "max_saved_sessions"),
    ({"max_saved_sessions": False}, "max_saved_sessions"),
    ({"compaction": {"decision_threshold": float("nan")}}, "compaction.decision_threshold"),
    ({"compaction": {"probe_timeout_s": float("inf")}}, "compaction.probe_timeout_s"),
    ({"compaction": {"probe_timeout_s": 0}}, "compaction.probe_timeout_s"),
    ({"compaction": {"min_turns": None}}, "compaction.min_turns"),
    ({"compaction": {"probe_model": "x"}}, "compaction.probe_model"),
    ({"compaction": []}, "compaction"),
    ({"rpc": {"max_frame_bytes": 1}}, "rpc"),
    ({"library": {"enabled": False}}, "library"),
    ({"token_floor": 1}, "token_floor"),
])
async def test_a_bad_patch_names_its_field_and_changes_nothing(tmp_path: Path, patch: dict[str, object], field: str) -> None:
    s = make(tmp_path, {"research": {"max_extensions": 1}})
    before = s.path.read_bytes()
    with pytest.raises(InvalidInput) as caught:
        await s.update(patch)
    assert caught.value.data["field"] == field
    assert s.path.read_bytes() == before and s._config.max_saved_sessions == 100


@pytest.mark.anyio
async def test_a_file_broken_since_start_is_not_overwritten(tmp_path: Path) -> None:
    s = make(tmp_path, {"research": {"max_extensions": 1}})
    s.path.write_text("[not an object")
    with pytest.raises(ZocratesError) as caught:
        await s.update({"max_saved_sessions": 5})
    assert type(caught.value) is ZocratesError and "not overwritten" in caught.value.message
    assert s.path.read_text() == "[not an object" and s._config.max_saved_sessions == 100


def test_environment_variables_lock_their_keys() -> None:
    environ = {"zocrates_session_retention_days": "3", "ZOCRATES_COMPACTION__MIN_TURNS": "2",
               "ZOCRATES_RESEARCH": '{"initial_budget": 2}', "ZOCRATES_HTTP__PORT": "1"}
    assert env_keys(environ) == {"session_retention_days": "zocrates_session_retention_days",
                                 "compaction.min_turns": "ZOCRATES_COMPACTION__MIN_TURNS",
                                 "research.initial_budget": "ZOCRATES_RESEARCH"}
    assert set(env_keys({})) == set()


@pytest.mark.anyio
async def test_a_key_the_environment_sets_is_refused(tmp_path: Path) -> None:
    s = make(tmp_path, environ={"ZOCRATES_MAX_SAVED_SESSIONS": "3"})
    assert s.view()["environment"] == ["max_saved_sessions"]
    with pytest.raises(InvalidInput) as caught:
        await s.update({"max_saved_sessions": 4})
    assert caught.value.data["field"] == "max_saved_sessions" and "$ZOCRATES_MAX_SAVED_SESSIONS" in caught.value.message


def test_every_editable_key_exists_in_the_config() -> None:
    config = load_config(Path("/nonexistent-zq"))
    for key in APPLIES:
        obj: object = config
        for part in key.split("."):
            obj = getattr(obj, part)


@pytest.mark.anyio
async def test_a_research_budget_changed_live_decides_the_next_turn(tmp_path: Path) -> None:
    """The daemon's engine reads the very config object the settings update: with the default
    budget (3 rounds) a two-aspect question is answered; after `research.initial_budget: 1` the
    same question pauses at a checkpoint, without a restart."""
    from zocratesd.core.daemon import LIBRARY_PASSAGES_FILE, Daemon

    state = tmp_path / "zocrates-data"
    state.mkdir()
    passages = [{"item_key": "LEWIS202", "title": "RAG", "text": "RAG combines parametric and non-parametric memory."},
                {"item_key": "GAOHYDE1", "title": "HyDE", "text": "HyDE writes a hypothetical document and retrieves with it."}]
    (state / LIBRARY_PASSAGES_FILE).write_text("".join(json.dumps(p) + "\n" for p in passages))
    d = Daemon(tmp_path, load_config(tmp_path))
    await d.start()
    try:
        question = "What does RAG combine? How does HyDE retrieve?"
        sid = (await d.create_session()).id
        assert (await d.prompt(sid, question)).pending_hitl is None
        out = await d.settings.update({"research": {"initial_budget": 1}, "compaction": {"min_turns": 9}})
        assert out["changed"] == ["research.initial_budget", "compaction.min_turns"] and out["restart_needed"] == []
        assert d.settings.view()["settings"]["research"]["initial_budget"] == 1
        assert d.compactor.config.min_turns == 9 and d.maintenance._config is d.config
        sid = (await d.create_session()).id
        assert (await d.prompt(sid, question)).pending_hitl is not None
    finally:
        await d.aclose()
