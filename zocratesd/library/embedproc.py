"""The index's passage vectors, computed in a child process.

Embedding a library's passages needs the dense model (numpy, the token table, the tokenizer:
~50-65 MiB, library/dense.py), and a pass over a large library fragments the heap. Done in the
daemon, a library indexed at start left it idling well over one already indexed, over the idle
memory budget until the next start (bench/PROFILE.md has the figures). So
the indexer sends the chunks' texts to a child that loads the model, embeds, and exits with the
pass: its memory goes back to the system whole, and the embedding's CPU is off the daemon's GIL.
A search still loads the model in the daemon, at its first query (dense.embedder(search=True)).

The child is bounded: its address space (`MAX_CHILD_MEMORY`), every answer's wait
(`LOAD_TIMEOUT_S`, `REQUEST_TIMEOUT_S`); it dies with the daemon (PR_SET_PDEATHSIG on Linux,
and anywhere it exits when its stdin closes), and it is always waited for (no zombie). When it
fails the caller gets `EmbedFailed` with what happened; the index keeps its words (BM25).

The pipe's protocol (sans-IO: `frame`, `read_frame` on any binary stream): each message is a
4-byte big-endian length and a payload. The child first says `R` (ready) or `E` + a UTF-8 error.
A request is a JSON list of texts; its answer `V` + for each text one byte (1: a vector follows,
0: the text has no words) and DIM bytes (int8, as the index stores it; zeros when 0), or `E` +
an error.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import logging
import os
import resource
import select
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, Final, NoReturn

from zocratesd.library import dense

log = logging.getLogger(__name__)

# The child's address space (RLIMIT_AS): with the model loaded and embedding it maps ~145 MiB
# (~80 MiB resident); this leaves room for a large request (and another platform's allocator)
# while a runaway child fails with MemoryError instead of taking the machine's memory.
MAX_CHILD_MEMORY: Final = 1024 * 1024 * 1024
# Waits for an answer: starting (the interpreter, numpy, the model: seconds on a loaded machine)
# and each request (REQUEST_TEXTS chunks). Far above both: only a hung or swapping child reaches them.
LOAD_TIMEOUT_S: Final = 60.0
REQUEST_TIMEOUT_S: Final = 60.0
# Texts per request: bounds a request's JSON (~1,200 characters a chunk) and the child's memory.
REQUEST_TEXTS: Final = 500
# Each way's pipe is asked to hold this much (Linux, F_SETPIPE_SZ; the unprivileged maximum by
# default): a request (~600 KB) and its answer (~130 KB) then cross in one system call each, and
# each call takes the GIL back from the indexer's thread (bench/PROFILE.md, section 17).
PIPE_BYTES: Final = 1024 * 1024
# A message larger than this is refused (a corrupted length would otherwise allocate it).
MAX_FRAME: Final = 64 * 1024 * 1024
# The child's scheduling priority below the daemon's (nice(2)): on a machine whose cores are all
# busy, the daemon's socket and indexing thread get the CPU first. The child keeps up all the
# same: the indexer rarely waits for its vectors (bench/PROFILE.md, section 17).
CHILD_NICENESS: Final = 10
# The child's stderr (a traceback) kept for the log line when it fails.
STDERR_TAIL: Final = 2000
_LEN = struct.Struct(">I")
_RECORD = 1 + dense.DIM


@dataclass(frozen=True)
class ChildSettings:
    memory: int = MAX_CHILD_MEMORY  # the child's address-space limit, bytes
    hold_s: float = 0.0  # the child sleeps this long before it reads each request: tests only


# What each `EmbedChild` gets unless it is given its own. Tests replace it in the daemon they
# start (tests/daemon_entry.py), to hold the child mid-request or make it fail to load.
DEFAULT_SETTINGS = ChildSettings()


class EmbedFailed(Exception):
    """The child could not start, answer in time, or embed; the message says what happened.
    `stopped`: it was killed on purpose (the daemon stops), not a failure to report."""

    def __init__(self, message: str, stopped: bool = False):
        super().__init__(message)
        self.stopped = stopped


def frame(payload: bytes) -> bytes:
    return _LEN.pack(len(payload)) + payload


def read_frame(stream: IO[bytes]) -> bytes | None:
    """One message from `stream`; None at its end (the other side closed or died)."""
    head = stream.read(_LEN.size)
    if len(head) < _LEN.size:
        return None
    (n,) = _LEN.unpack(head)
    if n > MAX_FRAME:
        raise EmbedFailed(f"a message of {n} bytes (at most {MAX_FRAME})")
    body = stream.read(n)
    return body if len(body) == n else None


def encode_vectors(vectors: Sequence[bytes | None]) -> bytes:
    zero = bytes(dense.DIM)
    return b"V" + b"".join(b"\x01" + v if v is not None else b"\x00" + zero for v in vectors)


def decode_vectors(payload: bytes, n: int) -> list[bytes | None]:
    if payload[:1] == b"E":
        raise EmbedFailed(payload[1:].decode("utf-8", "replace"))
    if payload[:1] != b"V" or len(payload) != 1 + n * _RECORD:
        raise EmbedFailed(f"an answer of {len(payload)} bytes for {n} texts")
    out: list[bytes | None] = []
    for i in range(n):
        rec = payload[1 + i * _RECORD : 1 + (i + 1) * _RECORD]
        out.append(rec[1:] if rec[0] == 1 else None)
    return out


class EmbedChild:
    """A child process that embeds texts for the indexer (one thread uses it; `kill` from any)."""

    def __init__(self, settings: ChildSettings | None = None) -> None:
        self.settings = settings or DEFAULT_SETTINGS
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None
        self._killed = False

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self) -> None:
        """Start the child and wait for its model (raises EmbedFailed)."""
        env = dict(os.environ)
        # One thread each: the daemon is one core's worth of work, and each BLAS or tokenizer thread
        # would reserve address space and memory for nothing (a word at a time is encoded).
        env.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
        self._stderr = tempfile.TemporaryFile()
        try:
            self._proc = subprocess.Popen(
                # -P: the daemon's working directory is not put on the child's path (a `numpy.py`
                # there would run); zocratesd comes from where it is installed.
                [sys.executable, "-P", "-m", __name__, str(os.getpid()), str(self.settings.memory),
                 str(self.settings.hold_s)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, env=env, close_fds=True,
            )
        except OSError as exc:
            self.close()
            raise EmbedFailed(f"the embedding process could not start: {exc}") from None
        assert self._proc.stdin is not None and self._proc.stdout is not None
        for pipe in (self._proc.stdin, self._proc.stdout):
            with contextlib.suppress(OSError, AttributeError):  # not Linux, or a lower system limit: smaller writes
                fcntl.fcntl(pipe.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)
        # Writes take what the pipe has room for and never block: a child that stopped reading
        # cannot hang the indexer past its deadline (`_send`).
        os.set_blocking(self._proc.stdin.fileno(), False)
        answer = self._answer(LOAD_TIMEOUT_S, "to load the model")
        if answer[:1] != b"R":
            self._fail(answer[1:].decode("utf-8", "replace") if answer[:1] == b"E" else "an unexpected first message")

    def pack_many(self, texts: Sequence[str]) -> list[bytes | None]:
        """Each text's vector as the index stores it (None: no words), as dense.Embedder.pack."""
        out: list[bytes | None] = []
        for i in range(0, len(texts), REQUEST_TEXTS):
            part = list(texts[i : i + REQUEST_TEXTS])
            proc = self._proc
            if proc is None or proc.stdin is None:
                raise EmbedFailed("the embedding process is not running")
            deadline = time.monotonic() + REQUEST_TIMEOUT_S
            what = f"to embed {len(part)} passages"
            self._send(frame(json.dumps(part, ensure_ascii=False).encode("utf-8", "surrogatepass")), deadline, what)
            try:
                out += decode_vectors(self._answer(deadline - time.monotonic(), what, REQUEST_TIMEOUT_S), len(part))
            except EmbedFailed as exc:
                self._fail(str(exc))
        return out

    def _send(self, data: bytes, deadline: float, what: str) -> None:
        """Write a request whole before `deadline` (a child that stopped reading fills the pipe)."""
        proc = self._proc
        assert proc is not None and proc.stdin is not None
        fd = proc.stdin.fileno()
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(fd, view) :]
                continue
            except BlockingIOError:  # the pipe is full: wait for the child to read
                pass
            except OSError as exc:
                self._fail(f"writing to it failed: {exc}")
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([], [fd], [], left)[1]:
                self._fail(f"it took more than {REQUEST_TIMEOUT_S:.0f} s {what}")

    def _answer(self, timeout: float, what: str, said: float | None = None) -> bytes:
        """The child's next message, whole within `timeout` (a child that stalls mid-message too);
        `said`: the timeout to name when it passes (the request's, of which this is what is left)."""
        proc = self._proc
        assert proc is not None and proc.stdout is not None
        fd = proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        timeout = said or timeout
        buf = bytearray()
        want = _LEN.size
        while len(buf) < want:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                self._fail(f"it took more than {timeout:.0f} s {what}")
            data = os.read(fd, want - len(buf))
            if not data:
                self._fail("it ended" if not self._killed else "it was stopped")
            buf += data
            if want == _LEN.size and len(buf) == want:
                (n,) = _LEN.unpack(buf)
                if n > MAX_FRAME:
                    self._fail(f"a message of {n} bytes (at most {MAX_FRAME})")
                want += n
        return bytes(buf[_LEN.size :])

    def _fail(self, why: str) -> NoReturn:
        """Kill and reap the child; raise EmbedFailed saying why, with the exit and stderr's end."""
        proc = self._proc
        code = None
        if proc is not None:
            try:  # a child that said why it failed is exiting: its own exit status, not our kill
                code = proc.wait(1.0)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = proc.wait()
        tail = ""
        if self._stderr is not None:
            self._stderr.seek(0, os.SEEK_END)
            self._stderr.seek(max(0, self._stderr.tell() - STDERR_TAIL))
            tail = self._stderr.read().decode("utf-8", "replace").strip()
        self.close()
        exit_note = "" if code is None else f" (exit {code}{_signal_name(code)})"
        raise EmbedFailed(f"{why}{exit_note}" + (f"; it said: {tail.splitlines()[-1]}" if tail else ""), stopped=self._killed)

    def kill(self) -> None:
        """Stop the child now (from another thread: the daemon stops); its user sees EmbedFailed."""
        self._killed = True
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()

    def close(self, timeout: float = 5.0) -> None:
        """End the child (its stdin closed, it exits) and reap it; killed if it does not."""
        proc, self._proc = self._proc, None
        if proc is not None:
            try:
                if proc.stdin is not None:
                    proc.stdin.close()
            except OSError:
                pass
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None


def _signal_name(code: int) -> str:
    if code >= 0:
        return ""
    try:
        return f", {signal.Signals(-code).name}"
    except ValueError:
        return ""


# --- the child --------------------------------------------------------------------------------------


def _bound_self(parent: int, limit: int) -> None:
    """Die with the daemon (Linux: a signal when it exits; elsewhere stdin's end), cap memory, and
    yield the CPU to the daemon (CHILD_NICENESS)."""
    if sys.platform.startswith("linux"):
        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # it died before the signal was asked for
        sys.exit(1)
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (limit if hard == resource.RLIM_INFINITY else min(limit, hard), hard))
    os.nice(CHILD_NICENESS)


def _serve(parent: int, limit: int, hold: float) -> int:
    # The protocol owns fd 1: anything a library prints goes to stderr instead.
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    inp = sys.stdin.buffer
    try:
        _bound_self(parent, limit)
        emb = dense.embedder()
        if emb is None:
            raise EmbedFailed("the dense model (wordllama's files, numpy, tokenizers) is not installed or not readable")
        emb.widen()
    except (Exception, MemoryError) as exc:  # said to the daemon, which logs it
        out.write(frame(b"E" + (str(exc) if isinstance(exc, EmbedFailed) else f"{type(exc).__name__}: {exc}").encode()))
        out.flush()
        return 1
    out.write(frame(b"R"))
    out.flush()
    while True:
        if hold:
            time.sleep(hold)  # before reading: a large request then fills the pipe
        if (req := read_frame(inp)) is None:
            break
        try:
            texts = json.loads(req)
            answer = encode_vectors([emb.pack(t) for t in texts])
        except (Exception, MemoryError) as exc:
            answer = b"E" + f"{type(exc).__name__}: {exc}".encode()
        out.write(frame(answer))
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(_serve(int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])))
