"""The trainer's own callbacks: the token count flushed at each epoch's end, and a diverged run stopped (by the
logged loss here; by the weights at each checkpoint and the loss and weights at the end in `trainer.py`)."""

from __future__ import annotations

import math
import weakref
from typing import Any

import torch
from transformers import TrainerCallback


class TokensAtEpochEnd(TrainerCallback):
    """Flushes the trainer's token count at the end of each epoch (and of training, which ends an epoch), before
    the other callbacks and the final metrics read it."""

    def __init__(self, trainer: Any):
        self.trainer = weakref.proxy(trainer)

    def on_epoch_end(self, args, state, control, **kwargs):
        self.trainer.flush_tokens()


class DivergedTraining(RuntimeError):
    """The training loss became NaN or infinite: the run stops before that model is saved, scored or carded."""


def diverged(what: str, step: int, args: Any) -> DivergedTraining:
    """The one message of a diverged run, whichever check found it (`what`: what stopped being finite)."""
    return DivergedTraining(
        f"{what} by step {step}: the model diverged and is not saved, scored or carded. Lower "
        f"training.learning_rate (now {args.learning_rate:g}), lengthen training.warmup_steps or set "
        f"training.max_grad_norm, or check the data; the checkpoints before it are in {args.output_dir}."
    )


def non_finite_parameters(model: torch.nn.Module) -> list[str]:
    """The names of the parameters holding a NaN or an infinity: one read from the device for the whole model."""
    named = [(name, p) for name, p in model.named_parameters() if p.numel()]
    if not named:
        return []
    finite = torch.stack([p.detach().isfinite().all() for _, p in named]).tolist()
    return [name for (name, _), ok in zip(named, finite, strict=True) if not ok]


class StopOnNonFiniteLoss(TrainerCallback):
    """Reads the loss the Trainer logs (every `logging_steps`; no extra read-back from the device) and stops the
    run with `DivergedTraining` when it is NaN or infinite. Logging comes before saving in a step, so the diverged
    weights are never written as a checkpoint or the run's model; the checkpoints before it are kept."""

    def on_log(self, args, state, control, logs=None, **kwargs):
        try:
            loss = float((logs or {}).get("loss", 0.0))
        except (TypeError, ValueError):
            return
        if not math.isfinite(loss):
            raise diverged(f"the training loss became {loss}", state.global_step, args)


__all__ = ["DivergedTraining", "StopOnNonFiniteLoss", "TokensAtEpochEnd", "diverged", "non_finite_parameters"]
