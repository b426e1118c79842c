"""The engine's import thread gives way to serving (process/give_way.py, zocratesd/foreground.py):
on a real asyncio loop made by `new_event_loop`, a module imported under `giving_way` runs only
once the loop stops working, within its bounds, and a store read in a worker thread counts."""

from __future__ import annotations

import asyncio
import functools
import importlib
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from zocratesd.foreground import FOREGROUND, Foreground
from zocratesd.process import give_way
from zocratesd.process.give_way import GiveWay, giving_way, new_event_loop, watch_of

SPIN_S = 0.06  # the loop's busy stretch: well over the switch interval
# A spin that ends when the other thread's module ran ends at this cap at the latest: far past any
# delay a loaded machine adds, and far short of what the test's waits would last.
SPIN_CAP_S = 5.0


@pytest.fixture
def module_dir(tmp_path: Path) -> Iterator[Path]:
    sys.path.insert(0, str(tmp_path))
    importlib.invalidate_caches()
    try:
        yield tmp_path
    finally:
        sys.path.remove(str(tmp_path))


@pytest.fixture(autouse=True)
def short_switch_interval() -> Iterator[None]:
    # As while the daemon loads (process/lifecycle.py): a thread that wants the GIL gets it
    # within 0.5 ms, so an import that does not give way runs inside the loop's busy stretch.
    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.0005)
    yield
    sys.setswitchinterval(interval)


def _module(where: Path, name: str) -> str:
    """A module whose body records when it ran into `ran` of module `marks`."""
    (where / f"{name}.py").write_text(f"import time, {__name__} as t\nt.ran['{name}'] = time.monotonic()\n")
    return name


ran: dict[str, float] = {}
loop_importing = threading.Event()  # set by a module body running on the loop's thread


def _spin(seconds: float, until_ran: str | None = None) -> float:
    """Python work on the loop's thread that never awaits: the loop is working throughout. It
    lasts `seconds`, or (with `until_ran`) until that module ran, at most `seconds`."""
    end = time.monotonic() + seconds
    while time.monotonic() < end and (until_ran is None or until_ran not in ran):
        sum(range(100))
    return time.monotonic()


@pytest.fixture
def long_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each wait of `giving_way`'s finder may last 30 s, not 0.1 s: a wait that should happen
    cannot end early, however late a loaded machine runs the loop's thread."""
    monkeypatch.setattr(give_way, "GiveWay", functools.partial(GiveWay, each_s=30))


def _import_beside_busy_loop(
    name: str, *, spin_s: float, total_s: float, hand_over: bool = True, until_ran: bool = False
) -> tuple[float, float]:
    """On a `new_event_loop` loop: a thread imports `name` under `giving_way` (unless `hand_over`
    is False: then plainly), while the loop spins `spin_s` (with `until_ran`: until the module
    ran, at most `spin_s`) from the moment the thread is about to import; returns (when the
    module ran, when the spin ended)."""
    loop = new_event_loop()
    watch = watch_of(loop)
    assert watch is not None
    about_to_import = threading.Event()
    done = threading.Event()

    def importer() -> None:
        with giving_way(watch if hand_over else None, total_s=total_s):
            about_to_import.set()
            importlib.import_module(name)
        done.set()

    async def main() -> float:
        threading.Thread(target=importer, daemon=True).start()
        while not about_to_import.is_set():  # working, never awaiting
            pass
        spun = _spin(spin_s, name if until_ran else None)
        while not done.is_set():  # now the loop waits in select()
            await asyncio.sleep(0.005)
        return spun

    try:
        spun = loop.run_until_complete(main())
    finally:
        loop.close()
    return ran[name], spun


@pytest.mark.usefixtures("long_waits")
def test_an_import_waits_while_the_loop_works(module_dir: Path) -> None:
    name = _module(module_dir, "zq_gw_waits")
    module_ran, spin_ended = _import_beside_busy_loop(name, spin_s=SPIN_S, total_s=10)
    assert module_ran >= spin_ended


def test_without_giving_way_the_import_runs_inside_the_busy_stretch(module_dir: Path) -> None:
    """The control: what the first test rules out does happen when nothing gives way."""
    name = _module(module_dir, "zq_gw_control")
    module_ran, spin_ended = _import_beside_busy_loop(name, spin_s=SPIN_CAP_S, total_s=10, hand_over=False, until_ran=True)
    assert module_ran < spin_ended


def test_the_waits_are_bounded(module_dir: Path) -> None:
    """A loop that stays busy delays an import by the total budget at most, not by its work."""
    name = _module(module_dir, "zq_gw_bounded")
    # The loop works until the module ran (or SPIN_CAP_S): an unbounded wait would outlast the work.
    module_ran, spin_ended = _import_beside_busy_loop(name, spin_s=SPIN_CAP_S, total_s=0.02, until_ran=True)
    assert module_ran < spin_ended


def test_a_read_in_a_worker_thread_counts_as_serving() -> None:
    fg = Foreground()
    fg.watch(True)
    fg.loop_waiting(True)
    assert fg.idle.is_set()
    with fg.work():  # the reader's query, in its thread (store/reader.py)
        assert not fg.idle.is_set()
        fg.loop_waiting(False)
        fg.loop_waiting(True)
        assert not fg.idle.is_set()
    assert fg.idle.is_set()
    fg.loop_waiting(False)
    assert not fg.idle.is_set()
    fg.loop_waiting(True)
    fg.watch(False)  # stopped: idle is left clear, and a read changes nothing
    assert not fg.idle.is_set()
    with fg.work():
        assert not fg.idle.is_set() and fg._work == 0
    assert not fg.idle.is_set() and fg._work == 0


def test_the_finder_is_removed_and_tracking_stops() -> None:
    loop = new_event_loop()
    try:
        watch = watch_of(loop)
        assert watch is not None and watch.foreground is FOREGROUND
        before = list(sys.meta_path)
        with giving_way(watch) as finder:
            assert isinstance(finder, GiveWay) and sys.meta_path[0] is finder
            assert FOREGROUND.watched and finder.waited_s == 0
        assert sys.meta_path == before and not FOREGROUND.watched
        with giving_way(None) as nothing:  # a loop not made by new_event_loop: nothing changes
            assert nothing is None and sys.meta_path == before
    finally:
        loop.close()
    assert watch_of(asyncio.new_event_loop()) is None


def test_other_threads_never_wait() -> None:
    fg = Foreground()
    fg.watch(True)  # the loop is "working" (never reported waiting): the import thread would wait
    # A wait here would last 10 s (the loop never idles): unmistakable on any machine.
    finder = GiveWay(fg.idle, loop_thread=lambda: fg.loop_thread, each_s=10, total_s=10)
    seen: list[float] = []

    def elsewhere() -> None:
        started = time.monotonic()
        finder.find_spec("anything", None)
        seen.append(time.monotonic() - started)

    t = threading.Thread(target=elsewhere)
    t.start()
    t.join()
    assert finder.left_s == 10 and seen[0] < 5


@pytest.mark.usefixtures("long_waits")
@pytest.mark.parametrize("waited_first", [True, False])
def test_no_wait_while_the_loop_thread_is_importing(module_dir: Path, waited_first: bool) -> None:
    """The loop's thread inside an import (uvicorn imports its lifespan class on the loop, say)
    may need a module lock the import thread holds: the import thread must not wait for it, also
    when the loop has been busy since the import thread began (the first request of a cold start
    building a pydantic model, issue 31) and so never reported its thread by waiting."""
    ready = threading.Event()
    loop_importing.clear()
    on_loop = f"zq_gw_on_loop_{waited_first}"
    name = _module(module_dir, f"zq_gw_beside_{waited_first}")
    # The loop's import works until the import thread's module ran (SPIN_CAP_S at most): that
    # thread waiting for the loop (30 s a wait, long_waits) would only run its module after it.
    (module_dir / f"{on_loop}.py").write_text(
        f"import time, {__name__} as t\nt.loop_importing.set()\nt._spin({SPIN_CAP_S}, {name!r})\nt.ran[{on_loop!r}] = time.monotonic()\n"
    )
    loop = new_event_loop()
    watch = watch_of(loop)
    assert watch is not None
    watch.foreground.loop_thread = None  # as in a new process (an earlier test's loop reported it)
    done = threading.Event()

    def importer() -> None:
        with giving_way(watch, total_s=10):
            ready.set()
            loop_importing.wait(10)
            importlib.import_module(name)
        done.set()

    async def main() -> None:
        threading.Thread(target=importer, daemon=True).start()
        while not ready.is_set():
            pass
        if waited_first:
            await asyncio.sleep(0.01)  # the loop waits once, and so reports its thread
        importlib.import_module(on_loop)  # works inside its import, on the loop
        while not done.is_set():
            await asyncio.sleep(0.005)

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    assert ran[name] < ran[on_loop]
