"""LEE: language embedding embodiment (Jin & Xiong 2022, section 3, equations 1-2, Figure 1).

The target language's embedding E^lang is added to the hidden states at chosen switching points, so
the direction signal reaches deep layers instead of only the first token: `h <- h + E^lang` before
the sublayer's residual branch point (it stays in the residual stream, as the authors' code does).

Figure 1's six positions, top-down in each stack (our reading of the figure and the authors'
released configuration, "decoder self-attention + cross-attention" = LEE_{4,5}, the paper's best):

    1 enc_ffn_in   2 enc_self_in   3 dec_ffn_in   4 dec_cross_in   5 dec_self_in   6 enc_out

`dec_cross_in` changes the query side only (the keys and values are the encoder output); `enc_out`
is added once to the encoder output, so once per generation, not per decoding step.

The embedding (`lee_embedding`): `"tag"` (default, the authors' code) is the embedding row of the
target language's tag token in the shared vocabulary, not scaled by sqrt(d), so LEE adds no
parameters; `"table"` is a separate language-embedding table (zero-initialised: an untrained LEE
model is the plain model).
"""

from __future__ import annotations

import torch
from torch import nn

from .routing import LanguageContext, tag_embeddings

LEE_POSITIONS = {1: "enc_ffn_in", 2: "enc_self_in", 3: "dec_ffn_in", 4: "dec_cross_in", 5: "dec_self_in", 6: "enc_out"}


class LanguageEmbeddingEmbodiment(nn.Module):
    """`h + E[target language]` at one stack's LEE points (one module per stack, shared by its points).

    In `"table"` mode each stack has its own `[L, d]` table.
    """

    def __init__(self, config):
        super().__init__()
        self.mode = config.lee_embedding
        self.tag_ids = list(config.lang_tag_token_ids or [])
        if self.mode == "table":
            self.weight = nn.Parameter(torch.empty(config.num_languages, config.d_model))

    def initialize(self, init, config) -> None:
        if self.mode == "table":
            init.zeros_(self.weight)

    def identity_problem(self) -> str | None:
        """The `"tag"` mode adds the tag tokens' own embedding rows, which the vocabulary fixes."""
        return (
            None
            if self.mode == "table"
            else "LEE's tag mode adds the tag tokens' embedding rows; use lee_embedding='table'"
        )

    @torch.no_grad()
    def start_as_identity(self) -> None:
        """A `"table"` embedding starts at zero: `h + 0`."""
        self.weight.zero_()

    def prepare(self, lang: LanguageContext, hidden: torch.Tensor) -> None:
        """Once per forward, outside the layers: each example's target-language embedding `[B, d]`."""
        ids = lang.ids("target", needed_by="LEE (the target-language embedding)")
        if self.mode == "table":
            embeddings = self.weight.index_select(0, ids)
        else:  # the tag tokens' rows of the shared embedding, unscaled
            embeddings = tag_embeddings(lang.scratch["embed_tokens"], self.tag_ids, ids)
        lang.scratch[(id(self), "embeddings")] = embeddings

    def embeddings(self, lang: LanguageContext) -> torch.Tensor:
        """`[B, d]`: each example's target-language embedding (from `prepare`)."""
        return lang.scratch[(id(self), "embeddings")]

    def forward(self, hidden: torch.Tensor, lang: LanguageContext, layer_idx: int | None = None) -> torch.Tensor:
        return hidden + self.embeddings(lang).unsqueeze(1).to(hidden.dtype)


__all__ = ["LEE_POSITIONS", "LanguageEmbeddingEmbodiment"]
