"""Quotes a researcher can check: an answer's quotes and cited claims verified against the text of
the items they cite (verify.py), and a quote traced back to its item and page (find.py).

- text.py: an item's text by page, compared as folded words (whitespace, hyphenation at line
  ends, ligatures and quote marks aside);
- align.py: where a quote that differs in a few words sits in a page;
- sources.py: an item's text from the library index (or a passages file);
- markers.py: an answer's citation markers in each citation style, and the item each names;
- verify.py: an answer's citations checked, and what the answer must say about them;
- find.py: a sentence to the items and pages that have it.
"""
