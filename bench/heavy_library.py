"""A heavy user's Zotero library, written with Zotero's own schema, for bench_heavy_library.py.

What a researcher with years of papers has: 10,000 regular items (1% in the trash), 4,000 of
them with a PDF whose `.zotero-ft-cache` holds 15-40 pages of ~2,800 characters (~110,000 pages,
~310 MB of text), 3,000 notes (most on a paper, some standalone in a collection), 6,000
highlights with the page label the reader shows, 150 collections nested three deep. The pages
are laid out as Zotero's PDF worker extracts a printed journal's (`printed_pages`): a running
header (the journal, volume and pages on odd pages, the first author on even ones), the page
number as a line of its own, and, for half of the PDFs, printed lines with words hyphenated at
their ends as earlier Zotero versions extracted them. Each PDF file is a real PDF of as many
pages, half of them with page labels (`/PageLabels`) starting at the printed first page.

The words are real: titles, abstracts and sentences come from BEIR SciFact's corpus (read in
place from the shared data), so term statistics and the dense model's vectors behave as on real
papers. The first 5,183 items carry SciFact's titles and abstracts; the others a title made of
halves of two of them and an abstract of its sentences. `truth.json` keeps what the benchmark
asks: titles (with their item keys), claim-length sentences, a collection to scope to.

Nothing here is imported by the daemon.
"""

from __future__ import annotations

import json
import random
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from _paths import REPO_DIR
from zoterofixture import PageFurniture, key_maker, printed_pages

from zocratesd.demo.zotero_dir import Annotation, Attachment, Collection, Creator, Item, Library, Note, pdf_file, write

SCIFACT = REPO_DIR.parent / "shared" / "data" / "beir" / "scifact" / "corpus.jsonl"
ZOTERO_10 = 129
JOURNALS = ("Nature Medicine", "Cell Reports", "The Lancet", "Journal of Immunology", "PLOS Biology", "Neuron",
            "Annals of Internal Medicine", "Molecular Cell", "BMJ", "Science Translational Medicine")


@dataclass(frozen=True)
class Shape:
    items: int = 10_000
    pdfs: int = 4_000
    pages: tuple[int, int] = (15, 40)
    page_chars: int = 2_800
    notes: int = 3_000
    annotations: int = 6_000
    collections: int = 150
    trashed: float = 0.01
    seed: int = 39

    @property
    def name(self) -> str:
        return f"i{self.items}-p{self.pdfs}-n{self.notes}-a{self.annotations}-c{self.collections}-s{self.seed}"


HEAVY = Shape()
QUICK = Shape(items=1_000, pdfs=400, notes=300, annotations=600, collections=30)


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+(?=[A-Z])", text) if len(s.split()) >= 6]


def _surnames(rng: random.Random, n: int) -> list[str]:
    onsets = ["B", "C", "D", "F", "G", "H", "K", "L", "M", "N", "P", "R", "S", "T", "V", "W", "Br", "St", "Sch", "Kr"]
    vowels = ["a", "e", "i", "o", "u", "ei", "au", "oe"]
    codas = ["n", "r", "s", "l", "nd", "rt", "ng", "ck", "man", "son"]
    names: set[str] = set()
    while len(names) < n:
        names.add(rng.choice(onsets) + rng.choice(vowels) + rng.choice(codas) + rng.choice(["", "er", "ini", "ez", "ova"]))
    return sorted(names)


def build(root: Path, shape: Shape) -> Path:
    """Write the library under `root/zotero` (once: a finished one is reused) and `root/truth.json`."""
    zdir = root / "zotero"
    done = root / "complete"
    if done.exists():
        return zdir
    shutil.rmtree(root, ignore_errors=True)  # a build that did not finish
    root.mkdir(parents=True, exist_ok=True)
    rng = random.Random(shape.seed)
    docs = [json.loads(line) for line in SCIFACT.read_text(encoding="utf-8").splitlines()]
    rng.shuffle(docs)
    pool = [s for d in docs for s in _sentences(d["text"])]
    surnames = _surnames(rng, 1500)
    given = ["A.", "B.", "C.", "D.", "E.", "F.", "H.", "J.", "K.", "L.", "M.", "N.", "P.", "R.", "S.", "T.", "Y."]
    key = key_maker(rng)
    collections: list[Collection] = []
    tops = max(1, shape.collections // 15)
    for t in range(tops):
        top = Collection(key(), f"Project {t + 1}")
        collections.append(top)
        for s in range(4):
            sub = Collection(key(), f"Project {t + 1} / Topic {s + 1}", parent=top.key)
            collections.append(sub)
    while len(collections) < shape.collections:
        parent = rng.choice(collections[:tops * 5])
        collections.append(Collection(key(), f"Reading {len(collections)}", parent=parent.key))

    titles: list[str] = []
    abstracts: list[str] = []
    for n in range(shape.items):
        if n < len(docs):
            titles.append(docs[n]["title"].rstrip("."))
            abstracts.append(docs[n]["text"])
        else:
            a, b = rng.choice(docs)["title"].rstrip(".").split(), rng.choice(docs)["title"].rstrip(".").split()
            titles.append(" ".join(a[: max(2, len(a) // 2)] + b[len(b) // 2:]))
            abstracts.append(" ".join(rng.sample(pool, rng.randint(3, 7))))
    with_pdf = set(rng.sample(range(shape.items), shape.pdfs))
    # Annotations and child notes land on random PDFs and items: counted per index first.
    ann_on: dict[int, int] = {}
    for n in rng.choices(sorted(with_pdf), k=shape.annotations):
        ann_on[n] = ann_on.get(n, 0) + 1
    standalone_notes = shape.notes // 6
    notes_on: dict[int, int] = {}
    for n in rng.choices(range(shape.items), k=shape.notes - standalone_notes):
        notes_on[n] = notes_on.get(n, 0) + 1

    def note_html() -> str:
        paras = [" ".join(rng.sample(pool, rng.randint(1, 4))) for _ in range(rng.randint(1, 4))]
        return '<div data-schema-version="9">' + "".join(f"<p>{p}</p>" for p in paras) + "</div>"

    items: list[Item] = []
    truth_titles: list[dict[str, object]] = []
    claims: list[dict[str, object]] = []
    for n in range(shape.items):
        k = key()
        authors = [Creator(rng.choice(surnames), rng.choice(given)) for _ in range(rng.randint(1, 6))]
        year = rng.randint(1985, 2026)
        trashed = rng.random() < shape.trashed
        attachments: list[Attachment] = []
        if n in with_pdf:
            n_pages = rng.randint(*shape.pages)
            first = rng.randint(1, 1800)
            journal = rng.choice(JOURNALS)
            furniture = PageFurniture(
                odd_header=f"{journal} {rng.randint(1, 60)} ({year}) {first}–{first + n_pages - 1}",
                even_header=f"{authors[0].last} et al.", footer="{page}", first_page=first, title_page=True,
                width=90 if n % 2 else None,
            )
            bodies: list[list[str]] = []
            for _ in range(n_pages):
                sents: list[str] = []
                size = 0
                while size < shape.page_chars:
                    s = rng.choice(pool)
                    sents.append(s)
                    size += len(s) + 1
                bodies.append(sents)
            pages = printed_pages(["\n\n".join(" ".join(sents[i:i + 6]) for i in range(0, len(sents), 6)) for sents in bodies],
                                  furniture)
            anns = []
            for _ in range(ann_on.get(n, 0)):
                p = rng.randrange(n_pages)
                anns.append(Annotation(key(), text=rng.choice(bodies[p]), comment=rng.choice(["", "", "key result", "compare with"]),
                                       page_index=p, page_label=str(first + p)))
            att_key = key()
            labels = [(0, "D", "", first)] if n % 4 < 2 else []
            attachments.append(Attachment(att_key, filename="paper.pdf", pages=pages, annotations=anns,
                                          file_bytes=pdf_file(n_pages, labels)))
            if not trashed and len(claims) < 2000:
                p = rng.randrange(n_pages)
                claims.append({"query": rng.choice(bodies[p]), "item_key": k, "page_label": str(first + p)})
        notes = [Note(key(), note_html()) for _ in range(notes_on.get(n, 0))]
        item = Item(
            k, titles[n], creators=authors, date=str(year),
            fields={"abstractNote": abstracts[n], "DOI": f"10.{1000 + n % 9000}/bench.{n}",
                    "publicationTitle": rng.choice(JOURNALS)},
            tags=rng.sample(["review", "methods", "to read", "cited", "clinical", "mouse model"], rng.randint(0, 2)),
            collections=list({rng.choice(collections).key for _ in range(rng.randint(1, 2))}) if rng.random() < 0.8 else [],
            attachments=attachments, notes=notes, trashed=trashed,
        )
        items.append(item)
        if not trashed and n < len(docs):
            truth_titles.append({"query": titles[n], "item_key": k})
    standalone = [Note(key(), note_html(), collections=[rng.choice(collections).key]) for _ in range(standalone_notes)]
    write(zdir, Library(items=items, collections=collections, notes=standalone), version=ZOTERO_10)
    scope = collections[0].key  # a top collection: its subcollections' items too
    (root / "truth.json").write_text(json.dumps({"titles": truth_titles, "claims": claims, "collection": scope}))
    done.write_text(shape.name)
    return zdir
