"""Does a translation model use its source? Teacher-forced loss with the true sources and with shuffled ones.

A model whose encoder has collapsed (every input encoded nearly alike) decodes a language model of the
target language: its outputs repeat and its loss on a reference does not change when the reference is
paired with another sentence's source. This was how sCLM failed in the bible11 comparison
(docs/DECISIONS.md, "CLM"), behind a BLEU score that only looked low. `source_use` measures it directly:
the token-level cross-entropy (no label smoothing) of the references given their own sources, and given
the source of the next sentence in the list (a fixed rotation, so the number is reproducible), and the
difference, `gain`: clearly positive for a model that translates, about 0 for one that ignores its input.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F


def source_use(
    model: Any,
    tokenizer: Any,
    sources: Sequence[str],
    references: Sequence[str],
    src_lang: str,
    tgt_lang: str,
    batch_size: int = 32,
) -> dict[str, float]:
    """`{"loss", "loss_shuffled_sources", "gain", "sentences"}` over one direction's sentence pairs.

    `sources` should be different sentences (a test set is): the shuffle pairs reference i with source i + 1.
    """
    sources, references = list(sources), list(references)
    if len(sources) != len(references):
        raise ValueError(
            f"Got {len(sources)} sources but {len(references)} references; pass one reference per source."
        )
    if len(sources) < 2:
        raise ValueError(f"source_use needs at least 2 sentence pairs to shuffle, got {len(sources)}.")
    if len(set(sources)) < len(sources):
        raise ValueError("The sources repeat; pass different sentences (a shuffled copy of a source is no test).")
    matched = _loss(model, tokenizer, sources, references, src_lang, tgt_lang, batch_size)
    shuffled = _loss(model, tokenizer, sources[1:] + sources[:1], references, src_lang, tgt_lang, batch_size)
    return {"loss": matched, "loss_shuffled_sources": shuffled, "gain": shuffled - matched, "sentences": len(sources)}


def _loss(model, tokenizer, sources, references, src_lang, tgt_lang, batch_size: int) -> float:
    """Mean cross-entropy per reference token (padding excluded), over all pairs."""
    total, tokens = 0.0, 0
    device = next(model.parameters()).device
    model.eval()
    with torch.no_grad():
        for start in range(0, len(sources), batch_size):
            batch = tokenizer(
                sources[start : start + batch_size],
                src_lang=src_lang,
                tgt_lang=tgt_lang,
                text_target=references[start : start + batch_size],
                padding=True,
                return_tensors="pt",
            ).to(device)
            labels = batch["labels"].masked_fill(batch["labels"] == tokenizer.pad_token_id, -100)
            logits = model(**{**batch, "labels": labels}).logits
            total += F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), reduction="sum").item()
            tokens += int(labels.ne(-100).sum())
    return total / tokens


__all__ = ["source_use"]
