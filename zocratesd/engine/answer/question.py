"""What a question asks: its parts, in the order asked, each with the words evidence must cover.

- Terms: the question's content words (retrieval's stop words and the words that only frame a
  question, like "compare" or "papers", left out), each with a light stem so "retrieved" meets
  "retrieval" and "delivered" meets "delivery". Words that frame a claim rather than name a topic
  ("affect", "use", "effective") count half. Named things (acronyms, mixed case like "HyDE",
  words with digits like "Cas9", capitalised words inside the question) are anchors: evidence
  must name them. Words are matched folded as the library index folds them ("Lubeck" meets
  "Lübeck"), and Chinese, Japanese and Korean text as the index's character bigrams (with the
  question's frame, "什么", "如何", "とは", "무엇", and joining characters left out), so coverage
  is the share of the question's bigrams a passage has (zocratesd/textnorm.py).
- Parts: the question's sentences (abbreviation-aware: "Smith et al." is not an end), its `;`
  clauses, enumerations "1) ... 2) ...", and clauses joined by "and"/"or" that start a new
  question ("..., and how does ColBERT score documents?"). A part that only points back ("its
  training") borrows the anchors of the part before. A list of three or more topics after a
  frame with no content word ("What about varroa mites, HyDE and hypothetical documents?") is
  one part per topic: a passage on one of them answers that one, not a sixth of the question.
- Comparisons ("compare A and B", "the difference between A and B", "how does A differ from B",
  "A vs. B", "which is better, A or B", "how do A and B differ"): one part per compared subject,
  each with the subject's own words (required) plus the shared focus ("... in off-target editing").
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from zocratesd.engine.answer.segment import split_sentences
from zocratesd.library.retrieval import STOPWORDS
from zocratesd.textnorm import CJK_CHARS, cjk_grams, cjk_run_re, fold

# Words that ask rather than say what is asked about.
QUESTION_WORDS = frozenset(
    "compare compared comparing comparison contrast difference differences differ differs different between versus vs "
    "find finds found findings paper papers article articles study studies say says said show shows shown report "
    "reports reported according library summarize summarise summary synthesize synthesise discuss please give list "
    "mention mentions much many whether also both each any some other others like look looks known way ways "
    "anything something thing things kind kinds did was were been being has had should would could may might must "
    "shall more most less than very et al one ones".split()
)
# Words that frame a claim more than they name a topic: they count half toward coverage.
GENERIC_WORDS = frozenset(
    "affect affects affected effect effects impact impacts role use used uses using work works cause causes caused "
    "change changes increase increases reduce reduces improve improves better best worse fast faster quickly well good "
    "high higher low lower large small new make makes made effective long take takes happen happens mean means result "
    "results main key important common help helps need needs get gets way perform performs performance".split()
)
GENERIC_WEIGHT = 0.5
_PRONOUNS = frozenset("it its they their them this these those such".split())

# A word, or a run of CJK characters (matched as its bigrams).
_TOKEN = re.compile(rf"[{CJK_CHARS}]+|(?:(?![{CJK_CHARS}])[^\W_])+(?:-\d+)?")
# What frames a question in Chinese, Japanese and Korean (what, how, why, which, whether, please,
# about; sentence-final particles), characters that join words (的, 是, 和...), and Japanese
# hiragana (particles and endings, "とは", "ですか"): cut out of a question's CJK runs before
# they become bigrams, as English stop words are left out (retrieval ranks with them anyway).
_CJK_FRAME = re.compile(
    "为什么|為什麼|什么|什麼|甚麼|怎么|怎麼|怎样|怎樣|如何|哪些|哪个|哪個|是否|请问|請問|关于|關於|有关|有關|"
    "[的是了吗嗎呢吧和与與及或何]|[\u3040-\u309f]+|무엇|어떻게|어떤|무슨|왜|입니까|인가요|습니까|나요"
)
# A list of topics: "A, B and C", "A, B, or C" (items of at most MAX_LIST_WORDS words).
_LIST_SEP = re.compile(r"\s*,\s*(?:(?:and|or)\s+)?|\s+(?:and|or)\s+", re.I)
MAX_LIST_WORDS = 4
_ARTICLE = re.compile(r"^(?:the|a|an)\s+", re.I)
_TRAILING_JOIN = re.compile(r"[\s,;]+(?:and|or|but)[\s,;]*$", re.I)
_ENUM = re.compile(r"(?:^|\s)\(?(?:\d{1,2}|[a-h])\)\s+|(?:^|\s)\d{1,2}\.\s+(?=[A-Za-z])")
_JOIN = re.compile(
    r"(?:,\s*|\s+)(?:and|or|but)\s+(?=(?:what|how|why|which|who|whose|where|when|does|do|did|is|are|was|were|can|could|"
    r"should|will|would|has|have)\b)", re.I)
_SUBJECT = re.compile(
    r"\s*(?:(?:how|why|when|where|what|which|who)(?:\s+[\w-]+){0,2}?\s+)?"
    r"(?:does|do|did|is|are|was|were|can|could|will|would|has|have|should)\s+(?:(?:the|a|an)\s+)?(?P<x>[\w-]+)",
    re.I,
)
_FOCUS = r"(?:\s+(?:in|on|for|regarding|with respect to|in terms of|when it comes to)\s+(?P<focus>.+?))?"
_COMPARISONS = [re.compile(p, re.I) for p in (
    r"\bcompare\s+(?P<a>.+?)\s+(?:and|with|to|against|versus|vs\.?)\s+(?P<b>.+?)" + _FOCUS + r"\s*[.?!]*$",
    r"\bdifferences?\s+between\s+(?P<a>.+?)\s+and\s+(?P<b>.+?)" + _FOCUS + r"\s*[.?!]*$",
    r"\bhow\s+(?:does|do|did|is|are)\s+(?P<a>.+?)\s+(?:differ|compare|contrast)\s+(?:from|to|with)\s+(?P<b>.+?)" + _FOCUS + r"\s*[.?!]*$",
    r"\bhow\s+(?:do|did|are)\s+(?P<a>.+?)\s+and\s+(?P<b>.+?)\s+(?:differ|compare|contrast)" + _FOCUS + r"\s*[.?!]*$",
    r"\bwhich\b(?P<focus>.*?),\s*(?P<a>.+?)\s+or\s+(?P<b>.+?)\s*[.?!]*$",
    r"^(?P<a>.+?)\s+(?:vs\.?|versus)\s+(?P<b>.+?)" + _FOCUS + r"\s*[.?!]*$",
)]


# How researchers put a claim to the library: "Is it true that X?", "What evidence is there that
# X?", "What does the literature say about X?", "Evidence for X". The frame names no topic: a part
# is what follows it (its words would otherwise be terms evidence must cover, and "true" or
# "literature" is in no paper's abstract). Only at a part's start, so "the true positive rate"
# and "literature-based discovery" stay.
_FRAMES = re.compile(
    r"^(?:(?:so|and|but|ok(?:ay)?|please|tell me|can you tell me|could you tell me|i wonder)[,:]?\s+)*"
    r"(?:"
    r"(?:is|was|isn't|wasn't)\s+it\s+(?:really\s+|actually\s+)?(?:true|correct|right|the case|false|a fact|known)\s+(?:that|whether)"
    r"|(?:is|are)\s+there\s+(?:any\s+|good\s+|strong\s+|some\s+)?(?:evidence|data|studies|papers|support)\s+"
    r"(?:for|that|of|on|against|showing|suggesting|supporting)(?:\s+the\s+(?:claim|idea|notion)\s+that)?"
    r"|what\s+(?:evidence|data|support)\s+(?:is|are)\s+there\s+(?:for|that|of|on|against)(?:\s+the\s+(?:claim|idea)\s+that)?"
    r"|what\s+(?:evidence|data)\s+(?:supports?|exists?\s+(?:for|that|on)|do\s+(?:we|you|i)\s+have\s+(?:for|that|on))"
    r"|what\s+(?:does|do)\s+(?:the\s+|my\s+)?(?:literature|research|evidence|library|papers|studies|sources)\s+"
    r"(?:say|tell\s+(?:me|us)|show|suggest|report)\s+(?:about|on|regarding|concerning)(?:\s+(?:whether|if|the\s+claim\s+that))?"
    r"|(?:does|do)\s+(?:the\s+|my\s+)?(?:literature|research|evidence|library|papers|studies|sources|data)\s+"
    r"(?:support|show|suggest|confirm|say)\s+(?:that|whether|the\s+claim\s+that)?"
    r"|(?:the\s+)?(?:evidence|arguments?|support)\s+(?:for|against|on)(?:\s+(?:and|or)\s+against)?(?:\s+the\s+(?:claim|idea)\s+that)?"
    r"|(?:i|we)\s+(?:read|heard|have\s+heard|was\s+told|were\s+told)\s+that"
    r"|it\s+is\s+(?:often\s+)?(?:claimed|said|believed|thought)\s+that"
    r"|(?:can\s+you\s+|please\s+)?(?:confirm|verify|check)\s+(?:that|whether|if)"
    r"|(?:true\s+or\s+false|fact[- ]check|claim)\s*[:,-]"
    r")\s+",
    re.I,
)


def unframe(part: str) -> str:
    """The part without the frame it is asked in (`_FRAMES`); as written when nothing is left."""
    rest = _FRAMES.sub("", part, count=1)
    return rest[:1].upper() + rest[1:] if rest != part and terms_of(rest) else part


_DERIVATIONAL = ("ational", "ation", "ition", "ution", "ion", "ment", "ness", "ity", "ance", "ence", "ant", "ent",
                 "ive", "able", "ible", "al", "er", "ly", "ic")


@functools.lru_cache(maxsize=1 << 16)  # a library's words repeat: most passages' words are cached
def stem(word: str) -> str:
    """A light English stemmer (casefolded input): plural, -ed/-ing, one derivational suffix, a
    final e/y. Enough to meet a word's family in a passage; never used for display."""
    w = word
    if len(w) <= 3 or not w.isalpha():
        return w
    if w.endswith("sses"):
        w = w[:-2]
    elif w.endswith("ies") and len(w) > 4:
        w = w[:-3] + "y"
    elif w.endswith("s") and not w.endswith(("ss", "us", "is")):
        w = w[:-1]
    for suf in ("ing", "ed"):
        if w.endswith(suf) and len(w) - len(suf) >= 3:
            w = w[: -len(suf)]
            if len(w) > 3 and w[-1] == w[-2] and w[-1] not in "lsz":
                w = w[:-1]
            break
    w = _derive(w, 2)  # "specificity" -> "specific" -> "specif", as "specific" -> "specif"
    if w.endswith(("e", "y")) and len(w) > 4:
        w = _derive(w[:-1], 1)  # "delivery" -> "deliver" -> "deliv", as "delivered"
    return w


def _derive(w: str, rounds: int) -> str:
    for _ in range(rounds):
        for suf in _DERIVATIONAL:
            if w.endswith(suf) and len(w) - len(suf) >= 4:
                w = w[: -len(suf)]
                break
        else:
            break
    return w


_PLURAL_ABBREVIATION = re.compile(r"^[A-Z]{2,6}s$")
# An abbreviation the question uses may be spelled out in the paper ("GPs": "general practice"):
# the initials of a run of this many content words count as a word of the passage.
SPELLED_OUT_WORDS = (2, 3, 4)


def word_stems(text: str) -> set[str]:
    """The stems of every word of `text` (a passage's side of the match), folded; a CJK run gives
    its bigrams and its characters (a question's lone character meets any bigram of it); and the
    initials of runs of content words (`SPELLED_OUT_WORDS`)."""
    out: set[str] = set()
    words = _TOKEN.findall(fold(text))
    for w in set(words):
        if cjk_run_re().match(w):
            out.update(cjk_grams(w))
            out.update(w)
        else:
            out.add(stem(w))
    run: list[str] = []
    for w in [*words, ""]:
        if w and w.isalpha() and w not in STOPWORDS and not cjk_run_re().match(w):
            run.append(w[0])
            continue
        for n in SPELLED_OUT_WORDS:
            out.update("".join(run[i : i + n]) for i in range(len(run) - n + 1))
        run = []
    return out


def _cjk_terms(run: str) -> list[str]:
    """A question's CJK run as the bigrams evidence must have, its frame cut out."""
    return [g for piece in _CJK_FRAME.split(run) if piece for g in cjk_grams(piece)]


@dataclass(frozen=True)
class Term:
    stem: str
    surface: str  # as the question writes it
    weight: float
    anchor: bool


@dataclass(frozen=True)
class Part:
    text: str  # as asked (the heading)
    terms: tuple[Term, ...]
    required: frozenset[str]  # stems evidence must name (anchors, or a compared subject's own words)
    topic: str  # the part's words from its first content word to its last, as written
    # The authors the part names, when it names some (authors.py): then `terms` are its topic only,
    # and its evidence is among those authors' passages.
    authors: frozenset[str] = frozenset()
    # A statement put to the library ("IL-18 drives atherosclerosis", "Is it true that ...?" without
    # its frame) rather than a question: papers that bear on it say it in their own words.
    claim: bool = False

    @property
    def weight(self) -> float:
        return sum(t.weight for t in self.terms)


@dataclass(frozen=True)
class Question:
    text: str
    parts: tuple[Part, ...]
    comparison: bool = False
    subjects: tuple[str, ...] = ()  # the compared subjects, as written
    focus: str = ""


def _is_anchor(raw: str, first: bool) -> bool:
    if any(c.isdigit() for c in raw) and any(c.isalpha() for c in raw):
        return True
    if any(c.isupper() for c in raw[1:]):
        return True
    return raw[:1].isupper() and not first


# "cardiovascular disease (CVD)": an abbreviation defined in place names what the words before it
# name; a paper may use either, so it is no term of its own.
_DEFINED = re.compile(r"\(([A-Z][A-Za-z0-9]{1,9})s?\)")


def _defined_abbreviations(text: str) -> set[int]:
    """Where (start offsets) `text` defines an abbreviation by the initials of the words before it."""
    out = set()
    for m in _DEFINED.finditer(text):
        letters = "".join(c for c in m.group(1) if c.isalpha()).casefold()
        before = re.findall(r"[A-Za-z][\w-]*", text[: m.start()])
        # The letters in order within the last few words, the first one a word's first: CVD in
        # "cardiovascular disease", HyDE in "hypothetical document embeddings".
        for k in range(1, len(letters) + 2):
            words = before[-k:]
            if len(letters) >= 2 and words and words[0][0].casefold() == letters[0] and _in_order(letters, "".join(words).casefold()):
                out.add(m.start(1))
                break
    return out


def _in_order(letters: str, text: str) -> bool:
    it = iter(text)
    return all(c in it for c in letters)


def terms_of(text: str, *, anchors: bool = True) -> list[Term]:
    out: dict[str, Term] = {}
    first = True
    defined = _defined_abbreviations(text) if "(" in text else set()
    for m in _TOKEN.finditer(text):
        raw = m.group(0)
        if m.start() in defined:
            continue
        if cjk_run_re().match(raw):
            for gram in _cjk_terms(raw):
                out.setdefault(gram, Term(gram, gram, 1.0, False))
            first = False
            continue
        low = fold(raw)
        is_first, first = first, False
        if low in STOPWORDS or low in QUESTION_WORDS or len(low) < 2 or (low.isdigit() and len(low) < 3):
            continue
        s = fold(raw[:-1]) if _PLURAL_ABBREVIATION.match(raw) else stem(low)  # "GPs": the stem is "gp"
        if s in out:
            continue
        weight = GENERIC_WEIGHT if low in GENERIC_WORDS else 1.0
        out[s] = Term(s, raw, weight, anchors and _is_anchor(raw, is_first) and weight == 1.0)
    return list(out.values())


def _topic(text: str, terms: list[Term]) -> str:
    if not terms:
        return " ".join(text.split()).strip(" ?.!;,")
    low = text.casefold()
    starts = [low.find(t.surface.casefold()) for t in terms]
    starts = [s for s in starts if s >= 0]
    if not starts:
        return " ".join(text.split()).strip(" ?.!;,")
    a = min(starts)
    b = max(low.find(t.surface.casefold()) + len(t.surface) for t in terms if low.find(t.surface.casefold()) >= 0)
    return " ".join(text[a:b].split())


def subject_stem(text: str) -> str | None:
    """The first content word of the question's grammatical subject: "How does *prime* editing
    avoid double-strand breaks?" (evidence must name what the question is about, not only the
    words around it: editing, breaks)."""
    m = _SUBJECT.match(text)
    if m is None:
        return None
    found = terms_of(m.group("x"), anchors=False)
    return found[0].stem if found and found[0].weight == 1.0 else None


# How a question (not a statement) opens.
_ASKS = re.compile(
    r"^\W*(?:what|how|why|when|where|which|who|whose|whom|does|do|did|is|are|was|were|can|could|should|will|would|"
    r"has|have|had|may|might|tell|describe|explain|list|summari[sz]e|give|show|compare|find|name)\b", re.I)


def is_statement(text: str) -> bool:
    return _ASKS.match(text) is None


def make_part(text: str, extra: list[Term] | None = None, required: set[str] | None = None) -> Part:
    terms = terms_of(text)
    have = {t.stem for t in terms}
    terms += [t for t in extra or [] if t.stem not in have]
    req = set(required) if required is not None else {t.stem for t in terms if t.anchor}
    subject = subject_stem(text)
    if subject is not None:
        req.add(subject)
    return Part(text=" ".join(text.split()), terms=tuple(terms), required=frozenset(req), topic=_topic(text, terms),
                claim=is_statement(text))


def split_parts(question: str) -> list[str]:
    """The question's parts as written, in order (see the module docstring); comparisons not split."""
    q = " ".join(question.split())
    marks = list(_ENUM.finditer(q))
    if len(marks) >= 2:
        ends = [m.start() for m in marks[1:]] + [len(q)]
        # "2) how does mTORC2 regulate xCT, and 3) ...": the joining word belongs to no part.
        chunks = [_TRAILING_JOIN.sub("", q[m.end(): end]) for m, end in zip(marks, ends, strict=True)]
        head = q[: marks[0].start()].strip()
        chunks = ([head] if terms_of(head) else []) + chunks
    else:
        chunks = [q]
    out: list[str] = []
    for chunk in chunks:
        for sentence in split_sentences(chunk):
            for clause in sentence.split(";"):
                out += [unframe(p) for p in _split_joined(clause.strip())]
    return [p for p in out if p]


def _split_joined(clause: str) -> list[str]:
    """"What does HyDE do, and how does ColBERT score?" -> two parts (each with content words)."""
    out: list[str] = []
    rest = clause
    while True:
        m = next((m for m in _JOIN.finditer(rest) if terms_of(rest[: m.start()]) and terms_of(rest[m.end():])), None)
        if m is None:
            break
        out.append(rest[: m.start()].strip(" ,"))
        rest = rest[m.end():]
    out.append(rest.strip())
    return out


def topic_list(piece: str) -> list[str]:
    """The topics of a part that only lists them after a frame with no content word ("What about
    varroa mites, HyDE and hypothetical documents?" -> the three); [] for anything else: fewer
    than three, or an item with a stop word inside, so a phrase or a clause ("What is the effect
    of heat, light and salt?": "effect of heat" is no topic of its own, so it stays one part)."""
    text = piece.strip().rstrip("?.!").strip()
    first = next((m for m in re.finditer(r"\S+", text) if terms_of(m.group(0))), None)
    if first is None or "," not in text[first.start():]:
        return []
    items = [_ARTICLE.sub("", x.strip()) for x in _LIST_SEP.split(text[first.start():])]
    if len(items) < 3 or any(len(x.split()) > MAX_LIST_WORDS or not terms_of(x)
                             or any(fold(w) in STOPWORDS for w in _TOKEN.findall(x)) for x in items):
        return []
    return items


def _comparison(text: str) -> tuple[str, str, str] | None:
    for pattern in _COMPARISONS:
        m = pattern.search(text)
        if m and terms_of(m.group("a")) and terms_of(m.group("b")):
            return m.group("a").strip(" ,"), m.group("b").strip(" ,"), (m.group("focus") or "").strip(" ,?.")
    return None


# A question has at most this many parts (engine/research.py searches one aspect each); more
# pieces than that are a pasted text, not a list of questions.
MAX_PARTS = 8
# A text of this many statements was pasted (an abstract, a paragraph), whatever asks about it.
PASTED_STATEMENTS = 4
# The words a pasted text is matched by: its most repeated content words, named things first.
KEY_TERMS = 12


def _pasted(pieces: list[str]) -> list[str] | None:
    """Pieces of a pasted text ("Which of my papers bear on this abstract: ..."): its questions,
    then its statements as one piece; None for a question (few pieces, few statements)."""
    questions = [p for p in pieces if p.endswith("?") or not is_statement(p)]
    if len(pieces) <= MAX_PARTS and len(pieces) - len(questions) < PASTED_STATEMENTS:
        return None
    pointing = [p for p in questions if not {t.stem for t in terms_of(p)} - _POINTS_AT_TEXT]
    asking = [p for p in questions if p not in pointing][: MAX_PARTS - 1]
    rest = " ".join(p for p in pieces if p not in asking and p not in pointing)  # the text, and questions past the limit
    return [*asking, rest] if rest else asking


def _key_terms(part: Part) -> Part:
    """A pasted text as a part: its `KEY_TERMS` most repeated content words (named things first),
    the named ones among them required, its heading its opening words."""
    # A capital starts every sentence of a text: only digits and inner capitals name a thing here.
    terms = [Term(t.stem, t.surface, t.weight, _is_anchor(t.surface, True)) for t in part.terms]
    counts: dict[str, int] = {}
    for w in _TOKEN.findall(fold(part.text)):
        s = stem(w)
        counts[s] = counts.get(s, 0) + 1
    order = {t.stem: i for i, t in enumerate(terms)}
    kept = sorted(terms, key=lambda t: (not t.anchor, -counts.get(t.stem, 0), order[t.stem]))[:KEY_TERMS]
    words = part.text.split()
    heading = " ".join(words[:HEADING_WORDS]) + (" …" if len(words) > HEADING_WORDS else "")
    return Part(text=heading, terms=tuple(kept), required=frozenset(t.stem for t in kept if t.anchor),
                topic=", ".join(t.surface for t in kept), claim=True)


# What a question about a pasted text calls it ("Which papers bear on this abstract?"): such a
# question asks nothing but the text itself.
_POINTS_AT_TEXT = frozenset(stem(w) for w in (
    "abstract text paragraph passage excerpt bear relate related relevant following below above "
    "this these library cite cited".split()))
# The opening words a pasted text is shown by.
HEADING_WORDS = 12


def search_texts(question: str) -> list[str]:
    """What to search for, one text per part (engine/research.py's aspects): the parts as
    written; a pasted text by its key terms (`_key_terms`), not sentence by sentence."""
    pieces = split_parts(question)
    pasted = _pasted(pieces)
    if pasted is None:
        return pieces
    text = make_part(pasted[-1])
    if len(text.terms) <= KEY_TERMS:
        return pasted
    return [*pasted[:-1], " ".join(t.surface for t in _key_terms(text).terms)]


def parse_question(question: str) -> Question:
    text = " ".join(question.split())
    pieces = split_parts(text)
    if len(pieces) == 1 and (cmp := _comparison(pieces[0])) is not None:
        return _comparison_question(text, *cmp)
    if (pasted := _pasted(pieces)) is not None:
        made = [make_part(p) for p in pasted]
        if len(made[-1].terms) > KEY_TERMS:
            made[-1] = _key_terms(made[-1])
        return Question(text=text, parts=tuple(made))
    pieces = [t for piece in pieces for t in ([x[:1].upper() + x[1:] for x in topic_list(piece)]
                                               if _comparison(piece) is None else []) or [piece]]
    parts: list[Part] = []
    for piece in pieces or [text]:
        extra: list[Term] = []
        words = {w.casefold() for w in _TOKEN.findall(piece)}
        if parts and words & _PRONOUNS and not any(t.anchor for t in terms_of(piece)):
            extra = [t for t in parts[-1].terms if t.anchor]  # "its training": the subject of the part before
        part = make_part(piece, extra, {t.stem for t in terms_of(piece) + extra if t.anchor})
        if part.terms or not parts:
            parts.append(part)
    return Question(text=text, parts=tuple(parts))


def _comparison_question(text: str, a: str, b: str, focus: str) -> Question:
    ta, tb = terms_of(a, anchors=False), terms_of(b, anchors=False)
    sa, sb = [t.stem for t in ta], [t.stem for t in tb]
    shared: set[str] = set(sa) & set(sb)
    # "RNP and plasmid delivery": a one-word subject shares the other's head ("RNP delivery").
    if len(sa) == 1 and len(sb) > 1:
        shared |= set(sb[1:])
    elif len(sb) == 1 and len(sa) > 1:
        shared |= set(sa[1:])
    focus_terms = terms_of(focus, anchors=False)
    parts = []
    for subject, own in ((a, ta), (b, tb)):
        req = {t.stem for t in own if t.stem not in shared} or {t.stem for t in own}
        extra = [t for t in ta + tb if t.stem in shared] + focus_terms
        terms = [t for t in own if t.stem in req]
        have = {t.stem for t in terms}
        for t in extra:
            if t.stem not in have:
                terms.append(t)
                have.add(t.stem)
        parts.append(Part(text=subject[:1].upper() + subject[1:], terms=tuple(terms), required=frozenset(req),
                          topic=_topic(subject, own)))
    return Question(text=text, parts=tuple(parts), comparison=True, subjects=(a, b), focus=focus)
