"""XNLI (Conneau et al. 2018): the cross-lingual classification benchmark of the XLP paper (Table 1).

Premise/hypothesis pairs labelled entailment (0), neutral (1) or contradiction (2) in 15 languages.
On the Hub (`facebook/xnli`) each language is a config with `train` (MultiNLI's English training
set, machine-translated for the other languages: the translate-train data), `validation` (2,490
pairs) and `test` (5,010 pairs). The paper's two settings:

* cross-lingual transfer: fine-tune on the English training set, evaluate on every language's test set;
* translate-train: fine-tune and evaluate on each language's own data.

`load_xnli` calls `datasets.load_dataset("facebook/xnli", lang, split=...)`; with `data_dir` the
same code reads a local mirror of the Hub's Parquet export laid out as
`<data_dir>/<lang>/<split>-*.parquet` (or `.jsonl` / `.csv` files with the same columns).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from datasets import Dataset, concatenate_datasets, load_dataset

from .hub import load_from_hub

XNLI_REPO = "facebook/xnli"
XNLI_LANGUAGES = ("en", "fr", "es", "de", "el", "bg", "ru", "tr", "ar", "vi", "th", "zh", "hi", "sw", "ur")
XNLI_LABELS = ("entailment", "neutral", "contradiction")
XNLI_SPLITS = ("train", "validation", "test")
XNLI_COLUMNS = ("premise", "hypothesis", "label")
_BUILDERS = {".parquet": "parquet", ".jsonl": "json", ".json": "json", ".csv": "csv"}


def _local_files(data_dir: Path, lang: str, split: str) -> tuple[str, list[str]]:
    folder = data_dir / lang
    files = sorted(p for p in folder.glob(f"{split}*") if p.suffix in _BUILDERS)
    if not files:
        raise FileNotFoundError(
            f"No XNLI {split} files for {lang!r} in {folder}: expected {folder}/{split}-*.parquet "
            "(the Hub's Parquet export) or .jsonl / .csv files with the columns premise, hypothesis, label."
        )
    builders = {_BUILDERS[p.suffix] for p in files}
    if len(builders) > 1:
        raise ValueError(f"{folder} mixes formats for {split} ({[p.name for p in files]}); keep one format.")
    return builders.pop(), [str(p) for p in files]


def _check(dataset: Dataset, where: str) -> None:
    missing = [c for c in XNLI_COLUMNS if c not in dataset.column_names]
    if missing:
        raise ValueError(f"{where}: missing columns {missing}; XNLI rows have {list(XNLI_COLUMNS)}.")
    for i, (label, premise, hypothesis) in enumerate(
        zip(dataset["label"], dataset["premise"], dataset["hypothesis"], strict=True)
    ):
        if label not in range(len(XNLI_LABELS)):
            raise ValueError(f"{where}, row {i}: label {label!r} is not one of 0, 1, 2 ({', '.join(XNLI_LABELS)}).")
        if not isinstance(premise, str) or not isinstance(hypothesis, str):
            raise ValueError(f"{where}, row {i}: premise and hypothesis must be strings.")


def load_xnli(
    languages: str | Sequence[str],
    split: str,
    data_dir: str | Path | None = None,
    max_examples: int | None = None,
    **load_kwargs: Any,
) -> Dataset:
    """XNLI rows `{"premise", "hypothesis", "label", "lang"}` for `languages` (a code or a list).

    Args:
        split: `train`, `validation` or `test`.
        data_dir: a local mirror `<data_dir>/<lang>/<split>-*.parquet` instead of the Hub.
        max_examples: the first N rows of each language (for quick runs); all rows by default.
    """
    languages = [languages] if isinstance(languages, str) else list(languages)
    unknown = [code for code in languages if code not in XNLI_LANGUAGES]
    if unknown:
        raise ValueError(f"XNLI has no languages {unknown}; its languages are {list(XNLI_LANGUAGES)}.")
    if split not in XNLI_SPLITS:
        raise ValueError(f"XNLI has the splits {list(XNLI_SPLITS)}, not {split!r}.")
    parts = []
    for code in languages:
        if data_dir is None:
            where = f"{XNLI_REPO} ({code}) split {split}"
            raw = load_from_hub(XNLI_REPO, code, split, **load_kwargs)
        else:
            builder, files = _local_files(Path(data_dir), code, split)
            where = f"{', '.join(files)}"
            raw = load_dataset(builder, data_files=files, split="train", **load_kwargs)
        if max_examples is not None:
            raw = raw.select(range(min(max_examples, len(raw))))
        _check(raw, where)
        raw = raw.select_columns(list(XNLI_COLUMNS))
        parts.append(raw.add_column("lang", [code] * len(raw)))
    return concatenate_datasets(parts)


__all__ = ["XNLI_LABELS", "XNLI_LANGUAGES", "XNLI_REPO", "load_xnli"]
