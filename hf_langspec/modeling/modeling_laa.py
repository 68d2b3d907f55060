"""LEE and LAA in translation: the shared backbone with language embeddings and language-aware attention."""

from __future__ import annotations

import contextlib

import torch
from torch import nn

from .configuration_laa import LAAConfig
from .modeling_langspec import LangSpecForConditionalGeneration, LangSpecModel
from .module_laa import LanguageAwareAttention, SharedHook
from .module_lee import LanguageEmbeddingEmbodiment


class LAAModel(LangSpecModel):
    """[`LangSpecModel`] with LEE at `config.lee_points` and LAA at `config.laa_points`."""

    config_class = LAAConfig

    @staticmethod
    def build_insertions(config: LAAConfig) -> tuple[dict[str, nn.Module], dict[str, nn.Module]]:
        encoder, decoder = LangSpecModel.build_insertions(config)
        stacks = {"encoder": encoder, "decoder": decoder}
        for side, insertions in stacks.items():
            points = [p for p in config.lee_points if p.startswith("dec" if side == "decoder" else "enc")]
            if points:
                lee = LanguageEmbeddingEmbodiment(config)
                insertions[points[0]] = lee
                for point in points[1:]:  # one module per stack: its table (if any) is saved once
                    insertions[point] = SharedHook(lee)
            points = [p for p in config.laa_points if p.startswith("dec" if side == "decoder" else "enc")]
            if points:
                laa = LanguageAwareAttention(config, side)
                insertions[points[0]] = laa
                for point in points[1:]:  # the decoder's self- and cross-attention share its matrices
                    insertions[point] = SharedHook(laa)
        return encoder, decoder


class LAAForConditionalGeneration(LangSpecForConditionalGeneration):
    """Multilingual translation with LEE and/or LAA; both read `tgt_lang_ids` (LAA^R draws random languages)."""

    config_class = LAAConfig
    model_class = LAAModel

    def laa_modules(self) -> dict[str, LanguageAwareAttention]:
        found = {}
        for side in ("encoder", "decoder"):
            for module in getattr(self.model, side).insertions.values():
                if isinstance(module, LanguageAwareAttention):
                    found[side] = module
        return found

    def random_language_ids(self, batch_size: int, device: torch.device | str = "cpu") -> torch.Tensor:
        """LAA^R's languages: uniform per example; from `laa_random_seed` at inference (reproducible)."""
        generator = None
        if not self.training:
            generator = torch.Generator().manual_seed(self.config.laa_random_seed)
        return torch.randint(0, self.config.num_languages, (batch_size,), generator=generator).to(device)

    @contextlib.contextmanager
    def _random_languages(self, ids: torch.Tensor | None):
        modules = list(self.laa_modules().values()) if ids is not None else []
        try:
            for module in modules:
                module.override_ids = ids
            yield
        finally:
            for module in modules:
                module.override_ids = None

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        src_lang_ids: torch.LongTensor | None = None,
        tgt_lang_ids: torch.LongTensor | None = None,
        laa_random_ids: torch.LongTensor | None = None,
        **kwargs,
    ):
        r"""
        laa_random_ids (`torch.LongTensor` of shape `(batch_size,)`, *optional*):
            LAA^R only: the random language of each example. Drawn per forward when not given;
            `generate()` draws them once per generation so every decoding step and beam agrees.
        """
        inputs = dict(
            input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask, labels=labels, src_lang_ids=src_lang_ids,
            tgt_lang_ids=tgt_lang_ids, **kwargs,
        )  # fmt: skip
        if not self.config.laa_random:
            return super().forward(**inputs)
        if laa_random_ids is None:
            reference = next(
                t for t in (input_ids, decoder_input_ids, kwargs.get("inputs_embeds"), labels) if t is not None
            )
            laa_random_ids = self.random_language_ids(reference.shape[0], reference.device)
        with self._random_languages(laa_random_ids):
            return super().forward(**inputs)

    def generate(self, inputs: torch.Tensor | None = None, generation_config=None, **kwargs):
        if self.config.laa_random and kwargs.get("laa_random_ids") is None:
            reference = inputs if inputs is not None else kwargs.get("input_ids")
            kwargs["laa_random_ids"] = self.random_language_ids(reference.shape[0], reference.device)
        return super().generate(inputs, generation_config=generation_config, **kwargs)


__all__ = ["LAAForConditionalGeneration", "LAAModel"]
