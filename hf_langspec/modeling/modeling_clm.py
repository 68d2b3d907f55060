"""CLM in translation: the shared backbone with cross-lingual mixing after its sublayers (Liu et al. 2023)."""

from __future__ import annotations

from torch import nn

from .configuration_clm import CLMConfig
from .modeling_langspec import LangSpecForConditionalGeneration, LangSpecModel
from .module_clm import SUBLAYERS, CrossLingualMixing


class CLMModel(LangSpecModel):
    """[`LangSpecModel`] with a [`CrossLingualMixing`] per stack at `sublayer_out` (or `ffn_out`: CLM-top)."""

    config_class = CLMConfig

    @staticmethod
    def build_insertions(config: CLMConfig) -> tuple[dict[str, nn.Module], dict[str, nn.Module]]:
        stacks = LangSpecModel.build_insertions(config)
        point = "sublayer_out" if config.clm_sublayers == "all" else "ffn_out"
        for side, insertions in zip(("encoder", "decoder"), stacks, strict=True):
            variant = getattr(config, f"clm_{side}")
            if variant == "none":
                continue
            sublayers = SUBLAYERS[side] if point == "sublayer_out" else ("ffn",)
            key = getattr(config, f"clm_{side}_key")
            insertions[point] = CrossLingualMixing(config, side, variant, key, sublayers)
        return stacks


class CLMForConditionalGeneration(LangSpecForConditionalGeneration):
    """Multilingual translation with CLM; mCLM and LS need `src_lang_ids` / `tgt_lang_ids` (sCLM needs neither)."""

    config_class = CLMConfig
    model_class = CLMModel

    def clm_modules(self) -> dict[str, CrossLingualMixing]:
        """The CLM module of each stack that has one: `{"encoder": ..., "decoder": ...}`."""
        found = {}
        for side in ("encoder", "decoder"):
            for module in getattr(self.model, side).insertions.values():
                if isinstance(module, CrossLingualMixing):
                    found[side] = module
        return found


__all__ = ["CLMForConditionalGeneration", "CLMModel"]
