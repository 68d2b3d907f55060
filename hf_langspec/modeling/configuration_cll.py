"""Configuration of CLL (Qu & Watanabe 2022): central-language-aware layers for zero-shot translation."""

from __future__ import annotations

from collections.abc import Sequence

from .configuration_langspec import LangSpecConfig


class CLLConfig(LangSpecConfig):
    r"""
    [`LangSpecConfig`] plus central-language-aware layers (CLL) in the decoder (see `module_cll.py`).

    Args:
        cll_layers (`str` or `list[int]`, *optional*, defaults to `"fcll"`): `"fcll"`: every decoder layer;
            `"sd"`: one CLL in decoder layer N // 2 and the FFN residual of encoder layer N // 2 removed
            (added to `encoder_drop_residual`); or an explicit list of decoder layer indexes.
        cll_inner_dim (`int`, *optional*, defaults to 1024): the LSL's inner size (the authors' code at d = 512).
        cll_dropout (`float`, *optional*, defaults to 0.3): the LSL branch's own dropout (code: 0.3; paper 0.2-0.3).
        cll_scale_init (`float`, *optional*, defaults to 0.1): the initial t_l.
        cll_frozen_languages (`list[str]`, *optional*, defaults to `[]`): languages whose LSLs and t_l get no
            gradient (set when a new language is integrated: the existing ones stay as they were).
        central_language (`str`, *optional*): the language that keeps the plain FFN (English in the paper's
            English-centric settings); `None` gives every language an LSL (the non-centred Triangle / Square).
    """

    model_type = "langspec_cll"

    def __init__(
        self,
        cll_layers: str | Sequence[int] = "fcll",
        cll_inner_dim: int = 1024,
        cll_dropout: float = 0.3,
        cll_scale_init: float = 0.1,
        cll_frozen_languages: Sequence[str] | None = None,
        **kwargs,
    ):
        self.cll_layers = cll_layers if isinstance(cll_layers, str) else [int(i) for i in cll_layers]
        self.cll_inner_dim = cll_inner_dim
        self.cll_dropout = cll_dropout
        self.cll_scale_init = cll_scale_init
        self.cll_frozen_languages = list(cll_frozen_languages or [])
        super().__init__(**kwargs)
        if self.cll_layers == "sd":
            drop = [self.encoder_layers // 2, "ffn"]
            if drop not in self.encoder_drop_residual:
                self.encoder_drop_residual.append(drop)
        self._check_cll()

    def cll_layer_indexes(self) -> list[int]:
        """The decoder layers that carry a CLL."""
        if self.cll_layers == "fcll":
            return list(range(self.decoder_layers))
        if self.cll_layers == "sd":
            return [self.decoder_layers // 2]
        return list(self.cll_layers)

    def _check_cll(self) -> None:
        if isinstance(self.cll_layers, str) and self.cll_layers not in ("fcll", "sd"):
            raise ValueError(f"cll_layers={self.cll_layers!r} must be 'fcll', 'sd' or a list of decoder layers.")
        bad = [i for i in self.cll_layer_indexes() if not 0 <= i < self.decoder_layers]
        if bad:
            raise ValueError(f"cll_layers {bad} are not decoder layers (there are {self.decoder_layers}).")
        if not self.languages:
            raise ValueError("CLL needs `languages`: one LSL per non-central language.")
        if self.cll_inner_dim < 1:
            raise ValueError(f"cll_inner_dim={self.cll_inner_dim} must be positive (the authors use 1024).")
        unknown = [c for c in self.cll_frozen_languages if c not in self.languages or c == self.central_language]
        if unknown:
            raise ValueError(f"cll_frozen_languages {unknown} are not non-central languages of {self.languages}.")
        if not 0 <= self.cll_dropout < 1:
            raise ValueError(f"cll_dropout={self.cll_dropout} must be in [0, 1).")

    def card_settings(self) -> str:
        """The method's settings as a Markdown list, for its model card."""
        named = {"fcll": "every decoder layer (FCLL)", "sd": f"decoder layer {self.decoder_layers // 2} (SD)"}
        where = named[self.cll_layers] if isinstance(self.cll_layers, str) else f"decoder layers {self.cll_layers}"
        return "\n".join([
            f"- CLL in: {where}",
            f"- Central language: {self.central_language or 'none (every language has an LSL)'}",
            f"- LSL inner size {self.cll_inner_dim}, dropout {self.cll_dropout}, t_l initialised to {self.cll_scale_init}",
            f"- Encoder residuals removed: {self.encoder_drop_residual or 'none'}",
        ])  # fmt: skip


__all__ = ["CLLConfig"]
