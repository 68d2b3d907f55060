"""Training: the Seq2SeqTrainer subclass, its arguments, complete-checkpoint resuming and averaging."""

from .checkpoints import average_checkpoints, complete_checkpoints, last_complete_checkpoint
from .mlm import MaskedLMCollator, fixed_masks
from .trainer import LangSpecSeq2SeqTrainer
from .training_args import LangSpecTrainingArguments

__all__ = [
    "LangSpecSeq2SeqTrainer",
    "LangSpecTrainingArguments",
    "MaskedLMCollator",
    "average_checkpoints",
    "complete_checkpoints",
    "fixed_masks",
    "last_complete_checkpoint",
]
