"""The encoder's and decoder's inputs checked where a wrong one would fail deep inside (an IndexError, a shape
error), each as one ValueError naming the fix."""

from __future__ import annotations

import torch

from .routing import sync_free


def check_encoder_inputs(
    input_ids: torch.Tensor | None, attention_mask: torch.Tensor | None, inputs_embeds: torch.Tensor | None, vocab: int
) -> None:
    """Shapes and id range of the encoder's inputs, as one clear ValueError instead of an IndexError deep inside."""
    if input_ids is None and inputs_embeds is None:
        raise ValueError("The encoder needs input_ids (or inputs_embeds); the tokenizer returns them.")
    if input_ids is not None:
        if input_ids.dim() != 2:
            raise ValueError(
                f"input_ids has shape {tuple(input_ids.shape)}; give [batch, length] (one sentence: input_ids[None])."
            )
        if input_ids.numel() and not sync_free(input_ids):  # a sync-free step: the embedding kernel asserts
            low, high = int(input_ids.min()), int(input_ids.max())
            if low < 0 or high >= vocab:
                raise ValueError(
                    f"input_ids holds ids outside the vocabulary (from {low} to {high}, vocabulary size {vocab}): was "
                    "the text tokenized with another tokenizer? Use the one saved with the model."
                )
    reference = input_ids if input_ids is not None else inputs_embeds[..., 0]
    if attention_mask is not None and tuple(attention_mask.shape) != tuple(reference.shape):
        raise ValueError(
            f"attention_mask has shape {tuple(attention_mask.shape)} but the input has {tuple(reference.shape)}; "
            "pass the mask the tokenizer returned with these input_ids."
        )


def check_no_attentions(output_attentions: bool | None) -> None:
    if output_attentions:
        raise ValueError(
            "output_attentions=True is not supported: attention runs in PyTorch SDPA, which does not return "
            "attention weights. Use a forward hook on the attention modules' inputs to inspect them."
        )


__all__ = ["check_encoder_inputs", "check_no_attentions"]
