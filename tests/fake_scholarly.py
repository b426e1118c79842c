"""Real HTTP servers on 127.0.0.1 that answer as OpenAlex, arXiv and Crossref do, for tests.

Written from the services' documentation (no network here to record a live answer); the facts, each with its
doc page, are in /work/notes/scholarly-facts.md, and tests/unit/test_fake_scholarly.py pins each one.
- `FakeOpenAlex`: `GET /works?search=&filter=&per-page=&page=&cursor=&select=&mailto=` answering `{"meta", "results",
  "group_by"}` with Work objects (`abstract_inverted_index`, `authorships`, `primary_location`, `open_access`,
  `relevance_score` under a search), `GET /works/<W id | doi:10.x | https://doi.org/10.x>`; a bad parameter is 403
  `{"error": "Invalid query parameters error.", "message": ...}`; `X-RateLimit-*` headers on every answer.
- `FakeArxiv`: `GET /api/query?search_query=&id_list=&start=&max_results=&sortBy=&sortOrder=` answering an Atom
  feed shaped like a recorded one (2025-08-20): opensearch counts, `arxiv:` extension elements, hard-wrapped
  titles and summaries; errors as a feed whose one entry is titled `Error` (HTTP `error_status`, 400 by default;
  set 200 to play the answers clients report today). `search_query` takes `ti: au: abs: co: jr: cat: id: all:`
  terms, quoted phrases, `AND`/`OR`/`ANDNOT`, parentheses and `submittedDate:[YYYYMMDDTTTT TO YYYYMMDDTTTT]`.
- `FakeCrossref`: `GET /works?query=&query.bibliographic=&query.author=&rows=&offset=&cursor=&filter=&select=&mailto=`
  answering the `work-list` envelope (OR matching over bibliographic metadata, never abstracts, ranked by `score`),
  `GET /works/<doi>` the `work` envelope or 404 `Resource not found.` (text/plain); `X-Rate-Limit-Limit` and
  `X-Rate-Limit-Interval` on every answer; a bad parameter is 400 `validation-failure`.

All three serve one corpus of `ScholarlyWork`s a test sets (constructor or `set_works`); each shows the works the
real service would hold: OpenAlex all of them, arXiv those with an `arxiv_id`, Crossref those with a Crossref DOI
(not arXiv's own 10.48550 DataCite DOIs). Matching is plain word matching (lower case, a few stop words, a trailing
plural "s" dropped), deterministic: ties keep corpus order. `SAMPLE_WORKS` is a ready corpus (see the comment there:
one work duplicates the test library's LEWIS202 by title and year but not DOI, one topic is online only).

Every request is recorded in `received` (method, path, query, lower-cased headers, monotonic time);
`wait_for_requests(n)` waits for the n-th. Hostile answers are queued and each used by one request, then the
service answers normally again: `rate_limit(times, retry_after)` (429), `server_error(times, status)`,
`malformed(times)` (200 with a cut-off body), `huge(times, nbytes, content_length)` (200 with a body of nbytes,
generated as it is sent; `bytes_sent` counts what got out before the client hung up), `hang(times)` (the request
is read and never answered until `close()` or the client hangs up; `hanging` counts parked requests); `wait_for_hanging(n)` and
`wait_for_finished(n)` (answered, cut off by the client or released) let a test wait for the event, never sleep. `close()` also cuts open keep-alive
connections. `refused_port()` holds a loopback port where nothing listens (connection refused).
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import re
import select
import socket
import textwrap
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

# ---- the services' documented limits -------------------------------------------------------------------------
OPENALEX_PER_PAGE_DEFAULT = 25  # openalex-docs how-to-use-the-api/get-lists-of-entities/paging.md
OPENALEX_PER_PAGE_MAX = 200  # same page: "any number between 1 and 200"
OPENALEX_PAGING_MAX = 10_000  # same page: basic paging reaches the first 10,000 results
OPENALEX_DAILY_CREDITS = 100_000  # rate-limits-and-authentication.md
OPENALEX_LIST_CREDITS = 10  # same page: a list request costs 10 credits
ARXIV_MAX_RESULTS_DEFAULT = 10  # arXiv user manual 3.1.1
ARXIV_MAX_RESULTS_CAP = 30_000  # user manual 3.1.1.2: more is an HTTP 400
CROSSREF_ROWS_DEFAULT = 20  # CrossRef/rest-api-doc README "Rows"
CROSSREF_ROWS_MAX = 1000  # same section
CROSSREF_OFFSET_MAX = 10_000  # README "Offset"
ARXIV_DOI_PREFIX = "10.48550/"  # arXiv's own DOIs are DataCite's, never in Crossref
HUGE_CHUNK = 64 * 1024

STOP_WORDS = frozenset("a an and are as at be by for from in into is of on or the to with".split())
WORD_RE = re.compile(r"[a-z0-9]+")


def _norm(word: str) -> str:
    """One word as the fakes compare it: a crude stand-in for the services' stemming (OpenAlex: Kstem)."""
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def words(text: str | None) -> list[str]:
    return [_norm(w) for w in WORD_RE.findall((text or "").lower()) if w not in STOP_WORDS]


def _has_phrase(haystack: list[str], needle: list[str]) -> bool:
    n = len(needle)
    return n > 0 and any(haystack[i:i + n] == needle for i in range(len(haystack) - n + 1))


# ---- the corpus -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ScholarlyWork:
    """One work as a test describes it. `authors`: "Given Family" strings or (given, family) pairs.
    `date` (YYYY-MM-DD) defaults to 1 March of `year`; `arxiv_id` is without version (`arxiv_version` adds it);
    `oa_url` is an open-access PDF; `landing_url` defaults to the DOI's URL, else the arXiv abstract page."""

    title: str
    authors: tuple[str | tuple[str, str], ...] = ()
    year: int = 2020
    venue: str | None = None
    abstract: str | None = None
    doi: str | None = None
    arxiv_id: str | None = None
    oa_url: str | None = None
    landing_url: str | None = None
    date: str | None = None
    cited_by_count: int = 0
    arxiv_version: int = 1
    categories: tuple[str, ...] = ("cs.CL",)
    comment: str | None = None
    publisher: str = "Example Publisher"

    def __post_init__(self) -> None:
        object.__setattr__(self, "authors", tuple(self.authors))
        object.__setattr__(self, "categories", tuple(self.categories))

    @property
    def published(self) -> date:
        return date.fromisoformat(self.date) if self.date else date(self.year, 3, 1)

    @property
    def openalex_id(self) -> str:
        """Stable per title, so a test can name it: "W" + 10 digits, as OpenAlex's ids look."""
        return "W" + str(4_000_000_000 + int(hashlib.sha1(self.title.encode()).hexdigest()[:8], 16) % 1_000_000_000)

    @property
    def in_crossref(self) -> bool:
        return self.doi is not None and not self.doi.lower().startswith(ARXIV_DOI_PREFIX)

    @property
    def landing(self) -> str | None:
        if self.landing_url:
            return self.landing_url
        if self.doi:
            return "https://doi.org/" + self.doi.lower()
        return f"https://arxiv.org/abs/{self.arxiv_id}" if self.arxiv_id else None

    def author_names(self) -> list[tuple[str, str]]:
        out = []
        for a in self.authors:
            if isinstance(a, tuple):
                out.append(a)
            else:
                given, _, family = a.rpartition(" ")
                out.append((given, family))
        return out

    def display_authors(self) -> list[str]:
        return [f"{g} {f}".strip() for g, f in self.author_names()]


# ---- a sample corpus ------------------------------------------------------------------------------------------
ATTENTION = ScholarlyWork(
    "Attention Is All You Need", ("Ashish Vaswani", "Noam Shazeer", ("Niki", "Parmar")), 2017,
    "Advances in Neural Information Processing Systems",
    "The dominant sequence transduction models are based on complex recurrent or convolutional neural networks. "
    "We propose a new simple network architecture, the Transformer, based solely on attention mechanisms.",
    doi="10.48550/arXiv.1706.03762", arxiv_id="1706.03762", arxiv_version=7, date="2017-06-12", categories=("cs.CL", "cs.LG"),
    comment="15 pages, 5 figures", cited_by_count=100000)
RAG = ScholarlyWork(
    "Retrieval-Augmented Generation for Knowledge-Intensive NLP Tasks", ("Patrick Lewis", "Ethan Perez"), 2020,
    "Advances in Neural Information Processing Systems",
    "Large pre-trained language models store factual knowledge in their parameters. We explore retrieval-augmented generation.",
    doi="10.5555/3495724.3496517", arxiv_id="2005.11401", date="2020-05-22", oa_url="https://proceedings.example/rag.pdf")
REFERENCE_MANAGERS = ScholarlyWork(
    "Reference managers in the humanities", ("Ada Lovelace",), 2021, "Journal of Documentation",
    "A survey of how historians keep citations with Zotero and similar reference managers.",
    doi="10.1108/JD-01-2021-0001", date="2021-09-01")
GRAPH_ATTENTION = ScholarlyWork("Graph attention networks revisited", ("Grace Hopper",), 2022, "Neural Computation", None,
                                doi="10.1162/neco.2022.1")
CEPHALOPODS = ScholarlyWork(
    "Dynamic skin patterning in cephalopods", ("Jane Goodall", "Roger Hanlon"), 2019, "Journal of Experimental Biology",
    "Octopuses change colour within milliseconds: chromatophores under direct neural control expand and contract.",
    doi="10.1242/jeb.190001", date="2019-04-15", oa_url="https://journals.example/jeb.190001.pdf", cited_by_count=42)
# - ATTENTION: arXiv with a journal reference; its DOI is arXiv's (DataCite), so Crossref does not hold it.
# - RAG: in all three; the same paper as the test library's LEWIS202 (tests/zoterofixture.py sample_library) by title,
#   year and arXiv id but not by DOI (the library keeps arXiv's DOI, this one the proceedings'): the library-duplicate case.
# - REFERENCE_MANAGERS: OpenAlex and Crossref only, closed access; "Zotero" is in its abstract only (Crossref never finds it).
# - GRAPH_ATTENTION: no abstract anywhere.
# - CEPHALOPODS: a topic no test library holds, open access, for answers from online abstracts.
SAMPLE_WORKS = [ATTENTION, RAG, REFERENCE_MANAGERS, GRAPH_ATTENTION, CEPHALOPODS]


# ---- a small boolean query language (OpenAlex search, arXiv search_query) ------------------------------------
Term = tuple[str, str, str]  # (kind "word" | "phrase" | "range", field, text)
Node = tuple[Any, ...]
_TOKEN_RE = re.compile(r'\s*([A-Za-z_]+:\[[^\]]*\]|[A-Za-z_]+:"[^"]*"|"[^"]*"|\(|\)|[^\s()]+)')


class QuerySyntaxError(ValueError):
    pass


def parse_query(text: str, *, fields: bool, not_op: str) -> Node:
    """Parse `a AND (b OR "c d") NOT e` (OpenAlex, not_op "NOT") or `ti:a ANDNOT au:b` (arXiv, fields=True,
    not_op "ANDNOT"). Adjacent terms are ANDed. A node is ("term", Term) | ("and"|"or"|"andnot", l, r) | ("not", n)."""
    tokens = [m.group(1) for m in _TOKEN_RE.finditer(text) if m.group(1).strip()]
    pos = 0

    def peek() -> str | None:
        return tokens[pos] if pos < len(tokens) else None

    def take() -> str:
        nonlocal pos
        pos += 1
        return tokens[pos - 1]

    def term(tok: str) -> Node:
        fld = "all"
        if fields:
            m = re.match(r"([A-Za-z_]+):(.*)$", tok, re.S)
            if m:
                fld, tok = m.group(1), m.group(2)
        if tok.startswith("[") and tok.endswith("]"):
            return ("term", ("range", fld, tok[1:-1]))
        if tok.startswith('"') and tok.endswith('"') and len(tok) >= 2:
            return ("term", ("phrase", fld, tok[1:-1]))
        return ("term", ("word", fld, tok))

    def unary() -> Node:
        tok = peek()
        if tok is None:
            raise QuerySyntaxError("query ends where a term was expected")
        if tok == "NOT" and not_op == "NOT":
            take()
            return ("not", unary())
        if tok == "(":
            take()
            node = disjunction()
            if peek() != ")":
                raise QuerySyntaxError("unbalanced parenthesis")
            take()
            return node
        if tok in ("AND", "OR", "ANDNOT", ")"):
            raise QuerySyntaxError(f"unexpected {tok}")
        return term(take())

    def conjunction() -> Node:
        node = unary()
        while (tok := peek()) is not None and tok not in ("OR", ")"):
            if tok == "AND":
                take()
                node = ("and", node, unary())
            elif tok == not_op:
                take()
                node = ("andnot", node, unary())
            else:
                node = ("and", node, unary())
        return node

    def disjunction() -> Node:
        node = conjunction()
        while peek() == "OR":
            take()
            node = ("or", node, conjunction())
        return node

    node = disjunction()
    if pos != len(tokens):
        raise QuerySyntaxError(f"unexpected {tokens[pos]}")
    return node


def evaluate(node: Node, match: Callable[[Term], bool]) -> bool:
    kind = node[0]
    if kind == "term":
        return match(node[1])
    if kind == "not":
        return not evaluate(node[1], match)
    left = evaluate(node[1], match)
    if kind == "and":
        return left and evaluate(node[2], match)
    if kind == "andnot":
        return left and not evaluate(node[2], match)
    return left or evaluate(node[2], match)


def positive_words(node: Node) -> list[str]:
    """The words a match is scored on (not those under NOT / ANDNOT's right side)."""
    kind = node[0]
    if kind == "term":
        return [] if node[1][0] == "range" else words(node[1][2])
    if kind == "not":
        return []
    if kind == "andnot":
        return positive_words(node[1])
    return positive_words(node[1]) + positive_words(node[2])


def relevance(work: ScholarlyWork, query_words: list[str]) -> float:
    title, abstract = words(work.title), words(work.abstract)
    return float(sum(2 * title.count(w) + abstract.count(w) for w in set(query_words)))


# ---- the HTTP side, shared ------------------------------------------------------------------------------------
@dataclass
class Received:
    """A request as a stand-in got it: query values by name (repeats kept), header names lower-cased."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    at: float  # time.monotonic() when it arrived

    def param(self, name: str) -> str | None:
        values = self.query.get(name)
        return values[0] if values else None


@dataclass
class _Fault:
    kind: str  # "rate_limit" | "error" | "malformed" | "huge" | "hang"
    status: int = 200
    retry_after: str | None = None
    nbytes: int = 0
    content_length: bool = True


@dataclass
class Reply:
    status: int
    body: bytes
    content_type: str
    headers: dict[str, str] = field(default_factory=dict)


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # a hanging request must not keep close() waiting
    block_on_close = False


class _FakeService:
    """The HTTP machinery the three stand-ins share; subclasses answer `route(path, query)`."""

    name = "fake"
    content_type = "application/json"

    def __init__(self, works: list[ScholarlyWork] | None = None, *, port: int = 0):
        self.works: list[ScholarlyWork] = []
        self.received: list[Received] = []
        self.bytes_sent = 0
        self.hanging = 0
        self.finished = 0
        self._faults: deque[_Fault] = deque()
        self._cond = threading.Condition()
        self._released = threading.Event()
        self._conns: set[socket.socket] = set()
        self.set_works(works or [])
        self._httpd = _Server(("127.0.0.1", port), self._handler_class())
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"{self.name}-{self.port}", daemon=True)  # close() waits one poll
        self._thread.start()

    # -- test handles --
    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def set_works(self, works: list[ScholarlyWork]) -> None:
        self.works = [w for w in works if self.holds(w)]

    def holds(self, work: ScholarlyWork) -> bool:
        return True

    def rate_limit(self, times: int = 1, retry_after: str | None = "1") -> None:
        """The next `times` requests get 429, with `Retry-After: retry_after` unless it is None."""
        self._queue(times, _Fault("rate_limit", 429, retry_after=retry_after))

    def server_error(self, times: int = 1, status: int = 500) -> None:
        self._queue(times, _Fault("error", status))

    def malformed(self, times: int = 1) -> None:
        """200 with the right content type and a body cut off half way."""
        self._queue(times, _Fault("malformed"))

    def huge(self, times: int = 1, nbytes: int = 10 * 1024 * 1024, content_length: bool = True) -> None:
        """200 with a well-formed body of `nbytes`, generated as it is sent; without `content_length` the body
        ends when the server closes the connection."""
        self._queue(times, _Fault("huge", nbytes=nbytes, content_length=content_length))

    def hang(self, times: int = 1) -> None:
        """Read the request, then never answer (until `close()`)."""
        self._queue(times, _Fault("hang"))

    def clear_faults(self) -> None:
        with self._cond:
            self._faults.clear()

    def wait_for_requests(self, n: int, timeout: float = 30.0) -> list[Received]:
        """Wait until n requests have arrived; all received so far."""
        self._wait(lambda: len(self.received) >= n, timeout, f"{n} requests")
        return list(self.received)

    def wait_for_hanging(self, n: int = 1, timeout: float = 30.0) -> None:
        """Wait until n requests are parked by `hang`."""
        self._wait(lambda: self.hanging >= n, timeout, f"{n} hanging requests")

    def wait_for_finished(self, n: int, timeout: float = 30.0) -> None:
        """Wait until n requests are done with: answered, cut off by the client, or released by `close()`."""
        self._wait(lambda: self.finished >= n, timeout, f"{n} finished requests")

    def _wait(self, ready: Callable[[], bool], timeout: float, what: str) -> None:
        with self._cond:
            if not self._cond.wait_for(ready, timeout):
                raise TimeoutError(f"{self.name}: waited {timeout}s for {what}")

    def close(self) -> None:
        self._released.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        with self._cond:
            conns = list(self._conns)
        for conn in conns:  # keep-alive connections a client still holds: cut them, as a stopped service would
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._thread.join(timeout=10)

    def __enter__(self) -> _FakeService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- for subclasses --
    def route(self, path: str, query: dict[str, list[str]]) -> Reply:
        raise NotImplementedError

    def common_headers(self) -> dict[str, str]:
        return {}

    def rate_limited_reply(self) -> Reply:
        return Reply(429, b"Too Many Requests", "text/plain")

    def error_reply(self, status: int) -> Reply:
        return Reply(status, b"Internal Server Error", "text/plain")

    def huge_parts(self) -> tuple[bytes, bytes, bytes]:
        """(head, filler byte, tail) of a well-formed oversized body."""
        raise NotImplementedError

    # -- internals --
    def _queue(self, times: int, fault: _Fault) -> None:
        with self._cond:
            self._faults.extend([fault] * times)

    def _next_fault(self) -> _Fault | None:
        with self._cond:
            return self._faults.popleft() if self._faults else None

    def _record(self, method: str, raw_path: str, headers: dict[str, str]) -> tuple[str, dict[str, list[str]]]:
        url = urlsplit(raw_path)
        query = parse_qs(url.query, keep_blank_values=True)
        with self._cond:
            self.received.append(Received(method, url.path, query, headers, time.monotonic()))
            self._cond.notify_all()
        return url.path, query

    def _huge_chunks(self, nbytes: int) -> Iterator[bytes]:
        head, filler, tail = self.huge_parts()
        pad = max(0, nbytes - len(head) - len(tail))
        yield head
        block = filler * HUGE_CHUNK
        while pad > 0:
            yield block[:min(pad, HUGE_CHUNK)]
            pad -= min(pad, HUGE_CHUNK)
        yield tail

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        service = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as the real services answer

            def setup(self) -> None:
                super().setup()
                with service._cond:
                    service._conns.add(self.connection)

            def finish(self) -> None:
                with service._cond:
                    service._conns.discard(self.connection)
                try:
                    super().finish()
                except OSError:
                    pass

            def version_string(self) -> str:
                return service.name

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
                pass

            def do_GET(self) -> None:
                self._answer("GET")

            def do_HEAD(self) -> None:
                self._answer("HEAD")

            def _answer(self, method: str) -> None:
                try:
                    self._answer_once(method)
                finally:
                    with service._cond:
                        service.finished += 1
                        service._cond.notify_all()

            def _answer_once(self, method: str) -> None:
                path, query = service._record(method, self.path, {k.lower(): v for k, v in self.headers.items()})
                fault = service._next_fault()
                if fault is not None and fault.kind == "hang":
                    with service._cond:
                        service.hanging += 1
                        service._cond.notify_all()
                    # Parked until close(), or until the client hangs up (a cancelled search): then it is finished.
                    while not service._released.wait(0.05):
                        readable, _, _ = select.select([self.connection], [], [], 0)
                        if readable and not self.connection.recv(1, socket.MSG_PEEK):
                            break
                    self.close_connection = True
                    return
                if fault is not None and fault.kind == "huge":
                    self._send_huge(fault)
                    return
                if fault is not None and fault.kind == "rate_limit":
                    reply = service.rate_limited_reply()
                    if fault.retry_after is not None:
                        reply.headers["Retry-After"] = fault.retry_after
                elif fault is not None and fault.kind == "error":
                    reply = service.error_reply(fault.status)
                else:
                    reply = service.route(path, query)
                    if fault is not None and fault.kind == "malformed":
                        reply = Reply(200, reply.body[: max(1, len(reply.body) // 2)], reply.content_type, reply.headers)
                self._send(reply, head_only=method == "HEAD")

            def _send(self, reply: Reply, *, head_only: bool = False) -> None:
                self.send_response(reply.status)
                self.send_header("Content-Type", reply.content_type)
                self.send_header("Content-Length", str(len(reply.body)))
                for k, v in {**service.common_headers(), **reply.headers}.items():
                    self.send_header(k, v)
                self.end_headers()
                if not head_only:
                    self._write(reply.body)

            def _send_huge(self, fault: _Fault) -> None:
                self.send_response(200)
                self.send_header("Content-Type", service.content_type)
                if fault.content_length:
                    self.send_header("Content-Length", str(fault.nbytes))
                else:
                    self.send_header("Connection", "close")
                    self.close_connection = True
                self.end_headers()
                for chunk in service._huge_chunks(fault.nbytes):
                    if not self._write(chunk):
                        self.close_connection = True
                        return

            def _write(self, data: bytes) -> bool:
                try:
                    self.wfile.write(data)
                    self.wfile.flush()
                except OSError:  # the client hung up (size cap, timeout, cancel)
                    return False
                with service._cond:
                    service.bytes_sent += len(data)
                return True

        return Handler


def _json(data: Any) -> bytes:
    return json.dumps(data, ensure_ascii=False).encode()


def _make_cursor(offset: int) -> str:
    """An opaque cursor, as both services hand out (base64 text, with characters a URL must encode)."""
    return base64.b64encode(f"offset+{offset}".encode()).decode()


def _cursor_offset(cursor: str, bad: Callable[[str], Exception]) -> int:
    if cursor == "*":
        return 0
    try:
        kind, _, n = base64.b64decode(cursor, validate=True).decode().partition("+")
        if kind == "offset":
            return int(n)
    except ValueError:
        pass
    raise bad(f"{cursor} is not a valid cursor")


def split_filters(query: dict[str, list[str]], allowed: tuple[str, ...], bad: Callable[[str], Exception], *,
                  fold_case: bool = False) -> list[tuple[str, str]]:
    """`filter=key:value,key2:value2`, the syntax OpenAlex and Crossref share, as (key, value) pairs; a key not in
    `allowed` (or a part without a colon) raises `bad(key)`."""
    out = []
    for raw in query.get("filter", []):
        for part in filter(None, raw.split(",")):
            key, sep, value = part.partition(":")
            key = key.strip().lower() if fold_case else key
            if not sep or key not in allowed:
                raise bad(key)
            out.append((key, value))
    return out


def select_fields(obj: dict[str, Any], query: dict[str, list[str]], allowed: tuple[str, ...], bad: Callable[[str], Exception]) -> dict[str, Any]:
    """`select=a,b`, both services' way to keep root-level fields only; a field not in `allowed` raises `bad(field)`."""
    if "select" not in query:
        return obj
    fields = [f.strip() for f in ",".join(query["select"]).split(",") if f.strip()]
    for f in fields:
        if f not in allowed:
            raise bad(f)
    return {f: obj[f] for f in fields if f in obj}


# ---- OpenAlex -------------------------------------------------------------------------------------------------
OPENALEX_WORK_FIELDS = (
    "id", "doi", "title", "display_name", "publication_year", "publication_date", "ids", "language", "primary_location",
    "type", "type_crossref", "open_access", "authorships", "cited_by_count", "best_oa_location", "locations",
    "locations_count", "abstract_inverted_index", "is_retracted", "is_paratext", "updated_date", "created_date",
)
OPENALEX_SELECTABLE = (*OPENALEX_WORK_FIELDS, "relevance_score")
OPENALEX_FILTERS = ("publication_year", "from_publication_date", "to_publication_date", "doi", "is_oa", "open_access.is_oa")
OPENALEX_ARXIV_SOURCE = {
    "id": "https://openalex.org/S4306400194", "display_name": "arXiv (Cornell University)", "issn_l": None, "issn": None,
    "is_oa": True, "is_in_doaj": False, "host_organization": "https://openalex.org/I205783295", "type": "repository",
}


class _OpenAlexError(Exception):
    def __init__(self, message: str, status: int = 403):
        super().__init__(message)
        self.status = status


class FakeOpenAlex(_FakeService):
    """OpenAlex's `/works` (openalex-docs, see the module docstring). `credits_used` counts the daily credits
    (10 a list, 1 a single work) behind `X-RateLimit-Remaining`."""

    name = "fake-openalex"

    def __init__(self, works: list[ScholarlyWork] | None = None, *, port: int = 0):
        self.credits_used = 0
        super().__init__(works, port=port)

    def common_headers(self) -> dict[str, str]:
        now = datetime.now(UTC)
        midnight = datetime(now.year, now.month, now.day, tzinfo=UTC).timestamp() + 86400
        return {"X-RateLimit-Limit": str(OPENALEX_DAILY_CREDITS),
                "X-RateLimit-Remaining": str(max(0, OPENALEX_DAILY_CREDITS - self.credits_used)),
                "X-RateLimit-Reset": str(int(midnight - now.timestamp()))}

    def rate_limited_reply(self) -> Reply:
        # the body is not documented: a JSON error in the shape of the documented ones
        return Reply(429, _json({"error": "Rate limit exceeded", "message": "Too many requests; slow down."}), self.content_type)

    def error_reply(self, status: int) -> Reply:
        return Reply(status, _json({"error": "Internal server error", "message": "Temporary issue, try again."}), self.content_type)

    def huge_parts(self) -> tuple[bytes, bytes, bytes]:
        head = b'{"meta": {"count": 1, "db_response_time_ms": 1, "page": 1, "per_page": 1}, "results": [{"id": '
        head += b'"https://openalex.org/W1", "title": "'
        return head, b"x", b'"}], "group_by": []}'

    def route(self, path: str, query: dict[str, list[str]]) -> Reply:
        try:
            if path in ("/works", "/works/", "/"):
                self._spend(OPENALEX_LIST_CREDITS)
                return Reply(200, _json(self._list(query)), self.content_type, {"X-RateLimit-Credits-Used": str(OPENALEX_LIST_CREDITS)})
            if path.startswith("/works/"):
                self._spend(1)
                work = self._find(unquote(path[len("/works/"):]))
                if work is None:
                    return Reply(404, _json({"error": "404 Not Found", "message": "The requested work was not found."}), self.content_type)
                return Reply(200, _json(self._select(self.work_json(work), query)), self.content_type)
            return Reply(404, _json({"error": "404 Not Found", "message": f"{path} is not an endpoint."}), self.content_type)
        except _OpenAlexError as e:
            return Reply(e.status, _json({"error": "Invalid query parameters error.", "message": str(e)}), self.content_type)

    def _spend(self, credits: int) -> None:
        with self._cond:
            self.credits_used += credits

    def _find(self, ident: str) -> ScholarlyWork | None:
        low = ident.lower()
        for w in self.works:
            doi = (w.doi or "").lower()
            if low in (w.openalex_id.lower(), "https://openalex.org/" + w.openalex_id.lower()):
                return w
            if doi and low in ("doi:" + doi, "https://doi.org/" + doi, "doi:https://doi.org/" + doi):
                return w
        return None

    @staticmethod
    def _int(query: dict[str, list[str]], *names: str, default: int) -> int:
        for name in names:
            if name in query:
                raw = query[name][0]
                try:
                    return int(raw)
                except ValueError:
                    raise _OpenAlexError(f"'{raw}' is not a valid value for {name}.") from None
        return default

    def _list(self, query: dict[str, list[str]]) -> dict[str, Any]:
        per_page = self._int(query, "per-page", "per_page", default=OPENALEX_PER_PAGE_DEFAULT)
        if not 1 <= per_page <= OPENALEX_PER_PAGE_MAX:
            raise _OpenAlexError(f"per-page parameter must be between 1 and {OPENALEX_PER_PAGE_MAX}.")
        cursor = query.get("cursor", [None])[0]
        page = self._int(query, "page", default=1)
        if cursor is None and (page < 1 or page * per_page > OPENALEX_PAGING_MAX):
            raise _OpenAlexError(f"Maximum results size of {OPENALEX_PAGING_MAX:,} records is exceeded. Cursor pagination is required for records beyond {OPENALEX_PAGING_MAX:,}.")
        hits = [w for w in self.works if all(self._passes(w, f) for f in self._filters(query))]
        search = " ".join(query.get("search", [])).strip()
        scores: dict[int, float] = {}
        if search:
            node = self._search_node(search)
            hits = [w for w in hits if evaluate(node, partial(self._matches, w))]
            qwords = positive_words(node)
            scores = {id(w): relevance(w, qwords) + w.cited_by_count / 1000 for w in hits}
            hits.sort(key=lambda w: -scores[id(w)])
        first = _cursor_offset(cursor, _OpenAlexError) if cursor is not None else (page - 1) * per_page
        window = hits[first:first + per_page]
        results = []
        for w in window:
            obj = self.work_json(w)
            if search:
                obj["relevance_score"] = round(scores[id(w)], 4)
            results.append(self._select(obj, query))
        meta: dict[str, Any] = {"count": len(hits), "db_response_time_ms": 1, "page": None if cursor else page, "per_page": per_page,
                                "groups_count": None}
        if cursor is not None:  # paging.md: repeat until next_cursor is null and results are empty
            meta["next_cursor"] = _make_cursor(first + per_page) if window else None
        return {"meta": meta, "results": results, "group_by": []}

    @staticmethod
    def _search_node(search: str) -> Node:
        if re.search(r"\b(AND|OR|NOT)\b", search):
            try:
                return parse_query(search, fields=False, not_op="NOT")
            except QuerySyntaxError as e:
                raise _OpenAlexError(f"Invalid search: {e}.") from None
        # without boolean words every word must match (the fakes' strict reading of the relevance search)
        ws = words(search)
        node: Node = ("term", ("word", "all", ws[0] if ws else ""))
        for w in ws[1:]:
            node = ("and", node, ("term", ("word", "all", w)))
        return node

    @staticmethod
    def _matches(work: ScholarlyWork, term: Term) -> bool:
        kind, _, text = term
        hay = words(work.title) + words(work.abstract)
        want = words(text)
        if kind == "phrase":
            return _has_phrase(hay, want)
        return bool(want) and all(w in hay for w in want)

    @staticmethod
    def _filters(query: dict[str, list[str]]) -> list[tuple[str, str]]:
        # "Filters are case-insensitive" (filter-entity-lists.md)
        return split_filters(query, OPENALEX_FILTERS, lambda key: _OpenAlexError(
            f"{key} is not a valid field. Valid fields are underscore or hyphenated versions of: " + ", ".join(OPENALEX_FILTERS)), fold_case=True)

    @staticmethod
    def _passes(work: ScholarlyWork, filt: tuple[str, str]) -> bool:
        key, value = filt
        if key == "publication_year":
            return any(FakeOpenAlex._year_ok(work.year, v) for v in value.split("|"))
        if key in ("from_publication_date", "to_publication_date"):
            try:
                bound = date.fromisoformat(value)
            except ValueError:
                raise _OpenAlexError(f"Value for param {key} must be a date in format yyyy-mm-dd.") from None
            return work.published >= bound if key.startswith("from") else work.published <= bound
        if key == "doi":
            wanted = {v.lower().removeprefix("https://doi.org/") for v in value.split("|")}
            return work.doi is not None and work.doi.lower() in wanted
        return (value.lower() == "true") == bool(work.oa_url or work.arxiv_id)  # is_oa, open_access.is_oa

    @staticmethod
    def _year_ok(year: int, value: str) -> bool:
        try:
            if value.startswith(">"):
                return year > int(value[1:])
            if value.startswith("<"):
                return year < int(value[1:])
            if value.startswith("!"):
                return year != int(value[1:])
            lo, sep, hi = value.partition("-")
            return int(lo) <= year <= int(hi) if sep else year == int(lo)
        except ValueError:
            raise _OpenAlexError(f"Value for publication_year must be a number: {value}") from None

    @staticmethod
    def _select(obj: dict[str, Any], query: dict[str, list[str]]) -> dict[str, Any]:
        return select_fields(obj, query, OPENALEX_SELECTABLE, lambda f: _OpenAlexError(
            f"{f} is not a valid select field. Valid fields for select are: " + ", ".join(OPENALEX_SELECTABLE)))

    def work_json(self, w: ScholarlyWork) -> dict[str, Any]:
        oa_id = "https://openalex.org/" + w.openalex_id
        doi_url = "https://doi.org/" + w.doi.lower() if w.doi else None
        source = None
        if w.venue:
            source = {"id": "https://openalex.org/S" + str(int(hashlib.sha1(w.venue.encode()).hexdigest()[:8], 16) % 10**9),
                      "display_name": w.venue, "issn_l": None, "issn": None, "is_oa": False, "is_in_doaj": False,
                      "host_organization": None, "type": "journal"}
        primary: dict[str, Any] | None = None
        locations = []
        if source is not None or doi_url:
            primary = {"is_oa": bool(w.oa_url), "landing_page_url": w.landing_url or doi_url, "pdf_url": w.oa_url,
                       "source": source, "license": "cc-by" if w.oa_url else None, "version": "publishedVersion",
                       "is_accepted": True, "is_published": True}
            locations.append(primary)
        if w.arxiv_id:
            arxiv_loc = {"is_oa": True, "landing_page_url": f"https://arxiv.org/abs/{w.arxiv_id}",
                         "pdf_url": f"https://arxiv.org/pdf/{w.arxiv_id}", "source": OPENALEX_ARXIV_SOURCE,
                         "license": None, "version": "submittedVersion", "is_accepted": False, "is_published": False}
            locations.append(arxiv_loc)
            primary = primary or arxiv_loc
        best = next((loc for loc in locations if loc["is_oa"]), None)
        status = "closed" if best is None else ("gold" if best is primary and w.oa_url else "green")
        authorships = []
        names = w.display_authors()
        for i, name in enumerate(names):
            authorships.append({
                "author_position": "first" if i == 0 else ("last" if i == len(names) - 1 else "middle"),
                "author": {"id": "https://openalex.org/A5" + str(int(hashlib.sha1(name.encode()).hexdigest()[:8], 16) % 10**9).zfill(9),
                           "display_name": name, "orcid": None},
                "institutions": [], "countries": [], "is_corresponding": i == 0, "raw_author_name": name,
                "raw_affiliation_strings": [], "affiliations": [],
            })
        ids: dict[str, str] = {"openalex": oa_id}
        if doi_url:
            ids["doi"] = doi_url
        kind = "preprint" if w.arxiv_id and not w.in_crossref else "article"
        return {
            "id": oa_id, "doi": doi_url, "title": w.title, "display_name": w.title, "publication_year": w.year,
            "publication_date": w.published.isoformat(), "ids": ids, "language": "en", "primary_location": primary,
            "type": kind, "type_crossref": "journal-article" if kind == "article" else "posted-content",
            "open_access": {"is_oa": best is not None, "oa_status": status,
                            "oa_url": (best["pdf_url"] or best["landing_page_url"]) if best else None,
                            "any_repository_has_fulltext": bool(w.arxiv_id)},
            "authorships": authorships, "cited_by_count": w.cited_by_count, "best_oa_location": best, "locations": locations,
            "locations_count": len(locations), "abstract_inverted_index": inverted_index(w.abstract), "is_retracted": False,
            "is_paratext": False, "updated_date": "2026-11-30T00:00:00.000000", "created_date": "2023-01-01",
        }


def inverted_index(text: str | None) -> dict[str, list[int]] | None:
    """OpenAlex's abstract form: each whitespace-separated word (punctuation kept) -> its positions."""
    if not text:
        return None
    out: dict[str, list[int]] = {}
    for i, word in enumerate(text.split()):
        out.setdefault(word, []).append(i)
    return out


# ---- arXiv ----------------------------------------------------------------------------------------------------
ATOM_NS = "http://www.w3.org/2005/Atom"
ARXIV_NS = "http://arxiv.org/schemas/atom"
OPENSEARCH_NS = "http://a9.com/-/spec/opensearch/1.1/"
ARXIV_FIELDS = ("ti", "au", "abs", "co", "jr", "cat", "rn", "id", "all", "submittedDate")
ARXIV_SORTS = ("relevance", "lastUpdatedDate", "submittedDate")
_NEW_ID = re.compile(r"^(\d{2})(\d{2})\.(\d{4,5})(v\d+)?$")
_OLD_ID = re.compile(r"^[a-z-]+(\.[A-Z]{2})?/\d{7}(v\d+)?$")


def valid_arxiv_id(ident: str) -> bool:
    """YYMM.NNNN or YYMM.NNNNN with a month 01-12 (user manual 3.4: 1234.1234 and 1234.12345 are malformed; the
    recorded answer takes 1201.56789, so the five-digit-from-1501 rule is not checked), or archive/YYMMNNN."""
    m = _NEW_ID.match(ident)
    if m:
        return 1 <= int(m.group(2)) <= 12
    return bool(_OLD_ID.match(ident))


class _ArxivError(Exception):
    pass


def _x(text: str) -> str:
    return html.escape(text, quote=True)


def _wrap(text: str, indent: str) -> str:
    """arXiv's feed hard-wraps titles and abstracts near 80 columns."""
    return ("\n" + indent).join(textwrap.wrap(" ".join(text.split()), 79)) if text.strip() else ""


class FakeArxiv(_FakeService):
    """arXiv's `/api/query` (user manual, see the module docstring). `error_status` is the HTTP status of an error
    feed; `feed_date` the date in the feed's <updated> (midnight, US Eastern as recorded)."""

    name = "fake-arxiv"
    content_type = "application/atom+xml; charset=utf-8"

    def __init__(self, works: list[ScholarlyWork] | None = None, *, port: int = 0, error_status: int = 400,
                 feed_date: date | None = None):
        self.error_status = error_status
        self.feed_date = feed_date or datetime.now(UTC).date()
        super().__init__(works, port=port)

    def holds(self, work: ScholarlyWork) -> bool:
        return bool(work.arxiv_id)

    def rate_limited_reply(self) -> Reply:
        return Reply(429, b"Rate exceeded.", "text/plain")  # reported by clients, not in the manual

    def error_reply(self, status: int) -> Reply:
        return Reply(status, b"<html><body><h1>Internal Server Error</h1></body></html>", "text/html")

    def huge_parts(self) -> tuple[bytes, bytes, bytes]:
        head = self._feed_head("all:x", "", 0, 1, 1).encode() + b"  <entry>\n    <title>"
        return head, b"x", b"</title>\n  </entry>\n</feed>\n"

    def route(self, path: str, query: dict[str, list[str]]) -> Reply:
        if path not in ("/api/query", "/"):
            return Reply(404, b"<html><body>Not Found</body></html>", "text/html")
        sq = query.get("search_query", [""])[0]
        ids = query.get("id_list", [""])[0]
        start_raw = query.get("start", ["0"])[0]
        max_raw = query.get("max_results", [str(ARXIV_MAX_RESULTS_DEFAULT)])[0]
        try:
            start = self._nonneg(start_raw, "start")
            max_results = self._nonneg(max_raw, "max_results")
            if max_results > ARXIV_MAX_RESULTS_CAP:
                raise _ArxivError(f"max_results must be <= {ARXIV_MAX_RESULTS_CAP}")
            hits, total = self._search(sq, ids, query)
        except _ArxivError as e:
            return self._error_feed(sq, ids, start_raw, max_raw, str(e))
        window = hits[start:start + max_results]
        body = self._feed_head(sq, ids, start, max_results, total)
        body += "".join(self._entry(w) for w in window) + "</feed>\n"
        return Reply(200, body.encode(), self.content_type)

    @staticmethod
    def _nonneg(raw: str, name: str) -> int:
        try:
            value = int(raw)
        except ValueError:
            raise _ArxivError(f"{name} must be an integer") from None
        if value < 0:
            raise _ArxivError(f"{name} must be >= 0")
        return value

    def _search(self, sq: str, ids: str, query: dict[str, list[str]]) -> tuple[list[ScholarlyWork], int]:
        wanted = [i.strip() for i in ids.split(",") if i.strip()]
        for ident in wanted:
            if not valid_arxiv_id(ident):
                raise _ArxivError(f"incorrect id format for {ident}")
        pool = self.works
        if wanted:
            by_id = {w.arxiv_id: w for w in self.works}
            pool = [by_id[bare] for bare in (re.sub(r"v\d+$", "", i) for i in wanted) if bare in by_id]
        if not sq.strip():
            # recorded 2025-08-20: an id_list of one well-formed id arXiv lacks says totalResults 1 with no entry
            return pool, (len(wanted) if wanted else 0)
        try:
            node = parse_query(sq, fields=True, not_op="ANDNOT")
        except QuerySyntaxError as e:
            raise _ArxivError(f"malformed query: {e}") from None
        hits = [w for w in pool if evaluate(node, partial(self._matches, w))]
        sort_by = query.get("sortBy", ["relevance"])[0]
        descending = query.get("sortOrder", ["descending"])[0] != "ascending"
        if sort_by == "relevance":
            qwords = positive_words(node)
            order = sorted(hits, key=lambda w: relevance(w, qwords), reverse=True)
            hits = order if descending else list(reversed(order))
        elif sort_by in ("submittedDate", "lastUpdatedDate"):
            hits = sorted(hits, key=lambda w: w.published, reverse=descending)
        return hits, len(hits)

    @staticmethod
    def _matches(work: ScholarlyWork, term: Term) -> bool:
        kind, fld, text = term
        if fld not in ARXIV_FIELDS:
            return False
        if fld == "submittedDate":
            m = re.match(r"^[\s+]*(\d{8})(\d{4})?[\s+]+TO[\s+]+(\d{8})(\d{4})?[\s+]*$", text)  # "+TO+" as the manual writes it
            if kind != "range" or not m:
                raise _ArxivError("submittedDate must be [YYYYMMDDTTTT TO YYYYMMDDTTTT]")
            stamp = work.published.strftime("%Y%m%d") + "1200"
            return (m.group(1) + (m.group(2) or "0000")) <= stamp <= (m.group(3) + (m.group(4) or "2359"))
        if fld == "id":
            return work.arxiv_id == text
        if fld == "cat":
            return text in work.categories
        hay = {
            "ti": words(work.title), "abs": words(work.abstract), "au": words(" ".join(work.display_authors())),
            "jr": words(work.venue), "co": words(work.comment), "rn": [],
        }.get(fld)
        if hay is None:  # all:
            hay = words(work.title) + words(work.abstract) + words(" ".join(work.display_authors())) + words(work.venue) + words(work.comment)
        want = words(text.replace("_", " "))  # au:del_maestro
        return _has_phrase(hay, want) if kind == "phrase" else (bool(want) and all(w in hay for w in want))

    def _feed_head(self, sq: str, ids: str, start: Any, max_results: Any, total: int, items_per_page: Any = None) -> str:
        """The feed's own elements; itemsPerPage echoes max_results (recorded: 10 with no entry at all)."""
        canon = f"search_query={sq}&id_list={ids}&start={start}&max_results={max_results}"
        feed_id = base64.b64encode(hashlib.sha1(canon.encode()).digest()).decode().rstrip("=")
        updated = f"{self.feed_date.isoformat()}T00:00:00-05:00"
        return (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f'<feed xmlns="{ATOM_NS}">\n'
            f'  <link href="http://arxiv.org/api/query?{_x(quote(canon, safe=""))}" rel="self" type="application/atom+xml"/>\n'
            f'  <title type="html">ArXiv Query: {_x(canon)}</title>\n'
            f"  <id>http://arxiv.org/api/{feed_id}</id>\n"
            f"  <updated>{updated}</updated>\n"
            f'  <opensearch:totalResults xmlns:opensearch="{OPENSEARCH_NS}">{total}</opensearch:totalResults>\n'
            f'  <opensearch:startIndex xmlns:opensearch="{OPENSEARCH_NS}">{start}</opensearch:startIndex>\n'
            f'  <opensearch:itemsPerPage xmlns:opensearch="{OPENSEARCH_NS}">{max_results if items_per_page is None else items_per_page}</opensearch:itemsPerPage>\n'
        )

    def _entry(self, w: ScholarlyWork) -> str:
        vid = f"{w.arxiv_id}v{w.arxiv_version}"
        stamp = w.published.isoformat() + "T12:00:00Z"
        parts = [
            "  <entry>\n",
            f"    <id>http://arxiv.org/abs/{vid}</id>\n",
            f"    <updated>{stamp}</updated>\n",
            f"    <published>{stamp}</published>\n",
            f"    <title>{_x(_wrap(w.title, '  '))}</title>\n",
            f"    <summary>  {_x(_wrap(w.abstract or '', ''))}\n</summary>\n",
        ]
        for name in w.display_authors():
            parts.append(f"    <author>\n      <name>{_x(name)}</name>\n    </author>\n")
        if w.doi:
            parts.append(f'    <arxiv:doi xmlns:arxiv="{ARXIV_NS}">{_x(w.doi)}</arxiv:doi>\n')
            parts.append(f'    <link title="doi" href="http://dx.doi.org/{_x(w.doi)}" rel="related"/>\n')
        if w.comment:
            parts.append(f'    <arxiv:comment xmlns:arxiv="{ARXIV_NS}">{_x(w.comment)}</arxiv:comment>\n')
        if w.venue:
            parts.append(f'    <arxiv:journal_ref xmlns:arxiv="{ARXIV_NS}">{_x(w.venue)}</arxiv:journal_ref>\n')
        parts.append(f'    <link href="http://arxiv.org/abs/{vid}" rel="alternate" type="text/html"/>\n')
        parts.append(f'    <link title="pdf" href="http://arxiv.org/pdf/{vid}" rel="related" type="application/pdf"/>\n')
        cats = w.categories or ("cs.CL",)
        parts.append(f'    <arxiv:primary_category xmlns:arxiv="{ARXIV_NS}" term="{_x(cats[0])}" scheme="{ARXIV_NS}"/>\n')
        parts.extend(f'    <category term="{_x(c)}" scheme="{ARXIV_NS}"/>\n' for c in cats)
        parts.append("  </entry>\n")
        return "".join(parts)

    def _error_feed(self, sq: str, ids: str, start: str, max_results: str, message: str) -> Reply:
        slug = re.sub(r"[^A-Za-z0-9.]+", "_", message).strip("_")
        updated = f"{self.feed_date.isoformat()}T00:00:00-05:00"
        body = self._feed_head(sq, ids, start, max_results, 1, items_per_page=1)  # user manual 3.4
        body += (
            "  <entry>\n"
            f"    <id>http://arxiv.org/api/errors#{_x(slug)}</id>\n"
            "    <title>Error</title>\n"
            f"    <summary>{_x(message)}</summary>\n"
            f"    <updated>{updated}</updated>\n"
            f'    <link href="http://arxiv.org/api/errors#{_x(slug)}" rel="alternate" type="text/html"/>\n'
            "    <author>\n      <name>arXiv api core</name>\n    </author>\n"
            "  </entry>\n</feed>\n"
        )
        return Reply(self.error_status, body.encode(), self.content_type)


# ---- Crossref -------------------------------------------------------------------------------------------------
CROSSREF_QUERY_FIELDS = ("query", "query.bibliographic", "query.author", "query.container-title")  # query.title is gone (README)
CROSSREF_FILTERS = ("from-pub-date", "until-pub-date", "type", "has-abstract", "has-full-text", "doi")
CROSSREF_WORK_FIELDS = (
    "indexed", "reference-count", "publisher", "license", "content-domain", "short-container-title", "abstract", "DOI",
    "type", "created", "source", "is-referenced-by-count", "title", "prefix", "member", "container-title",
    "original-title", "link", "deposited", "score", "resource", "subtitle", "short-title", "issued", "references-count",
    "URL", "relation", "published", "published-print", "author", "language",
)
_CROSSREF_KNOWN = (*CROSSREF_QUERY_FIELDS, "rows", "offset", "filter", "select", "mailto", "sort", "order", "cursor",
                   "facet", "sample")


class _CrossrefInvalid(Exception):
    def __init__(self, kind: str, value: str, message: str):
        super().__init__(message)
        self.kind, self.value = kind, value


def _date_parts(d: date, precision: int = 3) -> list[list[int]]:
    return [[d.year, d.month, d.day][:precision]]


def _crossref_bound(value: str, upper: bool) -> date:
    """A filter date YYYY, YYYY-MM or YYYY-MM-DD; the API takes a partial date's first day, so an `until` year or
    month must reach its last day to be inclusive as documented."""
    parts = value.split("-")
    try:
        nums = [int(p) for p in parts]
        if len(nums) == 1:
            return date(nums[0], 12, 31) if upper else date(nums[0], 1, 1)
        if len(nums) == 2:
            if upper:
                nxt = date(nums[0] + nums[1] // 12, nums[1] % 12 + 1, 1)
                return date.fromordinal(nxt.toordinal() - 1)
            return date(nums[0], nums[1], 1)
        return date(nums[0], nums[1], nums[2])
    except (ValueError, IndexError):
        raise _CrossrefInvalid("date-filter-invalid", value, f"Date specified as {value} but must be of the form: YYYY or YYYY-MM or YYYY-MM-DD") from None


def _crossref_type(w: ScholarlyWork) -> str:
    return "journal-article" if w.venue else "posted-content"


class FakeCrossref(_FakeService):
    """Crossref's `/works` and `/works/{doi}` (CrossRef/rest-api-doc, see the module docstring). `rate_limit_limit`
    and `rate_limit_interval` are the advertised `X-Rate-Limit-*` header values."""

    name = "fake-crossref"

    def __init__(self, works: list[ScholarlyWork] | None = None, *, port: int = 0, rate_limit_limit: str = "50",
                 rate_limit_interval: str = "1s"):
        self.rate_limit_limit = rate_limit_limit
        self.rate_limit_interval = rate_limit_interval
        super().__init__(works, port=port)

    def holds(self, work: ScholarlyWork) -> bool:
        return work.in_crossref

    def common_headers(self) -> dict[str, str]:
        return {"X-Rate-Limit-Limit": self.rate_limit_limit, "X-Rate-Limit-Interval": self.rate_limit_interval,
                "Access-Control-Allow-Origin": "*"}

    def rate_limited_reply(self) -> Reply:
        return Reply(429, b"Too Many Requests", "text/plain")

    def error_reply(self, status: int) -> Reply:
        return Reply(status, _json({"status": "error", "message-type": "exception", "message-version": "1.0.0",
                                    "message": {"name": "class java.lang.Exception", "description": "java.lang.Exception: internal error",
                                                "message": "internal error", "cause": None}}), self.content_type)

    def huge_parts(self) -> tuple[bytes, bytes, bytes]:
        head = b'{"status":"ok","message-type":"work-list","message-version":"1.0.0","message":{"facets":{},"total-results":1,'
        head += b'"items":[{"DOI":"10.1/x","title":["'
        return head, b"x", b'"]}],"items-per-page":1,"query":{"start-index":0,"search-terms":null}}}'

    def route(self, path: str, query: dict[str, list[str]]) -> Reply:
        try:
            if path in ("/works", "/works/", "/v1/works", "/"):
                return Reply(200, _json(self._list(query)), self.content_type)
            for prefix in ("/works/", "/v1/works/"):
                if path.startswith(prefix):
                    doi = unquote(path[len(prefix):]).lower()
                    work = next((w for w in self.works if (w.doi or "").lower() == doi), None)
                    if work is None:
                        return Reply(404, b"Resource not found.", "text/plain")
                    return Reply(200, _json({"status": "ok", "message-type": "work", "message-version": "1.0.0",
                                             "message": self._select(self.work_json(work), query)}), self.content_type)
            return Reply(404, b"Resource not found.", "text/plain")
        except _CrossrefInvalid as e:
            return Reply(400, _json({"status": "failed", "message-type": "validation-failure",
                                     "message": [{"type": e.kind, "value": e.value, "message": str(e)}]}), self.content_type)

    @staticmethod
    def _int(query: dict[str, list[str]], name: str, default: int, cap: int) -> int:
        if name not in query:
            return default
        raw = query[name][0]
        try:
            value = int(raw)
        except ValueError:
            raise _CrossrefInvalid("integer-not-valid", raw, f"Integer specified as {raw} but must be a positive integer.") from None
        if value < 0 or value > cap:
            raise _CrossrefInvalid("integer-not-valid", raw, f"Integer specified as {raw} but must be a positive integer less than or equal to {cap}.")
        return value

    def _list(self, query: dict[str, list[str]]) -> dict[str, Any]:
        for name in query:
            if name not in _CROSSREF_KNOWN:
                raise _CrossrefInvalid("parameter-not-allowed", name, f"This route does not support {name}")
        rows = self._int(query, "rows", CROSSREF_ROWS_DEFAULT, CROSSREF_ROWS_MAX)
        cursor = query.get("cursor", [None])[0]
        offset = _cursor_offset(cursor, lambda m: _CrossrefInvalid("cursor-not-valid", cursor or "", m)) if cursor is not None \
            else self._int(query, "offset", 0, CROSSREF_OFFSET_MAX)
        filters: dict[str, list[str]] = {}
        for key, value in self._filters(query):
            filters.setdefault(key, []).append(value)
        # the same filter repeated is an OR; different filters AND (README "Multiple filters")
        hits = [w for w in self.works if all(any(self._passes(w, k, v) for v in vs) for k, vs in filters.items())]
        terms = {name: words(" ".join(query[name])) for name in CROSSREF_QUERY_FIELDS if name in query}
        search = " ".join(" ".join(query[n]) for n in CROSSREF_QUERY_FIELDS if n in query) or None
        scores: dict[int, float] = {}
        if terms:
            for w in hits:
                scores[id(w)] = sum(self._score(w, name, ws) for name, ws in terms.items())
            # field queries are ANDed with each other; inside one, any token may match (README "Field queries")
            hits = [w for w in hits if all(self._score(w, name, ws) > 0 for name, ws in terms.items())]
            hits.sort(key=lambda w: -scores[id(w)])
        window = hits[offset:offset + rows]
        items = []
        for w in window:
            obj = self.work_json(w)
            obj["score"] = scores.get(id(w), 1.0)
            items.append(self._select(obj, query))
        message: dict[str, Any] = {"facets": {}, "total-results": len(hits), "items": items, "items-per-page": rows,
                                   "query": {"start-index": offset, "search-terms": search}}
        if cursor is not None:  # README "Deep paging with cursors": always a next-cursor; past the end, empty items
            message["next-cursor"] = _make_cursor(offset + rows)
        return {"status": "ok", "message-type": "work-list", "message-version": "1.0.0", "message": message}

    @staticmethod
    def _score(w: ScholarlyWork, name: str, ws: list[str]) -> float:
        authors = words(" ".join(w.display_authors()))
        fields = {
            "query.author": authors,
            "query.container-title": words(w.venue),
        }
        # `query` and `query.bibliographic`: titles, authors, container titles, years, DOI; never the abstract
        hay = fields.get(name, words(w.title) + authors + words(w.venue) + [str(w.year)] + words(w.doi))
        return float(sum(1 for t in set(ws) if t in hay))

    @staticmethod
    def _filters(query: dict[str, list[str]]) -> list[tuple[str, str]]:
        return split_filters(query, CROSSREF_FILTERS, lambda key: _CrossrefInvalid(
            "filter-not-available", key,
            f"Filter {key} specified but there is no such filter for this route. Valid filters for this route are: " + ", ".join(CROSSREF_FILTERS)))

    @staticmethod
    def _passes(w: ScholarlyWork, key: str, value: str) -> bool:
        if key == "from-pub-date":
            return w.published >= _crossref_bound(value, upper=False)
        if key == "until-pub-date":
            return w.published <= _crossref_bound(value, upper=True)
        if key == "type":
            return value == _crossref_type(w)
        if key == "has-abstract":
            return (value != "false") == bool(w.abstract)
        if key == "has-full-text":
            return (value != "false") == bool(w.oa_url)
        return (w.doi or "").lower() == value.lower()

    @staticmethod
    def _select(obj: dict[str, Any], query: dict[str, list[str]]) -> dict[str, Any]:
        return select_fields(obj, query, CROSSREF_WORK_FIELDS, lambda f: _CrossrefInvalid(
            "select-not-available", f, f"Field {f} specified but it is not selectable. Selectable fields are: " + ", ".join(CROSSREF_WORK_FIELDS)))

    def work_json(self, w: ScholarlyWork) -> dict[str, Any]:
        assert w.doi
        doi = w.doi.lower()
        prefix = doi.split("/", 1)[0]
        stamp = {"date-parts": [[2026, 11, 30]], "date-time": "2026-11-30T04:00:00Z", "timestamp": 1796011200000}
        precision = 3 if w.date else 1
        authors = []
        for i, (given, family) in enumerate(w.author_names()):
            a: dict[str, Any] = {"given": given, "family": family, "sequence": "first" if i == 0 else "additional", "affiliation": []}
            if not given:
                a = {"name": family, "sequence": a["sequence"], "affiliation": []}
            authors.append(a)
        obj: dict[str, Any] = {
            "indexed": {**stamp, "version": "3.40.0"}, "reference-count": 0, "publisher": w.publisher,
            "license": [{"start": {"date-parts": _date_parts(w.published)}, "content-version": "vor", "delay-in-days": 0,
                         "URL": "https://creativecommons.org/licenses/by/4.0/"}] if w.oa_url else [],
            "content-domain": {"domain": [], "crossmark-restriction": False},
            "short-container-title": [w.venue] if w.venue else [],
            "DOI": doi, "type": _crossref_type(w),
            "created": {"date-parts": _date_parts(w.published), "date-time": w.published.isoformat() + "T00:00:00Z",
                        "timestamp": int(datetime(w.published.year, w.published.month, w.published.day, tzinfo=UTC).timestamp() * 1000)},
            "source": "Crossref", "is-referenced-by-count": w.cited_by_count, "title": [w.title],
            "prefix": prefix, "member": "1", "container-title": [w.venue] if w.venue else [], "original-title": [],
            "language": "en",
            "link": [{"URL": w.oa_url, "content-type": "application/pdf", "content-version": "vor",
                      "intended-application": "text-mining"}] if w.oa_url else [],
            "deposited": stamp, "score": 1.0,
            "resource": {"primary": {"URL": w.landing_url or f"https://publisher.example/{doi}"}},
            "subtitle": [], "short-title": [],
            "issued": {"date-parts": _date_parts(w.published, precision)},
            "references-count": 0, "URL": "https://doi.org/" + doi, "relation": {},
            "published": {"date-parts": _date_parts(w.published, precision)},
            "published-print": {"date-parts": _date_parts(w.published, precision)},
            "author": authors,
        }
        if w.abstract:
            obj["abstract"] = "<jats:title>Abstract</jats:title><jats:p>" + html.escape(w.abstract, quote=False) + "</jats:p>"
        return obj


# ---- no network at all -----------------------------------------------------------------------------------------
@contextmanager
def refused_port() -> Iterator[int]:
    """A loopback port where nothing listens: it is bound (so nothing else takes it meanwhile) but never listening,
    so a connect gets ECONNREFUSED at once."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]
    finally:
        s.close()
