"""HLT-MT in translation: the shared backbone with the selective language-specific pool at `dec_top`."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from transformers.modeling_outputs import Seq2SeqLMOutput

from .configuration_hlt import HLTConfig
from .modeling_langspec import LangSpecForConditionalGeneration, LangSpecModel
from .module_slp import SelectiveLanguagePool


@dataclass
class HLTSeq2SeqLMOutput(Seq2SeqLMOutput):
    """`Seq2SeqLMOutput` plus `aux_loss`, the disparity loss (already included in `loss`)."""

    aux_loss: torch.FloatTensor | None = None


class HLTModel(LangSpecModel):
    """[`LangSpecModel`] with a [`SelectiveLanguagePool`] after the last decoder layer."""

    config_class = HLTConfig

    @staticmethod
    def build_insertions(config: HLTConfig) -> tuple[dict[str, nn.Module], dict[str, nn.Module]]:
        encoder, decoder = LangSpecModel.build_insertions(config)
        decoder["dec_top"] = SelectiveLanguagePool(config)
        return encoder, decoder


class HLTForConditionalGeneration(LangSpecForConditionalGeneration):
    """Multilingual translation with HLT-MT's SLP; the loss includes the disparity loss in stage 1 training."""

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

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        src_lang_ids: torch.LongTensor | None = None,
        tgt_lang_ids: torch.LongTensor | None = None,
        **kwargs,
    ) -> HLTSeq2SeqLMOutput:
        r"""See [`LangSpecForConditionalGeneration.forward`]; `aux_loss` is the disparity loss (stage 1, training)."""
        out = super().forward(
            input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask, labels=labels, src_lang_ids=src_lang_ids,
            tgt_lang_ids=tgt_lang_ids, **kwargs,
        )  # fmt: skip
        aux = self.slp().aux_loss
        loss = out.loss + aux if out.loss is not None and aux is not None else out.loss
        return HLTSeq2SeqLMOutput(**{**out, "loss": loss, "aux_loss": aux})


__all__ = ["HLTForConditionalGeneration", "HLTModel", "HLTSeq2SeqLMOutput"]
