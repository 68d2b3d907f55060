"""Directions and filters over canonical data. Every filter counts what it removes.

* directions: both directions of English-centric pairs, every direction of multi-way records,
  holding out directions for zero-shot evaluation;
* filters (the papers' preprocessing): empty sides, too long (the papers drop pairs longer than
  100 subwords), too short, length ratio, exact duplicates, and train pairs whose source or target
  text appears in a valid/test set.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from datasets import Dataset

from .schema import canonical_dataset, split_direction


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


def subword_lengths(tokenizer: Any) -> Callable[[list[str]], list[int]]:
    """Lengths in subwords with a fast tokenizer (no special tokens)."""
    backend = tokenizer.backend_tokenizer

    def lengths(texts: list[str]) -> list[int]:
        return [len(e.ids) for e in backend.encode_batch(texts, add_special_tokens=False)]

    return lengths


def filter_pairs(
    dataset: Dataset | Iterable[dict[str, str]],
    tokenizer: Any | None = None,
    max_length: int | None = 100,
    min_length: int = 1,
    max_ratio: float | None = None,
    deduplicate: bool = True,
    exclude: Iterable[Dataset | Iterable[dict[str, str]]] = (),
) -> tuple[Dataset, FilterReport]:
    """Apply the papers' filters and return `(kept, report)`.

    Lengths are subwords when `tokenizer` is given, whitespace words otherwise. `exclude` are
    valid/test sets: a pair is removed when its source or its target text occurs there in the same
    language.
    """
    rows = list(dataset)
    report = FilterReport()
    measure = subword_lengths(tokenizer) if tokenizer is not None else _word_lengths
    src_len = measure([r["src"] for r in rows])
    tgt_len = measure([r["tgt"] for r in rows])
    held_out: dict[str, set[str]] = {}
    for split in exclude:
        for r in split:
            held_out.setdefault(r["src_lang"], set()).add(r["src"])
            held_out.setdefault(r["tgt_lang"], set()).add(r["tgt"])

    checks: list[tuple[str, Callable[[int, dict], bool]]] = [
        ("empty side", lambda i, r: not r["src"].strip() or not r["tgt"].strip()),
    ]
    if max_length is not None:
        checks.append((f"longer than {max_length}", lambda i, r: max(src_len[i], tgt_len[i]) > max_length))
    checks.append((f"shorter than {min_length}", lambda i, r: min(src_len[i], tgt_len[i]) < min_length))
    if max_ratio is not None:
        checks.append(
            (
                f"length ratio above {max_ratio}",
                lambda i, r: max(src_len[i], tgt_len[i]) > max_ratio * max(min(src_len[i], tgt_len[i]), 1),
            )
        )
    if held_out:
        checks.append(
            (
                "in valid/test",
                lambda i, r: (
                    r["src"] in held_out.get(r["src_lang"], ()) or r["tgt"] in held_out.get(r["tgt_lang"], ())
                ),
            )
        )
    seen: set[tuple[str, str, str, str]] = set()
    kept = []
    for reason, _ in checks:
        report.removed[reason] = 0
    if deduplicate:
        report.removed["duplicate"] = 0
    for i, row in enumerate(rows):
        failed = next((reason for reason, check in checks if check(i, row)), None)
        if failed is None and deduplicate:
            key = (row["src_lang"], row["tgt_lang"], row["src"], row["tgt"])
            failed = "duplicate" if key in seen else None
            seen.add(key)
        if failed is None:
            kept.append({k: row[k] for k in ("src_lang", "tgt_lang", "src", "tgt")})
        else:
            report.removed[failed] += 1
    report.kept = len(kept)
    return canonical_dataset(kept), report


__all__ = [
    "FilterReport",
    "both_directions",
    "filter_pairs",
    "hold_out_directions",
    "monolingual_texts",
    "multiway_pairs",
    "subword_lengths",
]
