"""Verified multi-hop questions made from the offline corpus (Perplexity's post: the data stage).

A chain starts at a seed passage A, follows a title match to an entity B that has its own
passage (and sometimes on to C), and ends at an atomic fact stated in the last passage. The
question names every entity after A only by its description, so the answer is reached by
searching A, reading which entity it names, and searching again. Each question must pass the
checks of ``verify`` (answer only in the last passage, names hidden, one raw search does not
suffice, no overlap with validation/test, the solvers' verdict); ``build.prepare_synthetic``
writes the survivors as the ``synthetic`` split: ``helpers.data.load_examples("synthetic")``.

Derived from Wikipedia text: CC BY-SA.
"""

from helpers.multihop.build import DATA_SOURCE, SPLIT, generate_candidates, load_corpus, prepare_synthetic
from helpers.multihop.chains import Corpus, Passage
from helpers.multihop.mix import batch_with_share
from helpers.multihop.verify import CHECKS

__all__ = ["CHECKS", "DATA_SOURCE", "SPLIT", "Corpus", "Passage", "batch_with_share", "generate_candidates",
           "load_corpus", "prepare_synthetic"]
