"""HLT-MT in translation: the shared backbone with the selective language-specific pool at `dec_top`."""

from __future__ import annotations

from torch import nn

from .configuration_hlt import HLTConfig
from .modeling_langspec import LangSpecForConditionalGeneration, LangSpecModel
from .module_slp import SelectiveLanguagePool


class HLTModel(LangSpecModel):
    """[`LangSpecModel`] with a [`SelectiveLanguagePool`] after the last decoder layer."""

    config_class = HLTConfig

    @staticmethod
    def build_insertions(config: HLTConfig) -> tuple[dict[str, nn.Module], dict[str, nn.Module]]:
        encoder, decoder = LangSpecModel.build_insertions(config)
        decoder["dec_top"] = SelectiveLanguagePool(config)
        return encoder, decoder


class HLTForConditionalGeneration(LangSpecForConditionalGeneration):
    """Multilingual translation with HLT-MT's SLP; in stage-1 training the output's `aux_loss` is the disparity
    loss, which the loss includes (the base model adds every insertion module's `aux_loss`)."""

    config_class = HLTConfig
    model_class = HLTModel

    def slp(self) -> SelectiveLanguagePool:
        return self.model.decoder.insertions["dec_top"]

    def fix_assignment(self) -> dict[str, int]:
        """End stage 1: fix each high-resource language's adapter and switch to stage 2."""
        assignment = self.slp().fix_assignment(self.get_input_embeddings())
        self.config.hlt_stage = self.slp().stage = 2
        return assignment

    def end_of_stage(self) -> dict[str, int] | None:
        """Called by the experiment between training stages: stage 1 -> 2 fixes the assignment."""
        return self.fix_assignment() if self.config.hlt_stage == 1 else None


__all__ = ["HLTForConditionalGeneration", "HLTModel"]
