"""Configuration of the XLP encoder family (Luo et al.): XLM-style encoders with language projections."""

from __future__ import annotations

from .configuration_langspec import LangSpecConfig, check_choice

LANGUAGE_ENCODINGS = ("projection", "additive", "none")


class XLPConfig(LangSpecConfig):
    r"""
    An encoder-only multilingual Transformer (XLM; Lample & Conneau 2019) with XLP's language projections.

    Uses the `encoder_*` fields of [`LangSpecConfig`] (the decoder fields are ignored) and:

    Args:
        language_encoding (`str`, *optional*, defaults to `"projection"`):
            `"projection"`: XLP, each sentence's word embeddings projected by its language's P_t;
            `"additive"`: XLM's language embedding added to every position (the paper's baseline);
            `"none"`: no language signal.
        freeze_language_projections (`bool`, *optional*, defaults to `True`):
            Keep the projections fixed when fine-tuning [`XLPForSequenceClassification`], as the paper
            does for XNLI (appendix B.1).
        classifier_dropout (`float`, *optional*, defaults to 0.1): dropout before the classification layer.
        mask_token_id (`int`, *optional*): the `<mask>` id (`train_tokenizer(..., mask_token=True)`).
        num_labels (`int`): classes of [`XLPForSequenceClassification`] (3 for XNLI).
    """

    model_type = "langspec_xlp"

    def __init__(
        self,
        language_encoding: str = "projection",
        freeze_language_projections: bool = True,
        classifier_dropout: float = 0.1,
        mask_token_id: int | None = None,
        is_encoder_decoder: bool = False,
        **kwargs,
    ):
        check_choice("language_encoding", language_encoding, LANGUAGE_ENCODINGS)
        self.language_encoding = language_encoding
        self.freeze_language_projections = freeze_language_projections
        self.classifier_dropout = classifier_dropout
        self.mask_token_id = mask_token_id
        kwargs.setdefault("lang_tag_style", "none")
        super().__init__(is_encoder_decoder=is_encoder_decoder, **kwargs)
        if language_encoding != "none" and not self.languages:
            raise ValueError(f"language_encoding={language_encoding!r} needs `languages`: one entry per language.")
        if language_encoding != "none" and self.language_embedding != "none":
            raise ValueError("Set the language signal with language_encoding; leave language_embedding='none'.")


__all__ = ["XLPConfig"]
