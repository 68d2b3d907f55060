"""LSL in translation: the shared backbone with language-specific layers at the configured positions."""

from __future__ import annotations

import torch
from torch import nn

from .configuration_lsl import LSLConfig
from .modeling_langspec import LangSpecForConditionalGeneration, LangSpecModel
from .module_lsl import (
    LANGUAGE_SPECIFIC_MODULES,
    LanguageSpecificDecoderLayer,
    LanguageSpecificEncoderLayer,
    LanguageSpecificSearchLayer,
)


class LSLModel(LangSpecModel):
    """[`LangSpecModel`] whose layers at `config.lsl_*_layers` are [`LanguageSpecificEncoderLayer`] /
    [`LanguageSpecificDecoderLayer`]s."""

    config_class = LSLConfig
    _no_split_modules = [*LangSpecModel._no_split_modules, "LanguageSpecificEncoderLayer",
                         "LanguageSpecificDecoderLayer"]  # fmt: skip

    @staticmethod
    def build_layer(config: LSLConfig, side: str, index: int) -> nn.Module:
        if config.lsl_search and side == "encoder":
            return LanguageSpecificSearchLayer(config, index)
        language = config.lsl_side(side, index)
        if language is None:
            return LangSpecModel.build_layer(config, side, index)
        layer_class = LanguageSpecificEncoderLayer if side == "encoder" else LanguageSpecificDecoderLayer
        return layer_class(config, index, language)


class LSLForConditionalGeneration(LangSpecForConditionalGeneration):
    """Multilingual translation with language-specific layers; `forward`/`generate` need the ids of the languages
    the layers are indexed by (the tokenizer returns both)."""

    config_class = LSLConfig
    model_class = LSLModel
    _no_split_modules = LSLModel._no_split_modules

    @torch.no_grad()
    def searched_placement(self) -> dict:
        """After training with `lsl_search=True`: each encoder layer's choice weights (shared, source, target) and the
        placement their largest weights give, as the config fields of the LSL model to train next."""
        if not self.config.lsl_search:
            raise ValueError("searched_placement() reads the mix weights of lsl_search=True; this model has none.")
        weights = [layer.choice_weights().tolist() for layer in self.model.encoder.layers]
        chosen = [LanguageSpecificSearchLayer.CHOICES[max(range(3), key=row.__getitem__)] for row in weights]
        return {
            "weights": weights,
            "lsl_encoder_source_layers": [i for i, kind in enumerate(chosen) if kind == "source"],
            "lsl_encoder_target_layers": [i for i, kind in enumerate(chosen) if kind == "target"],
        }

    @torch.no_grad()
    def load_shared_layers(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Dense pre-training's start: every language's layer at an LSL position set to the shared layer of a dense
        model's `state` (a baseline's, or a converted checkpoint's, with the same shape), which the paper trains
        first; returns the rest of `state`, which loads by name. The model then computes what the dense one does."""
        if self.config.lsl_search:
            raise ValueError("The placement search (lsl_search=True) is trained from scratch: its mix of three layers "
                             "cannot start as one dense model. Start the searched placement from it instead.")  # fmt: skip
        rest = dict(state)
        for name, module in self.named_modules():
            if isinstance(module, LANGUAGE_SPECIFIC_MODULES):
                weight, bias = rest.pop(f"{name}.weight", None), rest.pop(f"{name}.bias", None)
                if weight is None or bias is None:
                    raise ValueError(f"The dense model has no {name}.weight / .bias to start this LSL from.")
                module.copy_shared(weight, bias)
        return rest


__all__ = ["LSLForConditionalGeneration", "LSLModel"]
