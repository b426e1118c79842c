"""The start-up plan (zocratesd/process/startup.py): its stages in order, each announced to the
hook before it loads, its `done` set on the loop once loaded, and nothing more once the loop is gone."""

from __future__ import annotations

import sys
from collections.abc import Callable

import pytest

from zocratesd.process.startup import ENGINE, SHIM, WIRE, Loaded, Plan, Stage, daemon_plan


def test_the_daemon_loads_the_wire_stack_first_and_the_engine_last() -> None:
    assert [s.stage for s in daemon_plan(http=True).stages] == [WIRE, SHIM, ENGINE]
    assert [s.stage for s in daemon_plan(http=False).stages] == [WIRE, ENGINE]


@pytest.mark.anyio
async def test_each_stage_is_announced_loaded_and_marked_done_in_order() -> None:
    seen: list[str] = []
    ran: list[str] = []
    first = Stage("first", ("zocratesd.deferred",), then=lambda: ran.append("first"))
    second = Stage("second", ("json",))

    def before(name: str) -> None:
        done = [s.stage.name for s in plan.stages if s.done.is_set()]
        seen.append(f"{name} after {done}")

    plan = Plan([Loaded(first), Loaded(second)], before_stage=before)
    plan.load(lambda callback: callback())
    assert seen == ["first after []", "second after ['first']"]
    assert ran == ["first"] and "zocratesd.deferred" in sys.modules
    assert all(s.done.is_set() for s in plan.stages)
    assert set(plan.timings) == {"first", "second"} and "first" in plan.describe()


@pytest.mark.anyio
async def test_a_closed_loop_ends_the_load() -> None:
    """The daemon stopped while a stage loaded: the loop is closed, the next stages are not loaded."""

    def closed(callback: Callable[[], object]) -> object:
        raise RuntimeError("Event loop is closed")

    plan = Plan([Loaded(Stage("first", ("json",))), Loaded(Stage("second", ("zocratesd.never.a.module",)))])
    plan.load(closed)  # would raise ModuleNotFoundError had it gone on
    assert list(plan.timings) == ["first"] and not plan.stages[0].done.is_set()
