"""Batched translation with per-example directions."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence
from typing import Any

import torch
from tqdm.auto import tqdm

from ..data.schema import check_direction
from ..data.text import is_blank
from ..modeling.configuration_langspec import source_tag_side
from ..pipelines import group_by_target
from ..tokenization.tokenization_langspec import encode_text

logger = logging.getLogger(__name__)
UNKNOWN_WARNING_RATE = 0.01  # warn when more than 1% of the input's subwords are <unk>: the vocabulary lacks a script


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
    one_batch: bool = False,
    **generate_kwargs: Any,
) -> list[str]:
    """Translate `texts`; `src_lang` / `tgt_lang` are a code or one per text (directions may mix).

    Each batch holds one target language and texts of similar length, and outputs come back in input
    order (`one_batch=True`: the texts in order, `batch_size` at a time, whatever their targets: the server's
    mixed-direction batches). One target language per batch matters for speed: a decoding step of a language-specific
    module reads the weights of every language present in the batch (LAA's matrices, CLL's LSLs,
    adapters), and with one language LAA folds its matrices into the attention projections.

    Nothing is dropped or invented without a word: a blank text comes back blank (no translation is
    invented for it); texts longer than `max_source_length` subwords are truncated with a warning that
    counts them (`None`: no limit); a warning reports the share of `<unk>` subwords when it exceeds 1%.
    """
    if isinstance(texts, str):  # a lone string was translated character by character
        raise ValueError("texts is one string; give a list of texts (e.g. [text]).")
    texts = list(texts)
    if not texts:
        return []
    _check_settings(tokenizer, num_beams, batch_size, max_new_tokens, max_source_length)
    src, tgt = _check_inputs(model, tokenizer, texts, src_lang, tgt_lang)
    n = len(texts)
    todo = [i for i, text in enumerate(texts) if not is_blank(text)]  # blank (or invisible-only) texts stay blank
    _warn_about_inputs(tokenizer, [texts[i] for i in todo], max_source_length)
    groups = (
        [list(range(len(todo)))]
        if one_batch
        else group_by_target([tgt[i] for i in todo], [len(texts[i]) for i in todo])
    )
    batches = [
        [todo[j] for j in group[start : start + batch_size]]
        for group in groups
        for start in range(0, len(group), batch_size)
    ]
    outputs: list[str] = [""] * n
    device = next(model.parameters()).device
    model.eval()
    with torch.no_grad(), tqdm(total=len(todo), desc="translating", unit="sent", disable=not show_progress) as bar:
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


def _check_settings(
    tokenizer: Any, num_beams: int, batch_size: int, max_new_tokens: int, max_source_length: int | None
) -> None:
    if num_beams < 1 or batch_size < 1 or max_new_tokens < 1:
        raise ValueError(
            f"num_beams={num_beams}, batch_size={batch_size} and max_new_tokens={max_new_tokens} must all be at least 1."
        )
    specials = _special_tokens(tokenizer)
    if max_source_length is not None and max_source_length <= specials:
        raise ValueError(
            f"max_source_length={max_source_length} leaves no room for a subword beside the {specials} special "
            f"token(s) of every input; give at least {specials + 1}, or None (0 on the command line) for no limit."
        )


def _check_inputs(
    model: Any, tokenizer: Any, texts: list[Any], src_lang: str | Sequence[str], tgt_lang: str | Sequence[str]
) -> tuple[list[str], list[str]]:
    """Every text a string, one code (or one per text) on each side, each known and each direction servable:
    the source and target code of every text, or a ValueError before any work."""
    wrong = next((i for i, text in enumerate(texts) if not isinstance(text, str)), None)
    if wrong is not None:
        raise ValueError(
            f"texts[{wrong}] is {type(texts[wrong]).__name__} {texts[wrong]!r:.60}; every text must be a string."
        )
    n = len(texts)
    src = [src_lang] * n if isinstance(src_lang, str) else list(src_lang)
    tgt = [tgt_lang] * n if isinstance(tgt_lang, str) else list(tgt_lang)
    if len(src) != n or len(tgt) != n:
        raise ValueError(f"Got {n} texts but {len(src)} source and {len(tgt)} target language codes.")
    tokenizer.check_model(model)
    for code in set(src) | set(tgt):
        tokenizer.language_id(code)  # an unknown code fails before any work
    for pair in sorted(set(zip(src, tgt, strict=True))):
        check_direction(*pair, model.config)
    return src, tgt


def _special_tokens(tokenizer: Any) -> int:
    """Tokens of every encoded input besides its subwords, counted by `max_source_length`: the tag and </s>."""
    return 1 + (source_tag_side(tokenizer.lang_tag_style) is not None)


def _warn_about_inputs(tokenizer: Any, texts: list[str], max_source_length: int | None) -> None:
    """Warn about what the model will not see as written: truncated texts and unknown subwords."""
    if not texts:
        return
    encodings = encode_text(tokenizer, texts)
    lengths = [len(ids) for ids in encodings]
    if max_source_length is not None:
        room = max_source_length - _special_tokens(tokenizer)
        long = [length for length in lengths if length > room]
        if long:
            message = (
                f"{len(long)} of {len(texts)} inputs are longer than max_source_length={max_source_length} subwords "
                f"(the longest: {max(long)}) and are truncated; raise the limit (--max-source-length) or split them."
            )
            warnings.warn(message, stacklevel=3)
            logger.warning(message)
    unknown = sum(ids.count(tokenizer.unk_token_id) for ids in encodings)
    total = sum(lengths)
    if total and unknown / total > UNKNOWN_WARNING_RATE:
        message = (
            f"{unknown / total:.1%} of the input subwords are <unk> ({unknown} of {total}): the vocabulary does not "
            "cover this text (another script?); its translation will be poor."
        )
        warnings.warn(message, stacklevel=3)
        logger.warning(message)


__all__ = ["translate"]
