"""Additive language embedding (XLM; Lample & Conneau 2019), at the `embed` insertion point.

The "additive" baseline of the XLP paper (Luo et al., Table 2, Figure 1 left): for a sentence
in language t, the input to the Transformer is `{w_i + l_t}` (plus positions). In translation the
encoder adds the source language's vector and the decoder the target language's, as XLM does.
`l_t` is added after the token embeddings are scaled by sqrt(d), i.e. unscaled like XLM's.

Parameters: `L x d` per stack. Extra cost: one addition per token (d FLOPs).
"""

from __future__ import annotations

import torch
from torch import nn

from .routing import LanguageContext


class AdditiveLanguageEmbedding(nn.Module):
    """`h + l[lang]` for every token; `side` is "source" (encoder) or "target" (decoder)."""

    def __init__(self, num_languages: int, d_model: int, side: str):
        super().__init__()
        self.side = side
        self.weight = nn.Parameter(torch.empty(num_languages, d_model))

    def initialize(self, init, config) -> None:
        init.normal_(self.weight, mean=0.0, std=config.d_model**-0.5)  # like the token embeddings

    @torch.no_grad()
    def start_as_identity(self) -> None:
        """The language embeddings start at zero: `h + 0`."""
        self.weight.zero_()

    def forward(self, hidden: torch.Tensor, lang: LanguageContext, layer_idx: int | None = None) -> torch.Tensor:
        router = lang.router(self.side, needed_by="The additive language embedding (language_embedding='additive')")
        return hidden + router.lookup(self.weight).unsqueeze(1)


__all__ = ["AdditiveLanguageEmbedding"]
