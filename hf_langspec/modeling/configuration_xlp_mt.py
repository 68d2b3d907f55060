"""Configuration of XLP in translation (Luo et al., Table 2): language projections on the embeddings."""

from __future__ import annotations

from .configuration_langspec import LangSpecConfig


class XLPMTConfig(LangSpecConfig):
    r"""
    [`LangSpecConfig`] plus the cross-lingual language projection (XLP) of Luo et al.

    Args:
        xlp_encoder (`bool`, *optional*, defaults to `True`):
            Project the encoder's token embeddings with the source language's P_s.
        xlp_decoder (`bool`, *optional*, defaults to `True`):
            Project the decoder's input embeddings with the target language's P_t.
        kwargs: every [`LangSpecConfig`] argument; `languages` must be given.

    The paper's baselines (Table 2) are options of [`LangSpecConfig`]: the attaching approach is
    `lang_tag_style="source"`, the additive one `language_embedding="additive"`.
    """

    model_type = "langspec_xlp_mt"

    def __init__(self, xlp_encoder: bool = True, xlp_decoder: bool = True, **kwargs):
        self.xlp_encoder = xlp_encoder
        self.xlp_decoder = xlp_decoder
        super().__init__(**kwargs)
        if (xlp_encoder or xlp_decoder) and not self.languages:
            raise ValueError("XLP needs `languages`: one projection matrix per language.")

    def card_settings(self) -> str:
        """The method's settings as a Markdown list, for its model card."""
        sides = [side for side, on in (("the encoder's (source language)", self.xlp_encoder),
                                       ("the decoder's (target language)", self.xlp_decoder)) if on]  # fmt: skip
        return f"- Projected embeddings: {' and '.join(sides) or 'none'}; one d x d matrix per language"


__all__ = ["XLPMTConfig"]
