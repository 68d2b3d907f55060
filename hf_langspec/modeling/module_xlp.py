"""XLP: cross-lingual language projection (Luo et al.), at the `embed` insertion point.

For a sentence in language t, every word embedding w_i is replaced by phi_t(w_i) = P_t w_i before
positions are added (the paper's Algorithm 1 and Figure 1, right), so self-attention sees
language-specific word correlations instead of word-language ones (Section 3).

Choices where the paper is silent (no public code; ../shared/notes/reference_implementations.md):
P_t is a bias-free d x d matrix per language, initialised to the identity (so an untrained XLP model
is exactly the plain model); it acts on the scaled token embeddings; the tied output projection uses
the unprojected embeddings. The encoder projects with the source language and the decoder's input
embeddings with the target language.

Parameters: L x d^2 per stack. Extra cost: d^2 multiply-adds per token (one routed matmul).
"""

from __future__ import annotations

import torch
from torch import nn

from .routing import GatheredWeights, LanguageContext


class LanguageProjection(nn.Module):
    """`h P_t^T` for the language t of each example; `side` is "source" or "target".

    `weight[t]` stores P_t^T (shape `[d, d]`), so the routed product is `h @ weight[t]`.
    """

    def __init__(self, num_languages: int, d_model: int, side: str):
        super().__init__()
        self.side = side
        self.weight = nn.Parameter(torch.empty(num_languages, d_model, d_model))
        self._gathered = GatheredWeights()  # decoding reuses each example's P_t across steps
        # Frozen projections (XLP's classification fine-tuning) are detached in forward rather than given
        # requires_grad=False: from_pretrained replaces parameters after __init__ and would unfreeze them.
        self.frozen = False

    def initialize(self, init, config) -> None:
        init.copy_(self.weight, torch.eye(self.weight.shape[-1]).expand_as(self.weight))

    @torch.no_grad()
    def start_as_identity(self) -> None:
        """Every language's projection the identity matrix (XLP's own start)."""
        self.weight.copy_(torch.eye(self.weight.shape[-1]).expand_as(self.weight))

    def forward(self, hidden: torch.Tensor, lang: LanguageContext, layer_idx: int | None = None) -> torch.Tensor:
        router = lang.router(self.side, needed_by="XLP (the language projection)")
        weight = self.weight.detach() if self.frozen else self.weight
        return router.matmul(hidden, weight, cache=self._gathered)


__all__ = ["LanguageProjection"]
