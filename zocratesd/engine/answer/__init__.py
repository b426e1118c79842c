"""The offline answerer: extractive answers a researcher can trust without a model.

- segment.py: sentences of scientific prose (abbreviations, initials, decimals, references);
- question.py: a question's parts, terms and anchors; comparisons;
- evidence.py: which passages answer a part (measured thresholds), and what to quote;
- sources.py: citation numbers per item and the `# Cited Sources` list;
- compose.py: the answer, part by part, or the real reason nothing was found;
- causes.py: the facts behind "found nothing", gathered with the search.
The compaction summariser (compaction/summarise.py) cuts claims with segment.py too.
"""

from zocratesd.engine.answer.compose import compose_answer, nothing_found
from zocratesd.engine.answer.segment import first_sentence, sentences, split_sentences

__all__ = ["compose_answer", "first_sentence", "nothing_found", "sentences", "split_sentences"]
