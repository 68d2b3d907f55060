"""`LangSpecTrainingArguments`: `Seq2SeqTrainingArguments` with the papers' defaults (inverse square-root schedule,
label smoothing 0.1, Adam (0.9, 0.98), temperature sampling T=5 over directions) and the package's loop options
(static shapes, CUDA-graph steps, checkpoint averaging)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from transformers import Seq2SeqTrainingArguments


@dataclass
class LangSpecTrainingArguments(Seq2SeqTrainingArguments):
    """`Seq2SeqTrainingArguments` with the papers' defaults and the sampling/averaging options."""

    sampling_temperature: float = field(
        default=5.0, metadata={"help": "Temperature T over directions (1: proportional; 0: plain shuffling)."}
    )
    temperature_warmup_epochs: float = field(
        default=0.0, metadata={"help": "Raise T linearly from 1 over this many epochs (HLT-MT uses 5)."}
    )
    average_last_checkpoints: int = field(
        default=0, metadata={"help": "Average the weights of the last N checkpoints into output_dir at the end."}
    )
    lr_scheduler_type: str = field(default="inverse_sqrt", metadata={"help": "fairseq's inverse_sqrt by default."})
    train_sampling_strategy: str = field(
        default="group_by_length",
        metadata={"help": "Batches of similar length (fairseq's buckets) within the temperature sampling."},
    )
    label_smoothing_factor: float = field(default=0.1, metadata={"help": "0.1 in every paper."})
    adam_beta2: float = field(default=0.98, metadata={"help": "Adam (0.9, 0.98) as in the papers."})
    pad_to_multiple_of: int | None = field(
        default=None,
        metadata={
            "help": "Pad each batch's source and target lengths up to a multiple of this (the package's runs pass it "
            "to their collator): a few shapes instead of one per length, so that a compiled step is reused and a "
            "CUDA graph can be replayed (torch_compile_mode='reduce-overhead'). Masked padding changes no result."
        },
    )
    static_shapes: str | list[list[int]] | None = field(
        default="auto",
        metadata={
            "help": "Pad every training batch to one of a few fixed shapes (`training.static_shapes`): 'auto' (on when "
            "the step is compiled: 4 square buckets up to the longest example), 'off', or [[src, tgt], ...]. The "
            "compiled step is then traced with dynamic=False and compiled once per bucket, before the first step."
        },
    )
    cuda_graph_step: bool = field(
        default=False,
        metadata={
            "help": "Record the whole training step (loss, backward, clipping, fused AdamW) as one CUDA graph per "
            "static-shape bucket and replay it for every batch (training/graph_step.py): host work per step is "
            "copying the batch in. Needs a CUDA GPU, static shapes, optim adamw_torch_fused, one process, no "
            "gradient accumulation; combine with torch_compile in its default mode, not reduce-overhead."
        },
    )
    compile_cache_dir: str | None = field(
        default=None,
        metadata={
            "help": "Where inductor keeps compiled kernels and graphs (TORCHINDUCTOR_CACHE_DIR, unless that is set): "
            "runs and processes of the same model shape then compile from a warm cache."
        },
    )
    logging_nan_inf_filter: bool = field(
        default=False,
        metadata={
            "help": "transformers' filter reads every step's loss back from the device to leave NaN/inf out of the "
            "logged mean (it changes no update); off, a NaN loss shows in the log, and a GPU step does not wait."
        },
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        # pinned host memory only speeds copies to an accelerator; without one torch warns at every data loader
        if self.dataloader_pin_memory and not _has_accelerator():
            self.dataloader_pin_memory = False


def _has_accelerator() -> bool:
    accelerator = getattr(torch, "accelerator", None)  # torch >= 2.6; before it, CUDA is the one that pins
    return accelerator.is_available() if accelerator is not None else torch.cuda.is_available()


__all__ = ["LangSpecTrainingArguments"]
