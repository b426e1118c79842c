"""Citation keys and bibliographies on a library written as Zotero writes it (zocratesd/demo/zotero_dir.py)
and indexed by the real indexer: keys from Zotero's field, from Extra, from Better BibTeX's database
(built as Better BibTeX 7 creates it), and generated; every item type of Zotero's schema exported as
BibTeX and BibLaTeX (parsed back with bibtexparser) and CSL-JSON (validated against the CSL data
schema, csl-data.json here: citation-style-language/schema, MIT); text in two installed styles."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import bibtexparser
import jsonschema
import pytest
from zoterofixture import Creator, Group, Item, Library, touch_items

from zocratesd import zotero_schema as schema
from zocratesd.citations import bibliography as bib
from zocratesd.citations.bibliography import find_style, load, render
from zocratesd.demo import zotero_dir as w
from zocratesd.errors import InvalidInput
from zocratesd.library.bbt import BBT_DB
from zocratesd.library.index import INDEX_NAME, remove_index
from zocratesd.library.service import Library as IndexedLibrary

HERE = Path(__file__).resolve().parent
# Zotero's schema.json of three releases, kept outside the repository (as tests/unit/demo reads them).
SCHEMA_DIR = Path(__file__).resolve().parents[4] / "shared" / "data" / "zotero-schema"
RELEASES = ("7.0.32", "9.0.6", "10.0.0")
NON_REGULAR = schema.NON_REGULAR_TYPES
# Better BibTeX 7's table, as its schema creates it in better-bibtex.sqlite (attached as `betterbibtex`).
BBT_SCHEMA = """
CREATE TABLE citationkey (
  itemID NOT NULL PRIMARY KEY,
  itemKey NOT NULL,
  libraryID NOT NULL,
  citationKey NOT NULL CHECK (citationKey <> ''),
  pinned CHECK (pinned in (0, 1)),
  UNIQUE (libraryID, itemKey)
);
CREATE INDEX citationkey_itemKey ON citationkey(itemKey);
CREATE INDEX citationkey_libraryID_itemKey ON citationkey(libraryID, itemKey);
CREATE INDEX citationkey_citationkey ON citationkey(citationKey);
"""
TRICKY_TITLE = "Costs of {braces} & 100% of $x_1$ in #RAG ~ ^BERT\\ models"


def index(data_dir: Path) -> sqlite3.Connection:
    lib = IndexedLibrary(data_dir, data_dir / "zocrates-data", local_api_url=None)
    lib.indexer.refresh(None)
    return sqlite3.connect(data_dir / "zocrates-data" / "library.db")


def keys_of(conn: sqlite3.Connection) -> dict[str, tuple[str, str]]:
    return {uid: (k, s) for uid, k, s in conn.execute("SELECT uid, citation_key, key_source FROM items")}


def write_bbt(data_dir: Path, rows: list[tuple[int, str, int, str, int]]) -> None:
    conn = sqlite3.connect(data_dir / BBT_DB)
    conn.executescript(BBT_SCHEMA)
    conn.executemany("INSERT INTO citationkey VALUES (?, ?, ?, ?, ?)", rows)
    conn.commit()
    conn.close()


def item_ids(data_dir: Path) -> dict[str, tuple[int, int]]:
    conn = sqlite3.connect(f"file:{data_dir / 'zotero.sqlite'}?mode=ro", uri=True)
    try:
        return {key: (iid, lib) for iid, key, lib in conn.execute("SELECT itemID, key, libraryID FROM items")}
    finally:
        conn.close()


@pytest.mark.parametrize("release", RELEASES)
def test_the_csl_tables_are_zoteros(release: str) -> None:
    csl = json.loads((SCHEMA_DIR / release / "schema.json").read_text())["csl"]
    assert bib.CSL_TYPES == {z: c for c, zs in csl["types"].items() for z in zs}
    assert {k: list(v) for k, v in bib.CSL_TEXT.items()} == csl["fields"]["text"]
    assert bib.CSL_DATES == csl["fields"]["date"]
    assert bib.CSL_NAMES == csl["names"]


def test_keys_come_from_the_field_extra_better_bibtex_or_are_generated(tmp_path: Path) -> None:
    lib = Library(items=[
        Item("NATIVE01", "Attention is all you need", creators=[("Ashish", "Vaswani")], date="2017",
             fields={"citationKey": "vaswani2017attention", "extra": "Citation Key: ignored2017"}),
        Item("EXTRA001", "Dense passage retrieval", creators=[("Vladimir", "Karpukhin")], date="2020",
             fields={"extra": "tex.note: x\nCitation Key: karpukhin2020dense"}),
        Item("BBTKEY01", "Retrieval-augmented generation", creators=[("Patrick", "Lewis")], date="2020"),
        Item("GEN00001", "The retrieval of knowledge", creators=[("Jörg", "Ströhle")], date="2021", date_added="2023-01-01 00:00:00"),
        Item("GEN00002", "Retrieval, again", creators=[("Jörg", "Ströhle")], date="2021", date_added="2023-02-01 00:00:00"),
        Item("GEN00003", "On retrieval", creators=[Creator("World Health Organization", single_field=True)],
             date="2019"),
        Item("BADKEY01", "A key with a space", creators=[("Ada", "Lovelace")], date="1843",
             fields={"citationKey": "not a key"}),
    ], groups=[Group(4242, "Lab", items=[
        Item("BBTKEY01", "Same key, other library", creators=[("Tom", "Hart")], date="2018"),
    ])])
    w.write(tmp_path, lib)
    ids = item_ids(tmp_path)
    # Better BibTeX keeps its keys by itemID, key and libraryID: My Library's and the group's.
    write_bbt(tmp_path, [(ids["BBTKEY01"][0], "BBTKEY01", 1, "lewis2020rag", 0),
                         (ids["NATIVE01"][0], "NATIVE01", 1, "bbtignored", 1)])
    conn = index(tmp_path)
    keys = keys_of(conn)
    assert keys["NATIVE01"] == ("vaswani2017attention", "native")
    assert keys["EXTRA001"] == ("karpukhin2020dense", "extra")
    assert keys["BBTKEY01"] == ("lewis2020rag", "bbt")
    assert keys["groups/4242/BBTKEY01"] == ("hart2018same", "generated")  # Better BibTeX's row is My Library's
    assert keys["GEN00001"] == ("strohle2021retrieval", "generated")  # folded to ASCII, "The" skipped
    assert keys["GEN00002"] == ("strohle2021retrievala", "generated")  # added later: the next letter
    assert keys["GEN00003"] == ("worldhealthorganization2019retrieval", "generated")
    assert keys["BADKEY01"] == ("lovelace1843key", "generated")  # "not a key" cannot be a BibTeX key
    # A search hit carries its item's key (the answer's sources show it).
    hit = conn.execute("SELECT citation_key FROM items WHERE item_key = 'GEN00002'").fetchone()
    assert hit == ("strohle2021retrievala",)
    conn.close()


def test_generated_keys_are_stable_across_refreshes_and_rebuilds(tmp_path: Path) -> None:
    lib = Library(items=[
        Item("OLDPAPER", "Retrieval methods", creators=[("Ana", "Silva")], date="2020", date_added="2023-01-01 00:00:00"),
        Item("NEWPAPER", "Retrieval models", creators=[("Ana", "Silva")], date="2020", date_added="2024-01-01 00:00:00"),
    ])
    w.write(tmp_path, lib)
    before = keys_of(index(tmp_path))
    assert before["OLDPAPER"][0] == "silva2020retrieval" and before["NEWPAPER"][0] == "silva2020retrievala"
    # The older paper is edited (its title word changes): it takes a new key; the other keeps its own.
    touch_items(tmp_path / "zotero.sqlite", ["OLDPAPER"], title_suffix="")
    conn = sqlite3.connect(tmp_path / "zotero.sqlite")
    conn.execute("UPDATE itemDataValues SET value = 'Ranking methods' WHERE value = 'Retrieval methods'")
    conn.commit()
    conn.close()
    after = keys_of(index(tmp_path))
    assert after["NEWPAPER"] == before["NEWPAPER"]
    assert after["OLDPAPER"][0] == "silva2020ranking"
    # A rebuilt index (a new schema, a corrupt file) gives the same keys.
    remove_index(tmp_path / "zocrates-data" / INDEX_NAME)
    assert keys_of(index(tmp_path)) == {"OLDPAPER": ("silva2020ranking", "generated"), "NEWPAPER": ("silva2020retrievala", "generated")}


def test_a_changed_better_bibtex_database_is_read_again(tmp_path: Path) -> None:
    w.write(tmp_path, Library(items=[Item("BBTKEY01", "Retrieval", creators=[("Patrick", "Lewis")], date="2020")]))
    conn = index(tmp_path)
    assert keys_of(conn)["BBTKEY01"] == ("lewis2020retrieval", "generated")
    conn.close()
    write_bbt(tmp_path, [(item_ids(tmp_path)["BBTKEY01"][0], "BBTKEY01", 1, "LewisRAG2020", 1)])
    assert keys_of(index(tmp_path))["BBTKEY01"] == ("LewisRAG2020", "bbt")  # no item changed: the file did


def every_type_library() -> tuple[Library, dict[str, str]]:
    """One item of every regular item type with every field of its type filled and one creator of
    each of its creator types; item key -> type."""
    items = []
    types = {}
    for n, (item_type, fields) in enumerate(t for t in schema.TYPE_FIELDS.items() if t[0] not in NON_REGULAR):
        key = f"TYPE{n:04d}"
        types[key] = item_type
        values: dict[str, str] = {}
        for f in fields:
            base = schema.BASE_OF.get((item_type, f), f)
            if base in ("title", "date") or f == "citationKey":
                continue
            values[f] = "2024-05-01 10:00:00" if f == "accessDate" else "2001-02-03" if base in ("filingDate", "originalDate") \
                else f"{f} Ünïcode & 50% {{x}}"
        creators = [Creator(f"Müller-{ct}", "Jörg", ct) for ct in schema.TYPE_CREATOR_TYPES[item_type]]
        items.append(Item(key, f"{item_type}: {TRICKY_TITLE}", item_type=item_type, creators=creators,
                          date="March 2019", fields=values))
    return Library(items=items), types


def test_every_item_type_exports_to_bibtex_biblatex_and_valid_csl_json(tmp_path: Path) -> None:
    library, types = every_type_library()
    w.write(tmp_path, library)
    conn = index(tmp_path)
    refs = [("user", k) for k in types]
    items, missing = load(conn, refs)
    assert len(items) == len(types) == 37 and not missing

    csl = json.loads(render(items, "csl-json").text)
    schema = json.loads((HERE / "csl-data.json").read_text())
    jsonschema.validate(csl, schema)
    by_key = {c["citation-key"]: c for c in csl}
    assert len(by_key) == 37  # every key unique
    journal = next(c for c in csl if c["type"] == "article-journal")
    assert journal["issued"] == {"date-parts": [[2019, 3]]} and journal["accessed"] == {"date-parts": [[2024, 5, 1]]}
    assert journal["container-title"].startswith("publicationTitle") and journal["author"][0] == {"family": "Müller-author", "given": "Jörg"}
    case = next(c for c in csl if c["type"] == "legal_case")
    assert case["authority"].startswith("court") and case["container-title"].startswith("reporter")  # base-mapped and own fields
    film = next(c for c in csl if c["type"] == "motion_picture" and c["title"].startswith("film"))
    assert film["author"][0]["family"] == "Müller-director"  # the type's primary creator is its author

    for fmt in ("bibtex", "biblatex"):
        text = render(items, fmt).text
        parsed = bibtexparser.parse_string(text)
        assert not parsed.failed_blocks, [b.raw[:200] for b in parsed.failed_blocks]
        entries = {e.key: e for e in parsed.entries}
        assert set(entries) == set(by_key)
        for e in entries.values():
            title = e.fields_dict["title"].value
            # Every special character escaped, none left bare; non-ASCII kept as it is.
            assert "\\{braces\\} \\& 100\\% of \\$x\\_1\\$ in \\#{RAG} \\textasciitilde{} \\textasciicircum{}{BERT}" \
                   "\\textbackslash{} models" in title, title
        article = next(e for e in parsed.entries if types[_item_key(conn, e.key)] == "journalArticle")
        assert article.entry_type == "article"
        assert article.fields_dict["author"].value == "Müller-author, Jörg"
        assert article.fields_dict["journal" if fmt == "bibtex" else "journaltitle"].value \
            == "{publicationTitle} Ünïcode \\& 50\\% \\{x\\}"  # an inner capital: braced against lowercasing
        assert article.fields_dict["pages"].value.startswith("pages")
        if fmt == "bibtex":
            assert article.fields_dict["year"].value == "2019" and article.fields_dict["month"].value == "mar"
        else:
            assert article.fields_dict["date"].value == "2019-03" and article.fields_dict["urldate"].value == "2024-05-01"
    conn.close()


def _item_key(conn: sqlite3.Connection, citation_key: str) -> str:
    return str(conn.execute("SELECT item_key FROM items WHERE citation_key = ?", (citation_key,)).fetchone()[0])


def test_institutions_stay_one_name_and_page_ranges_use_en_dashes(tmp_path: Path) -> None:
    w.write(tmp_path, Library(items=[Item("INSTITUT", "Global report", creators=[
        Creator("World Health Organization and Partners", single_field=True), ("Ana", "Silva")],
        date="2020", fields={"pages": "12-34", "publicationTitle": "The Lancet"})]))
    items, _ = load(index(tmp_path), [("user", "INSTITUT")])
    entry = bibtexparser.parse_string(render(items, "bibtex").text).entries[0]
    assert entry.fields_dict["author"].value == "{World Health Organization and Partners} and Silva, Ana"
    assert entry.fields_dict["pages"].value == "12--34"


def test_text_in_two_installed_styles_and_apa_by_default(tmp_path: Path) -> None:
    import citeproc

    w.write(tmp_path, Library(items=[
        Item("LEWIS202", "Retrieval-augmented generation for knowledge-intensive NLP tasks",
             creators=[("Patrick", "Lewis"), ("Ethan", "Perez")], date="2020",
             fields={"publicationTitle": "Advances in Neural Information Processing Systems", "volume": "33",
                     "pages": "9459-9474"}),
    ]))
    styles = tmp_path / "styles"
    styles.mkdir()
    # A style Zotero installed (citeproc-py ships this one; Zotero keeps styles as <id>.csl files).
    shutil.copy(Path(citeproc.__file__).parent / "data" / "styles" / "harvard-cite-them-right.csl", styles)
    items, _ = load(index(tmp_path), [("user", "LEWIS202")])
    apa = render(items, "text", data_dir=tmp_path)
    assert apa.style == "apa"
    assert apa.text == ("Lewis, P., & Perez, E. (2020). Retrieval-augmented generation for knowledge-intensive NLP tasks. "
                        "Advances in Neural Information Processing Systems, 33, 9459–9474.\n")
    harvard = render(items, "text", data_dir=tmp_path, style="cite them right 12th edition (author-date/harvard)")
    assert harvard.style == "harvard-cite-them-right"
    assert harvard.text.startswith("Lewis, P. and Perez, E. (2020)") and harvard.text != apa.text
    assert render(items, "text", data_dir=tmp_path, style="harvard-cite-them-right.csl").text == harvard.text
    with pytest.raises(InvalidInput, match="no CSL style called 'chicago'; installed: harvard-cite-them-right, apa"):
        find_style(tmp_path, "chicago")


def test_a_damaged_style_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "styles").mkdir()
    (tmp_path / "styles" / "broken.csl").write_text("<style><info><title>Broken</title></info>")
    with pytest.raises(InvalidInput, match="the style broken cannot be read"):
        render([], "text", data_dir=tmp_path, style="broken")


def test_items_gone_from_the_index_are_reported_missing(tmp_path: Path) -> None:
    w.write(tmp_path, Library(items=[Item("PRESENT1", "Here", date="2020")]))
    items, missing = load(index(tmp_path), [("user", "PRESENT1"), ("user", "GONE0000"), ("groups/7", "PRESENT1")])
    done = render(items, "bibtex", missing=missing)
    assert done.count == 1 and done.missing == ("GONE0000", "PRESENT1")
