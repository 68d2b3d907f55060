"""Checks that training data is what it claims to be, run before the tokenizer or the model sees it.

* language codes: lowercase ISO 639 (2-3 letters, optionally `_Script` / `_REGION`), source and target
  different (`en -> en` is not a translation pair), checked line by line by the local loaders;
* a language with a handful of examples in a large corpus is almost always a typo (`xx`, a stray code
  on one line) that would otherwise become a language of the model: refused, with its line;
* the counts per direction are reported before training;
* labels: a sample of each language's sentences is identified with lingua, restricted to the declared
  languages it supports; a language whose sample is mostly identified as another is reported with the
  share (swapped `src` / `tgt` labels passed silently before);
* held-out text: validation and test sentences that occur in the training data (a test set copied from the
  training file, or overlapping it) are counted by their hashes (`held_out_overlap`), and test directions the
  training data lacks are named (`untrained_test_directions`): scored as supervised they would not be.
"""

from __future__ import annotations

import logging
import random
import re
from collections import Counter
from collections.abc import Mapping, Sequence

import numpy as np
from datasets import Dataset

from .columns import HASH_COLUMNS, as_corpus, column, distinct_texts, first_occurrence, language_counts, texts_at
from .processing import text_hashes

logger = logging.getLogger(__name__)
LANGUAGE_CODE = re.compile(r"^[a-z]{2,3}(_[A-Za-z0-9]{2,8})*$")
STRAY_BELOW = 10  # examples: fewer than this in a corpus of STRAY_CORPUS or more is a stray code
STRAY_CORPUS = 1000
LABEL_SAMPLE = 50
LABEL_ROWS = 200_000  # the rows of a larger corpus the label check samples from (a language with fewer than about
# one example in 100,000 may go unchecked)
LABEL_WARNING_SHARE = 0.2


def check_code(code: str, where: str) -> None:
    """Refuse a language code that is not lowercase ISO 639 (`EN`, `en `, `english`)."""
    if not LANGUAGE_CODE.match(code):
        raise ValueError(
            f"{where}: {code!r} is not a language code; use ISO 639 in lowercase like 'en' or 'pt_BR' (no spaces)."
        )


def check_language_codes(codes: Mapping[str, str], where: str) -> None:
    """A renaming of language codes (`data.language_codes`, e.g. `{en: eng_Latn}`): codes on both sides, no two
    codes merged into one, no renamed code renamed again (which would make the result depend on the order)."""
    for old, new in codes.items():
        check_code(old, where)
        check_code(new, where)
    merged = sorted(new for new in set(codes.values()) if list(codes.values()).count(new) > 1)
    if merged:
        olds = sorted(old for old, new in codes.items() if new in merged)
        raise ValueError(f"{where}: {olds} are all renamed to {merged}; one code per language, or merge the data "
                         "before training.")  # fmt: skip
    chained = sorted(new for old, new in codes.items() if new in codes and new != old)
    if chained:
        raise ValueError(f"{where}: {chained} are both renamed and the new name of another code; rename each "
                         "language once.")  # fmt: skip


def counts_table(counts: Mapping[str, int]) -> str:
    """One line: the number of examples per direction, as printed before training."""
    total = sum(counts.values())
    parts = ", ".join(f"{d} {n:,}" for d, n in sorted(counts.items()))
    return f"{total:,} training examples in {len(counts)} directions: {parts}"


def check_stray_languages(corpus: Dataset | Sequence[Mapping[str, str]], where: str) -> None:
    """Refuse a language that occurs in only a few examples of a large corpus, naming where it first occurs.

    `corpus` is a corpus from `corpus_store.read_corpus` (counted over its columns) or a list of canonical rows.
    """
    corpus = as_corpus(corpus)
    if len(corpus) < STRAY_CORPUS:
        return
    seen = language_counts(corpus)
    stray = sorted(code for code, n in seen.items() if n < STRAY_BELOW)
    if stray:
        listing = ", ".join(
            f"{code!r} ({seen[code]} example(s), the first is example {first_occurrence(corpus, code) + 1})"
            for code in stray
        )
        raise ValueError(
            f"{where}: languages {listing} occur in fewer than {STRAY_BELOW} of {len(corpus):,} examples; a typo in "
            "the language fields? Fix or remove those lines."
        )


def language_label_disagreement(
    corpus: Dataset | Sequence[Mapping[str, str]], sample: int = LABEL_SAMPLE, seed: int = 0
) -> dict[str, tuple[float, str]]:
    """`{language: (share identified as another language, the most frequent other)}` on a sample per language.

    The sample is drawn from each language's distinct sentences (found by their hashes: only the sample is read
    from a corpus on disk), among `LABEL_ROWS` rows drawn uniformly from a larger corpus. Uses lingua restricted to
    the declared languages it supports (nothing when lingua is not installed or supports fewer than two of them).
    """
    try:
        from lingua import IsoCode639_1, Language, LanguageDetectorBuilder
    except ImportError:
        logger.info("Language labels not checked: lingua is not installed (pip install 'hf_langspec[eval]').")
        return {}
    corpus = as_corpus(corpus)
    if len(corpus) > LABEL_ROWS:  # a uniform subset: the work and memory stay those of a 200,000-row corpus
        corpus = corpus.select(sorted(random.Random(seed).sample(range(len(corpus)), LABEL_ROWS)))
    positions = distinct_texts(corpus) if len(corpus) else {}
    supported = {}
    for code in positions:
        try:
            supported[code] = Language.from_iso_code_639_1(getattr(IsoCode639_1, code.upper()))
        except (AttributeError, ValueError):
            continue
    if len(supported) < 2:
        return {}
    detector = LanguageDetectorBuilder.from_languages(*supported.values()).build()
    rng = random.Random(seed)
    found = {}
    for code in sorted(supported):
        candidates = positions[code]
        picked = texts_at(corpus, candidates[rng.sample(range(len(candidates)), min(sample, len(candidates)))])
        detected = [
            d.iso_code_639_1.name.lower() if d else None for d in detector.detect_languages_in_parallel_of(picked)
        ]
        others = Counter(d for d in detected if d != code)
        if picked:
            found[code] = (sum(others.values()) / len(picked), others.most_common(1)[0][0] if others else "")
    return found


def warn_about_labels(corpus: Dataset | Sequence[Mapping[str, str]]) -> list[str]:
    """Warn about each language whose sampled sentences are mostly identified as another; returns the warnings."""
    messages = []
    for code, (share, other) in language_label_disagreement(corpus).items():
        if share > LABEL_WARNING_SHARE:
            messages.append(
                f"{share:.0%} of the sampled training sentences labelled {code!r} look like {other!r} to the language "
                f"identifier: are src/tgt or the language fields swapped?"
            )
            logger.warning(messages[-1])
    return messages


def held_out_overlap(
    corpus: Dataset | Sequence[Mapping[str, str]], sets: Mapping[str, Sequence[Mapping[str, str]]]
) -> dict[str, int]:
    """For each held-out set (validation or test pairs), how many of its rows have their source sentence among the
    training corpus's sentences of that language (either side): found by the corpus's text hashes in one pass over
    its columns for all the sets together."""

    rows = [row for set_rows in sets.values() for row in set_rows]
    if not rows:
        return dict.fromkeys(sets, 0)
    corpus = as_corpus(corpus)
    wanted = np.asarray(text_hashes([r["src_lang"] for r in rows], [r["src"] for r in rows]), dtype=np.uint64)
    found = np.zeros(len(wanted), dtype=bool)
    for name in HASH_COLUMNS:
        for chunk in column(corpus, name).chunks:  # memory-mapped: a chunk at a time, never the whole column
            found |= np.isin(wanted, chunk.to_numpy(zero_copy_only=False))
    ends = np.cumsum([len(set_rows) for set_rows in sets.values()])
    return {name: int(part.sum()) for name, part in zip(sets, np.split(found, ends[:-1]), strict=True)}


def untrained_test_directions(sizes: Mapping[str, int], rows: Sequence[Mapping[str, str]]) -> list[str]:
    """The directions of `rows` that the training data (`sizes`: examples per direction) has no example of."""
    return sorted({f"{r['src_lang']}-{r['tgt_lang']}" for r in rows} - {d for d, n in sizes.items() if n})


def check_corpus(corpus: Dataset | Sequence[Mapping[str, str]], where: str) -> list[str]:
    """The content checks of a training corpus, the same at every door it comes in by (`train`, `data local`,
    `data hub`): no examples and stray languages are refused; the warnings about swapped language labels are
    returned (and logged) for the caller to print."""
    corpus = as_corpus(corpus)
    if not len(corpus):
        raise ValueError(f"{where} hold(s) no examples; check the paths, the directions and the file contents.")
    check_stray_languages(corpus, where)
    return warn_about_labels(corpus)


__all__ = [
    "check_code",
    "check_corpus",
    "check_stray_languages",
    "counts_table",
    "held_out_overlap",
    "untrained_test_directions",
    "warn_about_labels",
]
