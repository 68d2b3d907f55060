"""The adapter baselines in translation: the shared backbone with per-language adapters in its stacks."""

from __future__ import annotations

from torch import nn

from .configuration_adapter import AdapterConfig
from .modeling_langspec import LangSpecForConditionalGeneration, LangSpecModel
from .module_adapter import LanguageAdapters

POINTS = {("encoder", "layers"): "ffn_out", ("encoder", "top"): "enc_out",
          ("decoder", "layers"): "ffn_out", ("decoder", "top"): "dec_top"}  # fmt: skip


class AdapterModel(LangSpecModel):
    """[`LangSpecModel`] with [`LanguageAdapters`] after every layer or at the top of the chosen stacks."""

    config_class = AdapterConfig

    @staticmethod
    def build_insertions(config: AdapterConfig) -> tuple[dict[str, nn.Module], dict[str, nn.Module]]:
        encoder, decoder = LangSpecModel.build_insertions(config)
        for side, slots in (("encoder", encoder), ("decoder", decoder)):
            if side in config.adapter_stacks:
                slots[POINTS[side, config.adapter_position]] = LanguageAdapters(config, side)
        return encoder, decoder


class AdapterForConditionalGeneration(LangSpecForConditionalGeneration):
    """Multilingual translation with adapters (Bapna & Firat, Philip et al., LS-MNMT); needs the language ids."""

    config_class = AdapterConfig
    model_class = AdapterModel

    def adapters(self, side: str) -> LanguageAdapters:
        """The adapters of `side` ("encoder" or "decoder")."""
        stack = self.model.encoder if side == "encoder" else self.model.decoder
        point = POINTS[side, self.config.adapter_position]
        if point not in stack.insertions:
            raise ValueError(f"This model has no {side} adapters (adapter_stacks={self.config.adapter_stacks}).")
        return stack.insertions[point]


__all__ = ["AdapterForConditionalGeneration", "AdapterModel"]
