"""`compute_metrics` for the Trainer's generation-based validation, through the `langspec_mt` metric module."""

from __future__ import annotations

from typing import Any

import evaluate
import numpy as np

from .. import metrics
from .metrics import corpus_scores


class TranslationMetrics:
    """`compute_metrics` for generation-based validation through the `langspec_mt` evaluate module.

    `LangSpecSeq2SeqTrainer` passes each example's language codes (`takes_languages`), so a set mixing
    directions is scored per direction: `bleu`, `chrf` and `chrfpp` are means over its directions (the
    papers' way), plus `bleu_<group>` for each group (en-xx, xx-en, zero-shot) when the set has more than
    one, and `off_target` (zero-shot directions) when `off_target=True`. Called without codes (another
    trainer), it scores the set as one corpus.
    """

    takes_languages = True

    def __init__(self, tokenizer: Any, off_target: bool = False):
        self.tokenizer, self.off_target = tokenizer, off_target
        self._module = None

    def __call__(self, prediction: Any, src_lang: list[str] | None = None, tgt_lang: list[str] | None = None):
        pad = self.tokenizer.pad_token_id
        hyps = self.tokenizer.batch_decode(np.where(prediction.predictions < 0, pad, prediction.predictions),
                                           skip_special_tokens=True)  # fmt: skip
        refs = self.tokenizer.batch_decode(np.where(prediction.label_ids < 0, pad, prediction.label_ids),
                                           skip_special_tokens=True)  # fmt: skip
        hyps, refs = [h.strip() for h in hyps], [r.strip() for r in refs]
        if src_lang is None or tgt_lang is None:
            scores = corpus_scores(hyps, refs)
            return {"bleu": scores["bleu"], "chrf": scores["chrf"], "chrfpp": scores["chrfpp"]}
        if self._module is None:
            self._module = evaluate.load(metrics.path("langspec_mt"))
        result = self._module.compute(predictions=hyps, references=refs, src_lang=src_lang, tgt_lang=tgt_lang,
                                      off_target="zero-shot" if self.off_target else False)  # fmt: skip
        flat = {name: result[name] for name in ("bleu", "chrf", "chrfpp")}
        if len(result["groups"]["bleu"]) > 1:
            flat |= {f"bleu_{group}": value for group, value in result["groups"]["bleu"].items()}
        if "off_target" in result["groups"]:
            flat["off_target"] = result["groups"]["off_target"]["zero-shot"]
        return flat


__all__ = ["TranslationMetrics"]
