"""doctor's library-index line from a daemon's status (the daemon's words, and a stuck indexer named);
a broken plugin in the package and what to do about it; how a warning reads in the report."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from zocratesd import __version__
from zocratesd.install import doctor, plugin

NOW = datetime(2026, 12, 6, 12, 0, 0, tzinfo=UTC).timestamp()


def status(last_look: str | None, state: str = "ready") -> doctor.IndexState:
    return doctor.IndexState.of({"state": state, "summary": "library ready: 30 items, 30 full texts (from zotero.sqlite)",
                                 "last_look": last_look, "items_total": 30})


def test_a_recent_look_passes_with_its_age() -> None:
    check = doctor.check_index(status("2026-12-06T11:59:55+00:00"), now=NOW)
    assert (check.status, check.summary) == ("ok", "library ready: 30 items, 30 full texts (from zotero.sqlite); last looked for changes 5 s ago")


def test_an_indexer_that_stopped_looking_fails_with_what_to_do() -> None:
    check = doctor.check_index(status("2026-12-06T11:00:00+00:00"), now=NOW)
    assert check.status == "fail"
    assert check.summary.endswith("it last looked at Zotero for changes 60 min ago")
    assert "zocrates library refresh" in check.fix


def test_an_error_state_fails_and_no_daemon_is_a_skip() -> None:
    failed = doctor.check_index(doctor.IndexState.of({"state": "error", "message": "zotero.sqlite is not a database"}), now=NOW)
    assert (failed.status, failed.summary) == ("fail", "error: zotero.sqlite is not a database")
    assert doctor.check_index(None).status == "skip"


def test_a_broken_plugin_in_the_package_fails_with_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The package's plugin files as a broken install leaves them: a manifest without its version.
    (tmp_path / "manifest.json").write_text(json.dumps({"applications": {"zotero": {"id": "zocrates@zocratesd.org"}}}))
    monkeypatch.setattr(plugin, "plugin_dir", lambda: tmp_path)
    ctx = doctor.Context(home=tmp_path, data_dir=tmp_path, data_dir_source="a test", profile=None, environ={})
    check = doctor.check_plugin(ctx)
    assert (check.status, check.summary) == ("fail", "the plugin's manifest.json lacks its id or version")
    assert check.fix.startswith("reinstall zocrates (`pipx reinstall zocrates`")
    assert check.line() == f"FAIL Zotero plugin: {check.summary}; {check.fix}"
    # `zocratesd plugin` says the same in one message.
    with pytest.raises(plugin.PluginError) as caught:
        plugin.build_xpi(tmp_path)
    assert str(caught.value) == f"{check.summary}; {check.fix}"


def test_a_warning_passes_and_the_report_says_it_has_one() -> None:
    checks = [doctor.Check("data dir", "ok", "~/Zotero"), doctor.Check("Zotero version", "warn", "schema 131", "read on trust")]
    report = doctor.Report.of(Path("/z"), checks)
    assert report.passed and report.version == __version__
    assert doctor.render(report).splitlines() == ["ok   data dir: ~/Zotero", "WARN Zotero version: schema 131; read on trust",
                                                  "all checks passed, 1 with a warning"]
    failing = doctor.Report.of(Path("/z"), [*checks, doctor.Check("daemon", "fail", "none", "start it")])
    assert not failing.passed and doctor.render(failing).endswith("\n1 check failed")
