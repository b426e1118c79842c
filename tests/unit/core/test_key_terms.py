"""A long library query is searched by its most distinctive words (core/catalogue.py `key_terms`):
the index matches on at most QUERY_KEY_TERMS of them, which would otherwise be the first words of
a pasted abstract, its least telling ones."""

from __future__ import annotations

from zocratesd.core.catalogue import key_terms
from zocratesd.library.retrieval import tokens
from zocratesd.limits import QUERY_KEY_TERMS

# A pasted abstract: it opens with generic words; its subject comes later and repeats.
ABSTRACT = (
    "Background: many previous studies reported several general observations across different settings, "
    "cohorts, populations, regions, periods, designs, outcomes, measures, analyses, models, waves, sites and samples. "
    "Methods: we measured ferroptosis in glioblastoma cells lacking the xCT antiporter. Results: ferroptosis "
    "rose sharply when xCT was lost; glioblastoma cells without xCT died by ferroptosis within hours, and "
    "restoring xCT in glioblastoma rescued them. Conclusion: xCT guards glioblastoma against ferroptosis."
)


def test_a_short_query_is_searched_as_it_is() -> None:
    question = "What does mTORC2 do to the cystine-glutamate antiporter xCT in glioblastoma?"
    assert key_terms(question) == question


def test_a_long_query_keeps_its_subject_within_the_term_budget() -> None:
    assert len(set(tokens(ABSTRACT))) > QUERY_KEY_TERMS
    # What the index would match on unreduced: the opening's generic words, none of the subject.
    assert not {"ferroptosis", "glioblastoma", "xct"} & set(list(dict.fromkeys(tokens(ABSTRACT)))[:QUERY_KEY_TERMS])
    kept = key_terms(ABSTRACT).split()
    assert len(kept) == len(set(kept)) <= QUERY_KEY_TERMS
    assert {"ferroptosis", "glioblastoma", "xct", "antiporter"} <= set(kept)
    assert "were" not in kept and "many" in tokens(ABSTRACT)
    # In the order they first appear, so a phrase stays readable in the result's `query`.
    assert kept.index("ferroptosis") < kept.index("glioblastoma") < kept.index("antiporter")
