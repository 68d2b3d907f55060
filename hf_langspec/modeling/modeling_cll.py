"""CLL in translation: the shared backbone with central-language-aware decoder FFNs (Qu & Watanabe 2022)."""

from __future__ import annotations

from torch import nn

from .configuration_cll import CLLConfig
from .modeling_langspec import LangSpecForConditionalGeneration, LangSpecModel
from .module_cll import CentralLanguageAwareLayers


class CLLModel(LangSpecModel):
    """[`LangSpecModel`] with a [`CentralLanguageAwareLayers`] at the decoder's `dec_ffn` point."""

    config_class = CLLConfig

    @staticmethod
    def build_insertions(config: CLLConfig) -> tuple[dict[str, nn.Module], dict[str, nn.Module]]:
        encoder, decoder = LangSpecModel.build_insertions(config)
        decoder["dec_ffn"] = CentralLanguageAwareLayers(config, config.cll_layer_indexes())
        return encoder, decoder


class CLLForConditionalGeneration(LangSpecForConditionalGeneration):
    """Multilingual translation with CLL (FCLL, SD or chosen layers); needs `tgt_lang_ids`."""

    config_class = CLLConfig
    model_class = CLLModel

    def cll(self) -> CentralLanguageAwareLayers:
        return self.model.decoder.insertions["dec_ffn"]


__all__ = ["CLLForConditionalGeneration", "CLLModel"]
