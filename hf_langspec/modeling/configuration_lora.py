"""Configuration of language-specific LoRA: low-rank per-language deltas on the attention and FFN projections."""

from __future__ import annotations

import math

from .configuration_langspec import LangSpecConfig

LORA_POINTS = ("enc_self_attn", "dec_self_attn", "dec_cross_attn", "enc_ffn_proj", "dec_ffn_proj")
ATTENTION_POINTS = LORA_POINTS[:3]  # the default: the attention projections, as Hu et al. adapt
LORA_PROJECTIONS = ("q", "k", "v", "o")


class LoRAConfig(LangSpecConfig):
    r"""
    [`LangSpecConfig`] plus language-specific LoRA (Hu et al. 2022, "LoRA: Low-Rank Adaptation of Large Language
    Models", eq. 3: `h = W x + (alpha / r) B A x`, `B` started at zero), one `(A, B)` pair per language, per layer,
    attention point and projection, chosen per example like every language module of this package: the encoder's
    by the source language, the decoder's by the target language. Made for adapting a pretrained checkpoint
    (`interop.adapt`, `pretrained.freeze_base`): it starts as the checkpoint and folds into dense weights for one
    direction (`specialize`).

    Args:
        lora_rank (`int`, *optional*, defaults to 8): r.
        lora_alpha (`float`, *optional*, defaults to 16.0): the update is scaled by `alpha / r` (Hu et al.).
        lora_dropout (`float`, *optional*, defaults to 0.0): dropout on the input of `A`.
        lora_points (`list[str]`, *optional*, defaults to the three attentions): of `enc_self_attn`,
            `dec_self_attn`, `dec_cross_attn` and the FFNs, `enc_ffn_proj`, `dec_ffn_proj` (both FFN matrices, fc1 and
            fc2: `r (d + ffn)` parameters each per language and layer).
        lora_projections (`list[str]`, *optional*, defaults to `["q", "k", "v", "o"]`): at the attention points.
        lora_encoder_language (`str`, *optional*, defaults to `"source"`): the language the encoder's LoRA is keyed by.
        kwargs: every [`LangSpecConfig`] argument; `languages` must be given.
    """

    model_type = "langspec_lora"

    def __init__(
        self,
        lora_rank: int = 8,
        lora_alpha: float = 16.0,
        lora_dropout: float = 0.0,
        lora_points: list[str] | None = None,
        lora_projections: list[str] | None = None,
        lora_encoder_language: str = "source",
        **kwargs,
    ):
        self.lora_rank = lora_rank
        self.lora_alpha = lora_alpha
        self.lora_dropout = lora_dropout
        self.lora_points = list(ATTENTION_POINTS if lora_points is None else lora_points)
        self.lora_projections = list(LORA_PROJECTIONS if lora_projections is None else lora_projections)
        self.lora_encoder_language = lora_encoder_language
        super().__init__(**kwargs)
        unknown = [p for p in self.lora_points if p not in LORA_POINTS] + [
            p for p in self.lora_projections if p not in LORA_PROJECTIONS
        ]
        if unknown:
            raise ValueError(
                f"Unknown LoRA points or projections {unknown}: use {LORA_POINTS} and {LORA_PROJECTIONS}."
            )
        # checked by type too: a float rank (2.5) reached torch as a tensor shape, a traceback far from the setting
        if isinstance(lora_rank, bool) or not isinstance(lora_rank, int) or lora_rank < 1:
            raise ValueError(f"lora_rank={lora_rank!r} must be a whole number of at least 1 (the rank r of A and B).")
        if isinstance(lora_alpha, bool) or not isinstance(lora_alpha, (int, float)) or not 0 < lora_alpha < math.inf:
            raise ValueError(
                f"lora_alpha={lora_alpha!r} must be a positive number (the update is scaled by alpha / r)."
            )
        if isinstance(lora_dropout, bool) or not isinstance(lora_dropout, (int, float)) or not 0 <= lora_dropout < 1:
            raise ValueError(f"lora_dropout={lora_dropout!r} must be a number in [0, 1).")
        if lora_encoder_language not in ("source", "target"):
            raise ValueError(f"lora_encoder_language={lora_encoder_language!r}: use 'source' or 'target'.")
        if not self.languages:
            raise ValueError("Language-specific LoRA needs `languages`: one (A, B) pair per language.")

    def card_settings(self) -> str:
        """The method's settings as a Markdown list, for its model card."""
        return "\n".join([
            f"- LoRA in: {', '.join(self.lora_points)}; projections {', '.join(self.lora_projections)}",
            f"- Rank {self.lora_rank}, alpha {self.lora_alpha:g}, dropout {self.lora_dropout:g}; the encoder's "
            f"keyed by the {self.lora_encoder_language} language",
        ])  # fmt: skip


__all__ = ["ATTENTION_POINTS", "LORA_POINTS", "LORA_PROJECTIONS", "LoRAConfig"]
