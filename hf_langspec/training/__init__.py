"""Training: the Seq2SeqTrainer subclass, its arguments, complete-checkpoint resuming and averaging."""

from .mlm import MaskedLMCollator, fixed_masks
from .trainer import (
    LangSpecSeq2SeqTrainer,
    LangSpecTrainingArguments,
    average_checkpoints,
    complete_checkpoints,
    last_complete_checkpoint,
)

__all__ = [
    "LangSpecSeq2SeqTrainer",
    "LangSpecTrainingArguments",
    "MaskedLMCollator",
    "average_checkpoints",
    "complete_checkpoints",
    "fixed_masks",
    "last_complete_checkpoint",
]
