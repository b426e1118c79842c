"""The dense stage: a static word-embedding model that re-ranks the word index's candidates.

BM25 misses a paper that says the claim in other words; an embedding of the passage catches
some of them. The model is `wordllama`'s (a dependency of the default install): static
256-dimensional embeddings of Llama 2's token vocabulary, shipped inside the wheel (16 MB), so it
runs offline and needs no GPU. Its two files are read from the installed package by this module
(safetensors by hand, the tokenizer with `tokenizers`); nothing is downloaded, and wordllama
itself is never imported. With `library.dense = false`, or without the package (or its files),
the stage is off and search is BM25 alone.

Memory: loaded, the model costs ~50-65 MiB (numpy, the token table, the tokenizer), a third of
the daemon's idle budget. So the daemon loads it when its first search needs it, never at start;
the library's indexer embeds its chunks in a child process (library/embedproc.py), so a daemon
whose library was just indexed is idle without it too (unless a search has loaded it: the
indexer then uses it in-process, `loaded`). A passages-file library (passages.py) builds its
index in-process and releases the model after (`release`) unless a search has used it.

A passage's vector is the mean of its tokens' vectors, normalised. Words are tokenized one at a
time through a cache (Llama's tokenizer starts every word with its own "▁" piece, so a word
tokenizes alike wherever it stands): a passage costs a few dictionary look-ups instead of a pass
of the tokenizer, ~10x faster, which keeps indexing cheap. Vectors are stored in the index as
int8 (256 bytes per chunk) when the chunk is written; a search embeds only the query.

Measured on BEIR SciFact (bench/bench_retrieval.py), the module docstring of library/index.py
says how it is combined and what it gains.
"""

from __future__ import annotations

import array
import ctypes
import ctypes.util
import functools
import importlib.util
import json
import logging
import struct
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from zocratesd import deferred

if TYPE_CHECKING:
    import numpy as np

log = logging.getLogger(__name__)

# What the index records in its meta table: an index whose vectors came from another model (or
# none) is rebuilt when this one is available, so every chunk has a vector of the same kind.
MODEL_NAME = "wordllama-0.4 l2_supercat 256"
DIM = 256
# The files inside the wordllama 0.4 wheel (its "l2_supercat" model at 256 dimensions).
WEIGHTS = "weights/l2_supercat_256.safetensors"
TOKENIZER = "tokenizers/l2_supercat_tokenizer_config.json"
TENSOR = "embedding.weight"
# Distinct words whose token ids are kept (a library has ~10^5-10^6 distinct words): each entry is
# the word and its ids packed as int32, ~170 bytes, so this bounds the cache near 35 MB; a full
# cache starts over (a library's common words come back within a few chunks).
WORD_CACHE = 200_000
# A passage longer than this many words is embedded from its first ones (a chunk is ~1,200
# characters, ~200 words; this only bounds a pathological one).
MAX_WORDS = 1000


class _WordIds(dict[str, bytes]):
    """word -> its token ids as native int32 bytes. A dict with `__missing__`: a word seen before
    (nearly every one) costs a C look-up, and a passage's ids are one `b"".join`, read by numpy
    without a Python int per token; bytes take half the memory of a tuple of ints."""

    def __init__(self, tokenizer: Any):
        super().__init__()
        self._tokenizer = tokenizer

    def __missing__(self, word: str) -> bytes:
        ids = array.array("i", self._tokenizer.encode(word, add_special_tokens=False).ids).tobytes()
        if len(self) >= WORD_CACHE:
            self.clear()
        self[word] = ids
        return ids


class Vectorizer(Protocol):
    """What the index writer embeds with: this process's `Embedder`, or embedproc.EmbedChild."""

    def pack_many(self, texts: Sequence[str]) -> list[bytes | None]: ...


class Embedder:
    """Text -> unit vector (float32), from a token table and a tokenizer; thread-safe."""

    def __init__(self, tokenizer: Any, table: np.ndarray):
        self._np = deferred.load("numpy")
        self._table = table
        self._ids = _WordIds(tokenizer)

    def embed(self, text: str) -> np.ndarray | None:
        """The normalised mean token vector of `text`; None when it has no words."""
        np = self._np
        # map() over the cache's C look-up: no Python loop per word (indexing embeds every chunk).
        ids = b"".join(map(self._ids.__getitem__, text.split()[:MAX_WORDS]))
        if not ids:
            return None
        # The sum, not the mean: the vector is normalised next, and a float32 sum of float32 rows
        # is one vectorised pass (a float16 mean casts element by element: 5x slower).
        v = self._table[np.frombuffer(ids, dtype=np.int32)].astype(np.float32, copy=False).sum(axis=0)
        norm = float(np.linalg.norm(v))
        return v / norm if norm > 0 else None

    def widen(self) -> None:
        """Hold the table in float32 (32 MiB instead of 16): a passage then costs ~5x less. For
        the indexing child, which embeds every passage and exits with the pass; a daemon that
        embeds only queries keeps the shipped float16."""
        self._table = self._table.astype(self._np.float32)

    def pack(self, text: str) -> bytes | None:
        """`embed(text)` as the index stores it: int8, the unit vector times 127."""
        v = self.embed(text)
        if v is None:
            return None
        return bytes(self._np.clip(self._np.rint(v * 127.0), -127, 127).astype(self._np.int8).tobytes())

    def pack_many(self, texts: Sequence[str]) -> list[bytes | None]:
        """`pack` for each text (the interface the index writer takes; embedproc.EmbedChild too)."""
        out = []
        for text in texts:
            out.append(self.pack(text))
            # Python work that holds the GIL: let the event loop's thread in between chunks (on a
            # loaded machine the loop otherwise stalled for a visible moment).
            time.sleep(0)
        return out

    def scores(self, query: np.ndarray, blobs: list[bytes]) -> np.ndarray:
        """Cosine similarity of a query vector with stored vectors (int8 blobs of DIM bytes)."""
        npm = self._np
        m = npm.frombuffer(b"".join(blobs), dtype=npm.int8).reshape(len(blobs), DIM).astype(npm.float32)
        out: np.ndarray = (m @ query) / 127.0
        return out


_lock = threading.Lock()
_loaded: list[Embedder | None] = []  # [] = not loaded (yet, or released); [None] = unavailable or switched off
_enabled = [True]
_installed: list[bool] = []  # [] = not looked yet
_searched = [False]  # a search has used the embedder: it stays loaded from then on


def set_enabled(enabled: bool) -> None:
    """Switch the stage on or off for this process (config `library.dense`), before any index
    opens: an index records which model its vectors came from and is rebuilt when that changes."""
    with _lock:
        if _enabled[0] != enabled:
            _enabled[0] = enabled
            _loaded.clear()


def _read_table(path: Path) -> np.ndarray:
    """The token table from a safetensors file (8-byte header length, JSON header, raw data),
    read directly: wordllama's own loader held the GIL long enough to stall the event loop."""
    numpy = deferred.load("numpy")

    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        t = header[TENSOR]
        dtype = {"F16": numpy.float16, "F32": numpy.float32}[t["dtype"]]
        start, end = t["data_offsets"]
        f.seek(8 + n + start)
        data = numpy.frombuffer(f.read(end - start), dtype=dtype)
    # Kept as shipped (float16: 16 MiB instead of 31); a passage's tokens are averaged in float32.
    table: np.ndarray = data.reshape(t["shape"])
    return table


def _load() -> Embedder | None:
    # wordllama is used for its files only (importing it costs seconds and brings more with it).
    files = _files()
    if files is None:
        return None
    weights, tokenizer_file = files
    try:
        # Loaded here, on first use: the model's memory is not the idle daemon's (module doc).
        tokenizers = deferred.load("tokenizers")
        table = _read_table(weights)
        tokenizer = tokenizers.Tokenizer.from_file(str(tokenizer_file))
        tokenizer.no_padding()
        tokenizer.no_truncation()
    except Exception as exc:  # a broken install must not break search: BM25 alone
        log.warning("library: the dense stage (wordllama) could not be loaded, search uses BM25 alone: %s", exc)
        return None
    if table.ndim != 2 or table.shape[1] != DIM or table.shape[0] < tokenizer.get_vocab_size():
        log.warning("library: wordllama's table has shape %s, not (>= %d, %d); the dense stage is off",
                    table.shape, tokenizer.get_vocab_size(), DIM)
        return None
    log.info("library: dense re-ranking on (%s)", MODEL_NAME)
    return Embedder(tokenizer, table)


def _files() -> tuple[Path, Path] | None:
    """The weights and the tokenizer in the installed wordllama, when they and the libraries
    that read them are there (looked up, not imported: a few ms, no memory)."""
    spec = importlib.util.find_spec("wordllama")
    if spec is None or spec.origin is None:
        return None
    pkg = Path(spec.origin).parent
    if not (pkg / WEIGHTS).is_file() or not (pkg / TOKENIZER).is_file():
        return None
    if importlib.util.find_spec("numpy") is None or importlib.util.find_spec("tokenizers") is None:
        return None
    return pkg / WEIGHTS, pkg / TOKENIZER


def embedder(search: bool = False) -> Embedder | None:
    """The process's embedder, loaded on first use (its memory is in the module doc; off the event loop:
    callers are the indexer thread and search threads), not at start: a daemon whose library is
    indexed holds it from its first search on. `search`: a search asks (it then stays loaded;
    see `release`). None when the stage is off or wordllama is missing or broken."""
    with _lock:
        if search:
            _searched[0] = True
        if not _loaded:
            _loaded.append(_load() if _enabled[0] else None)
        return _loaded[0]


def loaded() -> Embedder | None:
    """The embedder when this process has it loaded already (a search has asked), else None;
    never loads it (the indexer then embeds in a child process: library/embedproc.py)."""
    with _lock:
        return _loaded[0] if _loaded else None


def release() -> None:
    """Drop the embedder an indexing pass loaded when no search has asked for it yet: a library
    indexed at start then goes back to the idle memory of one that was indexed before (the next
    search loads it again). Called after each indexing pass."""
    with _lock:
        if not _loaded or _loaded[0] is None or _searched[0]:
            return
        _loaded.clear()
    trim_heap()


def trim_heap() -> None:
    """Give freed heap back to the system (glibc's malloc_trim): the tokenizer, or an indexing
    pass's rows, are many small allocations, which free() alone keeps in the process."""
    if (trim := _malloc_trim()) is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, looked up once (finding the C library may run ldconfig); None elsewhere."""
    try:
        trim: Callable[[int], int] = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    return trim


def model_name() -> str:
    """What the index's vectors are: MODEL_NAME when this process can compute them (wordllama's
    files are installed and the stage is on; found without loading the model), else ""."""
    with _lock:
        if not _enabled[0]:
            return ""
        if _loaded:
            return MODEL_NAME if _loaded[0] is not None else ""
        if not _installed:
            _installed.append(_files() is not None)
        return MODEL_NAME if _installed[0] else ""
