"""`SessionsDb` before its ADK service is loaded (`load_service=False`): reads of an existing store
work on sqlite3 alone; a new file (no tables until the service makes them) has no session."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from zocratesd.errors import SessionNotFound
from zocratesd.store import APP_NAME, USER_ID, SessionsDb


@pytest.mark.anyio
async def test_reads_before_the_service_and_a_new_file_waiting_for_it(tmp_path: Path) -> None:
    # A new file: no tables yet, so no session (answered at once, without the service).
    db = SessionsDb.open(tmp_path, load_service=False)
    assert not db.service_loaded
    with pytest.raises(RuntimeError, match="not loaded yet"):
        db.service  # noqa: B018
    assert await db.reader.list_sessions() == [] and not await db.reader.exists("s1")
    with pytest.raises(SessionNotFound):
        await db.reader.ui_session("s1")
    db.load_service()
    await db.prepare_tables()
    await db.service.create_session(app_name=APP_NAME, user_id=USER_ID, session_id="s1")
    await db.aclose()

    # An existing store: read at once, no service, no ADK needed.
    light = SessionsDb.open(tmp_path, load_service=False)
    with anyio.fail_after(10):
        rows = await light.reader.list_sessions()
    assert [r.id for r in rows] == ["s1"] and not light.service_loaded
    await light.aclose()  # closes what it opened; no service to close
