"""Data: the canonical schema, local files, the papers' Hub corpora, the offline Bible corpus, XNLI, the sampler."""

from .bible import BibleCorpusConfig, build_bible_corpus
from .hub import CORPORA, load_corpus
from .local import iter_rows, load_local, read_multiway, read_sentences
from .processing import (
    FilterReport,
    both_directions,
    filter_pairs,
    hold_out_directions,
    monolingual_texts,
    multiway_pairs,
)
from .sampler import TemperatureSampler
from .schema import CANONICAL_COLUMNS, canonical_dataset
from .xnli import XNLI_LABELS, XNLI_LANGUAGES, load_xnli

__all__ = [
    "CANONICAL_COLUMNS",
    "CORPORA",
    "XNLI_LABELS",
    "XNLI_LANGUAGES",
    "BibleCorpusConfig",
    "FilterReport",
    "TemperatureSampler",
    "both_directions",
    "build_bible_corpus",
    "canonical_dataset",
    "filter_pairs",
    "hold_out_directions",
    "iter_rows",
    "load_corpus",
    "load_local",
    "load_xnli",
    "monolingual_texts",
    "multiway_pairs",
    "read_multiway",
    "read_sentences",
]
