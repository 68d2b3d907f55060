"""The papers' label-smoothed cross-entropy (eps = 0.1), fused into one kernel on an accelerator."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers.trainer_pt_utils import LabelSmoother

from ..modeling.routing import on_accelerator


@dataclass
class SmoothedCrossEntropy(LabelSmoother):
    """transformers' `LabelSmoother` (eps/V on every class, the papers' 0.1), as one fused `cross_entropy` with
    `label_smoothing` on an accelerator: the same value, `(1 - eps) * nll + eps / V * sum_V(-log p)` summed over the
    non-ignored tokens and divided as transformers divides (the batch's or the accumulated count), in about a third
    of the kernels. On a CPU (outside `modeling.routing.accelerator_path()`, or with `fused=False`) transformers'
    own code runs, so CPU runs compute exactly what they computed before."""

    fused: bool | None = None  # None: on an accelerator

    def __call__(self, model_output, labels, shift_labels=False, num_items_in_batch=None):
        logits = model_output["logits"] if isinstance(model_output, dict) else model_output[0]
        if not (self.fused if self.fused is not None else on_accelerator(logits)):
            return super().__call__(model_output, labels, shift_labels, num_items_in_batch)
        if shift_labels:
            logits, labels = logits[..., :-1, :], labels[..., 1:]
        total = F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]).to(torch.promote_types(logits.dtype, torch.float32)),
            labels.reshape(-1), ignore_index=self.ignore_index,
            label_smoothing=self.epsilon, reduction="sum",
        )  # fmt: skip
        if num_items_in_batch is None:
            return total / labels.ne(self.ignore_index).sum()
        if torch.is_tensor(num_items_in_batch):
            return total / num_items_in_batch.to(total.device)
        return total / num_items_in_batch


__all__ = ["SmoothedCrossEntropy"]
