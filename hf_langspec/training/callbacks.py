"""The trainer's own callbacks: the token count flushed at each epoch's end, and a diverged run stopped."""

from __future__ import annotations

import math
import weakref
from typing import Any

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
            raise DivergedTraining(
                f"the training loss became {loss} by step {state.global_step}: the model diverged and is not saved, "
                f"scored or carded. Lower training.learning_rate (now {args.learning_rate:g}), lengthen "
                "training.warmup_steps or set training.max_grad_norm, or check the data; the checkpoints before it "
                f"are in {args.output_dir}."
            )


__all__ = ["DivergedTraining", "StopOnNonFiniteLoss", "TokensAtEpochEnd"]
