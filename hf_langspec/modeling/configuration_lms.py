"""Configuration of language-specific matrix synthesis and fuse distillation (LMS + FD; Xu et al. 2023)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from .configuration_langspec import LangSpecConfig

LMS_POINTS = ("ffn", "self_attn")
LMS_SYNTHESES = ("pair", "language")
LMS_ROUTES = ("shared", "language")


class LMSConfig(LangSpecConfig):
    r"""
    [`LangSpecConfig`] plus language-specific matrix synthesis (LMS; Xu, Tan, Li, Chen, Van Durme, Koehn and Murray
    2023, "Condensing Multilingual Knowledge with Lightweight Language-Specific Modules", EMNLP): each chosen
    projection `W` becomes `W + W_v W_f` (eq. 1), a rank-`lms_rank` product of a vertical and a flat matrix of the
    example's languages; and, optionally, fuse distillation (FD, section 4): one shared vertical/flat pair trained
    beside them in a second forward pass of every batch, `L = 1/2 (CE(y, p_l) + CE(y, p_s)) + lms_fd_weight *
    1/2 (KL(p_l || p_s) + KL(p_s || p_l))` (eqs. 3-4), so that inference can use the shared pair alone and the model
    condenses into a plain Transformer (`LMSForConditionalGeneration.condense`).

    Parameters the LS modules add (section 2.2): `2 L N d (r + c)` for the FFNs of `N` layers (`L + 1` pairs with
    FD); Table 3's OPUS-100 sizes follow from it (transformer_big, 95 languages: 989M at d = 64, 429M at d = 16).

    Args:
        lms_rank (`int`, *optional*, defaults to 32): d, the rank (the paper's IWSLT'14 setting and the authors'
            module default; OPUS-100 used 64, 16 and 4).
        lms_synthesis (`str`, *optional*, defaults to `"pair"`): `"pair"`: `W_v` of the source language and `W_f` of
            the target language (the paper's default for translation); `"language"`: both of one language, the
            encoder's source and the decoder's target.
        lms_points (`list[str]`, *optional*, defaults to `["ffn"]`): `"ffn"` (fc1 and fc2 of every chosen layer, the
            paper's default) and/or `"self_attn"` (q, k, v, o of the encoder's and the decoder's self-attention: its
            section 6.2 ablation, whose parameter count, 77M at d = 20, matches these two and not cross-attention).
        lms_every (`int`, *optional*, defaults to 1): LMS in every `lms_every`-th layer of each stack (the authors'
            `--lms-freq`: 1 = every layer, 2 = every second); at most the deeper stack's layer count.
        lms_fuse_distillation (`bool`, *optional*, defaults to `False`): train the shared pair by fuse distillation.
        lms_fd_weight (`float`, *optional*, defaults to 1.0): the weight of the symmetric KL (the authors' `--fd-weight 1`).
        lms_inference_route (`str`, *optional*, defaults to `"shared"`): with FD, what inference uses: `"shared"`
            (LMS+FD-Share, the paper's default) or `"language"` (LMS+FD-LS).
        lms_init_std (`float`, *optional*, defaults to 0.01): the vertical matrices' N(0, std) start (the authors' code).
        **kwargs: every [`LangSpecConfig`] argument; `languages` must be given.
    """

    model_type = "langspec_lms"

    def __init__(
        self,
        lms_rank: int = 32,
        lms_synthesis: str = "pair",
        lms_points: Sequence[str] | None = None,
        lms_every: int = 1,
        lms_fuse_distillation: bool = False,
        lms_fd_weight: float = 1.0,
        lms_inference_route: str = "shared",
        lms_init_std: float = 0.01,
        **kwargs,
    ):
        self.lms_rank = lms_rank
        self.lms_synthesis = lms_synthesis
        self.lms_points = list(("ffn",) if lms_points is None else lms_points)
        self.lms_every = lms_every
        self.lms_fuse_distillation = lms_fuse_distillation
        self.lms_fd_weight = lms_fd_weight
        self.lms_inference_route = lms_inference_route
        self.lms_init_std = lms_init_std
        super().__init__(**kwargs)
        self._check_lms()

    def _check_lms(self) -> None:
        for name, value in (("lms_rank", self.lms_rank), ("lms_every", self.lms_every)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} must be a whole number of at least 1.")
        if self.lms_synthesis not in LMS_SYNTHESES:
            raise ValueError(f"lms_synthesis={self.lms_synthesis!r}: use one of {list(LMS_SYNTHESES)}.")
        unknown = [p for p in self.lms_points if p not in LMS_POINTS]
        if unknown or not self.lms_points:
            raise ValueError(f"lms_points {self.lms_points} must be a non-empty list of {list(LMS_POINTS)}.")
        if self.lms_inference_route not in LMS_ROUTES:
            raise ValueError(f"lms_inference_route={self.lms_inference_route!r}: use one of {list(LMS_ROUTES)}.")
        if not isinstance(self.lms_fuse_distillation, bool):
            raise ValueError(f"lms_fuse_distillation={self.lms_fuse_distillation!r} must be true or false.")
        for name, value in (("lms_fd_weight", self.lms_fd_weight), ("lms_init_std", self.lms_init_std)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
                raise ValueError(f"{name}={value!r} must be a number of at least 0.")
        if not self.languages:
            raise ValueError("LMS needs `languages`: one vertical and one flat matrix per language.")
        deepest = max(self.encoder_layers, self.decoder_layers)
        if self.lms_every > deepest:  # no layer i with (i + 1) % lms_every == 0: a model without LMS
            raise ValueError(
                f"lms_every={self.lms_every} places LMS in no layer: the encoder has {self.encoder_layers} layers and "
                f"the decoder {self.decoder_layers}; use at most {deepest} (1: every layer)."
            )

    def lms_layers(self, layers: int) -> list[int]:
        """The layers (from 0) of a stack of `layers` with LMS: every `lms_every`-th, counted from 1 as the authors'
        `(i + 1) % lms_freq == 0`."""
        return [i for i in range(layers) if (i + 1) % self.lms_every == 0]

    def card_settings(self) -> str:
        """The method's settings as a Markdown list, for its model card."""
        synthesis = ("pair-wise (W_v of the source, W_f of the target)" if self.lms_synthesis == "pair"
                     else "language-wise (the encoder's source, the decoder's target)")  # fmt: skip
        route = (f"fuse distillation, inference through the {self.lms_inference_route} matrices"
                 if self.lms_fuse_distillation else "no fuse distillation")  # fmt: skip
        return "\n".join([
            f"- LMS in: {', '.join(self.lms_points)}, every {self.lms_every} layer(s); rank {self.lms_rank}",
            f"- Synthesis: {synthesis}",
            f"- {route.capitalize()}",
        ])  # fmt: skip


__all__ = ["LMS_POINTS", "LMS_ROUTES", "LMS_SYNTHESES", "LMSConfig"]
