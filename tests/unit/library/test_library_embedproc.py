"""The embedding child (library/embedproc.py), a real process: its vectors are the in-process
model's, and it is bounded in time and memory, its failures an EmbedFailed saying what happened,
never a child left behind."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest

from zocratesd.library import dense, embedproc
from zocratesd.library.embedproc import ChildSettings, EmbedChild, EmbedFailed

TEXTS = ["Bone fractures after car crashes heal slowly.", "", "Dense retrieval with Wikipedia passages " * 40, "机器学习"]


def _gone(pid: int) -> bool:
    return not Path(f"/proc/{pid}").exists() if Path("/proc").is_dir() else True


def test_the_childs_vectors_are_the_in_process_models() -> None:
    emb = dense.embedder()
    assert emb is not None
    child = EmbedChild()
    child.start()
    pid = child.pid
    try:
        assert child.pack_many(TEXTS) == [emb.pack(t) for t in TEXTS]
        assert child.pack_many([]) == []
        # It yields the CPU to the daemon (its socket first on a busy machine).
        assert pid is not None
        mine = os.getpriority(os.PRIO_PROCESS, 0)
        assert os.getpriority(os.PRIO_PROCESS, pid) == min(19, mine + embedproc.CHILD_NICENESS)
    finally:
        child.close()
    assert pid is not None and _gone(pid)


def test_a_child_that_stalls_is_killed_after_the_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embedproc, "REQUEST_TIMEOUT_S", 1.0)
    child = EmbedChild(ChildSettings(hold_s=30))
    child.start()
    pid = child.pid
    with pytest.raises(EmbedFailed, match=r"took more than 1 s to embed 1 passages \(exit -9, SIGKILL\)") as err:
        child.pack_many(["a sentence"])
    assert not err.value.stopped
    assert pid is not None and _gone(pid)  # killed and reaped


def test_a_child_that_stops_reading_cannot_hang_a_large_request(monkeypatch: pytest.MonkeyPatch) -> None:
    """A request larger than the pipe's buffer (PIPE_BYTES, or less where the system allows less),
    to a child that does not read it: the write is bounded by the same timeout."""
    monkeypatch.setattr(embedproc, "REQUEST_TIMEOUT_S", 1.0)
    child = EmbedChild(ChildSettings(hold_s=30))
    child.start()
    pid = child.pid
    texts = ["coral reefs bleach when the sea warms " * 120] * embedproc.REQUEST_TEXTS  # ~2.3 MB
    assert len(json.dumps(texts)) > 2 * embedproc.PIPE_BYTES
    with pytest.raises(EmbedFailed, match=r"took more than 1 s to embed 500 passages"):
        child.pack_many(texts)
    assert pid is not None and _gone(pid)


def test_a_child_over_its_memory_limit_fails_to_start_and_says_why() -> None:
    child = EmbedChild(ChildSettings(memory=40 * 1024 * 1024))
    with pytest.raises(EmbedFailed, match=r"not installed or not readable \(exit 1\); it said: .+"):
        child.start()


def test_a_killed_child_is_a_stopped_failure() -> None:
    child = EmbedChild()
    child.start()
    child.kill()
    with pytest.raises(EmbedFailed) as err:  # "it was stopped", or the pipe already closed
        child.pack_many(["a sentence"])
    assert err.value.stopped, err.value


def test_the_protocol_frames() -> None:
    vec = bytes(range(dense.DIM))
    payload = embedproc.encode_vectors([vec, None])
    assert embedproc.decode_vectors(payload, 2) == [vec, None]
    with pytest.raises(EmbedFailed, match="an answer of"):
        embedproc.decode_vectors(payload, 3)
    with pytest.raises(EmbedFailed, match="boom"):
        embedproc.decode_vectors(b"Eboom", 1)
    stream = io.BytesIO(embedproc.frame(b"abc") + embedproc.frame(b"") + b"\x00\x00")
    assert [embedproc.read_frame(stream) for _ in range(3)] == [b"abc", b"", None]
    with pytest.raises(EmbedFailed, match="a message of"):
        embedproc.read_frame(io.BytesIO(b"\xff\xff\xff\xff"))
