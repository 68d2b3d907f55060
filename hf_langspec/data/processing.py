"""Directions and filters over canonical data. Every filter counts what it removes.

* directions: both directions of English-centric pairs, every direction of multi-way records,
  holding out directions for zero-shot evaluation;
* filters (the papers' preprocessing): empty sides, too long (the papers drop pairs longer than
  100 subwords), too short, length ratio, exact duplicates, and train pairs whose source or target
  text appears in a valid/test set.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from datasets import Dataset

from ..tokenization.tokenization_langspec import encode_text
from .schema import CANONICAL_COLUMNS, canonical_dataset, split_direction
from .text import is_blank


@dataclass
class FilterReport:
    """How many examples each filter removed, in the order the filters ran."""

    kept: int = 0
    removed: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return self.kept + sum(self.removed.values())

    def table(self) -> str:
        lines = ["| step | examples |", "|---|---:|", f"| input | {self.total} |"]
        lines += [f"| removed: {reason} | {count} |" for reason, count in self.removed.items()]
        lines.append(f"| kept | {self.kept} |")
        return "\n".join(lines)


def both_directions(dataset: Dataset | Iterable[dict[str, str]]) -> Dataset:
    """Each pair in its own direction and reversed (English-centric corpora trained both ways)."""
    rows = list(dataset)
    reverse = [{"src_lang": r["tgt_lang"], "tgt_lang": r["src_lang"], "src": r["tgt"], "tgt": r["src"]} for r in rows]
    return canonical_dataset(rows + reverse)


def multiway_pairs(
    records: Iterable[dict[str, Any]], directions: Sequence[str | tuple[str, str]] | None = None
) -> Dataset:
    """Pairs from multi-way records `{"texts": {code: text}}`: every ordered pair, or the given directions.

    A record that lacks one side of a requested direction contributes nothing to that direction.
    """
    records = list(records)
    wanted = (
        None if directions is None else [split_direction(d) if isinstance(d, str) else tuple(d) for d in directions]
    )
    rows = []
    for record in records:
        texts = record["texts"]
        pairs = wanted if wanted is not None else [(s, t) for s in texts for t in texts if s != t]
        rows += [
            {"src_lang": s, "tgt_lang": t, "src": texts[s], "tgt": texts[t]}
            for s, t in pairs
            if s in texts and t in texts
        ]
    return canonical_dataset(rows)


def hold_out_directions(dataset: Dataset, directions: Iterable[str | tuple[str, str]]) -> tuple[Dataset, Dataset]:
    """Split off the given directions (for zero-shot evaluation): `(kept, held_out)`."""
    held = {split_direction(d) if isinstance(d, str) else tuple(d) for d in directions}
    mask = [(s, t) in held for s, t in zip(dataset["src_lang"], dataset["tgt_lang"], strict=True)]
    missing = held - {
        (s, t) for (s, t), m in zip(zip(dataset["src_lang"], dataset["tgt_lang"], strict=True), mask, strict=True) if m
    }
    if missing:
        raise ValueError(f"Directions {sorted('-'.join(d) for d in missing)} do not occur in the dataset.")
    keep = [i for i, m in enumerate(mask) if not m]
    out = [i for i, m in enumerate(mask) if m]
    return dataset.select(keep), dataset.select(out)


def per_direction(rows: Iterable[dict[str, str]], limit: int | None = None) -> dict[str, list[dict[str, str]]]:
    """Rows grouped by direction `"src-tgt"`, keeping the first `limit` of each (all when None)."""
    groups: dict[str, list[dict[str, str]]] = {}
    for row in rows:
        group = groups.setdefault(f"{row['src_lang']}-{row['tgt_lang']}", [])
        if limit is None or len(group) < limit:
            group.append(row)
    return groups


def monolingual_texts(rows: Iterable[dict[str, str]]) -> dict[str, list[str]]:
    """Each language's distinct sentences from either side of parallel rows, in first-seen order.

    Monolingual text for XLM-style MLM pre-training: a sentence in several directions counts once.
    """
    seen: dict[str, dict[str, None]] = {}
    for row in rows:
        for lang, text in ((row["src_lang"], row["src"]), (row["tgt_lang"], row["tgt"])):
            seen.setdefault(lang, {})[text] = None
    return {lang: list(texts) for lang, texts in seen.items()}


def _word_lengths(texts: list[str]) -> list[int]:
    return [len(t.split()) for t in texts]


def subword_lengths(tokenizer: Any, target: bool = False) -> Callable[[list[str]], list[int]]:
    """Lengths in subwords with a fast tokenizer (no special tokens); `target`: of target texts."""

    def lengths(texts: list[str]) -> list[int]:
        return [len(ids) for ids in encode_text(tokenizer, texts, target=target)]

    return lengths


def text_hashes(languages: Sequence[str], texts: Sequence[str]) -> list[int]:
    """A 64-bit hash of each `(language, text)`: the key that de-duplication and the exclusion of valid/test text
    compare instead of the strings (blake2b, the same in every process and on every machine; a language code
    cannot hold the NUL that separates it from the text)."""
    return [
        int.from_bytes(hashlib.blake2b(f"{lang}\0{text}".encode(), digest_size=8).digest(), "little")
        for lang, text in zip(languages, texts, strict=True)
    ]


def hash_columns(batch: dict[str, list]) -> dict[str, np.ndarray]:
    """`src_hash` / `tgt_hash` of a batch of canonical rows (a batched `map` function; uint64 arrays, which Arrow
    stores as they are, where Python ints above 2**63 would not fit its inferred int64)."""
    return {
        "src_hash": np.array(text_hashes(batch["src_lang"], batch["src"]), dtype=np.uint64),
        "tgt_hash": np.array(text_hashes(batch["tgt_lang"], batch["tgt"]), dtype=np.uint64),
    }


def blank_sides(sources: Sequence[str], targets: Sequence[str]) -> list[bool]:
    return [is_blank(s) or is_blank(t) for s, t in zip(sources, targets, strict=True)]


@dataclass
class PairColumns:
    """What the filters read of every example, as arrays (one entry per example, in corpus order)."""

    src_len: np.ndarray
    tgt_len: np.ndarray
    blank: np.ndarray
    src_hash: np.ndarray
    tgt_hash: np.ndarray


def select_pairs(
    columns: PairColumns,
    max_length: int | None = 100,
    min_length: int = 1,
    max_ratio: float | None = None,
    deduplicate: bool = True,
    excluded_hashes: np.ndarray | None = None,
) -> tuple[np.ndarray, FilterReport]:
    """The papers' filters over columns: `(indices of the kept examples, report)`.

    Each removed example is counted under the first check it fails, in this order: empty side, longer than
    `max_length`, shorter than `min_length`, length ratio above `max_ratio`, source or target text in a
    valid/test set (`excluded_hashes`: `text_hashes` of their sides), and last a duplicate of an earlier example
    that passed every check (same languages and texts: the pair of side hashes, 128 bits).
    """
    longer = np.maximum(columns.src_len, columns.tgt_len)
    shorter = np.minimum(columns.src_len, columns.tgt_len)
    checks: list[tuple[str, np.ndarray]] = [("empty side", columns.blank)]
    if max_length is not None:
        checks.append((f"longer than {max_length}", longer > max_length))
    checks.append((f"shorter than {min_length}", shorter < min_length))
    if max_ratio is not None:
        checks.append((f"length ratio above {max_ratio}", longer > max_ratio * np.maximum(shorter, 1)))
    if excluded_hashes is not None and len(excluded_hashes):
        held = np.isin(columns.src_hash, excluded_hashes) | np.isin(columns.tgt_hash, excluded_hashes)
        checks.append(("in valid/test", held))
    report = FilterReport()
    alive = np.ones(len(longer), dtype=bool)
    for reason, failed in checks:
        removed = alive & failed
        report.removed[reason] = int(removed.sum())
        alive &= ~removed
    kept = np.flatnonzero(alive)
    if deduplicate:
        keys = np.stack([columns.src_hash[kept], columns.tgt_hash[kept]], axis=1).astype(np.uint64)
        _, first = np.unique(np.ascontiguousarray(keys).view(np.dtype((np.void, 16))).ravel(), return_index=True)
        report.removed["duplicate"] = len(kept) - len(first)
        kept = kept[np.sort(first)]
    report.kept = len(kept)
    return kept, report


def filter_pairs(
    dataset: Dataset | Iterable[dict[str, str]],
    tokenizer: Any | None = None,
    max_length: int | None = 100,
    min_length: int = 1,
    max_ratio: float | None = None,
    deduplicate: bool = True,
    exclude: Iterable[Dataset | Iterable[dict[str, str]]] = (),
) -> tuple[Dataset, FilterReport]:
    """Apply the papers' filters (`select_pairs`) and return `(kept, report)`.

    Lengths are subwords when `tokenizer` is given, whitespace words otherwise. `exclude` are
    valid/test sets: a pair is removed when its source or its target text occurs there in the same
    language. This is the in-memory form; a corpus on disk is filtered by `corpus_store.prepare_training_set`
    with the same `select_pairs`.
    """
    rows = (
        canonical_dataset(dataset)
        if not isinstance(dataset, Dataset)
        else dataset.select_columns(list(CANONICAL_COLUMNS))
    )
    measure = subword_lengths(tokenizer) if tokenizer is not None else _word_lengths
    measure_targets = subword_lengths(tokenizer, target=True) if tokenizer is not None else _word_lengths
    excluded = [h for split in exclude for h in _side_hashes(split)]
    columns = PairColumns(
        src_len=np.asarray(measure(rows["src"]), dtype=np.int64),
        tgt_len=np.asarray(measure_targets(rows["tgt"]), dtype=np.int64),
        blank=np.asarray(blank_sides(rows["src"], rows["tgt"]), dtype=bool),
        src_hash=np.asarray(text_hashes(rows["src_lang"], rows["src"]), dtype=np.uint64),
        tgt_hash=np.asarray(text_hashes(rows["tgt_lang"], rows["tgt"]), dtype=np.uint64),
    )
    kept, report = select_pairs(
        columns, max_length, min_length, max_ratio, deduplicate, np.asarray(excluded, dtype=np.uint64)
    )
    return rows.select(kept).flatten_indices(), report


def _side_hashes(split: Dataset | Iterable[dict[str, str]]) -> list[int]:
    rows = list(split)
    return text_hashes([r["src_lang"] for r in rows], [r["src"] for r in rows]) + text_hashes(
        [r["tgt_lang"] for r in rows], [r["tgt"] for r in rows]
    )


__all__ = [
    "FilterReport",
    "PairColumns",
    "both_directions",
    "filter_pairs",
    "hold_out_directions",
    "monolingual_texts",
    "multiway_pairs",
    "select_pairs",
    "subword_lengths",
    "text_hashes",
]
