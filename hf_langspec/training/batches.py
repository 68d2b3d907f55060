"""What the trainer reads of its training batches and set: ids checked on the host, and the languages and lengths
the sampler and the static shapes need, read from Arrow columns."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow.compute as pc
import torch


class CheckedBatches:
    """A data collator whose batches are checked on the host: token ids in `[0, vocab_size)` (labels may hold
    -100), language ids in `[0, num_languages)`; a ValueError names the field and the fix. The model checks the
    same in a CPU step; a GPU training step does not (`modeling.routing.sync_free`), so that it never waits to
    read ids back, and without this a wrong id would end the run with CUDA's device-side assert."""

    def __init__(self, collator: Any, vocab_size: int, num_languages: int):
        self.collator, self.vocab_size, self.num_languages = collator, vocab_size, num_languages

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        batch = self.collator(features)
        limits = {"input_ids": self.vocab_size, "decoder_input_ids": self.vocab_size, "labels": self.vocab_size,
                  "src_lang_ids": self.num_languages, "tgt_lang_ids": self.num_languages}  # fmt: skip
        for name, limit in limits.items():
            values = batch.get(name) if hasattr(batch, "get") else None
            if not isinstance(values, torch.Tensor) or values.device.type != "cpu" or not values.numel():
                continue
            if name == "labels":
                values = values[values != -100]
                if not values.numel():
                    continue
            low, high = int(values.min()), int(values.max())
            if low < 0 or high >= limit:
                bad = low if low < 0 else high
                what = "the vocabulary size" if limit == self.vocab_size else "len(config.languages)"
                raise ValueError(
                    f"{name} holds {bad}, outside [0, {limit}) ({what}): the data was made for another model; "
                    "tokenize it with the tokenizer saved with this model."
                )
        return batch


def sampling_columns(dataset: Any, with_lengths: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """`([N, 2] source and target language ids, [N] lengths or None)` of a training dataset, as arrays.

    Read from the Arrow columns of a `datasets.Dataset` (zero-copy; the length of an example is the longer of its
    source and labels, from the list offsets), never through Python lists: at OPUS-100's 110M examples those cost
    gigabytes and minutes. Any other dataset (a list of feature dicts) is read example by example.
    """
    if hasattr(dataset, "with_format"):
        table = dataset.with_format("arrow")
        # narrow as stored (int32): at 110M examples each byte per example is 110 MB per process
        directions = np.stack([table["src_lang_ids"].to_numpy(), table["tgt_lang_ids"].to_numpy()], axis=1)
        return directions, np.maximum(*example_lengths(dataset)) if with_lengths else None
    rows = list(dataset)
    directions = np.array([[int(r["src_lang_ids"]), int(r["tgt_lang_ids"])] for r in rows], dtype=np.int64)
    return directions, np.maximum(*example_lengths(rows)) if with_lengths else None


def example_lengths(dataset: Any) -> tuple[np.ndarray, np.ndarray]:
    """`([N] source lengths, [N] target lengths)` of a training dataset: from the Arrow list offsets of a
    `datasets.Dataset` (zero-copy), else example by example; a dataset without labels has target length 0."""
    if hasattr(dataset, "with_format"):
        table = dataset.with_format("arrow")
        names = [name for name in ("input_ids", "labels") if name in dataset.column_names]
        found = [pc.list_value_length(table[name]).to_numpy() for name in names]
        return found[0], found[1] if len(found) > 1 else np.zeros_like(found[0])
    if not hasattr(dataset, "__len__"):
        raise ValueError(
            "training.static_shapes 'auto' reads the training set's lengths, which a streamed dataset does not have; "
            "declare the buckets ([[src, tgt], ...]) or set static_shapes: off."
        )
    rows = list(dataset)
    source = np.array([len(r["input_ids"]) for r in rows], dtype=np.int64)
    target = np.array([len(r.get("labels", ())) for r in rows], dtype=np.int64)
    return source, target


__all__ = ["CheckedBatches", "example_lengths", "sampling_columns"]
