"""Batched translation with per-example directions."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from tqdm.auto import tqdm

from ..pipelines import group_by_target


def translate(
    model: Any,
    tokenizer: Any,
    texts: Sequence[str],
    src_lang: str | Sequence[str],
    tgt_lang: str | Sequence[str],
    batch_size: int = 32,
    num_beams: int = 4,
    max_new_tokens: int = 256,
    max_source_length: int | None = 256,
    show_progress: bool = True,
    **generate_kwargs: Any,
) -> list[str]:
    """Translate `texts`; `src_lang` / `tgt_lang` are a code or one per text (directions may mix).

    Each batch holds one target language and texts of similar length, and outputs come back in input
    order. One target language per batch matters for speed: a decoding step of a language-specific
    module reads the weights of every language present in the batch (LAA's matrices, CLL's LSLs,
    adapters), and with one language LAA folds its matrices into the attention projections.
    """
    texts = list(texts)
    if not texts:
        return []
    n = len(texts)
    src = [src_lang] * n if isinstance(src_lang, str) else list(src_lang)
    tgt = [tgt_lang] * n if isinstance(tgt_lang, str) else list(tgt_lang)
    if len(src) != n or len(tgt) != n:
        raise ValueError(f"Got {n} texts but {len(src)} source and {len(tgt)} target language codes.")
    tokenizer.check_model(model)
    batches = [
        group[start : start + batch_size]
        for group in group_by_target(tgt, [len(t) for t in texts])
        for start in range(0, len(group), batch_size)
    ]
    outputs: list[str] = [""] * n
    device = next(model.parameters()).device
    model.eval()
    with torch.no_grad(), tqdm(total=n, desc="translating", unit="sent", disable=not show_progress) as bar:
        for chunk in batches:
            batch = tokenizer(
                [texts[i] for i in chunk],
                src_lang=[src[i] for i in chunk],
                tgt_lang=[tgt[i] for i in chunk],
                truncation=max_source_length is not None,
                max_length=max_source_length,
                return_tensors="pt",
            ).to(device)
            generated = model.generate(**batch, num_beams=num_beams, max_new_tokens=max_new_tokens, **generate_kwargs)
            for i, text in zip(chunk, tokenizer.batch_decode(generated, skip_special_tokens=True), strict=True):
                outputs[i] = text.strip()
            bar.update(len(chunk))
    return outputs


__all__ = ["translate"]
