"""Masked language modelling for the XLP encoder family (XLM's objective; Luo et al. appendix B.1).

Masking is transformers' `DataCollatorForLanguageModeling`: 15% of the tokens, of which 80% become
`<mask>`, 10% a random token and 10% stay. Two additions make per-language validation comparable:

* `fixed_masks` masks a validation set once, with a seed, so the loss before and after training is
  measured on the same masked positions;
* `MaskedLMCollator` masks training batches afresh and only pads batches that already carry labels,
  so one Trainer serves both.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from transformers import DataCollatorForLanguageModeling


class MaskedLMCollator:
    """Mask unlabelled features (training); pad pre-masked ones (validation from `fixed_masks`)."""

    def __init__(self, tokenizer: Any, mlm_probability: float = 0.15):
        if tokenizer.mask_token_id is None:
            raise ValueError("The tokenizer has no <mask> token; train it with train_tokenizer(..., mask_token=True).")
        self.tokenizer = tokenizer
        self.masking = DataCollatorForLanguageModeling(tokenizer, mlm_probability=mlm_probability)

    def __call__(self, features: Sequence[dict[str, Any]]) -> dict[str, torch.Tensor]:
        if "labels" not in features[0]:
            return self.masking(list(features))
        width = max(len(f["input_ids"]) for f in features)
        pad = self.tokenizer.pad_token_id
        batch = {
            "input_ids": [f["input_ids"] + [pad] * (width - len(f["input_ids"])) for f in features],
            "attention_mask": [[1] * len(f["input_ids"]) + [0] * (width - len(f["input_ids"])) for f in features],
            "labels": [f["labels"] + [-100] * (width - len(f["labels"])) for f in features],
            "src_lang_ids": [f["src_lang_ids"] for f in features],
        }
        return {key: torch.tensor(value) for key, value in batch.items()}


def fixed_masks(
    features: Sequence[dict[str, Any]], tokenizer: Any, seed: int = 0, mlm_probability: float = 0.15
) -> list[dict[str, Any]]:
    """Mask every feature once, reproducibly: `{"input_ids", "labels", "src_lang_ids"}` (labels -100 where unmasked)."""
    masking = DataCollatorForLanguageModeling(tokenizer, mlm_probability=mlm_probability, seed=seed)
    out = []
    for feature in features:
        ids = torch.tensor([feature["input_ids"]])
        special = torch.tensor(
            [tokenizer.get_special_tokens_mask(feature["input_ids"], already_has_special_tokens=True)],
            dtype=torch.bool,
        )
        masked, labels = masking.torch_mask_tokens(ids, special_tokens_mask=special)
        out.append(
            {"input_ids": masked[0].tolist(), "labels": labels[0].tolist(), "src_lang_ids": feature["src_lang_ids"]}
        )
    return out


__all__ = ["MaskedLMCollator", "fixed_masks"]
