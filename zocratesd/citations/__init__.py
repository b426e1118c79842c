"""Citations a researcher writes down: items' citation keys (keys.py), the cited sources of an
answer or a session (export.py), and their bibliography as BibTeX, BibLaTeX, CSL-JSON or text in
a CSL style (bibliography.py)."""
