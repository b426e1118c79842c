"""Search beyond the user's library: scholarly works from OpenAlex, arXiv and Crossref, public APIs
that need no key (`online.mode`: off / ask / on; only the search terms leave the machine).

- providers.py: each API's request and the reading of its answer, sans-IO;
- works.py: `OnlineWork`, and the merging of several providers' answers;
- service.py: `OnlineSearch`, one bounded, polite search of all three at once;
- cache.py: the answers of the last day (`online_cache.db`).
"""
