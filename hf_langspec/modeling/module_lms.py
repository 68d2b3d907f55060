"""Language-specific matrix synthesis (LMS; Xu et al. 2023, "Condensing Multilingual Knowledge with Lightweight
Language-Specific Modules", EMNLP), at one insertion point.

A projection `W` (`r x c`) gains a low-rank language-specific matrix (eq. 1): `x_o = (W + W_v W_f) x_i`, with a
"vertical" `W_v` (`r x d`) and a "flat" `W_f` (`d x c`), `d << min(r, c)`. Pair-wise synthesis (the paper's default
for translation) takes `W_v` of the source language and `W_f` of the target language; language-wise synthesis
takes both of one language (the encoder's source, the decoder's target, as section 2.1 says). Fuse distillation adds
one shared pair `(W_v^shared, W_f^shared)`, stored as slot `L` after the languages' (the authors' code keeps it
beside them likewise), which the model's second pass uses (`route = "shared"`).

At the FFN points (`enc_ffn_proj`, `dec_ffn_proj`: fc1 and fc2, the paper's default placement) and at the
self-attention points (q, k, v, o: its section 6.2 ablation). Vertical matrices start N(0, `lms_init_std`) (0.01 in
the authors' code), flat ones at zero (Hu et al.), so a new module adds nothing. Extra parameters per projection and
language: `d (r + c)`; per token: `d (r + c)` multiply-adds against `r c` for the projection. The delta is linear in
`x`, so one direction (or, after fuse distillation, every direction) folds into `W`.
"""

from __future__ import annotations

import torch
from torch import nn

from .routing import LanguageContext

ROUTES = ("language", "shared")


class LanguageMatrixSynthesis(nn.Module):
    """`flat [layers, K, c, d]` and `vertical [layers, K, d, r]` per projection (`K`: the languages, plus the shared
    slot with fuse distillation), applied as `x @ flat @ vertical` (the row-vector form of `W_v W_f x`)."""

    def __init__(self, config, side: str, projections: dict[str, tuple[int, int]], layers: list[int]):
        super().__init__()
        self.side = side
        self.synthesis = config.lms_synthesis
        self.init_std = config.lms_init_std
        self.fused = config.lms_fuse_distillation
        self.inference_route = config.lms_inference_route if self.fused else "language"
        self.layers = list(layers)
        self.projections = list(projections)
        self.route: str | None = None  # set by the model for each of fuse distillation's two passes
        slots, r = config.num_languages + int(self.fused), config.lms_rank
        for name, (d_in, d_out) in projections.items():
            self.register_parameter(f"{name}_flat", nn.Parameter(torch.empty(len(self.layers), slots, d_in, r)))
            self.register_parameter(f"{name}_vertical", nn.Parameter(torch.empty(len(self.layers), slots, r, d_out)))

    def initialize(self, init, config=None) -> None:
        for name in self.projections:
            init.normal_(getattr(self, f"{name}_vertical"), 0.0, self.init_std)
            init.zeros_(getattr(self, f"{name}_flat"))

    @torch.no_grad()
    def start_as_identity(self) -> None:
        for name in self.projections:
            getattr(self, f"{name}_flat").zero_()

    def current_route(self) -> str:
        """The languages' matrices in training (fuse distillation's first pass), the configured ones at inference."""
        if self.route is not None:
            return self.route
        return "language" if self.training else self.inference_route

    def prepare(self, lang: LanguageContext, hidden: torch.Tensor) -> None:
        """The route of this forward, kept in its context: gradient checkpointing recomputes a layer in the backward,
        after the model has left the pass's route, and must take the same matrices."""
        lang.scratch[("lms_route", id(self))] = self.current_route()

    def forward(self, x: torch.Tensor, lang: LanguageContext, layer_idx: int, projection: str) -> torch.Tensor:
        flat, vertical = getattr(self, f"{projection}_flat", None), getattr(self, f"{projection}_vertical", None)
        if flat is None or layer_idx not in self.layers:  # a projection or layer without LMS adds nothing
            d_out = x.shape[-1] if flat is None else vertical.shape[-1]
            return x.new_zeros(*x.shape[:-1], d_out)
        slot = self.layers.index(layer_idx)
        flat, vertical = flat[slot], vertical[slot]
        if lang.scratch.get(("lms_route", id(self)), self.current_route()) == "shared":
            return x @ flat[-1] @ vertical[-1]
        needed = f"LMS ({self.synthesis}-wise synthesis)"
        if self.synthesis == "pair":  # W_v of the source, W_f of the target (eq. 1)
            flat_side, vertical_side = "target", "source"
        else:  # one language's pair: the encoder's source, the decoder's target
            flat_side = vertical_side = "source" if self.side == "encoder" else "target"
        languages = flat.shape[0] - int(self.fused)
        low = lang.router(flat_side, needed).matmul(x, flat[:languages])
        return lang.router(vertical_side, needed).matmul(low, vertical[:languages])


__all__ = ["ROUTES", "LanguageMatrixSynthesis"]
