"""Language-specific LoRA in translation: the shared backbone with per-language low-rank attention / FFN deltas."""

from __future__ import annotations

from torch import nn

from .configuration_lora import LoRAConfig
from .modeling_langspec import LangSpecForConditionalGeneration, LangSpecModel
from .module_lora import LanguageFFNLoRA, LanguageLoRA


class LoRAModel(LangSpecModel):
    """[`LangSpecModel`] with a [`LanguageLoRA`] (attention) or [`LanguageFFNLoRA`] (FFN) at each of
    `config.lora_points`."""

    config_class = LoRAConfig

    @staticmethod
    def build_insertions(config: LoRAConfig) -> tuple[dict[str, nn.Module], dict[str, nn.Module]]:
        encoder, decoder = LangSpecModel.build_insertions(config)
        for point in config.lora_points:
            side = "encoder" if point.startswith("enc") else "decoder"
            layers = config.encoder_layers if side == "encoder" else config.decoder_layers
            language = config.lora_encoder_language if side == "encoder" else "target"
            if point.endswith("_ffn_proj"):
                inner = config.encoder_ffn_dim if side == "encoder" else config.decoder_ffn_dim
                module = LanguageFFNLoRA(config, layers, language, inner)
            else:
                module = LanguageLoRA(config, layers, language)
            (encoder if side == "encoder" else decoder)[point] = module
        return encoder, decoder


class LoRAForConditionalGeneration(LangSpecForConditionalGeneration):
    """Multilingual translation with language-specific LoRA; `forward`/`generate` need the language ids."""

    config_class = LoRAConfig
    model_class = LoRAModel


__all__ = ["LoRAForConditionalGeneration", "LoRAModel"]
