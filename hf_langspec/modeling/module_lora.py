"""Language-specific LoRA at one insertion point: `delta_p = (alpha / r) x A_l^p B_l^p` (Hu et al. eq. 3).

At an attention point the projections are q, k, v, o (d -> d); at an FFN point (`enc_ffn_proj`, `dec_ffn_proj`)
fc1 (d -> ffn) and fc2 (ffn -> d). The points' protocol (backbone: `delta = m(x, lang, i, p)` added to projection
p) is LAA's, so a LoRA folds into the projection's weight for one language exactly as LAA does
(`export.specialize`), and starts as the backbone with `B = 0`.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .routing import LanguageContext


class LanguageLoRA(nn.Module):
    """`A [layers, projections, L, d, r]` and `B [layers, projections, L, r, d]` of one attention point."""

    def __init__(self, config, layers: int, language_side: str):
        super().__init__()
        d, r, languages = config.d_model, config.lora_rank, config.num_languages
        self.projections = list(config.lora_projections)
        self.language_side = language_side
        self.scale = config.lora_alpha / r
        self.dropout = config.lora_dropout
        self.a = nn.Parameter(torch.empty(layers, len(self.projections), languages, d, r))
        self.b = nn.Parameter(torch.empty(layers, len(self.projections), languages, r, d))

    def initialize(self, init, config=None) -> None:
        # Hu et al. / peft: A Kaiming-uniform (a = sqrt(5), over its d inputs), B zero: the model starts unchanged
        bound = 1.0 / math.sqrt(self.a.shape[-2])
        init.uniform_(self.a, -bound, bound)
        init.zeros_(self.b)

    @torch.no_grad()
    def start_as_identity(self) -> None:
        self.b.zero_()

    def forward(self, x: torch.Tensor, lang: LanguageContext, layer_idx: int, projection: str) -> torch.Tensor:
        if projection not in self.projections:
            return torch.zeros_like(x)  # attention projections are d -> d
        p = self.projections.index(projection)
        router = lang.router(
            self.language_side, needed_by=f"language-specific LoRA (the {self.language_side} language)"
        )
        x = F.dropout(x, p=self.dropout, training=self.training)
        low = router.matmul(x, self.a[layer_idx, p])
        return router.matmul(low, self.b[layer_idx, p]) * self.scale


class LanguageFFNLoRA(nn.Module):
    """`A1 [layers, L, d, r]`, `B1 [layers, L, r, ffn]` on fc1 and `A2 [layers, L, ffn, r]`, `B2 [layers, L, r, d]`
    on fc2 of one stack's FFNs."""

    def __init__(self, config, layers: int, language_side: str, inner_dim: int):
        super().__init__()
        d, r, languages = config.d_model, config.lora_rank, config.num_languages
        self.language_side = language_side
        self.scale = config.lora_alpha / r
        self.dropout = config.lora_dropout
        self.a1 = nn.Parameter(torch.empty(layers, languages, d, r))
        self.b1 = nn.Parameter(torch.empty(layers, languages, r, inner_dim))
        self.a2 = nn.Parameter(torch.empty(layers, languages, inner_dim, r))
        self.b2 = nn.Parameter(torch.empty(layers, languages, r, d))

    def initialize(self, init, config=None) -> None:
        for a, b in ((self.a1, self.b1), (self.a2, self.b2)):  # as LanguageLoRA: A over its inputs, B zero
            bound = 1.0 / math.sqrt(a.shape[-2])
            init.uniform_(a, -bound, bound)
            init.zeros_(b)

    @torch.no_grad()
    def start_as_identity(self) -> None:
        self.b1.zero_()
        self.b2.zero_()

    def forward(self, x: torch.Tensor, lang: LanguageContext, layer_idx: int, projection: str) -> torch.Tensor:
        a, b = (self.a1, self.b1) if projection == "fc1" else (self.a2, self.b2)
        router = lang.router(
            self.language_side, needed_by=f"language-specific LoRA (the {self.language_side} language)"
        )
        x = F.dropout(x, p=self.dropout, training=self.training)
        return router.matmul(router.matmul(x, a[layer_idx]), b[layer_idx]) * self.scale


__all__ = ["LanguageFFNLoRA", "LanguageLoRA"]
