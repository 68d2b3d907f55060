"""The additive SDPA masks of the backbone: the encoder's padding mask and the decoder's causal self-attention mask
(with SDPA's own causal kernel, or no mask at all, where nothing is padded)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .routing import sync_free


def padding_mask(mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """`[B, S]` 1/0 mask -> additive `[B, 1, 1, S]` SDPA mask, or None when nothing is padded (asked only where
    reading the mask back is free: a sync-free step, `routing.sync_free`, always applies the mask)."""
    if mask is None or (not sync_free(mask) and bool(mask.all())):
        return None
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask.bool(), torch.finfo(dtype).min)[
        :, None, None, :
    ]


def decoder_self_mask(
    mask: torch.Tensor | None,
    query_length: int,
    past_length: int | torch.Tensor,
    dtype: torch.dtype,
    device: torch.device,
    static_length: int | None = None,
) -> tuple[torch.Tensor | None, bool]:
    """Self-attention mask of the decoder: `(additive mask, is_causal)`.

    Fast paths: no padding and no cache -> SDPA's own causal kernel; one new token with a cache and
    no padding -> no mask at all. Otherwise an explicit `[B, 1, T, past + T]` additive mask. With a static
    cache of `static_length` slots (past_length a device tensor) always `[1 or B, 1, T, static_length]`: the
    keys are every slot, those past the queries' positions masked, and nothing is read back.
    """
    padded = False
    if static_length is None:
        padded = mask is not None and not bool(mask.all())
        if not padded:
            if past_length == 0:
                # a branch, not `query_length > 1`: compiled over several batch lengths the length is symbolic,
                # SDPA takes no SymBool, and the graph break in every decoder layer made a compiled step 30x slower
                return (None, True) if query_length > 1 else (None, False)
            if query_length == 1:
                return None, False
    slots = past_length + query_length if static_length is None else static_length
    keys = torch.arange(slots, device=device)
    queries = past_length + torch.arange(query_length, device=device)
    allowed = (keys[None, :] <= queries[:, None])[None, None]
    if static_length is not None and mask is not None:
        if mask.dim() == 4:  # `generate` gives a static cache `[B, 1, T, slots]`, True: attend
            allowed = allowed & mask.bool()
        else:  # `[B, past + T]` 1/0 over the tokens so far; the slots after them are masked
            allowed = allowed & F.pad(mask, (0, static_length - mask.shape[1]), value=1)[:, None, None, :].bool()
    elif padded:
        allowed = allowed & mask[:, None, None, -slots:].bool()
    return torch.zeros(allowed.shape, dtype=dtype, device=device).masked_fill(~allowed, torch.finfo(dtype).min), False


__all__ = ["decoder_self_mask", "padding_mask"]
