"""XLP in translation: the shared backbone with a language projection at each stack's `embed` point."""

from __future__ import annotations

from torch import nn

from .configuration_xlp_mt import XLPMTConfig
from .modeling_langspec import LangSpecForConditionalGeneration, LangSpecModel
from .module_xlp import LanguageProjection


class XLPMTModel(LangSpecModel):
    """[`LangSpecModel`] whose encoder projects with the source language and decoder with the target language."""

    config_class = XLPMTConfig

    @staticmethod
    def build_insertions(config: XLPMTConfig) -> tuple[dict[str, nn.Module], dict[str, nn.Module]]:
        encoder, decoder = LangSpecModel.build_insertions(config)
        if "embed" in encoder and (config.xlp_encoder or config.xlp_decoder):
            raise ValueError("XLP replaces the language embedding: use language_embedding='none' with XLPMTConfig.")
        if config.xlp_encoder:
            encoder["embed"] = LanguageProjection(config.num_languages, config.d_model, "source")
        if config.xlp_decoder:
            decoder["embed"] = LanguageProjection(config.num_languages, config.d_model, "target")
        return encoder, decoder


class XLPForConditionalGeneration(LangSpecForConditionalGeneration):
    """Multilingual translation with XLP; `forward`/`generate` need `src_lang_ids` and `tgt_lang_ids`."""

    config_class = XLPMTConfig
    model_class = XLPMTModel


__all__ = ["XLPForConditionalGeneration", "XLPMTModel"]
